"""The wrapper's per-rank scratch directory, made and removed with os alone (issue 20):
what tempfile.mkdtemp and shutil.rmtree did for it, where they did it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_triage.wrapper import files
from slurm_triage.wrapper.files import Scratch, make_private_dir
from slurm_triage.wrapper.identity import StepIdentity

RANK = StepIdentity(job_id="42", node="n1", step="0", task="3", rank=3)


def test_private_directory_under_tmpdir(tmp_path: Path) -> None:
    """As mkdtemp: under $TMPDIR, 0700 (umask 022 taken off nothing), a fresh name each
    time that starts with the rank's label; the heartbeat file is there for the detector."""
    first = Scratch.create(RANK, {"TMPDIR": str(tmp_path)})
    second = Scratch.create(RANK, {"TMPDIR": str(tmp_path)})
    assert first.path and second.path and first.path != second.path
    for made in (first.path, second.path):
        assert Path(made).parent == tmp_path
        assert Path(made).name.startswith("slurm-triage-42.n1.0.3.")
        assert stat.S_IMODE(os.stat(made).st_mode) == 0o700 & ~_umask()
    assert first.heartbeat and os.path.exists(first.heartbeat)
    assert first.env() == {
        "SLURM_TRIAGE_HEARTBEAT": f"{first.path}/heartbeat",
        "SLURM_TRIAGE_ERROR_FILE": f"{first.path}/error.json",
    }


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


def test_the_next_candidate_when_tmpdir_is_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$TMPDIR gone (a node's per-job directory removed early): the next of gettempdir's
    candidates; none writable: no scratch directory, and the job still runs (None)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(files, "TMP_FALLBACKS", (str(elsewhere),))
    made = make_private_dir("p.", {"TMPDIR": str(tmp_path / "gone"), "TMP": ""})
    assert made is not None and Path(made).parent == elsewhere
    monkeypatch.setattr(files, "TMP_FALLBACKS", ())
    monkeypatch.setattr(os, "getcwd", lambda: str(tmp_path / "gone-too"))
    assert make_private_dir("p.", {"TMPDIR": str(tmp_path / "gone")}) is None
    assert Scratch.create(RANK, {"TMPDIR": str(tmp_path / "gone")}).path is None


def test_a_squatted_name_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another user who made the next name first (a shared /tmp) gets nothing of ours: the
    name is tried again with new random bits, never taken over."""
    draws = iter([b"\x00" * 6, b"\x00" * 6, b"\x01" * 6])
    monkeypatch.setattr(os, "urandom", lambda n: next(draws))
    squatted = tmp_path / ("p." + "00" * 6)
    squatted.mkdir(mode=0o777)
    made = make_private_dir("p.", {"TMPDIR": str(tmp_path)})
    assert made == str(tmp_path / ("p." + "01" * 6))
    assert stat.S_IMODE(squatted.stat().st_mode) == 0o777 & ~_umask()


def test_removed_with_what_the_job_left(tmp_path: Path) -> None:
    """Its two files and the directory go; a directory the trainer filled with more (its
    own files, a sub-directory, a link out) goes too, without following the link."""
    plain = Scratch.create(RANK, {"TMPDIR": str(tmp_path)})
    assert plain.error_file
    Path(plain.error_file).write_text("{}")
    plain.remove()
    assert plain.path and not os.path.exists(plain.path)

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    filled = Scratch.create(RANK, {"TMPDIR": str(tmp_path)})
    assert filled.path
    (Path(filled.path) / "sub").mkdir()
    (Path(filled.path) / "sub" / "x").write_text("x")
    (Path(filled.path) / "link").symlink_to(outside)
    filled.remove()
    assert not os.path.exists(filled.path)
    assert (outside / "keep").read_text() == "mine"
    Scratch(None).remove()  # nothing made: nothing to do
    plain.remove()  # already gone: no error
