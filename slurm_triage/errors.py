"""The error every command turns into one line on stderr and a non-zero exit."""


class TriageError(Exception):
    """An expected failure with a one-line message for the operator (exit status 2)."""

    exit_code = 2


def cannot_read(path: object, exc: OSError, *, missing: str, not_a: str) -> str:
    """The one line for a file that could not be opened or read: `PATH: no such MISSING`,
    `PATH: is a directory, not NOT_A`, `PATH: permission denied`, else the system's reason."""
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such {missing}"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: is a directory, not {not_a}"
    if isinstance(exc, PermissionError):
        return f"{path}: permission denied"
    return f"{path}: cannot read: {exc.strerror}"
