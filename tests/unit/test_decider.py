"""The resident decider (decider.server) and EpilogSlurmctld's way to it
(prolog_epilog.entry): the same door calls and journal rows as the decision in-process, for
a failed job (XID 79 in root's record) and a completed one; EpilogSlurmctld deciding itself
for every failure before `accepted` and never after it; hostile requests answered and
survived; peers refused by uid; busy past max_concurrent; run_in = first_node_epilog."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from slurm_triage.config import Config, load_config
from slurm_triage.decider import client, protocol, server
from slurm_triage.decider.client import Outcome
from slurm_triage.decider.protocol import DecidedHow
from slurm_triage.decider.server import Decider, serve
from slurm_triage.evidence import (
    EvidenceRecord,
    KernelEvent,
    KernelEventKind,
    Source,
    record_to_json,
    store,
)
from slurm_triage.logs import setup_logging
from slurm_triage.prolog_epilog import entry
from slurm_triage.prolog_epilog.decide import decide_from_env
from slurm_triage.prolog_epilog.ended_run import EXPEDITED_SETTLE_S, settle_bound_s
from slurm_triage.slurm import JobState
from slurm_triage.testing import FakeDoor, job_info, node_infos
from slurm_triage.unix_socket.listen import bind_socket
from tests.unit.socket_races import answers_then_closes

BIN = Path(sys.executable).parent
NOBODY = 65534
NODES = ("node1", "node2")
XID_AT = time.time() - 5
# Decision columns that are the decision's, not its clock's or its process's.
COLUMNS = (
    "state, exit_code, exit_signal, user, partition, num_nodes, nodes, cause, domain, "
    "confidence, root_backed, blamed, action, excluded, drained, begin_delay_s, reasons, "
    "applied, outcome, evidence"
)


class Controller:
    """A controller's config (evidence, journal, log, the decider's socket) and one
    FakeDoor per job in place of slurmctld."""

    def __init__(self, root: Path, **decider: object) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root, self.socket = root, str(root / "run" / "decider.sock")
        self.evidence = root / "evidence"
        self.evidence.mkdir(mode=0o1777, exist_ok=True)
        os.chmod(self.evidence, 0o1777)
        self.log = root / "triage.log"
        extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in decider.items())
        self.config_path = root / "config.toml"
        self.config_path.write_text(
            f'[logging]\ndestination = "file"\nfile = "{self.log}"\nformat = "json"\n'
            f'[paths]\nstate_dir = "{root}/state"\nevidence_dir = "{self.evidence}"\n'
            f'[slurm]\nbin_dir = "{root}/no-slurm"\nattempts = 1\ntimeout_s = 2\n'
            f'[decision]\njournal = "{root}/journal.sqlite"\nwait_for_nodes_s = 0\n'
            f'[decider]\nsocket = "{self.socket}"\n{extra}'
        )
        self.config: Config = load_config(self.config_path, env={})
        self.doors: dict[int, FakeDoor] = {}

    def end(self, job: int, state: str, exit_code: int, **job_fields: Any) -> dict[str, str]:
        """Job `job` ran on node1 and node2 and ended so; EpilogSlurmctld's environment,
        with what a hostile user puts in it besides."""
        door = FakeDoor([job_info(job, nodes=NODES, **job_fields)], node_infos(8))
        door.jobs[job] = replace(door.jobs[job], state=JobState.RUNNING, start_time=time.time())
        door.end_job(job, state, exit_code=exit_code)
        self.doors[job] = door
        if exit_code:
            xid = KernelEvent(
                node="node2",
                time=XID_AT,
                source=Source.ROOT,
                event=KernelEventKind.XID,
                xid=79,
                detail="GPU has fallen off the bus",
            )
            record = EvidenceRecord(str(job), "node2", "epilog", Source.ROOT, (xid,))
            store.write_root_record(str(self.evidence), job, "node2", record_to_json(record))
        return {
            "SLURM_JOB_ID": str(job),
            "SLURM_JOB_UID": "0",
            "SLURM_JOB_NODELIST": "node[1-2]",
            "SLURM_JOB_EXIT_CODE2": f"{exit_code}:0",
            "SLURM_JOB_RESTART_COUNT": "0",
            "SLURM_JOB_NAME": "$(reboot)",
            "SLURM_JOB_COMMENT": "'; DROP TABLE decisions; --",
            "SLURM_SCRIPT_CONTEXT": "epilog_slurmctld",
            protocol.SOCKET_ENV: self.socket,
        }

    def decide(self, config: Config, env: dict[str, str], **kwargs: Any) -> Any:
        """decide_from_env against this job's FakeDoor, as the decider and the bench run it."""
        return decide_from_env(config, env, door=self.doors[int(env["SLURM_JOB_ID"])], **kwargs)

    def calls(self, job: int) -> list[tuple[str, tuple[Any, ...], Mapping[str, Any]]]:
        return [(c.method, c.args, c.kwargs) for c in self.doors[job].calls]

    def journal(self) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with closing(sqlite3.connect(self.config.decision.journal)) as db:
            rows = db.execute(f"SELECT job_id, {COLUMNS} FROM decisions ORDER BY job_id")
            decisions = [(*row[:-1], _evidence(row[-1])) for row in rows.fetchall()]
            events = db.execute(
                "SELECT node, job_id, kind, cause, xid, multi_node FROM node_events ORDER BY id"
            )
            return decisions, events.fetchall()

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [e for e in map(json.loads, lines) if e.get("event") == name]


