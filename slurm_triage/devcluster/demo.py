"""`make demo`: the local cluster end to end, told as numbered one-line steps.

1. A 2-node `--requeue` training job under the wrapper, checkpointing, on node1 and node2;
   XID 79 is injected on node2 mid-run. The wrapper ends the dead rank at once, the job is
   attributed `gpu_unavailable` on node2, requeued with node2 excluded, node2 is drained
   with our reason, and the job resumes from its checkpoint on node1 and node3.
1b. On Slurm 25.11, the same fault with `sbatch --requeue=expedite`: our node Epilog fails on
   the bad node, Slurm drains it and restarts the job on the others within a second.
2. A user bug (KeyError) is recorded and not requeued.
3. A node that keeps failing jobs is flagged as a lemon.
4. With `[repair] enabled`: XID 79 on node2 → drained → `nodes reconcile` reboots it (the
   dev cluster's RebootProgram) → burn-in passes → node2 back in service; a fault that
   survives reboots (inject --persistent) fails burn-in until node3 goes to RMA with its
   evidence bundle.
"""

from __future__ import annotations

import json
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


class Story:
    """The demo's output: scenarios, numbered one-line steps, command output indented, and
    a live "waiting for ..." line on a terminal while the cluster works."""

    def __init__(self, scenarios: int) -> None:
        self.scenarios, self.scenario, self.steps = scenarios, 0, 0
        self.live = sys.stdout.isatty()

    def begin(self, title: str) -> None:
        self.scenario, self.steps = self.scenario + 1, 0
        print(f"\nScenario {self.scenario} of {self.scenarios}: {title}", flush=True)

    def step(self, text: str) -> None:
        self.steps += 1
        print(f"  {self.steps:>2}. {text}", flush=True)

    def waiting(self, what: str, since: float) -> None:
        if self.live and time.monotonic() - since >= 2:
            print(f"\r      waiting for {what} ... {time.monotonic() - since:.0f} s ", end="")
            print("\033[K", end="", flush=True)

    def done_waiting(self) -> None:
        if self.live:
            print("\r\033[K", end="", flush=True)


STORY = Story(4)


