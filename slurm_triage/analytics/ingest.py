"""Read Slurm accounting into one typed polars frame of attempts (one row per job row).

Input: `sacct -P` text with any reasonable column set (sacct_layout: JobIDRaw or JobID,
ElapsedRaw or Elapsed, with or without AdminComment, with or without its header line).
With `-D` every requeue is its own row with the same job id, so a job run (a requeue chain
of one logical job) is the set of rows sharing it. The frame comes back sorted by job_raw,
a job's rows in file order (sacct lists a job's records oldest first), so the n-th row of a
job is its n-th attempt. Step rows (`13.batch`, `13.0`, `13.extern`: sacct without -X)
are recognised by the dot in their id and dropped inside the scan, before any column is
typed, so they cost neither memory nor parsing; they are counted (lines of the input that
the scan did not return).

Parsing: one lazy polars query, collected in one go, or by the streaming engine batch by
batch when a progress bar watches. Only the columns the analysis needs are materialised.
A layout with a job user's text (JobName, ...) is refused before any line is read
(sacct_layout). Admins' text may hold `|`. When the one free-text column is last
(AdminComment in our own order), the schema carries OVERFLOW_COLUMNS spare columns that
catch its pieces (text after a sixth `|` is dropped) and a cut comment is glued back
before its triage object is read. When it sits in the middle, a field count per line is
needed, which the CSV reader cannot give, so each line is read whole and split: about twice
the time of the CSV path, on those layouts only.

A row is unparsable (counted, not read) when it lacks a job id, a state Slurm knows or a
run time, has pieces its layout cannot place, a NodeList that is no hostlist, or is the
last line of an input that does not end with a newline (a file cut off while written).

AdminComment may hold our decision as compact JSON,
`{"triage":{"cause":"gpu_unavailable","nodes":[...],"action":"...","n":1}}` (cause first,
as our writer puts it); attribution_join reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

import polars as pl

from slurm_triage.analytics import causes
from slurm_triage.analytics.sacct_layout import (
    PARSABLE_END,
    SACCT_FIELDS,
    IngestError,
    SacctLayout,
    layout_from,
)
from slurm_triage.analytics.sacct_steps import count_steps, cut_off_row
from slurm_triage.errors import cannot_read
from slurm_triage.slurm.model import JobState

__all__ = ["ATTEMPT_SCHEMA", "SACCT_FIELDS", "Accounting", "IngestError", "read_sacct_file"]

OVERFLOW_COLUMNS = 6
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"

# Untyped `gres/gpu=N` is the job's total when AccountingStorageTRES has gres/gpu; a site
# that only accounts typed GPUs (`gres/gpu:a100=N`) gets the sum of the typed counts.
_GPU_UNTYPED = r"gres/gpu=(\d+)"
_GPU_TYPED = r"gres/gpu:[^=,]+=(\d+)"
# Plain patterns with a literal prefix: the regex engine skips most text with memchr.
# Two forms: the JSON object slurmctld keeps for a job we requeued or held, and the plain
# words sacctmgr keeps for one that had ended (it lowercases and mangles quotes).
_TRIAGE_CAUSE = r'(?:"triage":\{"cause":"|^triage: cause=)([A-Za-z_]+)'
# `n` is looked for anywhere in the comment: scoping it to the triage object costs a
# backtracking scan per row, and n only counts on a row whose triage cause was found.
_TRIAGE_N = r'"n":(\d+)[,}]'
# sacct's Elapsed: secs2time_str in Slurm's src/common/parse_time.c, D-HH:MM:SS or HH:MM:SS.
_ELAPSED = r"^(?:(?P<d>\d+)-)?(?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d)$"
# States whose rows keep their NodeList: the ones a node event can explain (events.py).
NODE_EVENT_STATES = ("REQUEUED", "NODE_FAIL", "FAILED")
# A Slurm hostlist (`gpu[001-004,9],cpu7`), or what sacct prints for no nodes ("None
# assigned"): names and bracketed ranges, brackets balanced and not nested. A row whose
# NodeList is none of these was cut or garbled, and hostlist.contains would refuse it.
_RANGES = r"\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\]"
_HOSTLIST = rf"^(?:[^\[\],]|{_RANGES})+(?:,(?:[^\[\],]|{_RANGES})+)*$"

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
# Columns only some inputs have (a String column costs 16 bytes a row even when empty):
# nodelist when node events will be joined (NodeList of the rows in NODE_EVENT_STATES),
# job_label when job_raw had to be made from JobID text (13_1), restarts when the input
# has Slurm's Restarts (24.11 on: the attempt's absolute number less one).
OPTIONAL_SCHEMA = {"nodelist": pl.String, "job_label": pl.String, "restarts": pl.Int32}

Progress = Callable[[int, int], None]
"""Called as progress(rows_done, rows_expected) after each batch; the total is an estimate."""

BATCH_ROWS = 500_000
_SNIFF_BYTES = 1 << 20


@dataclass(frozen=True)
class Accounting:
    """Parsed attempts (ATTEMPT_SCHEMA, and what OPTIONAL_SCHEMA the input gives), where
    they came from, how many lines were
    skipped as unparsable (reported, so a half-garbled file does not pass silently), how
    many were job steps, and which columns were read as what."""

    attempts: pl.DataFrame
    source: str
    bad_lines: int
    steps: int = 0
    layout: SacctLayout | None = None
    # Where the accounting starts when sacct was asked from a date (-S): the attempts that
    # ended before it are missing (attribution_join numbers attempts with that in mind).
    window_start: datetime | None = None


def read_sacct_file(
    path: Path,
    progress: Progress | None = None,
    columns: str | None = None,
    node_lists: bool = True,
) -> Accounting:
    """Parse a saved sacct file into attempts; IngestError names the file on failure.
    `columns` is the -o list the file was made with, for a file without a header;
    `node_lists` keeps the NodeList of the rows node events can explain (only a report
    with node events needs them)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
        size = path.stat().st_size
    except OSError as exc:
        raise IngestError(cannot_read(path, exc, missing="file", not_a="a sacct file")) from None
    return _read(path, head, size, str(path), progress, columns, node_lists)


