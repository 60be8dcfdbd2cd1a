"""`slurm-triage wrap`'s arguments are read without argparse when they are in the plain
grammar (issue 20: argparse, with re, gettext and locale, was a sixth of every rank's
start), and by argparse otherwise: the short reader must give argparse's namespace for
every argv it accepts, and accept nothing argparse refuses or answers with help."""

from __future__ import annotations

import random

import pytest

from slurm_triage.cli.main import main
from slurm_triage.cli.wrap_cmd import parse_without_argparse
from tests.unit.short_reader_check import agrees

# Accepted by the short reader: each gives argparse's namespace.
PLAIN = [
    [],
    ["--"],
    ["true"],
    ["--", "true"],
    ["--", "python", "train.py", "--lr", "0.1"],
    ["python", "train.py", "x", "--", "--kill-grace", "5"],  # after the command: the command's
    ["--kill-grace", "5", "--", "true"],
    ["--kill-grace=5", "true"],
    ["--kill-grace", "5", "--kill-grace", "7", "--", "true"],  # the last one counts
    ["--hang-timeout", "0", "--tail-bytes", "4096", "--", "x"],
    ["--hang-timeout=1e3", "--tail-bytes=1_048_576", "x"],
    ["--tail-bytes", " 8192 ", "x"],
    ["--tee-dir", "/tmp/tee", "--no-nvml", "--keep-on-xid", "--", "x", "--", "y"],
    ["--tee-dir=", "--", "x"],
    ["--tee-dir", "", "x"],
    ["--tee-dir=a=b", "x"],
    ["--kill-grace=-5", "x"],  # a negative value: _check_args refuses it, as before
    ["--kill-grace", "nan", "x"],
    ["--no-nvml", "--no-nvml", "x"],
    ["", "x"],
    ["x", "--", "--help"],
    ["--", "--help"],
    ["--", "-h"],
    ["--keep-on-xid"],
]
# Left to argparse: help, abbreviations, unknown options, missing or bad values, values
# that begin with '-', flags given a value.
LEFT_TO_ARGPARSE = [
    ["-h"],
    ["--help"],
    ["--kill-grace", "5", "--help", "--", "x"],
    ["--kill", "5", "--", "x"],  # argparse's abbreviation
    ["--kill=5", "x"],
    ["--no", "x"],
    ["--k", "x"],  # ambiguous
    ["--bogus", "x"],
    ["-x", "x"],
    ["--config", "f", "--", "x"],
    ["--kill-grace"],
    ["--kill-grace", "--", "x"],
    ["--kill-grace", "-5", "x"],  # a negative number: argparse's to read
    ["--kill-grace", "abc", "x"],
    ["--kill-grace="],
    ["--tail-bytes", "1.5", "x"],
    ["--tail-bytes=", "x"],
    ["--tee-dir", "-d", "x"],
    ["--no-nvml=1", "x"],
    ["-5", "x"],
    ["-", "x"],
    ["--version"],
    # argparse reads every word before a `--`, the command's too, and may refuse one
    ["python", "train.py", "--k"],
    ["python", "train.py", "--=x"],
    ["python", "--lr", "1"],
    ["x", "--help"],
]


def _agrees(argv: list[str]) -> bool:
    return agrees("wrap", parse_without_argparse, argv)


@pytest.mark.parametrize("argv", PLAIN, ids=repr)
def test_plain_arguments_give_argparse_s_namespace(argv: list[str]) -> None:
    """Each plain argv is read without argparse, into argparse's namespace."""
    assert _agrees(argv)


@pytest.mark.parametrize("argv", LEFT_TO_ARGPARSE, ids=repr)
def test_help_errors_and_abbreviations_are_left_to_argparse(argv: list[str]) -> None:
    """The short reader leaves help, errors and argparse's own liberties to argparse."""
    assert parse_without_argparse(argv) is None


def test_random_argv_agree_with_argparse() -> None:
    """20,000 random argv over wrap's options, their abbreviations and = forms, values good
    and bad, `--`, help and words: every one the short reader accepts is argparse's."""
    words = [
        "--kill-grace", "--kill-grace=3", "--kill-grace=", "--kill", "--hang-timeout",
        "--hang-timeout=0.5", "--tail-bytes", "--tail-bytes=4096", "--tail-bytes=x",
        "--tee-dir", "--tee-dir=/t", "--no-nvml", "--no-nvml=", "--keep-on-xid", "--keep",
        "--", "-h", "--help", "--bogus", "-5", "-1.5", "-", "", "5", "2.5", "inf", "x",
        "true", "a b", "-a b", "--config", "=", "--=x",
    ]  # fmt: skip
    rng = random.Random(20)
    accepted = 0
    for _ in range(20_000):
        accepted += _agrees([rng.choice(words) for _ in range(rng.randint(0, 6))])
    assert accepted > 2_000  # the short reader does take the common forms


def test_wrap_help_and_errors_are_still_argparse_s(capsys: pytest.CaptureFixture[str]) -> None:
    """`wrap --help` prints argparse's help and `wrap --kill-grace` argparse's error."""
    with pytest.raises(SystemExit) as done:
        main(["wrap", "--help"])
    assert done.value.code == 0
    assert "usage: slurm-triage wrap [-h] [--kill-grace SECONDS]" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["wrap", "--kill-grace"])
    assert done.value.code == 2
    assert "argument --kill-grace: expected one argument" in capsys.readouterr().err
