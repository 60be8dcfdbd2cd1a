"""Running checks on a simulated node: timeouts, stop-at-first-failure, counters, decisions."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config, HealthConfig, PathsConfig
from slurm_triage.health_checks import registry
from slurm_triage.health_checks.fact_cache import FactCache
from slurm_triage.health_checks.result import CheckStatus, RunReport
from slurm_triage.health_checks.runner import Run
from slurm_triage.policies.nodes import NodeOutcome, decide_node
from slurm_triage.simulate.estate import MOUNTS, NodeEstate, inject
from slurm_triage.slurm.model import NodeInfo


def sim_config(root: Path, **health: object) -> Config:
    sim = f"{root}/sim"
    base = HealthConfig(
        nvml="simulated",
        simulate_root=sim,
        kernel_log=f"{sim}/{{node}}/kern.log",
        sysfs_root=f"{sim}/{{node}}/sys",
        mountinfo=f"{sim}/{{node}}/mountinfo",
        mounts=tuple(f"{sim}/{{node}}/mounts/{m}" for m in MOUNTS),
        ib_rate_gbps=400,
        mount_timeout_s=0.5,
        check_timeout_s=1.0,
    )
    return Config(
        paths=PathsConfig(evidence_dir=str(root / "ev"), state_dir=str(root / "st")),
        health=replace(base, **health),
    )


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Config, NodeEstate]:
    config = sim_config(tmp_path)
    return config, NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def run(config: Config, names: tuple[str, ...] | None = None, **kw: object) -> RunReport:
    specs = registry.select(list(names) if names else None, everything=True)
    return Run(config, specs, node="node2", **kw).execute()  # type: ignore[arg-type]


def test_healthy_simulated_node_passes_all(setup) -> None:  # type: ignore[no-untyped-def]
    """Every check passes or is not applicable on a healthy simulated node."""
    config, _ = setup
    report = run(config)
    assert report.all_passed, [r.to_dict() for r in report.results if r.status.value != "OK"]
    assert {r.check for r in report.results} == set(registry.ALL)


def test_hung_nvml_makes_gpu_checks_unknown_within_timeout(setup) -> None:  # type: ignore[no-untyped-def]
    """A wedged NVML is abandoned after check_timeout_s; GPU checks are UNKNOWN, never OK."""
    config, estate = setup
    inject(estate, "nvml_hang", 30)
    started = time.monotonic()
    report = run(config, ("gpu.count", "gpu.ecc", "ib.ports"))
    assert time.monotonic() - started < 3
    statuses = {r.check: r.status for r in report.results}
    assert statuses == {
        "gpu.count": CheckStatus.UNKNOWN,
        "gpu.ecc": CheckStatus.UNKNOWN,
        "ib.ports": CheckStatus.OK,
    }
    assert "timed out" in report.results[0].reason
    assert not report.all_passed


def test_crashing_fact_source_is_unknown(tmp_path: Path) -> None:
    """A fact source that raises (mount table unreadable) makes its check UNKNOWN."""
    config = sim_config(tmp_path, mountinfo=str(tmp_path / "nope"))
    NodeEstate(Path(config.health.simulate_root), "node2").ensure()
    (result,) = run(config, ("fs.mounts",)).results
    assert result.status is CheckStatus.UNKNOWN and "nope" in result.reason


def test_prolog_stops_at_first_hard_failure(setup) -> None:  # type: ignore[no-untyped-def]
    """With stop_on_hard_failure the run ends at the first high-severity FAIL."""
    config, estate = setup
    inject(estate, "xid", 79, gpu=3)
    report = run(config, registry.PROLOG_SET, stop_on_hard_failure=True)
    assert report.stopped_early
    assert [r.check for r in report.results] == ["gpu.count", "gpu.lost"]


def test_rising_counters_across_runs(setup) -> None:  # type: ignore[no-untyped-def]
    """Counters are remembered per node, so a link flap between two runs is caught."""
    config, estate = setup
    assert run(config, ("ib.ports",)).all_passed
    counter = estate.sysfs / "class/infiniband/mlx5_1/ports/1/counters/link_downed"
    counter.write_text("1\n")
    (result,) = run(config, ("ib.ports",)).results
    assert result.failed and "mlx5_1:1 link_downed rose 0->1" in result.reason


def test_runs_on_kept_facts_rewrite_no_counters_and_judge_a_rise_once(setup) -> None:  # type: ignore[no-untyped-def]
    """The node agent's kept facts (fact_cache): the runs after the first give the counters
    already saved, so the state file is not written again (an fsync per job start); facts
    read again after a rise are judged against the saved counters once, as without them."""
    config, estate = setup
    kept = FactCache(3600.0)
    state = Path(config.paths.state_dir) / "health" / "node2.json"
    assert run(config, ("ib.ports",), kept=kept).all_passed
    written = state.stat().st_ino
    assert run(config, ("ib.ports",), kept=kept).all_passed
    assert state.stat().st_ino == written
    counter = estate.sysfs / "class/infiniband/mlx5_1/ports/1/counters/link_downed"
    counter.write_text("1\n")
    assert run(config, ("ib.ports",), kept=kept).all_passed  # the facts kept predate it
    kept.forget()
    (result,) = run(config, ("ib.ports",), kept=kept).results
    assert result.failed and "mlx5_1:1 link_downed rose 0->1" in result.reason
    assert state.stat().st_ino != written


def _node(
    name: str, reason: str = "", drained: bool = False, reason_time: float | None = None
) -> NodeInfo:
    return NodeInfo(
        name, "IDLE", frozenset({"DRAIN"} if drained else set()), reason, "root", reason_time
    )


def _failed_report(setup) -> RunReport:  # type: ignore[no-untyped-def]
    config, estate = setup
    inject(estate, "ib_down", port=0)
    return run(config, ("ib.ports",))


def test_decide_drains_with_prefixed_reason(setup) -> None:  # type: ignore[no-untyped-def]
    """A failed check drains the node with 'triage: <check> <reason>'."""
    report = _failed_report(setup)
    cluster = [_node(f"node{i}") for i in range(1, 31)]
    decision = decide_node(
        report, cluster[1], cluster, setup[0].health, may_resume=True, now=time.time()
    )
    assert decision.outcome is NodeOutcome.DRAIN
    assert decision.reason.startswith("triage: ib.ports mlx5_0:1 1: DOWN")


def test_admin_drain_is_never_touched(setup) -> None:  # type: ignore[no-untyped-def]
    """A node an admin drained stays drained with its reason, failing or passing."""
    config, _ = setup
    admin = _node("node2", "RMA ticket 4411", drained=True)
    passing = decide_node(
        run(config, ("gpu.count",)), admin, [admin], config.health, may_resume=True, now=time.time()
    )
    assert passing.outcome is NodeOutcome.ADMIN_DRAINED
    failing = decide_node(
        _failed_report(setup), admin, [admin], config.health, may_resume=True, now=time.time()
    )
    assert failing.outcome is NodeOutcome.ADMIN_DRAINED


def test_resume_only_ours_and_only_after_a_full_pass(setup) -> None:  # type: ignore[no-untyped-def]
    """Our drain is lifted when a full run passes; a partial run never resumes."""
    config, _ = setup
    ours = _node("node2", "triage: gpu.lost GPU3", drained=True)
    report = run(config)
    assert (
        decide_node(report, ours, [ours], config.health, may_resume=True, now=time.time()).outcome
        is NodeOutcome.RESUME
    )
    assert (
        decide_node(report, ours, [ours], config.health, may_resume=False, now=time.time()).outcome
        is NodeOutcome.NONE
    )


def test_circuit_breaker_stops_draining_for_a_cluster_wide_failure(setup) -> None:  # type: ignore[no-untyped-def]
    """When a check already drained more than its share of the cluster, it stops draining."""
    report = _failed_report(setup)
    now = time.time()
    cluster = [
        _node(f"node{i}", "triage: ib.ports mlx5_0:1 1: DOWN", drained=True, reason_time=now - 60)
        for i in range(1, 4)
    ]
    cluster += [_node(f"node{i}") for i in range(4, 21)]
    me = cluster[5]
    decision = decide_node(report, me, cluster, setup[0].health, may_resume=True, now=now)
    assert decision.outcome is NodeOutcome.BREAKER_OPEN
    assert "suspected check or fabric fault" in decision.detail
    stale = [replace(n, reason_time=now - 7200) if n.drained else n for n in cluster]
    assert (
        decide_node(report, me, stale, setup[0].health, may_resume=True, now=now).outcome
        is NodeOutcome.DRAIN
    )


def test_breaker_counts_nodes_marked_failing_the_same_check(setup) -> None:  # type: ignore[no-untyped-def]
    """Nodes that marked the same failing check in their Comment (not yet drained) count
    toward the breaker, so simultaneous failures everywhere drain nothing."""
    from slurm_triage.policies.breaker import failing_mark

    report = _failed_report(setup)
    now = time.time()
    marked = [replace(_node(f"node{i}"), comment=failing_mark("ib.ports", now - 2)) for i in (1, 3)]
    me = _node("node2")
    decision = decide_node(report, me, [*marked, me], setup[0].health, may_resume=True, now=now)
    assert decision.outcome is NodeOutcome.BREAKER_OPEN
    other_check = [replace(n, comment=failing_mark("gpu.count", now)) for n in marked]
    assert (
        decide_node(
            report, me, [*other_check, me], setup[0].health, may_resume=True, now=now
        ).outcome
        is NodeOutcome.DRAIN
    )
