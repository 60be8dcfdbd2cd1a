"""A GPU that cannot say which it is (PCI info, UUID), or that answers no call at all, is
unusable as a GPU gone is: gpu.lost fails it. One other call failing stays one unknown fact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_triage.config import Config, HealthConfig
from slurm_triage.health_checks import gpu
from slurm_triage.health_checks.nvml_facts import read_nvml
from slurm_triage.health_checks.result import Action, CheckStatus
from slurm_triage.simulate.estate import NodeEstate
from slurm_triage.simulate.fake_pynvml import FakeNvml
from tests.unit.test_health_review_nvml_errors import PCI, _failing
from tests.unit.test_health_runner import sim_config

# What a GPU still answers when it answers nothing but its identity (the count and handle
# lookups are NVML's, not the GPU's).
_IDENTITY = {"nvmlDeviceGetCount", "nvmlDeviceGetPciInfo", "nvmlDeviceGetUUID"}


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return sim_config(tmp_path)


@pytest.fixture
def estate(config: Config) -> NodeEstate:
    return NodeEstate(Path(config.health.simulate_root), "node2").ensure()


@pytest.mark.parametrize("identity", ["nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo"])
def test_a_gpu_that_cannot_say_which_it_is_is_unusable(estate: NodeEstate, identity: str) -> None:
    """The review's repro: a GPU answering Timeout passed every check (each fact None). Its
    identity unread, it is unusable: gpu.lost fails it, the node is drained now."""
    nv = _failing(FakeNvml(estate.nvml_state), identity, "NVML_ERROR_TIMEOUT", 3)
    facts = read_nvml(nv)
    assert facts.init_error is None and len(facts.gpus) == 8
    assert facts.gpus[3].error == "NVMLError_Timeout" and facts.gpus[3].is_unusable()
    assert not facts.gpus[2].is_unusable()
    lost = gpu.check_lost(facts, PCI)
    assert lost.failed and lost.action is Action.DRAIN_NOW
    assert "GPU3" in lost.reason and "NVMLError_Timeout" in lost.reason


def test_a_gpu_answering_only_its_identity_is_unusable(estate: NodeEstate) -> None:
    """Every call but its PCI info and UUID times out: no fact of it is known, so it is not
    a healthy GPU (its ECC, thermal, NVLink checks would all pass on nothing)."""
    nv = FakeNvml(estate.nvml_state)
    for name in dir(nv):
        if name.startswith("nvmlDeviceGet") and "Handle" not in name and name not in _IDENTITY:
            _failing(nv, name, "NVML_ERROR_TIMEOUT", 6)
    facts = read_nvml(nv)
    assert facts.gpus[6].error == "NVMLError_Timeout" and facts.gpus[6].uuid is not None
    assert facts.gpus[5].error is None and facts.gpus[5].temperature_c is not None
    lost = gpu.check_lost(facts, PCI)
    assert lost.failed and "GPU6" in lost.reason


def test_one_other_failing_call_still_costs_one_fact(estate: NodeEstate) -> None:
    """The per-call leniency stays for a GPU that says which it is: InsufficientSize from
    the process list leaves the processes unknown, the GPU usable, the node passing."""
    nv = _failing(
        FakeNvml(estate.nvml_state),
        "nvmlDeviceGetComputeRunningProcesses",
        "NVML_ERROR_INSUFFICIENT_SIZE",
        3,
    )
    facts = read_nvml(nv)
    assert not facts.gpus[3].is_unusable() and facts.gpus[3].processes is None
    assert gpu.check_lost(facts, PCI).status is CheckStatus.OK
    assert gpu.check_count(facts, PCI, HealthConfig()).status is CheckStatus.OK


def test_identity_errors_that_are_not_nvml_errors_still_raise(estate: NodeEstate) -> None:
    """A bug (not an NVML error) in reading the identity is not hidden as a GPU error: the
    read fails as a whole, as before."""
    nv = FakeNvml(estate.nvml_state)

    def broken(handle: Any) -> Any:
        raise RuntimeError("binding bug")

    object.__setattr__(nv, "nvmlDeviceGetUUID", broken)
    facts = read_nvml(nv)
    assert facts.init_error == "RuntimeError" and facts.gpus == ()
