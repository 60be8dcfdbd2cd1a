"""The evidence store on disk: reading what a job wrote, and writing what root collected,
without trusting the job.

The epilog runs as root and the decision as SlurmUser; both read files in a directory the
job's user owns. So: every open is relative to a directory fd, with O_NOFOLLOW (a symlink
to /etc/shadow is refused, not followed) and O_NONBLOCK (a FIFO cannot hang us); the file
must be a regular file owned by the job's user, under the size cap, valid against our
schema, and name this job and the node its file name says. Anything else is ignored with
one log line. Root's own records live in `<evidence_dir>/_root/<job>/`, which must be
owned by root, so a user can neither plant nor replace them.

Layout:
    <evidence_dir>/<job>/<node>.<step>[.<task>].json     the wrapper's records (user_records)
    <evidence_dir>/_root/<job>/<node>.json               the epilog's records (root_records)

Modules: `safe_io` (the fd-level checks all share), `user_records`, `root_records`,
`output_tail` (the job's output file), `job_dir` (the Prolog's job directory).
"""

from slurm_triage.evidence.store.job_dir import JOB_DIR_MODE, prepare_job_dir
from slurm_triage.evidence.store.output_tail import OUTPUT_READ_TIMEOUT_S, read_user_tail
from slurm_triage.evidence.store.root_records import (
    EARLIER_STEP,
    EARLIER_SUFFIX,
    ROOT_AREA,
    ROOT_SUFFIXES,
    read_root_records,
    root_record_present,
    write_root_record,
)
from slurm_triage.evidence.store.safe_io import ReadResult, UnsafeEvidence
from slurm_triage.evidence.store.user_records import (
    MAX_RECORDS_PER_JOB,
    RecordBudget,
    read_user_records,
)

__all__ = [
    "EARLIER_STEP",
    "EARLIER_SUFFIX",
    "JOB_DIR_MODE",
    "MAX_RECORDS_PER_JOB",
    "OUTPUT_READ_TIMEOUT_S",
    "ROOT_AREA",
    "ROOT_SUFFIXES",
    "ReadResult",
    "RecordBudget",
    "UnsafeEvidence",
    "prepare_job_dir",
    "read_root_records",
    "read_user_records",
    "read_user_tail",
    "root_record_present",
    "write_root_record",
]
