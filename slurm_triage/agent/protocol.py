"""The agent's wire format: one bounded JSON line each way over a Unix socket.

    request  {"v": 1, "kind": "prolog", "env": {"SLURM_JOB_ID": "123", ...}}   <= 8 KiB
    answer   {"v": 1, "exit_status": 0}  or  {"v": 1, "error": "<one line>"}  <= 4 KiB

The request is untrusted input to root: only the closed list of variables below (what the
Prolog's screen reads, and its log context) may appear, each with a checked form; anything
else refuses the whole request, and the Prolog then runs its screen itself on the same
environment, so a refusal never changes a verdict. Import-light (json only): the Prolog's
client imports it on every job start.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import StrEnum

VERSION = 1
MAX_REQUEST_BYTES = 8192
MAX_ANSWER_BYTES = 4096
# The defaults of config.AgentConfig (a test compares them): the Prolog's client reads no
# config file, so it needs them without importing config.
DEFAULT_SOCKET = "/run/slurm-triage/agent.sock"
DEFAULT_CONNECT_TIMEOUT_S = 0.5
DEFAULT_ANSWER_TIMEOUT_S = 20.0
# The Prolog's way to other values: the config's own override variables.
SOCKET_ENV = "SLURM_TRIAGE__AGENT__SOCKET"
CONNECT_TIMEOUT_ENV = "SLURM_TRIAGE__AGENT__CONNECT_TIMEOUT_S"
ANSWER_TIMEOUT_ENV = "SLURM_TRIAGE__AGENT__ANSWER_TIMEOUT_S"

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class RequestKind(StrEnum):
    """What a client may ask; the one kind today."""

    PROLOG = "prolog"


class ProtocolError(ValueError):
    """A request or answer that is not one we accept; the message is one line, no input."""


class Refused(ProtocolError):
    """A well-formed error answer: the agent did not run the screen, and says why."""


def _digits(limit: int) -> Callable[[str], bool]:
    return lambda v: 0 < len(v) <= limit and v.isascii() and v.isdigit()


def _name(limit: int) -> Callable[[str], bool]:
    """A Slurm node, user or partition name: letters, digits, `.`, `_`, `-`."""
    return lambda v: 0 < len(v) <= limit and v[0].isalnum() and set(v) <= _NAME_CHARS


def _gpu_list(value: str) -> bool:
    return 0 < len(value) <= 512 and all(_digits(4)(p) for p in value.split(","))


def _word(value: str) -> bool:
    return 0 < len(value) <= 32 and value.isascii() and value.replace("_", "").isalnum()


# The Prolog's environment the agent accepts: slurmd's prep_script_slurmd.c _build_env names
# what each means; prolog_epilog.prolog reads the job, uid, gid, node, GPUs and exclusivity,
# prolog_epilog.entry logs the user, partition and context.
ENV_RULES: dict[str, Callable[[str], bool]] = {
    "SLURM_JOB_ID": _digits(10),
    "SLURM_JOB_UID": _digits(10),
    "SLURM_JOB_GID": _digits(10),
    "SLURMD_NODENAME": _name(64),
    "SLURM_JOB_GPUS": _gpu_list,
    "SLURM_JOB_EXCLUSIVE": _word,
    "SLURM_JOB_OVERSUBSCRIBE": _word,
    "SLURM_JOB_USER": _name(64),
    "SLURM_JOB_PARTITION": _name(64),
    "SLURM_SCRIPT_CONTEXT": _word,
}


def encode_request(env: Mapping[str, str]) -> bytes:
    """The Prolog's request: the variables of ENV_RULES it has, as they are (the agent
    checks them; the client does not judge)."""
    picked = {name: env[name] for name in ENV_RULES if name in env}
    line = json.dumps({"v": VERSION, "kind": RequestKind.PROLOG.value, "env": picked})
    return line.encode("utf-8", "surrogateescape") + b"\n"


def parse_request(line: bytes) -> dict[str, str]:
    """The Prolog environment a request line (without its newline) carries, only names of
    ENV_RULES in their checked forms; ProtocolError says what is wrong."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("request is not one JSON line") from None
    if not isinstance(data, dict) or set(data) != {"v", "kind", "env"}:
        raise ProtocolError("request must hold exactly v, kind and env")
    if data["v"] != VERSION:
        raise ProtocolError(f"protocol version must be {VERSION}")
    if data["kind"] not in tuple(RequestKind):
        raise ProtocolError("unknown request kind")
    env = data["env"]
    if not isinstance(env, dict):
        raise ProtocolError("env must be an object")
    for name, value in env.items():
        rule = ENV_RULES.get(name)
        if rule is None:
            raise ProtocolError("env holds a variable the agent does not take")
        if not isinstance(value, str) or not rule(value):
            raise ProtocolError(f"{name} has a value of the wrong form")
    return dict(env)


def encode_answer(*, exit_status: int | None = None, error: str | None = None) -> bytes:
    """An answer: the Prolog's exit status, or an error (one line) that makes it fall back."""
    body: dict[str, object] = {"v": VERSION}
    if error is not None:
        body["error"] = " ".join(error.split())[:300]
    else:
        body["exit_status"] = exit_status
    return json.dumps(body).encode() + b"\n"


def parse_answer(line: bytes) -> int:
    """The exit status an answer carries, or ProtocolError (an error answer, garbage)."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("answer is not one JSON line") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise ProtocolError("answer is not of this protocol version")
    if isinstance(data.get("error"), str):
        raise Refused(f"agent refused: {data['error'][:300]}")
    status = data.get("exit_status")
    # Only the screen's own verdicts: 0 (run the job) or 1 (turn it away, as prolog() says).
    if set(data) != {"v", "exit_status"} or type(status) is not int or status not in (0, 1):
        raise ProtocolError("answer carries no exit status of 0 or 1")
    return status