def _evidence(column: str) -> list[dict[str, Any]]:
    """The row's facts; Slurm's own facts are stamped with the moment the decision read the
    end (each decision its own), the rest keep their time."""
    facts = json.loads(column)
    for fact in facts:
        if fact["kind"] in ("slurm_state", "process_exit"):
            del fact["time"]
    return list(facts)


@pytest.fixture
def controller(tmp_path: Path) -> Controller:
    ctl = Controller(tmp_path / "decider")
    setup_logging(ctl.config.logging, program="test-decider")
    return ctl


@contextlib.contextmanager
def serving(config: Config, decide: Callable[..., Any]) -> Iterator[Decider]:
    """The decider's server in a thread of this process, on config.decider.socket."""
    listener = bind_socket(config.decider.socket)
    decider = Decider(config, decide)
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(listener, decider, stop), daemon=True)
    thread.start()
    try:
        yield decider
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        decider.wait_for_in_flight()


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="root records need root")


# -- the same decision ------------------------------------------------------------------------


@needs_root
def test_a_decision_through_the_decider_is_the_decision_in_process(tmp_path: Path) -> None:
    """A failed job (XID 79 in node2's root record) and a completed one: through the socket
    the FakeDoor sees the same calls and the journal holds the same rows and node events as
    decide_from_env in EpilogSlurmctld's own process; the client gets the cause, the action
    and the decision's CPU seconds."""
    here, there = Controller(tmp_path / "here"), Controller(tmp_path / "there")
    setup_logging(there.config.logging, program="test-decider")
    replies = {}
    with serving(there.config, there.decide):
        for job, state, code in ((11, "FAILED", 1), (12, "COMPLETED", 0)):
            decide_from_env(here.config, here.end(job, state, code), door=here.doors[job])
            replies[job] = client.ask_decider(there.end(job, state, code))
    for job in (11, 12):
        assert here.calls(job) == there.calls(job)
    assert here.journal() == there.journal()
    failed, completed = replies[11], replies[12]
    assert failed.outcome is Outcome.DECIDED and failed.final is not None
    assert (failed.final.how, failed.final.cause) == (DecidedHow.DECIDED, "gpu_unavailable")
    assert failed.final.action == here.journal()[0][0][13]  # the row's action
    assert failed.final.cpu_s is not None and 0 < failed.final.cpu_s < 30
    assert completed.final is not None and completed.final.cause == "completed"
    assert ("requeue", (11,), {"hold": False}) in there.calls(11)
    done = [e for e in there.events("role_done") if e.get("via") == "decider"]
    assert [(e["job_id"], e["outcome"]) for e in done] == [("11", "decided"), ("12", "decided")]


