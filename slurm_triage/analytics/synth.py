"""Synthetic Slurm accounting with the shape Kokolis et al. (2024) report, for demos, tests
and benchmarks, and the node events slurmdbd would have kept alongside it.

Shape (measured on 4M jobs): 92% of jobs use one node or less and 81% fewer than 8 GPUs,
holding 7% of GPU-hours; jobs of 256+ GPUs hold 60% of them (the paper: 66%). Each
attempt ends as drawn from the paper's state mix (COMPLETED 60%, FAILED 24%, PREEMPTED
10%, REQUEUED 2%, CANCELLED 3%, TIMEOUT 0.6%, OOM 0.1%) unless a node failure comes
first: failures form a Poisson process of rate N_nodes * r_f over the attempt's run time,
so the analysis must recover r_f. A failure ends the attempt as NODE_FAIL (spec
`node_fail_share`), else as REQUEUED when Slurm requeued it (`requeue_after_failure`) or
FAILED; most are requeued as a new row with the same job id, as Slurm does with `-D`.

Two forms of the text (synth_text): `triage`, slurm-triage's own columns with our
attribution in AdminComment; `plain`, what a site's `sacct -P` dump looks like, with JobID
(array tasks as 13_1), Elapsed, a header, no JobName, no AdminComment and, with `steps`, the
step rows of sacct without -X; there, a failure Slurm requeued is a bare REQUEUED row,
like a preemption's, and only the node events tell them apart. Each failure leaves one node
event on one of the attempt's nodes (DOWN*, or a DRAIN by a health check or Slurm's
"Kill task failed"), starting around the attempt's end, and unrelated drains (maintenance)
happen at random: `write_accounting(..., events_out=PATH)` writes them as
`sacctmgr -P show event` prints them. Events, steps and array task names come from their
own random stream, so they never change the accounting of a seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from slurm_triage.analytics import synth_text

SIZES = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192])
_SIZE_WEIGHTS = np.array(
    [0.56, 0.13, 0.12, 0.11, 0.03, 0.02, 0.012, 0.008, 0.004, 0.0025, 0.0015, 6e-4, 2.2e-4, 3e-5]
)
SIZE_PROBS = _SIZE_WEIGHTS / _SIZE_WEIGHTS.sum()
# Planned run time: lognormal, median 3 h * gpus^0.15, capped at the 7-day lifetime.
DURATION_MEDIAN_H, DURATION_EXPONENT, DURATION_SIGMA, MAX_RUN_H = 3.0, 0.15, 1.3, 168.0
# The paper's mix without the failure states, which the failure process produces.
OUTCOMES = ("COMPLETED", "FAILED", "PREEMPTED", "REQUEUED", "CANCELLED", "TIMEOUT", "OOM")
OUTCOME_PROBS = np.array([0.605, 0.238, 0.10, 0.02, 0.03, 0.006, 0.001])
# What the attribution named for a node failure (the paper's top contributors first).
FAILURE_CAUSES = (
    ("infiniband", 0.25),
    ("filesystem", 0.20),
    ("gpu_memory", 0.18),
    ("pcie", 0.12),
    ("gpu_unavailable", 0.10),
    ("gpu_nvlink", 0.05),
    ("host_hardware", 0.04),
    ("gpu_driver", 0.04),
    ("health_check", 0.02),
)
# Attributions of user-side FAILED attempts; network/nccl_timeout blame no node, so they
# must not count towards r_f.
USER_CAUSES = (
    ("user_code", 0.45),
    ("cuda_oom", 0.15),
    ("segfault", 0.08),
    ("cuda_user_error", 0.05),
    ("storage_full", 0.04),
    ("nccl_timeout", 0.03),
    ("network", 0.02),
)
NODE_FAIL_SHARE = 0.35  # of failures shown as Slurm's NODE_FAIL rather than our attribution
REQUEUE_AFTER_FAILURE = 0.7
LOST_ON_RESTART_H = 0.5  # work since the last hourly checkpoint, on average
CHUNK_JOBS = 250_000
FORMS = ("triage", "plain")
# Jobs go to random nodes, with no scheduler: the busier the cluster, the more jobs share a
# node at once, which no GPU cluster does (and a node event on one job's node would meet
# other jobs' ends there). Unless told its size, the cluster is made big enough that on
# average a quarter of its GPUs are busy, and at least MIN_CLUSTER_NODES. r_f is per
# node-day, so the size changes no rate.
MIN_CLUSTER_NODES = 2000
BUSY_SHARE = 0.25
MEAN_GPU_HOURS_PER_JOB = 120.0  # measured: 111 to 137 with the default mixes


@dataclass(frozen=True, kw_only=True)
class SynthSpec:
    """What to generate: `jobs` logical jobs over `days`, node failures at r_f per node-day,
    written in `form` (with `steps` rows in the plain form), a share `node_fail_share` of
    the failures shown as NODE_FAIL and `requeue_after_failure` of them requeued; with
    `keep_first_submit`, every attempt shows its job's first Submit (as some accounting
    does) instead of its requeue time."""

    jobs: int
    rf_per_node_day: float
    seed: int = 0
    days: float = 330.0
    gpus_per_node: int = 8
    cluster_nodes: int | None = None
    max_attempts: int = 10
    header: bool = False
    form: str = "triage"
    steps: bool = False
    node_fail_share: float = NODE_FAIL_SHARE
    requeue_after_failure: float = REQUEUE_AFTER_FAILURE
    keep_first_submit: bool = False
    # Drains and downs unrelated to any job (maintenance, reboots), per node per year.
    unrelated_events_per_node_year: float = 1.0

    def __post_init__(self) -> None:
        if self.jobs <= 0 or self.days <= 0 or self.gpus_per_node <= 0:
            raise ValueError("jobs, days and gpus_per_node must be positive")
        if not (math.isfinite(self.rf_per_node_day) and self.rf_per_node_day > 0):
            raise ValueError("rf_per_node_day must be a positive number")
        if self.nodes < math.ceil(SIZES.max() / self.gpus_per_node):
            raise ValueError("cluster_nodes is too small for the largest job size")
        if self.form not in FORMS:
            raise ValueError(f"form must be one of {', '.join(FORMS)}, not {self.form!r}")
        if self.steps and self.form != "plain":
            raise ValueError("step rows exist only in the plain form (sacct without -X)")
        shares = (self.node_fail_share, self.requeue_after_failure)
        if not all(0.0 <= x <= 1.0 for x in shares) or self.unrelated_events_per_node_year < 0:
            raise ValueError("shares must be within [0, 1] and event rates >= 0")

    @property
    def nodes(self) -> int:
        """The cluster's node count: as given, or sized for a quarter of its GPUs busy."""
        if self.cluster_nodes is not None:
            return self.cluster_nodes
        busy = self.jobs * MEAN_GPU_HOURS_PER_JOB / (self.days * 24 * self.gpus_per_node)
        return max(MIN_CLUSTER_NODES, math.ceil(busy / BUSY_SHARE))


