"""`slurm-triage classify`'s arguments are read without argparse when they are in the plain
grammar (issue 20: argparse, with gettext and locale, was a third of classify's own start),
and by argparse otherwise: the short reader must give argparse's namespace for every argv
it accepts, and accept nothing argparse refuses or answers with help."""

from __future__ import annotations

import random

import pytest

from slurm_triage.cli.classify_cmd import parse_without_argparse
from slurm_triage.cli.main import main
from tests.unit.short_reader_check import agrees

PLAIN = [
    [],
    ["--json"],
    ["--state", "FAILED", "--exit-code", "1", "--log", "node1=a.out", "--json"],
    ["--state=CANCELLED by 0", "--signal=SEGV"],
    ["--state", "FAILED", "--state", "TIMEOUT"],  # the last one counts
    ["--log", "a", "--log=b", "--kernel-log", "n1=/var/log/kern.log", "--evidence", "r.json"],
    ["--log=node=path=x"],
    ["--log="],
    ["--end-time", "1700000000", "--tail-bytes", "4M"],
    ["--end-time=2024-05-01T10:00:00", "--tail-bytes=1"],
    ["--exit-code", "0:9"],
    ["--json", "--json"],
    ["--state", ""],
]
LEFT_TO_ARGPARSE = [
    ["-h"],
    ["--help"],
    ["--state", "FAILED", "--help"],
    ["--stat", "FAILED"],  # argparse's abbreviation
    ["--js"],
    ["--log"],
    ["--log", "--json"],
    ["--exit-code", "-9"],  # a negative number: argparse's to read
    ["--json=1"],
    ["--bogus"],
    ["slurm-1.out"],
    ["--", "x"],
    ["--state", "-x"],
    ["--log", "-"],
    ["--config", "f"],
    ["-s", "FAILED"],
]


def _agrees(argv: list[str]) -> bool:
    return agrees("classify", parse_without_argparse, argv)


@pytest.mark.parametrize("argv", PLAIN, ids=repr)
def test_plain_arguments_give_argparse_s_namespace(argv: list[str]) -> None:
    """Each plain argv is read without argparse, into argparse's namespace."""
    assert _agrees(argv)


@pytest.mark.parametrize("argv", LEFT_TO_ARGPARSE, ids=repr)
def test_help_errors_and_abbreviations_are_left_to_argparse(argv: list[str]) -> None:
    """The short reader leaves help, errors and argparse's own liberties to argparse."""
    assert parse_without_argparse(argv) is None


def test_random_argv_agree_with_argparse() -> None:
    """20,000 random argv over classify's options, their abbreviations and = forms, values
    good and bad, help and words: every one the short reader accepts is argparse's."""
    words = [
        "--state", "--state=FAILED", "--state=", "--stat", "--exit-code", "--exit-code=1",
        "--signal", "--signal=9", "--log", "--log=a", "--log=n=p", "--kernel-log",
        "--kernel-log=k", "--evidence", "--evidence=e", "--end-time", "--end-time=1",
        "--tail-bytes", "--tail-bytes=4M", "--json", "--json=", "--js", "--", "-h", "--help",
        "--bogus", "-5", "-1.5", "-", "", "5", "FAILED", "x", "a b", "-a b", "--config", "=",
        "--=x",
    ]  # fmt: skip
    rng = random.Random(20)
    accepted = 0
    for _ in range(20_000):
        accepted += _agrees([rng.choice(words) for _ in range(rng.randint(0, 6))])
    assert accepted > 1_000  # the short reader does take the common forms


def test_classify_help_and_errors_are_still_argparse_s(capsys: pytest.CaptureFixture[str]) -> None:
    """`classify --help` prints argparse's help and `classify --log` argparse's error."""
    with pytest.raises(SystemExit) as done:
        main(["classify", "--help"])
    assert done.value.code == 0
    assert "usage: slurm-triage classify [-h] [--state STATE]" in capsys.readouterr().out
    with pytest.raises(SystemExit) as done:
        main(["classify", "--log"])
    assert done.value.code == 2
    assert "argument --log: expected one argument" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["1e20", "nan", "inf", "-inf", "junk"])
def test_an_end_time_out_of_range_is_one_line(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An --end-time that is no time this host can read is a one-line error (exit 2), not a
    traceback from the clock."""
    assert main(["classify", "--state", "FAILED", f"--end-time={text}"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"slurm-triage: error: bad --end-time {text!r}: expected epoch seconds or ISO 8601"
    )
