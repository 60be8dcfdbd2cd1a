"""The cluster twin (slurm_triage.twin): small clusters, fixed seeds; timings are in
bench/bench_twin.py, never here."""

from __future__ import annotations

import json

import pytest

from slurm_triage import actuator
from slurm_triage.cli.main import main
from slurm_triage.replay.settings import SettingError
from slurm_triage.twin import policysets, run, validate
from slurm_triage.twin.scenario import FAULT_KINDS, Scenario, ScenarioError

# Four streams of 512-GPU jobs on 300 nodes, lemons as in the paper's ratio to the rest
# (200x), at a rate high enough that 20 days show them.
LEMON_SCENARIO = Scenario(
    nodes=300,
    days=20,
    seed=0,
    rf_per_node_day=0.02,
    lemon_share=0.03,
    lemon_factor=200,
    load=0.0,
    fixed_sizes_gpus=(512, 512, 512, 512),
    fixed_work_days=2.0,
)


def _figures(scenario: Scenario, names: str, *variants: str) -> dict[str, dict]:
    comparison = run.compare(scenario, policysets.parse(names, list(variants)))
    return {r.policy: r.figures for r in comparison.results}


def test_twin_matches_the_model_on_uniform_nodes_without_policy():
    """No lemons, nothing persistent, no policy: per-job MTTF is 1/(N r_f) (inside the
    twin's exact 95% interval) and ETTR is within 2% of the closed form and of the
    project's Monte Carlo, from 1k to 16k GPUs."""
    checked = validate.validate(validate.scenario(days=80, seed=3), mc_runs=1000)
    assert [r.gpus for r in checked.rows] == [1024, 2048, 4096, 8192, 16384]
    for row in checked.rows:
        assert row.closed_form_valid
        assert abs(row.gap_closed_form) <= 0.02, row
        assert abs(row.gap_monte_carlo) <= 0.02, row
        assert row.mttf_in_interval, row
        assert row.failures > 10
    assert checked.passed()


def test_validation_notices_a_twin_that_loses_more_than_the_model_says():
    """The same check fails when the twin's jobs lose more per failure than the model
    (a 30-minute restart in the twin against the model's 5): the test can fail."""
    setup = validate.scenario(days=40, seed=3, restart_min=5.0)
    slower = setup.but(restart_min=30.0)
    checked = validate.validate(slower, mc_runs=200)
    model_at_5 = validate.validate(setup, mc_runs=200)
    worst = min(
        r.ettr_twin / m.ettr_closed_form - 1
        for r, m in zip(checked.rows, model_at_5.rows, strict=True)
    )
    assert worst < -0.02


def test_lemon_detection_drains_lemons_and_lowers_large_job_failures():
    """With lemon detection on (the real node_signals through the policy chain), the twin
    drains most injected lemons as lemons, and the failure rate of 512-GPU attempts drops
    against the same seed with it off."""
    figures = _figures(LEMON_SCENARIO, "triage", "off=lemons=off")
    on, off = figures["triage"], figures["off"]
    assert on["lemons"]["nodes"] == 9
    assert on["lemons"]["drained"] >= 5
    assert off["lemons"]["drained"] == 0
    assert off["drains"].get("lemon", 0) == 0
    on_rate = on["large_jobs"]["attempt_failure_rate"]
    off_rate = off["large_jobs"]["attempt_failure_rate"]
    assert on_rate < off_rate - 0.05


def test_triage_decisions_go_through_the_actuator_and_the_door():
    """The triage set's requeues, exclusions and drains are the actuator's calls through
    the simulated door; with policy.act false the actuator dry-runs and none are made."""
    figures = _figures(LEMON_SCENARIO.but(days=8), "triage", "observe=act=false")
    acting, observing = figures["triage"], figures["observe"]
    assert acting["door_calls"]["requeue"] == acting["requeues"]["ours"] > 0
    assert acting["door_calls"]["set_excluded_nodes"] > 0
    assert acting["door_calls"]["drain"] >= acting["drains"]["decision"] > 0
    assert observing["decisions"] > 0
    assert observing["requeues"]["ours"] == 0
    assert "decision" not in observing["drains"]
    assert observing["resubmissions"] > 0  # left ended: their users resubmit them


def test_carry_out_is_the_one_actuator(monkeypatch):
    """Every triage decision is carried out by actuator.carry_out."""
    calls = []
    real = actuator.carry_out

    def spy(*args, **kwargs):
        calls.append(kwargs["cause"])
        return real(*args, **kwargs)

    monkeypatch.setattr("slurm_triage.replay.judge.carry_out", spy)
    figures = _figures(LEMON_SCENARIO.but(days=5), "triage")["triage"]
    assert len(calls) == figures["decisions"] > 0


def test_budgets_hold_jobs_only_when_spent():
    """A node-failure budget of 0 holds at the first node failure; a generous one never."""
    figures = _figures(
        LEMON_SCENARIO.but(days=8),
        "strict,loose",
        "strict=max_node_failure_requeues=0",
        "loose=max_requeues=10000,max_node_failure_requeues=10000,max_unknown_requeues=10000",
    )
    assert figures["strict"]["holds"] > 0
    assert figures["loose"]["holds"] == 0


