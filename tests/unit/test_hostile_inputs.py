"""Issue 12: what a hostile job user controls cannot forge facts or reach root's hands.

The job's `--output` path is refused before it is opened unless it is a regular file of
the job's user, and its reading is bounded; a name squatted in the shared evidence
directory is moved aside by the Prolog; text in job fields cannot change what
`scontrol show job` says about the job. Tests run as root and fake users with chown.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from slurm_triage.config import Config, PathsConfig
from slurm_triage.evidence import store
from slurm_triage.health_checks.runner import RunReport
from slurm_triage.prolog_epilog import prolog
from slurm_triage.slurm.errors import SlurmOutputError
from slurm_triage.slurm.model import JobState
from slurm_triage.slurm.parse import parse_scontrol_job

USER = 4242  # the job's user
OTHER = 4343  # another user of the cluster


def _owned(path: Path, uid: int = USER) -> Path:
    os.chown(path, uid, uid, follow_symlinks=False)
    return path


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every name os.open is called with, from any thread."""
    calls: list[str] = []
    real = os.open

    def recording(path: Any, *args: Any, **kwargs: Any) -> int:
        calls.append(os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording)
    return calls


def _refused(path: Path, uid: int, match: str, opened: list[str]) -> None:
    with pytest.raises(store.UnsafeEvidence, match=match):
        store.read_user_tail(str(path), uid, 100)
    assert not [c for c in opened if os.path.basename(c) == path.name], opened


# --- 6. the output path is checked before it is opened -----------------------------------


def test_character_device_is_refused_without_being_opened(opened: list[str]) -> None:
    """`--output=/dev/null` (root's character device; /dev/watchdog would arm a reboot) is
    refused from its lstat: never opened, even when the job user is root."""
    _refused(Path("/dev/null"), 0, "not a regular file", opened)


def test_users_device_node_and_fifo_are_refused_without_being_opened(
    tmp_path: Path, opened: list[str]
) -> None:
    """A device node or a FIFO of the job's user is refused before any open."""
    os.mknod(tmp_path / "dev.out", 0o644 | stat.S_IFCHR, os.makedev(1, 5))
    os.mkfifo(tmp_path / "fifo.out")
    for name in ("dev.out", "fifo.out"):
        _refused(_owned(tmp_path / name), USER, "not a regular file", opened)


def test_directory_and_other_users_file_are_refused_without_being_opened(
    tmp_path: Path, opened: list[str]
) -> None:
    """A directory, or a regular file of another user, is never opened."""
    (tmp_path / "dir.out").mkdir()
    _refused(_owned(tmp_path / "dir.out"), USER, "not a regular file", opened)
    (tmp_path / "shadow.out").write_bytes(b"root:secret\n")
    _refused(_owned(tmp_path / "shadow.out", OTHER), USER, "owned by uid 4343", opened)


def test_users_symlink_inside_the_path_is_not_followed(tmp_path: Path, opened: list[str]) -> None:
    """`<user's symlink>/slurm.out` is refused; a root-owned symlink (a site's
    `/home -> /data/home`) on the way is followed, and the job's file is read."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "slurm.out").write_bytes(b"x" * 500 + b"\nKeyError: 'lr'\n")
    _owned(real / "slurm.out")
    (tmp_path / "users-link").symlink_to(real)
    _owned(tmp_path / "users-link")
    _refused(tmp_path / "users-link" / "slurm.out", USER, "symlink of uid 4242", opened)
    (tmp_path / "site-link").symlink_to(real)
    tail = store.read_user_tail(str(tmp_path / "site-link" / "slurm.out"), USER, 50)
    assert tail.endswith(b"KeyError: 'lr'\n")


def test_hung_stat_returns_unreadable_within_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path on a hung mount (a stat that never answers) is "unreadable" at the deadline."""
    hung = tmp_path / "hung"
    hung.mkdir()
    real_stat = os.stat

    def stat_on_dead_nfs(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if os.fspath(path) in ("hung", str(hung)):
            time.sleep(5)
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat_on_dead_nfs)
    started = time.monotonic()
    with pytest.raises(store.UnsafeEvidence, match="unreadable"):
        store.read_user_tail(str(hung / "slurm.out"), USER, 100, timeout_s=0.3)
    assert time.monotonic() - started < 2


# --- 7. the evidence directory cannot be squatted ----------------------------------------


