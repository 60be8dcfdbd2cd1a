"""A node's metrics and notifications: health runs on a simulated node (FakeDoor in place of
slurmctld), the Epilog's node faults, the ledger they are computed from, and its textfile."""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families as text_parse

from slurm_triage.atomic import write_atomically
from slurm_triage.config import Config, MetricsConfig, NotifyConfig
from slurm_triage.health_checks.runner import run_checks
from slurm_triage.observe import hooks
from slurm_triage.observe.node_ledger import (
    LedgerError,
    NodeLedger,
    ledger_path,
    node_families,
    read_ledger,
)
from slurm_triage.observe.textfile import MetricsBusy, locked
from slurm_triage.policies.nodes import NodeOutcome
from slurm_triage.prolog_epilog.healthcheck import record
from slurm_triage.prolog_epilog.node_action import act
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.taxonomy import Cause
from slurm_triage.testing import FakeDoor, node_info
from tests.unit.test_health_runner import sim_config
from tests.unit.webhook_server import Webhook, webhook_server

NODE = "node2"


def _config(tmp_path: Path, hook: Webhook | None = None) -> Config:
    config = sim_config(tmp_path, breaker_settle_s=0)
    notify = (
        NotifyConfig(webhook_url_file=hook.url_file(tmp_path), webhook_format="json")
        if hook
        else NotifyConfig()
    )
    textfile = tmp_path / "textfile" / "slurm_triage_{node}.prom"
    return replace(config, metrics=MetricsConfig(node_textfile=str(textfile)), notify=notify)


def _textfile(config: Config) -> Path:
    return Path(config.metrics.node_textfile.replace("{node}", NODE))


def _samples(config: Config) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "node"))): s.value
        for f in text_parse(_textfile(config).read_text())
        for s in f.samples
        if s.labels.get("node") == NODE
    }


def _periodic(config: Config, door: FakeDoor, *, dry_run: bool = False) -> NodeOutcome:
    """What `slurm-triage-healthcheck` does, with the door given."""
    report = run_checks(config, mode="cron", everything=True, node=NODE)
    if not dry_run:
        record(config, report)
    return act(config, report, may_resume=True, dry_run=dry_run, door=door).outcome


@pytest.fixture
def estate(tmp_path: Path) -> NodeEstate:
    return NodeEstate(Path(sim_config(tmp_path).health.simulate_root), NODE).ensure()


def test_a_healthy_run_records_each_checks_status_and_time(
    tmp_path: Path, estate: NodeEstate
) -> None:
    """Every check's status (one of five, as 0/1), duration and time; the run counted by
    mode; the textfile 0644 in the Prometheus text format, the ledger root's alone."""
    config = _config(tmp_path)
    assert _periodic(config, FakeDoor(nodes=[node_info(NODE)])) is NodeOutcome.NONE
    samples = _samples(config)
    status = {labels: v for (name, labels), v in samples.items() if name.endswith("check_status")}
    assert status[(("check", "gpu.count"), ("status", "ok"))] == 1
    assert status[(("check", "gpu.count"), ("status", "fail"))] == 0
    assert sum(status.values()) == len({dict(k)["check"] for k in status})  # one status each
    assert samples[("slurm_triage_node_runs_total", (("mode", "cron"),))] == 1
    assert ("slurm_triage_health_check_duration_seconds", (("check", "gpu.count"),)) in samples
    assert stat.S_IMODE(_textfile(config).stat().st_mode) == 0o644
    ledger = ledger_path(config.paths.state_dir, NODE)
    assert stat.S_IMODE(ledger.stat().st_mode) == 0o600


def test_an_rma_drain_is_counted_and_notified_once(tmp_path: Path, estate: NodeEstate) -> None:
    """A failed row remap drains the node: the drain is counted with the action the check
    asked for (rma), and the webhook gets one `rma` message naming the node and check."""
    inject(estate, "remap_failure")
    with webhook_server() as hook:
        config = _config(tmp_path, hook)
        door = FakeDoor(nodes=[node_info(f"node{i}") for i in range(1, 21)])
        assert _periodic(config, door) is NodeOutcome.DRAIN
        messages = hook.messages()
    assert [(m["kind"], m["node"], m["check"]) for m in messages] == [
        ("rma", NODE, "gpu.row_remap")
    ]
    samples = _samples(config)
    drained = (("action", "rma"), ("check", "gpu.row_remap"))
    assert samples[("slurm_triage_health_drains_total", drained)] == 1
    sent = (("kind", "rma"), ("outcome", "sent"))
    assert samples[("slurm_triage_health_notifications_total", sent)] == 1


def test_breaker_trips_are_counted_each_run_and_notified_once_per_window(
    tmp_path: Path, estate: NodeEstate
) -> None:
    """Three other nodes already drained for ib.ports: the breaker holds this node's drain
    back at every run (each counted) and the webhook hears of it once per breaker window."""
    inject(estate, "ib_down", port=0)
    now = time.time()
    others = [
        node_info(
            f"node{i}", flags=frozenset({"DRAIN"}), reason="triage: ib.ports x", reason_time=now
        )
        for i in (1, 3, 4)
    ]
    with webhook_server() as hook:
        config = _config(tmp_path, hook)
        door = FakeDoor(nodes=[*others, node_info(NODE)])
        assert _periodic(config, door) is NodeOutcome.BREAKER_OPEN
        assert _periodic(config, door) is NodeOutcome.BREAKER_OPEN
        messages = hook.messages()
    assert [(m["kind"], m["check"]) for m in messages] == [("breaker_trip", "ib.ports")]
    trips = ("slurm_triage_health_breaker_trips_total", (("check", "ib.ports"),))
    assert _samples(config)[trips] == 2


