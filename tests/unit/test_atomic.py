"""slurm_triage.atomic: the one way a file is replaced (metrics, health state, evidence)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest

from slurm_triage.atomic import write_at, write_atomically
from slurm_triage.config import Config, PathsConfig
from slurm_triage.health_checks.reports import save_report
from slurm_triage.health_checks.result import RunReport


def _tmp_name(target: Path) -> Path:
    """The temporary name a writer used before each call drew its own: the one a planter
    would guess."""
    return target.with_name(f".{target.name}.{os.getpid()}.tmp")


def test_the_file_is_replaced_whole_with_its_mode_whatever_the_umask(tmp_path: Path) -> None:
    """Text or bytes, a new parent directory, the mode asked for under a 077 umask."""
    target = tmp_path / "new" / "state.json"
    old = os.umask(0o077)
    try:
        write_atomically(target, "first")
        write_atomically(target, b"second", mode=0o640)
    finally:
        os.umask(old)
    assert target.read_bytes() == b"second"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(target.parent) == ["state.json"]


def test_write_at_writes_in_the_directory_fd_and_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory-fd form (root's evidence store); a failed rename removes the temporary
    file and keeps the old content."""
    where = tmp_path / "records"
    where.mkdir()
    fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_at(fd, "rec.json", b"old")

        def full(*_args: object, **_kwargs: object) -> None:
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", full)
        with pytest.raises(OSError, match="No space"):
            write_at(fd, "rec.json", b"new")
    finally:
        os.close(fd)
    assert (where / "rec.json").read_bytes() == b"old"
    assert os.listdir(where) == ["rec.json"]


def test_a_health_report_is_never_written_through_a_planted_link(tmp_path: Path) -> None:
    """Root keeps each node's last report; a symlink planted where a temporary file might
    be (to /etc/shadow, say) is never written through, and the file it points at is
    untouched; it is not ours, so it stays."""
    config = Config(paths=PathsConfig(evidence_dir=str(tmp_path), state_dir=str(tmp_path)))
    target = tmp_path / "health" / "node2.last.json"
    target.parent.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    _tmp_name(target).symlink_to(victim)
    save_report(config, RunReport("node2", "cron", time.time(), 0.1, ()))
    assert victim.read_text() == "precious\n"
    assert '"node": "node2"' in target.read_text()
    assert _tmp_name(target).is_symlink()
