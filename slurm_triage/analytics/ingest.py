"""Read Slurm accounting into one typed polars frame of attempts (one row per sacct row).

Input: what `sacct -a -D -X -n -P --delimiter='|' -o SACCT_FIELDS` prints on Slurm 22.05,
optionally with its header line (sacct without -n), which then also fixes the column order.
With `-D` every requeue is its own row with the same JobIDRaw, so a job run (a requeue
chain of one logical job) is the set of rows sharing JobIDRaw. The frame comes back sorted
by job_raw, a job's rows in file order (sacct lists a job's records oldest first), so the
n-th row of a job is its n-th attempt.

Parsing: one lazy polars query (scan_csv with `|` as separator and quoting off, then typed
columns), collected in one go, or by the streaming engine batch by batch when a progress
bar watches. Only the columns the analysis needs are materialised. AdminComment
is free text and may hold `|`; it is the last column, so the schema carries
OVERFLOW_COLUMNS spare columns that catch the pieces (text after a sixth `|` is dropped),
and a comment that was cut is glued back before its triage object is read. The other
columns are Slurm's own and never contain `|`.

Attribution: a row's AdminComment may hold our decision as compact JSON,
`{"triage":{"cause":"gpu_unavailable","nodes":[...],"action":"...","n":1}}` (cause first,
as our writer puts it); `n` is the attempt the decision is about (a comment set after a
requeue lands on the next row), and without `n` the comment is about its own row. A second
source of attributions (the journal) joins the same way: a frame with columns job_raw,
attempt, cause; it wins over AdminComment.
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
_GPU_UNTYPED = r"gres/gpu=(\d+)"
_GPU_TYPED = r"gres/gpu:[^=,]+=(\d+)"
# Plain patterns with a literal prefix: the regex engine skips most text with memchr.
_TRIAGE_CAUSE = r'"triage":\{"cause":"([A-Za-z_]+)"'
# `n` is looked for anywhere in the comment: scoping it to the triage object costs a
# backtracking scan per row, and n only counts on a row whose triage cause was found.
_TRIAGE_N = r'"n":(\d+)[,}]'

ATTEMPT_SCHEMA = {
    "job_raw": pl.Int64,
    "state": pl.Enum(causes.STATES),
    "submit": pl.Datetime("ms"),
    "end": pl.Datetime("ms"),
    "elapsed_s": pl.Int64,
    "nnodes": pl.Int32,
    "gpus": pl.Int32,
    "comment_cause": pl.String,
    "comment_n": pl.Int32,
}
ATTRIBUTION_SCHEMA: dict[str, pl.DataType] = {
    "job_raw": pl.Int64(),
    "attempt": pl.Int32(),
    "cause": pl.String(),
}

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
    try:
        try:
            parsed = _collect(scan_sacct(source, names, has_header), progress, expected)
        except pl.exceptions.ComputeError as exc:
            if "utf-8" not in str(exc).lower():
                raise
            # Strict UTF-8 is much faster; a stray byte in a comment costs a second pass.
            lossy = scan_sacct(source, names, has_header, encoding="utf8-lossy")
            parsed = _collect(lossy, progress, expected)
    except (pl.exceptions.PolarsError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "parse error"
        raise IngestError(f"{name}: not sacct output ({detail})") from None
    return _valid_rows(parsed, name)


def _collect(frame: pl.LazyFrame, progress: Progress | None, expected: int) -> pl.DataFrame:
    """Collect in one go (fastest), or batch by batch when someone watches a progress bar."""
    if progress is None:
        return frame.collect()
    batches: list[pl.DataFrame] = []
    done = 0
    for batch in frame.collect_batches(chunk_size=BATCH_ROWS, engine="streaming"):
        batches.append(batch)
        done += batch.height
        progress(done, max(expected, done))
    return pl.concat(batches) if batches else frame.clear().collect()


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


def scan_sacct(
    source: Path | bytes, names: tuple[str, ...], has_header: bool, encoding: str = "utf8"
) -> pl.LazyFrame:
    """The lazy query from sacct text to typed attempts (plus `_` helper columns)."""
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
        encoding=encoding,  # type: ignore[arg-type]
    )
    return raw.select(_typed_columns(names, overflow)).with_columns(
        (
            pl.col("job_raw").is_not_null()
            & pl.col("_state").is_not_null()
            & pl.col("elapsed_s").is_not_null()
        ).alias("_ok")
    )


def _typed_columns(names: tuple[str, ...], overflow: list[str]) -> list[pl.Expr]:
    # Start is not read: for an ended row it is End - ElapsedRaw, and queue time is
    # End - Submit - ElapsedRaw, which also holds for a job cancelled before it started.
    # State stays categorical here and is mapped once per distinct value after collection.
    has_comment = "AdminComment" in names
    comment = pl.col("AdminComment") if has_comment else pl.lit(None, pl.String)
    tres = pl.col("AllocTRES") if "AllocTRES" in names else pl.lit(None, pl.String)
    gpus = tres.str.extract(_GPU_UNTYPED, 1).cast(pl.Int32, strict=False)
    typed_only = gpus.is_null() & tres.str.contains("gres/gpu:", literal=True)
    split = pl.col(overflow[0]).is_not_null()
    return [
        pl.col("JobIDRaw").cast(pl.Int64, strict=False).alias("job_raw"),
        pl.col("State").cast(pl.Categorical).alias("_state"),
        _time("Submit").alias("submit"),
        _time("End").alias("end"),
        pl.col("ElapsedRaw").cast(pl.Int64, strict=False).alias("elapsed_s"),
        pl.col("NNodes").cast(pl.Int32, strict=False).fill_null(0).alias("nnodes"),
        gpus.fill_null(0).alias("gpus"),
        comment.str.extract(_TRIAGE_CAUSE, 1).alias("comment_cause"),
        comment.str.extract(_TRIAGE_N, 1).cast(pl.Int32, strict=False).alias("comment_n"),
        pl.col(names[0]).is_null().alias("_blank"),  # an empty line: every field is null
        # Rare rows finished after collection, where only they pay: typed-only GPU counts
        # and comments cut by `|` (re-read whole from their pieces).
        pl.when(typed_only).then(tres).alias("_typed_tres"),
        pl.when(split).then(comment).alias("_comment_head"),
        *(pl.col(name) for name in overflow),
    ]


def _time(name: str) -> pl.Expr:
    # "Unknown" (still running) and "None" (never started) become null.
    # No cache: timestamps are nearly all distinct, so caching only adds a hash table.
    return pl.col(name).str.to_datetime(TIME_FORMAT, strict=False, time_unit="ms", cache=False)


def _states(codes: pl.Series) -> pl.Series:
    """Slurm's state strings mapped to our buckets through JobState.parse, once per distinct
    value ('CANCELLED by 0' -> CANCELLED; words Slurm may add later land in OTHER)."""
    distinct = codes.unique().drop_nulls()
    mapping = {text: causes.state_name(JobState.parse(text)) for text in distinct.cast(pl.String)}
    return codes.replace_strict(mapping, default=None, return_dtype=causes.STATE_DTYPE)


def _typed_gpus(frame: pl.DataFrame) -> pl.DataFrame:
    """GPU counts of rows whose AllocTRES has only typed entries (gres/gpu:a100=4,...)."""
    rows = frame.with_row_index("_row").filter(pl.col("_typed_tres").is_not_null())
    if rows.height == 0:
        return frame
    counts = rows.select(
        pl.col("_typed_tres")
        .str.extract_all(_GPU_TYPED)
        .list.eval(pl.element().str.extract(r"=(\d+)$", 1).cast(pl.Int32))
        .list.sum()
        .cast(pl.Int32)
    ).to_series()
    return frame.with_columns(frame["gpus"].scatter(rows["_row"], counts))


def _valid_rows(parsed: pl.DataFrame, source: str) -> Accounting:
    """Drop blank and broken lines; input with no job row at all is not sacct output."""
    if parsed.height == 0:
        raise IngestError(f"{source}: no sacct job rows found")
    ok = parsed["_ok"]
    good = parsed if ok.all() else parsed.filter(ok)  # the usual case copies nothing
    if good.height == 0:
        raise IngestError(f"{source}: not sacct output (no line has a job id, state, elapsed)")
    bad = parsed.height - good.height - int(parsed["_blank"].sum())
    good = _typed_gpus(_rejoin_comments(good)).with_columns(_states(good["_state"]).alias("state"))
    # Built column by column (a `select` here costs a pass over every column), then made
    # contiguous once: the parallel reader leaves hundreds of chunks per column.
    good = pl.DataFrame({name: good.get_column(name) for name in ATTEMPT_SCHEMA}).rechunk()
    if not good["job_raw"].is_sorted():
        # Stable, so a job's rows stay in file order.
        good = good.sort("job_raw", maintain_order=True)
    return Accounting(good, source, bad)


def _rejoin_comments(frame: pl.DataFrame) -> pl.DataFrame:
    """Re-read the triage object of rows whose AdminComment held `|`, from all its pieces."""
    overflow = [c for c in frame.columns if c.startswith("_overflow")]
    cut = frame.with_row_index("_row").filter(pl.col("_comment_head").is_not_null())
    if cut.height == 0:
        return frame
    whole = pl.concat_str(["_comment_head", *overflow], separator="|", ignore_nulls=True)
    fixed = cut.select(
        "_row",
        whole.str.extract(_TRIAGE_CAUSE, 1).alias("cause"),
        whole.str.extract(_TRIAGE_N, 1).cast(pl.Int32, strict=False).alias("n"),
    )
    rows = fixed["_row"]
    return frame.with_columns(
        frame["comment_cause"].scatter(rows, fixed["cause"]),
        frame["comment_n"].scatter(rows, fixed["n"]),
    )


def _attempt_number() -> pl.Expr:
    """1, 2, ... along each job's rows, on rows sorted by job_raw: O(n), no window."""
    job = pl.col("job_raw")
    index = pl.int_range(pl.len(), dtype=pl.Int64)
    first = pl.when(job != job.shift(1).fill_null(-1)).then(index).forward_fill()
    return (index - first + 1).cast(pl.Int32).alias("attempt")