def read_sacct_text(
    text: str | bytes, source: str = "sacct", columns: str | None = None, node_lists: bool = True
) -> Accounting:
    """Parse sacct output held in memory (what the Slurm door returned)."""
    data = text.encode() if isinstance(text, str) else text
    return _read(data, data[:_SNIFF_BYTES], len(data), source, None, columns, node_lists)


def _read(
    source: Path | bytes,
    head: bytes,
    size: int,
    name: str,
    progress: Progress | None,
    columns: str | None,
    node_lists: bool,
) -> Accounting:
    layout = layout_from(head.split(b"\n", 1)[0].decode("utf-8", "replace"), columns, name)
    if not node_lists:
        layout = replace(layout, keep_node_lists=False)
    lines = head.count(b"\n")
    expected = int(size * lines / len(head)) if lines and head else 1
    try:
        try:
            parsed = _collect(scan_sacct(source, layout), progress, expected)
        except pl.exceptions.ComputeError as exc:
            if "utf-8" not in str(exc).lower():
                raise
            # Strict UTF-8 is much faster; a stray byte in a comment costs a second pass.
            lossy = scan_sacct(source, layout, encoding="utf8-lossy")
            parsed = _collect(lossy, progress, expected)
    except (pl.exceptions.PolarsError, ValueError) as exc:
        detail = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else "parse error"
        raise IngestError(f"{name}: not sacct output ({detail})") from None
    steps = count_steps(source, head, layout, parsed.height)
    if cut_off_row(source, layout):
        parsed = parsed.with_columns(
            pl.col("_ragged") | (pl.int_range(pl.len()) == pl.len() - 1).alias("_ragged")
        )
    return _valid_rows(parsed, name, layout, steps)


