"""Evidence: typed, frozen facts about how a job ended, and the JSON record that carries them.

Facts live in `facts`, the versioned record format and its strict parser in `record`.
Standard library only: the wrapper and the epilog import this on every job. `store` (not
imported here) reads and writes records on disk without trusting the job that wrote them.
"""

from slurm_triage.evidence.facts import (
    FACT_TYPES,
    CheckStatus,
    Fact,
    HealthCheck,
    JobState,
    KernelEvent,
    KernelEventKind,
    LogHit,
    NvmlCondition,
    NvmlFact,
    ProcessExit,
    RootException,
    SlurmState,
    Source,
    Stall,
    parse_signal,
    signal_name,
)
from slurm_triage.evidence.record import (
    MAX_FACTS,
    MAX_RECORD_BYTES,
    SCHEMA,
    VERSION,
    EvidenceError,
    EvidenceRecord,
    fact_to_dict,
    parse_record,
    record_to_json,
)
from slurm_triage.job_state import parse_job_state

__all__ = [
    "FACT_TYPES",
    "MAX_FACTS",
    "MAX_RECORD_BYTES",
    "SCHEMA",
    "VERSION",
    "CheckStatus",
    "EvidenceError",
    "EvidenceRecord",
    "Fact",
    "HealthCheck",
    "JobState",
    "KernelEvent",
    "KernelEventKind",
    "LogHit",
    "NvmlCondition",
    "NvmlFact",
    "ProcessExit",
    "RootException",
    "SlurmState",
    "Source",
    "Stall",
    "fact_to_dict",
    "parse_job_state",
    "parse_record",
    "parse_signal",
    "record_to_json",
    "signal_name",
]
