"""The journal under a hostile directory owner, a full disk and a broken file, and
`history`'s arguments: a JournalError or a one-line usage error, never a traceback, and
root's hand-over of its files never redirected onto another file."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from slurm_triage.journal import Journal, JournalError, NodeEvent

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="root's hand-over needs root")


def _decided_journal(path: Path) -> None:
    with closing(Journal(path)) as journal:
        assert journal.claim(1, 0, "test")
        journal.record(
            1,
            0,
            {"state": "FAILED", "cause": "gpu_memory", "blamed": ["node1"], "nodes": ["node1"]},
            [NodeEvent("node1", 1, time.time(), "blamed", "gpu_memory", 48, False)],
        )


# -- root hands its files to the directory's owner, and only its own files -----------------


@pytest.fixture
def slurm_dir(tmp_path: Path) -> Path:
    """The journal's directory, owned by SlurmUser (nobody here), as installed."""
    directory = tmp_path / "journal"
    directory.mkdir()
    os.chown(directory, NOBODY, NOBODY)
    return directory


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A root file outside the journal's directory (/etc/shadow, say)."""
    path = tmp_path / "victim"
    path.write_text("precious\n")
    return path


def _swap_after(calls: int, shm: Path, victim: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The directory's owner swaps the -shm file for a link to `victim` right after the
    `calls`-th look root takes at that name (lstat, stat or open), whichever it is."""
    seen = [0]

    def racing(real: Callable[..., Any]) -> Callable[..., Any]:
        def look(path: Any, *args: Any, **kwargs: Any) -> Any:
            result = real(path, *args, **kwargs)
            if str(path).endswith("-shm"):
                seen[0] += 1
                if seen[0] == calls:
                    os.rename(shm, f"{shm}.old")
                    os.symlink(victim, shm)
            return result

        return look

    for name in ("lstat", "stat", "open"):
        monkeypatch.setattr(os, name, racing(getattr(os, name)))


@as_root
@pytest.mark.parametrize("calls", [1, 2, 3, 4])
def test_a_name_swapped_for_a_link_during_the_hand_over_is_never_chowned(
    calls: int, slurm_dir: Path, victim: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whenever SlurmUser swaps root's -shm for a symlink to a root file, between any two of
    root's looks at it, the file it points to stays root's."""
    journal = Journal(slurm_dir / "journal.sqlite")
    try:
        shm = slurm_dir / "journal.sqlite-shm"
        assert shm.exists()
        os.chown(shm, 0, 0)  # as root's own connection made it
        _swap_after(calls, shm, victim, monkeypatch)
        journal._keep_with_directory_owner()
        monkeypatch.undo()
    finally:
        journal.close()
    assert os.stat(victim).st_uid == 0


@as_root
def test_a_root_file_hard_linked_into_the_directory_is_never_chowned(
    slurm_dir: Path, victim: Path
) -> None:
    """A root file the directory's owner linked in under the -wal's name while root has
    the journal open (where hard links to others' files are allowed) is root's file, not
    root's journal: it stays root's, while the journal root created is handed over."""
    journal = Journal(slurm_dir / "journal.sqlite")
    try:
        wal = slurm_dir / "journal.sqlite-wal"
        wal.unlink()
        os.link(victim, wal)
        journal._keep_with_directory_owner()
    finally:
        journal.close()
    assert os.stat(victim).st_uid == 0
    assert os.stat(slurm_dir / "journal.sqlite").st_uid == NOBODY


_HOLDS_SHM_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 128)
except OSError:
    print("refused")
else:
    print("taken")