def test_a_resume_is_counted(tmp_path: Path, estate: NodeEstate) -> None:
    """A node we drained passes every check: resumed, and counted."""
    config = _config(tmp_path)
    ours = node_info(NODE, flags=frozenset({"DRAIN"}), reason="triage: gpu.lost GPU3")
    assert _periodic(config, FakeDoor(nodes=[ours])) is NodeOutcome.RESUME
    assert _samples(config)[("slurm_triage_health_resumes_total", ())] == 1


def test_a_dry_run_counts_and_sends_nothing(tmp_path: Path, estate: NodeEstate) -> None:
    """`check --dry-run` changes nothing: no ledger, no textfile, no message."""
    inject(estate, "remap_failure")
    with webhook_server() as hook:
        config = _config(tmp_path, hook)
        door = FakeDoor(nodes=[node_info(NODE)])
        _periodic(config, door, dry_run=True)
        assert hook.requests == 0
    assert not _textfile(config).exists()
    assert not ledger_path(config.paths.state_dir, NODE).exists()


def test_metrics_off_writes_nothing(tmp_path: Path, estate: NodeEstate) -> None:
    """With metrics.node_textfile and notifications unset (the default), no ledger is kept."""
    config = sim_config(tmp_path, breaker_settle_s=0)
    _periodic(config, FakeDoor(nodes=[node_info(NODE)]))
    assert not (Path(config.paths.state_dir) / "metrics").exists()


def test_the_epilogs_node_fault_is_counted(tmp_path: Path) -> None:
    """An Epilog that asks Slurm to drain its node counts the fault by cause; every Epilog
    counts as a run."""
    config = _config(tmp_path)
    hooks.after_epilog(config, NODE, Cause.GPU_UNAVAILABLE)
    hooks.after_epilog(config, NODE, None)
    samples = _samples(config)
    fault = ("slurm_triage_epilog_node_faults_total", (("cause", "gpu_unavailable"),))
    assert samples[fault] == 1
    assert samples[("slurm_triage_node_runs_total", (("mode", "epilog"),))] == 2


def test_a_damaged_ledger_keeps_only_what_it_may_hold(tmp_path: Path) -> None:
    """Unknown families, wrong label counts, non-numbers and bad statuses are dropped on
    reading; garbage starts a fresh ledger."""
    path = tmp_path / "node2.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "values": {
                    "slurm_triage_health_resumes": [[[], 2], [["extra"], 5]],
                    "slurm_triage_health_drains": [[["gpu.lost", "drain"], "7"]],
                    "evil_family": [[[], 1]],
                },
                "check_status": {"gpu.lost": "fail", "gpu.ecc": "pwned"},
            }
        )
    )
    ledger = read_ledger(path, NODE)
    assert ledger.values == {"slurm_triage_health_resumes": {(): 2.0}}
    assert ledger.check_status == {"gpu.lost": "fail"}
    path.write_text("{not json")
    assert read_ledger(path, NODE) == NodeLedger(NODE)
    names = {f.spec.name for f in node_families([ledger])}
    assert "evil_family" not in names


@pytest.mark.parametrize("bad", ["../etc/passwd", "", "a/b", ".hidden", "x" * 200])
def test_a_node_name_that_cannot_name_a_file_is_refused(tmp_path: Path, bad: str) -> None:
    """The ledger's file name comes from the node name: anything but a host name is refused,
    and the hook says so in the log without failing its caller."""
    with pytest.raises(LedgerError):
        ledger_path(str(tmp_path), bad)
    hooks.after_epilog(_config(tmp_path), bad, None)
    assert not (tmp_path / "st" / "metrics").exists() or not any(
        (tmp_path / "st" / "metrics").iterdir()
    )


def test_a_held_lock_gives_up_in_bounded_time_without_failing_the_caller(tmp_path: Path) -> None:
    """Another writer holding the ledger's lock: the lock gives up after its wait and the
    hook returns (the Prolog goes on)."""
    config = _config(tmp_path)
    path = ledger_path(config.paths.state_dir, NODE)
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with locked(path):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        held.wait(5)
        with pytest.raises(MetricsBusy), locked(path, wait_s=0.2):
            pass
        hooks.after_epilog(config, NODE, None)  # logs, does not raise
    finally:
        release.set()
        thread.join()
    assert not _textfile(config).exists()
    assert not [n for n in os.listdir(path.parent) if n.endswith(".tmp")]


def test_a_planted_temporary_file_is_never_written_through(tmp_path: Path) -> None:
    """A link planted where a temporary file might be (a hard link to another file, or a
    symlink, at the name a writer used before each call drew its own) is not written
    through; the victim is untouched."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "tf" / "m.prom"
    target.parent.mkdir()
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    os.link(victim, tmp)
    write_atomically(target, "metric 1\n")
    tmp.unlink()
    tmp.symlink_to(victim)
    write_atomically(target, "metric 2\n")
    assert victim.read_text() == "precious\n"
    assert target.read_text() == "metric 2\n"
