"""The config file's parsed copy (config_cache): used only while its "source" is the file's
text and it has the file's trust (a regular file of the file's owner, writable by no one
else, not too big); written only by the file's owner, atomically, and only when JSON holds
the parse exactly; read by the node agent's turns and written by `config cache`.

The sandbox runs the tests as root, so the files made here are root's, as
/etc/slurm-triage/config.toml is on a node. A copy that says something other than the file
while its "source" matches is how a test tells that the copy was read."""

from __future__ import annotations

import json
import math
import os
import threading
import tomllib
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from slurm_triage import config_cache
from slurm_triage.agent.server import Agent
from slurm_triage.cli.main import main
from slurm_triage.config import ConfigError, config_from_mapping, load_config, read_toml
from slurm_triage.config_cache import (
    CacheOutcome,
    ConfigFileError,
    cache_path,
    read_config_file,
    refresh_cache,
)

NOBODY = 65534
TEXT = '[slurm]\ntimeout_s = 4.0\nattempts = 2\nbin_dir = "/opt/slurm/bin"\n'
# What a planted or doctored copy claims, unlike anything TEXT says.
PLANTED = {"slurm": {"timeout_s": 99.0, "attempts": 9, "bin_dir": "/evil"}}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(TEXT)
    return path


def _copy(config: Path) -> Path:
    return Path(cache_path(config))


def _plant(config: Path, document: Any = None, *, raw: bytes | None = None) -> Path:
    """A copy beside `config` that matches its text but claims PLANTED (or says `raw`)."""
    if document is None:
        document = {"format": 1, "source": config.read_text(), "parsed": PLANTED}
    copy = _copy(config)
    copy.write_bytes(json.dumps(document).encode() if raw is None else raw)
    copy.chmod(0o644)
    return copy


def test_the_copy_lives_beside_the_file_as_a_dot_file() -> None:
    """/etc/slurm-triage/config.toml's copy is /etc/slurm-triage/.config.toml.parsed.json."""
    assert cache_path("/etc/slurm-triage/config.toml") == (
        "/etc/slurm-triage/.config.toml.parsed.json"
    )
    assert cache_path("config.toml") == ".config.toml.parsed.json"


def test_a_parse_writes_the_copy_and_the_next_read_uses_it(config: Path) -> None:
    """The owner's first read parses and writes {format, source, parsed} (mode 0644); the
    next read is the copy's, with ints, floats and strings of the same types as tomllib's."""
    assert refresh_cache(config).outcome == CacheOutcome.WRITTEN
    copy = _copy(config)
    assert json.loads(copy.read_text()) == {
        "format": 1,
        "source": TEXT,
        "parsed": tomllib.loads(TEXT),
    }
    assert copy.stat().st_mode & 0o777 == 0o644
    assert refresh_cache(config).outcome == CacheOutcome.FRESH
    parsed = read_config_file(config)
    assert parsed == tomllib.loads(TEXT)
    assert [type(v) for v in parsed["slurm"].values()] == [float, int, str]


def test_a_copy_that_matches_the_text_is_what_is_read(config: Path) -> None:
    """The copy, not the file, gives the parse while its source is the file's text (the
    proof that the copy is read at all: it claims something else here)."""
    _plant(config)
    assert read_config_file(config) == PLANTED
    assert load_config(config, env={}).slurm.bin_dir == "/evil"
    assert refresh_cache(config).outcome == CacheOutcome.FRESH


def test_a_changed_file_of_the_same_size_is_parsed_and_its_copy_rewritten(
    config: Path,
) -> None:
    """Not the size or the time: the text. An edit that keeps the size is seen."""
    _plant(config)
    changed = TEXT.replace("attempts = 2", "attempts = 3")
    assert len(changed) == len(TEXT)
    config.write_text(changed)
    assert read_config_file(config) == tomllib.loads(changed)
    assert json.loads(_copy(config).read_text())["source"] == changed
    assert read_config_file(config)["slurm"]["attempts"] == 3


def test_a_copy_of_another_owner_is_ignored_and_replaced(config: Path) -> None:
    """A copy another uid wrote (a sticky /tmp, a directory it may write) is never read:
    the file is parsed, right, and its owner writes its own copy over it."""
    copy = _plant(config)
    os.chown(copy, NOBODY, NOBODY)
    assert read_config_file(config) == tomllib.loads(TEXT)
    assert copy.stat().st_uid == 0
    assert json.loads(copy.read_text())["parsed"] == tomllib.loads(TEXT)


