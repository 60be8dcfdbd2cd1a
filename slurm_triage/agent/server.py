"""`slurm-triage agent`: the resident node agent (root, one per node, run by systemd).

It loads the config and sets up logging once, holds NVML open (one nvmlInit for its life:
NVML counts nvmlInit/nvmlShutdown pairs, so a screen's own pair no longer starts and stops
the library, and the driver state is not torn down between jobs as it is for a cold Prolog
on a node without persistence mode), watches XID events (agent.xids), and serves two
request kinds on a Unix socket (agent.protocol): run the Prolog's screen for a job, and let
go of NVML for a while, which a GPU reset needs (NVIDIA refuses a reset while any process
holds the GPU, as nvidia-persistenced's handle does: NVIDIA/gpu-operator#118). The screen
is prolog_epilog.prolog's, handed in by the CLI as `screen` (this package sits below
prolog_epilog, whose entry imports agent.client).

Each connection: the peer's uid (SO_PEERCRED) is checked before a byte is read (root, or
agent.allowed_uids); one request line of at most MAX_REQUEST_BYTES within
REQUEST_TIMEOUT_S, checked by protocol.parse_request; one answer line. Whatever goes wrong
is an error answer, the Prolog then runs the screen itself, and the agent goes on serving.

Concurrency: a thread per connection, at most agent.max_concurrent screens at once (more
are answered busy). A thread each rather than one lock around the screen, because a screen
can block for seconds on a hung mount or NVML call (bounded by health.check_timeout_s and
health.prolog_deadline_s) and one job's stuck screen must not hold back another job's
start. Concurrent screens share what concurrent Prolog processes always shared (the node's
counter and report files, written atomically) plus the NVML module, which NVML documents
as thread-safe; the log writer holds its own lock. A hung NVML call leaves its reader
thread behind (health_checks.runner): past THREADS_PER_SCREEN x max_concurrent live
threads the agent answers busy, and the Prologs run in processes that take their hung
threads with them.

Fresh facts: the facts the screen reads are kept (health_checks.fact_cache) and read again
in the background (agent.refresh) every agent.facts_refresh_s, so a job start evaluates its
checks on facts at most agent.facts_max_age_s old instead of reading them all (issue 20).
An XID the watcher sees drops them and wakes the reader; so does NVML taken back after a
GPU reset, and while it is let go NVML is not read in the background. At its start and at
each turn the agent also writes the config file's parsed copy again if the file has changed
(config_cache), so that the jobs' ranks, which may not write it, read it and import no TOML
parser.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from slurm_triage.agent import protocol
from slurm_triage.agent.refresh import FactRefresher
from slurm_triage.agent.xids import XidWatch
from slurm_triage.config import NO_FILE_SOURCES, Config, check_settings, deprecations
from slurm_triage.config_cache import CacheOutcome, CacheResult, refresh_cache
from slurm_triage.health_checks.fact_cache import FactCache
from slurm_triage.health_checks.registry import select
from slurm_triage.health_checks.runner import PER_RUN, FactSources
from slurm_triage.logs import get_logger
from slurm_triage.nvml import nvml_module
from slurm_triage.unix_socket.listen import Listener, accept_loop, bind_socket, notify_ready
from slurm_triage.unix_socket.wire import peer_uid, read_request

REQUEST_TIMEOUT_S = 2.0  # the Prolog writes its one line at once
THREADS_PER_SCREEN = 8  # a screen's own readers (health_checks.runner), with room to spare
RELEASE_WAIT_S = 10.0  # for the XID watch to leave nvmlEventSetWait (poll_ms) and let go
# The Prolog's environment that names the job in our log lines (as prolog_epilog.entry).
_CONTEXT = {
    "SLURM_JOB_ID": "job_id",
    "SLURMD_NODENAME": "node",
    "SLURM_JOB_USER": "user",
    "SLURM_JOB_PARTITION": "partition",
    "SLURM_SCRIPT_CONTEXT": "context",
}

# prolog_epilog.prolog.prolog: (config, env, *, nvml, nvml_xids, kept) -> exit status 0 or 1
Screen = Callable[..., int]


def prolog_sources() -> tuple[str, ...]:
    """The fact sources the Prolog's checks read, in the order they run, that may be kept
    between jobs (not runner.PER_RUN's, which each screen reads itself)."""
    needs = (need for spec in select(None, False) for need in spec.needs)
    return tuple(need for need in dict.fromkeys(needs) if need not in PER_RUN)


class Agent:
    """What the agent holds between requests, and how it answers one connection."""

    def __init__(
        self,
        config: Config,
        node: str,
        screen: Screen,
        *,
        nvml: Any = None,
        nvml_held: bool = False,
        xids: XidWatch | None = None,
        kept: FactCache | None = None,
    ) -> None:
        self.config, self.node, self.screen = config, node, screen
        self.nvml, self.xids, self.kept = nvml, xids, kept
        # Whether the agent's own nvmlInit is in force; changed by release_nvml requests.
        self.nvml_held = nvml_held
        # NVML let go for a GPU reset: not to be read in the background meanwhile.
        self.nvml_released = False
        self.refresher: FactRefresher | None = None
        self._sources = prolog_sources()
        self._nvml_lock = threading.Lock()
        self._retake: threading.Timer | None = None
        self._allowed = {0, *config.agent.allowed_uids}
        self._slots = threading.BoundedSemaphore(config.agent.max_concurrent)
        self._max_threads = THREADS_PER_SCREEN * config.agent.max_concurrent
        self._log = get_logger(component="agent", node=node)
        self._config_cache_last: CacheResult | None = None

    def handle(self, conn: socket.socket) -> None:
        """Serve one connection and close it; never raises."""
        with conn:
            try:
                answer = self._answer(conn)
            except Exception as exc:  # our bug: the Prolog falls back, the agent serves on
                self._log.error("agent_request_crashed", error=f"{type(exc).__name__}: {exc}")
                answer = protocol.encode_answer(error="agent error")
            with contextlib.suppress(OSError):
                conn.settimeout(REQUEST_TIMEOUT_S)
                conn.sendall(answer)

    def _answer(self, conn: socket.socket) -> bytes:
        uid = peer_uid(conn)
        if uid not in self._allowed:
            self._log.warning("agent_peer_refused", uid=uid)
            return protocol.encode_answer(error=f"uid {uid} may not use the agent")
        if threading.active_count() > self._max_threads:
            self._log.warning("agent_busy", reason="threads", threads=threading.active_count())
            return protocol.encode_answer(error="busy")
        if not self._slots.acquire(blocking=False):
            self._log.warning("agent_busy", reason="max_concurrent")
            return protocol.encode_answer(error="busy")
        try:
            try:
                line = read_request(conn, REQUEST_TIMEOUT_S, protocol.MAX_REQUEST_BYTES)
                request = protocol.parse_request(line)
            except protocol.ProtocolError as exc:
                self._log.warning("agent_request_refused", uid=uid, reason=str(exc))
                return protocol.encode_answer(error=str(exc))
            if request.kind is protocol.RequestKind.RELEASE_NVML:
                return self.release_nvml(request.seconds)
            return self._screen(request.env)
        finally:
            self._slots.release()

    def release_nvml(self, seconds: int) -> bytes:
        """Let go of NVML for `seconds` (the watcher's events and the agent's own init), then
        take it back; 0 takes it back now. For a GPU reset, which NVIDIA refuses while any
        process holds the GPU (prolog_epilog.gpu_repair asks before it resets)."""
        with self._nvml_lock:
            if self._retake is not None:
                self._retake.cancel()
                self._retake = None
            if seconds == 0:
                self._take_nvml()
                self._log.info("agent_nvml_taken_back")
                return protocol.encode_answer(released_s=0)
            if self.xids is not None and not self.xids.pause(RELEASE_WAIT_S):
                self.xids.resume()
                self._log.warning("agent_nvml_not_released", reason="the XID watch is stuck")
                return protocol.encode_answer(error="the XID watch did not let go of NVML")
            if self.nvml_held:
                with contextlib.suppress(Exception):
                    self.nvml.nvmlShutdown()
                self.nvml_held = False
            self.nvml_released = True
            if self.kept is not None:
                self.kept.forget("nvml")
            self._retake = threading.Timer(seconds, self._take_nvml_locked)
            self._retake.daemon = True
            self._retake.start()
        self._log.info("agent_nvml_released", seconds=seconds)
        return protocol.encode_answer(released_s=seconds)

    def _take_nvml_locked(self) -> None:
        with self._nvml_lock:
            self._retake = None
            self._take_nvml()

    def _take_nvml(self) -> None:
        """Hold NVML again (the lock held); a failed init is retried by each screen."""
        if self.nvml_released:
            self.nvml_released = False
            self.facts_changed()  # the reset's GPUs are not the ones read before it
        if not self.nvml_held and self.nvml is not None:
            try:
                self.nvml.nvmlInit()
                self.nvml_held = True
            except Exception as exc:
                self._log.warning("agent_nvml_unavailable", error=type(exc).__name__)
        if self.xids is not None:
            self.xids.resume()

    def facts_changed(self) -> None:
        """Drop the kept facts and read them again now (an XID was seen, GPUs were reset)."""
        if self.kept is not None:
            self.kept.forget()
        if self.refresher is not None:
            self.refresher.wake()

    def refresh_turn(self) -> None:
        """agent.refresh's turn: the config file's parsed copy, then the facts."""
        self.keep_config_cache()
        self.refresh_facts()

    def keep_config_cache(self) -> None:
        """Write the config file's parsed copy again when the file has changed
        (config_cache), so that the jobs' ranks, which cannot write it, read it instead of
        parsing TOML: one read of the file and of the copy while both are unchanged. Logged
        when written, and when it cannot be (each new reason once, not at every turn)."""
        source = self.config.source
        if source in NO_FILE_SOURCES:
            return
        result = refresh_cache(source, check_settings)
        if result.outcome == CacheOutcome.WRITTEN:
            self._log.info("agent_config_cache", outcome=result.outcome, reason=result.reason)
        elif result.outcome != CacheOutcome.FRESH and result != self._config_cache_last:
            self._log.warning("agent_config_cache", outcome=result.outcome, reason=result.reason)
        self._config_cache_last = result

    def refresh_facts(self) -> None:
        """Read every fact the Prolog's checks need into `kept` (agent.refresh's turn)."""
        if self.kept is None:
            return
        health = self.config.health
        sources = FactSources(
            health,
            self.node,
            health.check_timeout_s,
            nvml=self.nvml,
            nvml_xids=self.xids.recent if self.xids is not None else None,
            kept=self.kept,
        )
        for source in self._sources:
            if sources.still_reading(source):
                # Its last read hung and was abandoned: one more thread a turn would grow
                # the agent without bound. What that read gave stays kept until too old.
                continue
            if source != "nvml":
                sources.refresh(source)
                continue
            # Under the lock release_nvml takes: a GPU reset waits for this read to let go of
            # NVML (NVIDIA refuses a reset while any process holds it), and none starts
            # while one is under way.
            with self._nvml_lock:
                if not self.nvml_released:
                    sources.refresh(source)

    def start_refreshing(self) -> None:
        """Keep the facts fresh in the background (when facts are kept at all)."""
        if self.kept is not None and self.refresher is None:
            self.refresher = FactRefresher(
                self.refresh_turn, self.config.agent.facts_refresh_s, self.node
            )
            self.refresher.start()

    def close(self) -> None:
        """Stop reading and watching, and let go of NVML (the agent is stopping)."""
        if self.refresher is not None:
            self.refresher.stop()
        with self._nvml_lock:
            if self._retake is not None:
                self._retake.cancel()
            if self.xids is not None:
                self.xids.stop()
            if self.nvml_held:
                with contextlib.suppress(Exception):
                    self.nvml.nvmlShutdown()
                self.nvml_held = False

    def _screen(self, env: dict[str, str]) -> bytes:
        node = env.setdefault("SLURMD_NODENAME", self.node)
        if node != self.node:
            self._log.warning("agent_request_refused", reason="another node", asked=node)
            return protocol.encode_answer(error=f"this agent serves node {self.node}")
        log = get_logger(role="prolog", via="agent", **_context(env))
        started = time.monotonic()
        try:
            status = self.screen(
                self.config,
                env,
                nvml=self.nvml,
                nvml_xids=self.xids.recent if self.xids is not None else None,
                kept=self.kept,
            )
        except Exception as exc:  # the Prolog runs the screen itself, as before the agent
            log.error("role_crashed", error=f"{type(exc).__name__}: {exc}")
            return protocol.encode_answer(error="the screen crashed")
        log.info("role_done", exit_status=status, seconds=round(time.monotonic() - started, 4))
        if status not in (0, 1):
            return protocol.encode_answer(error=f"the screen returned {status}")
        return protocol.encode_answer(exit_status=status)


def _context(env: Mapping[str, str]) -> dict[str, str]:
    return {key: env[name] for name, key in _CONTEXT.items() if name in env}


def serve(listener: Listener, agent: Agent, stop: threading.Event) -> None:
    """Accept connections until `stop` is set, each served in a thread of its own."""

    def accept_failed(exc: OSError) -> None:
        get_logger(component="agent").error("agent_accept_failed", error=str(exc))

    accept_loop(
        listener,
        agent.handle,
        stop,
        name="agent-conn",
        conn_timeout_s=REQUEST_TIMEOUT_S,
        on_error=accept_failed,
    )


def open_nvml(config: Config, node: str) -> tuple[Any, bool]:
    """This node's NVML module, initialised for the agent's life when it can be (held)."""
    nvml = nvml_module(config.health, node)
    try:
        nvml.nvmlInit()
    except Exception as exc:  # each screen then initialises it, as a cold Prolog does
        get_logger(node=node).warning("agent_nvml_unavailable", error=f"{type(exc).__name__}")
        return nvml, False
    return nvml, True


def run_agent(config: Config, screen: Screen, node: str) -> int:
    """The agent's life: hold NVML, watch XIDs, listen, serve until SIGTERM or SIGINT.
    ListenError (exit 2) when the socket cannot be had."""
    log = get_logger(component="agent", node=node)
    for line in deprecations(config):
        log.warning("config_deprecated_key", detail=line)
    nvml, held = open_nvml(config, node)
    settings = config.agent
    kept = FactCache(settings.facts_max_age_s) if settings.facts_max_age_s > 0 else None
    if kept is not None and settings.facts_refresh_s >= settings.facts_max_age_s:
        log.warning(
            "agent_facts_refresh_too_slow",
            hint="agent.facts_refresh_s should be below agent.facts_max_age_s, or Prologs"
            " between refreshes read the facts themselves",
        )
    agent = Agent(config, node, screen, nvml=nvml, nvml_held=held, kept=kept)
    agent.keep_config_cache()  # at start too: without kept facts there are no turns
    if settings.watch_xids:
        agent.xids = XidWatch(
            nvml, node, window_s=config.health.kernel_window_s, on_xid=agent.facts_changed
        )
        agent.xids.start()
    agent.start_refreshing()
    stop = threading.Event()
    try:
        listener = bind_socket(config.agent.socket, setting="agent.socket", daemon="agent")
    except Exception:
        agent.close()
        raise
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info(
        "agent_started",
        socket=config.agent.socket,
        nvml_held=held,
        xids=agent.xids is not None,
        facts_max_age_s=settings.facts_max_age_s if kept is not None else 0,
    )
    notify_ready()
    try:
        serve(listener, agent, stop)
    finally:
        listener.close()
        agent.close()
        log.info("agent_stopped")
    return 0
