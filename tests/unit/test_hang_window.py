"""Rule 5 and a hung collective: root's evidence counts from 10 minutes before the collective a
watchdog timed out began (attribution/hang.py), read from torch's own lines."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slurm_triage.attribution import Attribution, attribute, job_window, scan_lines
from slurm_triage.attribution.engine import ROOT_REACH_S, root_window
from slurm_triage.attribution.hang import MAX_HANG_S, WATCHDOG_SIGNATURE, hang_began
from slurm_triage.config import Config, DecisionConfig, HealthConfig, PathsConfig, PolicyConfig
from slurm_triage.evidence import (
    KernelEvent,
    KernelEventKind,
    LogHit,
    ProcessExit,
    SlurmState,
    Source,
    Stall,
)
from slurm_triage.evidence.store import EARLIER_STEP, read_root_records
from slurm_triage.job_state import JobState
from slurm_triage.prolog_epilog.decide import decide_from_env
from slurm_triage.prolog_epilog.epilog import MAX_EARLIER_FACTS, earlier_record, run_epilog
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.taxonomy import Cause
from slurm_triage.testing import FakeDoor, job_info, node_infos

END = datetime(2024, 11, 22, 3, 27, 30, tzinfo=UTC).timestamp()
FIRED = END - 20  # 03:27:10, the watchdog lines' stamp

# PyTorch 2.4+ (glog stamp, `[rankN]:` prefix), as LlamaFactory#7396 and BasicSR#737 show it.
NEW = (
    "[rank0]:[E1122 03:27:10.408271257 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=8241, OpType=ALLREDUCE, NumelIn=466119168, "
    "NumelOut=466119168, Timeout(ms)=600000) ran for 600043 milliseconds before timing out."
)
# PyTorch 1.x-2.1 (no stamp, the 30-minute default), as OFA#271 shows it.
OLD = (
    "[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
    "WorkNCCL(SeqNum=469508, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1802212 "
    "milliseconds before timing out."
)
# The exception the watchdog thread ends the process with, as sglang#1693 shows it.
WHAT = (
    "  what():  [PG 3 Rank 5] Process group watchdog thread terminated with exception: [Rank 5] "
    "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, "
    "NumelIn=19008, NumelOut=152064, Timeout(ms)=600000) ran for 600020 milliseconds before "
    "timing out."
)


def watchdog(line: str, node: str = "node290") -> LogHit:
    (found,) = [
        f
        for f in scan_lines([line], node=node, year=2024, tz=UTC)
        if isinstance(f, LogHit) and f.signature == WATCHDOG_SIGNATURE
    ]
    return found


def xid(node: str, when: float, number: int = 74, source: Source = Source.ROOT) -> KernelEvent:
    return KernelEvent(
        node=node,
        time=when,
        source=source,
        event=KernelEventKind.XID,
        xid=number,
        pci_bus_id="0000:5d:00",
        detail=f"NVRM: Xid (PCI:0000:5d:00): {number}, pid=23471, name=python3, NVLink: fatal",
    )


FAILED = [
    SlurmState(time=END, source=Source.ROOT, state=JobState.FAILED),
    ProcessExit(time=END, source=Source.ROOT, exit_code=134),
]


@pytest.mark.parametrize(
    ("line", "fired", "ran_s"),
    [(NEW, FIRED, 600.043), (OLD, END, 1802.212), (WHAT, END, 600.020)],
    ids=["torch-2.4-stamped", "torch-1.x-unstamped", "what-unstamped"],
)
def test_each_watchdog_form_says_when_its_collective_began(line, fired, ran_s):
    """The line's own stamp, else the job's end, less how long the collective ran."""
    assert hang_began([watchdog(line)], END) == pytest.approx(fired - ran_s)


def test_a_stuck_watchdogs_claim_reaches_back_one_hour_at_most():
    """pytorch#118369: a watchdog stuck itself printed 'ran for 25624887 milliseconds'."""
    line = NEW.replace("600043", "25624887")
    assert hang_began([watchdog(line)], END) == pytest.approx(FIRED - MAX_HANG_S)


