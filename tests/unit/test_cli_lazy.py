"""`slurm-triage` imports only the module of the command asked for (issue 20)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from slurm_triage.cli.main import COMMANDS, build_parser, command_asked


def test_lazy_top_level_help_is_the_eager_one() -> None:
    """The stubs' one-line help in COMMANDS is what each module gives add_parser: the
    top-level --help built without importing the modules is the one built with them."""
    assert build_parser("").format_help() == build_parser().format_help()


def test_every_command_is_registered_by_its_module() -> None:
    """Each command of the table is added by the module the table names, and no module adds
    a command the table lacks."""
    eager = build_parser()
    (sub,) = [a for a in eager._actions if isinstance(getattr(a, "choices", None), dict)]
    assert list(sub.choices) == list(COMMANDS)
    for name in COMMANDS:
        lazy = build_parser(name)
        (lazy_sub,) = [a for a in lazy._actions if isinstance(getattr(a, "choices", None), dict)]
        assert lazy_sub.choices[name].format_help() == sub.choices[name].format_help()


def _choices(parser: object) -> list[str]:
    (sub,) = [a for a in parser._actions if isinstance(getattr(a, "choices", None), dict)]  # type: ignore[attr-defined]
    return list(sub.choices)


def test_a_named_command_s_parser_holds_only_its_module_s_commands() -> None:
    """A command named: its module's commands only, no stub of the others (issue 20: 25-odd
    parsers each rank's `wrap` built for nothing). None named, or a word that is no
    command: a stub of every command, for the root's --help and argparse's error."""
    assert _choices(build_parser("wrap")) == ["wrap"]
    assert _choices(build_parser("classify")) == ["classify"]
    assert _choices(build_parser("")) == list(COMMANDS)
    assert _choices(build_parser("nonsense")) == list(COMMANDS)
    done = subprocess.run(
        [sys.executable, "-m", "slurm_triage", "nonsense"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "invalid choice: 'nonsense'" in done.stderr
    assert "wrap" in done.stderr and "classify" in done.stderr


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["wrap", "--", "true"], "wrap"),
        (["--config", "wrap", "classify"], "classify"),
        (["--conf", "x.toml", "mttf"], "mttf"),
        (["--config=x.toml", "twin", "--nodes", "2"], "twin"),
        (["--help"], None),
        (["nonsense"], "nonsense"),
    ],
)
def test_command_asked_skips_options_and_the_config_value(
    argv: list[str], command: str | None
) -> None:
    """The command is the first word that is neither an option nor --config's value."""
    assert command_asked(argv) == command


def test_wrap_imports_no_other_commands_module() -> None:
    """Parsing `wrap -- true` imports wrap's module (and the short readers' shared module)
    and none of the other commands'."""
    code = (
        "import sys\n"
        "from slurm_triage.cli.main import build_parser, command_asked\n"
        "argv = ['wrap', '--', 'true']\n"
        "build_parser(command_asked(argv)).parse_args(argv)\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('slurm_triage.cli.'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == [
        "slurm_triage.cli.main",
        "slurm_triage.cli.plain_args",
        "slurm_triage.cli.wrap_cmd",
    ]


@pytest.mark.parametrize("columns", ["100", "0", "", "wide", "-5", "40"])
def test_help_is_as_wide_as_argparse_makes_it(
    monkeypatch: pytest.MonkeyPatch, columns: str
) -> None:
    """The width every parser's help is wrapped to, found without shutil (issue 20), is the
    one argparse's HelpFormatter finds with shutil.get_terminal_size: $COLUMNS when it is a
    positive number, else the terminal's, else 80; less 2. Sub-commands' parsers too."""
    import argparse
    import shutil

    from slurm_triage.cli.main import build_parser

    monkeypatch.setenv("COLUMNS", columns)
    parser = build_parser("classify")
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    stock = argparse.HelpFormatter("prog")
    for each in (parser, commands.choices["classify"]):
        assert each._get_formatter()._width == stock._width  # type: ignore[attr-defined]
    assert stock._width == shutil.get_terminal_size().columns - 2  # type: ignore[attr-defined]
