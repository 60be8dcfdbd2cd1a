"""Shared fixtures: global-state resets for every test, the real Slurm cluster for
integration tests (started once per session, only when an integration test asks)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """Each test starts with structlog's defaults, whatever an earlier test configured."""
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _no_host_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never read the host's /etc/slurm-triage/config.toml or env overrides."""
    for var in list(os.environ):
        if var.startswith("SLURM_TRIAGE__"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(tmp_path / "absent-config.toml"))
    (tmp_path / "absent-config.toml").write_text("")


@pytest.fixture(scope="session")
def devcluster() -> Iterator[object]:
    """The real local Slurm: up once for the session, torn down at its end."""
    from slurm_triage.devcluster import cluster

    layout = cluster.up(timeout_s=90)
    try:
        yield layout
    finally:
        if not os.environ.get("SLURM_TRIAGE_KEEP_DEVCLUSTER"):
            cluster.down(layout)