def test_the_earliest_collective_counts_and_lines_without_a_duration_say_nothing():
    late = watchdog(NEW.replace("600043", "60000"), node="node291")
    bare = LogHit(
        node="node292",
        time=FIRED,
        signature=WATCHDOG_SIGNATURE,
        cause=Cause.NCCL_TIMEOUT,
        excerpt="Watchdog caught collective operation timeout",
    )
    assert hang_began([late, watchdog(NEW), bare], END) == pytest.approx(FIRED - 600.043)
    assert hang_began([bare], END) is None
    assert root_window(job_window(END), [bare]) == job_window(END)


def test_root_evidence_before_the_window_counts_from_10_minutes_before_the_hang():
    """XID 74 635 s before the end: outside rule 5's 10 minutes, but 15 s before the
    collective began; node291 is blamed, not an NCCL timeout everywhere."""
    facts = [*FAILED, watchdog(NEW), watchdog(NEW, node="node291"), xid("node291", END - 635)]
    found = attribute(facts, window=job_window(END))
    assert (found.cause, found.nodes, found.root_backed) == (Cause.GPU_NVLINK, ("node291",), True)
    # Without the watchdog's duration the same XID is out of the window.
    silent = watchdog(NEW.replace(" ran for 600043 milliseconds", ""))
    facts = [*FAILED, silent, xid("node291", END - 635)]
    assert attribute(facts, window=job_window(END)).cause is Cause.NCCL_TIMEOUT


def test_the_wrappers_stall_says_when_the_rank_fell_silent():
    """`wrap --hang-timeout 1800` ended a rank silent for 1800 s: node291's XID 74 of that
    moment, 35 minutes before the end, explains the hang."""
    stall = Stall(node="node291", time=END - 5, source=Source.USER, idle_s=1800.0)
    assert hang_began([stall], END) == pytest.approx(END - 1805)
    facts = [*FAILED, stall, xid("node291", END - 1810)]
    found = attribute(facts, window=job_window(END))
    assert (found.cause, found.nodes) == (Cause.GPU_NVLINK, ("node291",))
    assert attribute([*FAILED, stall], window=job_window(END)).cause is Cause.HANG
    huge = replace(stall, idle_s=1e12)
    assert hang_began([huge], END) == pytest.approx(END - 5 - MAX_HANG_S)


def test_root_evidence_older_than_10_minutes_before_the_hang_does_not_count():
    began = FIRED - 600.043
    facts = [*FAILED, watchdog(NEW), xid("node291", began - 601)]
    assert attribute(facts, window=job_window(END)).cause is Cause.NCCL_TIMEOUT
    facts = [*FAILED, watchdog(NEW), xid("node291", began - 599)]
    assert attribute(facts, window=job_window(END)).cause is Cause.GPU_NVLINK


def test_only_roots_evidence_is_reached_back_to():
    """The program's own lines of the hung minutes are what it survived: a user record's
    XID there counts no more than before."""
    facts = [*FAILED, watchdog(NEW), xid("node291", END - 635, source=Source.USER)]
    assert attribute(facts, window=job_window(END)).cause is Cause.NCCL_TIMEOUT


def test_a_watchdog_line_outside_the_window_reaches_nothing():
    """A line stamped an hour before the end (a printed or replayed one) is out of the window
    itself: it widens nothing."""
    early = watchdog(NEW.replace("E1122 03:27:10", "E1122 02:27:10"))
    facts = [*FAILED, watchdog(NEW.replace("600043", "1000")), early, xid("node291", END - 635)]
    assert attribute(facts, window=job_window(END)).cause is Cause.NCCL_TIMEOUT


# -- the Epilogs keep the run's earlier kernel events; the decision reaches them ----------

JOB = 7301
XID74 = "NVRM: Xid (PCI:0000:5d:00): 74, pid=23471, name=python3, NVLink: fatal error detected"


def _stamp(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(when))


def _glog(when: float) -> str:
    """glog's month-day stamp, in the local zone as torch prints it."""
    return time.strftime("%m%d %H:%M:%S", time.localtime(when)) + ".408271257"


def _config(tmp_path: Path, xid_at: float, node1_kernel: str = "") -> Config:
    evidence = tmp_path / "evidence"
    (evidence / "_root").mkdir(parents=True)
    os.chmod(evidence, 0o1777)
    (tmp_path / "node1.kern.log").write_text(node1_kernel)
    (tmp_path / "node2.kern.log").write_text(f"{_stamp(xid_at)} node2 kernel: {XID74}\n")
    return Config(
        paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path / "state")),
        health=HealthConfig(
            expected_gpus=0, kernel_log=str(tmp_path / "{node}.kern.log"), mounts=()
        ),
        decision=replace(
            DecisionConfig(), journal=str(tmp_path / "journal.sqlite"), wait_for_nodes_s=0
        ),
        policy=PolicyConfig(),
    )


