"""`make demo`: bring the dev cluster up and run one job under the wrapper, end to end.

Shows the path a researcher's job takes: sbatch -> Prolog (slurm-triage-prolog) ->
`srun slurm-triage wrap -- python ...` on two nodes -> Epilog / EpilogSlurmctld -> the
outcome in Slurm's accounting (sacct).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slurm_triage.config import LoggingConfig
from slurm_triage.devcluster import cluster
from slurm_triage.errors import TriageError
from slurm_triage.logs import setup_logging
from slurm_triage.slurm import JobState, open_door

TRAINER = """\
import os, socket, time
rank = os.environ.get("SLURM_PROCID", "?")
print(f"rank {rank} on {os.environ.get('SLURMD_NODENAME')} "
      f"GPUs {os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
time.sleep(1)
print(f"rank {rank} done", flush=True)
"""


def main() -> int:
    setup_logging(LoggingConfig(level="warning"))
    print("== bringing the dev cluster up (installs Slurm from apt on first use)")
    layout = cluster.up()
    env = cluster.client_env(layout)
    workdir = Path(tempfile.mkdtemp(prefix="triage-demo-", dir="/tmp"))
    (workdir / "train.py").write_text(TRAINER)
    script = workdir / "job.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH -N2 --ntasks-per-node=1 --gres=gpu:8 --requeue\n"
        "#SBATCH --signal=B:USR1@60 -o slurm-%j.out\n"
        f"srun slurm-triage wrap -- {sys.executable} train.py\n"
    )
    submitted = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    if submitted.returncode != 0:
        raise TriageError(f"sbatch failed: {submitted.stderr.strip()}")
    job_id = int(submitted.stdout.strip().split(";")[0])
    print(f"== submitted job {job_id} (2 nodes, wrapped trainer); waiting for it to finish")
    door = open_door(env=env)
    deadline = time.monotonic() + 120
    while (job := door.job(job_id)).state is not JobState.COMPLETED:
        if job.state.finished or time.monotonic() > deadline:
            raise TriageError(f"job {job_id} ended {job.state.value}, expected COMPLETED")
        time.sleep(0.5)
    print(f"== job {job_id} COMPLETED on {','.join(job.nodes)}; its output:")
    print((workdir / f"slurm-{job_id}.out").read_text(), end="")
    print("== sacct:")
    time.sleep(1)  # slurmctld sends the final record to slurmdbd asynchronously
    subprocess.run(
        ["sacct", "-j", str(job_id), "-o", "JobID,JobName,State,ExitCode,NodeList"],
        env=env,
        timeout=30,
        check=False,
    )
    print(f"\nThe cluster stays up. Use it:  export SLURM_CONF={layout.slurm_conf}")
    print("Stop it:  slurm-triage devcluster down")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TriageError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        sys.exit(2)