def test_policy_sets_compare_on_the_same_faults():
    """none resubmits every failed job, native requeues NODE_FAIL only, triage requeues
    with exclusion; all three see the same fault plan."""
    scenario = Scenario(nodes=400, days=6, seed=1, warmup_days=1)
    comparison = run.compare(scenario, policysets.parse("none,native,triage", []))
    none, native, triage = (r.figures for r in comparison.results)
    assert none["requeues"] == {"slurm": 0, "ours": 0}
    assert native["requeues"]["ours"] == 0 and native["requeues"]["slurm"] > 0
    assert triage["requeues"]["ours"] > 0
    assert none["resubmissions"] > triage["resubmissions"]
    assert none["decisions"] == native["decisions"] == 0
    assert comparison.fault_events > 0


def test_worker_processes_give_the_same_figures():
    """--workers runs the sets in processes that draw the same jobs and faults."""
    scenario = Scenario(nodes=200, days=2, seed=5, warmup_days=0.5)
    sets = policysets.parse("none,triage", [])
    alone = run.compare(scenario, sets).results
    parallel = run.compare(scenario, sets, workers=2).results
    assert [r.figures for r in alone] == [r.figures for r in parallel]


def test_the_same_seed_gives_the_same_figures():
    scenario = Scenario(nodes=200, days=3, seed=7, warmup_days=0.5)
    first = _figures(scenario, "triage")
    second = _figures(scenario, "triage")
    assert first == second


def test_fault_kinds_are_taxonomy_causes_whose_shares_sum_to_one():
    assert abs(sum(k.share for k in FAULT_KINDS) - 1.0) < 1e-9
    assert len({k.cause for k in FAULT_KINDS}) == len(FAULT_KINDS)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"nodes": 0}, "nodes must be 1 to 65536"),
        ({"days": -1}, "days must be a number > 0"),
        ({"lemon_share": 1.5}, "lemon_share must be within [0, 1]"),
        ({"warmup_days": 40}, "must be below days"),
        ({"fixed_sizes_gpus": (10**6,)}, "does not fit"),
    ],
)
def test_bad_scenario_values_are_one_line_errors(changes, message):
    with pytest.raises(ScenarioError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Scenario(**changes)


def test_variants_are_read_as_config_overrides():
    sets = policysets.parse("none,x", ["x=max_node_failure_requeues=2,lemons=off,repair=off"])
    assert [s.name for s in sets] == ["none", "x"]
    x = sets[1]
    assert x.policy.max_node_failure_requeues == 2
    assert x.policy.lemon_failed_jobs == 100000
    assert not x.repair
    assert "lemons off" in x.describe() and "repair off" in x.describe()
    with pytest.raises(SettingError, match="unknown key 'max_requeue'"):
        policysets.parse("triage", ["y=max_requeue=2"])
    with pytest.raises(SettingError, match="policy.max_requeues = 'two' is not valid"):
        policysets.parse("triage", ["y=max_requeues=two"])
    with pytest.raises(ScenarioError, match="unknown policy set 'ours'"):
        policysets.parse("ours", [])


def test_cli_twin_prints_ettr_by_size_per_policy_set_as_json(capsys):
    status = main(
        ["twin", "--nodes", "200", "--days", "3", "--policies", "none,native,triage", "--json"]
    )
    assert status == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in data["policies"]] == ["none", "native", "triage"]
    for policy in data["policies"]:
        assert policy["buckets"] and all("ettr" in b for b in policy["buckets"])


def test_cli_twin_judges_the_config_as_if_it_acted(tmp_path, capsys):
    """A site starting with act = false still sees what its settings would do."""
    config = tmp_path / "config.toml"
    config.write_text("[policy]\nact = false\n")
    argv = ["--config", str(config), "twin", "--nodes", "200", "--days", "3"]
    assert main([*argv, "--policies", "triage", "--json"]) == 0
    (triage,) = json.loads(capsys.readouterr().out)["policies"]
    assert triage["requeues"]["ours"] > 0


def test_cli_twin_writes_the_report(tmp_path, capsys):
    status = main(["twin", "--nodes", "150", "--days", "2", "--out", str(tmp_path / "r")])
    assert status == 0
    assert "ETTR by job size" in capsys.readouterr().out
    for name in ("index.html", "ettr.png", "repair.png", "summary.json"):
        assert (tmp_path / "r" / name).stat().st_size > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "0"], "--nodes must be an integer > 0"),
        (["--nodes", "100000"], "nodes must be 1 to 65536"),
        (["--rf", "6.5"], "did you mean 6.5e-3"),
        (["--set", "nope=1"], "--set 'nope=1': expected KEY=VALUE"),
        (["--variant", "bad"], "bad variant 'bad'"),
        (["--policies", "ours"], "unknown policy set 'ours'"),
    ],
)
def test_cli_twin_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert main(["twin", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