def attribute(attempts: pl.DataFrame, attributions: pl.LazyFrame | None = None) -> pl.DataFrame:
    """Add `cause` and `domain` to parsed attempts, joining both sources of attributions;
    success is success, so a COMPLETED row is `completed` whatever a decision says."""
    frame = attempts.with_columns(causes.default_cause_expr("state").alias("cause"))
    decided = _decisions(frame, attributions)
    if decided.height:
        values = decided["cause"].cast(causes.CAUSE_DTYPE)
        frame = frame.with_columns(frame["cause"].scatter(decided["row"], values))
        frame = frame.with_columns(
            pl.when(pl.col("state") == "COMPLETED")
            .then(pl.lit("completed", causes.CAUSE_DTYPE))
            .otherwise(pl.col("cause"))
            .alias("cause")
        )
    return frame.with_columns(causes.domain_expr("cause").alias("domain"))


def _decisions(frame: pl.DataFrame, attributions: pl.LazyFrame | None) -> pl.DataFrame:
    """(row, cause) for every row a decision is about; the journal's win. Attempt numbers
    are only computed for jobs with more than one row (a single row is attempt 1), and only
    decisions about another attempt than their own row's, or the journal's, are joined."""
    job = pl.col("job_raw")
    indexed = frame.with_row_index("row").with_columns(
        ((job == job.shift(1)) | (job == job.shift(-1))).fill_null(False).alias("_multi")
    )
    chains = indexed.filter("_multi").select("row", "job_raw", _attempt_number())
    own, elsewhere = _comment_decisions(indexed, chains)
    keyed = pl.concat([_journal(attributions), elsewhere], how="vertical_relaxed")
    named = keyed["job_raw"].unique().implode()
    singles = indexed.filter(~pl.col("_multi") & job.is_in(named)).select(
        "row", "job_raw", pl.lit(1, pl.Int32).alias("attempt")
    )
    targets = pl.concat([chains.filter(job.is_in(named)), singles])
    joined = targets.join(keyed, on=["job_raw", "attempt"], how="inner")
    return (
        pl.concat([joined.select("row", "cause", "priority"), own], how="vertical_relaxed")
        .filter(pl.col("cause").is_in(causes.CAUSE_IDS))
        .sort("priority")
        .unique("row", keep="first")
        .select("row", "cause")
    )