def _collect(frame: pl.LazyFrame, progress: Progress | None, expected: int) -> pl.DataFrame:
    """Collect in one go (fastest), or batch by batch when someone watches a progress bar,
    which ends at 100% whatever the estimate of the total was."""
    if progress is None:
        return frame.collect()
    batches: list[pl.DataFrame] = []
    done = 0
    for batch in frame.collect_batches(chunk_size=BATCH_ROWS, engine="streaming"):
        batches.append(batch)
        done += batch.height
        progress(done, max(expected, done))
    progress(done, done)
    return pl.concat(batches) if batches else frame.clear().collect()


def scan_sacct(source: Path | bytes, layout: SacctLayout, encoding: str = "utf8") -> pl.LazyFrame:
    """The lazy query from sacct text to typed attempts (plus `_` helper columns), with
    step rows filtered out inside the scan."""
    if layout.needs_field_count:
        return _split_lines(source, layout, encoding)
    overflow = [f"_overflow{i}" for i in range(OVERFLOW_COLUMNS)]
    raw = pl.scan_csv(
        source,
        has_header=False,
        skip_lines=1 if layout.has_header else 0,
        separator="|",
        quote_char=None,
        schema=dict.fromkeys([*layout.names, *overflow], pl.String),
        truncate_ragged_lines=True,
        missing_columns="insert",
        extra_columns="ignore",
        encoding=encoding,  # type: ignore[arg-type]
    )
    fields = {name: pl.col(name) for name in layout.names}
    # Extra pieces belong to a last free-text column; without one the line is broken.
    ragged = pl.lit(False) if layout.glue_is_last else pl.col(overflow[0]).is_not_null()
    if layout.parsable_ending:
        ragged = ragged | pl.col(PARSABLE_END).is_not_null()
    extras: list[pl.Expr] = []
    if layout.glue_field == "AdminComment":
        split = pl.col(overflow[0]).is_not_null()
        extras = [
            pl.when(split).then(pl.col("AdminComment")).alias("_comment_head"),
            *(pl.col(name) for name in overflow),
        ]
    step = _is_step(fields[layout.id_field])
    return raw.filter(~step).select(
        *_typed_columns(layout, fields, ragged, pl.col(layout.names[0]).is_null()), *extras
    )


def _split_lines(source: Path | bytes, layout: SacctLayout, encoding: str) -> pl.LazyFrame:
    """Each line read whole and split on `|`; the pieces beyond the header's count are
    glued back into the free-text column in the middle, and the columns after it shift.
    With two free-text columns a line with extra pieces is ambiguous: it is broken."""
    raw = pl.scan_csv(
        source,
        has_header=False,
        skip_lines=1 if layout.has_header else 0,
        separator="\x00",  # never in Slurm's text: C strings end at NUL
        quote_char=None,
        schema={"_line": pl.String},
        encoding=encoding,  # type: ignore[arg-type]
    )
    n = len(layout.names)
    glue = n if layout.glue_at is None else layout.glue_at
    pieces = pl.col("_pieces")
    shift = (pieces.list.len() - n).clip(lower_bound=0) if glue < n else pl.lit(0)
    fields: dict[str, pl.Expr] = {}
    for index, name in enumerate(layout.names):
        if index < glue:
            fields[name] = pieces.list.get(index, null_on_oob=True)
        elif index == glue:
            fields[name] = pieces.list.slice(glue, shift + 1).list.join("|")
        else:
            fields[name] = pieces.list.get(shift + index, null_on_oob=True)
    at = layout.names.index(layout.id_field)
    if at < glue:
        step = pl.col("_line").str.contains(rf"^(?:[^|]*\|){{{at}}}[^|.]*\.")
    else:
        step = pl.col("_line").str.contains(rf"\.[^|]*(?:\|[^|]*){{{n - 1 - at}}}$")
    ragged = pieces.list.len() < n if glue < n else pieces.list.len() != n
    if layout.parsable_ending:
        ragged = ragged | (fields[PARSABLE_END] != "")
    return (
        raw.filter(~step.fill_null(False))
        .with_columns(pl.col("_line").str.split("|").alias("_pieces"))
        .select(*_typed_columns(layout, fields, ragged, pl.col("_line").is_null()))
    )


