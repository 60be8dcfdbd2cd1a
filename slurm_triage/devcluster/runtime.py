"""The copy of slurm-triage that the dev cluster's hooks and jobs run, reachable by every user.

On a real cluster slurm-triage is installed where SlurmUser and every job user can run it
(/opt, a shared venv). A developer's venv often is not: its interpreter may live under
root's home (pyenv), mode 0700, and then EpilogSlurmctld (SlurmUser) and every job exit with
126 / `execve(): Permission denied`. So `up` builds `<root>/runtime`: a venv on the system's
own Python, with a copy of this package and its runtime dependencies, refreshed on each `up`
so hooks run the code under test.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from slurm_triage.errors import TriageError

# What the hooks and the wrapper import (pyproject's runtime dependencies, by module name).
MODULES = ("slurm_triage", "structlog", "psutil", "tenacity", "pynvml")
DISTRIBUTION = "slurm-triage"
# A world-executable interpreter of the same minor version as ours, for the compiled modules.
SYSTEM_PYTHONS = (f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}",)


class RuntimeBuildError(TriageError):
    """The runnable copy could not be built."""


def interpreter() -> str:
    """A Python every user may execute: the system's, else ours if it is reachable."""
    for candidate in SYSTEM_PYTHONS:
        if os.access(candidate, os.X_OK):
            return candidate
    own = os.path.realpath(sys.executable)
    if _world_reachable(Path(own)):
        return own
    raise RuntimeBuildError(
        f"no Python {sys.version_info.major}.{sys.version_info.minor} that unprivileged users "
        f"can run: {own} is not reachable by others and {SYSTEM_PYTHONS[0]} is absent "
        "(apt-get install python3)"
    )


def _world_reachable(path: Path) -> bool:
    """Every directory above it is searchable and the file readable by others."""
    for parent in path.parents:
        if not parent.stat().st_mode & 0o001:
            return False
    return bool(path.stat().st_mode & 0o004)


def build(root: Path, extra_paths: tuple[str, ...] = ()) -> Path:
    """(Re)build `root` and return its bin directory, holding python3 and our programs.
    `extra_paths` (e.g. where pyslurm is installed) are added to its import path."""
    venv, site = root / "venv", root / "site"
    if not (venv / "bin" / "python3").exists():
        result = subprocess.run(
            [interpreter(), "-m", "venv", "--without-pip", str(venv)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeBuildError(f"python -m venv {venv} failed: {result.stderr.strip()[-200:]}")
    fresh = root / "site.new"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    for name in MODULES:
        _copy_module(name, fresh)
    shutil.rmtree(site, ignore_errors=True)
    fresh.rename(site)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    purelib.mkdir(parents=True, exist_ok=True)
    (purelib / "slurm-triage-runtime.pth").write_text("\n".join((str(site), *extra_paths)) + "\n")
    bin_dir = venv / "bin"
    for script, target in _console_scripts().items():
        module, _, function = target.partition(":")
        path = bin_dir / script
        path.write_text(
            f"#!{bin_dir}/python3\nimport sys\nfrom {module} import {function}\n"
            f"sys.exit({function}())\n"
        )
        path.chmod(0o755)
    for path in (root, *root.rglob("*")):
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    return bin_dir


def _copy_module(name: str, into: Path) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise RuntimeBuildError(f"{name} is not importable here; install slurm-triage first")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    if spec.submodule_search_locations:
        source = Path(spec.origin).parent
        shutil.copytree(source, into / source.name, ignore=ignore)
    else:
        shutil.copy2(spec.origin, into / Path(spec.origin).name)


def _console_scripts() -> dict[str, str]:
    try:
        entries = importlib.metadata.distribution(DISTRIBUTION).entry_points
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeBuildError(f"{DISTRIBUTION} is not installed (make venv)") from None
    return {e.name: e.value for e in entries if e.group == "console_scripts"}
