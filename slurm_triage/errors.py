"""The error every command turns into one line on stderr and a non-zero exit."""


class TriageError(Exception):
    """An expected failure with a one-line message for the operator (exit status 2)."""

    exit_code = 2
