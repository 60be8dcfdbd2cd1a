"""Metrics and notifications of real decisions (FakeDoor for slurmctld, a real journal, a
real webhook server on 127.0.0.1): the controller's textfile is a pure function of the
journal, and each drain and hold is one message."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse

from slurm_triage.actuator import Applied
from slurm_triage.config import MetricsConfig, NotifyConfig
from slurm_triage.observe import hooks
from slurm_triage.observe.controller import ControllerFacts, controller_families, read_facts
from slurm_triage.observe.exposition import openmetrics, prometheus_text
from slurm_triage.policies import Decision, Verdict
from slurm_triage.prolog_epilog.job_end import JobEnd
from tests.unit.test_decide import JOB, Cluster, nccl_timeout, xid79
from tests.unit.webhook_server import Webhook, webhook_server

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root records need root")


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_parse(text)
        for s in f.samples
    }


def _observed(cluster: Cluster, tmp_path: Path, hook: Webhook | None = None) -> Path:
    textfile = tmp_path / "textfile" / "slurm_triage_controller.prom"
    notify = NotifyConfig(webhook_url_file=hook.url_file(tmp_path)) if hook else NotifyConfig()
    cluster.config = replace(
        cluster.config,
        metrics=MetricsConfig(controller_textfile=str(textfile)),
        notify=notify,
    )
    return textfile


def _fault(cluster: Cluster, restart: int = 0) -> None:
    cluster.start_run()
    cluster.root_record("node1")
    cluster.root_record("node2", xid79("node2"))
    cluster.end(restart=restart)


def test_a_gpu_fault_is_counted_timed_and_notified(tmp_path: Path) -> None:
    """XID 79 on node2 of a 2-node job: the decision's textfile (0644, the Prometheus text
    format) counts the decision by cause/domain/action, the drain, one requeue latency and
    the GPU-seconds of the run; the webhook gets one message, for node2's drain."""
    cluster = Cluster(tmp_path)
    with webhook_server() as hook:
        textfile = _observed(cluster, tmp_path, hook)
        _fault(cluster)
        messages = hook.messages()
    assert [m["text"].split(":")[0:2] for m in messages] == [["slurm-triage", " node2 drained"]]
    assert stat.S_IMODE(textfile.stat().st_mode) == 0o644
    samples = _samples(textfile.read_text())
    decision = (("action", "requeue"), ("cause", "gpu_unavailable"), ("domain", "hardware"))
    assert samples[("slurm_triage_decisions_total", decision)] == 1
    assert samples[("slurm_triage_decision_drains_total", (("cause", "gpu_unavailable"),))] == 1
    assert samples[("slurm_triage_requeue_latency_seconds_count", ())] == 1
    assert samples[("slurm_triage_requeue_latency_seconds_bucket", (("le", "+Inf"),))] == 1
    # The run started 2 s before its end: 2 nodes x 8 GPUs (health.expected_gpus) x ~2 s.
    lost = samples[("slurm_triage_lost_gpu_seconds_total", decision[1:])]
    assert 2 * 8 * 1.5 < lost < 2 * 8 * 10
    sent = (("kind", "drain"), ("outcome", "sent"))
    assert samples[("slurm_triage_decision_notifications_total", sent)] == 1
    assert not [n for n in os.listdir(textfile.parent) if n.endswith(".tmp")]


def test_a_crash_loop_hold_is_counted_by_budget_and_notified(tmp_path: Path) -> None:
    """A node-failure budget of one: the second NCCL timeout holds the job; the budget is
    counted by name, and the webhook gets the hold (no drain: user evidence drains nothing)."""
    cluster = Cluster(tmp_path, max_node_failure_requeues=1)
    with webhook_server() as hook:
        textfile = _observed(cluster, tmp_path, hook)
        cluster.user_record("node1", *nccl_timeout())
        cluster.end()
        cluster.start_run()
        cluster.user_record("node1", *nccl_timeout())
        cluster.end(restart=1)
        messages = hook.messages()
    assert len(messages) == 1
    assert messages[0]["text"].startswith(f"slurm-triage: job {JOB} held after nccl_timeout: ")
    assert "node_failure requeue budget spent (1 of 1): held" in messages[0]["text"]
    samples = _samples(textfile.read_text())
    budget = ("slurm_triage_requeue_budget_exhausted_total", (("budget", "node_failure"),))
    assert samples[budget] == 1
    hold = (("action", "hold"), ("cause", "nccl_timeout"), ("domain", "infrastructure"))
    assert samples[("slurm_triage_decisions_total", hold)] == 1
    assert samples[("slurm_triage_requeue_latency_seconds_count", ())] == 1  # the first only


