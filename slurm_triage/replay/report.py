"""Replay's answer: history in one line, then each setting's figures side by side."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from slurm_triage.replay.history import History
from slurm_triage.replay.replay import Outcome


def history_dict(history: History) -> dict[str, Any]:
    chains: dict[int, int] = {}
    for end in history.ends:
        chains[end.job_id] = max(chains.get(end.job_id, 0), end.attempt)
    return {
        "source": history.source,
        "job_runs": history.job_runs,
        "attempts": history.attempts,
        "failures": sum(1 for e in history.ends if e.failure),
        "requeues": history.requeues,
        "longest_chain": max(chains.values(), default=0),
        "nodes": len(history.nodes),
        "health_drains": len(history.health_drains),
        "journal_rows": history.journal_rows,
        "unexpanded_node_lists": history.unexpanded_node_lists,
    }


def to_json(history: History, outcomes: Sequence[Outcome]) -> str:
    return json.dumps(
        {"history": history_dict(history), "settings": [o.to_dict() for o in outcomes]}, indent=2
    )


def _rows() -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    def n(key: str) -> Callable[[dict[str, Any]], str]:
        return lambda d: f"{d[key]:,}"

    def hours(key: str) -> Callable[[dict[str, Any]], str]:
        return lambda d: f"{d[key]:,.0f}"

    def verdict(name: str) -> Callable[[dict[str, Any]], str]:
        return lambda d: f"{d['verdicts'].get(name, 0):,}"

    return [
        ("decisions", n("decisions")),
        ("  requeue", verdict("requeue")),
        ("  hold", verdict("hold")),
        ("  record only", verdict("record_only")),
        ("requeues with exclusion", n("requeues_with_exclusion")),
        ("requeues of jobs history left ended", n("requeues_history_did_not_make")),
        ("backoff before requeues (hours)", lambda d: f"{d['backoff_hours']:,.1f}"),
        ("jobs held", n("jobs_held")),
        ("jobs left ended that history requeued", n("jobs_left_ended_that_history_requeued")),
        ("crash loops stopped", n("crash_loops_stopped")),
        ("nodes drained", n("nodes_drained")),
        ("lemon nodes drained", lambda d: f"{len(d['lemon_nodes']):,}"),
        ("failures avoided (node already out)", n("failures_avoided")),
        ("attempts not run (after a hold/end)", n("attempts_not_run")),
        ("GPU-hours saved", hours("gpu_hours_saved")),
        ("GPU-hours at risk (held completions)", hours("gpu_hours_at_risk")),
        (
            "health drains the breaker blocks",
            lambda d: f"{d['health_drains_breaker_blocked']:,} of {d['health_drains']:,}",
        ),
    ]


def summary(history: History, outcomes: Sequence[Outcome], crash_loop_requeues: int) -> str:
    h = history_dict(history)
    lines = [
        f"replay of {h['source']}: {h['job_runs']:,} job runs, {h['attempts']:,} attempts, "
        f"{h['failures']:,} failures, {h['requeues']:,} requeues (longest chain "
        f"{h['longest_chain']} attempts), {h['nodes']:,} nodes, {h['health_drains']:,} "
        f"health-check drains, {h['journal_rows']:,} journal decisions",
    ]
    if h["unexpanded_node_lists"]:
        lines.append(f"  {h['unexpanded_node_lists']:,} node lists could not be expanded")
    dicts = [o.to_dict() for o in outcomes]
    width = max(14, *(len(o.name) + 2 for o in outcomes))
    rows = _rows()
    label_width = max(len(label) for label, _ in rows) + 2
    lines.append("")
    lines.append(f"  {'':<{label_width}}" + "".join(f"{o.name:>{width}}" for o in outcomes))
    for label, render in rows:
        lines.append(f"  {label:<{label_width}}" + "".join(f"{render(d):>{width}}" for d in dicts))
    lines.append("")
    lines += [f"  {o.name}: {o.description}" for o in outcomes]
    lines.append(
        f"  crash loop: a job history requeued after {crash_loop_requeues}+ failures; GPU-hours "
        "saved: failed attempts not run, and the paper's loss per avoided failure"
    )
    return "\n".join(lines)