def _end_job(
    tmp_path: Path, config: Config, started: float, ran_ms: int | None, node_start: bool = True
) -> FakeDoor:
    now = time.time()
    said = f" ran for {ran_ms} milliseconds before timing out." if ran_ms else "."
    out = tmp_path / "slurm-7301.out"
    out.write_text(
        "".join(
            f"[rank{r}]:[E{_glog(now - 20)} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=8241, OpType=ALLREDUCE, "
            f"NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000){said}\n"
            for r in (0, 1)
        )
    )
    os.chown(out, 4242, 4242)
    job = job_info(JOB, nodes=("node1", "node2"), std_out=str(out))
    door = FakeDoor([replace(job, start_time=started)], node_infos(4))
    door.end_job(JOB, "FAILED", exit_code=134)
    for node in ("node1", "node2"):
        env = {
            "SLURM_JOB_ID": str(JOB),
            "SLURMD_NODENAME": node,
            "SLURM_JOB_UID": "4242",
            "SLURM_JOB_EXIT_CODE2": "134:0",
            "SLURM_JOB_NODELIST": "node[1-2]",
        }
        if node_start:  # 25.11 gives a node's Epilog the start time; 22.05 does not
            env["SLURM_JOB_START_TIME"] = str(int(started))
        run_epilog(config, env)
    return door


def _decide(config: Config, door: FakeDoor, **more: str) -> Attribution:
    env = {
        "SLURM_JOB_ID": str(JOB),
        "SLURM_JOB_UID": "4242",
        "SLURM_JOB_EXIT_CODE2": "134:0",
        "SLURM_JOB_NODELIST": "node[1-2]",
        **more,
    }
    outcome = decide_from_env(config, env, door)
    assert outcome is not None and outcome.attribution is not None
    return outcome.attribution


@pytest.mark.skipif(os.geteuid() != 0, reason="root's records and the job's chowned output")
def test_a_hung_collective_blames_the_node_whose_xid_came_before_the_window(tmp_path: Path):
    """node2's XID 74 11 minutes before the end, the others' watchdogs 10 minutes later: the
    Epilog keeps it in node2's earlier record, the decision reaches it, node2 is blamed and
    left out of the requeued job."""
    now = time.time()
    config = _config(tmp_path, xid_at=now - 660)
    door = _end_job(tmp_path, config, started=now - 3 * 3600, ran_ms=600043)
    (earlier,) = [
        r
        for r in read_root_records(config.paths.evidence_dir, JOB, ["node1", "node2"]).records
        if r.step == EARLIER_STEP
    ]
    assert (earlier.node, [f.xid for f in earlier.facts]) == ("node2", [74])  # type: ignore[attr-defined]
    found = _decide(config, door)
    assert (found.cause, found.nodes, found.root_backed) == (Cause.GPU_NVLINK, ("node2",), True)
    assert door.methods().count("requeue") == 1
    assert "node2" in door.jobs[JOB].excluded_nodes


@pytest.mark.skipif(os.geteuid() != 0, reason="root's records and the job's chowned output")
def test_without_the_watchdogs_duration_the_earlier_record_is_not_read(tmp_path: Path):
    now = time.time()
    config = _config(tmp_path, xid_at=now - 660)
    door = _end_job(tmp_path, config, started=now - 3 * 3600, ran_ms=None)
    assert _decide(config, door).cause is Cause.NCCL_TIMEOUT


@pytest.mark.skipif(os.geteuid() != 0, reason="root's records and the job's chowned output")
@pytest.mark.parametrize("node_start", [True, False], ids=["epilog-knows-start", "22.05"])
def test_a_kernel_event_from_before_the_run_does_not_count(tmp_path: Path, node_start: bool):
    """An XID of the job before this one on node2 (the run started 30 s after it): left out
    of the earlier record by an Epilog that knows the run's start, else by the decision."""
    now = time.time()
    config = _config(tmp_path, xid_at=now - 690)
    door = _end_job(tmp_path, config, started=now - 660, ran_ms=600043, node_start=node_start)
    records = read_root_records(config.paths.evidence_dir, JOB, ["node1", "node2"]).records
    steps = ["epilog", "epilog"] if node_start else ["epilog", "epilog", EARLIER_STEP]
    assert [r.step for r in records] == steps
    assert _decide(config, door).cause is Cause.NCCL_TIMEOUT


