"""Holding a command's short argument reader (`parse_without_argparse`) to argparse: shared
by test_wrap_args.py and test_classify_args.py."""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
from collections.abc import Callable

from slurm_triage.cli.main import build_parser


@functools.cache
def _parser(command: str) -> argparse.ArgumentParser:
    return build_parser(command)


def argparse_reading(command: str, argv: list[str]) -> object:
    """argparse's namespace for `COMMAND ARGV`, or ('exit', code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            return _parser(command).parse_args([command, *argv])
    except SystemExit as exc:
        return ("exit", exc.code, out.getvalue(), err.getvalue())


def agrees(command: str, reader: Callable[[list[str]], object | None], argv: list[str]) -> bool:
    """Whether the short reader gave argparse's namespace (True) or left it (False); a
    namespace that differs, or one where argparse fails, is an assertion error."""
    mine, theirs = reader(argv), argparse_reading(command, argv)
    if mine is None:
        return False
    assert not isinstance(theirs, tuple), (argv, theirs)
    # repr: a nan read from "--kill-grace nan" is no nan's equal
    assert _fields(mine) == _fields(theirs), argv
    return True


def _fields(namespace: object) -> str:
    return repr(sorted(vars(namespace).items(), key=lambda item: item[0]))
