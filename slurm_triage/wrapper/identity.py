"""Who one wrapper is within its job: job, node, step, task, and the GPUs of its step.

Read once from the environment srun gives every task (SLURM_JOB_ID, SLURMD_NODENAME,
SLURM_STEP_ID, SLURM_PROCID, SLURM_STEP_TASKS_PER_NODE, ...). Outside Slurm the job is
"local", the node is the short hostname and the step "0", so `slurm-triage wrap` also works
on a workstation. Names become file names, so each part is reduced to a safe character set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from slurm_triage.frozen import Frozen

LOCAL_JOB = "local"
BATCH_STEP = "batch"
# The batch script has SLURM_JOB_ID but no SLURM_STEP_ID (checked on Slurm 22.05).
_JOB_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")
_STEP_VARS = ("SLURM_STEP_ID", "SLURM_STEPID")
# Per-step counts first: a step may run fewer tasks per node than its job asked for.
_TASKS_PER_NODE_VARS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
# What a file-name part may hold; anything else becomes "_" (no `re` on a rank's path, issue 20).
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_+-")
MAX_PART_CHARS = 64


class StepIdentity(Frozen):
    """This wrapper's place in the job; `tasks_on_node` > 1 puts the task id in file names."""

    job_id: str
    node: str
    step: str
    task: str
    rank: int | None
    tasks_on_node: int = 1
    restart: int = 0  # SLURM_RESTART_COUNT: a requeued job runs again under the same id

    @property
    def record_name(self) -> str:
        """`<node>.<step>.json`, or `<node>.<step>.<task>.json` when the node runs several."""
        if self.tasks_on_node > 1:
            return f"{self.node}.{self.step}.{self.task}.json"
        return f"{self.node}.{self.step}.json"

    @property
    def label(self) -> str:
        """`<node>.<step>.<task>`: unique per rank, for tee files and scratch directories."""
        return f"{self.node}.{self.step}.{self.task}"


def identity_from_env(env: Mapping[str, str], hostname: str | None = None) -> StepIdentity:
    """The identity srun's environment describes; clear fallbacks outside Slurm."""
    job = _first(env, _JOB_VARS)
    step = _first(env, _STEP_VARS) or (BATCH_STEP if job else "0")
    # os.uname() is what gethostname(2) reads on Linux, without importing socket (~5 ms on
    # every rank, issue 20).
    node = env.get("SLURMD_NODENAME") or (hostname or os.uname().nodename).split(".", 1)[0]
    procid = env.get("SLURM_PROCID", "")
    rank = int(procid) if procid.isdigit() else None
    return StepIdentity(
        job_id=safe_part(job or LOCAL_JOB),
        node=safe_part(node),
        step=safe_part(step),
        task=str(rank) if rank is not None else "0",
        rank=rank,
        tasks_on_node=tasks_on_node(env),
        restart=int(restart) if (restart := env.get("SLURM_RESTART_COUNT", "")).isdigit() else 0,
    )


def tasks_on_node(env: Mapping[str, str]) -> int:
    """How many tasks of this step run on this node (1 when nothing says otherwise)."""
    for var in _TASKS_PER_NODE_VARS:
        counts = expand_counts(env.get(var, ""))
        if counts:
            node_id = env.get("SLURM_NODEID", "")
            index = int(node_id) if node_id.isdigit() else -1
            return counts[index] if 0 <= index < len(counts) else max(counts)
    per_node = env.get("SLURM_NTASKS_PER_NODE", "")
    return int(per_node) if per_node.isdigit() and int(per_node) > 0 else 1


def expand_counts(text: str) -> list[int]:
    """Slurm's compressed per-node counts: `"2(x3),1"` -> [2, 2, 2, 1]; [] if unreadable."""
    out: list[int] = []
    for part in text.split(","):
        counted = _count(part.strip())
        if counted is None:
            return []
        count, repeat = counted
        if repeat > 100_000:  # a node list is never that long; do not build a huge list
            return []
        out.extend([count] * repeat)
    return out


def _count(part: str) -> tuple[int, int] | None:
    """`N` or `N(xR)` (decimal digits, as `\\d+`): (N, R), R 1 when absent; else None."""
    count, repeated, rest = part.partition("(x")
    if not count.isdecimal():
        return None
    if not repeated:
        return int(count), 1
    times = rest[:-1]
    if not rest.endswith(")") or not times.isdecimal():
        return None
    return int(count), int(times)


def safe_part(text: str) -> str:
    """`text` as one safe file-name part: [A-Za-z0-9_+-] only, never empty or dotted."""
    kept = text.strip()[:MAX_PART_CHARS]
    cleaned = "".join(char if char in _SAFE else "_" for char in kept)
    return cleaned or "unknown"


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str:
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return value
    return ""
