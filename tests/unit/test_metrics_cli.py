"""`slurm-triage metrics` and `metrics serve`: the journal's and the node ledgers' series,
printed as OpenMetrics or served over HTTP on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse

from slurm_triage.config import Config, DecisionConfig, MetricsConfig, PathsConfig
from slurm_triage.journal import Journal
from slurm_triage.observe import hooks
from slurm_triage.observe.current import current
from slurm_triage.observe.serve import OPENMETRICS_TYPE, TEXT_TYPE, make_server
from slurm_triage.taxonomy import Cause


def _host(tmp_path: Path) -> Config:
    """A host that is controller and node: a journal with one decision, node2's ledger."""
    config = Config(
        paths=PathsConfig(state_dir=str(tmp_path / "state"), evidence_dir=str(tmp_path / "ev")),
        decision=DecisionConfig(journal=str(tmp_path / "journal.sqlite")),
        metrics=MetricsConfig(node_textfile=str(tmp_path / "tf" / "{node}.prom")),
    )
    journal = Journal(config.decision.journal)
    journal.claim(5, 0, "test")
    journal.record(
        5,
        0,
        {
            "cause": "gpu_memory",
            "domain": "hardware",
            "action": "requeue",
            "ended_at": 100.0,
            "run_started_at": 40.0,
            "gpus": 16,
            "requeued_at": 100.8,
        },
    )
    journal.close()
    hooks.after_epilog(config, "node2", Cause.GPU_MEMORY)
    return config


def _cli(config_file: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_triage.cli.main", "--config", str(config_file), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _config_file(tmp_path: Path, config: Config) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f'[paths]\nstate_dir = "{config.paths.state_dir}"\n'
        f'[decision]\njournal = "{config.decision.journal}"\n'
    )
    return path


def test_metrics_prints_openmetrics_of_the_journal_and_the_ledgers(tmp_path: Path) -> None:
    """One decision (60 s on 16 GPUs, requeued 0.8 s after its end) and node2's Epilog
    fault, as the reference OpenMetrics parser reads them."""
    config = _host(tmp_path)
    result = _cli(_config_file(tmp_path, config), "metrics")
    assert result.returncode == 0, result.stderr
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in om_parse(result.stdout)
        for s in f.samples
    }
    hw = (("cause", "gpu_memory"), ("domain", "hardware"))
    assert samples[("slurm_triage_decisions_total", (("action", "requeue"), *hw))] == 1
    assert samples[("slurm_triage_lost_gpu_seconds_total", hw)] == 60 * 16
    assert samples[("slurm_triage_requeue_latency_seconds_bucket", (("le", "1.0"),))] == 1
    assert samples[("slurm_triage_requeue_latency_seconds_bucket", (("le", "0.5"),))] == 0
    fault = (("cause", "gpu_memory"), ("node", "node2"))
    assert samples[("slurm_triage_epilog_node_faults_total", fault)] == 1


def test_metrics_scopes_and_says_what_is_missing(tmp_path: Path) -> None:
    """--nodes leaves the journal out; a host with neither says so on stderr, exit 0."""
    config = _host(tmp_path)
    nodes = _cli(_config_file(tmp_path, config), "metrics", "--nodes", "--format", "prometheus")
    assert "slurm_triage_decisions" not in nodes.stdout
    assert "slurm_triage_node_runs_total" in nodes.stdout
    empty = tmp_path / "empty.toml"
    empty.write_text(
        f'[paths]\nstate_dir = "{tmp_path}/none"\n[decision]\njournal = "{tmp_path}/none.db"\n'
    )
    result = _cli(empty, "metrics")
    assert (result.returncode, result.stdout) == (0, "# EOF\n")
    assert "no journal at" in result.stderr and "no node ledger under" in result.stderr


def test_serve_answers_openmetrics_or_text_as_the_scraper_asks(tmp_path: Path) -> None:
    """GET /metrics on 127.0.0.1: OpenMetrics for a scraper that accepts it (Prometheus
    does), the text format otherwise; other paths are 404."""
    config = _host(tmp_path)
    server = make_server("127.0.0.1", 0, lambda: current(config).families)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        om = urllib.request.Request(
            base + "/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0"}
        )
        with urllib.request.urlopen(om, timeout=10) as response:
            assert response.headers["Content-Type"] == OPENMETRICS_TYPE
            names = {f.name for f in om_parse(response.read().decode())}
        with urllib.request.urlopen(base + "/metrics", timeout=10) as response:
            assert response.headers["Content-Type"] == TEXT_TYPE
            text_names = {f.name for f in text_parse(response.read().decode())}
        try:
            urllib.request.urlopen(base + "/other", timeout=10)
            raise AssertionError("expected a 404")
        except urllib.error.HTTPError as exc:
            assert exc.code == 404
    finally:
        server.shutdown()
        server.server_close()
    assert {"slurm_triage_decisions", "slurm_triage_epilog_node_faults"} <= names
    assert {"slurm_triage_decisions", "slurm_triage_epilog_node_faults"} <= text_names


def test_serve_refuses_a_port_it_cannot_take_in_one_line(tmp_path: Path) -> None:
    """A port in use is exit 2 with one line, no traceback."""
    server = make_server("127.0.0.1", 0, lambda: ())
    try:
        port = str(server.server_address[1])
        result = _cli(_config_file(tmp_path, _host(tmp_path)), "metrics", "serve", "--port", port)
    finally:
        server.server_close()
    assert result.returncode == 2
    assert result.stderr.strip().startswith(
        f"slurm-triage: error: cannot listen on 127.0.0.1:{port}"
    )
    assert "Traceback" not in result.stderr
