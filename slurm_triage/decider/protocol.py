"""The decider's wire format: one bounded JSON request line, then up to two answer lines.

    request   {"v": 1, "env": {"SLURM_JOB_ID": "123", "SLURM_JOB_NODELIST": "n[1-2]", ...}}
    first     {"v": 1, "accepted": {"wait_s": 95.0}}     the decider will decide this end
              {"v": 1, "error": "<one line>"}            busy, refused: nothing was decided
    second    {"v": 1, "decided": {"outcome": "decided", "cause": "...", "action": "...",
                                   "cpu_s": 0.012}}
              {"v": 1, "detached": true}                 an expedited requeue: decided on
                                                         after the hook has returned

Two answers so that a decision is never made twice: EpilogSlurmctld decides itself only
when no `accepted` came (the decider then did nothing); after it, the decision is the
decider's whatever becomes of the connection. `wait_s` is how long the decider may take
(its decision.deadline_s and wait_for_nodes_s plus a margin): the client reads no config.

Every byte of a request may come from a hostile job, so the environment may hold only the
closed list of variables the decision reads (prolog_epilog.job_end.SLURM_ENV; slurmctld's
job_mgr.c job_common_env_vars sets them), each of a checked form. The job's name, comment,
work directory and the rest of what slurmctld passes are never sent. Anything else refuses
the whole request, and EpilogSlurmctld then decides itself on the same environment.
Import-light (json, and socket under unix_socket.wire): EpilogSlurmctld's client imports
it at every job end.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from enum import StrEnum

from slurm_triage.unix_socket.wire import ProtocolError, answer_json
from slurm_triage.unix_socket.wire import Refused as Refused  # this protocol's error answer

VERSION = 1
# A 2,000-node job's node list that Slurm could not compress much is tens of KiB.
MAX_NODELIST_CHARS = 60000
MAX_REQUEST_BYTES = 65536
MAX_ANSWER_BYTES = 4096
MAX_WAIT_S = 7200.0  # the most a client waits for a decision, whatever the decider says
# The defaults of config.DeciderConfig (a test compares them): EpilogSlurmctld's client
# reads no config file, so it needs them without importing config.
DEFAULT_SOCKET = "/run/slurm-triage-decider/decider.sock"
DEFAULT_CONNECT_TIMEOUT_S = 0.5
DEFAULT_ACCEPT_TIMEOUT_S = 5.0
# EpilogSlurmctld's way to other values: the config's own override variables.
SOCKET_ENV = "SLURM_TRIAGE__DECIDER__SOCKET"
CONNECT_TIMEOUT_ENV = "SLURM_TRIAGE__DECIDER__CONNECT_TIMEOUT_S"
ACCEPT_TIMEOUT_ENV = "SLURM_TRIAGE__DECIDER__ACCEPT_TIMEOUT_S"

_HOSTLIST_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-[],")


class DecidedHow(StrEnum):
    """What the decider's `decided` answer says became of the job end."""

    DECIDED = "decided"  # decided, acted and recorded (the journal has its row)
    ALREADY_TAKEN = "already_taken"  # another decider had claimed this end
    NOT_HERE = "not_here"  # decision.run_in = first_node_epilog: the nodes' Epilog decides
    FAILED = "failed"  # Slurm or the journal failed it (the decider's log says how)
    UNKNOWN = "unknown"


def _digits(limit: int) -> Callable[[str], bool]:
    return lambda v: 0 < len(v) <= limit and v.isascii() and v.isdigit()


def _hostlist(value: str) -> bool:
    """A Slurm host list expression: names, brackets, ranges, commas (hostlist.expand
    judges its shape; this bounds its bytes)."""
    return 0 < len(value) <= MAX_NODELIST_CHARS and set(value) <= _HOSTLIST_CHARS


def _exit_code2(value: str) -> bool:
    """`exit:signal`, as job_mgr.c writes SLURM_JOB_EXIT_CODE2."""
    code, colon, sig = value.partition(":")
    return bool(colon) and _digits(3)(code) and _digits(3)(sig)


# The variables of job_end.SLURM_ENV the controller's decision reads (JobEnd.from_env);
# the rest of EpilogSlurmctld's environment is never sent.
ENV_RULES: dict[str, Callable[[str], bool]] = {
    "SLURM_JOB_ID": _digits(10),
    "SLURM_JOB_UID": _digits(10),
    "SLURM_JOB_NODELIST": _hostlist,
    "SLURM_NODELIST": _hostlist,  # before 23.02
    "SLURM_JOB_EXIT_CODE2": _exit_code2,
    "SLURM_JOB_RESTART_COUNT": _digits(5),
    "SLURM_JOB_START_TIME": _digits(12),
    "SLURM_HET_JOB_ID": _digits(10),
    "SLURM_HET_JOB_NODELIST": _hostlist,
}