@needs_root
def test_an_expedited_requeue_is_answered_detached_and_decided_after(
    controller: Controller,
) -> None:
    """Slurm restarts an expedited requeue only once EpilogSlurmctld has ended: the decider
    answers `detached` before deciding (where a cold process forks), and the decision's
    journal row follows."""
    env = controller.end(21, "FAILED", 1, expedited_requeue=True)
    with serving(controller.config, controller.decide):
        reply = client.ask_decider(env)
        assert reply.outcome is Outcome.DETACHED and reply.accepted
        # The hook has ended: Slurm restarts the job, which the decision waits for.
        controller.doors[21].finish_expedited_requeue(21, epilog_failed=True)
    rows, _ = controller.journal()
    assert [(r[0], r[8]) for r in rows] == [(21, "gpu_unavailable")]
    (done,) = controller.events("role_done")
    assert done["detached"] is True and done["outcome"] == "decided"


def stop_during_decision(
    decider: Decider, ctl: Controller, job: int, in_flight: threading.Event
) -> threading.Thread:
    """Serve a failed end of `job`, and stop serving (as SIGTERM does) once its decision is
    in flight; the asking EpilogSlurmctld's thread."""
    listener = bind_socket(decider.config.decider.socket)
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(listener, decider, stop), daemon=True)
    thread.start()
    asking = threading.Thread(target=client.ask_decider, args=(ctl.end(job, "FAILED", 1),))
    asking.start()
    assert in_flight.wait(5)
    stop.set()
    thread.join(5)
    listener.close()
    return asking


