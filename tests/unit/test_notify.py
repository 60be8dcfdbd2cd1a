"""The webhook sink against a real HTTP server on 127.0.0.1: payloads, retries, the bound
on how long a dead endpoint can hold the caller, the bounded queue."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from slurm_triage.config import NotifyConfig
from slurm_triage.observe import notify
from slurm_triage.observe.notify import Delivery, Notice, NoticeKind
from tests.unit.webhook_server import webhook_server


def _notice(kind: NoticeKind = NoticeKind.DRAIN, **fields: object) -> Notice:
    base: dict[str, object] = {
        "text": "node2 drained: gpu_unavailable (job 7): XID 79",
        "at": 1700000000.0,
        "node": "node2",
        "job_id": 7,
        "cause": "gpu_unavailable",
        "reason": "triage: gpu_unavailable job=7: XID 79",
    }
    return Notice(kind, **{**base, **fields})  # type: ignore[arg-type]


def test_slack_payload_is_one_text_field_and_escapes_mentions(tmp_path: Path) -> None:
    """The Slack shape is {"text": ...}; a reason quoting a job's log cannot ping a channel
    (<!channel>) or forge a link: Slack's &, <, > are escaped."""
    with webhook_server() as hook:
        config = NotifyConfig(webhook_url_file=hook.url_file(tmp_path))
        hostile = _notice(text="node2 drained: <!channel> & <http://evil|click>\nsecond line")
        (outcome,) = notify.send(config, [hostile])
        assert outcome.delivery is Delivery.SENT
        (message,) = hook.messages()
    assert set(message) == {"text"}
    assert message["text"] == (
        "slurm-triage: node2 drained: &lt;!channel&gt; &amp; &lt;http://evil|click&gt; second line"
    )


def test_json_payload_carries_every_field(tmp_path: Path) -> None:
    """The generic shape names the kind, node, job, cause and reason for a machine."""
    with webhook_server() as hook:
        config = NotifyConfig(webhook_url_file=hook.url_file(tmp_path), webhook_format="json")
        notify.send(config, [_notice(NoticeKind.HOLD, node="")])
        (message,) = hook.messages()
    assert message["kind"] == "hold" and message["job_id"] == 7
    assert message["cause"] == "gpu_unavailable" and message["node"] is None
    assert message["source"] == "slurm-triage" and message["at"] == 1700000000.0


def test_transient_failures_are_retried_with_doubling_waits(tmp_path: Path) -> None:
    """HTTP 503 then 502 then 200: three attempts, waits of retry_wait_s then twice that
    (tenacity, with the sleep injected), one message delivered."""
    waits: list[float] = []
    with webhook_server() as hook:
        hook.statuses = [503, 502]
        config = NotifyConfig(webhook_url_file=hook.url_file(tmp_path), webhook_retry_wait_s=0.5)
        (outcome,) = notify.send(config, [_notice()], sleep=waits.append)
        assert (outcome.delivery, hook.requests, len(hook.messages())) == (Delivery.SENT, 3, 1)
    assert waits == [0.5, 1.0]


def test_a_refusal_is_not_retried(tmp_path: Path) -> None:
    """HTTP 404 is the endpoint saying no: one attempt, FAILED with the status."""
    with webhook_server() as hook:
        hook.statuses = [404]
        config = NotifyConfig(webhook_url_file=hook.url_file(tmp_path))
        (outcome,) = notify.send(config, [_notice()], sleep=lambda s: None)
        assert (outcome.delivery, outcome.detail, hook.requests) == (
            Delivery.FAILED,
            "HTTP 404",
            1,
        )


def test_attempts_are_bounded(tmp_path: Path) -> None:
    """An endpoint failing every time gets `attempts` tries, then the notice FAILED."""
    with webhook_server() as hook:
        hook.statuses = [500] * 10
        config = NotifyConfig(webhook_url_file=hook.url_file(tmp_path), webhook_attempts=4)
        (outcome,) = notify.send(config, [_notice()], sleep=lambda s: None)
        assert (outcome.delivery, outcome.detail, hook.requests) == (
            Delivery.FAILED,
            "HTTP 500",
            4,
        )


