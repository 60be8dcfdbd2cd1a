"""Read Slurm accounting into one typed polars frame of attempts (one row per sacct row).

Input: what `sacct -a -D -X -n -P --delimiter='|' -o SACCT_FIELDS` prints on Slurm 22.05,
optionally with its header line (sacct without -n), which then also fixes the column order.
With `-D` every requeue is its own row with the same JobIDRaw, so a job run (a requeue
chain of one logical job) is the set of rows sharing JobIDRaw; `attempt` numbers them from
1 in submit order.

Parsing: one lazy polars query (scan_csv with `|` as separator and quoting off, then typed
columns) run by the streaming engine in batches, so memory stays bounded and a progress
callback sees each batch. AdminComment is free text and
may hold `|`; it is the last column, so the schema carries OVERFLOW_COLUMNS spare columns
that catch the pieces and are glued back before the triage object is read out of it. The
other columns are Slurm's own and never contain `|`.

Attribution: a row's AdminComment may hold our decision as compact JSON,
`{"triage":{"cause":"gpu_unavailable","nodes":[...],"action":"...","n":1}}`; `n` is the
attempt the decision is about (a comment set after a requeue lands on the next row), and
without `n` the comment is about its own row. A second source of attributions (the journal)
joins the same way: a frame with columns job_raw, attempt, cause; it wins over AdminComment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from slurm_triage.analytics import causes
from slurm_triage.errors import TriageError
from slurm_triage.slurm.model import JobState

SACCT_FIELDS = (
    "JobID",
    "JobIDRaw",
    "State",
    "ExitCode",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "NNodes",
    "AllocTRES",
    "NodeList",
    "Partition",
    "User",
    "AdminComment",
)
REQUIRED_FIELDS = ("JobIDRaw", "State", "Submit", "Start", "End", "ElapsedRaw", "NNodes")
OVERFLOW_COLUMNS = 6
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"

# Untyped `gres/gpu=N` is the job's total when AccountingStorageTRES has gres/gpu; a site
# that only accounts typed GPUs (`gres/gpu:a100=N`) gets the sum of the typed counts.
_GPU_UNTYPED = r"(?:^|,)gres/gpu=(\d+)"
_GPU_TYPED = r"gres/gpu:[^=,]+=(\d+)"
_TRIAGE_CAUSE = r'"triage":\{[^{}]*?"cause":"([A-Za-z_]+)"'
_TRIAGE_N = r'"triage":\{[^{}]*?"n":(\d+)'

ATTEMPT_SCHEMA = {
    "job_raw": pl.Int64,
    "state": pl.Enum(causes.STATES),
    "submit": pl.Datetime("ms"),
    "start": pl.Datetime("ms"),
    "end": pl.Datetime("ms"),
    "elapsed_s": pl.Int64,
    "nnodes": pl.Int32,
    "gpus": pl.Int32,
    "comment_cause": pl.String,
    "comment_n": pl.Int32,
}
ATTRIBUTION_SCHEMA = {"job_raw": pl.Int64, "attempt": pl.Int32, "cause": pl.String}

Progress = Callable[[int, int], None]
"""Called as progress(rows_done, rows_expected) after each batch; the total is an estimate."""

BATCH_ROWS = 500_000
_SNIFF_BYTES = 1 << 20


class IngestError(TriageError):
    """The accounting input is missing, unreadable or not sacct output."""


@dataclass(frozen=True)
class Accounting:
    """Parsed attempts (ATTEMPT_SCHEMA), where they came from, and how many lines were
    skipped as unparsable (reported, so a half-garbled file does not pass silently)."""

    attempts: pl.DataFrame
    source: str
    bad_lines: int


def read_sacct_file(path: Path, progress: Progress | None = None) -> Accounting:
    """Parse a saved sacct file into attempts; IngestError names the file on failure."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
        size = path.stat().st_size
    except FileNotFoundError:
        raise IngestError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IngestError(f"{path}: is a directory, not a sacct file") from None
    except PermissionError:
        raise IngestError(f"{path}: permission denied") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot read: {exc.strerror}") from None
    return _read(path, head, size, str(path), progress)


