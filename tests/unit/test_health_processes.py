"""gpu.processes in the Prolog of a shared node looks at the job's GPUs only (issue 14.4)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config
from slurm_triage.gpu_ids import JobScope, job_scope
from slurm_triage.health_checks import registry
from slurm_triage.health_checks.result import CheckResult, CheckStatus
from slurm_triage.health_checks.runner import Run
from slurm_triage.prolog_epilog import prolog
from slurm_triage.simulate.estate import NodeEstate
from tests.unit.test_health_runner import sim_config


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return sim_config(tmp_path)


@pytest.fixture
def shared_node(config: Config) -> NodeEstate:
    """node2, where job A runs on GPUs 0-3 (its processes hold them)."""
    estate = NodeEstate(Path(config.health.simulate_root), "node2").ensure()
    state = estate.load()
    for position in range(4):
        state["gpus"][position]["processes"] = [5000 + position]
    estate.save(state)
    return estate


def _prolog_processes(config: Config, env: dict[str, str]) -> CheckResult:
    (spec,) = registry.select(["gpu.processes"], everything=False)
    report = Run(config, [spec], mode="prolog", node="node2", job=job_scope(env)).execute()
    return report.results[0]


def test_job_on_free_gpus_of_a_shared_node_passes(config: Config, shared_node: NodeEstate) -> None:
    """Job B's Prolog for GPUs 4-7 passes while job A holds 0-3 (it drained the node)."""
    result = _prolog_processes(config, {"SLURM_JOB_GPUS": "4,5,6,7"})
    assert result.status is CheckStatus.OK, result.reason
    assert "the job's 4 GPUs" in result.reason


def test_stray_process_on_the_jobs_gpu_fails(config: Config, shared_node: NodeEstate) -> None:
    """A process left on one of the job's own GPUs still fails the Prolog."""
    result = _prolog_processes(config, {"SLURM_JOB_GPUS": "3,4"})
    assert result.failed and result.reason.startswith("GPU3 00000000:5D:00.0 held by")


def test_gpuless_job_on_a_shared_node_is_not_judged(
    config: Config, shared_node: NodeEstate
) -> None:
    """A job Slurm gave no GPUs has nothing to lose to job A's processes: SKIPPED. When it
    has the node to itself (SLURM_JOB_OVERSUBSCRIBE=NO) every GPU is looked at."""
    assert _prolog_processes(config, {}).status is CheckStatus.SKIPPED
    exclusive = _prolog_processes(config, {"SLURM_JOB_OVERSUBSCRIBE": "NO"})
    assert exclusive.failed and "GPU0" in exclusive.reason


def test_minor_number_order_picks_the_jobs_device(config: Config, shared_node: NodeEstate) -> None:
    """With gres.conf File= numbering the job's GPU 0 is /dev/nvidia0: here the GPU at PCI
    position 2, held by job A, so the Prolog fails on it (and passes for a free one)."""
    state = shared_node.load()
    for position, g in enumerate(state["gpus"]):
        g["minor"] = (position + 6) % 8
    shared_node.save(state)
    minor = replace(config, health=replace(config.health, slurm_gpu_order="minor_number"))
    held = _prolog_processes(minor, {"SLURM_JOB_GPUS": "0"})
    assert held.failed and held.reason.startswith("GPU2 ")
    free = _prolog_processes(minor, {"SLURM_JOB_GPUS": "2"})  # /dev/nvidia2: position 4
    assert free.status is CheckStatus.OK


def test_job_scope_from_the_prolog_environment() -> None:
    """SLURM_JOB_GPUS gives the GPUs; OVERSUBSCRIBE=NO or EXCLUSIVE=NODE the whole node."""
    assert job_scope({"SLURM_JOB_GPUS": "1,0"}) == JobScope((1, 0), whole_node=False)
    assert job_scope({"SLURM_JOB_EXCLUSIVE": "NODE"}) == JobScope(None, whole_node=True)
    assert job_scope({"SLURM_JOB_EXCLUSIVE": "USER"}) == JobScope(None, whole_node=False)


def test_prolog_reads_the_jobs_gpus_from_its_environment(
    config: Config, shared_node: NodeEstate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Prolog entry itself passes job B (GPUs 4-7) on job A's shared node: no drain."""

    def act(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the Prolog wanted to drain a healthy shared node")

    monkeypatch.setattr("slurm_triage.prolog_epilog.node_action.act", act)
    monkeypatch.setenv("SLURMD_NODENAME", "node2")
    monkeypatch.setenv("SLURM_JOB_GPUS", "4,5,6,7")
    only = replace(config, health=replace(config.health, mounts=()))
    assert prolog.prolog(only) == 0


def test_a_cold_run_initialises_nvml_once(config: Config, shared_node: NodeEstate) -> None:
    """Without kept facts, gpu.processes takes the processes from the run's own NVML read:
    a second nvmlInit after its shutdown would start the driver again on a node without
    persistence mode (seconds per GPU)."""
    from slurm_triage.nvml import nvml_module

    nvml = nvml_module(config.health, "node2")
    inits: list[int] = []
    real_init = nvml.nvmlInit
    nvml.nvmlInit = lambda: inits.append(1) or real_init()
    report = Run(
        config,
        registry.select(None, everything=False),
        mode="prolog",
        node="node2",
        job=job_scope({"SLURM_JOB_GPUS": "0,1"}),
        nvml=nvml,
    ).execute()
    assert ("gpu.processes", CheckStatus.FAIL) in [(r.check, r.status) for r in report.results]
    assert inits == [1]
