"""Webhook notifications of drains, RMA candidates, breaker trips and held jobs.

They are sent from short-lived programs that Slurm waits for (the decision, a health run),
so delivery must never hold those up for long nor fail them: `send()` puts the events in a
bounded queue, one worker thread posts them (tenacity retries transient failures: refused
or timed-out connections, HTTP 429 and 5xx), and the caller waits at most
`notify.max_wait_s` for the queue to empty. Whatever is not delivered by then is given up
and reported as ABANDONED; the worker is a daemon thread, so the program still exits at
once. Each event's outcome is returned, for the journal or the node's metrics ledger.

Two payloads (`notify.webhook_format`): "slack", `{"text": "..."}`, which Slack, Mattermost and
Rocket.Chat incoming webhooks take; "json", every field of the event.
"""

from __future__ import annotations

import enum
import json
import queue
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import tenacity

from slurm_triage.config import NotifyConfig
from slurm_triage.logs import get_logger

URL_FILE_MAX_BYTES = 4096
TEXT_MAX_CHARS = 1000


class NoticeKind(enum.StrEnum):
    DRAIN = "drain"  # a node was drained (by a decision or a health check)
    RMA = "rma"  # a node was drained for a fault that needs the part replaced
    BREAKER_TRIP = "breaker_trip"  # the circuit breaker held back a drain
    HOLD = "hold"  # a job was held for a person (requeue budget spent, required node failed)


class Delivery(enum.StrEnum):
    SENT = "sent"
    FAILED = "failed"  # refused by the endpoint, or every attempt failed
    DROPPED = "dropped"  # the queue was full
    ABANDONED = "abandoned"  # not delivered when the program's wait ran out


@dataclass(frozen=True)
class Notice:
    """One event for a person: `text` is its one line; the rest is for machines."""

    kind: NoticeKind
    text: str
    at: float
    node: str = ""
    job_id: int | None = None
    cause: str = ""
    check: str = ""
    reason: str = ""
    host: str = ""


@dataclass(frozen=True)
class Outcome:
    notice: Notice
    delivery: Delivery
    detail: str = ""


class TransientFailure(Exception):
    """Worth another attempt: no connection, a timeout, HTTP 429 or 5xx."""


class PermanentFailure(Exception):
    """Not worth another attempt: the endpoint refused the request (HTTP 4xx, redirect)."""


class NotifyError(Exception):
    """The webhook cannot be used at all (its URL file is missing or malformed)."""


Post = Callable[[str, bytes, float], None]


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def _clean(text: str) -> str:
    return _CONTROL.sub(" ", text).strip()[:TEXT_MAX_CHARS]


def _slack_escape(text: str) -> str:
    """Slack reads <...> as links and mentions (<!channel>): a drain reason that quotes a
    job's log must not ping a channel. Escaping &, < and > is what Slack documents."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(notice: Notice, fmt: str) -> bytes:
    """The request body for one notice in the configured format."""
    if fmt == "slack":
        return json.dumps({"text": _slack_escape(f"slurm-triage: {_clean(notice.text)}")}).encode()
    return json.dumps(
        {
            "source": "slurm-triage",
            "kind": notice.kind.value,
            "text": _clean(notice.text),
            "at": notice.at,
            "node": notice.node or None,
            "job_id": notice.job_id,
            "cause": notice.cause or None,
            "check": notice.check or None,
            "reason": _clean(notice.reason) or None,
            "host": notice.host or None,
        },
        sort_keys=True,
    ).encode()


def read_webhook_url(path: str) -> str:
    """The URL in `notify.webhook_url_file`: one http(s) URL on its first line."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(URL_FILE_MAX_BYTES)
    except OSError as exc:
        raise NotifyError(f"webhook URL file {path}: {exc.strerror or exc}") from None
    lines = data.decode("utf-8", "replace").splitlines()
    url = lines[0].strip() if lines else ""
    if not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", url):
        raise NotifyError(f"webhook URL file {path}: no http:// or https:// URL on its first line")
    return url


