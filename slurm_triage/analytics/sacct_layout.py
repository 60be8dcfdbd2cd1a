"""Which sacct columns a file holds, and where: from its header line, from the `-o` list the
user gives (`report --sacct-columns`), or slurm-triage's own order.

sacct prints its header with the canonical field names whatever case `-o` used. A site's
saved accounting may name a job by JobIDRaw or only by JobID (`13_1` for an array task,
`16+0` for a het job part; step rows `13.batch`, `13.0`, `13.extern` unless sacct had -X),
give run time as ElapsedRaw (seconds) or Elapsed (`[D-]HH:MM:SS`, secs2time_str in Slurm's
src/common/parse_time.c), and carry AdminComment or not, anywhere in the line.

Free text may hold the `|` separator: AdminComment (ours and admins'), and the job user's
own JobName, Comment, WorkDir, SubmitLine. A row with more fields than the header has its
extra pieces glued back into the one free-text column the layout has; with two or more
such columns the split is ambiguous and the row is counted as unparsable, never guessed
(a job name must not be able to forge another column).
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_triage.errors import TriageError

# slurm-triage's own order (what `report --since` asks sacct for and `synth` writes).
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
# Each need, with the sacct fields that meet it, the preferred first.
ID_FIELDS = ("JobIDRaw", "JobID")
ELAPSED_FIELDS = ("ElapsedRaw", "Elapsed")
NODES_FIELDS = ("NNodes", "AllocNodes")
NEEDS = (ID_FIELDS, ("State",), ("Submit",), ("End",), ELAPSED_FIELDS, NODES_FIELDS)
FREE_TEXT_FIELDS = frozenset(
    {"AdminComment", "JobName", "Comment", "SystemComment", "WorkDir", "SubmitLine", "Extra"}
)
# A first line holding one of these is a header (no data row has a field that says "State").
_HEADER_MARKERS = frozenset({"JobID", "JobIDRaw", "State"})


class IngestError(TriageError):
    """The accounting input is missing, unreadable or not sacct output (exit 2)."""


@dataclass(frozen=True)
class SacctLayout:
    """The physical columns of a sacct file and the ones the analysis reads from it."""

    names: tuple[str, ...]
    has_header: bool
    id_field: str
    elapsed_field: str
    nodes_field: str
    glue_field: str | None  # the one free-text column extra `|` pieces belong to
    free_text_fields: tuple[str, ...] = ()
    keep_node_lists: bool = True  # read NodeList where node events could use it

    @property
    def glue_at(self) -> int | None:
        return None if self.glue_field is None else self.names.index(self.glue_field)

    @property
    def glue_is_last(self) -> bool:
        return self.glue_field is not None and self.names[-1] == self.glue_field

    @property
    def needs_field_count(self) -> bool:
        """Whether a row's pieces can only be placed by counting them: free text that is
        not the last column, or more than one free-text column."""
        return bool(self.free_text_fields) and not self.glue_is_last

    def has(self, field: str) -> bool:
        return field in self.names

    def describe(self) -> str:
        """One line for the report: what was read as what."""
        parts = [f"job id from {self.id_field}", f"run time from {self.elapsed_field}"]
        if self.id_field == "JobID":
            parts.append("array tasks and het parts keyed by their JobID")
        parts.append("AdminComment read" if self.has("AdminComment") else "no AdminComment")
        if not self.has("NodeList"):
            parts.append("no NodeList (node events cannot be joined)")
        if not self.has("AllocTRES"):
            parts.append("no AllocTRES (GPU counts unknown: every job counts as 0 GPUs)")
        return ", ".join(parts)


def layout_from(first_line: str, columns: str | None, source: str) -> SacctLayout:
    """The layout of a file whose first line is `first_line`: its header when it has one,
    else `columns` (the -o list given to sacct), else slurm-triage's own order."""
    fields = [f.strip() for f in first_line.rstrip("\r\n").split("|")]
    has_header = bool(_HEADER_MARKERS & set(fields))
    if has_header:
        names = tuple(fields)
        if columns is not None and _normalise(columns) != names:
            raise IngestError(
                f"{source}: --sacct-columns does not match the file's header "
                f"({'|'.join(names)[:120]})"
            )
    elif columns is not None:
        names = _normalise(columns)
    else:
        names = SACCT_FIELDS
    return _resolve(names, has_header, source)


def _normalise(columns: str) -> tuple[str, ...]:
    """`-o jobid,state%20,...` as sacct names the columns (case as sacct prints them)."""
    canonical = {name.lower(): name for name in (*SACCT_FIELDS, *_KNOWN_FIELDS)}
    names = []
    for word in columns.split(","):
        word = word.strip().split("%", 1)[0]
        if word:
            names.append(canonical.get(word.lower(), word))
    return tuple(names)


def _resolve(names: tuple[str, ...], has_header: bool, source: str) -> SacctLayout:
    if len(set(names)) != len(names):
        raise IngestError(f"{source}: a column is named twice in {'|'.join(names)[:120]}")
    missing = [" or ".join(need) for need in NEEDS if not any(n in names for n in need)]
    if missing:
        where = "header" if has_header else "column list"
        raise IngestError(f"{source}: {where} lacks {', '.join(missing)}")
    free = [n for n in names if n in FREE_TEXT_FIELDS]
    return SacctLayout(
        names=names,
        has_header=has_header,
        id_field=_first(ID_FIELDS, names),
        elapsed_field=_first(ELAPSED_FIELDS, names),
        nodes_field=_first(NODES_FIELDS, names),
        glue_field=free[0] if len(free) == 1 else None,
        free_text_fields=tuple(free),
    )


def _first(candidates: tuple[str, ...], names: tuple[str, ...]) -> str:
    return next(c for c in candidates if c in names)


# sacct fields a site may add that the analysis does not read (for --sacct-columns case).
_KNOWN_FIELDS = (
    "Account",
    "AllocCPUS",
    "AllocNodes",
    "Cluster",
    "Comment",
    "CPUTime",
    "CPUTimeRaw",
    "DerivedExitCode",
    "Elapsed",
    "Eligible",
    "Extra",
    "Flags",
    "Group",
    "JobName",
    "NCPUS",
    "NTasks",
    "Priority",
    "QOS",
    "Reason",
    "ReqCPUS",
    "ReqMem",
    "ReqNodes",
    "ReqTRES",
    "Reservation",
    "SubmitLine",
    "Suspended",
    "SystemComment",
    "Timelimit",
    "TimelimitRaw",
    "UID",
    "WCKey",
    "WorkDir",
)
