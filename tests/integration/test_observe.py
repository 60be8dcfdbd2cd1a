"""What operators see after the demo's scenarios on the real local cluster (issue 17): the
node_exporter textfiles the nodes and the controller wrote hold the expected series, read by
Prometheus's own parser; `slurm-triage metrics` says the same; the webhook hears one message
per drain; and `sacct -o AdminComment` tells every failed end."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slurm_triage.devcluster import demo as demo_module
from slurm_triage.devcluster.config_files import SLURM_USER
from tests.integration.slurmtest import env, triage_config, wait_for

pytestmark = pytest.mark.integration


class Webhook:
    """A local HTTP endpoint that keeps every JSON body POSTed to it."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                length = int(self.headers.get("Content-Length", "0"))
                received.append(json.loads(self.rfile.read(length)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"


@pytest.fixture
def webhook(devcluster) -> Iterator[Webhook]:  # type: ignore[no-untyped-def]
    """The cluster's programs post to a local webhook while the test runs: a [notify] section
    appended to their config, and the URL file readable by root and SlurmUser only."""
    hook = Webhook()
    url_file = devcluster.etc / "webhook_url"
    url_file.write_text(hook.url + "\n")
    url_file.chmod(0o640)
    shutil.chown(url_file, "root", SLURM_USER)
    try:
        with triage_config(devcluster, f'\n[notify]\nwebhook_url_file = "{url_file}"\n'):
            yield hook
    finally:
        url_file.unlink(missing_ok=True)
        hook.server.shutdown()


def samples(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = path.read_text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict, name: str, **labels: str) -> float:
    """The sum over the series of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in found.items() if n == name and want <= set(ls))


def test_metrics_webhook_and_admin_comment_after_the_demo(devcluster, webhook) -> None:  # type: ignore[no-untyped-def]
    demo = demo_module.Demo(devcluster)
    demo.reset()
    try:
        train = demo_module.scenario_gpu_lost(demo)
        demo.reset()
        bug = demo_module.scenario_user_bug(demo)
    finally:
        demo.reset()
        shutil.rmtree(demo.workdir, ignore_errors=True)

    controller = samples(devcluster.metrics_dir / "slurm_triage_controller.prom")
    gpu = {"cause": "gpu_unavailable", "action": "requeue"}
    assert value(controller, "slurm_triage_decisions_total", **gpu) >= 1
    assert value(controller, "slurm_triage_decisions_total", cause="user_code") >= 1
    assert value(controller, "slurm_triage_decision_drains_total") >= 1
    assert value(controller, "slurm_triage_requeue_latency_seconds_count") >= 1
    assert value(controller, "slurm_triage_lost_gpu_seconds_total", cause="gpu_unavailable") > 0
    # No job id, user or node is a label.
    labels = {k for (_, ls) in controller for k, _ in ls}
    assert not labels & {"job", "job_id", "user", "node"}

    node_files = sorted(devcluster.metrics_dir.glob("slurm_triage_node*.prom"))
    assert node_files, "no node textfile"
    nodes = {}
    for path in node_files:
        nodes.update(samples(path))
    assert value(nodes, "slurm_triage_health_check_status", check="gpu.lost") >= 1
    assert value(nodes, "slurm_triage_health_check_duration_seconds", check="gpu.lost") > 0
    assert value(nodes, "slurm_triage_node_runs_total", mode="prolog") >= 2
    assert value(nodes, "slurm_triage_epilog_node_faults_total", cause="gpu_unavailable") >= 1

    cli = demo_module.subprocess.run(
        ["slurm-triage", "metrics"], env=env(devcluster), capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 0, cli.stderr
    printed = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(cli.stdout)
        for s in family.samples
    }
    assert value(printed, "slurm_triage_decisions_total", **gpu) == value(
        controller, "slurm_triage_decisions_total", **gpu
    )

    drains = wait_for(
        lambda: [b for b in webhook.bodies if "drain" in json.dumps(b).lower()], 30, "a drain"
    )
    assert len(drains) == 1, webhook.bodies

    def accounted(job_id: int) -> str | None:
        return demo.door.accounted_job(job_id).admin_comment or None

    assert wait_for(lambda: accounted(bug), 30, "AdminComment").startswith(
        "triage: cause=user_code"
    )
    assert wait_for(lambda: accounted(train), 30, "AdminComment").startswith(
        "triage: completed after 1 requeue; earlier: gpu_unavailable on node"
    )
