"""Loading pyslurm safely: found, version-matched and probed in a child before this process
imports it.

Importing pyslurm initialises libslurm, which reads slurm.conf once per process (from
$SLURM_CONF, its built-in default path, or configless DNS SRV records) and, when it finds
none, calls `fatal()`: the whole process exits 1 with "fatal: Could not establish a
configuration source". A Prolog, Epilog or health check must never die that way just
because pyslurm is installed, so before importing it here we

1. find it without importing it (`importlib.util.find_spec`) and read its version from its
   metadata; its major.minor must equal the running Slurm's (`scontrol --version`);
2. refuse a SLURM_CONF that names a file we cannot read;
3. import and initialise it in a child interpreter under the door's deadline; a child that
   exits (libslurm's fatal) or hangs is a `BackendMismatch` naming libslurm's own words.

The answer is kept per (interpreter, pyslurm location, slurm.conf) for the life of the
process. Only then is pyslurm imported here, with auto-init disabled and libslurm
initialised with the slurm.conf the caller named (`open_door(env=...)`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from slurm_triage.slurm.errors import BackendMismatch, SlurmError
from slurm_triage.slurm.runner import run_bounded

# The interpreter that runs the probe; tests point it at a stand-in (the boundary).
PYTHON = sys.executable
# pyslurm's __init__ calls slurm_init() on import unless this is set (pyslurm >= 23.2).
_NO_AUTO_INIT = "PYSLURM_DISABLE_AUTO_INIT"
_MAX_REASON_CHARS = 300

# Run by the probe's child: import pyslurm from the given folder only, initialise libslurm
# with the given slurm.conf ("" = libslurm's own choice), print what it found.
_PROBE_CODE = """\
import json, os, sys
sys.path.insert(0, sys.argv[1])
os.environ["PYSLURM_DISABLE_AUTO_INIT"] = "1"
import pyslurm
pyslurm.slurm_init(sys.argv[2] or None)
print(json.dumps({"version": pyslurm.__version__, "cluster": pyslurm.settings.LOCAL_CLUSTER}))
"""


@dataclass(frozen=True)
class Installed:
    """Where pyslurm is, and its version, read without importing it."""

    version: str
    location: str  # the folder holding the pyslurm package (a sys.path entry)


@dataclass(frozen=True)
class ProbeResult:
    """What the child found: pyslurm's version and the cluster libslurm is configured for."""

    version: str
    cluster: str


class _ProbeTimedOut(BackendMismatch):
    """The probe outlived its deadline: a slow moment, not an answer, so it is not kept."""


_probes: dict[tuple[str, str, str], ProbeResult | BackendMismatch] = {}
_lock = threading.Lock()
_loaded: tuple[ModuleType, str] | None = None  # (pyslurm, the slurm.conf it was initialised with)


def installed() -> Installed:
    """pyslurm's location and version; BackendMismatch when it is not installed."""
    spec = importlib.util.find_spec("pyslurm")
    if spec is None or not spec.submodule_search_locations:
        raise BackendMismatch("pyslurm is not importable (not installed for this Python)")
    location = str(Path(next(iter(spec.submodule_search_locations))).parent)
    return Installed(version=_version(location), location=location)


def _version(location: str) -> str:
    try:
        return importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:  # built in place, no metadata: pyslurm/version.py says it
        text = (Path(location) / "pyslurm" / "version.py").read_text()
    except OSError:
        text = ""
    match = re.search(r"__version__\s*=\s*['\"]([^'\"]+)['\"]", text)
    if not match:
        raise BackendMismatch(f"pyslurm in {location} has no readable version")
    return match.group(1)


def major_minor(version: str) -> tuple[int, int]:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise BackendMismatch(f"unparsable version {version!r}") from None


def check_compatible(pyslurm_version: str, slurm_version: str) -> None:
    """Raise BackendMismatch unless pyslurm was built for this Slurm's major.minor."""
    if major_minor(pyslurm_version) != major_minor(slurm_version):
        raise BackendMismatch(
            f"pyslurm {pyslurm_version} is built for Slurm "
            f"{'.'.join(map(str, major_minor(pyslurm_version)))}, but this cluster runs Slurm "
            f"{slurm_version}; using the command-line backend instead"
        )


def slurm_conf_for(env: dict[str, str] | None) -> str:
    """The slurm.conf libslurm would read for this environment ("" = its default search)."""
    return (os.environ if env is None else env).get("SLURM_CONF", "")


def check_readable(conf: str) -> None:
    if conf and not os.access(conf, os.R_OK):
        raise BackendMismatch(f"pyslurm: SLURM_CONF={conf} is not a readable file")


def probe(
    found: Installed,
    conf: str,
    *,
    env: dict[str, str] | None,
    timeout_s: float,
    python: str | None = None,
) -> ProbeResult:
    """Import and initialise pyslurm in a child interpreter; the answer is kept per
    (interpreter, location, conf), except a timeout, which may pass. BackendMismatch when
    the child fails, with libslurm's own last words."""
    python = python or PYTHON
    key = (python, found.location, conf)
    with _lock:
        cached = _probes.get(key)
    if isinstance(cached, BackendMismatch):
        raise BackendMismatch(str(cached))
    if cached is not None:
        return cached
    check_readable(conf)
    try:
        result = _run_probe(python, found.location, conf, env, timeout_s)
    except BackendMismatch as exc:
        if not isinstance(exc, _ProbeTimedOut):
            with _lock:
                _probes[key] = exc
        raise
    with _lock:
        _probes[key] = result
    return result