def _squat(evidence: Path, kind: str, target: Path) -> None:
    path = evidence / "77"
    if kind == "directory":
        path.mkdir(mode=0o777)
        (path / "node2.0.json").write_bytes(b"{}")
    elif kind == "file":
        path.write_bytes(b"planted")
    else:
        path.symlink_to(target)
    _owned(path, OTHER)


@pytest.mark.parametrize("kind", ["directory", "file", "symlink"])
def test_squatted_job_dir_is_replaced_by_one_of_the_job_user(tmp_path: Path, kind: str) -> None:
    """Another user's directory, file or symlink at `<evidence_dir>/<job>` is moved aside,
    unfollowed, and the job gets a 0755 directory of its own; the symlink's target (an
    /etc stand-in) is left exactly as it was."""
    evidence, etc = tmp_path / "evidence", tmp_path / "etc"
    evidence.mkdir(mode=0o1777)
    etc.mkdir(mode=0o755)
    before = os.stat(etc)
    _squat(evidence, kind, etc)
    with capture_logs() as logs:
        moved = store.prepare_job_dir(str(evidence), 77, USER, USER)
    st = os.lstat(evidence / "77")
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == USER and stat.S_IMODE(st.st_mode) == 0o755
    assert moved is not None and moved.startswith(".squatted.77.")
    assert os.lstat(evidence / moved).st_uid == OTHER
    after = os.stat(etc)
    assert (after.st_uid, after.st_mode, os.listdir(etc)) == (before.st_uid, before.st_mode, [])
    (event,) = [e for e in logs if e["event"] == "evidence_dir_squatted"]
    assert (event["kind"], event["owner_uid"], event["moved_to"]) == (kind, OTHER, moved)


def test_job_users_own_dir_is_kept_and_a_missing_one_created(tmp_path: Path) -> None:
    """The job user's own directory (a requeued job's) stays with its records; an absent one
    is created for the user."""
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "node2.0.json").write_bytes(b"{}")
    _owned(tmp_path / "77")
    assert store.prepare_job_dir(str(tmp_path), 77, USER, USER) is None
    assert (tmp_path / "77" / "node2.0.json").exists()
    assert store.prepare_job_dir(str(tmp_path), 78, USER, USER) is None
    assert os.stat(tmp_path / "78").st_uid == USER


