"""Per-rank files of one wrapped run: the private scratch directory and the tee files.

The scratch directory (mkdtemp under $TMPDIR) holds the heartbeat file the hang detector
watches and the error file the trainer may write; it is removed when the wrapper exits.
Tee files are append-only copies of stdout/stderr, so a requeued job keeps both runs.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable

from slurm_triage.frozen import Frozen
from slurm_triage.wrapper.errorfile import ERROR_FILE_ENV, HEARTBEAT_ENV
from slurm_triage.wrapper.identity import StepIdentity

FILE_MODE = 0o644
DIR_MODE = 0o755


class Scratch(Frozen):
    """A private directory per rank for the heartbeat file and the error file."""

    path: str | None

    @classmethod
    def create(cls, identity: StepIdentity) -> Scratch:
        try:
            path = tempfile.mkdtemp(prefix=f"slurm-triage-{identity.job_id}.{identity.label}.")
        except OSError:
            return cls(None)  # no TMPDIR: no heartbeat, no error file, the job still runs
        with contextlib.suppress(OSError):
            open(os.path.join(path, "heartbeat"), "wb").close()
        return cls(path)

    @property
    def heartbeat(self) -> str | None:
        return os.path.join(self.path, "heartbeat") if self.path else None

    @property
    def error_file(self) -> str | None:
        return os.path.join(self.path, "error.json") if self.path else None

    def env(self) -> dict[str, str]:
        if not self.path:
            return {}
        return {HEARTBEAT_ENV: str(self.heartbeat), ERROR_FILE_ENV: str(self.error_file)}

    def remove(self) -> None:
        if self.path:
            shutil.rmtree(self.path, ignore_errors=True)


def open_tees(
    tee_dir: str, identity: StepIdentity, say: Callable[[str], None]
) -> tuple[int | None, int | None]:
    """Append-mode copies of stdout/stderr under `<tee_dir>/<job>/`; (None, None) if off."""
    if not tee_dir:
        return None, None
    base = os.path.join(tee_dir, identity.job_id, identity.label)
    try:
        os.makedirs(os.path.dirname(base), mode=DIR_MODE, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        out = os.open(f"{base}.out", flags, FILE_MODE)
    except OSError as exc:
        say(f"slurm-triage: cannot tee output to {base}.out: {exc.strerror}; not teeing")
        return None, None
    try:
        return out, os.open(f"{base}.err", flags, FILE_MODE)
    except OSError as exc:
        os.close(out)
        say(f"slurm-triage: cannot tee output to {base}.err: {exc.strerror}; not teeing")
        return None, None