def urllib_post(url: str, body: bytes, timeout_s: float) -> None:
    """POST a JSON body; redirects are refused (a webhook that moved is a config error)."""
    import http.client
    import urllib.error
    import urllib.request

    from slurm_triage import __version__

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Content-Type": "application/json", "User-Agent": f"slurm-triage/{__version__}"},
        method="POST",
    )
    try:
        with opener.open(request, timeout=timeout_s) as response:
            response.read(65536)
    except urllib.error.HTTPError as exc:
        if exc.code == 429 or exc.code >= 500:
            raise TransientFailure(f"HTTP {exc.code}") from None
        raise PermanentFailure(f"HTTP {exc.code}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransientFailure(f"{type(exc).__name__}: {reason}"[:200]) from None


class _Closed(tenacity.stop.stop_base):
    """Stop retrying once the sink was closed: nobody waits for the answer any more."""

    def __init__(self, closed: threading.Event) -> None:
        self._closed = closed

    def __call__(self, retry_state: tenacity.RetryCallState) -> bool:
        return self._closed.is_set()


class WebhookSink:
    """A bounded queue and one daemon worker posting to one URL.

    `sleep` (waits between attempts) and `clock` are injected so tests see exact waits;
    the default sleep wakes up early when the sink is closed."""

    def __init__(
        self,
        config: NotifyConfig,
        url: str,
        *,
        post: Post = urllib_post,
        sleep: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config, self._url, self._post, self._clock = config, url, post, clock
        self._closed = threading.Event()
        self._sleep = sleep or self._closed.wait
        self._queue: queue.Queue[Notice] = queue.Queue(maxsize=config.queue_size)
        self._done = threading.Condition()
        self._outcomes: list[Outcome] = []
        self._submitted: list[Notice] = []
        self._thread = threading.Thread(target=self._work, name="notify", daemon=True)
        self._thread.start()

    def submit(self, notice: Notice) -> bool:
        """Queue a notice; False (and DROPPED) when the queue is full. Never blocks."""
        try:
            self._queue.put_nowait(notice)
        except queue.Full:
            with self._done:
                self._outcomes.append(Outcome(notice, Delivery.DROPPED, "queue full"))
            return False
        with self._done:
            self._submitted.append(notice)
        return True

    def close(self) -> tuple[Outcome, ...]:
        """Wait for the queued notices, at most `max_wait_s`; every submitted notice gets
        an outcome (ABANDONED when it was not delivered in time)."""
        deadline = self._clock() + self._config.max_wait_s
        with self._done:
            while self._finished() < len(self._submitted):
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._done.wait(min(left, 0.05))
            self._closed.set()
            outcomes = list(self._outcomes)
            decided = {id(o.notice) for o in outcomes}
            outcomes += [
                Outcome(n, Delivery.ABANDONED, f"not delivered within {self._config.max_wait_s:g}s")
                for n in self._submitted
                if id(n) not in decided
            ]
        return tuple(outcomes)

    def _finished(self) -> int:
        return sum(1 for o in self._outcomes if o.delivery is not Delivery.DROPPED)

    def _work(self) -> None:
        while not self._closed.is_set():
            try:
                notice = self._queue.get(timeout=0.1)
            except queue.Empty:
                continue
            outcome = self._deliver(notice)
            with self._done:
                if not self._closed.is_set():
                    self._outcomes.append(outcome)
                self._done.notify_all()

    def _wait(self, seconds: float) -> None:
        self._sleep(seconds)

    def _deliver(self, notice: Notice) -> Outcome:
        body = payload(notice, self._config.webhook_format)
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self._config.webhook_attempts) | _Closed(self._closed),
            wait=tenacity.wait_exponential(multiplier=self._config.webhook_retry_wait_s, min=0),
            retry=tenacity.retry_if_exception_type(TransientFailure),
            sleep=self._wait,
            reraise=True,
        )
        try:
            retrying(self._post, self._url, body, self._config.webhook_timeout_s)
        except (TransientFailure, PermanentFailure) as exc:
            return Outcome(notice, Delivery.FAILED, str(exc))
        except Exception as exc:  # a bug in a poster must not kill the worker
            return Outcome(notice, Delivery.FAILED, f"{type(exc).__name__}: {exc}"[:200])
        return Outcome(notice, Delivery.SENT)


def send(
    config: NotifyConfig,
    notices: Sequence[Notice],
    *,
    post: Post = urllib_post,
    sleep: Callable[[float], object] | None = None,
) -> tuple[Outcome, ...]:
    """Send the notices of the configured kinds; their outcomes. Returns within about
    `max_wait_s` whatever the endpoint does, and never raises for its sake."""
    wanted = [n for n in notices if n.kind.value in config.events]
    if not config.webhook_url_file or not wanted:
        return ()
    log = get_logger()
    try:
        url = read_webhook_url(config.webhook_url_file)
    except NotifyError as exc:
        log.error("notify_unconfigured", error=str(exc))
        return tuple(Outcome(n, Delivery.FAILED, str(exc)) for n in wanted)
    sink = WebhookSink(config, url, post=post, sleep=sleep)
    for notice in wanted:
        sink.submit(notice)
    outcomes = sink.close()
    for outcome in outcomes:
        if outcome.delivery is not Delivery.SENT:
            log.warning(
                "notify_not_delivered",
                kind=outcome.notice.kind.value,
                delivery=outcome.delivery.value,
                detail=outcome.detail,
            )
    return outcomes


def this_host() -> str:
    return socket.gethostname()
