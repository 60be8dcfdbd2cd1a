"""`attribute(facts) -> Attribution`: one cause for why a job ended. Pure: no I/O, no clock.

The taxonomy's five rules, in the order they apply:
5. The window: facts timed outside [end - 10 min, end + 5 min] are dropped first (facts with
   no time are kept: a dmesg stamp since boot cannot be placed, and dropping it would lose
   the XID that killed the job). When a watchdog timed a collective out, root's facts count
   from 10 minutes before that collective began (hang.py).
4. Success is success: state COMPLETED with every exit 0 (or, with no state, every exit 0)
   is `completed`, whatever the log says (benign OOM retries, a printed "Xid").
1. Hardware beats its symptoms: each node's best finding is taken by tier (findings.py), so
   a kernel XID 48 outranks the "illegal memory access" the job printed on that node.
2. A root cause beats the cascade: across nodes the highest tier wins, then the earliest
   time; NCCL timeouts and remote errors are symptom-tier, so one node's real error beats
   every other node's NCCL noise, and only that node is blamed.
3. Only root-collected evidence makes `root_backed` true, and only then may a node be drained.
"""

from __future__ import annotations

from collections.abc import Iterable

from slurm_triage.attribution.findings import (
    Finding,
    findings_for,
)
from slurm_triage.attribution.hang import MAX_HANG_S, hang_began
from slurm_triage.attribution.signatures import TASK_FAILURE_LINES
from slurm_triage.attribution.tiers import Tier
from slurm_triage.evidence import (
    Fact,
    LogHit,
    ProcessExit,
    RootException,
    SlurmState,
    Source,
    fact_to_dict,
)
from slurm_triage.frozen import Frozen, replace
from slurm_triage.job_state import JobState
from slurm_triage.taxonomy import Action, Cause, Condition, Domain, info

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

WINDOW_BEFORE_S = 600.0
WINDOW_AFTER_S = 300.0
# How long before a job's end root's evidence may count at most: rule 5's 10 minutes before
# the watchdog line that reaches back furthest (root_window), that line's MAX_HANG_S, and
# 10 minutes before the hang began.
ROOT_REACH_S = WINDOW_BEFORE_S + MAX_HANG_S + WINDOW_BEFORE_S
# Two nodes' copies of the same error within this many seconds are one event, both blamed.
SAME_EVENT_S = 5.0
MAX_EVIDENCE = 20
UNKNOWN_CONFIDENCE = 0.2
_INF = float("inf")


class Window(Frozen):
    """The span of time in which evidence counts for a job (epoch seconds, inclusive)."""

    start: float
    end: float

    def __post_init__(self) -> None:
        if self.start > self.end:
            raise ValueError(f"window start {self.start} is after its end {self.end}")

    def contains(self, when: float) -> bool:
        return self.start <= when <= self.end


def job_window(end_time: float) -> Window:
    """Rule 5's window for a job that ended at `end_time`: 10 minutes before to 5 after."""
    return Window(end_time - WINDOW_BEFORE_S, end_time + WINDOW_AFTER_S)


def root_window(window: Window, facts: Iterable[Fact]) -> Window:
    """The span in which root's facts count for the job of `window` (a job_window), given
    the facts that count in `window`: from 10 minutes before the earliest collective a
    watchdog timed out began, when that is earlier (hang.py); else `window` itself."""
    began = hang_began(facts, window.end - WINDOW_AFTER_S)
    if began is None or began - WINDOW_BEFORE_S >= window.start:
        return window
    return Window(began - WINDOW_BEFORE_S, window.end)


