"""Errors of the Slurm door: each one a one-line reason with an exit status of 3.

Callers branch on the class, never on message text: `SlurmUnavailable` and `SlurmTimeout`
are the controller's trouble (retry later), the others are definite answers.
"""

from slurm_triage.errors import TriageError


class SlurmError(TriageError):
    """A Slurm operation failed; the message says which and why."""

    exit_code = 3


class SlurmTimeout(SlurmError):
    """The operation did not finish within its deadline (the command was killed)."""


class SlurmUnavailable(SlurmError):
    """slurmctld (or the Slurm commands) could not be reached; worth retrying later."""


class NotYetAccounted(SlurmUnavailable):
    """Accounting holds no record for the change (sacctmgr's "Nothing modified", pyslurm's
    "Nothing was modified"): slurmctld sends a job's records to slurmdbd after the fact, so a
    run that ended or was requeued a moment ago may not be there yet. Retried as the
    controller's trouble is."""


class SlurmCommandError(SlurmError):
    """Slurm answered, but refused or failed the operation."""


class JobNotFound(SlurmCommandError):
    """No such job in slurmctld or accounting."""


class NodeNotFound(SlurmCommandError):
    """No such node in slurm.conf."""


class NotRequeueable(SlurmCommandError):
    """The job cannot be requeued (submitted with --no-requeue, or not a batch job)."""


class InvalidJobState(SlurmCommandError):
    """The job is in a state that does not allow the operation (e.g. already finished)."""


class SlurmOutputError(SlurmError):
    """A Slurm command printed something we could not parse."""


class BackendMismatch(SlurmError):
    """The requested backend cannot drive the running Slurm (e.g. pyslurm version mismatch)."""


class ReservationNotFound(SlurmCommandError):
    """No such reservation (slurm_strerror's "Requested reservation is invalid")."""
