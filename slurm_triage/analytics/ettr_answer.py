"""The answer of `slurm-triage ettr`: closed form, optimum, optional Monte Carlo check.

Pure Python unless a simulation is asked for (numpy is imported only then), so the closed
form answers without the `[analytics]` extra.
"""

from __future__ import annotations

import math
from typing import Any

from slurm_triage.analytics import model
from slurm_triage.errors import TriageError


def evaluate(
    job: model.JobRun, *, optimal: bool, runs: int = 0, run_days: float = 30.0, seed: int = 0
) -> dict[str, Any]:
    """Everything `ettr` prints, as JSON-able values."""
    result: dict[str, Any] = {
        "nodes": job.n_nodes,
        "rf_per_node_day": job.rf_per_node_day,
        "failures_per_day": job.failures_per_day,
        "mttf_hours": job.mttf_days * model.HOURS_PER_DAY,
        "restart_min": job.restart_min,
        "ckpt_interval_min": job.ckpt_interval_min,
        "ckpt_write_s": job.ckpt_write_s,
        "queue_min": job.queue_min,
        "ettr": model.expected_ettr(job),
        "valid_regime": model.closed_form_valid(job),
        "optimal": optimal,
    }
    if job.ckpt_write_s > 0:
        young = model.young_daly_interval_min(job.n_nodes, job.rf_per_node_day, job.ckpt_write_s)
        result["young_daly_interval_min"] = young
        result["closed_form_best_interval_min"] = _best_or_none(job)
    if runs:
        result["simulation"] = _simulate(job, runs, run_days, seed)
    return result


def _best_or_none(job: model.JobRun) -> float | None:
    try:
        return model.best_interval_min(job)
    except ValueError:
        return None


def _simulate(job: model.JobRun, runs: int, run_days: float, seed: int) -> dict[str, float]:
    from slurm_triage.analytics.simulate import HopelessRun, simulate

    try:
        sim = simulate(job, work_days=run_days, runs=runs, seed=seed)
    except HopelessRun as exc:
        raise TriageError(f"cannot simulate: {exc}") from None
    summary = sim.summary()
    closed = model.expected_ettr(job)
    summary["closed_form_error"] = (closed - sim.mean) / sim.mean if sim.mean else math.nan
    return summary


def render(result: dict[str, Any]) -> str:
    """The terminal form of `evaluate`'s answer."""
    lines = [
        f"job on {result['nodes']:,g} nodes at r_f = {result['rf_per_node_day']:g} per "
        f"node-day: {result['failures_per_day']:.3g} failures per day, "
        f"MTTF {result['mttf_hours']:.2f} h",
        f"restart u0 {result['restart_min']:g} min, checkpoint every "
        f"{result['ckpt_interval_min']:.3g} min"
        + (" (Young/Daly optimum)" if result["optimal"] else "")
        + f", write {result['ckpt_write_s']:g} s, queue {result['queue_min']:g} min "
        "per (re)submission",
        f"E[ETTR] (closed form): {result['ettr']:.3f}"
        + (
            ""
            if result["valid_regime"]
            else "  [outside the valid regime: MTTF < 0.1 day; see --simulate]"
        ),
    ]
    if "young_daly_interval_min" in result:
        best = result["closed_form_best_interval_min"]
        lines.append(
            f"optimal checkpoint interval: Young/Daly {result['young_daly_interval_min']:.3g} "
            "min" + (f", closed-form maximum at {best:.3g} min" if best else "")
        )
    sim = result.get("simulation")
    if sim:
        lines.append(
            f"Monte Carlo ({sim['runs']:,} runs of {sim['work_days']:g} days of work): mean "
            f"{sim['mean']:.3f} +/- {sim['sem']:.4f}, 5-95% {sim['p05']:.3f}-{sim['p95']:.3f}, "
            f"{sim['mean_failures']:.1f} failures per run; closed form off by "
            f"{100 * sim['closed_form_error']:+.1f}%"
        )
    return "\n".join(lines)