def _comment_decisions(
    indexed: pl.DataFrame, chains: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """AdminComment decisions: (row, cause) of those about their own row, and
    (job_raw, attempt, cause) of those about another attempt of the same job."""
    comments = (
        indexed.filter(pl.col("comment_cause").is_not_null())
        .join(chains.select("row", "attempt"), on="row", how="left")
        .with_columns(pl.col("attempt").fill_null(1), pl.lit(1).alias("priority"))
    )
    target = pl.coalesce("comment_n", "attempt")
    cause = pl.col("comment_cause").alias("cause")
    own = comments.filter(target == pl.col("attempt")).select("row", cause, "priority")
    elsewhere = comments.filter(target != pl.col("attempt")).select(
        "job_raw", target.alias("attempt"), cause, "priority"
    )
    return own, elsewhere


def _journal(attributions: pl.LazyFrame | None) -> pl.DataFrame:
    """The second source's decisions, typed, with the priority that makes them win."""
    if attributions is None:
        frame = pl.DataFrame(schema=ATTRIBUTION_SCHEMA)
    else:
        schema = pl.Schema(ATTRIBUTION_SCHEMA)
        frame = attributions.select(list(ATTRIBUTION_SCHEMA)).cast(schema).collect()
    return frame.with_columns(pl.lit(0).alias("priority"))
