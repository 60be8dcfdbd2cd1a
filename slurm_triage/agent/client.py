"""The Prolog's side of the agent: send the job's environment, wait for the verdict.

It runs on every job start before anything else, so it imports only the wire format and
_socket (not socket, whose enums and selectors cost as much as Python's start: issue 20;
nor enum or typing, so Outcome is a class of constants), and reads no config file: the
socket and both waits come from the Prolog's environment (the config's own
SLURM_TRIAGE__AGENT__* override names) or the defaults. slurmd gives Prolog= none of its
own environment (prep_script_slurmd.c _build_env), so on a real node that means the
defaults, unless Prolog= is a script that exports them. Every way of not getting a verdict
is a Reply with no exit status and the reason, and the Prolog then runs its screen itself:
our trouble never fails a job.
"""

from __future__ import annotations

import _socket
import os

from slurm_triage.agent import protocol
from slurm_triage.unix_socket.wire import LineReader, client_settings, peer_uid, send_then_read

TYPE_CHECKING = False  # typing's flag without importing typing; mypy takes it as true
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


class Outcome:
    """How asking the agent went: one of these, nothing else."""

    ANSWERED = "answered"
    NOT_RUNNING = "not_running"  # no socket file, or nobody listening on it (a stale file)
    UNTRUSTED = "untrusted"  # the listener is neither root nor this process's user
    TIMED_OUT = "timed_out"  # no connection or no whole answer within the waits
    REFUSED = "refused"  # the agent answered an error (busy, a request it does not take)
    GARBAGE = "garbage"  # bytes that are not an answer of this protocol
    BAD_SETTINGS = "bad_settings"  # an override in the environment that is not a number
    FAILED = "failed"  # any other socket error


class Reply:
    """What came of asking: the exit status (ANSWERED only), or why there is none."""

    __slots__ = ("outcome", "exit_status", "detail", "socket", "waits_s")

    def __init__(
        self,
        outcome: str,
        exit_status: int | None = None,
        detail: str = "",
        socket: str = "",
        waits_s: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.outcome, self.exit_status, self.detail = outcome, exit_status, detail
        self.socket, self.waits_s = socket, waits_s  # the settings used: (connect, answer)


def settings(env: Mapping[str, str]) -> tuple[str, float, float]:
    """The socket path and the connect and answer waits (s); ValueError for an override
    that is not a number above 0."""
    return client_settings(
        env,
        "agent",
        (protocol.SOCKET_ENV, protocol.DEFAULT_SOCKET),
        (protocol.CONNECT_TIMEOUT_ENV, protocol.DEFAULT_CONNECT_TIMEOUT_S),
        (protocol.ANSWER_TIMEOUT_ENV, protocol.DEFAULT_ANSWER_TIMEOUT_S),
    )


def ask_agent(env: Mapping[str, str]) -> Reply:
    """Ask the agent to run the Prolog's screen for the job `env` describes."""
    try:
        path, connect_s, answer_s = settings(env)
    except ValueError as exc:
        return Reply(Outcome.BAD_SETTINGS, detail=str(exc)[:200])
    request = protocol.encode_request(env)
    outcome, status, detail = _ask(path, connect_s, answer_s, request, protocol.parse_answer)
    return Reply(outcome, status, detail, path, (connect_s, answer_s))


def release_nvml(
    path: str, seconds: int, connect_s: float, answer_s: float
) -> tuple[str, int | None, str]:
    """Ask the agent to let go of NVML for `seconds` (0: take it back): how it went, the
    seconds it let go for (ANSWERED only), why not."""
    request = protocol.encode_release(seconds)
    return _ask(path, connect_s, answer_s, request, protocol.parse_release_answer)


def _ask(
    path: str,
    connect_s: float,
    answer_s: float,
    request: bytes,
    parse: Callable[[bytes], int],
) -> tuple[str, int | None, str]:
    try:
        conn = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            conn.settimeout(connect_s)
            conn.connect(path)
            peer = peer_uid(conn)
            if peer not in (0, os.geteuid()):
                return Outcome.UNTRUSTED, None, f"socket served by uid {peer}"
            conn.settimeout(answer_s)
            reader = LineReader(conn, protocol.MAX_ANSWER_BYTES)
            line = send_then_read(conn, request, reader, answer_s)
        finally:
            conn.close()
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        return Outcome.NOT_RUNNING, None, exc.strerror or type(exc).__name__
    except TimeoutError:
        return Outcome.TIMED_OUT, None, f"no answer within {connect_s:g}s + {answer_s:g}s"
    except OSError as exc:
        return Outcome.FAILED, None, f"{type(exc).__name__}: {exc.strerror or exc}"[:200]
    except protocol.ProtocolError as exc:
        return Outcome.GARBAGE, None, str(exc)
    try:
        return Outcome.ANSWERED, parse(line), ""
    except protocol.Refused as exc:
        return Outcome.REFUSED, None, str(exc)
    except protocol.ProtocolError as exc:
        return Outcome.GARBAGE, None, str(exc)
