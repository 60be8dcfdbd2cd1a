"""A config that cannot be reached, holds NaN, nests past the stack or fails validation: a
one-line ConfigError (exit 2 from the CLI; `config_invalid` and exit 0 from the slurm.conf
programs), never built-in defaults in silence, a traceback, or a parsed copy of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import slurm_triage.config as config_module
from slurm_triage.cli.main import main
from slurm_triage.config import (
    Config,
    ConfigError,
    check_settings,
    config_from_mapping,
    load_config,
)
from slurm_triage.config_cache import CacheOutcome, cache_path, read_config_file, refresh_cache
from slurm_triage.prolog_epilog import entry
from tests.as_user import run_as
from tests.unit.test_cli import (  # the guard: no real Slurm, no host writes
    BIN,
    _no_real_slurm_no_host_writes,  # noqa: F401
    _run,
)

NOBODY = 65534
DEEP = "[slurm]\nbin_dir = " + "[" * 5000 + "]" * 5000 + "\n"


@pytest.fixture
def default_at(monkeypatch: pytest.MonkeyPatch) -> object:
    """Point the default config path somewhere (no $SLURM_TRIAGE_CONFIG: load_config(env={}))."""

    def point(path: Path) -> None:
        monkeypatch.setattr(config_module, "DEFAULT_CONFIG_PATH", str(path))

    return point


# -- the default file: absent means defaults, unreachable is an error ----------------------


def test_no_default_file_nor_its_directory_means_defaults(tmp_path: Path, default_at) -> None:  # type: ignore[no-untyped-def]
    """Not installed at all (/etc/slurm-triage missing too): built-in defaults."""
    default_at(tmp_path / "slurm-triage" / "config.toml")
    assert load_config(env={}) == Config()


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_link_to_nothing_is_an_error_not_defaults(
    where: str,
    tmp_path: Path,
    default_at,  # type: ignore[no-untyped-def]
) -> None:
    """The admin's config is a link whose target is gone (the file's, or its directory's):
    a one-line error naming the link, never the defaults in its place."""
    etc = tmp_path / "etc"
    etc.mkdir()
    if where == "file":
        (etc / "config.toml").symlink_to(tmp_path / "gone.toml")
        default_at(etc / "config.toml")
        link = etc / "config.toml"
    else:
        (etc / "slurm-triage").symlink_to(tmp_path / "gone")
        default_at(etc / "slurm-triage" / "config.toml")
        link = etc / "slurm-triage"
    with pytest.raises(ConfigError) as caught:
        load_config(env={})
    message = str(caught.value)
    assert f"{link} is a symbolic link to nothing" in message and "\n" not in message


def test_a_file_where_the_directory_should_be_is_an_error(tmp_path: Path, default_at) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "slurm-triage").write_text("")
    default_at(tmp_path / "slurm-triage" / "config.toml")
    with pytest.raises(ConfigError, match="Not a directory"):
        load_config(env={})


def test_an_unsearchable_config_directory_is_an_error(tmp_path: Path, default_at) -> None:  # type: ignore[no-untyped-def]
    """/etc/slurm-triage that this user cannot search (EACCES): an error, not defaults.
    Checked in a child that became nobody (root searches any directory)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    etc = tmp_path / "slurm-triage"
    etc.mkdir()
    (etc / "config.toml").write_text("[slurm]\nattempts = 2\n")
    etc.chmod(0o700)
    tmp_path.chmod(0o755)
    default_at(etc / "config.toml")

    def load() -> str:
        load_config(env={})
        return "defaults"

    said = run_as(NOBODY, load)
    assert said == f"ConfigError: {etc / 'config.toml'}: permission denied"


def _logged(err: str) -> list[dict[str, str]]:
    return [json.loads(line) for line in err.splitlines()]


def test_the_epilog_with_an_unreachable_default_config_logs_and_exits_0(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    default_at,  # type: ignore[no-untyped-def]
) -> None:
    """docs/operations.md: a bad config makes the Prolog/Epilog log `config_invalid` and
    exit 0 (no drain); a dangling default link is a bad config, not a healthy default."""
    (tmp_path / "config.toml").symlink_to(tmp_path / "gone.toml")
    default_at(tmp_path / "config.toml")
    monkeypatch.delenv("SLURM_TRIAGE_CONFIG")
    assert entry.epilog_main() == 0
    (line,) = _logged(capsys.readouterr().err)
    assert line["event"] == "config_invalid" and "symbolic link to nothing" in line["error"]


# -- NaN and infinity ----------------------------------------------------------------------


