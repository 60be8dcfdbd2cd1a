"""The config file's parsed copy beside it, so that reading an unchanged config imports no
TOML parser (issue 20).

Every rank of every job loads the config, and `import tomllib` (with re, string, datetime and
eight compiled regexes) cost it 9-13 ms, a third of what a wrapped rank may spend on its
start. So the file's owner keeps `.<name>.parsed.json` beside the file `<name>`: one JSON
object {"format": 1, "source": the file's whole text, "parsed": what tomllib made of it},
read with json's C accelerator (slurm_triage.json_codec).

It is an acceleration only, never a second source of settings: it is used only when its
"source" is the file's text as just read, so a stale, missing, truncated or garbled copy
means the file is parsed, never other settings. Its trust is the file's: it is used only
when it is a regular file (opened O_NOFOLLOW | O_NONBLOCK: no link followed, no FIFO waited
on) owned by the file's owner and writable by no group or other, of at most
MAX_CACHE_BYTES. Whoever can write it as that owner could rewrite the file itself; another
user who can write the directory (a sticky /tmp) can plant a copy that no one reads. It holds
the file's whole text, so it is readable by no one the file is not readable by: it is written
with the file's mode less any write bit for group or other (a 0600 file, which may hold a
secret, gets a 0600 copy; a 0644 one a 0644 copy), and a copy that more may read than that
(written before the file's mode was narrowed) is taken for stale and written again.

Only a process whose effective uid owns the file writes the copy (root for
/etc/slurm-triage/config.toml: a Prolog, the node agent at each refresh turn, or
`slurm-triage config cache` when an image is built for a read-only /etc), after a parse, only
for settings the caller's `check` accepts (config passes config.check_settings: an invalid
file gets no copy, `config check` and `config cache` say why, and every reader parses it and
fails the same way), and only when JSON holds the parsed value exactly (a TOML date or a
NaN does not: the file is then parsed each time). The write is atomic (slurm_triage.atomic)
and best effort: a failure is the CacheResult the caller may log, never an error.

Standard library os and stat only, plus json_codec, atomic, errors and frozen: no tomllib,
json, re or typing while the copy is fresh.
"""

from __future__ import annotations

import os
import stat

from slurm_triage import json_codec
from slurm_triage.atomic import read_owned, write_atomically
from slurm_triage.errors import TriageError, cannot_read
from slurm_triage.frozen import Frozen

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    # Raises a TriageError (config's ConfigError) naming what is wrong with the parsed
    # settings: config.check_settings. This module cannot import config (config imports it).
    SettingsCheck = Callable[[dict[str, Any]], None]

FORMAT = 1
# A copy larger than this is taken for stale, and none is written: the file is parsed.
MAX_CACHE_BYTES = 4 * 1024 * 1024
# The most a copy may grant of its file's mode: never write for group or other.
_COPY_MODE_MAX = 0o644

_dumps = json_codec.dumps_with(ensure_ascii=False, separators=(",", ":"))
_loads = json_codec.loads_with()


class CacheOutcome:
    """What became of the parsed copy when the config file was read (closed set)."""

    FRESH = "fresh"  # the copy holds the file's text: used, nothing written
    WRITTEN = "written"  # the file was parsed and its copy written anew
    NOT_OWNER = "not_owner"  # parsed; the copy is left to the file's owner
    NOT_EXACT = "not_exact"  # parsed; JSON cannot hold the value exactly (a TOML date)
    TOO_BIG = "too_big"  # parsed; the copy would exceed MAX_CACHE_BYTES
    FAILED = "failed"  # parsed; writing the copy failed (a read-only /etc, a full disk)
    # The file cannot be read or parsed, or the caller's check refuses its settings: no
    # copy is written for it (refresh_cache only).
    INVALID = "invalid"


class CacheResult(Frozen):
    """An outcome (CacheOutcome) and its one-line reason."""

    outcome: str
    reason: str = ""


class ConfigFileError(TriageError, ValueError):
    """The config file cannot be read or parsed; the message is one line naming it
    (config.read_toml raises it as a ConfigError: config imports this module, not the
    other way)."""


def cache_path(path: str | os.PathLike[str]) -> str:
    """Where the parsed copy of the config file `path` lives: `.<name>.parsed.json` beside it."""
    head, name = os.path.split(os.fspath(path))
    return os.path.join(head, f".{name}.parsed.json")


def read_config_file(
    path: str | os.PathLike[str], check: SettingsCheck | None = None
) -> dict[str, Any]:
    """The config file's TOML as tomllib parses it: from its fresh parsed copy, else parsed
    (and the copy written when this process owns the file and `check` accepts the
    settings). ConfigFileError, one line naming the file, when it cannot be read or is not
    UTF-8 TOML."""
    return _read(path, check)[0]


def refresh_cache(path: str | os.PathLike[str], check: SettingsCheck | None = None) -> CacheResult:
    """Bring the config file's parsed copy up to date: one read of the file and of the copy,
    a parse and a write only when it is stale. For root's long-lived processes (the node
    agent) and image builds; never raises for an expected failure (INVALID, FAILED ...).
    With `check`, a fresh copy of a file whose settings it refuses (a copy written before
    they were checked) is INVALID too, so that `config cache` never calls such a file
    ready."""
    try:
        parsed, result = _read(path, check)
    except ConfigFileError as exc:
        return CacheResult(CacheOutcome.INVALID, str(exc))
    if result.outcome == CacheOutcome.FRESH:
        refused = _refused(path, parsed, check)
        if refused is not None:
            return CacheResult(CacheOutcome.INVALID, refused)
    return result