@pytest.mark.skipif(os.geteuid() != 0, reason="root's records and the job's chowned output")
def test_a_hung_expedited_job_slurm_held_reaches_back_to_its_own_start(tmp_path: Path):
    """25.11's expedited requeue: Slurm requeued the run held before the decision looked, so
    the controller knows no start of it; EpilogSlurmctld's SLURM_JOB_START_TIME bounds the
    reach. node2 is blamed and excluded, and the job released."""
    now = time.time()
    config = _config(tmp_path, xid_at=now - 660)
    started = now - 3 * 3600
    door = _end_job(tmp_path, config, started=started, ran_ms=600043)
    door.jobs[JOB] = replace(door.jobs[JOB], expedited_requeue=True)
    door.finish_expedited_requeue(JOB, epilog_failed=False)
    found = _decide(config, door, SLURM_JOB_START_TIME=str(int(started)))
    assert (found.cause, found.nodes) == (Cause.GPU_NVLINK, ("node2",))
    assert door.methods().count("release") == 1
    assert "node2" in door.jobs[JOB].excluded_nodes


@pytest.mark.skipif(os.geteuid() != 0, reason="root's records and the job's chowned output")
def test_a_node_the_cause_does_not_blame_is_not_drained_for_what_the_reach_found(
    tmp_path: Path,
):
    """node1's XID 48 began the hang, node2's XID 74 came later, both before the window:
    node1 is blamed; node2 is judged on its window, as its Epilog judged it, and stays."""
    now = time.time()
    xid48 = "NVRM: Xid (PCI:0000:3b:00): 48, pid=23401, name=python3, An uncorrectable ECC"
    config = _config(
        tmp_path, xid_at=now - 660, node1_kernel=f"{_stamp(now - 1100)} node1 kernel: {xid48}\n"
    )
    door = _end_job(tmp_path, config, started=now - 3 * 3600, ran_ms=600043)
    found = _decide(config, door)
    assert (found.cause, found.nodes) == (Cause.GPU_MEMORY, ("node1",))
    drained = [call.args[0] for call in door.calls if call.method == "drain"]
    assert drained == ["node1"]


def test_the_epilog_writes_its_earlier_record_before_the_one_the_decision_waits_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The decision waits for `<node>.json` alone, then reads both."""
    from slurm_triage.prolog_epilog import epilog

    written: list[str] = []
    monkeypatch.setattr(
        epilog,
        "write_root_record",
        lambda _dir, _job, node, _data, suffix=".json": written.append(node + suffix) or "",
    )
    now = time.time()
    config = _config(tmp_path, xid_at=now - 660)
    env = {
        "SLURM_JOB_ID": str(JOB),
        "SLURMD_NODENAME": "node2",
        "SLURM_JOB_UID": "4242",
        "SLURM_JOB_EXIT_CODE2": "0:0",
        "SLURM_JOB_NODELIST": "node[1-2]",
    }
    run_epilog(config, env)
    assert written == ["node2.earlier.json", "node2.json"]


def test_the_earlier_record_keeps_the_newest_events_of_the_reach():
    now = END
    events = [xid("node2", now - s) for s in (ROOT_REACH_S + 1, ROOT_REACH_S - 1, 700, 599)]
    events += [xid("node2", now - 650 + i / 10) for i in range(MAX_EARLIER_FACTS)]
    end = JobEnd.from_env(
        {"SLURM_JOB_ID": "1", "SLURMD_NODENAME": "node2", "SLURM_JOB_NODELIST": "node2"}, now
    )
    record = earlier_record(end, events, now)
    assert record is not None and record.step == EARLIER_STEP
    assert len(record.facts) == MAX_EARLIER_FACTS
    assert record.facts[-1].time == pytest.approx(now - 650 + (MAX_EARLIER_FACTS - 1) / 10)
    assert all(now - ROOT_REACH_S <= f.time < now - 600 for f in record.facts)  # type: ignore[operator]
    few = earlier_record(end, events[:4], now)
    assert few is not None
    assert [now - f.time for f in few.facts] == [ROOT_REACH_S - 1, 700]  # type: ignore[operator]
    assert earlier_record(end, events[3:4], now) is None