def test_the_copy_of_a_file_another_user_owns_is_theirs_to_write(
    config: Path,
) -> None:
    """A user's own config: their copy has their file's trust and is read; this process,
    not the owner, writes none (NOT_OWNER) and reads theirs."""
    os.chown(config, NOBODY, NOBODY)
    copy = _plant(config)
    os.chown(copy, NOBODY, NOBODY)
    assert read_config_file(config) == PLANTED
    copy.unlink()
    result = refresh_cache(config)
    assert result.outcome == CacheOutcome.NOT_OWNER and "uid 65534" in result.reason
    assert not copy.exists()


@pytest.mark.parametrize("mode", [0o664, 0o646, 0o666])
def test_a_copy_others_may_write_is_ignored(config: Path, mode: int) -> None:
    """Writable by group or other: anyone of them could have written it."""
    copy = _plant(config)
    copy.chmod(mode)
    assert read_config_file(config) == tomllib.loads(TEXT)


def test_a_linked_copy_is_not_followed(config: Path, tmp_path: Path) -> None:
    """A link planted as the copy is not followed, even to a good-looking root file."""
    target = _plant(config).rename(tmp_path / "elsewhere.json")
    _copy(config).symlink_to(target)
    assert read_config_file(config) == tomllib.loads(TEXT)
    assert not _copy(config).is_symlink()  # replaced by the owner's own copy
    assert target.exists()


def test_a_fifo_as_the_copy_does_not_hang_the_read(config: Path) -> None:
    """A FIFO no one writes would block an open for reading: it is opened non-blocking,
    found not to be a regular file, and the file parsed."""
    os.mkfifo(_copy(config), 0o644)
    got: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: got.append(read_config_file(config)), daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "the read hangs on the FIFO"
    assert got == [tomllib.loads(TEXT)]