def encode_request(env: Mapping[str, str]) -> bytes:
    """EpilogSlurmctld's request: the variables of ENV_RULES it has, as they are (the
    decider checks them; the client does not judge)."""
    picked = {name: env[name] for name in ENV_RULES if name in env}
    line = json.dumps({"v": VERSION, "env": picked})
    return line.encode("utf-8", "surrogateescape") + b"\n"


def parse_request(line: bytes) -> dict[str, str]:
    """The job environment a request line (without its newline) carries, every variable
    checked; ProtocolError says what is wrong, without echoing the input."""
    try:
        data = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ProtocolError("request is not one JSON line") from None
    if not isinstance(data, dict) or data.get("v") != VERSION:
        raise ProtocolError(f"request must be an object of protocol version {VERSION}")
    if set(data) != {"v", "env"} or not isinstance(data["env"], dict):
        raise ProtocolError("request must hold exactly v and an env object")
    env = data["env"]
    for name, value in env.items():
        rule = ENV_RULES.get(name)
        if rule is None:
            raise ProtocolError("env holds a variable the decider does not take")
        if not isinstance(value, str) or not rule(value):
            raise ProtocolError(f"{name} has a value of the wrong form")
    if "SLURM_JOB_ID" not in env:
        raise ProtocolError("env holds no SLURM_JOB_ID")
    return dict(env)


def _line(body: dict[str, object]) -> bytes:
    return json.dumps({"v": VERSION, **body}).encode() + b"\n"


def encode_accepted(wait_s: float) -> bytes:
    return _line({"accepted": {"wait_s": round(wait_s, 3)}})


def encode_error(error: str) -> bytes:
    return _line({"error": " ".join(error.split())[:300]})


def encode_detached() -> bytes:
    return _line({"detached": True})


def encode_decided(how: DecidedHow, cause: str | None, action: str | None, cpu_s: float) -> bytes:
    body = {"outcome": how.value, "cause": cause, "action": action, "cpu_s": round(cpu_s, 6)}
    return _line({"decided": body})


def parse_accepted(line: bytes) -> float:
    """The seconds the decider may take, from an `accepted` answer; Refused for an error
    answer, ProtocolError for anything else."""
    data = answer_json(line, VERSION, "decider")
    body = data.get("accepted")
    wait = body.get("wait_s") if isinstance(body, dict) else None
    if set(data) != {"v", "accepted"} or not isinstance(wait, int | float):
        raise ProtocolError("answer is not an acceptance")
    if isinstance(wait, bool) or not 0 < wait <= MAX_WAIT_S:
        raise ProtocolError("acceptance with a wait out of range")
    return float(wait)


class Final:
    """The second answer: detached, or decided with what came of it."""

    __slots__ = ("detached", "how", "cause", "action", "cpu_s")

    def __init__(
        self,
        *,
        detached: bool,
        how: DecidedHow = DecidedHow.UNKNOWN,
        cause: str | None = None,
        action: str | None = None,
        cpu_s: float | None = None,
    ) -> None:
        self.detached, self.how, self.cause, self.action = detached, how, cause, action
        self.cpu_s = cpu_s


def _text(value: object) -> str | None:
    return value[:64] if isinstance(value, str) else None


def parse_final(line: bytes) -> Final:
    """The `decided` or `detached` answer; ProtocolError (Refused) for anything else."""
    data = answer_json(line, VERSION, "decider")
    if set(data) == {"v", "detached"} and data["detached"] is True:
        return Final(detached=True)
    body = data.get("decided")
    if set(data) != {"v", "decided"} or not isinstance(body, dict):
        raise ProtocolError("answer is neither decided nor detached")
    cpu = body.get("cpu_s")
    outcome = body.get("outcome")
    try:
        how = DecidedHow(outcome) if isinstance(outcome, str) else DecidedHow.UNKNOWN
    except ValueError:
        how = DecidedHow.UNKNOWN
    return Final(
        detached=False,
        how=how,
        cause=_text(body.get("cause")),
        action=_text(body.get("action")),
        cpu_s=float(cpu) if isinstance(cpu, int | float) and cpu >= 0 else None,
    )
