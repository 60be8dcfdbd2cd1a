"""The wrapper's pure parts: identity from Slurm's environment, the error file, the record
writer, the hang detector and the summary line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_triage.attribution import attribute
from slurm_triage.config import HealthConfig
from slurm_triage.evidence import NvmlCondition, NvmlFact, ProcessExit, Source, parse_record
from slurm_triage.simulate.estate import NodeEstate
from slurm_triage.wrapper import errorfile
from slurm_triage.wrapper.errorfile import (
    ErrorFileError,
    parse_error_document,
    read_error_file,
    record_exceptions,
    write_error_file,
)
from slurm_triage.wrapper.identity import (
    StepIdentity,
    expand_counts,
    identity_from_env,
)
from slurm_triage.wrapper.record import RecordError, RunOutcome, build_facts, write_record
from slurm_triage.wrapper.report import conclude, summary_line
from slurm_triage.wrapper.run import WrapOptions, _start_nvml
from slurm_triage.wrapper.stepd import proctrack_type, stepd_delivers_to_child
from slurm_triage.wrapper.supervise import ChildExit
from slurm_triage.wrapper.watch import HangDetector, tick_for

IDENT = StepIdentity(job_id="5", node="n2", step="0", task="3", rank=3)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, ("local", "host1", "0", "0", None, 1, "host1.0.json")),
        ({"SLURM_JOB_ID": "12"}, ("12", "host1", "batch", "0", None, 1, "host1.batch.json")),
        (
            {"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "n2", "SLURM_STEP_ID": "1",
             "SLURM_PROCID": "5", "SLURM_STEP_TASKS_PER_NODE": "1(x3)"},
            ("12", "n2", "1", "5", 5, 1, "n2.1.json"),
        ),
        (
            {"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "n2", "SLURM_STEP_ID": "0",
             "SLURM_PROCID": "9", "SLURM_STEP_TASKS_PER_NODE": "8(x3)", "SLURM_NODEID": "1"},
            ("12", "n2", "0", "9", 9, 8, "n2.0.9.json"),
        ),
        (
            {"SLURM_JOB_ID": "12", "SLURMD_NODENAME": "n2", "SLURM_STEP_ID": "0",
             "SLURM_PROCID": "2", "SLURM_NTASKS_PER_NODE": "4"},
            ("12", "n2", "0", "2", 2, 4, "n2.0.2.json"),
        ),
        (
            {"SLURM_JOB_ID": "../etc", "SLURMD_NODENAME": "a/b.c", "SLURM_STEP_ID": "."},
            ("___etc", "a_b_c", "_", "0", None, 1, "a_b_c._.json"),
        ),
    ],
)  # fmt: skip
def test_identity_from_slurm_environment(env: dict[str, str], expected: tuple[object]) -> None:
    """Job, node, step, task and the record name follow Slurm's variables, safely."""
    ident = identity_from_env(env, hostname="host1.cluster")
    got = (ident.job_id, ident.node, ident.step, ident.task, ident.rank, ident.tasks_on_node)
    assert (*got, ident.record_name) == expected


def test_step_tasks_per_node_beats_the_jobs() -> None:
    """A one-task-per-node step inside a job of 2 per node is named without the task id."""
    env = {
        "SLURM_STEP_TASKS_PER_NODE": "1(x2)",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "SLURM_NTASKS_PER_NODE": "2",
    }
    assert identity_from_env(env, "h").tasks_on_node == 1


@pytest.mark.parametrize(
    ("text", "counts"),
    [("8", [8]), ("2(x3),1", [2, 2, 2, 1]), ("", []), ("x", []), ("1(x9999999)", [])],
)
def test_expand_counts(text: str, counts: list[int]) -> None:
    """Slurm's compressed counts expand; anything unreadable or absurd is []."""
    assert expand_counts(text) == counts


def test_error_file_first_writer_wins(tmp_path: Path) -> None:
    """Two ranks sharing one error file path: the first exception stays, complete."""
    (tmp_path / "rank").mkdir()
    path = str(tmp_path / "rank" / "err.json")
    assert write_error_file(KeyError("first"), path)
    assert not write_error_file(ValueError("second"), path)
    report = read_error_file(path)
    assert report is not None
    assert (report.exc_type, report.message) == ("KeyError", "'first'")
    assert report.traceback.endswith("KeyError: 'first'\n") and report.pid == os.getpid()
    assert list((tmp_path / "rank").iterdir()) == [Path(path)]  # no temp file left