def read_sacct_text(text: str | bytes, source: str = "sacct") -> Accounting:
    """Parse sacct output held in memory (what the Slurm door returned)."""
    data = text.encode() if isinstance(text, str) else text
    return _read(data, data[:_SNIFF_BYTES], len(data), source, None)


def _read(
    source: Path | bytes, head: bytes, size: int, name: str, progress: Progress | None
) -> Accounting:
    names, has_header = _columns(head, name)
    lines = head.count(b"\n")
    expected = int(size * lines / len(head)) if lines and head else 1
    frame = scan_sacct(source, names, has_header)
    batches: list[pl.DataFrame] = []
    done = 0
    try:
        for batch in frame.collect_batches(chunk_size=BATCH_ROWS, engine="streaming"):
            batches.append(batch)
            done += batch.height
            if progress is not None:
                progress(done, max(expected, done))
    except (pl.exceptions.PolarsError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "parse error"
        raise IngestError(f"{name}: not sacct output ({detail})") from None
    parsed = pl.concat(batches) if batches else pl.DataFrame()
    return _valid_rows(parsed, name)


def _columns(head: bytes, source: str) -> tuple[tuple[str, ...], bool]:
    """Column names from a header line if there is one (it fixes the order), else ours."""
    first = head.split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    fields = first.split("|")
    if fields[0] not in SACCT_FIELDS:
        return SACCT_FIELDS, False
    missing = [f for f in REQUIRED_FIELDS if f not in fields]
    if missing:
        raise IngestError(f"{source}: header lacks {', '.join(missing)}")
    if "AdminComment" in fields and fields[-1] != "AdminComment":
        raise IngestError(f"{source}: AdminComment must be the last column (it may hold '|')")
    return tuple(fields), True


def scan_sacct(source: Path | bytes, names: tuple[str, ...], has_header: bool) -> pl.LazyFrame:
    """The lazy query from sacct text to typed attempts (plus `_blank`, `_ok` row flags)."""
    overflow = [f"_overflow{i}" for i in range(OVERFLOW_COLUMNS)]
    raw = pl.scan_csv(
        source,
        has_header=False,
        skip_lines=1 if has_header else 0,
        separator="|",
        quote_char=None,
        schema=dict.fromkeys([*names, *overflow], pl.String),
        truncate_ragged_lines=True,
        missing_columns="insert",
        extra_columns="ignore",
        encoding="utf8-lossy",
    )
    return raw.select(_typed_columns(names, overflow)).with_columns(
        (
            pl.col("job_raw").is_not_null()
            & pl.col("state").is_not_null()
            & pl.col("elapsed_s").is_not_null()
        ).alias("_ok")
    )


def _typed_columns(names: tuple[str, ...], overflow: list[str]) -> list[pl.Expr]:
    comment = (
        pl.concat_str(["AdminComment", *overflow], separator="|", ignore_nulls=True)
        if "AdminComment" in names
        else pl.lit(None, pl.String)
    )
    tres = pl.col("AllocTRES") if "AllocTRES" in names else pl.lit("", pl.String)
    return [
        pl.col("JobIDRaw").cast(pl.Int64, strict=False).alias("job_raw"),
        _state().alias("state"),
        *(_time(name).alias(name.lower()) for name in ("Submit", "Start", "End")),
        pl.col("ElapsedRaw").cast(pl.Int64, strict=False).alias("elapsed_s"),
        pl.col("NNodes").cast(pl.Int32, strict=False).fill_null(0).alias("nnodes"),
        _gpus(tres).alias("gpus"),
        comment.str.extract(_TRIAGE_CAUSE, 1).alias("comment_cause"),
        comment.str.extract(_TRIAGE_N, 1).cast(pl.Int32, strict=False).alias("comment_n"),
        pl.col("JobIDRaw").is_null().alias("_blank"),
    ]


def _time(name: str) -> pl.Expr:
    # "Unknown" (still running) and "None" (never started) become null.
    return pl.col(name).str.to_datetime(TIME_FORMAT, strict=False, time_unit="ms")


def _gpus(tres: pl.Expr) -> pl.Expr:
    untyped = tres.str.extract(_GPU_UNTYPED, 1)
    typed = tres.str.extract(_GPU_TYPED, 1)
    return pl.coalesce(untyped, typed).cast(pl.Int32, strict=False).fill_null(0)


def _state() -> pl.Expr:
    """Slurm's state word ('CANCELLED by 0' -> CANCELLED) mapped to our buckets through
    JobState.parse; words Slurm may add later land in OTHER."""
    mapping = {s.value: causes.state_name(JobState.parse(s.value)) for s in JobState}
    word = pl.col("State").str.splitn(" ", 2).struct.field("field_0")
    return word.replace_strict(mapping, default="OTHER", return_dtype=pl.String).cast(
        pl.Enum(causes.STATES)
    )


def _valid_rows(parsed: pl.DataFrame, source: str) -> Accounting:
    """Drop blank and broken lines; input with no job row at all is not sacct output."""
    if parsed.height == 0:
        raise IngestError(f"{source}: no sacct job rows found")
    good = parsed.filter(pl.col("_ok"))
    if good.height == 0:
        raise IngestError(f"{source}: not sacct output (no line has a job id, state, elapsed)")
    bad = parsed.height - good.height - int(parsed["_blank"].sum())
    return Accounting(good.drop("_ok", "_blank"), source, bad)


def attribute(attempts: pl.DataFrame, attributions: pl.LazyFrame | None = None) -> pl.DataFrame:
    """Add `cause` and `domain` to parsed attempts, joining both sources of attributions;
    success is success, so a COMPLETED row is `completed` whatever a decision says."""
    frame = attempts.with_columns(causes.default_cause_expr("state").alias("cause"))
    decided = _decisions(frame, attributions)
    if decided.height:
        # Few rows carry a decision: scatter them in rather than join 4M rows.
        values = decided["cause"].cast(causes.CAUSE_DTYPE)
        frame = frame.with_columns(frame["cause"].scatter(decided["row"], values))
        frame = frame.with_columns(
            pl.when(pl.col("state") == "COMPLETED")
            .then(pl.lit("completed", causes.CAUSE_DTYPE))
            .otherwise(pl.col("cause"))
            .alias("cause")
        )
    return frame.with_columns(causes.domain_expr("cause").alias("domain"))


def _attempt_number() -> pl.Expr:
    """1, 2, ... along a job's requeue chain, on a frame sorted by job and submit time."""
    return pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("job_raw")


def _decisions(frame: pl.DataFrame, attributions: pl.LazyFrame | None) -> pl.DataFrame:
    """(row, cause) for every row some decision is about. Only the chains of jobs with a
    decision are numbered into attempts, which keeps this cheap on millions of rows."""
    extra = (
        attributions.select(list(ATTRIBUTION_SCHEMA)).cast(ATTRIBUTION_SCHEMA).collect()
        if attributions is not None
        else pl.DataFrame(schema=ATTRIBUTION_SCHEMA)
    )
    commented = frame.filter(pl.col("comment_cause").is_not_null())["job_raw"]
    jobs = pl.concat([commented, extra["job_raw"]]).unique()
    if jobs.len() == 0:
        return pl.DataFrame(schema={"row": pl.UInt32, "cause": pl.String})
    chains = (
        frame.with_row_index("row")
        .filter(pl.col("job_raw").is_in(jobs.implode()))
        .select("row", "job_raw", "submit", "comment_cause", "comment_n")
        .sort("job_raw", "submit", "row", nulls_last=True)
        .with_columns(_attempt_number().alias("attempt"))
    )
    comment_rows = chains.filter(pl.col("comment_cause").is_not_null()).select(
        "job_raw",
        pl.coalesce("comment_n", "attempt").alias("attempt"),
        pl.col("comment_cause").alias("cause"),
        pl.lit(1).alias("priority"),
    )
    journal_rows = extra.with_columns(pl.lit(0).alias("priority"))
    decisions = (
        pl.concat([journal_rows, comment_rows], how="vertical_relaxed")
        .filter(pl.col("cause").is_in(causes.CAUSE_IDS))
        .sort("priority")
        .unique(["job_raw", "attempt"], keep="first")
    )
    return chains.join(decisions, on=["job_raw", "attempt"], how="inner").select("row", "cause")
