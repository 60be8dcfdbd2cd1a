"""Reading a command's arguments without argparse, for the commands whose start-up is timed
(issue 20: argparse, with gettext and locale, is several milliseconds of every start).

A short reader accepts only the plain grammar (options written in full, `--opt V`,
`--opt=V`, flags) and gives exactly the namespace argparse would; for anything else (help,
an abbreviation, an unknown option, a missing value or one that begins with '-') it gives
None and the caller leaves the argv to argparse, so help and error messages stay argparse's.
"""

from __future__ import annotations

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


class PlainArgs:
    """What argparse's Namespace holds after a command: one attribute per dest, compared by
    value (tests compare it with the Namespace)."""

    def __init__(self, **values: Any) -> None:
        self.__dict__.update(values)

    def __eq__(self, other: object) -> bool:
        return vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]


def read_options(
    argv: list[str],
    *,
    valued: Mapping[str, tuple[str, Callable[[str], Any]]],
    appended: Mapping[str, str] = {},  # noqa: B006  read only
    flags: Mapping[str, tuple[str, Any]] = {},  # noqa: B006  read only
    defaults: Mapping[str, Any],
) -> dict[str, Any] | None:
    """The values of a command whose arguments are all options: `valued` maps an option to
    its dest and type (the last one given counts), `appended` to the dest of a list it adds
    to (action="append"), `flags` to the dest and constant it stores (store_true/const).
    None for any word outside that grammar, `--` included."""
    values = dict(defaults)
    for dest in appended.values():
        values[dest] = list(values[dest])
    at = 0
    while at < len(argv):
        option, equals, value = argv[at].partition("=")
        at += 1
        if option in flags and not equals:
            dest, constant = flags[option]
            values[dest] = constant
            continue
        if option not in valued and option not in appended:
            return None
        if not equals:
            if at == len(argv) or argv[at].startswith("-"):
                return None  # argparse: expected one argument (or a negative number)
            value = argv[at]
            at += 1
        if option in appended:
            values[appended[option]].append(value)
            continue
        dest, read = valued[option]
        try:
            values[dest] = read(value)
        except ValueError:
            return None  # argparse: invalid value
    return values