def test_error_file_helpers_never_raise_without_a_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside the wrapper the helper is a no-op, and the decorator re-raises as before."""
    monkeypatch.delenv(errorfile.ERROR_FILE_ENV, raising=False)
    assert not write_error_file(RuntimeError("x"))

    @record_exceptions
    def boom() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        boom()


def test_error_file_type_names_are_qualified(tmp_path: Path) -> None:
    """Builtins keep their short name; others carry their module, as tracebacks print them."""
    path = str(tmp_path / "e.json")
    write_error_file(json.JSONDecodeError("bad", "doc", 0), path)
    report = read_error_file(path)
    assert report is not None and report.exc_type == "json.decoder.JSONDecodeError"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"[]",
        b'{"schema": "other", "version": 1, "type": "X"}',
        b'{"schema": "slurm-triage/error-file", "version": 1, "type": ""}',
        b'{"schema": "slurm-triage/error-file", "version": 1, "type": "X", "extra": 1}',
        b'{"schema": "slurm-triage/error-file", "version": 1, "type": "X", "time": NaN}',
        b'{"schema": "slurm-triage/error-file", "version": 1, "type": "X", "pid": "1"}',
    ],
)
def test_error_file_parser_is_strict(data: bytes) -> None:
    """Anything but the document we write is refused with one line."""
    with pytest.raises(ErrorFileError):
        parse_error_document(data)


def test_error_file_reader_refuses_big_and_odd_files(tmp_path: Path) -> None:
    """Over the size cap, a FIFO or a symlink: refused before reading; absent: None."""
    big = tmp_path / "big"
    big.write_bytes(b" " * (errorfile.MAX_ERROR_FILE_BYTES + 1))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(big)
    for path in (big, fifo, link):
        with pytest.raises(ErrorFileError):
            read_error_file(str(path))
    assert read_error_file(str(tmp_path / "absent")) is None


def test_write_record_is_atomic_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """If the rename fails, the old record stays whole and no temp file is left."""
    write_record(tmp_path, IDENT, b'{"old": 1}')
    final = tmp_path / "5" / "n2.0.json"

    def broken(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(RecordError, match="No space left on device"):
        write_record(tmp_path, IDENT, b'{"new": 2}')
    assert final.read_bytes() == b'{"old": 1}'
    assert [p.name for p in (tmp_path / "5").iterdir()] == ["n2.0.json"]


def test_write_record_refuses_a_planted_symlink(tmp_path: Path) -> None:
    """A symlink in place of the job directory (another user's trap) is refused."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "5").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RecordError, match="not a directory"):
        write_record(tmp_path, IDENT, b"{}")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_hang_detector_needs_a_quiet_stretch() -> None:
    """Progress by output or heartbeat resets the clock; only a full quiet timeout is a hang."""
    detector = HangDetector(10.0, now=0.0)
    assert detector.observe(5.0, 0, None) is None
    assert detector.observe(9.0, 100, None) is None  # output
    assert detector.observe(18.0, 100, None) is None
    assert detector.observe(18.5, 100, 7) is None  # heartbeat touched
    assert detector.observe(28.4, 100, 7) is None
    assert detector.observe(28.5, 100, 7) == pytest.approx(10.0)
    assert tick_for(0) == 5.0 and tick_for(1.0) == 0.25 and tick_for(3600) == 5.0


def _outcome(child: ChildExit, **kwargs: object) -> RunOutcome:
    return RunOutcome(IDENT, child, 12.5, 1_700_000_000.0, ((b"", True),), **kwargs)  # type: ignore[arg-type]


def test_facts_from_a_signal_death_with_an_nvml_event() -> None:
    """The exit, runtime and NVML facts are recorded as this rank's, collected by the user."""
    xid = NvmlFact(node="n2", time=1.0, condition=NvmlCondition.XID_EVENT, gpu="1", value=48)
    facts = build_facts(_outcome(ChildExit(None, 6, core_dumped=True), nvml=(xid,)))
    (exit_fact,) = [f for f in facts if isinstance(f, ProcessExit)]
    assert (exit_fact.signal, exit_fact.core_dumped, exit_fact.runtime_s) == (6, True, 12.5)
    assert all(f.source is Source.USER and f.node == "n2" for f in facts)
    assert xid in facts


def test_summary_line_states_cause_detail_and_action() -> None:
    """One line: who, cause (domain), what, and the default action in words."""
    xid = NvmlFact(node="n2", time=1.0, condition=NvmlCondition.XID_EVENT, gpu="1", value=48)
    facts = build_facts(_outcome(ChildExit(None, 6), nvml=(xid,)))
    line = summary_line(IDENT, attribute(facts))
    assert line.startswith("slurm-triage: job 5 n2 rank 3: gpu_memory (hardware) - ")
    assert line.endswith(" - requeue excluding n2") and "\n" not in line


def test_conclude_reports_an_unwritable_directory_and_still_summarises(tmp_path: Path) -> None:
    """A failed write is one line, the summary follows; nothing raises."""
    lines = conclude(_outcome(ChildExit(2, None)), tmp_path / "missing")
    assert lines[0].startswith("slurm-triage: evidence not recorded: evidence directory")
    assert lines[1].startswith("slurm-triage: job 5 n2 rank 3: unknown (unknown)")


def test_conclude_writes_a_record_the_epilog_can_parse(tmp_path: Path) -> None:
    """The record written is valid for the strict parser, including as untrusted user input."""
    assert conclude(_outcome(ChildExit(0, None)), tmp_path) == []
    data = (tmp_path / "5" / "n2.0.json").read_bytes()
    record = parse_record(data, trusted_source=Source.USER)
    assert record.collected_by is Source.USER and record.job_id == "5"


def test_proctrack_type_is_read_from_slurm_conf() -> None:
    """The last uncommented ProctrackType wins; none means Slurm's default, cgroup."""
    assert proctrack_type("ProctrackType=proctrack/pgid\n") == "proctrack/pgid"
    text = "#ProctrackType=proctrack/pgid\nProctrackType = proctrack/LinuxProc  # dev\n"
    assert proctrack_type(text) == "proctrack/linuxproc"
    assert proctrack_type("") == "proctrack/cgroup"


def test_only_slurmstepd_senders_without_pgid_tracking_are_not_forwarded(tmp_path: Path) -> None:
    """A sender named slurmstepd has given the child the signal already, unless Slurm tracks
    processes by group (then the child, in its own group, missed it) or this is not Slurm."""
    script = (
        "import ctypes,time; ctypes.CDLL(None).prctl(15, b'slurmstepd', 0, 0, 0); "
        "print('ok', flush=True); time.sleep(30)"
    )
    stepd = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert stepd.stdout is not None and stepd.stdout.readline() == b"ok\n"
        cgroup, pgid = tmp_path / "cgroup.conf", tmp_path / "pgid.conf"
        cgroup.write_text("ProctrackType=proctrack/cgroup\n")
        pgid.write_text("ProctrackType=proctrack/pgid\n")
        check = stepd_delivers_to_child({"SLURM_JOB_ID": "5", "SLURM_CONF": str(cgroup)})
        assert check is not None
        assert check(stepd.pid) and not check(os.getpid()) and not check(0)
        assert stepd_delivers_to_child({"SLURM_JOB_ID": "5", "SLURM_CONF": str(pgid)}) is None
        assert stepd_delivers_to_child({"SLURM_CONF": str(cgroup)}) is None
    finally:
        stepd.kill()
        stepd.wait()


@pytest.mark.parametrize(
    ("nvidia_on_the_bus", "step_gpus", "loaded"),
    [
        (False, None, False),  # a CPU node, a step without GPUs: nothing to watch
        (False, "0", True),  # Slurm says the step has a GPU: NVML finds it lost or there
        (True, None, True),  # GPUs on the bus, none named: every GPU NVML shows
    ],
)
def test_nvml_is_loaded_only_where_there_are_gpus_to_watch(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    nvidia_on_the_bus: bool,
    step_gpus: str | None,
    loaded: bool,
) -> None:
    """The wrapper loads NVML (pynvml: most of a CPU node's wrapper start) unless Slurm names
    no GPU for the step and the PCI bus holds no NVIDIA GPU."""
    sysfs = tmp_path / "sys"
    (sysfs / "bus/pci/devices").mkdir(parents=True)
    if nvidia_on_the_bus:
        sysfs = NodeEstate(tmp_path / "sim", "n2").ensure().sysfs
    calls: list[str] = []

    def no_driver(config: HealthConfig, node: str) -> None:
        calls.append(node)
        raise RuntimeError("NVML Shared Library Not Found")  # as on a node without a driver

    monkeypatch.setattr("slurm_triage.nvml.nvml_module", no_driver)
    options = WrapOptions(watch_nvml=True, health=HealthConfig(sysfs_root=str(sysfs)))
    env = {"SLURM_STEP_GPUS": step_gpus} if step_gpus else {}
    assert _start_nvml(options, IDENT, env) is None
    assert calls == (["n2"] if loaded else [])


def test_has_children_sees_running_and_unreaped_children_only() -> None:
    """The wrapper scans /proc for escaped descendants only while it has a child: none
    running and none unreaped means no descendant anywhere (orphans are re-parented to it)."""
    code = (
        "import os, subprocess, time\n"
        "from slurm_triage.wrapper.reap import has_children\n"
        "seen = [has_children()]\n"
        "child = subprocess.Popen(['sleep', '30'])\n"
        "seen.append(has_children())\n"
        "child.kill()\n"
        "while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT) is None:\n"
        "    time.sleep(0.01)\n"
        "seen.append(has_children())  # a zombie is still a child\n"
        "child.wait()\n"
        "seen.append(has_children())\n"
        "print(seen)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[False, True, True, False]", done.stderr