def _wait(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    since = time.monotonic()

    def probe_and_tell() -> T | None:
        STORY.waiting(what, since)
        return probe()

    try:
        return wait_until(probe_and_tell, timeout_s, what, interval_s=0.2)  # type: ignore[return-value]
    finally:
        STORY.done_waiting()


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
        """Run a command as a step and print its output indented under it."""
        STORY.step("$ " + " ".join(argv))
        out = subprocess.run(
            list(argv), env=self.env, timeout=60, check=False, capture_output=True, text=True
        )
        for line in (out.stdout + out.stderr).rstrip().splitlines():
            print(f"        {line}")

    def finished(self, job_id: int, state: JobState, timeout_s: float = 180) -> JobInfo:
        def reached() -> JobInfo | None:
            job = self.job(job_id)
            return job if job.state is state else None

        return _wait(reached, timeout_s, f"job {job_id} {state.value}")


def scenario_gpu_lost(demo: Demo) -> int:
    """Returns the training job's id."""
    STORY.begin("a GPU falls off the bus in the middle of a 2-node training job")
    # --kill-on-bad-exit: when one rank dies the step ends; real ranks would otherwise sit in
    # a collective until the NCCL timeout.
    train = (
        "srun --kill-on-bad-exit=1 slurm-triage wrap -- python3 train.py --steps 400 "
        "--checkpoint-every 20 --step-seconds 0.05 --checkpoint 'ckpt-rank{rank}.json'"
    )
    job_id = demo.submit("train", train, "-N2 --ntasks-per-node=1 --gres=gpu:8", "--requeue")
    running = demo.finished(job_id, JobState.RUNNING, 60)
    _wait(lambda: (demo.workdir / "ckpt-rank0.json").exists(), 60, "a checkpoint")
    STORY.step(f"job {job_id} (sbatch --requeue) runs on {','.join(running.nodes)}, checkpointing")
    time.sleep(1.0)
    bad = running.nodes[-1]
    STORY.step(f"$ slurm-triage inject --node {bad} xid=79 --gpu 3   # GPU 3 falls off the bus")
    inject(NodeEstate(demo.layout.simulate_root, bad), "xid", 79, gpu=3)
    injected = time.monotonic()

    def requeued_without_bad() -> JobInfo | None:
        job = demo.job(job_id)
        return job if job.restart_count >= 1 and bad in job.excluded_nodes else None

    requeued = _wait(requeued_without_bad, 60, "the requeue with exclusion")
    STORY.step(
        f"fault -> pending again: {time.monotonic() - injected:.1f} s (restart "
        f"{requeued.restart_count}, excluding {','.join(requeued.excluded_nodes)})"
    )

    def running_again() -> JobInfo | None:
        job = demo.job(job_id)
        return job if job.restart_count >= 1 and job.state is JobState.RUNNING else None

    again = _wait(running_again, 120, "the requeued job to run")
    STORY.step(
        f"fault -> running again: {time.monotonic() - injected:.1f} s, on "
        f"{','.join(again.nodes)} (Slurm waits cred_expire before a requeued job may start)"
    )

    # Slurm drained it first ("Epilog error": our Epilog failed on it); the decision then
    # puts its own reason there, a moment after the requeue.
    def relabelled() -> NodeInfo | None:
        node = demo.door.node(bad)
        return node if node.reason.startswith("triage:") else None

    node = _wait(relabelled, 30, "our reason")
    STORY.step(f"{bad} {node.label}: {node.reason}")
    done = demo.finished(job_id, JobState.COMPLETED, 240)
    out = (demo.workdir / f"train-{job_id}.out").read_text().splitlines()
    resumed = [x for x in out if x.startswith("starting at")][-1:]
    STORY.step(
        f"job {job_id} COMPLETED on {','.join(done.nodes)}; the trainer says: "
        f"{resumed[0] if resumed else '(no start line)'}"
    )
    demo.show("slurm-triage", "history", "--job", str(job_id))
    time.sleep(1)
    demo.show(
        "sacct",
        "-j",
        str(job_id),
        "-D",
        "-X",
        "-o",
        "JobID,State,ExitCode,NodeList,AdminComment%90",
    )
    return job_id


def scenario_expedited(demo: Demo) -> int:
    """Slurm 25.11 only: the same fault with `--requeue=expedite`; our node Epilog fails on
    the bad node, Slurm drains it and restarts the job elsewhere at once."""
    STORY.begin("the same fault with sbatch --requeue=expedite (Slurm 25.11)")
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
    STORY.step(f"job {job_id} runs on {','.join(nodes)}")
    STORY.step(f"XID 79 on {bad}; the job's script fails")
    inject(NodeEstate(demo.layout.simulate_root, bad), "xid", 79, gpu=3)
    Path(f"{stamp}.go").touch()
    _wait(lambda: Path(f"{stamp}.again").exists(), 60, "the restart")
    fault = float(Path(f"{stamp}.fault").read_text())
    again = float(Path(f"{stamp}.again").read_text())
    job = demo.finished(job_id, JobState.COMPLETED, 60)
    STORY.step(
        f"fault -> running again: {again - fault:.2f} s, on {','.join(job.nodes)} "
        f"(restart {job.restart_count})"
    )
    STORY.step(f"{bad}: {demo.door.node(bad).reason}")
    return job_id


def scenario_user_bug(demo: Demo) -> int:
    STORY.begin("a user bug (KeyError) is recorded, not requeued")
    bug = "srun slurm-triage wrap -- python3 -c \"cfg = {}; cfg['learning_rate']\""
    job_id = demo.submit("bug", bug, "-N1", "--requeue")
    demo.finished(job_id, JobState.FAILED, 60)
    time.sleep(2)
    job = demo.job(job_id)
    STORY.step(f"job {job_id} (sbatch --requeue): {job.state.value}, restarts {job.restart_count}")
    demo.show("slurm-triage", "history", "--job", str(job_id))
    return job_id


def scenario_lemon(demo: Demo) -> None:
    STORY.begin("a node that keeps failing jobs is flagged as a lemon")
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
        STORY.step(
            f"failure {n}: job {job_id} on node3 with XID {xid}; node3: "
            f"{demo.door.node('node3').reason or 'in service'}"
        )
    demo.show("slurm-triage", "lemons")


def _reconcile_until(
    demo: Demo, node: str, state: str, timeout_s: float
) -> list[dict[str, object]]:
    """`nodes reconcile` as its timer would run it (every 2 s here) until `node` is in
    `state`; each step taken is told as it happens."""
    taken: list[dict[str, object]] = []

    def reached() -> bool:
        out = subprocess.run(
            ["slurm-triage", "nodes", "reconcile", "--json"],
            env=demo.env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if out.returncode not in (0, 3):
            raise TriageError(f"nodes reconcile failed: {out.stderr.strip()[-300:]}")
        row = next(n for n in json.loads(out.stdout)["nodes"] if n["node"] == node)
        if row["action"] != "none":
            taken.append(row)
            STORY.step(f"reconcile: {node} {row['state']} -> {row['action']}: {row['reason']}")
        if row["state"] == state and row["action"] == "none":
            return True
        time.sleep(2)
        return False

    _wait(reached, timeout_s, f"{node} {state}")
    return taken


def scenario_repair(demo: Demo) -> None:
    STORY.begin("a drained node is repaired, burned in and returned; a broken one goes to RMA")
    conf = demo.layout.triage_conf
    before = conf.read_text()
    conf.write_text(before + "\n[repair]\nenabled = true\nrma_after_cycles = 2\n"
                    "max_share_in_repair = 0.7\n")  # fmt: skip
    healthcheck = str(demo.layout.hooks / "healthcheck")
    try:
        inject(NodeEstate(demo.layout.simulate_root, "node2"), "xid", 79, gpu=3)
        subprocess.run([healthcheck], env=demo.env | {"SLURMD_NODENAME": "node2"}, timeout=120)
        STORY.step(f"XID 79 on node2; its health check drains it: {demo.door.node('node2').reason}")
        _reconcile_until(demo, "node2", "healthy", 180)
        STORY.step(f"node2 {demo.door.node('node2').label}: back in service")
        estate = NodeEstate(demo.layout.simulate_root, "node3")
        inject(estate, "xid", 79, gpu=1, persistent=True)
        subprocess.run([healthcheck], env=demo.env | {"SLURMD_NODENAME": "node3"}, timeout=120)
        STORY.step("XID 79 on node3 that every reboot brings back (inject --persistent)")
        rows = _reconcile_until(demo, "node3", "rma", 300)
        bundle = next((str(r["bundle"]) for r in rows if r.get("bundle")), "")
        STORY.step(f"node3: {demo.door.node('node3').reason}; evidence bundle {bundle}")
        demo.show("slurm-triage", "nodes")
    finally:
        conf.write_text(before)
        inject(NodeEstate(demo.layout.simulate_root, "node3"), "clear")
        for res in demo.door.reservations():
            if res.name.startswith("triage_burnin_"):
                subprocess.run(["scontrol", "delete", f"ReservationName={res.name}"],
                               env=demo.env, timeout=30, check=False)  # fmt: skip


def main() -> int:
    setup_logging(LoggingConfig(level="warning"))
    layout = cluster.default_layout()  # $SLURM_TRIAGE_DEVCLUSTER_SLURM (make demo SLURM=25.11)
    print(f"slurm-triage demo: a local Slurm {layout.slurm} cluster, 3 nodes of 8 simulated GPUs")
    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"  setup: {line} ({time.monotonic() - started:.0f} s)", flush=True)

    demo = Demo(cluster.up(layout, progress=progress))
    print(
        f"  setup: up in {time.monotonic() - started:.0f} s: Slurm {demo.door.slurm_version()}, "
        f"door backend {demo.door.name}; jobs run as {JOB_USER}, slurmctld as slurm"
    )
    STORY.scenarios = 5 if demo.layout.slurm != "22.05" else 4
    demo.reset()
    try:
        scenario_gpu_lost(demo)
        demo.reset()
        if demo.layout.slurm != "22.05":
            scenario_expedited(demo)
            demo.reset()
        scenario_user_bug(demo)
        scenario_lemon(demo)
        demo.reset()
        scenario_repair(demo)
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
