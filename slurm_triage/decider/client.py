"""EpilogSlurmctld's side of the decider: send the job end's environment, wait for
`accepted`, then for the decision.

It runs at every job end before anything else, so it imports only socket, os, json and
the wire format, and reads no config file: the socket and the waits come from the
environment (the config's own SLURM_TRIAGE__DECIDER__* override names) or the defaults.
Every way of not getting `accepted` is a Reply with `accepted` false and the reason, and
EpilogSlurmctld then decides itself, exactly as before the decider. Once `accepted` came
the decision is the decider's: whatever happens after it (no answer in time, the
connection lost, garbage) is a Reply with `accepted` true, and nobody decides twice.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from enum import StrEnum

from slurm_triage.decider import protocol
from slurm_triage.unix_socket.wire import (
    LineReader,
    ProtocolError,
    client_settings,
    peer_uid,
    send_then_read,
)


class Outcome(StrEnum):
    """How asking the decider went."""

    DECIDED = "decided"  # accepted, then decided (see Reply.final)
    DETACHED = "detached"  # accepted; an expedited requeue's, decided after the hook returns
    LOST = "lost"  # accepted, then no decision within its wait (the decider's log has it)
    NOT_RUNNING = "not_running"  # no socket file, or nobody listening on it (a stale file)
    UNTRUSTED = "untrusted"  # the listener is neither root nor this process's user
    TIMED_OUT = "timed_out"  # no connection or no acceptance within the waits
    REFUSED = "refused"  # the decider answered an error (busy, a request it does not take)
    GARBAGE = "garbage"  # bytes that are not an answer of this protocol
    BAD_SETTINGS = "bad_settings"  # an override in the environment that is not a number
    FAILED = "failed"  # any other socket error


class Reply:
    """What came of asking: whether the decider took the job end (then never decide it
    here), its final answer when one came, and why not otherwise."""

    __slots__ = ("outcome", "final", "detail", "socket", "waits_s")

    def __init__(
        self,
        outcome: Outcome,
        final: protocol.Final | None = None,
        detail: str = "",
        socket: str = "",
        waits_s: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.outcome, self.final, self.detail = outcome, final, detail
        self.socket, self.waits_s = socket, waits_s  # the settings used: (connect, accept)

    @property
    def accepted(self) -> bool:
        """The decider took this job end: it decides, this process must not."""
        return self.outcome in (Outcome.DECIDED, Outcome.DETACHED, Outcome.LOST)


def settings(env: Mapping[str, str]) -> tuple[str, float, float]:
    """The socket path and the connect and accept waits (s); ValueError for an override
    that is not a number above 0."""
    return client_settings(
        env,
        "decider",
        (protocol.SOCKET_ENV, protocol.DEFAULT_SOCKET),
        (protocol.CONNECT_TIMEOUT_ENV, protocol.DEFAULT_CONNECT_TIMEOUT_S),
        (protocol.ACCEPT_TIMEOUT_ENV, protocol.DEFAULT_ACCEPT_TIMEOUT_S),
    )


def ask_decider(env: Mapping[str, str]) -> Reply:
    """Ask the decider to decide the job end `env` describes."""
    try:
        path, connect_s, accept_s = settings(env)
    except ValueError as exc:
        return Reply(Outcome.BAD_SETTINGS, detail=str(exc)[:200])
    outcome, final, detail = _ask(path, connect_s, accept_s, protocol.encode_request(env))
    return Reply(outcome, final, detail, path, (connect_s, accept_s))


def _ask(
    path: str, connect_s: float, accept_s: float, request: bytes
) -> tuple[Outcome, protocol.Final | None, str]:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(connect_s)
            conn.connect(path)
            peer = peer_uid(conn)
            if peer not in (0, os.geteuid()):
                return Outcome.UNTRUSTED, None, f"socket served by uid {peer}"
            conn.settimeout(accept_s)
            answers = LineReader(conn, protocol.MAX_ANSWER_BYTES)
            wait_s = protocol.parse_accepted(send_then_read(conn, request, answers, accept_s))
            return _final(answers, wait_s)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        return Outcome.NOT_RUNNING, None, exc.strerror or type(exc).__name__
    except TimeoutError:
        return Outcome.TIMED_OUT, None, f"no acceptance within {connect_s:g}s + {accept_s:g}s"
    except OSError as exc:
        return Outcome.FAILED, None, f"{type(exc).__name__}: {exc.strerror or exc}"[:200]
    except protocol.Refused as exc:
        return Outcome.REFUSED, None, str(exc)
    except ProtocolError as exc:
        return Outcome.GARBAGE, None, str(exc)


def _final(answers: LineReader, wait_s: float) -> tuple[Outcome, protocol.Final | None, str]:
    """After `accepted`: the decision's answer, or LOST; never an outcome that falls back."""
    try:
        final = protocol.parse_final(answers.line(wait_s))
    except TimeoutError:
        return Outcome.LOST, None, f"no decision within {wait_s:g}s of its acceptance"
    except (OSError, ProtocolError) as exc:
        return Outcome.LOST, None, f"{type(exc).__name__}: {exc}"[:200]
    return (Outcome.DETACHED if final.detached else Outcome.DECIDED), final, ""
