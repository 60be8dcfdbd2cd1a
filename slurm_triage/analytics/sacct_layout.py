"""Which sacct columns a file holds, and where: from its header line, from the `-o` list the
user gives (`report --sacct-columns`), or slurm-triage's own order.

sacct prints its header with the canonical field names whatever case `-o` used. A site's
saved accounting may name a job by JobIDRaw or only by JobID (`13_1` for an array task,
`16+0` for a het job part; step rows `13.batch`, `13.0`, `13.extern` unless sacct had -X),
give run time as ElapsedRaw (seconds) or Elapsed (`[D-]HH:MM:SS`, secs2time_str in Slurm's
src/common/parse_time.c), and carry AdminComment or not, anywhere in the line.

sacct prints text as it is, with no quoting (print_fields.c). A job user's own text
(USER_TEXT_FIELDS: JobName, Comment, WorkDir, SubmitLine, Constraints, ...) may hold `|`
and newlines, and a name holding both can make every line of the file a complete row of
its choosing: the broken record's first and last pieces too, since the `|` in the name
fill them to the header's count. No reading of the lines can tell, so a layout with such
a column is refused with the sacct command that exports the same columns without it.
Admins' and Slurm's text (AdminComment, SystemComment) may hold `|` too: a row with more
fields than the header has its extra pieces glued back into the one such column the
layout has; with both, the split is ambiguous and the row is counted as unparsable.
`sacct -p` ends every line, the header's too, with one `|` more (PARSABLE_ENDING).
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
# Text that admins (scontrol, sacctmgr) or Slurm itself write, which may hold `|`.
FREE_TEXT_FIELDS = frozenset({"AdminComment", "SystemComment"})
# Text a job's user chooses at submission (sbatch -J, --comment, -D, -C, -o, ...), which
# slurmctld checks only for length: it may hold `|` and newlines.
USER_TEXT_FIELDS = frozenset(
    {
        "JobName",
        "Comment",
        "Constraints",
        "Container",
        "Extra",
        "McsLabel",
        "StdErr",
        "StdIn",
        "StdOut",
        "SubmitLine",
        "WCKey",
        "WorkDir",
    }
)


# The empty piece after `sacct -p`'s last `|`, read as a column that must stay empty.
PARSABLE_END = "_parsable_end"


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
    parsable_ending: bool = False  # sacct -p: names ends with PARSABLE_END, always empty

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
    line = first_line.rstrip("\r\n")
    fields = [f.strip() for f in line.split("|")]
    # sacct prints its header with the canonical field names; a job name that happens to
    # be "State" or "JobID" is one field among others that are no field names.
    header_ending = len(fields) > 1 and fields[-1] == ""
    names_found = tuple(fields[:-1] if header_ending else fields)
    has_header = all(name in _CANONICAL.values() for name in names_found)
    if has_header:
        names = names_found
        if columns is not None and _normalise(columns, source) != names:
            raise IngestError(
                f"{source}: --sacct-columns does not match the file's header "
                f"({'|'.join(names)[:120]})"
            )
        ending = header_ending
    elif columns is not None:
        names = _normalise(columns, source)
        # An empty piece after more pieces than the list names: `sacct -p`'s ending (an
        # admin's `|` may add pieces before it). After free text it needs no telling
        # apart: the text glues it on, harmlessly.
        ending = len(fields) > len(names) and fields[-1] == "" and names[-1] not in FREE_TEXT_FIELDS
    else:
        names = SACCT_FIELDS
        ending = False
    return _resolve(names, has_header, source, ending)


def _normalise(columns: str, source: str) -> tuple[str, ...]:
    """`-o jobid,state%20,...` as sacct names the columns (case as sacct prints them); a
    word that is no sacct field is refused (it could be anyone's text)."""
    names = []
    for word in columns.split(","):
        word = word.strip().split("%", 1)[0]
        if not word:
            continue
        if word.lower() not in _CANONICAL:
            raise IngestError(f"{source}: --sacct-columns names {word!r}, which is no sacct field")
        names.append(_CANONICAL[word.lower()])
    return tuple(names)


def _resolve(
    names: tuple[str, ...], has_header: bool, source: str, parsable_ending: bool = False
) -> SacctLayout:
    if len(set(names)) != len(names):
        raise IngestError(f"{source}: a column is named twice in {'|'.join(names)[:120]}")
    missing = [" or ".join(need) for need in NEEDS if not any(n in names for n in need)]
    if missing:
        where = "header" if has_header else "column list"
        raise IngestError(f"{source}: {where} lacks {', '.join(missing)}")
    user_text = [n for n in names if n in USER_TEXT_FIELDS]
    if user_text:
        kept = ",".join(n for n in names if n not in USER_TEXT_FIELDS)
        holds = "holds" if len(user_text) == 1 else "hold"
        raise IngestError(
            f"{source}: {', '.join(user_text)} {holds} job users' own text, which sacct "
            "prints raw: a newline in it can forge whole rows, so no line of this file can "
            f"be trusted; export it again without: sacct -P -o {kept} (your other options "
            "as before)"
        )
    free = [n for n in names if n in FREE_TEXT_FIELDS]
    if parsable_ending:
        names = (*names, PARSABLE_END)
    return SacctLayout(
        names=names,
        has_header=has_header,
        id_field=_first(ID_FIELDS, names),
        elapsed_field=_first(ELAPSED_FIELDS, names),
        nodes_field=_first(NODES_FIELDS, names),
        glue_field=free[0] if len(free) == 1 else None,
        free_text_fields=tuple(free),
        parsable_ending=parsable_ending,
    )


def _first(candidates: tuple[str, ...], names: tuple[str, ...]) -> str:
    return next(c for c in candidates if c in names)


# Every field sacct prints, as its header names it: src/sacct/sacct.c's fields[] at
# slurm-25-11-7-1, and those older releases had (AllocGRES, ReqGRES to 19.05; Reserved,
# ResvCPU, ResvCPURAW to 23.02).
_SACCT_FIELD_TEXT = """
Account AdminComment AllocCPUS AllocGRES AllocNodes AllocTRES AssocID AveCPU AveCPUFreq
AveDiskRead AveDiskWrite AvePages AveRSS AveVMSize BlockID Cluster Comment Constraints
ConsumedEnergy ConsumedEnergyRaw Container CPUTime CPUTimeRAW DBIndex DerivedExitCode
Elapsed ElapsedRaw Eligible End ExitCode Extra FailedNode Flags GID Group JobID JobIDRaw
JobName Layout Licenses MaxDiskRead MaxDiskReadNode MaxDiskReadTask MaxDiskWrite
MaxDiskWriteNode MaxDiskWriteTask MaxPages MaxPagesNode MaxPagesTask MaxRSS MaxRSSNode
MaxRSSTask MaxVMSize MaxVMSizeNode MaxVMSizeTask McsLabel MinCPU MinCPUNode MinCPUTask NCPUS
NNodes NodeList NTasks Partition Planned PlannedCPU PlannedCPURAW Priority QOS QOSRAW QOSREQ
Reason ReqCPUFreq ReqCPUFreqGov ReqCPUFreqMax ReqCPUFreqMin ReqCPUS ReqGRES ReqMem ReqNodes
ReqReservation ReqTRES Reservation ReservationId Reserved Restarts ResvCPU ResvCPURAW
SegmentSize SLUID Start State StdErr StdIn StdOut Submit SubmitLine Suspended SystemComment
SystemCPU Timelimit TimelimitRaw TotalCPU TRESUsageInAve TRESUsageInMax TRESUsageInMaxNode
TRESUsageInMaxTask TRESUsageInMin TRESUsageInMinNode TRESUsageInMinTask TRESUsageInTot
TRESUsageOutAve TRESUsageOutMax TRESUsageOutMaxNode TRESUsageOutMaxTask TRESUsageOutMin
TRESUsageOutMinNode TRESUsageOutMinTask TRESUsageOutTot UID User UserCPU WCKey WCKeyID
WorkDir
"""
_SACCT_FIELD_NAMES = tuple(_SACCT_FIELD_TEXT.split())
_CANONICAL = {name.lower(): name for name in _SACCT_FIELD_NAMES}
