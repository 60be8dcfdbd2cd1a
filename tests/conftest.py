"""Shared fixtures: global-state resets for every test, the real Slurm cluster for
integration tests (started once per session, only when an integration test asks)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import settings

from slurm_triage.logs import reset_logging

FIXTURES = Path(__file__).parent / "fixtures"

# Hypothesis: a fuzz failure must fail the same way on the next run and on a laptop. The
# default profile "repro" derandomizes (each test's examples are seeded from a hash of its
# source, so they change only with the test, Hypothesis or Python) and prints the
# @reproduce_failure blob of a failure. HYPOTHESIS_PROFILE=explore draws fresh random
# examples to hunt for new bugs; a failure it finds is pinned with its blob or @example.
# Settings objects in the tests (max_examples, deadline) inherit the loaded profile.
settings.register_profile("repro", derandomize=True, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repro"))

# Per-test timeouts above pyproject's default (pytest-timeout), by marker.
INTEGRATION_TIMEOUT_S = 900
SLOW_TIMEOUT_S = 1800


def pytest_configure(config: pytest.Config) -> None:
    """A session on the pyslurm backend (`make test-integration BACKEND=pyslurm`) installs
    pyslurm before collection, as the dev cluster would at its start: on a fresh machine
    the pyslurm tests would otherwise find none and be skipped."""
    if os.environ.get("SLURM_TRIAGE_DEVCLUSTER_BACKEND") == "pyslurm":
        from slurm_triage.devcluster import cluster

        cluster.ensure_pyslurm(cluster.default_layout())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Integration and slow tests get their longer timeout unless they set their own."""
    for item in items:
        if item.get_closest_marker("timeout") is not None:
            continue
        if item.get_closest_marker("slow") is not None:
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        elif item.get_closest_marker("integration") is not None:
            item.add_marker(pytest.mark.timeout(INTEGRATION_TIMEOUT_S))


@pytest.fixture(autouse=True)
def _reset_logging() -> Iterator[None]:
    """Each test starts with logging unconfigured and structlog's defaults, whatever an
    earlier test configured."""
    yield
    structlog.reset_defaults()
    reset_logging()


@pytest.fixture(autouse=True)
def _no_host_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Tests never read the host's /etc/slurm-triage/config.toml or env overrides."""
    for var in list(os.environ):
        if var.startswith("SLURM_TRIAGE__"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(tmp_path / "absent-config.toml"))
    (tmp_path / "absent-config.toml").write_text("")
    # A test reading this host's /dev/kmsg as root never writes a clock mark into it (nor
    # keeps the measure in /run), in the programs it starts or in this process, whatever
    # config it builds (test_kmsg_clock fakes the device).
    monkeypatch.setenv("SLURM_TRIAGE__HEALTH__KERNEL_CLOCK_CACHE", "")
    from slurm_triage.health_checks import kernel_log, kmsg_clock

    def refused(path: str, text: str) -> None:
        raise PermissionError(errno.EPERM, "a test never writes the host's kernel log", path)

    monkeypatch.setattr(kmsg_clock, "write_record", refused)
    monkeypatch.setattr(kernel_log, "_tried", {})


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


def load_by_path(name: str, path: Path):  # type: ignore[no-untyped-def]
    """A helper module of a test data folder (not a package), loaded once from its file (one
    module, so its classes are the same for every test that loads it)."""
    import importlib.util
    import sys

    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
