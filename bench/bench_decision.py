"""Requeue latency on the local cluster: from the failed job's last instruction to the job
pending again with the bad node excluded, and the decision's own CPU time.

Needs root (it starts the dev cluster if it is not up). Each run: a 1-node --requeue job on
node1 notes the time and exits 1 right after XID 79 is injected on node1; we poll the door
every 20 ms until the job is PENDING with node1 in ExcNodeList. The floor is Slurm's own
path: job end -> Epilog on the node -> EpilogSlurmctld starting.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time

RUNS = 5


def main() -> None:
    if os.geteuid() != 0:
        print("skipped: needs root to run the dev cluster")
        return
    from slurm_triage.devcluster import cluster
    from slurm_triage.simulate.estate import NodeEstate, inject
    from slurm_triage.slurm import JobState, open_door

    layout = cluster.up()
    env = cluster.client_env(layout)
    door = open_door(env=env, timeout_s=20)
    latencies, cpu = [], []
    for run in range(RUNS):
        for node in ("node1", "node2", "node3"):
            inject(NodeEstate(layout.simulate_root, node), "clear")
            if door.node(node).drained:
                door.resume(node)
        stamp = f"/tmp/triage-bench-{os.getpid()}-{run}"
        script = (
            f'if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then exit 0; fi; '
            f"while [ ! -e {stamp}.go ]; do sleep 0.01; done; "
            f"date +%s.%N > {stamp}.end; exit 1"
        )
        job = int(
            subprocess.run(
                [
                    "sbatch",
                    "--parsable",
                    "--requeue",
                    "-N1",
                    "-w",
                    "node1",
                    "--chdir=/tmp",
                    "--wrap",
                    script,
                ],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split(";")[0]
        )
        while door.job(job).state is not JobState.RUNNING:
            time.sleep(0.05)
        time.sleep(0.5)  # the Prolog has finished before the fault appears
        inject(NodeEstate(layout.simulate_root, "node1"), "xid", 79, gpu=3)
        open(f"{stamp}.go", "w").close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            j = door.job(job)
            if j.state is JobState.PENDING and "node1" in j.excluded_nodes:
                break
            time.sleep(0.02)
        seen = time.time()
        with open(f"{stamp}.end") as fh:
            ended = float(fh.read())
        latencies.append(seen - ended)
        subprocess.run(["scancel", str(job)], env=env, check=False)
        for suffix in (".go", ".end"):
            os.unlink(stamp + suffix)
    for line in (layout.log / "slurm-triage.log").read_text().splitlines():
        if '"decision_made"' in line:
            cpu.append(json.loads(line).get("cpu_s", 0.0))
    cpu = cpu[-RUNS:]
    print(
        f"job end -> pending with exclusion set, median of {RUNS}: "
        f"{statistics.median(latencies):.2f} s (min {min(latencies):.2f}, "
        f"max {max(latencies):.2f}); target <= 5 s"
    )
    if cpu:
        print(
            f"decision process CPU time (interpreter start included), median: "
            f"{statistics.median(cpu) * 1000:.0f} ms"
        )
    for node in ("node1", "node2", "node3"):
        inject(NodeEstate(layout.simulate_root, node), "clear")
        if door.node(node).drained:
            door.resume(node)


if __name__ == "__main__":
    main()