@pytest.mark.parametrize("text", ["nan", "+nan", "inf", "-inf", "1" + "0" * 400])
def test_a_non_finite_number_in_the_file_is_refused(text: str, tmp_path: Path) -> None:
    """NaN passes every range check (each comparison is false) and would switch the check
    off: refused in one line naming the key, as is infinity."""
    path = tmp_path / "c.toml"
    path.write_text(f"[health]\ncheck_timeout_s = {text}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert message.startswith("health.check_timeout_s = ") and "\n" not in message
    assert "finite" in message or "too large" in message


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-Infinity", "1e999"])
def test_a_non_finite_override_is_refused(text: str) -> None:
    with pytest.raises(
        ConfigError, match=r"^policy\.backoff_base_s = .* expected a finite number$"
    ):
        config_from_mapping({}, {"SLURM_TRIAGE__POLICY__BACKOFF_BASE_S": text})


# -- nested past the stack -----------------------------------------------------------------


def test_a_config_nested_past_the_stack_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(DEEP)
    with pytest.raises(ConfigError, match=r"c\.toml: invalid TOML: nested too deeply$"):
        load_config(path, env={})


def test_config_check_of_a_deeply_nested_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(DEEP)
    assert main(["config", "check", str(path)]) == 2
    assert (
        capsys.readouterr().err == f"slurm-triage: error: {path}: invalid TOML: nested too deeply\n"
    )


def test_the_epilog_survives_a_deeply_nested_config(tmp_path: Path) -> None:
    """As a process: `config_invalid` on stderr and exit 0, not a RecursionError."""
    path = tmp_path / "c.toml"
    path.write_text(DEEP)
    result = _run(
        [str(BIN / "slurm-triage-epilog")],
        {"SLURM_TRIAGE_CONFIG": str(path), "SLURM_JOB_ID": "3", "SLURMD_NODENAME": "node1"},
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    (line,) = [json.loads(x) for x in result.stderr.splitlines()]
    assert line["event"] == "config_invalid" and "nested too deeply" in line["error"]


@pytest.mark.parametrize(
    "failure", [RecursionError(), MemoryError(), UnicodeDecodeError("utf-8", b"", 0, 1, "x")]
)
def test_a_role_survives_any_failure_to_load_its_config(
    failure: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Whatever loading the config raises, the role logs `config_invalid` and exits 0."""

    def load_config() -> None:
        raise failure

    monkeypatch.setattr(config_module, "load_config", load_config)
    assert entry.healthcheck_main() == 0
    (line,) = _logged(capsys.readouterr().err)
    assert line["event"] == "config_invalid"
    assert line["error"].startswith(type(failure).__name__)


# -- no parsed copy of a config that fails validation --------------------------------------


@pytest.fixture
def invalid(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text('[slurm]\nbackend = "x"\n')
    return path


def test_config_cache_refuses_an_invalid_config(
    invalid: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "cache", "--file", str(invalid)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"slurm-triage: error: {invalid}: slurm.backend = 'x' is not valid")
    assert len(err.splitlines()) == 1
    assert not Path(cache_path(invalid)).exists()


def test_config_check_of_an_invalid_file_leaves_no_copy_beside_it(invalid: Path) -> None:
    assert main(["config", "check", str(invalid)]) == 2
    assert not Path(cache_path(invalid)).exists()


def test_reading_an_invalid_file_writes_no_copy_of_it(invalid: Path) -> None:
    """The owner (root's Prolog) reads the file: parsed, refused by load_config, no copy."""
    assert read_config_file(invalid, check_settings) == {"slurm": {"backend": "x"}}
    assert not Path(cache_path(invalid)).exists()
    with pytest.raises(ConfigError):
        load_config(invalid, env={})
    assert not Path(cache_path(invalid)).exists()


def test_a_fresh_copy_of_an_invalid_file_is_not_up_to_date(invalid: Path) -> None:
    """A copy written before copies were checked: `config cache` says the file is invalid,
    not that its copy is up to date."""
    copy = Path(cache_path(invalid))
    copy.write_text(
        json.dumps(
            {"format": 1, "source": invalid.read_text(), "parsed": {"slurm": {"backend": "x"}}}
        )
    )
    copy.chmod(0o644)
    result = refresh_cache(invalid, check_settings)
    assert result.outcome == CacheOutcome.INVALID and "slurm.backend" in result.reason


def test_a_valid_config_still_gets_its_copy(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[slurm]\nattempts = 2\n")
    assert refresh_cache(path, check_settings).outcome == CacheOutcome.WRITTEN
    assert Path(cache_path(path)).exists()
