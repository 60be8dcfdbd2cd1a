"""`make demo`: the local cluster end to end, in three scenarios.

1. A 2-node `--requeue` training job under the wrapper, checkpointing, on node1 and node2;
   XID 79 is injected on node2 mid-run. The wrapper ends the dead rank at once, the job is
   attributed `gpu_unavailable` on node2, requeued with node2 excluded, node2 is drained
   with our reason, and the job resumes from its checkpoint on node1 and node3.
1b. On Slurm 25.11, the same fault with `sbatch --requeue=expedite`: our node Epilog fails on
   the bad node, Slurm drains it and restarts the job on the others within a second.
2. A user bug (KeyError) is recorded and not requeued.
3. A node that keeps failing jobs is flagged as a lemon.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from slurm_triage.actuator import commands
from slurm_triage.config import LoggingConfig
from slurm_triage.devcluster import cluster
from slurm_triage.devcluster.config_files import JOB_USER, NODE_NAMES, ClusterLayout
from slurm_triage.devcluster.waiting import wait_until
from slurm_triage.errors import TriageError
from slurm_triage.logs import setup_logging
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.slurm import JobInfo, JobState, NodeInfo, SlurmDoor, open_door

T = TypeVar("T")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _wait(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    return wait_until(probe, timeout_s, what, interval_s=0.2)  # type: ignore[return-value]


class Demo:
    def __init__(self, layout: ClusterLayout) -> None:
        self.layout = layout
        self.env = cluster.client_env(layout)
        self.door: SlurmDoor = open_door(env=self.env, timeout_s=20)
        # Jobs run as the unprivileged job user, as on a real cluster: the directory is theirs.
        self.workdir = Path(tempfile.mkdtemp(prefix="triage-demo-", dir="/tmp"))
        shutil.copy(EXAMPLES / "train.py", self.workdir / "train.py")
        shutil.chown(self.workdir, JOB_USER, JOB_USER)
        self.workdir.chmod(0o755)

    def reset(self) -> None:
        for node in NODE_NAMES:
            inject(NodeEstate(self.layout.simulate_root, node), "clear")
            commands.reset_node(self.door, node)

    def submit(self, name: str, body: str, *options: str) -> int:
        script = self.workdir / f"{name}.sbatch"
        script.write_text(
            "#!/bin/bash\n"
            + "".join(f"#SBATCH {o}\n" for o in options)
            + f"#SBATCH -o {name}-%j.out --open-mode=append\n"
            + body
            + "\n"
        )
        out = subprocess.run(
            ["runuser", "-u", JOB_USER, "--", "sbatch", "--parsable", str(script)],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if out.returncode != 0:
            raise TriageError(f"sbatch failed: {out.stderr.strip()}")
        return int(out.stdout.strip().split(";")[0])

    def job(self, job_id: int) -> JobInfo:
        return self.door.job(job_id)

    def show(self, *argv: str) -> None:
        subprocess.run(list(argv), env=self.env, timeout=60, check=False)

    def finished(self, job_id: int, state: JobState, timeout_s: float = 180) -> JobInfo:
        def reached() -> JobInfo | None:
            job = self.job(job_id)
            return job if job.state is state else None

        return _wait(reached, timeout_s, f"job {job_id} {state.value}")


def scenario_gpu_lost(demo: Demo) -> None:
    print("\n== 1. a GPU falls off the bus on node2 in the middle of a 2-node training job")
    # --kill-on-bad-exit: when one rank dies the step ends; real ranks would otherwise sit in
    # a collective until the NCCL timeout.
    train = (
        "srun --kill-on-bad-exit=1 slurm-triage wrap -- python3 train.py --steps 400 "
        "--checkpoint-every 20 --step-seconds 0.05 --checkpoint 'ckpt-rank{rank}.json'"
    )
    job_id = demo.submit("train", train, "-N2 --ntasks-per-node=1 --gres=gpu:8", "--requeue")
    running = demo.finished(job_id, JobState.RUNNING, 60)
    print(f"   job {job_id} running on {','.join(running.nodes)}; waiting for a checkpoint")
    _wait(lambda: (demo.workdir / "ckpt-rank0.json").exists(), 60, "a checkpoint")
    time.sleep(1.0)
    bad = running.nodes[-1]
    print(f"   $ slurm-triage inject --node {bad} xid=79 --gpu 3   # the GPU falls off the bus")
    inject(NodeEstate(demo.layout.simulate_root, bad), "xid", 79, gpu=3)
    injected = time.monotonic()

    def requeued_without_bad() -> JobInfo | None:
        job = demo.job(job_id)
        return job if job.restart_count >= 1 and bad in job.excluded_nodes else None

    requeued = _wait(requeued_without_bad, 60, "the requeue with exclusion")
    pending_s = time.monotonic() - injected
    print(
        f"   fault -> pending again: {pending_s:.1f} s (restart {requeued.restart_count}, "
        f"excluding {','.join(requeued.excluded_nodes)}); Slurm holds it back for cred_expire"
    )

    def running_again() -> JobInfo | None:
        job = demo.job(job_id)
        return job if job.restart_count >= 1 and job.state is JobState.RUNNING else None

    again = _wait(running_again, 120, "the requeued job to run")
    print(
        f"   fault -> running again on {','.join(again.nodes)}: {time.monotonic() - injected:.1f} s"
    )

    # Slurm drained it first ("Epilog error": our Epilog failed on it); the decision then
    # puts its own reason there, a moment after the requeue.
    def relabelled() -> NodeInfo | None:
        node = demo.door.node(bad)
        return node if node.reason.startswith("triage:") else None

    node = _wait(relabelled, 30, "our reason")
    print(f"   {bad}: {node.label}, reason: {node.reason}")
    done = demo.finished(job_id, JobState.COMPLETED, 240)
    print(f"   job {job_id} COMPLETED on {','.join(done.nodes)}; the trainer's log:")
    out = (demo.workdir / f"train-{job_id}.out").read_text().splitlines()
    for line in [x for x in out if x.startswith("starting at") or "slurm-triage" in x][:6] + out[
        -2:
    ]:
        print(f"     | {line}")
    print(f"   $ slurm-triage history --job {job_id}")
    demo.show("slurm-triage", "history", "--job", str(job_id))
    time.sleep(1)
    print(f"   $ sacct -j {job_id} -D -X -o JobID,State,ExitCode,NodeList,AdminComment%100")
    demo.show(
        "sacct",
        "-j",
        str(job_id),
        "-D",
        "-X",
        "-o",
        "JobID,State,ExitCode,NodeList,AdminComment%100",
    )


def scenario_expedited(demo: Demo) -> None:
    """Slurm 25.11 only: the same fault with `--requeue=expedite`; our node Epilog fails on
    the bad node, Slurm drains it and restarts the job elsewhere at once."""
    print("\n== 1b. the same fault with sbatch --requeue=expedite (Slurm 25.11)")
    stamp = demo.workdir / "expedite"
    body = (
        f'if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then date +%s.%N > {stamp}.again; '
        f"echo running again on $SLURM_JOB_NODELIST; exit 0; fi; touch {stamp}.started; "
        f"while [ ! -e {stamp}.go ]; do sleep 0.005; done; date +%s.%N > {stamp}.fault; exit 1"
    )
    # No -w: a required node that fails leaves the job waiting for it (ReqNodeNotAvail).
    job_id = demo.submit("expedite", body, "-N2", "--requeue=expedite")
    _wait(lambda: Path(f"{stamp}.started").exists(), 60, "the job to start")
    nodes = demo.job(job_id).nodes
    bad = nodes[-1]
    print(
        f"   job {job_id} running on {','.join(nodes)}; injecting XID 79 on {bad}, the script fails"
    )
    inject(NodeEstate(demo.layout.simulate_root, bad), "xid", 79, gpu=3)
    Path(f"{stamp}.go").touch()
    _wait(lambda: Path(f"{stamp}.again").exists(), 60, "the restart")
    fault = float(Path(f"{stamp}.fault").read_text())
    again = float(Path(f"{stamp}.again").read_text())
    job = demo.finished(job_id, JobState.COMPLETED, 60)
    print(
        f"   fault -> running again on {','.join(job.nodes)}: {again - fault:.2f} s "
        f"(restart {job.restart_count}); {bad}: {demo.door.node(bad).reason}"
    )


def scenario_user_bug(demo: Demo) -> None:
    print("\n== 2. a user bug (KeyError) is recorded, not requeued")
    bug = "srun slurm-triage wrap -- python3 -c \"cfg = {}; cfg['learning_rate']\""
    job_id = demo.submit("bug", bug, "-N1", "--requeue")
    demo.finished(job_id, JobState.FAILED, 60)
    time.sleep(2)
    job = demo.job(job_id)
    print(f"   job {job_id}: {job.state.value}, restarts {job.restart_count}")
    demo.show("slurm-triage", "history", "--job", str(job_id))


def scenario_lemon(demo: Demo) -> None:
    print("\n== 3. a node that keeps failing jobs is flagged as a lemon")
    estate = NodeEstate(demo.layout.simulate_root, "node3")
    for n, xid in enumerate((48, 94, 74, 48), 1):
        demo.reset()
        job_id = demo.submit(
            "lemon", "touch started-$SLURM_JOB_ID; sleep 2; exit 1", "-N1 -w node3", "--no-requeue"
        )
        started = demo.workdir / f"started-{job_id}"
        _wait(started.exists, 60, "job start")
        inject(estate, "xid", xid, gpu=n % 8)
        demo.finished(job_id, JobState.FAILED, 60)
        time.sleep(1.5)
        print(
            f"   failure {n}: job {job_id} on node3 with XID {xid}; node3: "
            f"{demo.door.node('node3').reason}"
        )
    print("   $ slurm-triage lemons")
    demo.show("slurm-triage", "lemons")


def main() -> int:
    setup_logging(LoggingConfig(level="warning"))
    layout = cluster.default_layout()  # $SLURM_TRIAGE_DEVCLUSTER_SLURM (make demo SLURM=25.11)
    print(f"== bringing the dev cluster up on Slurm {layout.slurm} (installs it on first use)")
    demo = Demo(cluster.up(layout))
    print(
        f"== Slurm {demo.door.slurm_version()}, door backend {demo.door.name}; jobs run as "
        f"{JOB_USER}, slurmctld as slurm"
    )
    demo.reset()
    try:
        scenario_gpu_lost(demo)
        demo.reset()
        if demo.layout.slurm != "22.05":
            scenario_expedited(demo)
            demo.reset()
        scenario_user_bug(demo)
        scenario_lemon(demo)
    finally:
        demo.reset()
        shutil.rmtree(demo.workdir, ignore_errors=True)
    print('\nThe cluster stays up. Use it:  eval "$(slurm-triage devcluster env)"')
    print("Stop it:  slurm-triage devcluster down")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except TriageError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        sys.exit(2)
