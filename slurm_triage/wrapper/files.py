"""Per-rank files of one wrapped run: the private scratch directory and the tee files.

The scratch directory (private, 0700, under $TMPDIR) holds the heartbeat file the hang
detector watches and the error file the trainer may write; it is removed when the wrapper
exits. It is made and removed with os alone, not tempfile and shutil: those two imports
(random, hashlib's sha512, bz2, lzma, zlib...) were ~6 ms of every wrapped rank's start
(issue 20); shutil.rmtree is imported only for a directory the job left more in.
Tee files are append-only copies of stdout/stderr, so a requeued job keeps both runs.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Mapping

from slurm_triage.frozen import Frozen
from slurm_triage.wrapper.errorfile import ERROR_FILE_ENV, HEARTBEAT_ENV
from slurm_triage.wrapper.identity import StepIdentity

FILE_MODE = 0o644
DIR_MODE = 0o755
# tempfile.gettempdir's candidates, in its order: the environment's, then the usual places.
TMP_VARIABLES = ("TMPDIR", "TEMP", "TMP")
TMP_FALLBACKS = ("/tmp", "/var/tmp", "/usr/tmp")
ATTEMPTS_PER_DIRECTORY = 100  # names are 48 random bits: a clash is a squatter, not chance


class Scratch(Frozen):
    """A private directory per rank for the heartbeat file and the error file."""

    path: str | None

    @classmethod
    def create(cls, identity: StepIdentity, env: Mapping[str, str] | None = None) -> Scratch:
        prefix = f"slurm-triage-{identity.job_id}.{identity.label}."
        path = make_private_dir(prefix, os.environ if env is None else env)
        if path is None:
            return cls(None)  # nowhere to write: no heartbeat, no error file, the job runs
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
        if not self.path:
            return
        for name in ("heartbeat", "error.json"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.path, name))
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            pass
        except OSError:  # the job left more there
            import shutil

            shutil.rmtree(self.path, ignore_errors=True)


def make_private_dir(prefix: str, env: Mapping[str, str]) -> str | None:
    """A new directory only its owner can use (0700), named `prefix` and 48 random bits, in
    the first temporary directory that takes it, as tempfile.mkdtemp in gettempdir() would
    make it; None where none does."""
    candidates = [env[name] for name in TMP_VARIABLES if env.get(name)]
    candidates += TMP_FALLBACKS
    with contextlib.suppress(OSError):
        candidates.append(os.getcwd())
    for base in candidates:
        for _ in range(ATTEMPTS_PER_DIRECTORY):
            path = os.path.join(os.path.abspath(base), prefix + os.urandom(6).hex())
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                continue
            except OSError:
                break  # not there: the next candidate
            return path
    return None


def open_tees(
    tee_dir: str, identity: StepIdentity, say: Callable[[str], None]
) -> tuple[int | None, int | None]:
    """Append-mode copies of stdout/stderr under `<tee_dir>/<job>/`; (None, None) if off."""
    if not tee_dir:
        return None, None
    job_dir = os.path.join(tee_dir, identity.job_id)
    base = os.path.join(job_dir, identity.label)
    # No link is followed, and a terminal planted as a tee file does not become ours.
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY
    try:
        os.makedirs(job_dir, mode=DIR_MODE, exist_ok=True)
        refusal = not_ours(job_dir)
        if refusal:
            say(f"slurm-triage: cannot tee output to {job_dir}: it {refusal}; not teeing")
            return None, None
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


def not_ours(path: str) -> str:
    """Why `path` is no directory of ours to write in, as a predicate ("is not a
    directory"), "" when it is one. In a shared sticky directory (a tee_dir, the evidence
    directory) another user can make the next job's directory first, to read what we write
    or to plant links in it: it must be ours or root's."""
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        return "is not a directory"
    if info.st_uid not in (os.geteuid(), 0):
        return f"belongs to uid {info.st_uid}, not to us"
    return ""
