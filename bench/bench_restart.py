"""Fault -> pending and fault -> running again, per Slurm release and requeue path.

A 2-node `--requeue` job runs as the unprivileged job user; XID 79 is injected on its
second node and the batch script exits 1 at once, noting the time ("the fault"). We
poll `squeue` every 10 ms for the first moment it is no longer RUNNING/COMPLETING
(pending again: requeued, or requeued held) and the restarted script notes when it starts
("running again", Prolog included). Side by side in one run:

- 22.05, our decision requeues (EpilogSlurmctld: `scontrol requeue` + ExcNodeList);
- 25.11, the same path;
- 25.11 with `sbatch --requeue=expedite` (SlurmctldParameters=enable_expedited_requeue):
  our node Epilog fails on the bad node (root evidence of XID 79), Slurm drains it and
  restarts the job at once on the others (docs/expedited-requeue.md).

Needs root; starts each release's dev cluster (25.11 only where its bundle is present) and
leaves them up.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from slurm_triage.devcluster.waiting import wait_until

TRIALS = 3
POLL_S = 0.01
NODES = ("node1", "node2", "node3")


def main() -> None:
    if os.geteuid() != 0:
        print("skipped: needs root to run the dev clusters")
        return
    from slurm_triage.devcluster import cluster

    configurations = [("22.05", "requeue")]
    if cluster.default_layout("25.11").slurm_prefix.is_dir() or any(  # type: ignore[union-attr]
        cluster.bundle_dir().glob("slurm-25.11*.tar.zst")
    ):
        configurations += [("25.11", "requeue"), ("25.11", "expedite")]
    else:
        print(f"25.11 skipped: no /opt/slurm-25.11 and no bundle in {cluster.bundle_dir()}")
    rows = []
    for release, path in configurations:
        pending, running = _measure(release, path)
        rows.append((release, path, pending, running))
    print(f"{'Slurm':<7}{'path':<10}{'fault->pending (s)':<26}{'fault->running (s)':<26}")
    for release, path, pending, running in rows:
        print(f"{release:<7}{path:<10}{_figures(pending):<26}{_figures(running):<26}")
    base = rows[0][3]
    for release, path, _, running in rows[1:]:
        if base and running:
            ratio = statistics.median(base) / statistics.median(running)
            print(f"fault->running, 22.05 requeue / {release} {path}: {ratio:.1f}x")


def _figures(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def _measure(release: str, path: str) -> tuple[list[float], list[float]]:
    from slurm_triage.devcluster import cluster
    from slurm_triage.devcluster.config_files import JOB_USER
    from slurm_triage.simulate.estate import NodeEstate, inject
    from slurm_triage.slurm import open_door

    layout = cluster.up(cluster.default_layout(release), timeout_s=90)
    env = cluster.client_env(layout)
    door = open_door(env=env, timeout_s=20)
    pending: list[float] = []
    running: list[float] = []
    for trial in range(TRIALS):
        for node in NODES:
            inject(NodeEstate(layout.simulate_root, node), "clear")
            if door.node(node).drained:
                door.resume(node)
        stamp = layout.jobs_dir / f"bench-restart-{os.getpid()}-{path}-{trial}"
        script = (
            f'if [ "${{SLURM_RESTART_COUNT:-0}}" -ge 1 ]; then date +%s.%N > {stamp}.again; '
            "exit 0; fi; "
            f"touch {stamp}.started; while [ ! -e {stamp}.go ]; do sleep 0.005; done; "
            f"date +%s.%N > {stamp}.fault; exit 1"
        )
        requeue = ["--requeue=expedite"] if path == "expedite" else ["--requeue"]
        submitted = subprocess.run(
            ["runuser", "-u", JOB_USER, "--", "sbatch", "--parsable", *requeue, "-N2",
             f"--chdir={layout.jobs_dir}", "-o", "/dev/null", "--wrap", script],
            env=env, check=True, capture_output=True, text=True,
        )  # fmt: skip
        job = submitted.stdout.split(";")[0].strip()
        _wait(lambda s=stamp: Path(f"{s}.started").exists(), 60)
        # The job's second node (no -w: a failed required node would keep it waiting).
        bad = door.job(int(job)).nodes[-1]
        inject(NodeEstate(layout.simulate_root, bad), "xid", 79, gpu=3)
        Path(f"{stamp}.go").touch()
        seen = _first_pending(env, job)
        _wait(lambda s=stamp: Path(f"{s}.again").exists(), 120)
        fault = float(Path(f"{stamp}.fault").read_text())
        pending.append(seen - fault)
        running.append(float(Path(f"{stamp}.again").read_text()) - fault)
        subprocess.run(["scancel", job], env=env, check=False)
        for suffix in (".started", ".go", ".fault", ".again"):
            Path(f"{stamp}{suffix}").unlink(missing_ok=True)
    for node in NODES:
        inject(NodeEstate(layout.simulate_root, node), "clear")
        if door.node(node).drained:
            door.resume(node)
    return pending, running


def _first_pending(env: dict[str, str], job: str) -> float:
    """When squeue first shows the job pending again (requeued, or requeued held)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        state = subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True
        ).stdout.strip()
        if state.startswith(("PENDING", "REQUEUE", "CONFIGURING")) or (
            state == "RUNNING" and _restarted(env, job)
        ):
            return time.time()
        time.sleep(POLL_S)
    raise TimeoutError(f"job {job} never pending again")


def _restarted(env: dict[str, str], job: str) -> bool:
    out = subprocess.run(
        ["scontrol", "show", "job", job], env=env, capture_output=True, text=True
    ).stdout
    return " Restarts=0 " not in out


def _wait(done: Callable[[], object], timeout_s: float) -> None:
    wait_until(done, timeout_s, "the bench's job", interval_s=POLL_S, error=TimeoutError)


if __name__ == "__main__":
    main()
