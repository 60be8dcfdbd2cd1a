"""The GPU reset reconcile asks for, done by the node's periodic health check on the simulated
estate (prolog_epilog.gpu_repair): reset when idle, the screen again, then burn-in pending or
a reason that still says repairing (and why), and a dry run that changes nothing."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import AgentConfig, Config, PolicyConfig, RepairConfig
from slurm_triage.health_checks import registry
from slurm_triage.health_checks.gpu_reset import ResetOutcome
from slurm_triage.health_checks.gpu_resets import ledger_path, record_resets
from slurm_triage.health_checks.result import CheckResult
from slurm_triage.health_checks.runner import Run
from slurm_triage.policies.drain_words import DrainKind, gpu_reset_reason, read_reason
from slurm_triage.policies.nodes import NodeOutcome
from slurm_triage.prolog_epilog.gpu_repair import GpuRepairOutcome
from slurm_triage.prolog_epilog.healthcheck import periodic
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.slurm.model import NodeFlag
from slurm_triage.testing import FakeDoor, node_info
from tests.unit.test_health_runner import sim_config

NODE = "node2"


def _config(tmp_path: Path, **repair: object) -> Config:
    base = sim_config(tmp_path, breaker_settle_s=0)
    # The reset asks a node agent to let go of NVML: never the host's.
    base = replace(base, agent=AgentConfig(socket=str(tmp_path / "no-agent.sock")))
    return replace(base, repair=RepairConfig(enabled=True, **repair))  # type: ignore[arg-type]


@pytest.fixture
def estate(tmp_path: Path) -> NodeEstate:
    return NodeEstate(Path(sim_config(tmp_path).health.simulate_root), NODE).ensure()


def _asked(reason: str, state: str = "IDLE", *flags: str) -> FakeDoor:
    drained = frozenset({NodeFlag.DRAIN, *flags})
    return FakeDoor(nodes=[node_info(NODE, state=state, flags=drained, reason=reason)])


def test_a_reset_fixes_reset_required_and_the_node_awaits_burn_in(
    tmp_path: Path, estate: NodeEstate
) -> None:
    """XID 119 leaves GPU 2 needing a reset: the screen fails; after the node's own reset of
    every GPU the screen passes and the reason becomes burn-in pending."""
    config = _config(tmp_path)
    inject(estate, "xid", 119, gpu=2)
    door = _asked(gpu_reset_reason((), "gpu.lost"))
    before = periodic(config, node=NODE, door=FakeDoor(nodes=[node_info(NODE)]))
    assert not before.report.all_passed  # the fault is real before the reset
    run = periodic(config, node=NODE, door=door)
    assert run.gpu_repair is not None
    assert run.gpu_repair.outcome is GpuRepairOutcome.REPAIRED
    assert [r.outcome for r in run.gpu_repair.resets] == [ResetOutcome.RESET] * 8
    assert run.report.all_passed
    words = read_reason(door.node(NODE).reason)
    assert (words.kind, words.subject) == (DrainKind.BURN_IN_PENDING, "gpu.lost")
    assert door.node(NODE).drained
    assert run.decision.outcome is NodeOutcome.KEPT_OUT  # reconcile's burn-in returns it


def test_only_the_named_gpus_are_reset(tmp_path: Path, estate: NodeEstate) -> None:
    config = _config(tmp_path)
    inject(estate, "xid", 119, gpu=2)
    run = periodic(config, node=NODE, door=_asked(gpu_reset_reason((2,), "gpu.lost")))
    assert run.gpu_repair is not None
    assert [r.gpu for r in run.gpu_repair.resets] == [2]
    assert run.gpu_repair.outcome is GpuRepairOutcome.REPAIRED


def test_a_lost_gpu_cannot_be_reset_and_is_not_burn_in_pending(
    tmp_path: Path, estate: NodeEstate
) -> None:
    """XID 79: the GPU fell off the bus, a reset cannot reach it. The node stays repairing
    (reconcile reboots it after repair_timeout_s), with the failure in its reason."""
    config = _config(tmp_path)
    inject(estate, "xid", 79, gpu=3)
    door = _asked(gpu_reset_reason((), "gpu.lost"))
    run = periodic(config, node=NODE, door=door)
    assert run.gpu_repair is not None
    assert run.gpu_repair.outcome is GpuRepairOutcome.RESET_FAILED
    failed = [r for r in run.gpu_repair.resets if not r.done]
    assert [(r.gpu, r.outcome) for r in failed] == [(3, ResetOutcome.FAILED)]
    reason = door.node(NODE).reason
    assert read_reason(reason).kind is DrainKind.REPAIRING_GPU_RESET
    assert "reset failed: GPU3" in reason
    assert not run.report.all_passed
    # The next run fails the same way: the reason is not written again.
    writes = len(door.mutations())
    again = periodic(config, node=NODE, door=door)
    assert again.gpu_repair is not None
    assert again.gpu_repair.outcome is GpuRepairOutcome.RESET_FAILED
    assert len(door.mutations()) == writes


def test_a_screen_still_failing_after_the_reset_is_not_burn_in_pending(
    tmp_path: Path, estate: NodeEstate
) -> None:
    """The reset works but something else still fails (a mount): not burn-in pending."""
    config = _config(tmp_path)
    inject(estate, "xid", 119, gpu=2)
    inject(estate, "ib_down", port=1)
    door = _asked(gpu_reset_reason((), "gpu.lost"))
    run = periodic(config, node=NODE, door=door)
    assert run.gpu_repair is not None
    assert run.gpu_repair.outcome is GpuRepairOutcome.SCREEN_FAILED
    reason = door.node(NODE).reason
    assert read_reason(reason).kind is DrainKind.REPAIRING_GPU_RESET
    assert "screen fails" in reason


@pytest.mark.parametrize(("state", "flags"), [("MIXED", ()), ("IDLE", (NodeFlag.COMPLETING,))])
def test_a_node_running_a_job_is_not_reset(
    tmp_path: Path, estate: NodeEstate, state: str, flags: tuple[str, ...]
) -> None:
    config = _config(tmp_path)
    inject(estate, "xid", 119, gpu=2)
    reason = gpu_reset_reason((), "gpu.lost")
    door = _asked(reason, state, *flags)
    run = periodic(config, node=NODE, door=door)
    assert run.gpu_repair is not None
    assert (run.gpu_repair.outcome, run.gpu_repair.resets) == (GpuRepairOutcome.BUSY, ())
    assert door.node(NODE).reason == reason
    assert door.mutations() == []
    assert estate.load()["gpus"][2]["reset_required"]  # nothing was reset


@pytest.mark.parametrize("switch", ["cli", "policy"])
def test_a_dry_run_resets_nothing_and_changes_nothing(
    tmp_path: Path, estate: NodeEstate, switch: str
) -> None:
    config = _config(tmp_path)
    if switch == "policy":
        config = replace(config, policy=PolicyConfig(act=False))
    inject(estate, "xid", 119, gpu=2)
    reason = gpu_reset_reason((), "gpu.lost")
    door = _asked(reason)
    run = periodic(config, node=NODE, door=door, dry_run=switch == "cli")
    assert run.gpu_repair is not None
    assert run.gpu_repair.outcome is GpuRepairOutcome.DRY_RUN
    assert run.gpu_repair.gpus == tuple(range(8))
    assert door.mutations() == []
    assert door.node(NODE).reason == reason
    assert estate.load()["gpus"][2]["reset_required"]


def test_nothing_is_asked_without_repair_enabled_or_a_reset_reason(
    tmp_path: Path, estate: NodeEstate
) -> None:
    inject(estate, "xid", 119, gpu=2)
    reason = gpu_reset_reason((), "gpu.lost")
    off = replace(_config(tmp_path), repair=RepairConfig(enabled=False))
    assert periodic(off, node=NODE, door=_asked(reason)).gpu_repair is None
    other = _asked("triage: repairing reboot gpu.lost")
    assert periodic(_config(tmp_path), node=NODE, door=other).gpu_repair is None
    assert estate.load()["gpus"][2]["reset_required"]


def _xid_check(config: Config) -> CheckResult:
    (result,) = Run(config, registry.select(["gpu.xid"], True), node=NODE).execute().results
    return result


def test_the_reset_ledger_forgives_only_reset_xids_logged_before_the_reset(
    tmp_path: Path, estate: NodeEstate
) -> None:
    """gpu.xid after a GPU's reset: an XID 119 (a reset repairs it) logged before is history;
    an XID 79 (a reboot's) on a reset GPU, or a 119 logged after the reset, still fails."""
    config = _config(tmp_path)
    ledger = ledger_path(config.paths.state_dir, NODE)
    bus = estate.load()["gpus"][2]["bus_id"]
    inject(estate, "xid", 119, gpu=2)
    assert _xid_check(config).failed
    record_resets(ledger, [bus], time.time() + 1)
    assert not _xid_check(config).failed
    inject(estate, "xid", 79, gpu=2)
    record_resets(ledger, [bus], time.time() + 1)
    lost = _xid_check(config)
    assert lost.failed and "XID 79" in lost.reason  # a reset does not repair it
    estate.reset()
    record_resets(ledger, [bus], time.time() - 60)
    inject(estate, "xid", 119, gpu=2)
    after = _xid_check(config)
    assert after.failed and "XID 119" in after.reason  # logged after the reset