def _is_step(job_id: pl.Expr) -> pl.Expr:
    """A step row: `13.batch`, `13.0`, `13_1.extern`, `16+0.0` (a job id has no dot)."""
    return job_id.str.contains(".", literal=True).fill_null(False)


def _typed_columns(
    layout: SacctLayout, fields: dict[str, pl.Expr], ragged: pl.Expr, blank: pl.Expr
) -> list[pl.Expr]:
    # Start is not read: for an ended row it is End - elapsed, and queue time is
    # End - Submit - elapsed, which also holds for a job cancelled before it started.
    # State stays categorical here and is mapped once per distinct value after collection.
    null = pl.lit(None, pl.String)
    comment = fields.get("AdminComment", null)
    tres = fields.get("AllocTRES", null)
    gpus = tres.str.extract(_GPU_UNTYPED, 1).cast(pl.Int32, strict=False)
    typed_only = gpus.is_null() & tres.str.contains("gres/gpu:", literal=True)
    state = fields["State"]
    job_raw, label = _job_key(layout, fields[layout.id_field])
    optional = []
    if layout.keep_node_lists and "NodeList" in fields:
        explained = pl.any_horizontal(state.str.starts_with(s) for s in NODE_EVENT_STATES)
        kept = pl.when(explained).then(fields["NodeList"])
        optional.append(_owned(kept).alias("nodelist"))
        ragged = ragged | ~(kept.str.contains(_HOSTLIST) | (kept == "")).fill_null(True)
    if label is not None:
        optional.append(_owned(label).alias("job_label"))
    if "Restarts" in fields:
        optional.append(fields["Restarts"].cast(pl.Int32, strict=False).alias("restarts"))
    return [
        *optional,
        job_raw.alias("job_raw"),
        state.cast(pl.Categorical).alias("_state"),
        _time(fields["Submit"]).alias("submit"),
        _time(fields["End"]).alias("end"),
        _elapsed(layout, fields[layout.elapsed_field]).alias("elapsed_s"),
        fields[layout.nodes_field].cast(pl.Int32, strict=False).fill_null(0).alias("nnodes"),
        gpus.fill_null(0).alias("gpus"),
        _owned(comment.str.extract(_TRIAGE_CAUSE, 1)).alias("comment_cause"),
        comment.str.extract(_TRIAGE_N, 1).cast(pl.Int32, strict=False).alias("comment_n"),
        blank.alias("_blank"),  # an empty line: every field is null
        ragged.alias("_ragged"),
        # Rare rows finished after collection, where only they pay: typed-only GPU counts.
        pl.when(typed_only).then(tres).alias("_typed_tres"),
    ]


def _owned(text: pl.Expr) -> pl.Expr:
    """Text copied into its own buffers. The reader's strings are views into the buffers it
    read the file into, so a few kept strings (a NodeList per failed row) would keep
    nearly every buffer of the file alive: measured on 4M jobs with steps, 1.1 GB of RSS
    against 0.5 GB for the copy."""
    return pl.concat_str([text, pl.lit("")])


