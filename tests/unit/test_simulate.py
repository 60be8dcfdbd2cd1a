"""The simulated estate's pynvml stand-in raises NVML's errors, with their codes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from slurm_triage.health_checks.nvml_facts import read_nvml
from slurm_triage.simulate.estate import InjectError, NodeEstate, inject
from slurm_triage.simulate.fake_pynvml import FakeNvml
from slurm_triage.simulate.nvml_abi import CONSTANTS, ERROR_CLASSES

XID_EVENT = CONSTANTS["nvmlEventTypeXidCriticalError"]


@pytest.fixture
def estate(tmp_path: Path) -> NodeEstate:
    return NodeEstate(tmp_path, "node2").ensure()


def test_uninitialised_calls_raise_like_pynvml(estate: NodeEstate) -> None:
    """Device calls before nvmlInit raise NVMLError_Uninitialized, as the real library does."""
    nv = FakeNvml(estate.nvml_state)
    with pytest.raises(ERROR_CLASSES["NVMLError_Uninitialized"]):
        nv.nvmlDeviceGetCount()


def test_lost_gpu_raises_gpu_is_lost_with_code_15(estate: NodeEstate) -> None:
    """After XID 79 the device's handle raises NVMLError_GpuIsLost (code 15)."""
    inject(estate, "xid", 79, gpu=3)
    nv = FakeNvml(estate.nvml_state)
    nv.nvmlInit()
    with pytest.raises(nv.NVMLError_GpuIsLost) as err:
        nv.nvmlDeviceGetHandleByIndex(3)
    assert err.value.value == nv.NVML_ERROR_GPU_IS_LOST == 15
    assert isinstance(err.value, nv.NVMLError)
    nv.nvmlDeviceGetHandleByIndex(2)  # the others still answer


def test_hopper_retired_pages_not_supported(estate: NodeEstate) -> None:
    """Retired pages are NotSupported on Hopper (row remapping replaced them)."""
    nv = FakeNvml(estate.nvml_state)
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetRetiredPagesPendingStatus(handle)
    assert read_nvml(nv).gpus[0].retired_pages_pending is None


def test_unknown_functions_raise_function_not_found(estate: NodeEstate) -> None:
    """A driver function the stand-in models as absent behaves like an old driver's missing
    symbol; a name it does not know at all is an AttributeError, as on the real module."""
    nv = FakeNvml(estate.nvml_state)
    with pytest.raises(nv.NVMLError_FunctionNotFound):
        nv.nvmlDeviceGetGspFirmwareMode(None)
    with pytest.raises(AttributeError):
        nv.nvmlDeviceGetNoSuchThing  # noqa: B018
    assert nv.NVML_FEATURE_ENABLED == 1


def test_driver_unloaded_is_an_init_error(estate: NodeEstate) -> None:
    """An unloaded driver fails nvmlInit with DriverNotLoaded; read_nvml reports it."""
    inject(estate, "driver_unloaded")
    facts = read_nvml(FakeNvml(estate.nvml_state))
    assert (facts.init_error, facts.init_error_code) == ("NVMLError_DriverNotLoaded", 9)


def test_missing_state_is_library_not_found(tmp_path: Path) -> None:
    """A node without a state file looks like a node without the NVML library."""
    facts = read_nvml(FakeNvml(tmp_path / "absent.json"))
    assert facts.init_error == "NVMLError_LibraryNotFound"


def test_xid_event_reaches_registered_waiter(estate: NodeEstate) -> None:
    """An XID injected after registration arrives through nvmlEventSetWait_v2."""
    nv = FakeNvml(estate.nvml_state)
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(5)
    event_set = nv.nvmlEventSetCreate()
    nv.nvmlDeviceRegisterEvents(handle, XID_EVENT, event_set)
    with pytest.raises(nv.NVMLError_Timeout):
        nv.nvmlEventSetWait_v2(event_set, 50)
    threading.Timer(0.1, inject, args=(estate, "xid", 48), kwargs={"gpu": 5}).start()
    data = nv.nvmlEventSetWait_v2(event_set, 5000)
    assert (data.eventType, data.eventData, nv.nvmlDeviceGetIndex(data.device)) == (
        XID_EVENT,
        48,
        5,
    )


def test_inject_effects_are_consistent(estate: NodeEstate) -> None:
    """XID 48 shows in the kernel log and in NVML's ECC and row-remap state alike."""
    inject(estate, "xid", 48, gpu=1)
    gpu = read_nvml(FakeNvml(estate.nvml_state)).gpus[1]
    assert gpu.ecc_volatile_uncorrected == 1 and gpu.remap is not None and gpu.remap.pending
    assert "NVRM: Xid (PCI:0000:2a:00): 48," in estate.kernel_log.read_text()
    inject(estate, "clear")
    assert read_nvml(FakeNvml(estate.nvml_state)).gpus[1].ecc_volatile_uncorrected == 0


@pytest.mark.parametrize(
    ("fault", "kwargs"), [("melt", {}), ("xid", {}), ("ecc", {"gpu": 9}), ("ib_down", {"port": 7})]
)
def test_bad_injections_are_refused(estate: NodeEstate, fault: str, kwargs: dict) -> None:
    """Unknown faults, a missing XID number or an out-of-range GPU/port raise InjectError."""
    with pytest.raises(InjectError):
        inject(estate, fault, **kwargs)


def test_nvml_hang_blocks_calls(estate: NodeEstate) -> None:
    """nvml_hang makes NVML calls block, like a wedged driver."""
    inject(estate, "nvml_hang", 1)
    started = time.monotonic()
    FakeNvml(estate.nvml_state).nvmlInit()
    assert time.monotonic() - started >= 1.0


def test_boot_hang_stays_through_reboots_until_clear(estate: NodeEstate) -> None:
    inject(estate, "boot_hang")
    assert estate.boot_hang.exists()
    inject(estate, "reboot")
    assert estate.boot_hang.exists()
    inject(estate, "clear")
    assert not estate.boot_hang.exists()


def test_boot_hang_cannot_be_persistent(estate: NodeEstate) -> None:
    with pytest.raises(InjectError, match="cannot be persistent"):
        inject(estate, "boot_hang", persistent=True)
    assert not estate.boot_hang.exists()
