"""The NVML code against every supported nvidia-ml-py release's module surface (issue 14.5).

The stand-in owns NVML's constants (nvml_abi.py) and can lack the names an older release
lacks (bindings.py). `make test-nvml-oldest` runs this file again with the oldest release
first on the import path, so the "installed" tests below then check the real old module.
"""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pynvml
import pytest

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks import gpu, gpu_processes
from slurm_triage.health_checks.nvml_facts import read_nvml
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.simulate import bindings
from slurm_triage.simulate.bindings import BindingSurface
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.simulate.fake_pynvml import FakeNvml
from slurm_triage.simulate.nvml_abi import CONSTANTS, ERROR_CLASSES, ERROR_CODES
from slurm_triage.wrapper.nvml_watch import NvmlWatcher

ROOT = Path(__file__).resolve().parents[2]
GPU_CHECKS = (
    gpu.check_count,
    gpu.check_lost,
    gpu.check_ecc,
    gpu.check_row_remap,
    gpu.check_nvlink,
    gpu.check_pcie,
    gpu.check_thermal,
    gpu_processes.check_processes,
)
FAKE_FUNCTIONS = sorted(n for n in vars(FakeNvml) if n.startswith("nvml"))
INSTALLED = importlib.metadata.version("nvidia-ml-py")


def _installed_surface() -> BindingSurface:
    """The installed pynvml as a surface: the names of ours it lacks, its link maximum."""
    ours = [*CONSTANTS, *ERROR_CODES, *FAKE_FUNCTIONS]
    absent = frozenset(name for name in ours if not hasattr(pynvml, name))
    return BindingSurface(INSTALLED, absent, int(pynvml.NVML_NVLINK_MAX_LINKS))


SURFACES = [*bindings.SUPPORTED, _installed_surface()]


@pytest.fixture
def estate(tmp_path: Path) -> NodeEstate:
    return NodeEstate(tmp_path, "node1").ensure()


def _run_checks(nv: FakeNvml) -> dict[str, CheckStatus]:
    facts = read_nvml(nv)
    pci = tuple(g.bus_id.lower()[4:] for g in facts.gpus if g.bus_id)
    kwargs = {"facts": facts, "pci_bus_ids": pci, "config": HealthConfig(), "previous": {}}
    return {
        check.__name__: check(**kwargs, mode="prolog").status  # type: ignore[operator]
        for check in GPU_CHECKS
    }


@pytest.mark.parametrize("surface", SURFACES, ids=lambda s: s.version)
def test_healthy_node_passes_with_every_supported_release(
    estate: NodeEstate, surface: BindingSurface
) -> None:
    """A healthy node passes every gpu.* check whichever supported nvidia-ml-py reads it
    (with 12.560, reading NVML_FI_DEV_GET_GPU_RECOVERY_ACTION unguarded failed gpu.count)."""
    statuses = _run_checks(FakeNvml(estate.nvml_state, binding=surface))
    assert set(statuses.values()) <= {CheckStatus.OK, CheckStatus.SKIPPED}, statuses
    assert statuses["check_count"] is CheckStatus.OK


@pytest.mark.parametrize("surface", SURFACES, ids=lambda s: s.version)
def test_recovery_action_is_read_by_field_id_on_old_bindings(
    estate: NodeEstate, surface: BindingSurface
) -> None:
    """An R570 driver's recovery action reaches gpu.ecc even through a binding that has no
    name for its field: the field id is nvml.h ABI (230)."""
    inject(estate, "xid", 95, gpu=2)
    facts = read_nvml(FakeNvml(estate.nvml_state, binding=surface))
    assert facts.gpus[2].recovery_action == 4
    result = gpu.check_ecc(facts=facts, previous={})
    assert result.failed and "recovery action" in result.reason


def test_driver_before_r570_has_no_recovery_action(estate: NodeEstate) -> None:
    """A 550 driver answers NotSupported in the field's slot: the fact is None, not 0."""
    state = estate.load()
    state["driver"]["version"] = "550.90.07"
    estate.save(state)
    facts = read_nvml(FakeNvml(estate.nvml_state, binding=bindings.OLDEST))
    assert [g.recovery_action for g in facts.gpus] == [None] * 8


@pytest.mark.parametrize("surface", SURFACES, ids=lambda s: s.version)
def test_wrapper_watches_with_every_supported_release(
    estate: NodeEstate, surface: BindingSurface
) -> None:
    """The wrapper's watcher registers for events and sees an XID with each release."""
    nv = FakeNvml(estate.nvml_state, binding=surface)
    watcher = NvmlWatcher(lambda: nv, "node1", (2,), gpus_expected=True, poll_ms=20)
    watcher.start()
    assert watcher.watching.wait(10)
    inject(estate, "xid", 79, gpu=2)
    facts = _stop_when(watcher, lambda: bool(watcher.facts))
    assert [(f.gpu, f.value) for f in facts] == [("2", 79)]


def _stop_when(watcher: NvmlWatcher, done: object) -> list:  # type: ignore[type-arg]
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not done():  # type: ignore[operator]
        time.sleep(0.02)
    return watcher.stop()


def test_stand_in_constants_are_nvml_abi() -> None:
    """Every constant and error code the stand-in owns equals the installed nvidia-ml-py's
    (where that release has the name), and the error classes carry the same names."""
    for name, value in {**CONSTANTS, **ERROR_CODES}.items():
        if hasattr(pynvml, name):
            assert getattr(pynvml, name) == value, name
    for cls_name, cls in ERROR_CLASSES.items():
        code = cls().value
        if hasattr(pynvml, cls_name):
            assert type(pynvml.NVMLError(code)).__name__ == cls_name


def test_stand_in_functions_exist_in_the_installed_release() -> None:
    """Each function the stand-in serves is a real nvidia-ml-py function (no invented names)."""
    missing = [name for name in FAKE_FUNCTIONS if not hasattr(pynvml, name)]
    assert missing == []


@pytest.mark.skipif(INSTALLED not in bindings.BY_VERSION, reason="release not in bindings.py")
def test_binding_table_matches_the_installed_release() -> None:
    """bindings.py says of the installed release exactly what it lacks (run with the oldest
    release by `make test-nvml-oldest`, with the newest by the normal suite)."""
    table = bindings.BY_VERSION[INSTALLED]
    installed = _installed_surface()
    assert installed.absent == table.absent
    assert installed.nvlink_max_links == table.nvlink_max_links


def test_the_pin_the_table_and_the_ci_job_agree() -> None:
    """pyproject's lower bound, bindings.OLDEST and the Makefile's NVML_OLDEST are one
    version; pyproject's upper bound admits NEWEST."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pin = next(d for d in project["dependencies"] if d.startswith("nvidia-ml-py"))
    lower = re.search(r">=([\d.]+)", pin)
    upper = re.search(r"<(\d+)", pin)
    assert lower is not None and lower.group(1) == bindings.OLDEST.version
    assert upper is not None and int(bindings.NEWEST.version.split(".")[0]) < int(upper.group(1))
    makefile = (ROOT / "Makefile").read_text()
    assert f"NVML_OLDEST := {bindings.OLDEST.version}\n" in makefile
