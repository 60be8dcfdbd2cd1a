"""gpu.nvlink on simulated SXM and PCIe H100 nodes, judged against a baseline (issue 14.3)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config
from slurm_triage.health_checks import gpu
from slurm_triage.health_checks.result import CheckResult, CheckStatus
from slurm_triage.simulate.estate import NodeEstate, inject
from tests.unit.test_health_runner import run, sim_config


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return sim_config(tmp_path)


def _estate(config: Config, board: str) -> NodeEstate:
    estate = NodeEstate(Path(config.health.simulate_root), "node2").ensure()
    inject(estate, f"board_{board}")
    return estate


def _nvlink(config: Config) -> CheckResult:
    report = run(config)
    return next(r for r in report.results if r.check == "gpu.nvlink")


def _baseline(config: Config) -> dict[str, list[int]]:
    state = json.loads((Path(config.paths.state_dir) / "health" / "node2.json").read_text())
    baseline: dict[str, list[int]] = state["counters"].get(gpu.NVLINK_BASELINE_KEY, {})
    return baseline


@pytest.mark.parametrize("board", ["pcie", "pcie_unbridged"])
def test_healthy_pcie_node_passes(config: Config, board: str) -> None:
    """H100 PCIe nodes, whose NVML lists inactive links (6 of 18 with bridges, all 18
    without), pass every check run after run; each such node used to drain."""
    _estate(config, board)
    for _ in range(2):
        report = run(config)
        assert report.all_passed, [r.to_dict() for r in report.results if r.failed]


def test_link_up_at_baseline_going_down_fails_on_pcie(config: Config) -> None:
    """Once a PCIe node passed, one of its active links going down fails gpu.nvlink, while
    its by-design inactive links never do."""
    estate = _estate(config, "pcie")
    assert _nvlink(config).status is CheckStatus.OK
    assert _baseline(config)["GPU-5e1a0003-sim0-4a4a-9c9c-000000000003"] == [
        0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15
    ]  # fmt: skip
    inject(estate, "nvlink_down", 0, gpu=3)
    result = _nvlink(config)
    assert result.failed and result.reason.startswith("GPU3 00000000:5D:00.0 NVLink 0 down")


def test_sxm_node_with_nvlinks_per_gpu_fails_from_the_first_run(config: Config) -> None:
    """With health.nvlinks_per_gpu = 18 an HGX node with a link down fails at once, with no
    baseline to learn first."""
    strict = replace(config, health=replace(config.health, nvlinks_per_gpu=18))
    estate = _estate(strict, "sxm")
    inject(estate, "nvlink_down", 7, gpu=1)
    result = _nvlink(strict)
    assert result.failed and "GPU1" in result.reason and "17 of 18" in result.reason


def test_no_baseline_is_learnt_from_a_node_with_a_link_behind(config: Config) -> None:
    """A first run with one GPU's link down warns and records no baseline for the node;
    once repaired and passing, the full set becomes the baseline and a later loss fails."""
    estate = _estate(config, "sxm")
    inject(estate, "nvlink_down", 5, gpu=4)
    assert _nvlink(config).status is CheckStatus.WARN
    assert _baseline(config) == {}
    inject(estate, "clear")
    assert _nvlink(config).status is CheckStatus.OK
    assert all(links == list(range(18)) for links in _baseline(config).values())
    inject(estate, "nvlink_down", 5, gpu=4)
    assert _nvlink(config).failed