def test_a_copy_over_the_size_cap_is_ignored(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bigger than MAX_CACHE_BYTES: stale, whatever it says; nor is one that big written."""
    monkeypatch.setattr(config_cache, "MAX_CACHE_BYTES", 400)
    document = {"format": 1, "source": TEXT, "parsed": PLANTED, "padding": "x" * 400}
    _plant(config, document)
    assert read_config_file(config) == tomllib.loads(TEXT)
    big = TEXT + f'[logging]\nfile = "{"y" * 400}"\n'
    config.write_text(big)
    _copy(config).unlink()
    result = refresh_cache(config)
    assert result.outcome == CacheOutcome.TOO_BIG
    assert not _copy(config).exists()
    assert read_config_file(config) == tomllib.loads(big)


def _truncated(config: Path) -> bytes:
    whole = json.dumps({"format": 1, "source": config.read_text(), "parsed": PLANTED})
    return whole[: len(whole) - 3].encode()


@pytest.mark.parametrize(
    "case",
    [
        "truncated",
        "garbage",
        "not utf-8",
        "empty",
        "a list",
        "parsed a list",
        "parsed a string",
        "format 2",
        "format true",
        "no source",
        "deep",
    ],
)
def test_a_broken_or_foreign_copy_is_ignored(config: Path, case: str) -> None:
    """Whatever the copy holds that is not {format: 1, source: this text, parsed: a table}
    is stale: the file is parsed (each of these claims PLANTED where it can)."""
    text = config.read_text()
    documents: dict[str, Any] = {
        "a list": [PLANTED],
        "parsed a list": {"format": 1, "source": text, "parsed": [PLANTED]},
        "parsed a string": {"format": 1, "source": text, "parsed": "slurm"},
        "format 2": {"format": 2, "source": text, "parsed": PLANTED},
        "format true": {"format": True, "source": text, "parsed": PLANTED},
        "no source": {"format": 1, "parsed": PLANTED},
    }
    raws = {
        "truncated": _truncated(config),
        "garbage": b"\x00\x01{not json",
        "not utf-8": b'{"format": 1, "source": "\xff\xfe", "parsed": {}}',
        "empty": b"",
        "deep": b"[" * 100_000 + b"]" * 100_000,
    }
    if case in documents:
        _plant(config, documents[case])
    else:
        _plant(config, raw=raws[case])
    assert read_config_file(config) == tomllib.loads(TEXT)


@pytest.mark.parametrize(
    "value", ["1979-05-27T07:32:00Z", "1979-05-27", "07:32:00", "nan", "[1979-05-27]"]
)
def test_a_toml_date_or_nan_writes_no_copy(config: Path, value: str) -> None:
    """JSON has no date or time, and a NaN is not equal to itself read back: no copy, the
    file is parsed each time, and the parse is tomllib's own."""
    text = f"[x]\nwhen = {value}\n"
    config.write_text(text)
    assert refresh_cache(config).outcome == CacheOutcome.NOT_EXACT
    assert not _copy(config).exists()
    parsed = read_config_file(config)
    expected = tomllib.loads(text)
    if value == "nan":
        assert math.isnan(parsed["x"]["when"])
    else:
        assert parsed == expected and type(parsed["x"]["when"]) is type(expected["x"]["when"])


def test_ints_floats_and_bools_keep_their_types_through_the_copy(config: Path) -> None:
    """1, 1.0 and true are equal in Python but not the same setting: each comes back from
    the copy as tomllib gave it, as do inf and -0.0."""
    text = "[x]\na = 1\nb = 1.0\nc = true\nd = [1, 1.0, false]\ne = inf\nf = -0.0\n"
    config.write_text(text)
    assert refresh_cache(config).outcome == CacheOutcome.WRITTEN
    assert refresh_cache(config).outcome == CacheOutcome.FRESH
    parsed = read_config_file(config)["x"]
    assert [type(parsed[k]) for k in "abc"] == [int, float, bool]
    assert [type(v) for v in parsed["d"]] == [int, float, bool]
    assert parsed["e"] == math.inf and math.copysign(1, parsed["f"]) == -1


def test_a_process_that_does_not_own_the_file_writes_no_copy(
    config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's rank (its user's euid) parses root's file and leaves the copy to root."""
    monkeypatch.setattr(os, "geteuid", lambda: 4242)
    assert read_config_file(config) == tomllib.loads(TEXT)
    assert not _copy(config).exists()
    result = refresh_cache(config)
    assert result.outcome == CacheOutcome.NOT_OWNER
    assert "uid 0's" in result.reason and "uid 4242" in result.reason


def test_a_copy_that_cannot_be_written_is_a_result_not_an_error(config: Path) -> None:
    """The write fails (here a directory stands where the copy goes): the parse is
    returned all the same, and refresh_cache says FAILED and why."""
    _copy(config).mkdir()
    assert read_config_file(config) == tomllib.loads(TEXT)
    result = refresh_cache(config)
    assert result.outcome == CacheOutcome.FAILED
    assert result.reason.startswith(str(_copy(config)))


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "no such config file"),
        ("directory", "is a directory, not a config file"),
        ("bad toml", "invalid TOML: "),
        ("not utf-8", "not UTF-8 text"),
    ],
)
def test_a_file_that_cannot_be_read_is_the_same_one_line_error(
    tmp_path: Path, setup: str, message: str
) -> None:
    """read_toml's messages as before, as a ConfigError (read_config_file's own error is a
    TriageError too), and refresh_cache's INVALID with the same line."""
    path = tmp_path / "config.toml"
    if setup == "directory":
        path.mkdir()
    elif setup == "bad toml":
        path.write_text("[slurm\ntimeout_s = \n")
    elif setup == "not utf-8":
        path.write_bytes(b"[slurm]\nbin_dir = '\xff'\n")
    with pytest.raises(ConfigError, match=message) as err:
        read_toml(path)
    assert "\n" not in str(err.value) and str(err.value).startswith(str(path))
    with pytest.raises(ConfigFileError, match=message):
        read_config_file(path)
    result = refresh_cache(path)
    assert result.outcome == CacheOutcome.INVALID and message in result.reason


# -- the node agent ------------------------------------------------------------------------


def _agent(tmp_path: Path) -> tuple[Agent, Path]:
    path = tmp_path / "agent.toml"
    path.write_text(f'[agent]\nsocket = "{tmp_path}/agent.sock"\n')
    agent = Agent(load_config(path, env={}), "node1", lambda *a, **k: 0)
    return agent, path