def _run_probe(
    python: str, location: str, conf: str, env: dict[str, str] | None, timeout_s: float
) -> ProbeResult:
    if not python:
        raise BackendMismatch("pyslurm: no Python interpreter to probe it with")
    child_env = dict(os.environ if env is None else env)
    if conf:
        child_env["SLURM_CONF"] = conf
    command = [python, "-I", "-S", "-c", _PROBE_CODE, location, conf]
    try:
        done = run_bounded(command, timeout_s, child_env)
    except SlurmError as exc:  # the interpreter itself is missing or not executable
        raise BackendMismatch(f"pyslurm probe: {exc}") from None
    where = f"SLURM_CONF={conf}" if conf else "SLURM_CONF unset"
    if done is None:
        raise _ProbeTimedOut(
            f"pyslurm did not finish loading within {timeout_s:g}s ({where}); "
            "using the command-line backend"
        )
    if done.returncode != 0:
        raise BackendMismatch(
            f"pyslurm cannot initialise libslurm here ({where}): {_last_words(done.stderr)}"
        )
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        return ProbeResult(version=str(answer["version"]), cluster=str(answer["cluster"]))
    except (ValueError, IndexError, KeyError, TypeError):
        raise BackendMismatch(
            f"pyslurm probe printed no answer ({where}): {_last_words(done.stderr)}"
        ) from None


def _last_words(stderr: str) -> str:
    """libslurm's fatal line if there is one, else the last line (a Python traceback's)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    fatal = [line for line in lines if "fatal:" in line]
    text = (fatal or lines or ["exited without a message"])[-1]
    return text[:_MAX_REASON_CHARS]


def forget_probes() -> None:
    """Drop the kept probe answers (tests; an operator's long-lived process after a fix)."""
    with _lock:
        _probes.clear()


def initialise(conf: str) -> ModuleType:
    """pyslurm imported into this process with libslurm initialised from conf, once.

    libslurm reads its configuration once per process, so a second door that names
    another slurm.conf is refused rather than silently talking to the first cluster. When
    the environment has no SLURM_CONF, conf is exported so that libslurm's later lookups
    and our children agree with it."""
    global _loaded
    with _lock:
        if _loaded is None and "pyslurm" in sys.modules:
            _loaded = _adopt(sys.modules["pyslurm"], conf)
        if _loaded is not None:
            module, first = _loaded
            if _same_file(first, conf):
                return module
            raise BackendMismatch(
                f"pyslurm: libslurm in this process was initialised with "
                f"{_describe(first)} and cannot switch to {_describe(conf)} (libslurm reads "
                "its configuration once per process)"
            )
        module = _import_and_init(conf)
        _loaded = (module, conf)
        return module


def _adopt(module: ModuleType, conf: str) -> tuple[ModuleType, str]:
    """pyslurm imported by someone else: its auto-init read this process's SLURM_CONF,
    unless auto-init was off, and then it is initialised here (the probe passed)."""
    if getattr(getattr(module, "settings", None), "LOCAL_CLUSTER", "") != "UNKNOWN":
        return module, os.environ.get("SLURM_CONF", "")
    try:
        module.slurm_init(conf or None)
    except Exception as exc:
        raise BackendMismatch(f"pyslurm cannot be initialised: {exc}") from None
    return module, conf


def _import_and_init(conf: str) -> ModuleType:
    if conf and "SLURM_CONF" not in os.environ:
        os.environ["SLURM_CONF"] = conf
    saved_flag = os.environ.get(_NO_AUTO_INIT)
    # pyslurm sets RTLD_GLOBAL|RTLD_DEEPBIND for its own extensions; later imports
    # (NVML's ctypes, numpy) keep the interpreter's usual flags.
    saved_dlopen = sys.getdlopenflags()
    os.environ[_NO_AUTO_INIT] = "1"
    try:
        import pyslurm  # type: ignore[import-not-found]

        pyslurm.slurm_init(conf or None)
    except Exception as exc:  # ImportError, or libslurm refusing (the probe passed)
        raise BackendMismatch(f"pyslurm cannot be loaded: {type(exc).__name__}: {exc}") from None
    finally:
        sys.setdlopenflags(saved_dlopen)
        if saved_flag is None:
            os.environ.pop(_NO_AUTO_INIT, None)
        else:
            os.environ[_NO_AUTO_INIT] = saved_flag
    return pyslurm  # type: ignore[no-any-return]


def _same_file(a: str, b: str) -> bool:
    return a == b or bool(a and b and os.path.realpath(a) == os.path.realpath(b))


def _describe(conf: str) -> str:
    return f"SLURM_CONF={conf}" if conf else "libslurm's default slurm.conf"


def load(
    slurm_version: Callable[[], str], *, env: dict[str, str] | None, timeout_s: float
) -> ModuleType:
    """pyslurm for this process: installed, built for the running Slurm (slurm_version()
    asks it, only once pyslurm is found) and probed in a child first; BackendMismatch
    (one line, why) wherever it cannot be used."""
    found = installed()
    try:
        running = slurm_version()
    except SlurmError as exc:
        raise BackendMismatch(f"cannot check the Slurm version for pyslurm: {exc}") from None
    check_compatible(found.version, running)
    conf = slurm_conf_for(env)
    probe(found, conf, env=env, timeout_s=timeout_s)
    return initialise(conf)