@pytest.mark.parametrize("detaches", [True, False])
def test_a_stop_waits_through_a_detached_decisions_settle(
    detaches: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A detached decision (an expedited requeue waiting for Slurm to settle it) claims its
    job end only after the settle: a stop waits for it up to one decision's wait plus the
    settle. A stop with only decisions the hook waits for waits one decision's wait."""
    monkeypatch.setattr(server, "ANSWER_MARGIN_S", 0.0)
    ctl = Controller(tmp_path)
    config = replace(ctl.config, decision=replace(ctl.config.decision, deadline_s=1.0))
    in_flight, release = threading.Event(), threading.Event()

    def decide(_config: Config, _env: dict[str, str], *, detached: Callable[[], None]) -> None:
        if detaches:
            detached()
        in_flight.set()
        release.wait(10)

    decider = Decider(config, decide, settle_s=2.5)
    asking = stop_during_decision(decider, ctl, 41, in_flight)
    threading.Timer(2.0, release.set).start()  # the settle ends after one decision's wait
    started = time.monotonic()
    unfinished = decider.wait_for_in_flight()
    waited = time.monotonic() - started
    asking.join(10)
    assert decider.wait_s == 1.0
    if detaches:
        assert (unfinished, decider.stop_wait_s) == (0, 1.0)  # the settle ended: no longer added
        assert 1.8 < waited < 3.0
    else:
        assert unfinished == 1
        assert 0.9 < waited < 1.9


def test_a_detached_decision_counts_until_its_slot_is_free(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A detached decision that has decided but not yet logged its role_done (a slow log
    sink) is still in flight: a stop past one decision's wait waits for it, and does not
    count it unfinished (review: the count dropped before the slot was free)."""
    monkeypatch.setattr(server, "ANSWER_MARGIN_S", 0.0)
    ctl = Controller(tmp_path)
    config = replace(ctl.config, decision=replace(ctl.config.decision, deadline_s=1.0))
    in_flight = threading.Event()

    def decide(_config: Config, _env: dict[str, str], *, detached: Callable[[], None]) -> None:
        detached()
        in_flight.set()
        time.sleep(1.5)

    class SlowLog:
        def info(self, *_: object, **__: object) -> None:
            time.sleep(1.0)

        error = warning = info

    decider = Decider(config, decide, settle_s=5.0)
    monkeypatch.setattr(server, "get_logger", lambda **_: SlowLog())
    asking = stop_during_decision(decider, ctl, 42, in_flight)
    assert decider.wait_for_in_flight() == 0
    asking.join(10)


def test_with_run_in_first_node_epilog_the_decider_decides_nothing(tmp_path: Path) -> None:
    """decision.run_in = first_node_epilog: the nodes' Epilog decides, so the decider
    answers `decided` with nothing done, as the cold EpilogSlurmctld does nothing."""
    ctl = Controller(tmp_path)
    config = replace(ctl.config, decision=replace(ctl.config.decision, run_in="first_node_epilog"))
    asked: list[dict[str, str]] = []
    with serving(config, lambda _config, env, **_: asked.append(env)):
        reply = client.ask_decider(ctl.end(31, "FAILED", 1))
    assert reply.outcome is Outcome.DECIDED and reply.final is not None
    assert (reply.final.how, reply.final.cause, reply.final.action) == (
        DecidedHow.NOT_HERE,
        None,
        None,
    )
    assert asked == [] and ctl.doors[31].calls == []


# -- EpilogSlurmctld's fallback ------------------------------------------------------------------


@contextlib.contextmanager
def fake_decider(path: str, answers: list[bytes], *, read: bool = True) -> Iterator[None]:
    """A socket at `path` that takes one connection, reads its line, sends `answers`, then
    holds the connection open until the block ends."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    done = threading.Event()

    def run() -> None:
        conn, _ = listener.accept()
        with conn:
            if read:
                conn.makefile("rb").readline()
            for answer in answers:
                conn.sendall(answer)
            done.wait(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(5)
        listener.close()
        os.unlink(path)


def _no_decider(path: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


@contextlib.contextmanager
def _stale(path: str) -> Iterator[None]:
    """A socket file nobody listens on (a decider that died without removing it)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead:
        dead.bind(path)
    yield


BEFORE_ACCEPTED = {
    "absent": (_no_decider, Outcome.NOT_RUNNING),
    "stale": (_stale, Outcome.NOT_RUNNING),
    "hung": (lambda p: fake_decider(p, []), Outcome.TIMED_OUT),
    "silent until closed": (lambda p: fake_decider(p, [b'{"v": 1, "acc']), Outcome.TIMED_OUT),
    "busy": (lambda p: fake_decider(p, [protocol.encode_error("busy")]), Outcome.REFUSED),
    "garbage": (lambda p: fake_decider(p, [b"HTTP/1.1 200 OK\n"]), Outcome.GARBAGE),
    "decided unasked": (
        lambda p: fake_decider(p, [protocol.encode_decided(DecidedHow.DECIDED, "x", "y", 0)]),
        Outcome.GARBAGE,
    ),
    "oversize": (lambda p: fake_decider(p, [b"x" * 10000]), Outcome.GARBAGE),
}
AFTER_ACCEPTED = {
    "decided": (
        [protocol.encode_decided(DecidedHow.DECIDED, "gpu_unavailable", "requeue", 0.01)],
        Outcome.DECIDED,
    ),
    "detached": ([protocol.encode_detached()], Outcome.DETACHED),
    "then silent": ([], Outcome.LOST),
    "then garbage": ([b"}}}\n"], Outcome.LOST),
    "then an error": ([protocol.encode_error("decider error")], Outcome.LOST),
}


def _run_epilog_slurmctld(
    ctl: Controller, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> tuple[int, list[Config]]:
    """slurm-triage-epilog-slurmctld's main with `env`; the in-process decisions it made."""
    decided_here: list[Config] = []

    def in_process(config: Config) -> int:
        decided_here.append(config)
        return 0

    monkeypatch.setattr(entry, "_epilog_slurmctld", in_process)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(ctl.config_path))
    monkeypatch.setenv(protocol.ACCEPT_TIMEOUT_ENV, "0.3")
    return entry.epilog_slurmctld_main(), decided_here


@pytest.mark.parametrize("case", list(BEFORE_ACCEPTED))
def test_without_an_acceptance_epilog_slurmctld_decides_itself(
    controller: Controller, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """No socket, a stale one, a hung or busy decider, garbage: EpilogSlurmctld decides in
    its own process, as before the decider, exits 0 and says why."""
    decider, outcome = BEFORE_ACCEPTED[case]
    env = {"SLURM_JOB_ID": "41", "SLURM_JOB_NODELIST": "node[1-2]", **{}}
    env[protocol.SOCKET_ENV] = controller.socket
    started = time.monotonic()
    with decider(controller.socket):
        status, decided_here = _run_epilog_slurmctld(controller, monkeypatch, env)
    assert status == 0 and len(decided_here) == 1
    assert time.monotonic() - started < 10
    (fallback,) = controller.events("epilog_slurmctld_decider_fallback")
    assert fallback["outcome"] == outcome.value and fallback["job_id"] == "41"
    assert fallback["level"] == ("info" if outcome is Outcome.NOT_RUNNING else "warning")


@pytest.mark.parametrize("case", list(AFTER_ACCEPTED))
def test_after_an_acceptance_epilog_slurmctld_never_decides(
    controller: Controller, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Once `accepted` came the job end is the decider's, whatever follows (a decision,
    detached, silence past the announced wait, garbage, an error): exit 0, no second
    decision; a lost answer is said in a warning."""
    answers, outcome = AFTER_ACCEPTED[case]
    env = {"SLURM_JOB_ID": "42", protocol.SOCKET_ENV: controller.socket}
    with fake_decider(controller.socket, [protocol.encode_accepted(0.3), *answers]):
        reply = client.ask_decider(env)
        assert reply.outcome is outcome and reply.accepted
    with fake_decider(controller.socket, [protocol.encode_accepted(0.3), *answers]):
        status, decided_here = _run_epilog_slurmctld(controller, monkeypatch, env)
    assert status == 0 and decided_here == []
    assert controller.events("epilog_slurmctld_decider_fallback") == []
    lost = controller.events("epilog_slurmctld_decider_lost")
    assert len(lost) == (1 if outcome is Outcome.LOST else 0)


def test_bad_settings_are_the_configs_own_error(
    controller: Controller, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wait override that is no number is no acceptance; it is the config's own override
    too, so the cold path finds a bad config and, as before the decider, says so and
    exits 0."""
    monkeypatch.setenv(protocol.CONNECT_TIMEOUT_ENV, "soon")
    assert client.ask_decider(dict(os.environ)).outcome is Outcome.BAD_SETTINGS
    status, decided_here = _run_epilog_slurmctld(controller, monkeypatch, {"SLURM_JOB_ID": "43"})
    assert status == 0 and decided_here == []
    (invalid,) = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert invalid["event"] == "config_invalid" and "connect_timeout_s" in invalid["error"]


# -- hostile and broken clients ------------------------------------------------------------------


def _raw(path: str, payload: bytes) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(path)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(payload)
        return dict(json.loads(conn.makefile("rb").readline()))


def test_bad_requests_get_an_error_answer_and_nothing_is_decided(
    controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurm_triage.decider import server

    monkeypatch.setattr(server, "REQUEST_TIMEOUT_S", 0.3)
    asked: list[dict[str, str]] = []
    with serving(controller.config, lambda _config, env, **_: asked.append(env)):
        path = controller.socket
        oversize = b'{"v": 1, "env": {"SLURM_JOB_ID": "' + b"1" * 70000 + b'"}}\n'
        assert "longer than" in _raw(path, oversize)["error"]
        assert "longer than" in _raw(path, b"x" * (protocol.MAX_REQUEST_BYTES + 10))["error"]
        assert "JSON" in _raw(path, b"\x00\xff not json\n")["error"]
        hostile = {"v": 1, "env": {"SLURM_JOB_ID": "1", "LD_PRELOAD": "/tmp/x.so"}}
        assert "does not take" in _raw(path, json.dumps(hostile).encode() + b"\n")["error"]
        bad_chars = {"v": 1, "env": {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1;id"}}
        assert "wrong form" in _raw(path, json.dumps(bad_chars).encode() + b"\n")["error"]
        huge = {"v": 1, "env": {"SLURM_JOB_ID": "9" * 4000}}
        assert "wrong form" in _raw(path, json.dumps(huge).encode() + b"\n")["error"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
            silent.settimeout(5)
            silent.connect(path)
            assert b"no whole request" in silent.makefile("rb").readline()
        assert asked == []
        good = protocol.encode_request({"SLURM_JOB_ID": "44"})
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(10)
            conn.connect(path)
            conn.sendall(good)
            lines = conn.makefile("rb")
            assert json.loads(lines.readline())["accepted"]["wait_s"] > 60
            assert json.loads(lines.readline())["decided"]["outcome"] == "failed"
    assert asked == [{"SLURM_JOB_ID": "44"}]
    refused = controller.events("decider_request_refused")
    assert len(refused) == 7 and all("\n" not in e["reason"] for e in refused)


def test_past_max_concurrent_epilog_slurmctld_is_answered_busy(tmp_path: Path) -> None:
    """With every slot deciding, the next job end is told busy before anything is decided
    for it (and EpilogSlurmctld decides it itself)."""
    ctl = Controller(tmp_path, max_concurrent=1)
    entered, release = threading.Event(), threading.Event()

    def slow(_config: Config, env: dict[str, str], **_: Any) -> None:
        entered.set()
        release.wait(30)

    with serving(ctl.config, slow):
        first: list[client.Reply] = []
        env = {"SLURM_JOB_ID": "1", protocol.SOCKET_ENV: ctl.socket}
        holder = threading.Thread(target=lambda: first.append(client.ask_decider(env)))
        holder.start()
        assert entered.wait(10)
        busy = client.ask_decider({**env, "SLURM_JOB_ID": "2"})
        release.set()
        holder.join(30)
    assert (busy.outcome, busy.detail, busy.accepted) == (
        Outcome.REFUSED,
        "decider refused: busy",
        False,
    )
    assert first[0].outcome is Outcome.DECIDED


# -- who may talk to whom ------------------------------------------------------------------------

_AS_NOBODY = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(20)\n"
    "s.connect(sys.argv[1])\n"
    "try:\n    s.sendall(sys.argv[2].encode())\nexcept BrokenPipeError:\n    pass\n"
    "print(s.makefile().readline(), end='')\n"
)
_SERVE_AS_NOBODY = (
    "import socket, sys\n"
    "l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); l.bind(sys.argv[1]); l.listen(1)\n"
    "print('ready', flush=True)\n"
    "c, _ = l.accept(); c.makefile('rb').readline()\n"
    'c.sendall(b\'{"v": 1, "accepted": {"wait_s": 1}}\\n\'); c.recv(1)\n'
)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_peers_are_known_by_the_kernels_word_both_ways(tmp_path: Path) -> None:
    """Past the socket's mode (made 0666 here, as a mistake would), the decider serves only
    root, its own uid and decider.allowed_uids, by SO_PEERCRED; and EpilogSlurmctld takes
    no acceptance from a socket served by another uid (it decides itself)."""
    socket_dir = Path(tempfile.mkdtemp(prefix="decider-peer-", dir="/tmp"))
    try:
        socket_dir.chmod(0o755)
        for allowed, served in (((), False), ((NOBODY,), True)):
            ctl = Controller(tmp_path / str(served), allowed_uids=list(allowed))
            ctl.config = replace(
                ctl.config, decider=replace(ctl.config.decider, socket=str(socket_dir / "d.sock"))
            )
            setup_logging(ctl.config.logging, program="test-decider")
            request = protocol.encode_request({"SLURM_JOB_ID": "51"}).decode()
            with serving(ctl.config, lambda _config, env, **_: None):
                os.chmod(ctl.config.decider.socket, 0o666)
                done = subprocess.run(
                    ["python3", "-I", "-c", _AS_NOBODY, ctl.config.decider.socket, request],
                    user=NOBODY,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    cwd="/",
                )
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            if served:
                assert "accepted" in answer
            else:
                assert answer == {"v": 1, "error": f"uid {NOBODY} may not use the decider"}
                assert [e["uid"] for e in ctl.events("decider_peer_refused")] == [NOBODY]
        os.chown(socket_dir, NOBODY, NOBODY)
        path = str(socket_dir / "other.sock")
        impostor = subprocess.Popen(
            ["python3", "-I", "-c", _SERVE_AS_NOBODY, path],
            user=NOBODY,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )
        try:
            assert impostor.stdout is not None and impostor.stdout.readline() == "ready\n"
            reply = client.ask_decider({"SLURM_JOB_ID": "52", protocol.SOCKET_ENV: path})
        finally:
            impostor.kill()
            impostor.wait(10)
        assert (reply.outcome, reply.detail) == (
            Outcome.UNTRUSTED,
            f"socket served by uid {NOBODY}",
        )
        assert not reply.accepted
    finally:
        for leftover in socket_dir.iterdir():
            leftover.unlink()
        socket_dir.rmdir()


# -- the decider as systemd runs it --------------------------------------------------------------


def test_the_decider_process_serves_and_stops_clean(controller: Controller) -> None:
    """`slurm-triage decider --socket PATH` listens (0600), answers a job end, refuses a
    second decider on the same socket (exit 2, one line), stops on SIGTERM with exit 0 and
    removes its socket."""
    path = str(controller.root / "other" / "d.sock")
    env = {**os.environ, "SLURM_TRIAGE_CONFIG": str(controller.config_path)}
    argv = [str(BIN / "slurm-triage"), "decider", "--socket", path]
    decider = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not controller.events("decider_started"):
            assert decider.poll() is None and time.monotonic() < deadline, decider.stderr
            time.sleep(0.05)
        assert os.stat(path).st_mode & 0o777 == 0o600
        # No Slurm here: the decision fails on the door, and is still the decider's.
        reply = client.ask_decider({"SLURM_JOB_ID": "61", protocol.SOCKET_ENV: path})
        assert reply.outcome is Outcome.DECIDED and reply.final is not None
        assert reply.final.how is DecidedHow.FAILED
        second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"slurm-triage: error: {path}: another decider is serving it"
        ]
    finally:
        decider.terminate()
        assert decider.wait(60) == 0
    assert not os.path.exists(path)
    assert controller.events("decider_stopped")[0]["unfinished"] == 0


def test_a_relative_socket_is_one_line_and_exit_2(
    controller: Controller, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurm_triage.cli.main import main

    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(controller.config_path))
    assert main(["decider", "--socket", "run/d.sock"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "slurm-triage: error: decider.socket = 'run/d.sock': must be an absolute path"
    ]


def test_the_systemd_unit_runs_the_decider_as_slurm_user_in_its_runtime_directory() -> None:
    import configparser

    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(Path(__file__).resolve().parents[2] / "contrib" / "slurm-triage-decider.service")
    service = unit["Service"]
    program, command = service["ExecStart"].split()[-2:]
    assert (os.path.basename(program), command) == ("slurm-triage", "decider")
    assert service["Type"] == "notify" and service["Restart"] == "on-failure"
    assert service["User"] == "slurm" and service["RestartPreventExitStatus"] == "2"
    assert f"/run/{service['RuntimeDirectory']}" == os.path.dirname(protocol.DEFAULT_SOCKET)
    decider = Decider(Config(), lambda *_: None, settle_s=settle_bound_s(Config()))
    assert decider.settle_s > EXPEDITED_SETTLE_S
    assert float(service["TimeoutStopSec"]) > decider.wait_s + decider.settle_s


def test_a_busy_answer_sent_before_the_request_is_read_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decider past max_concurrent answers busy without reading the job end and closes;
    an EpilogSlurmctld that sends after that close gets EPIPE, and still reads the answer:
    REFUSED busy (it decides itself), not FAILED. The CI once saw this race."""
    path = str(tmp_path / "run" / "decider.sock")
    with answers_then_closes(path, protocol.encode_error("busy"), client, monkeypatch):
        reply = client.ask_decider({"SLURM_JOB_ID": "3", protocol.SOCKET_ENV: path})
    assert (reply.outcome, reply.detail, reply.accepted) == (
        Outcome.REFUSED,
        "decider refused: busy",
        False,
    )