def test_the_agents_turn_writes_the_copy_again_after_the_file_changed(tmp_path: Path) -> None:
    """The agent loaded its config at start; an admin edits the file; the next turn
    writes the copy of the new text (logged), and a turn with nothing changed writes and
    logs nothing."""
    agent, path = _agent(tmp_path)
    changed = path.read_text() + "# edited\n[slurm]\nattempts = 5\n"
    path.write_text(changed)
    with capture_logs() as logs:
        agent.refresh_turn()
        agent.refresh_turn()
    events = [e for e in logs if e["event"] == "agent_config_cache"]
    assert [(e["outcome"], e["reason"]) for e in events] == [
        (CacheOutcome.WRITTEN, cache_path(path))
    ]
    document = json.loads(_copy(path).read_text())
    assert document["source"] == changed and document["parsed"]["slurm"]["attempts"] == 5


def test_the_agent_logs_a_copy_it_cannot_write_once_per_reason(tmp_path: Path) -> None:
    """A read-only /etc would fail every turn: one warning, again only when the reason
    changes (here: written at last), so the log says it without a line a turn."""
    agent, path = _agent(tmp_path)
    _copy(path).unlink()
    _copy(path).mkdir()
    with capture_logs() as logs:
        agent.refresh_turn()
        agent.refresh_turn()
        _copy(path).rmdir()
        agent.refresh_turn()
    events = [(e["log_level"], e["outcome"]) for e in logs if e["event"] == "agent_config_cache"]
    assert events == [("warning", CacheOutcome.FAILED), ("info", CacheOutcome.WRITTEN)]


def test_the_agent_writes_no_copy_of_a_file_whose_settings_are_invalid(tmp_path: Path) -> None:
    """An admin's edit that parses as TOML but names an unknown key: the agent's turn
    writes no parsed copy of it (the ranks would read it as ready) and warns once."""
    agent, path = _agent(tmp_path)
    path.write_text(path.read_text() + "[slurm]\nattemptz = 5\n")
    with capture_logs() as logs:
        agent.refresh_turn()
        agent.refresh_turn()
    events = [(e["log_level"], e["outcome"]) for e in logs if e["event"] == "agent_config_cache"]
    assert events == [("warning", CacheOutcome.INVALID)]
    assert "attemptz" not in (_copy(path).read_text() if _copy(path).exists() else "")


@pytest.mark.parametrize("source", ["<defaults>", "<mapping>"])
def test_an_agent_whose_config_came_from_no_file_has_no_copy_to_keep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """Built-in defaults (or a mapping): no file, no copy; the turn reads nothing, not
    even a file of that name in the working directory, and logs nothing."""
    monkeypatch.chdir(tmp_path)
    Path(source).write_text(TEXT)
    agent = Agent(config_from_mapping({}, {}, source=source), "node1", lambda *a, **k: 0)
    with capture_logs() as logs:
        agent.keep_config_cache()
    assert logs == [] and not _copy(Path(source)).exists()


# -- slurm-triage config cache -------------------------------------------------------------


def test_config_cache_writes_the_copy_and_says_where(
    config: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """For an image whose /etc is read-only at run time: written, exit 0; again: up to
    date, exit 0; the copy is then what every program reads."""
    assert main(["config", "cache", "--file", str(config)]) == 0
    assert capsys.readouterr().out == f"{config}: parsed copy written: {_copy(config)}\n"
    assert main(["--config", str(config), "config", "cache"]) == 0
    assert capsys.readouterr().out == f"{config}: parsed copy up to date: {_copy(config)}\n"
    assert json.loads(_copy(config).read_text())["source"] == TEXT


def test_config_cache_takes_the_file_from_the_environment(
    config: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --file or --config: $SLURM_TRIAGE_CONFIG's file, as every program reads."""
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(config))
    assert main(["config", "cache"]) == 0
    assert _copy(config).exists()


@pytest.mark.parametrize("problem", ["bad toml", "missing", "not the owner"])
def test_config_cache_fails_with_one_line_and_exit_2(
    config: Path,
    problem: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file that cannot be parsed, or a copy this user may not write: one line on
    stderr naming the file, exit 2, and no copy."""
    if problem == "bad toml":
        config.write_text("[slurm\n")
    elif problem == "missing":
        config.unlink()
    else:
        monkeypatch.setattr(os, "geteuid", lambda: 4242)
    assert main(["config", "cache", "--file", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"slurm-triage: error: {config}") and err.count("\n") == 1
    assert not _copy(config).exists()