def _read(
    path: str | os.PathLike[str], check: SettingsCheck | None
) -> tuple[dict[str, Any], CacheResult]:
    text, owner_uid, file_mode = _read_text(path)
    copy = cache_path(path)
    copy_mode = file_mode & _COPY_MODE_MAX
    parsed = _cached(copy, text, owner_uid, copy_mode)
    if parsed is not None:
        return parsed, CacheResult(CacheOutcome.FRESH, copy)
    parsed = _parse(path, text)
    return parsed, _store(path, copy, text, parsed, owner_uid, copy_mode, check)


def _read_text(path: str | os.PathLike[str]) -> tuple[str, int, int]:
    """The file's text, its owner's uid and its permission bits (of the file opened, links
    followed: the admin's)."""
    try:
        with open(path, "rb") as fh:
            info = os.fstat(fh.fileno())
            raw = fh.read()
        return raw.decode("utf-8"), info.st_uid, stat.S_IMODE(info.st_mode)
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        message = cannot_read(path, exc, missing="config file", not_a="a config file")
        raise ConfigFileError(message) from None


def _parse(path: str | os.PathLike[str], text: str) -> dict[str, Any]:
    import tomllib  # only when the copy is stale or missing: its import is the cost saved

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables by recursion
        raise ConfigFileError(f"{path}: invalid TOML: nested too deeply") from None


def _cached(copy: str, text: str, owner_uid: int, copy_mode: int) -> dict[str, Any] | None:
    """The parsed value the copy holds for `text`; None when it is missing, not to be
    trusted (a link, a FIFO, another owner, writable by others, too big), open to more than
    `copy_mode` allows (read by those who may not read the file) or stale."""
    raw = read_owned(copy, owner_uid, max_bytes=MAX_CACHE_BYTES, forbidden_mode=~copy_mode & 0o7777)
    if raw is None:
        return None
    try:
        document = _loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):  # not UTF-8, not JSON, nested past the stack
        return None
    if type(document) is not dict:
        return None
    version, parsed = document.get("format"), document.get("parsed")
    if type(version) is not int or version != FORMAT or document.get("source") != text:
        return None
    return parsed if type(parsed) is dict else None


def _store(
    path: str | os.PathLike[str],
    copy: str,
    text: str,
    parsed: dict[str, Any],
    owner_uid: int,
    copy_mode: int,
    check: SettingsCheck | None,
) -> CacheResult:
    """Write the copy, `copy_mode`, when this process owns the file, `check` accepts its
    settings and JSON holds `parsed` exactly."""
    euid = os.geteuid()
    if euid != owner_uid:
        return CacheResult(
            CacheOutcome.NOT_OWNER,
            f"the config file is uid {owner_uid}'s and only its owner writes {copy}; "
            f"this process is uid {euid}",
        )
    refused = _refused(path, parsed, check)
    if refused is not None:
        return CacheResult(CacheOutcome.INVALID, refused)
    try:
        data = _dumps({"format": FORMAT, "source": text, "parsed": parsed}).encode("utf-8")
        exact = _same(_loads(data.decode("utf-8"))["parsed"], parsed)
    except (TypeError, ValueError, RecursionError):  # a date or time has no JSON form
        exact = False
    if not exact:
        return CacheResult(
            CacheOutcome.NOT_EXACT,
            "the config holds a value JSON cannot hold exactly (a TOML date or time, a NaN)",
        )
    if len(data) > MAX_CACHE_BYTES:
        return CacheResult(CacheOutcome.TOO_BIG, f"{copy} would be over {MAX_CACHE_BYTES} bytes")
    try:
        write_atomically(copy, data, mode=copy_mode)
    except OSError as exc:
        return CacheResult(CacheOutcome.FAILED, f"{copy}: {exc.strerror or exc}")
    return CacheResult(CacheOutcome.WRITTEN, copy)


def _refused(
    path: str | os.PathLike[str], parsed: dict[str, Any], check: SettingsCheck | None
) -> str | None:
    """The one line saying why `check` refuses the file's settings, or None."""
    if check is None:
        return None
    try:
        check(parsed)
    except (TriageError, RecursionError) as exc:  # a ConfigError; a value nested past repr
        return f"{path}: {exc}"
    return None


def _same(read_back: object, parsed: object) -> bool:
    """Equal and of the same types all through: 1 stays an int, 1.0 a float, true a bool
    (`==` alone takes 1 == 1.0 == True)."""
    if type(read_back) is not type(parsed):
        return False
    if isinstance(parsed, dict) and isinstance(read_back, dict):
        return read_back.keys() == parsed.keys() and all(
            _same(read_back[key], value) for key, value in parsed.items()
        )
    if isinstance(parsed, list) and isinstance(read_back, list):
        return len(read_back) == len(parsed) and all(map(_same, read_back, parsed))
    return read_back == parsed