def write_accounting(
    spec: SynthSpec,
    out: Path,
    progress: Callable[[int, int], None] | None = None,
    events_out: Path | None = None,
) -> int:
    """Write the synthetic sacct file (and its node events to `events_out`); returns the
    number of job rows (steps not counted). Chunked, so memory is bounded whatever
    `spec.jobs` is; the same spec and seed give the same bytes."""
    rng = np.random.default_rng(spec.seed)
    side = np.random.default_rng([spec.seed, 18])  # events, steps, array names
    rows = 0
    chunks = math.ceil(spec.jobs / CHUNK_JOBS)
    events = []
    with out.open("wb") as fh:
        if spec.header or spec.form == "plain":
            fh.write(("|".join(synth_text.columns(spec.form)) + "\n").encode())
        for c in range(chunks):
            n = min(CHUNK_JOBS, spec.jobs - c * CHUNK_JOBS)
            # Each chunk's share of the period matches its share of jobs: arrivals uniform.
            first = c * CHUNK_JOBS
            window = (spec.days * first / spec.jobs, spec.days * (first + n) / spec.jobs)
            attempts = _chunk(rng, spec, c * CHUNK_JOBS + 1, n, window)
            text = synth_text.rows(attempts, spec.form, spec.steps)
            text.write_csv(fh, separator="|", include_header=False, quote_style="never")
            rows += attempts.height
            if events_out is not None:
                events.append(synth_text.failure_events(attempts, side))
            if progress is not None:
                progress(c * CHUNK_JOBS + n, spec.jobs)
    if events_out is not None:
        rate = spec.unrelated_events_per_node_year
        events.append(synth_text.unrelated_events(rate, spec.nodes, spec.days, side))
        synth_text.write_events(pl.concat(events), events_out)
    return rows


@dataclass
class _Jobs:
    """The per-job arrays of one chunk that every attempt reads."""

    ids: np.ndarray
    gpus: np.ndarray
    nodes: np.ndarray
    first_node: np.ndarray
    user: np.ndarray


