"""Read Slurm accounting into one typed polars frame of attempts (one row per sacct row).

Input: what `sacct -a -D -X -n -P --delimiter='|' -o SACCT_FIELDS` prints on Slurm 22.05,
optionally with its header line (sacct without -n), which then also fixes the column order.
With `-D` every requeue is its own row with the same JobIDRaw, so a job run (a requeue
chain of one logical job) is the set of rows sharing JobIDRaw; `attempt` numbers them from
1 in submit order.

Parsing: the file is read in byte chunks (a progress callback after each, bounded memory)
by polars' CSV reader with `|` as separator and quoting off. AdminComment is free text and
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

import io
from collections.abc import Callable, Iterable, Iterator
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
CHUNK_BYTES = 64 * 1024 * 1024
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

Progress = Callable[[int], None]


class IngestError(TriageError):
    """The accounting input is missing, unreadable or not sacct output."""


def read_sacct_file(path: Path, progress: Progress | None = None) -> pl.DataFrame:
    """Parse a saved sacct file into attempts; IngestError names the file on failure."""
    try:
        with path.open("rb") as fh:
            return read_sacct_chunks(_chunks(fh), source=str(path), progress=progress)
    except FileNotFoundError:
        raise IngestError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise IngestError(f"{path}: is a directory, not a sacct file") from None
    except PermissionError:
        raise IngestError(f"{path}: permission denied") from None


def read_sacct_text(text: str | bytes, source: str = "sacct") -> pl.DataFrame:
    """Parse sacct output held in memory (what the Slurm door returned)."""
    data = text.encode() if isinstance(text, str) else text
    return read_sacct_chunks(_chunks(io.BytesIO(data)), source=source)


def read_sacct_chunks(
    chunks: Iterable[bytes], source: str, progress: Progress | None = None
) -> pl.DataFrame:
    """Parse chunks that each end on a line boundary; the first may start with a header."""
    names: tuple[str, ...] | None = None
    frames: list[pl.DataFrame] = []
    done = 0
    for chunk in chunks:
        done += len(chunk)
        if names is None:
            names, chunk = _split_header(chunk, source)
        if chunk.strip():
            frames.append(_parse_chunk(chunk, names, source))
        if progress is not None:
            progress(done)
    attempts = pl.concat(frames) if frames else pl.DataFrame(schema=ATTEMPT_SCHEMA)
    if attempts.height == 0:
        raise IngestError(f"{source}: no sacct job rows found")
    return attempts


def _chunks(fh: io.BufferedIOBase | io.BytesIO) -> Iterator[bytes]:
    """Blocks of about CHUNK_BYTES that end after a newline (the last one may not)."""
    rest = b""
    while block := fh.read(CHUNK_BYTES):
        block = rest + block
        cut = block.rfind(b"\n") + 1
        if cut == 0:
            rest = block
            continue
        rest = block[cut:]
        yield block[:cut]
    if rest:
        yield rest


def _split_header(chunk: bytes, source: str) -> tuple[tuple[str, ...], bytes]:
    """Column names from a header line if there is one (it fixes the order), else ours."""
    first, _, rest = chunk.partition(b"\n")
    fields = first.decode("utf-8", "replace").strip().split("|")
    if fields[0] not in SACCT_FIELDS:
        return SACCT_FIELDS, chunk
    missing = [f for f in REQUIRED_FIELDS if f not in fields]
    if missing:
        raise IngestError(f"{source}: header lacks {', '.join(missing)}")
    if "AdminComment" in fields and fields[-1] != "AdminComment":
        raise IngestError(f"{source}: AdminComment must be the last column (it may hold '|')")
    return tuple(fields), rest


def _parse_chunk(chunk: bytes, names: tuple[str, ...], source: str) -> pl.DataFrame:
    overflow = [f"_overflow{i}" for i in range(OVERFLOW_COLUMNS)]
    try:
        raw = pl.read_csv(
            chunk,
            has_header=False,
            separator="|",
            quote_char=None,
            schema=dict.fromkeys([*names, *overflow], pl.String),
            truncate_ragged_lines=True,
            missing_columns="insert",
            extra_columns="ignore",
            encoding="utf8-lossy",
        )
    except (pl.exceptions.PolarsError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "parse error"
        raise IngestError(f"{source}: not sacct output ({detail})") from None
    raw = raw.filter(pl.col("JobIDRaw").is_not_null())
    typed = raw.select(_typed_columns(raw, names, overflow))
    return _check_rows(typed, source)


def _typed_columns(raw: pl.DataFrame, names: tuple[str, ...], overflow: list[str]) -> list:
    comment = (
        pl.concat_str(["AdminComment", *overflow], separator="|", ignore_nulls=True)
        if "AdminComment" in names
        else pl.lit(None, pl.String)
    )
    tres = pl.col("AllocTRES") if "AllocTRES" in names else pl.lit("", pl.String)
    return [
        pl.col("JobIDRaw").str.strip_chars().cast(pl.Int64, strict=False).alias("job_raw"),
        _state_expr(raw["State"]).alias("state"),
        *(_time(name).alias(name.lower()) for name in ("Submit", "Start", "End")),
        pl.col("ElapsedRaw").cast(pl.Int64, strict=False).alias("elapsed_s"),
        pl.col("NNodes").cast(pl.Int32, strict=False).fill_null(0).alias("nnodes"),
        _gpus(tres).alias("gpus"),
        comment.str.extract(_TRIAGE_CAUSE, 1).alias("comment_cause"),
        comment.str.extract(_TRIAGE_N, 1).cast(pl.Int32, strict=False).alias("comment_n"),
    ]


def _time(name: str) -> pl.Expr:
    # "Unknown" (still running) and "None" (never started) become null.
    return pl.col(name).str.to_datetime(TIME_FORMAT, strict=False, time_unit="ms")


def _gpus(tres: pl.Expr) -> pl.Expr:
    untyped = tres.str.extract(_GPU_UNTYPED, 1).cast(pl.Int32, strict=False)
    typed = (
        tres.str.extract_all(_GPU_TYPED)
        .list.eval(pl.element().str.extract(r"=(\d+)$", 1).cast(pl.Int32))
        .list.sum()
    )
    has_typed_only = untyped.is_null() & tres.str.contains("gres/gpu:", literal=True)
    return pl.when(has_typed_only).then(typed).otherwise(untyped.fill_null(0)).cast(pl.Int32)


def _state_expr(states: pl.Series) -> pl.Expr:
    """Map Slurm's spellings ('CANCELLED by 0', 'CA') to our states with JobState.parse;
    there are few distinct strings, so the Python mapping runs once per distinct value."""
    mapping = {s: causes.state_name(JobState.parse(s)) for s in states.unique().drop_nulls()}
    return (
        pl.col("State")
        .replace_strict(mapping, default=None, return_dtype=pl.String)
        .cast(pl.Enum(causes.STATES))
    )


def _check_rows(typed: pl.DataFrame, source: str) -> pl.DataFrame:
    """Drop rows that are not job rows; a chunk with none at all is not sacct output."""
    good = typed.filter(
        pl.col("job_raw").is_not_null()
        & pl.col("state").is_not_null()
        & pl.col("elapsed_s").is_not_null()
    )
    if good.height == 0 and typed.height > 0:
        raise IngestError(f"{source}: not sacct output (no line has a job id, state, elapsed)")
    return good


def attribute(attempts: pl.DataFrame, attributions: pl.LazyFrame | None = None) -> pl.DataFrame:
    """Add `attempt`, `cause` and `domain` to parsed attempts, joining both sources of
    attributions; success is success, so a COMPLETED row is `completed` whatever it says."""
    frame = attempts.with_row_index("row")
    decided = _decisions(frame, attributions)
    frame = frame.join(decided, on="row", how="left")
    cause = (
        pl.when(pl.col("state") == "COMPLETED")
        .then(pl.lit("completed"))
        .otherwise(pl.coalesce(pl.col("decided_cause"), causes.default_cause_expr("state")))
    )
    return frame.with_columns(
        pl.col("attempt").fill_null(1).cast(pl.Int32),
        cause.cast(pl.Enum(causes.CAUSE_IDS)).alias("cause"),
    ).with_columns(causes.domain_expr("cause").alias("domain")).drop("decided_cause")


def _decisions(frame: pl.DataFrame, attributions: pl.LazyFrame | None) -> pl.DataFrame:
    """Per row: its attempt number (only for chains that carry a decision) and the cause
    decided for it. Only the few jobs with a decision are numbered, which keeps it cheap."""
    from_comments = frame.filter(pl.col("comment_cause").is_not_null())
    extra = (
        attributions.select(list(ATTRIBUTION_SCHEMA)).cast(ATTRIBUTION_SCHEMA).collect()
        if attributions is not None
        else pl.DataFrame(schema=ATTRIBUTION_SCHEMA)
    )
    jobs = pl.concat([from_comments["job_raw"], extra["job_raw"]]).unique()
    chains = (
        frame.filter(pl.col("job_raw").is_in(jobs.implode()))
        .select("row", "job_raw", "submit", "comment_cause", "comment_n")
        .sort("job_raw", "submit", "row", nulls_last=True)
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("job_raw").alias("attempt"))
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
    return chains.join(decisions, on=["job_raw", "attempt"], how="left").select(
        "row", "attempt", pl.col("cause").alias("decided_cause")
    )