"""


@as_root
def test_the_hand_over_keeps_sqlites_locks(slurm_dir: Path) -> None:
    """POSIX locks belong to the process and any close() of the file drops them all: a
    hand-over that opened and closed the -shm (or the database) under root's open
    connection dropped SQLite's WAL locks, and concurrent writers corrupted the journal
    ("database disk image is malformed", the dev cluster's decisions). The connection's
    shared lock on the -shm's DMS byte (offset 128) must still refuse another process's
    exclusive one after the hand-over."""
    with closing(Journal(slurm_dir / "journal.sqlite")) as journal:
        journal._keep_with_directory_owner()
        assert os.stat(slurm_dir / "journal.sqlite").st_uid == NOBODY
        probe = subprocess.run(
            [sys.executable, "-c", _HOLDS_SHM_LOCK, str(slurm_dir / "journal.sqlite-shm")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert probe.stdout.strip() == "refused", probe.stderr


# -- a full disk names its own cause -------------------------------------------------------


def test_a_full_disk_is_a_journal_error_that_says_so(tmp_path: Path) -> None:
    """SQLite rolls the transaction back itself on SQLITE_FULL; the error is the disk's,
    not "cannot rollback - no transaction is active", and the journal stays usable."""
    journal = Journal(tmp_path / "journal.sqlite")
    try:
        assert journal.claim(1, 0, "test")
        pages = journal._db.execute("PRAGMA page_count").fetchone()[0]
        journal._db.execute(f"PRAGMA max_page_count={pages}")  # a disk with no room left
        with pytest.raises(JournalError, match="database or disk is full"):
            journal.record(1, 0, {"state": "FAILED", "reasons": ["x" * 100_000]})
        with pytest.raises(JournalError, match="database or disk is full"):
            journal.add_node_events(
                [NodeEvent("n", 1, 0.0, "blamed", "x" * 100_000, None, False)] * 4
            )
        assert not journal._db.in_transaction
        journal.record(1, 0, {"state": "FAILED"})
        assert journal.decisions(job_id=1)[0].state == "FAILED"
    finally:
        journal.close()


# -- every read maps SQLite's errors -------------------------------------------------------


def _without_tables(path: Path) -> None:
    """A journal at the current schema version whose tables are gone."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version=4")
        db.commit()


def _corrupted(path: Path) -> None:
    """A journal whose pages after the first are garbage (a torn disk)."""
    _decided_journal(path)
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xa5" * (len(data) - 4096)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_without_tables, _corrupted])
@pytest.mark.parametrize(
    "read",
    [
        lambda j: j.decisions(),
        lambda j: j.decisions(node="node1"),
        lambda j: j.node_events(0.0),
        lambda j: j.node_events(0.0, "node1"),
        lambda j: j.decision_totals(),
        lambda j: j.lifecycle_events(),
    ],
)
def test_every_read_of_a_broken_journal_is_a_journal_error(
    damage: Callable[[Path], None], read: Callable[[Journal], object], tmp_path: Path
) -> None:
    """A corrupt file or one without tables: JournalError naming the file (exit 4)."""
    path = tmp_path / "journal.sqlite"
    damage(path)
    try:
        journal = Journal(path)
    except JournalError:
        return  # refused at open: as good
    try:
        with pytest.raises(JournalError, match=str(path)):
            read(journal)
    finally:
        journal.close()


# -- `history` and `lemons` as a process ---------------------------------------------------


def _cli(tmp_path: Path, journal: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "c.toml"
    config.write_text(f'[decision]\njournal = "{journal}"\n')
    return subprocess.run(
        [sys.executable, "-m", "slurm_triage", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "SLURM_TRIAGE_CONFIG": str(config)},
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["history", "--job", "9223372036854775808"],
        ["history", "--limit", "99999999999999999999999"],
        ["history", "--job", "²"],
        ["history", "--node", os.fsdecode(b"n\xff")],
    ],
)
def test_history_refuses_what_sqlite_cannot_bind_in_one_line(
    argv: list[str], tmp_path: Path
) -> None:
    """A job id or limit past 64 bits, a digit that is no ASCII digit, a node name that is
    not UTF-8: a usage error (exit 2) naming the argument, no traceback."""
    journal = tmp_path / "journal.sqlite"
    _decided_journal(journal)
    result = _cli(tmp_path, journal, *argv)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert f"argument {argv[1]}:" in result.stderr.splitlines()[-1]


def test_history_takes_the_largest_job_id_sqlite_holds(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    _decided_journal(journal)
    result = _cli(tmp_path, journal, "history", "--job", str(2**63 - 1))
    assert (result.returncode, result.stdout) == (0, f"no decisions recorded for job {2**63 - 1}\n")


@pytest.mark.parametrize("damage", [_without_tables, _corrupted])
@pytest.mark.parametrize("argv", [["history"], ["lemons"], ["metrics", "--controller"]])
def test_reports_on_a_broken_journal_exit_4_in_one_line(
    damage: Callable[[Path], None], argv: list[str], tmp_path: Path
) -> None:
    journal = tmp_path / "journal.sqlite"
    damage(journal)
    result = _cli(tmp_path, journal, *argv)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 4, result.stderr
    assert result.stderr.startswith(f"slurm-triage: error: journal {journal}")