def test_a_hanging_endpoint_holds_the_caller_no_longer_than_max_wait(tmp_path: Path) -> None:
    """A server that takes the request and never answers (timeout_s far longer than the
    wait): send() returns once max_wait_s has passed, with the notices ABANDONED."""
    with webhook_server() as hook:
        hook.hang.set()
        config = NotifyConfig(
            webhook_url_file=hook.url_file(tmp_path), webhook_timeout_s=30, max_wait_s=0.5
        )
        started = time.monotonic()
        outcomes = notify.send(config, [_notice(), _notice(node="node3")])
        took = time.monotonic() - started
    assert [o.delivery for o in outcomes] == [Delivery.ABANDONED, Delivery.ABANDONED]
    assert took < 0.5 + 2.0  # the bound, with room for a loaded 2-core host


def test_a_dead_port_fails_without_holding_the_caller(tmp_path: Path) -> None:
    """Connection refused is transient: retried, then FAILED, within the wait."""
    with webhook_server() as hook:
        url_file = hook.url_file(tmp_path)
    config = NotifyConfig(webhook_url_file=url_file, webhook_attempts=2, max_wait_s=5)
    (outcome,) = notify.send(config, [_notice()], sleep=lambda s: None)
    assert outcome.delivery is Delivery.FAILED and "Connection refused" in outcome.detail


def test_the_queue_is_bounded(tmp_path: Path) -> None:
    """Past queue_size waiting notices, new ones are DROPPED at once, never blocking."""
    with webhook_server() as hook:
        hook.hang.set()
        config = NotifyConfig(
            webhook_url_file=hook.url_file(tmp_path), queue_size=2, max_wait_s=0.2
        )
        outcomes = notify.send(config, [_notice(node=f"node{i}") for i in range(6)])
    by = {d: sum(1 for o in outcomes if o.delivery is d) for d in Delivery}
    # One is with the worker, two wait in the queue; the rest find it full.
    assert by[Delivery.DROPPED] >= 3 and len(outcomes) == 6
    assert by[Delivery.SENT] == 0


def test_only_configured_kinds_are_sent_and_off_by_default(tmp_path: Path) -> None:
    """`events` selects the kinds; with no URL file nothing is sent at all."""
    assert notify.send(NotifyConfig(), [_notice()]) == ()
    with webhook_server() as hook:
        config = NotifyConfig(webhook_url_file=hook.url_file(tmp_path), events=("hold",))
        outcomes = notify.send(config, [_notice(), _notice(NoticeKind.HOLD)])
        assert [o.notice.kind for o in outcomes] == [NoticeKind.HOLD]
        assert len(hook.messages()) == 1


@pytest.mark.parametrize(
    "content", ["", "ftp://example.org/x\n", "not a url", "http://\n", "\n\nhttp://a/b"]
)
def test_a_bad_url_file_fails_every_notice_with_the_reason(tmp_path: Path, content: str) -> None:
    """The URL file must hold an http(s) URL on its first line; otherwise nothing is sent
    and each notice says why (also when the file is missing)."""
    path = tmp_path / "url"
    path.write_text(content)
    for url_file in (str(path), str(tmp_path / "missing")):
        (outcome,) = notify.send(NotifyConfig(webhook_url_file=url_file), [_notice()])
        assert outcome.delivery is Delivery.FAILED
        assert outcome.detail.startswith(f"webhook URL file {url_file}")


def test_payload_json_is_valid_for_any_text() -> None:
    """Control characters and quotes in a reason still make one valid JSON body."""
    body = notify.payload(_notice(reason='a "quoted"\x00\x1b[31m reason'), "json")
    assert json.loads(body)["reason"] == 'a "quoted" [31m reason'
