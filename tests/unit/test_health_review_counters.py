"""Counter rises reach the check that judges them: a run saves a counter group only when it
judged that group, and a counter that went back (a restart) is judged as a first sight."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from slurm_triage.config import Config, HealthConfig
from slurm_triage.health_checks import aer, gpu, infiniband, registry
from slurm_triage.health_checks.result import CheckStatus, RunReport
from slurm_triage.health_checks.runner import Run, load_previous
from slurm_triage.simulate.estate import NodeEstate, inject
from tests.unit.test_health_gpu import node
from tests.unit.test_health_runner import sim_config


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return sim_config(tmp_path)


@pytest.fixture
def estate(config: Config) -> NodeEstate:
    return NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def _run(config: Config, names: list[str] | None, mode: str = "cron", **kw: Any) -> RunReport:
    return Run(config, registry.select(names, False), node="node2", mode=mode, **kw).execute()


def _bump(estate: NodeEstate, gpu_index: int, **changes: int) -> None:
    state = estate.load()
    g = state["gpus"][gpu_index]
    if "replays" in changes:
        g["pcie"]["replays"] += changes["replays"]
    if "aggregate" in changes:
        g["ecc_aggregate_uncorrected"] += changes["aggregate"]
    estate.save(state)


def test_prolog_without_gpu_pcie_keeps_the_replay_count(config: Config, estate: NodeEstate) -> None:
    """Replays rise, a Prolog (its fast set has no gpu.pcie) runs, then the cron: the cron
    still sees the rise (the Prolog used to save the new count and hide it)."""
    assert _run(config, ["gpu.pcie"]).results[0].status is CheckStatus.OK
    _bump(estate, 2, replays=500)
    prolog = _run(config, None, mode="prolog")
    assert "gpu.pcie" not in [r.check for r in prolog.results]
    (pcie,) = _run(config, ["gpu.pcie"]).results
    assert pcie.status is CheckStatus.WARN and "rose 0->500" in pcie.reason


def test_a_run_that_did_not_judge_ecc_keeps_its_count(config: Config, estate: NodeEstate) -> None:
    """`check --only gpu.count` reads NVML but judges no ECC: the aggregate rise is still
    there for the next gpu.ecc."""
    _run(config, ["gpu.ecc", "gpu.pcie"])
    _bump(estate, 5, aggregate=1)
    _run(config, ["gpu.count"])
    uuid = estate.load()["gpus"][5]["uuid"]
    assert load_previous(config, "node2")["ecc_aggregate"][uuid] == 0
    (ecc,) = _run(config, ["gpu.ecc"]).results
    assert ecc.failed and "rose 0->1" in ecc.reason


def test_prolog_stopped_early_keeps_later_checks_counts(config: Config, estate: NodeEstate) -> None:
    """A Prolog that stops at gpu.lost never judged gpu.ecc: the ECC rise on another GPU
    is not saved away."""
    _run(config, ["gpu.ecc"])
    _bump(estate, 5, aggregate=1)
    inject(estate, "gpu_lost", gpu=1)
    report = _run(config, None, mode="prolog", stop_on_hard_failure=True)
    assert report.stopped_early and "gpu.ecc" not in [r.check for r in report.results]
    state = json.loads(estate.nvml_state.read_text())
    state["gpus"][1]["lost"] = False
    estate.nvml_state.write_text(json.dumps(state))
    (ecc,) = _run(config, ["gpu.ecc"]).results
    assert ecc.failed and "GPU5" in ecc.reason and "rose 0->1" in ecc.reason


def test_counters_that_went_back_are_first_sights() -> None:
    """After a restart (reboot, driver reload, counter clear) a value below the saved one
    was counted some time since: judged as a first sight, not as a rise from 0 (the ECC
    count only warns as historic, replays and NVLink errors are not judged)."""
    facts = node((2, {"pcie_replays": 40, "nvlink_errors": 7, "ecc_aggregate_uncorrected": 2}))
    previous = {
        "pcie_replays": {"2": 900},
        "nvlink_errors": {"2": 100},
        "ecc_aggregate": {"2": 5},
    }
    pcie = gpu.check_pcie(facts=facts, previous=previous)
    assert pcie.status is CheckStatus.OK
    nvlink = gpu.check_nvlink(facts=facts, previous=previous, config=HealthConfig())
    assert nvlink.status is CheckStatus.OK
    ecc = gpu.check_ecc(facts=facts, previous=previous)
    assert ecc.status is CheckStatus.WARN and "historic" in ecc.reason
    rose = {"pcie_replays": {"2": 39}, "nvlink_errors": {"2": 6}, "ecc_aggregate": {"2": 1}}
    assert "rose 39->40" in gpu.check_pcie(facts=facts, previous=rose).reason
    assert gpu.check_ecc(facts=facts, previous=rose).failed


def test_ib_and_aer_counters_that_went_back_are_first_sights() -> None:
    """An openibd restart zeroes the port counters; a reboot the AER totals: what counted
    since is judged as on the first run (a fatal AER count warns, link_downed is not a
    rise), and a rise past the saved value still fails."""
    port = infiniband.PortFacts(
        "mlx5_0:1",
        present=True,
        state="4: ACTIVE",
        phys_state="5: LinkUp",
        rate_gbps=400.0,
        counters={"link_downed": 1, "symbol_error": 0},
        link_layer="InfiniBand",
    )
    previous = {"ib": {"mlx5_0:1": {"link_downed": 12, "symbol_error": 0}}}
    config = HealthConfig(ib_ports=("mlx5_0:1",))
    result = infiniband.check_ports([port], config=config, previous=previous)
    assert result.status is CheckStatus.OK
    risen = {"ib": {"mlx5_0:1": {"link_downed": 0, "symbol_error": 0}}}
    result = infiniband.check_ports([port], config=config, previous=risen)
    assert result.failed and "link_downed rose 0->1" in result.reason
    device = aer.AerDevice("0000:18:00.0", "GPU", {"fatal": 1, "nonfatal": 0, "correctable": 0})
    saved = {aer.COUNTERS_KEY: {"0000:18:00.0": {"fatal": 4, "nonfatal": 0, "correctable": 0}}}
    since_boot = aer.check_aer([device], previous=saved)
    assert since_boot.status is CheckStatus.WARN and "1 since boot" in since_boot.reason
