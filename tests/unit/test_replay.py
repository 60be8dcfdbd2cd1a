"""Replay of a site's history through other policy settings (slurm_triage.replay)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from slurm_triage.analytics.ingest import read_sacct_text
from slurm_triage.analytics.node_events import from_log
from slurm_triage.attribution.engine import Attribution
from slurm_triage.cli.main import main
from slurm_triage.config import HealthConfig, PolicyConfig
from slurm_triage.journal import Journal
from slurm_triage.prolog_epilog.decide import node_blame
from slurm_triage.replay import history as history_mod
from slurm_triage.replay.judge import counts_against_nodes
from slurm_triage.replay.replay import replay
from slurm_triage.replay.settings import SettingError, settings
from slurm_triage.slurm.events import parse_sacctmgr_events
from slurm_triage.taxonomy import Cause, info

HEADER = (
    "JobID|JobIDRaw|State|ExitCode|Submit|Start|End|ElapsedRaw|NNodes|AllocTRES|NodeList|"
    "Partition|User|AdminComment"
)
T0 = datetime(2026, 3, 1)
EVENTS_HEADER = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User"
# Budgets that never hold within this history: the site's config before it tries others.
PERMISSIVE = PolicyConfig(max_requeues=100, max_node_failure_requeues=50)


def _time(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def _row(job: int, state: str, start: datetime, hours: float, gpus: int, nodes: str) -> str:
    end = start + timedelta(hours=hours)
    count = max(gpus // 8, 1)
    return (
        f"{job}|{job}|{state}|0:0|{_time(start)}|{_time(start)}|{_time(end)}|"
        f"{int(hours * 3600)}|{count}|gres/gpu={gpus},node={count}|{nodes}|gpu|alice|"
    )


def crash_loop_text() -> str:
    """Job 500, 1024 GPUs on 128 nodes, NODE_FAILed 35 times (each requeued: a new row,
    the same id), then completed; and two ordinary jobs."""
    rows = [HEADER]
    for i in range(35):
        rows.append(_row(500, "NODE_FAIL", T0 + timedelta(hours=2 * i), 1.5, 1024, "gpu[001-128]"))
    rows.append(_row(500, "COMPLETED", T0 + timedelta(hours=70), 10, 1024, "gpu[001-128]"))
    rows.append(_row(600, "COMPLETED", T0, 3, 8, "gpu200"))
    rows.append(_row(601, "FAILED", T0, 3, 8, "gpu201"))
    return "\n".join(rows) + "\n"


def _history(text: str, events: str | None = None, journal: Path | None = None):
    log = from_log(parse_sacctmgr_events(events), "events") if events else None
    return history_mod.build(read_sacct_text(text, source="test"), log, journal)


def test_a_stricter_budget_holds_the_crash_loop_history_requeued_35_times():
    """The paper's 1024-GPU job that NODE_FAILed through 35 requeues: with the site's
    permissive budget replay holds nothing; with max_node_failure_requeues=5 the real
    policy chain holds it at its sixth failure, and the 29 failed attempts that followed
    (and its completion) are not run."""
    history = _history(crash_loop_text())
    assert history.requeues == 35
    config, strict = settings(PERMISSIVE, HealthConfig(), ["strict=max_node_failure_requeues=5"])
    before, after = replay(history, config), replay(history, strict)
    assert before.jobs_held == set() and before.crash_loops_stopped == set()
    # Job 601's FAILED with no evidence is `unknown`: requeued once (the taxonomy's
    # default), a requeue history did not make.
    assert before.requeues == 35 + 1
    assert before.requeues_history_did_not_make == 1
    assert after.jobs_held == {500}
    assert after.crash_loops_stopped == {500}
    assert after.requeues == 5 + 1
    assert after.attempts_not_run == 30
    assert after.gpu_h_saved == pytest.approx(29 * 1024 * 1.5)
    assert after.gpu_h_at_risk == pytest.approx(1024 * 10)
    # The default backoff: 60 s, 120 s, 240 s, 480 s before the 2nd to 5th requeues.
    assert after.backoff_h == pytest.approx((60 + 120 + 240 + 480) / 3600)


def test_the_default_node_failure_budget_already_holds_it_after_five():
    history = _history(crash_loop_text())
    (config,) = settings(PolicyConfig(), HealthConfig(), [])
    outcome = replay(history, config)
    assert outcome.jobs_held == {500}
    assert outcome.requeues == 5 + 1


def _drain_history() -> tuple[str, str]:
    """Five failed jobs on gpu007 over four days, each explained by our own drain of
    gpu007 for gpu_memory (Slurm's node event, so root's word)."""
    rows, events = [HEADER], [EVENTS_HEADER]
    for job, hours in ((701, 0), (702, 3), (703, 30), (704, 55), (705, 80)):
        start = T0 + timedelta(hours=hours)
        rows.append(_row(job, "FAILED", start, 1, 16, "gpu[007-008]"))
        at = _time(start + timedelta(hours=1))
        events.append(f"c|gpu007|{at}|{at}|DRAIN|triage: gpu_memory job={job}: xid 48|slurm(64030)")
    return "\n".join(rows) + "\n", "\n".join(events) + "\n"


def test_a_node_drained_on_root_evidence_avoids_the_failures_that_followed():
    """Our drain of gpu007 at the first failure: with repair on (24 h) the failure 2 h
    later is avoided and the later ones are decided again; with repair off every later
    failure on gpu007 is avoided."""
    text, events = _drain_history()
    history = _history(text, events)
    assert [e.blamed for e in history.ends] == [("gpu007",)] * 5
    assert all(e.root_backed and e.cause is Cause.GPU_MEMORY for e in history.ends)
    on, off = settings(
        PolicyConfig(), HealthConfig(), ["off=repair=off"], repair_h=24, cluster_nodes=20
    )
    repaired, kept_out = replay(history, on), replay(history, off)
    assert repaired.failures_avoided == 1
    assert repaired.nodes_drained == {"gpu007"}
    assert repaired.requeues_with_exclusion == 4
    assert kept_out.failures_avoided == 4
    assert kept_out.decisions == 1


def test_without_drain_causes_or_lemons_nothing_is_drained_or_avoided():
    text, events = _drain_history()
    history = _history(text, events)
    _, nodrain = settings(PolicyConfig(), HealthConfig(), ["nodrain=drain_causes=,lemons=off"])
    outcome = replay(history, nodrain)
    assert outcome.nodes_drained == set() and outcome.failures_avoided == 0
    assert outcome.decisions == 5


def test_lemon_thresholds_decide_whether_a_node_is_drained_as_a_lemon():
    """Five root-backed failures of different jobs on one node within days: a lemon at
    lemon_failed_jobs=3 (the real node_signals judging the replayed journal), not with
    lemons off."""
    text, events = _drain_history()
    history = _history(text, events)
    _, low, off = settings(
        PolicyConfig(),
        HealthConfig(),
        ["low=lemon_failed_jobs=3", "nolemons=lemons=off"],
        repair_h=1,
    )
    assert replay(history, low).lemon_nodes == {"gpu007"}
    assert replay(history, off).lemon_nodes == set()


def test_the_journal_says_whom_a_decision_blamed_and_on_whose_evidence(tmp_path):
    """Without node events, the journal's blamed nodes and root backing drive the replay:
    a user-backed blame excludes but never drains."""
    text = "\n".join([HEADER, _row(801, "FAILED", T0, 1, 16, "gpu[010-011]")]) + "\n"
    path = tmp_path / "journal.sqlite"
    journal = Journal(path)
    journal.claim(801, 0, "test")
    journal.record(
        801, 0, {"cause": "gpu_memory", "blamed": ["gpu011"], "root_backed": 0, "action": "x"}
    )
    journal.close()
    history = _history(text, journal=path)
    (end,) = history.ends
    assert end.blamed == ("gpu011",) and not end.root_backed
    (config,) = settings(PolicyConfig(), HealthConfig(), [], cluster_nodes=20)
    outcome = replay(history, config)
    assert outcome.requeues_with_exclusion == 1
    assert outcome.nodes_drained == set()


def test_the_breaker_replay_blocks_health_drains_past_its_limit():
    """Five nodes drained for the same check within ten minutes on a 20-node cluster:
    the default breaker (10%, at least 2) lets two through; at 50% none is blocked."""
    events = [EVENTS_HEADER]
    for i in range(5):
        at = _time(T0 + timedelta(minutes=2 * i))
        events.append(f"c|gpu0{i + 20}|{at}|{at}|DRAIN|triage: gpu.row_remap pending|root(0)")
    text = "\n".join([HEADER, _row(900, "COMPLETED", T0, 1, 8, "gpu001")]) + "\n"
    history = _history(text, "\n".join(events) + "\n")
    assert len(history.health_drains) == 5
    default, loose = settings(
        PolicyConfig(), HealthConfig(), ["loose=breaker_max_share=0.5"], cluster_nodes=20
    )
    assert replay(history, default).breaker_blocked == 3
    assert replay(history, loose).breaker_blocked == 0


@pytest.mark.parametrize("cause", list(Cause))
@pytest.mark.parametrize("root", [True, False])
def test_what_counts_against_a_node_is_decides_rule(cause, root):
    """The Judge's rule is decide.node_blame's, for every cause."""
    attribution = Attribution(
        cause=cause,
        domain=info(cause).domain,
        action=info(cause).action,
        condition=info(cause).condition,
        nodes=("n1",),
        confidence=1.0,
        root_backed=root,
        evidence=(),
        reason="",
    )
    assert counts_against_nodes(cause, root) == bool(node_blame(attribution))


def test_settings_refuse_what_a_replay_cannot_do():
    with pytest.raises(SettingError, match="prolog has no meaning"):
        settings(PolicyConfig(), HealthConfig(), ["x=prolog=off"])
    with pytest.raises(SettingError, match="bad variant 'config=act=false'"):
        settings(PolicyConfig(), HealthConfig(), ["config=act=false"])


def test_cli_replay_prints_each_setting(tmp_path, capsys):
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(crash_loop_text())
    config = tmp_path / "config.toml"
    # act = false, as a site starts: replay judges the settings as they would act.
    config.write_text("[policy]\nact = false\nmax_requeues = 100\nmax_node_failure_requeues = 50\n")
    argv = ["--config", str(config), "replay", "--sacct", str(sacct), "--no-journal"]
    status = main([*argv, "--try", "strict=max_node_failure_requeues=5", "--json"])
    assert status == 0
    data = json.loads(capsys.readouterr().out)
    assert data["history"]["longest_chain"] == 36
    by_name = {s["setting"]: s for s in data["settings"]}
    assert by_name["config"]["crash_loops_stopped"] == 0
    assert by_name["strict"]["crash_loops_stopped"] == 1
    assert by_name["strict"]["crash_loop_jobs"] == [500]
    assert main([*argv, "--try", "strict=max_node_failure_requeues=5"]) == 0
    assert "crash loops stopped" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--try", "x=max_requeues=lots"], "policy.max_requeues = 'lots' is not valid"),
        (["--try", "x=nonsense=1"], "unknown key 'nonsense'"),
        (["--repair-h", "-1"], "--repair-h must be a number >= 0"),
    ],
)
def test_cli_replay_bad_input_is_one_line_and_exit_2(tmp_path, argv, message, capsys):
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(crash_loop_text())
    assert main(["replay", "--sacct", str(sacct), "--no-journal", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_replay_of_a_missing_file_is_exit_2(tmp_path, capsys):
    assert main(["replay", "--sacct", str(tmp_path / "nope"), "--no-journal"]) == 2
    assert "no such file" in capsys.readouterr().err