def test_a_dead_webhook_never_fails_the_decision(tmp_path: Path) -> None:
    """The endpoint refuses every attempt: the job is requeued and journalled as ever, and
    the failure is counted where the metrics show it."""
    cluster = Cluster(tmp_path)
    with webhook_server() as hook:
        hook.statuses = [500] * 10
        textfile = _observed(cluster, tmp_path, hook)
        cluster.config = replace(
            cluster.config,
            notify=replace(cluster.config.notify, webhook_attempts=2, webhook_retry_wait_s=0),
        )
        _fault(cluster)
    assert cluster.row().outcome == "ok" and cluster.row().action == "requeue"
    failed = (("kind", "drain"), ("outcome", "failed"))
    assert (
        _samples(textfile.read_text())[("slurm_triage_decision_notifications_total", failed)] == 1
    )


def test_a_hanging_webhook_holds_the_decision_no_longer_than_max_wait(tmp_path: Path) -> None:
    """A server that never answers: decide() returns within notify.max_wait_s (plus the
    decision's own work), the drain already done and journalled."""
    cluster = Cluster(tmp_path)
    with webhook_server() as hook:
        hook.hang.set()
        _observed(cluster, tmp_path, hook)
        cluster.config = replace(
            cluster.config,
            notify=replace(cluster.config.notify, webhook_timeout_s=30, max_wait_s=0.5),
        )
        cluster.start_run()
        cluster.root_record("node1")
        cluster.root_record("node2", xid79("node2"))
        started = time.monotonic()
        cluster.end()
        took = time.monotonic() - started
    assert took < 0.5 + 3.0  # the bound, with room for the decision on a loaded host
    assert cluster.door.node("node2").drained
    assert cluster.journal.notification_totals() == {("drain", "abandoned"): 1}


def test_metrics_are_a_function_of_the_journal_alone(tmp_path: Path) -> None:
    """What the decision wrote and what `read_facts` computes afresh from the journal are
    the same exposition; OpenMetrics of it parses with the reference parser."""
    cluster = Cluster(tmp_path)
    textfile = _observed(cluster, tmp_path)
    _fault(cluster)
    cluster.user_record("node1", *nccl_timeout())
    cluster.end(restart=1)
    written = textfile.read_text()
    again = prometheus_text(controller_families(read_facts(cluster.journal, cluster.config)))
    assert again == written
    names = {f.name for f in om_parse(openmetrics(controller_families(ControllerFacts())))}
    assert "slurm_triage_requeue_latency_seconds" in names


def test_dry_run_decisions_are_counted_but_notify_nothing(tmp_path: Path) -> None:
    """policy.act = false: the decision is counted with its verdict; nothing was drained or
    held, so nothing is sent."""
    cluster = Cluster(tmp_path, act=False)
    with webhook_server() as hook:
        textfile = _observed(cluster, tmp_path, hook)
        _fault(cluster)
        assert hook.requests == 0
    samples = _samples(textfile.read_text())
    decision = (("action", "requeue"), ("cause", "gpu_unavailable"), ("domain", "hardware"))
    assert samples[("slurm_triage_decisions_total", decision)] == 1
    assert samples[("slurm_triage_requeue_latency_seconds_count", ())] == 0


def test_run_start_prefers_slurms_own_start_time() -> None:
    """SLURM_JOB_START_TIME (EpilogSlurmctld, 23.02+) first; the controller's start only
    when Slurm has not requeued the job (then it may be the next run's); never a start
    after the end."""

    def slurm_start(env: dict[str, str]) -> float | None:
        """SLURM_JOB_START_TIME as the decision reads it (JobEnd, from one table)."""
        return JobEnd.from_env({"SLURM_JOB_ID": "7", **env}, 200.0).start_time

    assert (
        hooks.run_start(slurm_start({"SLURM_JOB_START_TIME": "100"}), 150.0, 200.0, True) == 100.0
    )
    assert hooks.run_start(slurm_start({}), 150.0, 200.0, False) == 150.0
    assert hooks.run_start(slurm_start({}), 150.0, 200.0, True) is None
    assert (
        hooks.run_start(slurm_start({"SLURM_JOB_START_TIME": "300"}), 250.0, 200.0, False) is None
    )
    assert hooks.run_start(slurm_start({"SLURM_JOB_START_TIME": "x"}), None, 200.0, False) is None


def test_notices_of_a_decision() -> None:
    """Each drained node and a held job is one notice; a dry run tells nothing."""
    decision = Decision(Verdict.HOLD, reasons=("gpu_memory: requeue", "x spent: held"))
    applied = Applied(held=True, drained=("node2", "node3"))
    notices = hooks.decision_notices(9, "gpu_memory", "why", decision, applied, 1.0)
    assert [(n.kind.value, n.node) for n in notices] == [
        ("drain", "node2"),
        ("drain", "node3"),
        ("hold", ""),
    ]
    assert notices[2].text == "job 9 held after gpu_memory: x spent: held"
    dry = hooks.decision_notices(9, "gpu_memory", "why", decision, Applied(dry_run=True), 1.0)
    assert dry == []
