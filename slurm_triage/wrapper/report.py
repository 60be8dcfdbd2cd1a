"""What the wrapper says when its child has exited: the record it writes, the line it prints.

`conclude` never raises: the evidence path is ours, the exit status is the child's, and a
failure of ours (an unwritable evidence directory, a bug) becomes one line on stderr. The
attribution engine and the first-failure marker are imported for a failed command only:
every rank of every job ends here, most of them successfully (issue 20).
"""

from __future__ import annotations

import os

from slurm_triage.evidence import EvidenceError, Fact, ProcessExit, RootException, Stall
from slurm_triage.frozen import replace
from slurm_triage.taxonomy import Action, Condition
from slurm_triage.wrapper.identity import StepIdentity
from slurm_triage.wrapper.record import (
    RecordError,
    RunOutcome,
    build_facts,
    build_record,
    encode_record,
    write_record,
)

TYPE_CHECKING = False  # typing's flag without importing typing; mypy takes it as true
if TYPE_CHECKING:
    from slurm_triage.attribution import Attribution
    from slurm_triage.wrapper.first_failure import FirstFailure

SUMMARY_DETAIL_CHARS = 160
PREFIX = "slurm-triage:"


def conclude(
    outcome: RunOutcome, evidence_dir: str | os.PathLike[str], *, summary: bool = True
) -> list[str]:
    """Write this rank's record; the lines to print on stderr (summary, problems)."""
    lines: list[str] = []
    facts = _facts(outcome, lines)
    data = _encode(outcome.identity, facts, lines)
    try:
        write_record(evidence_dir, outcome.identity, data)
    except RecordError as exc:
        lines.append(f"{PREFIX} evidence not recorded: {exc}")
    except Exception as exc:
        lines.append(f"{PREFIX} evidence not recorded (internal error: {_describe(exc)})")
    if outcome.child.failed:
        try:
            from slurm_triage.attribution import attribute

            attribution = attribute(facts)
            first = _first_failure(outcome, evidence_dir, attribution)
            if summary:
                lines.append(summary_line(outcome.identity, attribution, first))
        except Exception as exc:
            lines.append(f"{PREFIX} no attribution (internal error: {_describe(exc)})")
    return lines


def _first_failure(
    outcome: RunOutcome, evidence_dir: str | os.PathLike[str], attribution: Attribution
) -> FirstFailure | None:
    """The task that failed before this one was killed; or claim that place for this one."""
    from slurm_triage.wrapper import first_failure

    identity = outcome.identity
    if first_failure.is_collateral_candidate(outcome.child.signal_number, attribution):
        first = first_failure.read(evidence_dir, identity)
        mine = first is not None and (first.task, first.node) == (identity.task, identity.node)
        return None if mine else first
    first_failure.claim(evidence_dir, identity, attribution)
    return None


def _facts(outcome: RunOutcome, lines: list[str]) -> tuple[Fact, ...]:
    try:
        return build_facts(outcome)
    except Exception as exc:
        lines.append(f"{PREFIX} log scan failed ({_describe(exc)}); recording the exit only")
        return build_facts(replace(outcome, tails=()))


def _encode(identity: StepIdentity, facts: tuple[Fact, ...], lines: list[str]) -> bytes:
    try:
        return encode_record(build_record(identity, facts))
    except EvidenceError as exc:
        # Our own record failed our own parser: keep what cannot be wrong.
        lines.append(f"{PREFIX} partial evidence record ({exc})")
        basic = tuple(f for f in facts if isinstance(f, ProcessExit | Stall))
        return encode_record(build_record(identity, basic))


def summary_line(
    identity: StepIdentity,
    attribution: Attribution,
    first: FirstFailure | None = None,
) -> str:
    """`slurm-triage: job 12 node2 rank 3: cuda_oom (user) - <what> - not requeued`; for a
    rank ended because another failed: `...: collateral: task 1 on node2 failed first
    (user_code) - killed by SIGTERM - the job's outcome follows task 1`."""
    who = f"job {identity.job_id} {identity.node}"
    if identity.rank is not None:
        who += f" rank {identity.rank}"
    if first is not None:
        why = f"collateral: task {first.task} on {first.node} failed first ({first.cause})"
        follows = f"the job's outcome follows task {first.task}"
        return f"{PREFIX} {who}: {why} - {_detail(attribution)} - {follows}"
    detail = _detail(attribution)
    action = _action_text(attribution, identity.node)
    cause = f"{attribution.cause.value} ({attribution.domain.value})"
    return f"{PREFIX} {who}: {cause} - {detail} - {action}"


def _detail(attribution: Attribution) -> str:
    root = next((f for f in attribution.evidence if isinstance(f, RootException)), None)
    text = f"{root.exc_type}: {root.message}" if root is not None else attribution.reason
    text = " ".join(text.split()).rstrip(": ")
    if len(text) > SUMMARY_DETAIL_CHARS:
        text = text[: SUMMARY_DETAIL_CHARS - 3] + "..."
    return text


def _action_text(attribution: Attribution, node: str) -> str:
    """The taxonomy's default action, in words; the decision step may still choose otherwise."""
    if attribution.action is Action.NONE:
        return "not requeued"
    if attribution.action is Action.HOLD:
        return "requeue held"
    text = "requeue"
    if attribution.action is Action.REQUEUE_EXCLUDE:
        text += f" excluding {','.join(attribution.nodes) or node}"
    if attribution.condition is Condition.ONCE:
        text += " once"
    elif attribution.condition is Condition.IF_RESUMABLE:
        text += " if resumable"
    return text


def _describe(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
