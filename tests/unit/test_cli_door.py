"""The command-line door picks what it asks Slurm by the clients' version: fake scontrol and
sinfo executables that answer with output recorded on 22.05 and 25.11 and log their argv."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from slurm_triage.slurm.cli_backend import CliDoor
from slurm_triage.slurm.errors import (
    NodeNotFound,
    NotYetAccounted,
    SlurmCommandError,
    SlurmOutputError,
)
from slurm_triage.slurm.model import JobState
from slurm_triage.slurm.parse import SACCT_DELIMITER, SACCT_FIELDS
from slurm_triage.slurm.runner import Runner
from tests.conftest import FIXTURES

SLURM = FIXTURES / "slurm"


def _fake_slurm(bin_dir: Path, version: str, answers: dict[str, str]) -> tuple[CliDoor, Path]:
    """scontrol/sinfo that print `slurm VERSION` for --version and the fixture named for
    their exact argv; anything else fails the way Slurm does (rc 1, a line on stderr)."""
    log = bin_dir / "argv.log"
    for command in ("scontrol", "sinfo", "sacct", "sacctmgr"):
        cases = [f'  "--version") echo "slurm {version}" ;;']
        cases += [
            f"  {shlex.quote(argv.removeprefix(command + ' '))}) cat {shlex.quote(str(path))} ;;"
            for argv, path in answers.items()
            if argv.startswith(command + " ")
        ]
        script = bin_dir / command
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{command} $*" >> {shlex.quote(str(log))}\n'
            'case "$*" in\n' + "\n".join(cases) + "\n"
            '  *) echo "unexpected: $*" >&2; exit 1 ;;\nesac\n'
        )
        script.chmod(0o755)
    return CliDoor(Runner(timeout_s=5, attempts=1), bin_dir=str(bin_dir)), log


def _calls(log: Path) -> list[str]:
    return log.read_text().splitlines()


def test_25_11_nodes_come_from_scontrol_json(tmp_path: Path) -> None:
    """On 25.11 all nodes come from `scontrol --json show nodes`, named ones from `show node
    LIST`; the version is asked once per door."""
    v25 = SLURM / "25.11"
    door, log = _fake_slurm(
        tmp_path,
        "25.11.7",
        {
            "scontrol --json show nodes": str(v25 / "scontrol_show_nodes.json"),
            "scontrol --json show node node3": str(v25 / "scontrol_show_node_drained_idle.json"),
        },
    )
    assert [n.name for n in door.nodes()] == ["node1", "node2", "node3"]
    node = door.node("node3")
    assert (node.label, node.drained, node.reason_user) == ("IDLE+DRAIN", True, "root")
    assert _calls(log) == [
        "scontrol --version",
        "scontrol --json show nodes",
        "scontrol --json show node node3",
    ]


def test_25_11_unknown_node_is_node_not_found(tmp_path: Path) -> None:
    """25.11 answers `show node nodeX` with rc 0 and an empty list ("No nodes to dump"):
    NodeNotFound, as on 22.05."""
    door, _ = _fake_slurm(
        tmp_path,
        "25.11.7",
        {
            "scontrol --json show node nodeX": str(
                SLURM / "25.11" / "scontrol_show_node_unknown.json"
            )
        },
    )
    with pytest.raises(NodeNotFound, match="nodeX"):
        door.nodes(["nodeX"])


def test_22_05_nodes_come_from_sinfo_json(tmp_path: Path) -> None:
    """On 22.05 (no `scontrol --json`) nodes come from `sinfo --json`, filtered on our side
    because sinfo ignores -n there."""
    v22 = SLURM / "22.05"
    door, log = _fake_slurm(
        tmp_path,
        "22.05.8",
        {
            "sinfo --json": str(v22 / "sinfo.json"),
            "sinfo --json -n node3": str(v22 / "sinfo_draining_allocated.json"),
        },
    )
    assert [n.label for n in door.nodes()] == ["IDLE", "IDLE", "IDLE"]
    (node,) = door.nodes(["node3"])
    assert (node.label, node.comment) == ("ALLOCATED+DRAIN", '{"triage": "note"}')
    assert _calls(log) == ["scontrol --version", "sinfo --json", "sinfo --json -n node3"]


def test_25_11_sinfo_document_would_be_refused(tmp_path: Path) -> None:
    """A Slurm claiming 22.05 whose sinfo prints 23.02+'s document gets a one-line
    SlurmOutputError, never a traceback or an empty answer."""
    door, _ = _fake_slurm(
        tmp_path, "22.05.8", {"sinfo --json": str(SLURM / "25.11" / "sinfo.json")}
    )
    with pytest.raises(SlurmOutputError, match="sinfo --json"):
        door.nodes()


def test_sacct_asks_for_the_raw_id(tmp_path: Path) -> None:
    """An array task forgotten by slurmctld is found in accounting by its raw id (14, JobID
    13_0 in sacct's own column)."""
    argv = f"sacct -j 14 -D -X -n -P --delimiter={SACCT_DELIMITER} -o {','.join(SACCT_FIELDS)}"
    door, _ = _fake_slurm(
        tmp_path, "25.11.7", {argv: str(SLURM / "25.11" / "sacct_array_task.txt")}
    )
    job = door.accounted_job(14)
    assert (job.job_id, job.nodes, job.source) == (14, ("node3",), "sacct")


JSON_COMPLETED = "25.11/scontrol_json_show_job_completing_completed.json"


@pytest.mark.parametrize(
    ("version", "job_id", "argv", "fixture"),
    [
        ("25.11.7", 4, "scontrol --json show job 4", JSON_COMPLETED),
        ("24.05.8", 4, "scontrol --json show job 4", JSON_COMPLETED),
        ("23.11.10", 11, "scontrol show job 11", "25.11/scontrol_show_job_completed.txt"),
        ("22.05.8", 4, "scontrol show job 4", "22.05/scontrol_show_job_completed.txt"),
    ],
)  # fmt: skip
def test_jobs_are_read_as_json_from_24_05(
    tmp_path: Path, version: str, job_id: int, argv: str, fixture: str
) -> None:
    """24.05+ (data_parser v0.0.41, which prints the expanded output paths): the job comes
    from `scontrol --json show job`, which keeps the state under COMPLETING; before, from
    the text form, which shows COMPLETING alone."""
    door, log = _fake_slurm(tmp_path, version, {argv: str(SLURM / fixture)})
    job = door.job(job_id)
    assert _calls(log) == ["scontrol --version", argv]
    # JSON: COMPLETING with COMPLETED under it; the text fixtures: already COMPLETED.
    assert job.base_state is JobState.COMPLETED


def test_a_job_json_no_longer_knows_is_read_from_accounting(tmp_path: Path) -> None:
    """25.11 answers an unknown job with rc 0 and no jobs: the door asks accounting."""
    sacct = f"sacct -j 14 -D -X -n -P --delimiter={SACCT_DELIMITER} -o {','.join(SACCT_FIELDS)}"
    door, log = _fake_slurm(
        tmp_path,
        "25.11.7",
        {
            "scontrol --json show job 14": str(
                SLURM / "25.11" / "scontrol_json_show_job_completing_completed.json"
            ),
            sacct: str(SLURM / "25.11" / "sacct_array_task.txt"),
        },
    )
    assert door.job(14).source == "sacct"
    assert _calls(log)[1:] == ["scontrol --json show job 14", sacct]


def test_accounted_admin_comment_goes_through_sacctmgr(tmp_path: Path) -> None:
    """An ended job's AdminComment is set in accounting, as one argv element (no shell),
    with -i so sacctmgr does not wait 30 s for a 'commit?' answer."""
    text = "triage: cause=user_code action=record_only on=node1 n=0"
    argv = f"sacctmgr -i modify job where JobID=5 set AdminComment={text}"
    show = "scontrol show job 5"
    door, log = _fake_slurm(
        tmp_path,
        "22.05.8",
        {argv: "/dev/null", show: str(SLURM / "22.05" / "scontrol_show_job_failed_exit3.txt")},
    )
    door.set_accounted_admin_comment(5, text)
    # The job is read first, for how Slurm names it (an array task is not its number).
    assert _calls(log)[1:] == [show, argv]
    with pytest.raises(SlurmCommandError, match="one line"):
        door.set_accounted_admin_comment(5, "a\nb")


@pytest.mark.parametrize(
    ("said", "words"),
    [
        ('echo " Nothing modified"', "Nothing modified"),
        (
            'echo " Error with request: Data has not changed since time specified" >&2',
            "Data has not changed",
        ),
    ],
    ids=["22.05", "25.11"],
)
def test_accounted_admin_comment_waits_for_a_record_accounting_lacks_yet(
    tmp_path: Path, said: str, words: str
) -> None:
    """sacctmgr's answer (rc 1; src/sacctmgr/job_functions.c) while slurmdbd has not the
    run's record yet: 22.05's slurmdbd answers an empty list ("Nothing modified" on stdout),
    25.11's passes SLURM_NO_CHANGE_IN_DATA on (its strerror on stderr). Retried within the
    deadline, as an unreachable controller is; a record that never comes is NotYetAccounted
    once the attempts are spent."""
    text = "triage: cause=gpu_unavailable action=requeue on=node1 n=1"
    show = "scontrol show job 5"
    _fake_slurm(
        tmp_path, "22.05.8", {show: str(SLURM / "22.05" / "scontrol_show_job_failed_exit3.txt")}
    )
    counter = tmp_path / "count"
    (tmp_path / "sacctmgr").write_text(
        "#!/bin/sh\n"
        f"n=$(cat {counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {counter}\n"
        f'if [ $n -lt "$WANT" ]; then {said}; exit 1; fi\n'
        'echo " Modified jobs..."\n'
    )
    waits: list[float] = []
    door = CliDoor(
        Runner(timeout_s=30, attempts=3, sleep=waits.append, env={**os.environ, "WANT": "3"}),
        bin_dir=str(tmp_path),
    )
    door.set_accounted_admin_comment(5, text)
    assert (counter.read_text().strip(), waits) == ("3", [0.5, 1.0])
    counter.unlink()
    door = CliDoor(
        Runner(timeout_s=30, attempts=3, sleep=waits.append, env={**os.environ, "WANT": "9"}),
        bin_dir=str(tmp_path),
    )
    with pytest.raises(NotYetAccounted, match=words):
        door.set_accounted_admin_comment(5, text)
    assert counter.read_text().strip() == "3"
