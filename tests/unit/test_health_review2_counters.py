"""A counter below its saved value (a reboot, a counter clear, a replaced board) is judged as
a first sight, never as a rise from 0, and becomes the baseline a later rise is judged from;
the ECC aggregate count is kept by the GPU's UUID, an index-keyed state file read once."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config, HealthConfig
from slurm_triage.health_checks import aer, gpu, infiniband, registry
from slurm_triage.health_checks.result import Action, CheckStatus
from slurm_triage.health_checks.runner import Run, load_previous
from slurm_triage.simulate.estate import NodeEstate
from tests.unit.test_health_gpu import node
from tests.unit.test_health_runner import sim_config


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return sim_config(tmp_path)


@pytest.fixture
def estate(config: Config) -> NodeEstate:
    return NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def _save_state(config: Config, counters: dict[str, object]) -> None:
    path = Path(config.paths.state_dir) / "health" / "node2.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"node": "node2", "counters": counters}))


UPSTREAM = "0000:18:00.0"


def _aer(nonfatal: int, fatal: int = 0) -> aer.AerDevice:
    totals = {"fatal": fatal, "nonfatal": nonfatal, "correctable": 5}
    named = {"nonfatal": {"UnsupReq": 2}}
    return aer.AerDevice(UPSTREAM, "upstream of 0000:19:00.0", totals, named)


def test_aer_counts_since_a_reboot_warn_as_on_first_sight() -> None:
    """The review's repro: after a reboot the totals restart below the saved ones; the
    boot-time noise warns '2 since boot' as with no saved value, it does not drain the node
    the repair flow just rebooted; from that baseline a rise drains as before."""
    saved = {aer.COUNTERS_KEY: {UPSTREAM: {"fatal": 3, "nonfatal": 3, "correctable": 40}}}
    rebooted = aer.check_aer([_aer(2, fatal=1)], saved)
    assert rebooted.status is CheckStatus.WARN and not rebooted.failed
    assert "1 since boot" in rebooted.reason  # fatal first, as on a first sight
    baseline = {aer.COUNTERS_KEY: aer.counters([_aer(2)])}
    rose = aer.check_aer([_aer(3)], baseline)
    assert rose.failed and rose.action is Action.DRAIN and "rose 2->3" in rose.reason


def test_link_downed_below_its_saved_value_is_no_rise() -> None:
    """openibd restarted: link_downed restarts at 0 and counts the link's training: not a
    'rose 0->1' that drains the node now."""
    port = infiniband.PortFacts(
        "mlx5_0:1",
        present=True,
        state="4: ACTIVE",
        phys_state="5: LinkUp",
        rate_gbps=400.0,
        counters={"link_downed": 1},
        link_layer="InfiniBand",
    )
    config = HealthConfig(ib_ports=("mlx5_0:1",))
    saved = {"ib": {"mlx5_0:1": {"link_downed": 7}}}
    assert infiniband.check_ports([port], config=config, previous=saved).status is CheckStatus.OK
    baseline = {"ib": infiniband.counters([port])}
    again = replace(port, counters={"link_downed": 2})
    result = infiniband.check_ports([again], config=config, previous=baseline)
    assert result.failed and "link_downed rose 1->2" in result.reason


def test_replacement_board_with_historic_errors_only_warns() -> None:
    """The review's repro: the board at index 1 was replaced (RMA); the old one had 9
    uncorrectable errors kept by index, the new one reads 2: historic, a warning, not
    'rose 0->2' and a GPU reset."""
    facts = node((1, {"ecc_aggregate_uncorrected": 2}))
    result = gpu.check_ecc(facts, {"ecc_aggregate": {"0": 0, "1": 9}})
    assert result.status is CheckStatus.WARN and "historic" in result.reason


def test_ecc_is_kept_by_uuid_so_another_board_is_not_judged_by_its_slot() -> None:
    """A GPU that took index 1 (a replacement, or GPU2 after GPU1 fell off the bus) reading
    more than the board before it at that index is a first sight of that board, not a rise."""
    facts = node((1, {"ecc_aggregate_uncorrected": 12}))
    new_uuid = facts.gpus[1].uuid
    assert new_uuid is not None
    saved = gpu.counters(node((1, {"uuid": "GPU-old-board", "ecc_aggregate_uncorrected": 9})))
    assert saved["ecc_aggregate"]["GPU-old-board"] == 9 and "1" not in saved["ecc_aggregate"]
    result = gpu.check_ecc(facts, {"ecc_aggregate": saved["ecc_aggregate"]})
    assert result.status is CheckStatus.WARN and "historic" in result.reason
    same_board = gpu.check_ecc(facts, {"ecc_aggregate": {new_uuid: 11}})
    assert same_board.failed and "rose 11->12" in same_board.reason


def test_an_index_keyed_state_file_is_read_once_then_replaced() -> None:
    """A state file from before keeps the count by NVML index: read by index (a rise on the
    same board still fails), then saved by UUID with the index entry gone, so a later board
    at that index is not judged against it."""
    legacy = {"ecc_aggregate": {"0": 0, "1": 1}}
    facts = node((1, {"ecc_aggregate_uncorrected": 2}))
    rose = gpu.check_ecc(facts, legacy)
    assert rose.failed and "rose 1->2" in rose.reason
    saved = gpu.saved_counters(facts, legacy)["ecc_aggregate"]
    assert "0" not in saved and "1" not in saved
    assert saved[str(facts.gpus[1].uuid)] == 2 and len(saved) == 8


def test_a_run_saves_the_lower_count_as_the_new_baseline(
    config: Config, estate: NodeEstate
) -> None:
    """End to end through the runner: a count below the one saved for the same GPU (an
    ECC counter clear) warns as historic, the lower count is saved, and one more error from
    there fails as a rise."""
    state = estate.load()
    uuid = state["gpus"][5]["uuid"]
    state["gpus"][5]["ecc_aggregate_uncorrected"] = 2
    estate.save(state)
    _save_state(config, {"ecc_aggregate": {uuid: 9}})
    specs = registry.select(["gpu.ecc"], False)
    (first,) = Run(config, specs, node="node2", mode="cron").execute().results
    assert first.status is CheckStatus.WARN and "historic" in first.reason
    assert load_previous(config, "node2")["ecc_aggregate"][uuid] == 2
    state["gpus"][5]["ecc_aggregate_uncorrected"] = 3
    estate.save(state)
    (second,) = Run(config, specs, node="node2", mode="cron").execute().results
    assert second.failed and "rose 2->3" in second.reason