class Attribution(Frozen):
    """Why a job ended: one cause, what to do, whom to blame, how sure, and on what evidence.

    `root_backed` is True only when every blamed node has root-collected evidence of a
    hardware or infrastructure fault: the one condition under which a node may be drained.
    """

    cause: Cause
    domain: Domain
    action: Action
    condition: Condition
    nodes: tuple[str, ...]
    confidence: float
    root_backed: bool
    evidence: tuple[Fact, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; `evidence` is the list of facts in the record format."""
        return {
            "cause": self.cause.value,
            "domain": self.domain.value,
            "action": self.action.value,
            "action_condition": self.condition.value,
            "action_text": info(self.cause).action_text,
            "nodes": list(self.nodes),
            "confidence": round(self.confidence, 3),
            "root_backed": self.root_backed,
            "reason": self.reason,
            "evidence": [fact_to_dict(f) for f in self.evidence],
        }


def attribute(facts: Iterable[Fact], *, window: Window | None = None) -> Attribution:
    """Attribute one cause to the job these facts describe (see the module doc for rules)."""
    kept = list(facts) if window is None else _in_window(list(facts), window)
    kept = _named_nodes(kept)
    completed = _completed(kept)
    if completed is not None:
        return completed
    found = _claims_below_user_errors(
        [fd for i, fact in enumerate(kept) for fd in findings_for(fact, i)]
    )
    if not found:
        return _unknown(kept, [])
    per_node: dict[str | None, Finding] = {}
    for finding in found:
        best = per_node.get(finding.node)
        if best is None or _node_rank(finding) > _node_rank(best):
            per_node[finding.node] = finding
    winner = min(per_node.values(), key=_cross_rank)
    if winner.cause is Cause.UNKNOWN:
        return _unknown(kept, [f for f in found if f.cause is Cause.UNKNOWN])
    return _verdict(winner, per_node, found)


def _in_window(facts: list[Fact], window: Window) -> list[Fact]:
    """Rule 5: the facts that count, in their order; root's from `root_window`."""
    inside = [f.time is None or window.contains(f.time) for f in facts]
    roots = root_window(window, [f for f, keep in zip(facts, inside, strict=True) if keep])
    return [
        f
        for f, keep in zip(facts, inside, strict=True)
        if keep or (f.source is Source.ROOT and f.time is not None and roots.contains(f.time))
    ]


# Errors no hardware fault explains (a KeyError, a full disk); CUDA-level errors (illegal
# access, OOM, crashes) are not among them: a GPU fault can cause those (TAXONOMY rule 1).
_PROGRAM_CAUSES = (Cause.USER_CODE, Cause.STORAGE_FULL)
# Exception types too generic to be the program's own mistake ("No CUDA GPUs are available").
_GENERIC_TYPES = frozenset({"RuntimeError", "Exception", "OSError", "IOError", "SystemError"})


def _claims_below_user_errors(found: list[Finding]) -> list[Finding]:
    """A hardware fault that only the job's own evidence claims (its log, its records) never
    outranks an error of the program itself: a KeyError plus a forged `XID 79 on victim99`
    record is the user's KeyError. Root's evidence is untouched: it still beats everything."""
    if not any(_program_error(f) for f in found):
        return found
    return [replace(f, tier=Tier.ERROR - 1) if f.tier == Tier.INFRA else f for f in found]


def _program_error(f: Finding) -> bool:
    if f.tier != Tier.ERROR or f.cause not in _PROGRAM_CAUSES:
        return False
    fact = f.fact
    return not isinstance(fact, RootException) or (
        fact.exc_type.rsplit(".", 1)[-1] not in _GENERIC_TYPES
    )


def _named_nodes(facts: list[Fact]) -> list[Fact]:
    """One spelling per node, and a node for a root exception known only by its rank.

    srun, slurmstepd, NCCL and torchrun print host names in their own case; a node is named
    as Slurm (records, kernel logs, NVML) names it, else in lower case. A `[rank3]:` traceback
    from a merged batch log names no node: the wrapper's record of rank 3 does.
    """
    spellings: dict[str, set[str]] = {}
    trusted: dict[str, set[str]] = {}
    ranks: dict[int, set[str]] = {}
    for f in facts:
        if f.node is None:
            continue
        key = f.node.lower()
        spellings.setdefault(key, set()).add(f.node)
        if not isinstance(f, LogHit | RootException):
            trusted.setdefault(key, set()).add(f.node)
        elif isinstance(f, RootException) and f.rank is not None:
            ranks.setdefault(f.rank, set()).add(key)
    name = {
        key: min(trusted.get(key) or (names if len(names) == 1 else {key}))
        for key, names in spellings.items()
    }
    out = []
    for f in facts:
        node = f.node
        if node is None and isinstance(f, RootException) and f.rank is not None:
            known = ranks.get(f.rank, set())
            node = next(iter(known)) if len(known) == 1 else None
        node = name[node.lower()] if node is not None else None
        out.append(f if node == f.node else replace(f, node=node))
    return out


def _node_rank(f: Finding) -> tuple[int, bool, int, float, float, str, str]:
    """Within one node: strongest tier, then the root exception, precedence, confidence,
    earliest; the cause and reason only break exact ties, so fact order never matters."""
    when = -f.time if f.time is not None else -_INF
    return f.tier, f.final, f.precedence, f.confidence, when, f.cause.value, f.why


def _cross_rank(f: Finding) -> tuple[int, float, int, float, str]:
    """Across nodes (smaller first): strongest tier, then earliest, precedence, confidence."""
    when = f.time if f.time is not None else _INF
    return -f.tier, when, -f.precedence, -f.confidence, f.node or ""


def _completed(facts: list[Fact]) -> Attribution | None:
    states = [f for f in facts if isinstance(f, SlurmState)]
    exits = [f for f in facts if isinstance(f, ProcessExit)]
    if any(e.failed() for e in exits):
        return None
    if any(s.state is JobState.COMPLETED for s in states):
        confidence, why = 1.0, "Slurm state COMPLETED with exit 0"
    elif not states and exits:
        confidence, why = 0.9, "every process exited 0"
    else:
        return None
    used = tuple(f for f in facts if isinstance(f, SlurmState | ProcessExit))
    return _make(Cause.COMPLETED, (), confidence, False, used, why)


def _unknown(facts: list[Fact], found: list[Finding]) -> Attribution:
    used = tuple(f.fact for f in found) or tuple(
        f for f in facts if isinstance(f, SlurmState | ProcessExit)
    )
    failed = [f.why for f in found if f.tier == Tier.EXIT]
    vague = [f.why for f in found if f.tier != Tier.EXIT]
    if failed:
        why = f"{', '.join(dict.fromkeys(failed))}, with no recognisable evidence"
    else:
        why = "no evidence of failure or success" if not vague else "no specific evidence"
    if vague:
        why += f"; only unspecific errors: {vague[0]}"
    confidence = UNKNOWN_CONFIDENCE if used else UNKNOWN_CONFIDENCE / 2
    return _make(Cause.UNKNOWN, (), confidence, False, used[:MAX_EVIDENCE], why)


def _verdict(
    winner: Finding, per_node: dict[str | None, Finding], found: list[Finding]
) -> Attribution:
    nodes = _blamed(winner, per_node) or _failed_tasks(winner, found)
    blamed = set(nodes)  # membership in a set: a job's log may name 16,384 nodes
    support = [f for f in found if f.cause is winner.cause and (not nodes or f.node in blamed)]
    support.sort(key=lambda f: f.index)
    evidence = tuple(dict.fromkeys(f.fact for f in support))[:MAX_EVIDENCE]
    backed = bool(nodes) and info(winner.cause).domain in (Domain.HARDWARE, Domain.INFRASTRUCTURE)
    drainable = {f.node for f in support if f.drainable}
    backed = backed and all(n in drainable for n in nodes)
    reason = (f"on {', '.join(nodes)}: " if nodes else "") + winner.why
    reason += _cascade_note(winner, per_node, blamed)
    return _make(winner.cause, nodes, _confidence(winner, support), backed, evidence, reason)


def _blamed(winner: Finding, per_node: dict[str | None, Finding]) -> tuple[str, ...]:
    """Nodes whose best finding is the winning cause, at the strongest tier any of them has.

    The winner itself may be job-wide (state OUT_OF_MEMORY): then the nodes that show the
    same cause in their own evidence (srun's "Out Of Memory" for node02) are the ones blamed.
    """
    if not info(winner.cause).blames_nodes:
        return ()
    same = [
        f for n, f in per_node.items() if n and f.cause is winner.cause and _same_event(winner, f)
    ]
    if not same:
        return ()
    top = max(f.tier for f in same)
    return tuple(sorted({f.node for f in same if f.tier == top and f.node}))


def _failed_tasks(winner: Finding, found: list[Finding]) -> tuple[str, ...]:
    """A user error read from a merged batch log names no node; the nodes whose tasks srun
    saw fail (`srun: error: node2: task 1: Exited with exit code 1`) are where it happened.
    Only for the user's own errors: a hardware claim is never pinned on a node this way."""
    if winner.node is not None or info(winner.cause).domain is not Domain.USER:
        return ()
    for signature in TASK_FAILURE_LINES:
        nodes = {
            f.node
            for f in found
            if f.node and isinstance(f.fact, LogHit) and f.fact.signature == signature
        }
        if nodes:
            return tuple(sorted(nodes))
    return ()


def _same_event(winner: Finding, other: Finding) -> bool:
    # Each node with a hardware fault is faulty in its own right; softer errors only count
    # as the same event when they happened together.
    if winner.tier >= Tier.ROOT_HW or winner.time is None or other.time is None:
        return True
    return other.time - winner.time <= SAME_EVENT_S


def _confidence(winner: Finding, support: list[Finding]) -> float:
    """The winner's confidence, +0.05 per further independent channel that agrees (max +0.1)."""
    channels = {(f.fact.KIND, f.fact.source) for f in support}
    bonus = min(0.1, 0.05 * (len(channels) - 1))
    return min(0.99, winner.confidence + bonus)


def _cascade_note(winner: Finding, per_node: dict[str | None, Finding], nodes: set[str]) -> str:
    note = ""
    for label, symptom in (("symptoms on", True), ("lesser evidence on", False)):
        others = sorted(
            (n, f.cause.value)
            for n, f in per_node.items()
            if n
            and n not in nodes
            and f.cause is not winner.cause
            and (f.tier <= Tier.SYMPTOM) is symptom
            and f.tier <= winner.tier
        )
        if others:
            shown = ", ".join(f"{n} ({c})" for n, c in others[:5])
            more = f" and {len(others) - 5} more" if len(others) > 5 else ""
            note += f"; {label} {shown}{more}"
    return note


def _make(
    cause: Cause,
    nodes: tuple[str, ...],
    confidence: float,
    backed: bool,
    evidence: tuple[Fact, ...],
    reason: str,
) -> Attribution:
    row = info(cause)
    return Attribution(
        cause,
        row.domain,
        row.action,
        row.condition,
        nodes,
        round(min(1.0, max(0.0, confidence)), 3),
        backed,
        evidence,
        reason,
    )
