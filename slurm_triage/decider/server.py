"""`slurm-triage decider`: the resident decider (SlurmUser, on the slurmctld host, run by
systemd; docs/decider.md).

It loads the config and sets up logging once, has the decision code imported once (the
CLI hands it in as `decide`, prolog_epilog.decide.decide_from_env: this package sits below
prolog_epilog, whose entry imports decider.client), and serves EpilogSlurmctld's requests
on a Unix socket (decider.protocol).

Each connection: the peer's uid (SO_PEERCRED) is checked before a byte is read (root, the
decider's own uid, decider.allowed_uids); one request line of at most MAX_REQUEST_BYTES
within REQUEST_TIMEOUT_S, checked by protocol.parse_request; then `accepted` at once, the
decision, and `decided` (or `detached` as soon as the decision says Slurm waits for the
hook to end: an expedited requeue, which a cold EpilogSlurmctld would fork for). Whatever
goes wrong before `accepted` is an error answer and EpilogSlurmctld decides itself; after
it the decision is ours, answered or not.

Concurrency: a thread per connection, at most decider.max_concurrent decisions at once
(more are answered busy). Decisions mostly wait (for the nodes' records, Slurm, the
journal's lock), so threads rather than one queue. What concurrent decisions share is
what concurrent EpilogSlurmctld processes shared, plus this process: each opens its own
journal connection (SQLite serialises the writers; a job end is claimed once whoever
asks), its own door calls (each scontrol a process of its own), its own notification
sink and metrics file lock (flock on a descriptor of its own); the log writer holds a
lock per line, and log context is bound per logger, never global.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from slurm_triage.config import Config, deprecations
from slurm_triage.decider import protocol
from slurm_triage.decider.protocol import DecidedHow
from slurm_triage.logs import get_logger
from slurm_triage.unix_socket.listen import Listener, accept_loop, bind_socket, notify_ready
from slurm_triage.unix_socket.wire import ProtocolError, peer_uid, read_request

REQUEST_TIMEOUT_S = 2.0  # EpilogSlurmctld writes its one line at once
SEND_TIMEOUT_S = 2.0
# What a client waits for the decision beyond the decision's own bounds (its deadline and
# the wait for the nodes' records): Slurm calls and the journal's busy timeout.
ANSWER_MARGIN_S = 30.0

# prolog_epilog.decide.decide_from_env: (config, env, *, detached) -> Outcome | None
Decide = Callable[..., Any]


class Decider:
    """What the decider holds between requests, and how it answers one connection."""

    def __init__(self, config: Config, decide: Decide, *, settle_s: float = 0.0) -> None:
        """`settle_s`: the most a detached decision waits for Slurm before deciding (the
        expedited requeue's settle, prolog_epilog.ended_run.EXPEDITED_SETTLE_S)."""
        self.config, self.decide = config, decide
        self._allowed = {0, os.geteuid(), *config.decider.allowed_uids}
        self._slots = threading.BoundedSemaphore(config.decider.max_concurrent)
        decision = config.decision
        self.wait_s = decision.deadline_s + decision.wait_for_nodes_s + ANSWER_MARGIN_S
        self.settle_s = settle_s
        self._detached_lock = threading.Lock()
        self._detached = 0  # detached decisions in flight
        self._log = get_logger(component="decider")

    @property
    def stop_wait_s(self) -> float:
        """The longest a stop waits: one decision's wait, plus the settle while a detached
        decision is in flight (it claims its job end only after the settle, so one cut
        there is nobody's: a job Slurm requeued held would stay held)."""
        with self._detached_lock:
            return self.wait_s + (self.settle_s if self._detached else 0.0)

    def wait_for_in_flight(self) -> int:
        """Wait for the decisions in flight, up to stop_wait_s (their threads are daemons:
        stopping would otherwise cut a decision between its actions and its journal row);
        how many did not finish."""
        started = time.monotonic()
        slots = self.config.decider.max_concurrent
        for taken in range(slots):
            while not self._slots.acquire(timeout=1.0):
                if time.monotonic() - started >= self.stop_wait_s:
                    return slots - taken
        return 0

    def handle(self, conn: socket.socket) -> None:
        """Serve one connection and close it; never raises."""
        with conn:
            try:
                self._serve(conn)
            except Exception as exc:  # our bug: answered as an error, the decider serves on
                self._log.error("decider_request_crashed", error=f"{type(exc).__name__}: {exc}")
                _send(conn, protocol.encode_error("decider error"))

    def _serve(self, conn: socket.socket) -> None:
        uid = peer_uid(conn)
        if uid not in self._allowed:
            self._log.warning("decider_peer_refused", uid=uid)
            _send(conn, protocol.encode_error(f"uid {uid} may not use the decider"))
            return
        detached = threading.Event()
        if not self._slots.acquire(blocking=False):
            self._log.warning("decider_busy", max_concurrent=self.config.decider.max_concurrent)
            _send(conn, protocol.encode_error("busy"))
            return
        try:
            try:
                line = read_request(conn, REQUEST_TIMEOUT_S, protocol.MAX_REQUEST_BYTES)
                env = protocol.parse_request(line)
            except ProtocolError as exc:
                self._log.warning("decider_request_refused", uid=uid, reason=str(exc))
                _send(conn, protocol.encode_error(str(exc)))
                return
            _send(conn, protocol.encode_accepted(self.wait_s))
            self.decide_one(conn, env, detached)
        finally:
            self._slots.release()
            # After the slot: a stop that finds every slot free has nothing left to wait for.
            if detached.is_set():
                with self._detached_lock:
                    self._detached -= 1

    def decide_one(
        self, conn: socket.socket, env: dict[str, str], detached: threading.Event
    ) -> None:
        """Decide the accepted job end, then answer `decided`, unless `detached` went
        first (the decision goes on in this thread after the hook has returned)."""
        log = get_logger(role="epilog-slurmctld", via="decider", job_id=env["SLURM_JOB_ID"])
        started, cpu_started = time.monotonic(), time.thread_time()

        def detach() -> None:
            with self._detached_lock:
                self._detached += 1
            detached.set()
            _send(conn, protocol.encode_detached())

        how, cause, action = DecidedHow.NOT_HERE, None, None
        if self.config.decision.run_in == "epilog_slurmctld":
            try:
                how, cause, action = _summary(self.decide(self.config, env, detached=detach))
            except Exception as exc:  # decide_from_env raises none of its own errors
                log.error("role_crashed", error=f"{type(exc).__name__}: {exc}")
                how = DecidedHow.FAILED
        cpu_s = time.thread_time() - cpu_started
        log.info(
            "role_done",
            outcome=how.value,
            cause=cause,
            action=action,
            detached=detached.is_set(),
            cpu_s=round(cpu_s, 6),
            seconds=round(time.monotonic() - started, 4),
        )
        if not detached.is_set():
            _send(conn, protocol.encode_decided(how, cause, action, cpu_s))


def _summary(outcome: Any) -> tuple[DecidedHow, str | None, str | None]:
    """What a decide_from_env Outcome says: None when Slurm or the journal failed it (its
    decision_failed line says how), not decided when another decider had claimed it."""
    if outcome is None:
        return DecidedHow.FAILED, None, None
    if not outcome.decided:
        return DecidedHow.ALREADY_TAKEN, None, None
    cause = outcome.attribution.cause.value if outcome.attribution is not None else None
    action = outcome.decision.verdict.value if outcome.decision is not None else None
    return DecidedHow.DECIDED, cause, action


def _send(conn: socket.socket, line: bytes) -> None:
    """One answer line; a client that has gone (it returned on `detached`, or gave up) is
    not an error of ours."""
    with contextlib.suppress(OSError):
        conn.settimeout(SEND_TIMEOUT_S)
        conn.sendall(line)


def serve(listener: Listener, decider: Decider, stop: threading.Event) -> None:
    """Accept connections until `stop` is set, each served in a thread of its own."""

    def accept_failed(exc: OSError) -> None:
        get_logger(component="decider").error("decider_accept_failed", error=str(exc))

    accept_loop(
        listener,
        decider.handle,
        stop,
        name="decider-conn",
        conn_timeout_s=REQUEST_TIMEOUT_S,
        on_error=accept_failed,
    )


def run_decider(
    config: Config, decide: Decide, socket_path: str | None = None, *, settle_s: float = 0.0
) -> int:
    """The decider's life: listen, serve until SIGTERM or SIGINT, then let the decisions
    in flight finish (up to their wait, Decider.stop_wait_s). ListenError (exit 2) when the
    socket cannot be had."""
    log = get_logger(component="decider")
    for line in deprecations(config):
        log.warning("config_deprecated_key", detail=line)
    path = socket_path or config.decider.socket
    listener = bind_socket(path, setting="decider.socket", daemon="decider")
    decider = Decider(config, decide, settle_s=settle_s)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("decider_started", socket=path, max_concurrent=config.decider.max_concurrent)
    notify_ready()
    try:
        serve(listener, decider, stop)
    finally:
        listener.close()
        log.info("decider_stopped", unfinished=decider.wait_for_in_flight())
    return 0