def _job_key(layout: SacctLayout, text: pl.Expr) -> tuple[pl.Expr, pl.Expr | None]:
    """The job's key and, where it had to be made up, the JobID text it stands for.

    JobIDRaw is a number. Without it, JobID is a number for plain jobs and `13_1` or
    `16+0` for array tasks and het parts, which are separate runs: those get a negative key
    from a hash of the text (never a real job id, which is positive)."""
    number = text.cast(pl.Int64, strict=False)
    if layout.id_field == "JobIDRaw":
        return number, None
    made = -(text.hash() // 2).cast(pl.Int64) - 1
    named = number.is_null() & text.is_not_null()
    return pl.when(named).then(made).otherwise(number), pl.when(named).then(text)


def _elapsed(layout: SacctLayout, text: pl.Expr) -> pl.Expr:
    if layout.elapsed_field == "ElapsedRaw":
        return text.cast(pl.Int64, strict=False)
    parts = text.str.extract_groups(_ELAPSED)
    value = [parts.struct.field(k).cast(pl.Int64, strict=False) for k in ("d", "h", "m", "s")]
    return value[0].fill_null(0) * 86400 + value[1] * 3600 + value[2] * 60 + value[3]


def _time(text: pl.Expr) -> pl.Expr:
    # "Unknown" (still running) and "None" (never started) become null.
    # No cache: timestamps are nearly all distinct, so caching only adds a hash table.
    return text.str.to_datetime(TIME_FORMAT, strict=False, time_unit="ms", cache=False)


def _states(codes: pl.Series) -> pl.Series:
    """Slurm's state strings mapped to our buckets through JobState.parse, once per distinct
    value ('CANCELLED by 0' -> CANCELLED; states with no bucket of their own land in OTHER);
    null for a word that is no Slurm state (a shifted or garbled row)."""
    distinct = codes.unique().drop_nulls()
    mapping = {}
    for text in distinct.cast(pl.String):
        state = JobState.parse(text)
        mapping[text] = None if state is JobState.UNKNOWN else causes.state_name(state)
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


def _valid_rows(parsed: pl.DataFrame, source: str, layout: SacctLayout, steps: int) -> Accounting:
    """Drop blank and broken lines; input with no job row at all is not sacct output."""
    if parsed.height == 0 and steps == 0:
        raise IngestError(f"{source}: no sacct job rows found")
    states = _states(parsed["_state"])
    ok = (
        parsed["job_raw"].is_not_null()
        & states.is_not_null()
        & parsed["elapsed_s"].is_not_null()
        & ~parsed["_ragged"]
    )
    if "restarts" in parsed.columns:
        ok = ok & parsed["restarts"].is_not_null()
    parsed = parsed.with_columns(states.alias("state"))
    good = parsed if ok.all() else parsed.filter(ok)  # the usual case copies nothing
    if good.height == 0:
        hint = _hint(parsed, layout)
        raise IngestError(
            f"{source}: not sacct output (no line has a job id, state and run time{hint})"
        )
    bad = parsed.height - good.height - int(parsed["_blank"].sum())
    good = _typed_gpus(_rejoin_comments(good))
    # Built column by column (a `select` here costs a pass over every column), then made
    # contiguous once: the parallel reader leaves hundreds of chunks per column.
    names = [*ATTEMPT_SCHEMA, *(n for n in OPTIONAL_SCHEMA if n in good.columns)]
    good = pl.DataFrame({name: good.get_column(name) for name in names}).rechunk()
    if not good["job_raw"].is_sorted():
        # Stable, so a job's rows stay in file order.
        good = good.sort("job_raw", maintain_order=True)
    return Accounting(good, source, bad, max(steps, 0), layout)


def _hint(parsed: pl.DataFrame, layout: SacctLayout) -> str:
    """What to check when no line was read: the header, or a `-p` ending every line had."""
    if layout.has_header:
        return ""
    if not layout.parsable_ending and parsed.height and parsed["_ragged"].all():
        return f"; each line has more fields than the {len(layout.names)} columns named"
    return "; without a header, give --sacct-columns"


def _rejoin_comments(frame: pl.DataFrame) -> pl.DataFrame:
    """Re-read the triage object of rows whose AdminComment held `|`, from all its pieces."""
    if "_comment_head" not in frame.columns:
        return frame
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