def _chunk(
    rng: np.random.Generator, spec: SynthSpec, first_id: int, n: int, window: tuple[float, float]
) -> pl.DataFrame:
    """Every attempt of n jobs, in sacct's order (by job, attempts oldest first), as the
    numbers synth_text turns into text."""
    gpus = rng.choice(SIZES, n, p=SIZE_PROBS)
    nodes = np.ceil(gpus / spec.gpus_per_node).astype(np.int64)
    jobs = _Jobs(
        ids=np.arange(first_id, first_id + n),
        gpus=gpus,
        nodes=nodes,
        first_node=rng.integers(1, spec.nodes - nodes + 2),
        user=np.minimum(rng.zipf(1.6, n), 400),
    )
    planned = np.minimum(
        DURATION_MEDIAN_H * gpus**DURATION_EXPONENT * np.exp(rng.normal(0, DURATION_SIGMA, n)),
        MAX_RUN_H,
    )
    # Seconds since EPOCH; a requeued attempt is submitted the second the last one ended.
    submit = _seconds(np.sort(rng.uniform(window[0] * 24, window[1] * 24, n)))
    first_submit = submit.copy()
    queue_mean = 0.2 * (1 + np.log2(gpus))
    attempts = []
    live = np.arange(n)
    for attempt in range(1, spec.max_attempts + 1):
        queue = rng.exponential(queue_mean[live] if attempt == 1 else 0.25, live.size)
        shown = first_submit[live] if spec.keep_first_submit else submit[live]
        frame, again, run = _attempt(rng, spec, jobs, live, planned, submit, queue, attempt)
        attempts.append(frame.with_columns(_shown_submit=shown))
        planned[live] -= np.maximum(run - LOST_ON_RESTART_H, 0.0)
        planned[live] = np.maximum(planned[live], 0.1)
        submit[live] = frame["_end"].to_numpy()
        live = live[again]
        if live.size == 0:
            break
    return pl.concat(attempts).sort("_job", "_attempt")


def _attempt(
    rng: np.random.Generator,
    spec: SynthSpec,
    jobs: _Jobs,
    live: np.ndarray,
    planned: np.ndarray,
    submit: np.ndarray,
    queue: np.ndarray,
    attempt: int,
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray]:
    """One attempt of every live job: its numbers, who is requeued, and run hours."""
    k = live.size
    outcome = np.asarray(OUTCOMES)[rng.choice(len(OUTCOMES), k, p=OUTCOME_PROBS)]
    ends_at_limit = (outcome == "COMPLETED") | (outcome == "TIMEOUT")
    fraction = np.where(ends_at_limit, 1.0, rng.uniform(0, 1, k) ** 1.5)
    intended = planned[live] * fraction
    to_failure = rng.exponential(24.0 / (jobs.nodes[live] * spec.rf_per_node_day))
    never_started = (attempt == 1) & (outcome == "CANCELLED") & (rng.uniform(0, 1, k) < 0.3)
    failed = (to_failure < intended) & ~never_started
    run = np.where(never_started, 0.0, np.where(failed, to_failure, intended))
    requeue_failure = failed & (rng.uniform(0, 1, k) < spec.requeue_after_failure)
    again = requeue_failure | (~failed & np.isin(outcome, ("PREEMPTED", "REQUEUED")))
    again &= attempt < spec.max_attempts
    node_fail = failed & (rng.uniform(0, 1, k) < spec.node_fail_share)
    state = np.where(
        node_fail,
        "NODE_FAIL",
        np.where(failed, np.where(requeue_failure, "REQUEUED", "FAILED"), outcome),
    )
    state = np.where(state == "OOM", "OUT_OF_MEMORY", state)
    cause = _causes(rng, state, failed & ~node_fail)
    submit_s = submit[live]
    start_s = submit_s + _seconds(queue)
    elapsed = np.round(run * 3600).astype(np.int64)
    frame = pl.DataFrame(
        {
            "_job": jobs.ids[live],
            "_state": state,
            "_cause": cause,
            "_failed": failed,
            "_gpus": jobs.gpus[live],
            "_nodes": jobs.nodes[live],
            "_first": jobs.first_node[live],
            "_user": jobs.user[live],
            "_never": never_started,
            "_submit": submit_s,
            "_start": start_s,
            "_end": start_s + elapsed,
            "_elapsed": elapsed,
        }
    ).with_columns(pl.lit(attempt, pl.Int32).alias("_attempt"))
    return frame, again, run


def _seconds(hours: np.ndarray) -> np.ndarray:
    return np.round(hours * 3600).astype(np.int64)


def _draw(rng: np.random.Generator, table: tuple[tuple[str, float], ...], k: int) -> np.ndarray:
    names = np.asarray([name for name, _ in table])
    weights = np.asarray([w for _, w in table])
    return names[rng.choice(len(names), k, p=weights / weights.sum())]


def _causes(rng: np.random.Generator, state: np.ndarray, hardware: np.ndarray) -> np.ndarray:
    """The cause our attribution wrote, or "" where the row carries none."""
    k = state.size
    user_failed = (state == "FAILED") & ~hardware & (rng.uniform(0, 1, k) < 0.7)
    cause = np.where(hardware, _draw(rng, FAILURE_CAUSES, k), "")
    return np.where(user_failed, _draw(rng, USER_CAUSES, k), cause)
