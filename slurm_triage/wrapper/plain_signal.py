"""`signal` for the wrapper's modules: the standard module's functions and numbers from its
C core `_signal`, without the Signals, Handlers and Sigmasks enums `signal` builds at import
(~1-2 ms of every rank, issue 20). Type checkers read it as `signal` itself.

    from slurm_triage.wrapper.plain_signal import signal
"""

# typing's flag without importing typing: mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal as signal
else:
    import _signal as signal

__all__ = ["signal"]
