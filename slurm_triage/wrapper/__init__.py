"""The job wrapper (`srun slurm-triage wrap -- CMD`) and the helper trainers import.

Kept import-light on purpose: a training script does `from slurm_triage.wrapper import
record_exceptions`, which must cost nothing but the standard library. The supervisor and
its evidence machinery live in submodules that only the wrapper process imports.
"""

from slurm_triage.wrapper.errorfile import (
    ERROR_FILE_ENV,
    HEARTBEAT_ENV,
    record_exceptions,
    write_error_file,
)

__all__ = ["ERROR_FILE_ENV", "HEARTBEAT_ENV", "record_exceptions", "write_error_file"]
