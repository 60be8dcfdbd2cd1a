"""The text of synthetic accounting (synth.py makes the numbers): sacct rows in either
form, their step rows, and the node events as `sacctmgr -P show event` prints them.

- `triage`: slurm-triage's own columns (sacct_layout.SACCT_FIELDS), AdminComment last with
  our attribution; what `report --since` reads.
- `plain`: `sacct -a -D -P -o PLAIN_FIELDS` with its header, as a site saves it for the
  report: JobID only (array tasks `13_1`), Elapsed as [D-]HH:MM:SS (secs2time_str), no
  AdminComment, and no JobName (a job user's text, which the report refuses:
  sacct_layout); with steps, the `ID.batch`, `ID.extern` and `ID.0` rows sacct prints
  without -X after each job row.
- Node events in sacctmgr's default order (Cluster,NodeName,Start,End,State,Reason,User;
  header TimeStart/TimeEnd; `Unknown` for an open event; User `name(uid)`, empty when
  slurmctld set the state itself), as read from Slurm's source (slurm/events.py).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl

from slurm_triage.analytics.sacct_layout import SACCT_FIELDS

EPOCH = np.datetime64("2025-01-01T00:00:00", "s")
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"
PLAIN_FIELDS = (
    "JobID",
    "Partition",
    "Account",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "Elapsed",
    "NNodes",
    "AllocTRES",
    "NodeList",
)
EVENT_FIELDS = ("Cluster", "NodeName", "TimeStart", "TimeEnd", "State", "Reason", "User")
CLUSTER = "synth"
SLURM_USER = "slurm(64030)"
# How a node failure shows in the node events when Slurm did not end the job NODE_FAIL:
# (state, reason, user, share).
FAILURE_EVENTS = (
    ("DOWN*", "Not responding", "", 0.5),
    ("DRAIN", "Kill task failed", SLURM_USER, 0.2),
    ("DRAIN", "NHC: check_nv_healthmon: GPU 3 fell off the bus", "root(0)", 0.3),
)
# Events unrelated to any job: (state, reason, user, share); MAINT does not take the node
# out of service and must never count.
UNRELATED_EVENTS = (
    ("DRAIN", "maintenance: BIOS update", "admin(1000)", 0.4),
    ("DRAIN@", "Reboot ASAP", "root(0)", 0.3),
    ("DOWN*", "Not responding", "", 0.2),
    ("MAINT", "", "root(0)", 0.1),
)
_EXIT_CODES = {"COMPLETED": "0:0", "FAILED": "1:0", "CANCELLED": "0:15", "OUT_OF_MEMORY": "0:125"}


def columns(form: str) -> tuple[str, ...]:
    return SACCT_FIELDS if form == "triage" else PLAIN_FIELDS


def rows(attempts: pl.DataFrame, form: str, steps: bool) -> pl.DataFrame:
    """The text columns of every attempt (and, in the plain form, its steps)."""
    base = attempts.with_columns(pl.lit(0, pl.Int8).alias("_step"))
    if form == "triage":
        return base.select(_triage_columns())
    frames = [base]
    if steps:
        frames.extend(_steps(base))
    ordered = pl.concat(frames).sort("_job", "_attempt", "_step")
    return ordered.select(_plain_columns())


def _time(seconds: pl.Expr) -> pl.Expr:
    return (pl.lit(EPOCH.astype("datetime64[ms]")) + pl.duration(seconds=seconds)).dt.strftime(
        TIME_FORMAT
    )


def _state_text() -> pl.Expr:
    cancelled = pl.format("CANCELLED by {}", pl.col("_user") + 1000)
    return pl.when(pl.col("_state") == "CANCELLED").then(cancelled).otherwise(pl.col("_state"))


def _tres() -> pl.Expr:
    return pl.format(
        "billing={},cpu={},gres/gpu={},mem={}M,node={}",
        pl.col("_gpus") * 12,
        pl.col("_gpus") * 12,
        pl.col("_gpus"),
        pl.col("_gpus") * 120000,
        pl.col("_nodes"),
    )


def _nodelist() -> pl.Expr:
    last = pl.col("_first") + pl.col("_nodes") - 1
    return (
        pl.when(pl.col("_nodes") == 1)
        .then(pl.format("node{}", pl.col("_first")))
        .otherwise(pl.format("node[{}-{}]", pl.col("_first"), last))
    )


def _common(never: pl.Expr) -> dict[str, pl.Expr]:
    return {
        "State": _state_text(),
        "ExitCode": pl.col("_state").replace_strict(_EXIT_CODES, default="0:0"),
        "Submit": _time(pl.col("_shown_submit")),
        "Start": pl.when(never).then(pl.lit("None")).otherwise(_time(pl.col("_start"))),
        "End": _time(pl.when(never).then(pl.col("_start")).otherwise(pl.col("_end"))),
        "NNodes": pl.col("_nodes").cast(pl.String),
        "AllocTRES": pl.when(never).then(pl.lit("")).otherwise(_tres()),
        "NodeList": pl.when(never).then(pl.lit("None assigned")).otherwise(_nodelist()),
    }


def _triage_columns() -> list[pl.Expr]:
    job = pl.col("_job").cast(pl.String)
    never = pl.col("_never")
    action = pl.when(pl.col("_state") == "REQUEUED").then(pl.lit("requeue_exclude"))
    comment = pl.concat_str(
        pl.lit('{"triage":{"cause":"'),
        pl.col("_cause"),
        pl.lit('","nodes":["node'),
        pl.col("_first").cast(pl.String),
        pl.lit('"],"action":"'),
        action.otherwise(pl.lit("none")),
        pl.lit('","n":'),
        pl.col("_attempt").cast(pl.String),
        pl.lit("}}"),
    )
    common = _common(never)
    values = {
        **common,
        "JobID": job,
        "JobIDRaw": job,
        "ElapsedRaw": pl.when(never).then(0).otherwise(pl.col("_elapsed")).cast(pl.String),
        "Partition": pl.lit("learn"),
        "User": pl.format("user{}", pl.col("_user")),
        "AdminComment": pl.when(pl.col("_cause") == "").then(pl.lit("")).otherwise(comment),
    }
    return [values[name].alias(name) for name in SACCT_FIELDS]


def _elapsed_text(seconds: pl.Expr) -> pl.Expr:
    """secs2time_str: D-HH:MM:SS from a day on, else HH:MM:SS."""
    days, rest = seconds // 86400, seconds % 86400
    clock = pl.format(
        "{}:{}:{}",
        (rest // 3600).cast(pl.String).str.zfill(2),
        (rest % 3600 // 60).cast(pl.String).str.zfill(2),
        (rest % 60).cast(pl.String).str.zfill(2),
    )
    return pl.when(days > 0).then(pl.format("{}-{}", days, clock)).otherwise(clock)


def _plain_columns() -> list[pl.Expr]:
    job = pl.col("_job")
    # One job in ten is an array task: JobID `BASE_TASK`, unique per job.
    array = job % 10 == 3
    job_id = (
        pl.when(array)
        .then(pl.format("{}_{}", job - job % 8, job % 8))
        .otherwise(job.cast(pl.String))
    )
    suffix = pl.col("_step").replace_strict({0: "", 1: ".batch", 2: ".extern", 3: ".0"})
    never = pl.col("_never")
    elapsed = pl.when(never).then(0).otherwise(pl.col("_elapsed"))
    values = {
        **_common(never),
        "JobID": pl.concat_str(job_id, suffix),
        "Partition": pl.when(pl.col("_step") == 0).then(pl.lit("learn")).otherwise(pl.lit("")),
        "Account": pl.format("proj{}", pl.col("_user") % 20),
        "Elapsed": _elapsed_text(elapsed),
    }
    return [values[name].alias(name) for name in PLAIN_FIELDS]


def _steps(base: pl.DataFrame) -> list[pl.DataFrame]:
    """The batch, extern and first srun step of every attempt that started."""
    started = base.filter(~pl.col("_never"))
    batch = started.with_columns(
        pl.lit(1, pl.Int8).alias("_step"), pl.lit(1, pl.Int64).alias("_nodes")
    )
    extern = started.with_columns(
        pl.lit(2, pl.Int8).alias("_step"), pl.lit("COMPLETED").alias("_state")
    )
    srun = started.filter(pl.col("_elapsed") > 0).with_columns(pl.lit(3, pl.Int8).alias("_step"))
    return [batch, extern, srun]


def failure_events(attempts: pl.DataFrame, side: np.random.Generator) -> pl.DataFrame:
    """One node event per failed attempt, on one of its nodes, starting around its end:
    DOWN* "Not responding" with the end itself for NODE_FAIL; otherwise a down or drain
    from 4 minutes before to 2.5 after (a health check, Slurm's "Kill task failed")."""
    failed = attempts.filter(pl.col("_failed"))
    k = failed.height
    node_fail = (failed["_state"] == "NODE_FAIL").to_numpy()
    kind = side.choice(len(FAILURE_EVENTS), k, p=[e[3] for e in FAILURE_EVENTS])
    kind = np.where(node_fail, 0, kind)
    jitter = np.where(node_fail, side.integers(0, 3, k), side.integers(-240, 151, k))
    offset = (side.uniform(0, 1, k) * failed["_nodes"].to_numpy()).astype(np.int64)
    start = failed["_end"].to_numpy() + jitter
    return _events(failed["_first"].to_numpy() + offset, start, kind, FAILURE_EVENTS, side)


def unrelated_events(
    per_node_year: float, cluster_nodes: int, days: float, side: np.random.Generator
) -> pl.DataFrame:
    """Drains, reboots and downs of idle or busy nodes that end no job."""
    k = int(side.poisson(per_node_year * cluster_nodes * days / 365.0))
    nodes = side.integers(1, cluster_nodes + 1, k)
    start = (side.uniform(0, days * 86400, k)).astype(np.int64)
    kind = side.choice(len(UNRELATED_EVENTS), k, p=[e[3] for e in UNRELATED_EVENTS])
    return _events(nodes, start, kind, UNRELATED_EVENTS, side)


def _events(
    nodes: np.ndarray,
    start: np.ndarray,
    kind: np.ndarray,
    table: tuple[tuple[str, str, str, float], ...],
    side: np.random.Generator,
) -> pl.DataFrame:
    k = nodes.size
    hours = side.lognormal(np.log(4.0), 1.0, k)
    end = start + (hours * 3600).astype(np.int64)
    still_open = side.uniform(0, 1, k) < 0.03
    pick = np.asarray
    return pl.DataFrame(
        {
            "node": nodes.astype(np.int64),
            "start": start.astype(np.int64),
            "end": np.where(still_open, -1, end).astype(np.int64),
            "state": pick([e[0] for e in table])[kind],
            "reason": pick([e[1] for e in table])[kind],
            "user": pick([e[2] for e in table])[kind],
        }
    )


def write_events(events: pl.DataFrame, path: Path) -> None:
    """The node events as `sacctmgr -P show event` prints them, with one cluster event."""
    text = events.sort("start", "node").select(
        pl.lit(CLUSTER).alias("Cluster"),
        pl.format("node{}", pl.col("node")).alias("NodeName"),
        _time(pl.col("start")).alias("TimeStart"),
        pl.when(pl.col("end") < 0)
        .then(pl.lit("Unknown"))
        .otherwise(_time(pl.col("end")))
        .alias("TimeEnd"),
        pl.col("state").alias("State"),
        pl.col("reason").alias("Reason"),
        pl.col("user").alias("User"),
    )
    first = f"{CLUSTER}||{EPOCH.astype(object):{TIME_FORMAT}}|Unknown|||\n"
    with path.open("wb") as fh:
        fh.write(("|".join(EVENT_FIELDS) + "\n" + first).encode())
        text.write_csv(fh, separator="|", include_header=False, quote_style="never")
