"""The textfile lock is shared by root and the directory's owner (SlurmUser on the
controller), and by no one else.

`slurm-triage nodes reconcile` (root) and the decision (SlurmUser) both write the
controller's textfile in SlurmUser's directory. Each case runs the other identity in a
forked child that became that user; the tests need root to do so.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from slurm_triage.atomic import write_atomically
from slurm_triage.observe.textfile import locked
from tests.as_user import run_as

SLURM_USER = 65534  # plays SlurmUser: owns the controller's textfile directory
OTHER_USER = 4243  # any other user on the controller

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become another user")


@pytest.fixture
def textfile_dir() -> Iterator[Path]:
    """node_exporter's textfile directory as docs/observability.md installs it: SlurmUser's,
    0755. Made outside pytest's own temporary tree (0700 above it) so the child users can
    reach it."""
    directory = Path(tempfile.mkdtemp(prefix="slurm-triage-textfile-", dir="/tmp"))
    directory.chmod(0o755)
    os.chown(directory, SLURM_USER, SLURM_USER)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def _as_user(uid: int, body: Callable[[], None]) -> str:
    """Run `body` in a child that became `uid`: "ok", or the error it raised in one line."""

    def done() -> str:
        body()
        return "ok"

    return run_as(uid, done)


def _write(textfile: Path, text: str) -> Callable[[], None]:
    def body() -> None:
        with locked(textfile, wait_s=0.2):
            write_atomically(textfile, text)

    return body


def test_slurm_user_takes_the_lock_and_replaces_the_textfile_after_root_wrote_it(
    textfile_dir: Path,
) -> None:
    """A lock left as root's, 0600 (what root made before this fix) and root's textfile: once
    root has written again (the next reconcile), the decision as SlurmUser takes the lock
    and renames its textfile over root's."""
    textfile = textfile_dir / "slurm_triage_controller.prom"
    lock = textfile_dir / "slurm_triage_controller.prom.lock"
    os.close(os.open(lock, os.O_RDWR | os.O_CREAT, 0o600))
    os.chown(lock, 0, 0)
    _write(textfile, "from_root 1\n")()  # `nodes reconcile`, as root
    assert textfile.stat().st_uid == 0

    said = _as_user(SLURM_USER, _write(textfile, "from_decision 2\n"))

    assert said == "ok"
    assert textfile.read_text() == "from_decision 2\n"
    assert textfile.stat().st_uid == SLURM_USER


def test_a_lock_root_creates_is_the_directory_owners_and_refuses_others(
    textfile_dir: Path,
) -> None:
    """Root's new lock is SlurmUser's, 0600: SlurmUser takes it, another user cannot open it
    (so cannot hold it to stop the writers)."""
    textfile = textfile_dir / "slurm_triage_controller.prom"
    _write(textfile, "from_root 1\n")()
    info = (textfile_dir / "slurm_triage_controller.prom.lock").stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (SLURM_USER, 0o600)

    assert _as_user(SLURM_USER, _write(textfile, "from_decision 2\n")) == "ok"
    refused = _as_user(OTHER_USER, _write(textfile, "from_other 3\n"))

    assert refused.startswith("PermissionError:")
    assert textfile.read_text() == "from_decision 2\n"


def test_a_lock_in_roots_own_directory_stays_roots(tmp_path: Path) -> None:
    """The node ledger's lock, in root's state directory: root's, 0600, as before."""
    with locked(tmp_path / "node1.json"):
        pass
    info = (tmp_path / "node1.json.lock").stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)


def test_a_file_linked_in_as_the_lock_is_never_handed_over(
    textfile_dir: Path, tmp_path: Path
) -> None:
    """A hard link to root's file planted at the lock's name (by whoever can write the
    directory) is locked as it is, never chowned to the directory's owner."""
    secret = tmp_path / "secret"
    secret.write_text("root's\n")
    secret.chmod(0o600)
    os.link(secret, textfile_dir / "slurm_triage_controller.prom.lock")

    with locked(textfile_dir / "slurm_triage_controller.prom"):
        pass

    info = secret.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    assert secret.read_text() == "root's\n"


def test_a_symlink_planted_as_the_lock_is_not_followed(textfile_dir: Path, tmp_path: Path) -> None:
    """A symlink at the lock's name is refused (ELOOP), its target left alone."""
    target = tmp_path / "target"
    (textfile_dir / "slurm_triage_controller.prom.lock").symlink_to(target)

    with pytest.raises(OSError), locked(textfile_dir / "slurm_triage_controller.prom"):
        pass

    assert not target.exists()
