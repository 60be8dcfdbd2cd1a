"""The agent's wire format: one bounded JSON line each way over a Unix socket.

    prolog        {"v": 1, "kind": "prolog", "env": {"SLURM_JOB_ID": "123", ...}}
                  -> {"v": 1, "exit_status": 0}
    release_nvml  {"v": 1, "kind": "release_nvml", "seconds": 300}
                  -> {"v": 1, "released_s": 300}
    any refusal   -> {"v": 1, "error": "<one line>"}

Requests are at most MAX_REQUEST_BYTES, answers MAX_ANSWER_BYTES. A request is untrusted
input to root: a Prolog's environment may hold only the closed list of variables below
(what the Prolog's screen reads, and its log context), each of a checked form; anything else
refuses the whole request, and the Prolog then runs its screen itself on the same
environment, so a refusal never changes a verdict. `release_nvml` is the GPU reset's
(prolog_epilog.gpu_repair): NVIDIA refuses a reset while any process holds the GPU, the
agent included, so it lets go of NVML for `seconds` (0: take it back now).
The Prolog's client imports it on every job start, so it imports nothing Python's own start
has not loaded but unix_socket's wire and json_codec (C modules under socket and json): no
json, enum or typing (each as costly as Python's start: issue 20). Hence RequestKind is a
class of constants, not an enum.
"""

from __future__ import annotations

from slurm_triage.json_codec import dumps_with, loads_with
from slurm_triage.unix_socket.wire import ProtocolError, answer_json
from slurm_triage.unix_socket.wire import Refused as Refused  # this protocol's error answer

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

TYPE_CHECKING = False  # typing's flag without importing typing; mypy takes it as true
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

dumps, loads = dumps_with(), loads_with()  # json.dumps, json.loads
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


MAX_RELEASE_S = 3600


class RequestKind:
    """What a client may ask: one of these two, nothing else (parse_request)."""

    PROLOG = "prolog"  # run the Prolog's screen for this job environment
    RELEASE_NVML = "release_nvml"  # let go of NVML for a while (a GPU reset is coming)


class Request:
    """A checked request: its kind, and the Prolog's environment or the seconds asked."""

    __slots__ = ("kind", "env", "seconds")

    def __init__(self, kind: str, env: dict[str, str], seconds: int = 0) -> None:
        self.kind, self.env, self.seconds = kind, env, seconds


def _digits(limit: int) -> Callable[[str], bool]:
    return lambda v: 0 < len(v) <= limit and v.isascii() and v.isdigit()


def _name(limit: int) -> Callable[[str], bool]:
    """A Slurm node, user or partition name: letters, digits, `.`, `_`, `-`."""
    return lambda v: 0 < len(v) <= limit and v[0].isalnum() and set(v) <= _NAME_CHARS


def _user(value: str) -> bool:
    """A user name as the name service gives it: a node name's characters, and `@` for
    SSSD's fully qualified names (`use_fully_qualified_names`: alice@corp.example.com)."""
    return _name(64)(value.replace("@", ".", 1))


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
    "SLURM_HET_JOB_ID": _digits(10),  # a het job's leader: its turned-away record's home
    "SLURMD_NODENAME": _name(64),
    "SLURM_JOB_GPUS": _gpu_list,
    "SLURM_JOB_EXCLUSIVE": _word,
    "SLURM_JOB_OVERSUBSCRIBE": _word,
    "SLURM_JOB_USER": _user,
    "SLURM_JOB_PARTITION": _name(64),
    "SLURM_SCRIPT_CONTEXT": _word,
}


def encode_request(env: Mapping[str, str]) -> bytes:
    """The Prolog's request: the variables of ENV_RULES it has, as they are (the agent
    checks them; the client does not judge)."""
    picked = {name: env[name] for name in ENV_RULES if name in env}
    line = dumps({"v": VERSION, "kind": RequestKind.PROLOG, "env": picked})
    return line.encode("utf-8", "surrogateescape") + b"\n"


def encode_release(seconds: int) -> bytes:
    """The GPU reset's request: let go of NVML for `seconds` (0: take it back now)."""
    line = dumps({"v": VERSION, "kind": RequestKind.RELEASE_NVML, "seconds": seconds})
    return line.encode() + b"\n"


def parse_request(line: bytes) -> Request:
    """The request a line (without its newline) carries, every field checked;
    ProtocolError says what is wrong."""
    try:
        data = loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("request is not one JSON line") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise ProtocolError(f"request must be an object of protocol version {VERSION}")
    if data.get("kind") == RequestKind.RELEASE_NVML:
        seconds = data.get("seconds")
        if set(data) != {"v", "kind", "seconds"} or type(seconds) is not int:
            raise ProtocolError("release_nvml must hold exactly v, kind and seconds")
        if not 0 <= seconds <= MAX_RELEASE_S:
            raise ProtocolError(f"seconds must be 0 to {MAX_RELEASE_S}")
        return Request(RequestKind.RELEASE_NVML, {}, seconds)
    if data.get("kind") != RequestKind.PROLOG:
        raise ProtocolError("unknown request kind")
    if set(data) != {"v", "kind", "env"}:
        raise ProtocolError("prolog must hold exactly v, kind and env")
    env = data["env"]
    if not isinstance(env, dict):
        raise ProtocolError("env must be an object")
    for name, value in env.items():
        rule = ENV_RULES.get(name)
        if rule is None:
            raise ProtocolError("env holds a variable the agent does not take")
        if not isinstance(value, str) or not rule(value):
            raise ProtocolError(f"{name} has a value of the wrong form")
    return Request(RequestKind.PROLOG, dict(env))


def encode_answer(
    *, exit_status: int | None = None, released_s: int | None = None, error: str | None = None
) -> bytes:
    """An answer: the Prolog's exit status, the seconds NVML is let go, or an error (one
    line: the Prolog then screens itself, the GPU reset goes ahead anyway)."""
    body: dict[str, object] = {"v": VERSION}
    if error is not None:
        body["error"] = " ".join(error.split())[:300]
    elif released_s is not None:
        body["released_s"] = released_s
    else:
        body["exit_status"] = exit_status
    return dumps(body).encode() + b"\n"


def _answer_body(line: bytes, key: str) -> object:
    data = answer_json(line, VERSION, "agent")
    if set(data) != {"v", key}:
        raise ProtocolError(f"answer must hold exactly v and {key}")
    return data[key]


def parse_answer(line: bytes) -> int:
    """The exit status a prolog answer carries, or ProtocolError (an error answer,
    garbage)."""
    status = _answer_body(line, "exit_status")
    # Only the screen's own verdicts: 0 (run the job) or 1 (turn it away, as prolog() says).
    if type(status) is not int or status not in (0, 1):
        raise ProtocolError("answer carries no exit status of 0 or 1")
    return status


def parse_release_answer(line: bytes) -> int:
    """The seconds a release_nvml answer says NVML is let go, or ProtocolError."""
    seconds = _answer_body(line, "released_s")
    if type(seconds) is not int or not 0 <= seconds <= MAX_RELEASE_S:
        raise ProtocolError("answer carries no released seconds")
    return seconds
