"""Backend choice: pyslurm only where it matches the running Slurm, else the command line."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from slurm_triage.config import SlurmConfig
from slurm_triage.slurm import BackendMismatch, open_door
from slurm_triage.slurm.pyslurm_backend import check_compatible

HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None


@pytest.fixture
def fake_scontrol(tmp_path: Path) -> Path:
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\necho 'slurm-wlm 22.05.8'\n")
    script.chmod(0o755)
    return tmp_path


def test_version_match_rules() -> None:
    """Same major.minor is compatible; PyPI's 25.11 against Debian's 22.05 is not."""
    check_compatible("22.5.1", "22.05.8")
    with pytest.raises(BackendMismatch, match=r"pyslurm 25.11.0 is built for Slurm 25.11.*22.05.8"):
        check_compatible("25.11.0", "22.05.8")


@pytest.mark.skipif(HAVE_PYSLURM, reason="this host has pyslurm installed")
def test_auto_falls_back_to_cli_without_pyslurm(fake_scontrol: Path) -> None:
    """With pyslurm absent, auto picks the command-line backend."""
    assert open_door(SlurmConfig(bin_dir=str(fake_scontrol))).name == "cli"


@pytest.mark.skipif(HAVE_PYSLURM, reason="this host has pyslurm installed")
def test_forcing_pyslurm_without_it_is_a_clear_error(fake_scontrol: Path) -> None:
    """backend = "pyslurm" where it cannot load is an error, not a silent fallback."""
    with pytest.raises(BackendMismatch, match="pyslurm is not importable"):
        open_door(SlurmConfig(bin_dir=str(fake_scontrol), backend="pyslurm"))


def test_cli_backend_never_imports_pyslurm(fake_scontrol: Path) -> None:
    """backend = "cli" is the command line, whatever is installed."""
    assert open_door(SlurmConfig(bin_dir=str(fake_scontrol), backend="cli")).name == "cli"