def test_prolog_prepares_the_job_dir_from_its_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Prolog (root, before the job starts) replaces a squatter at the job's directory
    with one owned by SLURM_JOB_UID/GID."""
    evidence = tmp_path / "evidence"
    evidence.mkdir(mode=0o1777)
    _squat(evidence, "directory", tmp_path)
    config = Config(paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path)))
    empty = RunReport(node="node2", mode="prolog", started=time.time(), seconds=0, results=())
    run_checks: Callable[..., RunReport] = lambda *a, **k: empty  # noqa: E731
    monkeypatch.setattr(prolog, "run_checks", run_checks)
    for var, value in (("ID", "77"), ("UID", str(USER)), ("GID", str(USER))):
        monkeypatch.setenv(f"SLURM_JOB_{var}", value)
    assert prolog.prolog(config) == 0
    assert os.lstat(evidence / "77").st_uid == USER


# --- 8. job fields cannot change what scontrol says -------------------------------------


def show_job(
    *,
    name: str = "train",
    wckey: str | None = None,
    command: str = "/home/bob/run.sh",
    workdir: str = "/home/bob",
    comment: str | None = None,
    extra: str | None = None,
    newer: bool = False,
) -> str:
    """`scontrol show job 77` for bob's running batch job, as 22.05's
    slurm_sprint_job_info() prints it (`newer`: as 23.11+ does, with SubmitLine, Extra and
    Req/AllocTRES); user-controlled values are printed raw."""
    nl = "\n   "
    tres = f"ReqTRES=cpu=2,mem=200M,node=2{nl}AllocTRES=cpu=2,node=2" if newer else "TRES=cpu=2"
    lines = [
        f"JobId=77 JobName={name}",
        "UserId=bob(1000) GroupId=bob(1000) MCS_label=N/A",
        "Priority=1 Nice=0 Account=bob QOS=normal" + (f" WCKey={wckey}" if wckey else ""),
        "JobState=RUNNING Reason=None Dependency=(null)",
        "Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0",
        "RunTime=00:00:02 TimeLimit=01:00:00 TimeMin=N/A",
        "SubmitTime=2026-11-21T22:56:42 EligibleTime=2026-11-21T22:56:42",
        "AccrueTime=2026-11-21T22:56:42",
        "StartTime=2026-11-21T22:56:42 EndTime=2026-11-21T23:56:42 Deadline=N/A",
        "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-21T22:56:42 Scheduler=Main",
        "Partition=gpu AllocNode:Sid=login1:1054",
        "ReqNodeList=(null) ExcNodeList=(null)",
        "NodeList=node[1-2]",
        "BatchHost=node1",
        "NumNodes=2 NumCPUs=2 NumTasks=2 CPUs/Task=1 ReqB:S:C:T=0:0:*:*",
        tres,
        "Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*",
        "MinCPUsNode=1 MinMemoryCPU=100M MinTmpDiskNode=0",
        "Features=(null) DelayBoot=00:00:00",
        "OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null)",
        f"Command={command}",
        *(["SubmitLine=sbatch run.sh"] if newer else []),
        f"WorkDir={workdir}",
        *([f"Comment={comment} "] if comment is not None else []),
        *([f"Extra={extra}"] if extra is not None else []),
        "StdErr=/home/bob/slurm-77.out",
        "StdIn=/dev/null",
        "StdOut=/home/bob/slurm-77.out",
        "Power=",
    ]
    return nl.join(lines) + "\n\n"


def _facts(text: str) -> tuple[object, ...]:
    job = parse_scontrol_job(text, 77)
    return (job.state, job.uid, job.nodes, job.excluded_nodes, job.restart_count, job.std_out)


TRUE_FACTS = (JobState.RUNNING, 1000, ("node1", "node2"), (), 0, "/home/bob/slurm-77.out")


@pytest.mark.parametrize("newer", [False, True])
def test_plain_job_parses_in_both_formats(newer: bool) -> None:
    """bob's job, in 22.05's and 23.11's layout, reads as it is."""
    assert _facts(show_job(newer=newer)) == TRUE_FACTS


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "x StdOut=/etc/shadow UserId=root(0)"},
        {"name": "x\nStdOut=/dev/watchdog"},
        {"name": "x\nJobState=COMPLETED\nNodeList=node9\nUserId=root(0) Restarts=9"},
        {"wckey": "x JobState=COMPLETED ExcNodeList=node1 Restarts=9"},
        {"command": "/home/bob/run.sh\nStdOut=/dev/watchdog"},
        {"workdir": "/home/bob\n StdOut=/dev/watchdog\n\nJobState=FAILED"},
        {"comment": "c\nStdOut=/dev/watchdog UserId=root(0)"},
        {"extra": "e\nStdOut=/dev/watchdog", "newer": True},
    ],
)
def test_key_value_text_in_job_fields_changes_nothing(fields: dict[str, Any]) -> None:
    """`Key=Value` text, with or without newlines, in JobName, WCKey, Command, WorkDir,
    Comment or Extra is part of that value: StdOut, the user, state and nodes are Slurm's."""
    assert _facts(show_job(**fields)) == TRUE_FACTS


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "x\n   UserId=root(0) GroupId=root(0) MCS_label=N/A"},
        {"name": "x\n   StdOut=/dev/watchdog"},
        {"command": "/home/bob/run.sh\n   StdOut=/dev/watchdog"},
        {"workdir": "/home/bob\n   StdOut=/dev/watchdog"},
        {"comment": "c\n   JobState=COMPLETED"},
        {"extra": "e\n   StdOut=/dev/watchdog", "newer": True},
    ],
)
def test_lines_imitating_slurms_own_are_refused(fields: dict[str, Any]) -> None:
    """A field holding a newline and an indented `Key=` line that Slurm prints elsewhere
    makes the record ambiguous: it is refused (a failed scontrol call), never believed."""
    with pytest.raises(SlurmOutputError, match="imitates"):
        parse_scontrol_job(show_job(**fields), 77)


def test_a_whole_fake_record_for_the_same_job_is_refused() -> None:
    """A job name holding a complete record of job 77 (root's, COMPLETED) is refused."""
    fake = show_job(name="y").replace("bob(1000)", "root(0)").replace("RUNNING", "COMPLETED")
    with pytest.raises(SlurmOutputError, match="imitates"):
        parse_scontrol_job(show_job(name="x\n\n" + fake), 77)
