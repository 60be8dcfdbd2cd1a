"""One NVML call failing on one GPU costs that fact only, never the node: no 'NVML init
failed' drain; and gpu.processes is UNKNOWN, never OK, where NVML cannot list processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from slurm_triage.config import Config, HealthConfig
from slurm_triage.gpu_ids import job_scope
from slurm_triage.health_checks import gpu, registry
from slurm_triage.health_checks.nvml_facts import read_nvml
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.health_checks.runner import Run
from slurm_triage.simulate import nvml_abi
from slurm_triage.simulate.estate import NodeEstate
from slurm_triage.simulate.fake_pynvml import FakeNvml
from tests.unit.test_health_runner import sim_config

PCI = [f"0000:{b}:00.0" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return sim_config(tmp_path)


@pytest.fixture
def estate(config: Config) -> NodeEstate:
    return NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def _failing(nv: FakeNvml, function: str, error: str, gpu_index: int | None = None) -> FakeNvml:
    """`nv` whose `function` answers `error` (on one GPU, or all), as libnvidia-ml would."""
    real = getattr(nv, function)

    def call(handle: Any, *args: Any) -> Any:
        if gpu_index is None or handle.local == gpu_index:
            raise nvml_abi.error(error)
        return real(handle, *args)

    call.__name__ = function
    object.__setattr__(nv, function, call)
    return nv


@pytest.mark.parametrize(
    "error",
    ["NVML_ERROR_INSUFFICIENT_SIZE", "NVML_ERROR_TIMEOUT", "NVML_ERROR_OPERATING_SYSTEM"],
)
def test_one_failing_call_costs_one_fact(estate: NodeEstate, error: str) -> None:
    """Processes appearing between pynvml's two calls (InsufficientSize), a Timeout: GPU3's
    process list is unknown, every other fact of every GPU read, gpu.count passes."""
    nv = _failing(FakeNvml(estate.nvml_state), "nvmlDeviceGetComputeRunningProcesses", error, 3)
    facts = read_nvml(nv)
    assert facts.init_error is None and len(facts.gpus) == 8
    assert facts.gpus[3].processes is None and facts.gpus[2].processes == ()
    assert facts.gpus[3].ecc_volatile_uncorrected == 0 and not facts.gpus[3].is_unusable()
    name = type(nvml_abi.error(error)).__name__
    assert facts.gpus[3].unread == (f"nvmlDeviceGetComputeRunningProcesses: {name}",)
    assert gpu.check_count(facts, PCI, HealthConfig()).status is CheckStatus.OK
    assert gpu.check_ecc(facts, {}).status is CheckStatus.OK
    assert gpu.check_lost(facts, PCI).status is CheckStatus.OK


def test_a_failing_counter_is_unknown_not_lower(estate: NodeEstate) -> None:
    """One NVLink error counter that fails makes the GPU's sum unknown (None), not a
    smaller number that would read as a counter reset."""
    nv = _failing(
        FakeNvml(estate.nvml_state), "nvmlDeviceGetNvLinkErrorCounter", "NVML_ERROR_TIMEOUT", 1
    )
    facts = read_nvml(nv)
    assert facts.gpus[1].nvlink_errors is None and facts.gpus[0].nvlink_errors == 0


def test_init_and_count_errors_still_fail_init(estate: NodeEstate) -> None:
    """nvmlInit and nvmlDeviceGetCount failing is still 'NVML init failed' (drain)."""
    nv = FakeNvml(estate.nvml_state)

    def count() -> int:
        raise nvml_abi.error("NVML_ERROR_UNKNOWN")

    object.__setattr__(nv, "nvmlDeviceGetCount", count)
    facts = read_nvml(nv)
    result = gpu.check_count(facts, PCI, HealthConfig())
    assert result.failed and facts.init_error == "NVMLError_Unknown"


def test_run_reports_the_unread_call_as_evidence(config: Config, estate: NodeEstate) -> None:
    """The run's results carry the failed call by GPU, so a judgement made without that
    fact says so."""
    nv = _failing(
        FakeNvml(estate.nvml_state),
        "nvmlDeviceGetPcieReplayCounter",
        "NVML_ERROR_INSUFFICIENT_SIZE",
        5,
    )
    specs = registry.select(["gpu.count", "gpu.pcie"], False)
    report = Run(config, specs, mode="cron", node="node2", nvml=nv).execute()
    assert [r.status for r in report.results] == [CheckStatus.OK, CheckStatus.OK]
    unread = report.results[1].evidence["nvml_unread"]
    assert unread == {
        "GPU5 00000000:AB:00.0": ["nvmlDeviceGetPcieReplayCounter: NVMLError_InsufficientSize"]
    }


def test_processes_nvml_cannot_list_are_unknown_and_never_drain(
    config: Config, estate: NodeEstate
) -> None:
    """An R470 driver without nvmlDeviceGetComputeRunningProcesses_v3 (FunctionNotFound):
    the Prolog's gpu.processes is UNKNOWN with the reason, not OK; UNKNOWN is no failure,
    so the Prolog neither drains the node nor turns the job away."""
    nv = _failing(
        FakeNvml(estate.nvml_state),
        "nvmlDeviceGetComputeRunningProcesses",
        "NVML_ERROR_FUNCTION_NOT_FOUND",
    )
    specs = registry.select(None, False)
    job = job_scope({"SLURM_JOB_GPUS": "2,3"})
    report = Run(config, specs, mode="prolog", node="node2", job=job, nvml=nv).execute()
    (processes,) = [r for r in report.results if r.check == "gpu.processes"]
    assert processes.status is CheckStatus.UNKNOWN
    assert "cannot list the compute processes on GPU2" in processes.reason
    assert report.failures == ()


def test_a_listed_stray_still_fails_beside_an_unlisted_gpu(
    config: Config, estate: NodeEstate
) -> None:
    """An unknown list on one of the job's GPUs does not hide a stray on another."""
    state = estate.load()
    state["gpus"][4]["processes"] = [4242]
    estate.save(state)
    nv = _failing(
        FakeNvml(estate.nvml_state),
        "nvmlDeviceGetComputeRunningProcesses",
        "NVML_ERROR_INSUFFICIENT_SIZE",
        3,
    )
    (spec,) = registry.select(["gpu.processes"], False)
    job = job_scope({"SLURM_JOB_GPUS": "3,4"})
    (result,) = Run(config, [spec], mode="prolog", node="node2", job=job, nvml=nv).execute().results
    assert result.failed and result.evidence["pids"] == [4242]
    alone = job_scope({"SLURM_JOB_GPUS": "3"})
    (unknown,) = (
        Run(config, [spec], mode="prolog", node="node2", job=alone, nvml=nv).execute().results
    )
    assert unknown.status is CheckStatus.UNKNOWN and "InsufficientSize" in unknown.reason
