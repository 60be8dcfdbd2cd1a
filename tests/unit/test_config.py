"""Config: typed frozen sections, one-line errors naming the key and the valid choices."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_triage.config import Config, ConfigError, config_from_mapping, load_config, to_toml


def test_defaults_when_default_file_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no named file and no default file, every value is the built-in default."""
    import slurm_triage.config as config_module

    monkeypatch.setattr(config_module, "DEFAULT_CONFIG_PATH", tmp_path / "missing.toml")
    config = load_config(env={})
    assert config == Config()
    assert config.source == "<defaults>"


def test_the_toml_parser_is_imported_for_a_file_only(tmp_path: Path) -> None:
    """A process on the built-in defaults (no config file) never imports tomllib; one that
    reads a file does, and every key a file sets is still checked against its type."""
    path = tmp_path / "c.toml"
    path.write_text('[health]\nmounts = ["/a", 3]\n')
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from slurm_triage.config import ConfigError, config_from_mapping, load_config\n"
        "config_from_mapping({}, {'SLURM_TRIAGE__SLURM__TIMEOUT_S': '5'})\n"
        "print('tomllib' in sys.modules)\n"
        f"try:\n    load_config(Path({str(path)!r}), env={{}})\n"
        "except ConfigError as exc:\n    print(exc)\n"
        "print('tomllib' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.splitlines() == [
        "False",
        "health.mounts[1] = 3 is not valid; expected a string",
        "True",
    ], done.stderr


def test_file_values_are_typed_and_frozen(tmp_path: Path) -> None:
    """Values from TOML land in frozen dataclasses with their declared types."""
    path = tmp_path / "c.toml"
    path.write_text('[slurm]\ntimeout_s = 3\nbackend = "cli"\n[logging]\nlevel = "debug"\n')
    config = load_config(path, env={})
    assert config.slurm.timeout_s == 3.0 and isinstance(config.slurm.timeout_s, float)
    assert config.slurm.backend == "cli"
    assert config.logging.level == "debug"
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.slurm.timeout_s = 5  # type: ignore[misc]


def test_unknown_key_lists_valid_keys() -> None:
    """An unknown key is an error naming it and every valid key of its section."""
    with pytest.raises(ConfigError) as err:
        config_from_mapping({"slurm": {"timeout": 3}})
    message = str(err.value)
    assert "slurm.timeout" in message and "timeout_s" in message and "backend" in message
    assert "\n" not in message


def test_unknown_section_lists_valid_sections() -> None:
    """An unknown section is an error listing the valid sections."""
    with pytest.raises(ConfigError, match=r"\[slurmm\].*logging, slurm, paths"):
        config_from_mapping({"slurmm": {}})


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({"slurm": {"backend": "rest"}}, r"slurm.backend = 'rest'.*'auto', 'cli', 'pyslurm'"),
        ({"slurm": {"timeout_s": "ten"}}, r"slurm.timeout_s = 'ten'.*a number"),
        ({"slurm": {"timeout_s": 0}}, r"slurm.timeout_s = 0.*>= 0.1"),
        ({"slurm": {"attempts": 2.5}}, r"slurm.attempts.*an integer"),
        ({"slurm": {"attempts": True}}, r"slurm.attempts.*an integer"),
        ({"logging": {"level": "loud"}}, r"logging.level.*'debug'"),
        ({"logging": "x"}, r"\[logging\] must be a table"),
    ],
)
def test_bad_values_name_key_and_choices(data: dict, pattern: str) -> None:
    """A bad value's error names the key, the value and what is accepted, on one line."""
    with pytest.raises(ConfigError, match=pattern) as err:
        config_from_mapping(data)
    assert "\n" not in str(err.value)


def test_env_overrides_beat_the_file(tmp_path: Path) -> None:
    """SLURM_TRIAGE__SECTION__KEY overrides the file, parsed to the key's type."""
    path = tmp_path / "c.toml"
    path.write_text("[slurm]\ntimeout_s = 3\n")
    config = load_config(
        path, env={"SLURM_TRIAGE__SLURM__TIMEOUT_S": "7.5", "SLURM_TRIAGE__SLURM__ATTEMPTS": "1"}
    )
    assert (config.slurm.timeout_s, config.slurm.attempts) == (7.5, 1)


def test_env_list_overrides_read_each_item_as_its_type() -> None:
    """A list override is comma-separated, each item read as the list's declared type: a
    list of uids is integers, a list of ports strings."""
    config = config_from_mapping(
        {},
        {
            "SLURM_TRIAGE__AGENT__ALLOWED_UIDS": "0, 64030",
            "SLURM_TRIAGE__HEALTH__IB_PORTS": "mlx5_0:1,mlx5_1:1",
        },
    )
    assert tuple(config.agent.allowed_uids) == (0, 64030)
    assert tuple(config.health.ib_ports) == ("mlx5_0:1", "mlx5_1:1")


@pytest.mark.parametrize(
    ("var", "value", "pattern"),
    [
        ("SLURM_TRIAGE__AGENT__ALLOWED_UIDS", "0,root", "agent.allowed_uids"),
        ("SLURM_TRIAGE__SLURM__TIMEOUT_S", "soon", "slurm.timeout_s"),
        ("SLURM_TRIAGE__SLURM__NOPE", "1", "unknown key slurm.nope"),
        ("SLURM_TRIAGE__BOGUS__X", "1", "bad override SLURM_TRIAGE__BOGUS__X"),
    ],
)
def test_bad_env_overrides_are_errors(var: str, value: str, pattern: str) -> None:
    """A malformed or unknown override is rejected, never silently ignored."""
    with pytest.raises(ConfigError, match=pattern):
        config_from_mapping({}, {var: value})


def test_explicitly_named_missing_file_is_an_error(tmp_path: Path) -> None:
    """SLURM_TRIAGE_CONFIG naming a missing file fails instead of falling back to defaults."""
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(env={"SLURM_TRIAGE_CONFIG": str(tmp_path / "nope.toml")})


def test_invalid_toml_is_one_line(tmp_path: Path) -> None:
    """A TOML syntax error names the file and stays on one line."""
    path = tmp_path / "bad.toml"
    path.write_text("[slurm\ntimeout_s = \n")
    with pytest.raises(ConfigError, match="invalid TOML") as err:
        load_config(path, env={})
    assert "\n" not in str(err.value)


def test_to_toml_round_trips(tmp_path: Path) -> None:
    """`config show` output loads back to an equal config."""
    config = config_from_mapping(
        {"slurm": {"timeout_s": 4, "bin_dir": 'a"b\\c'}, "logging": {"format": "json"}}
    )
    path = tmp_path / "round.toml"
    path.write_text(to_toml(config))
    assert load_config(path, env={}) == config


def _cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(
        [sys.executable, "-m", "slurm_triage", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_config_check_good_and_bad(tmp_path: Path) -> None:
    """`config check` says ok for a good file; a bad one gives one stderr line and exit 2."""
    good = tmp_path / "good.toml"
    good.write_text('[paths]\nevidence_dir = "/tmp/e"\n')
    result = _cli("config", "check", str(good))
    assert result.returncode == 0 and "ok" in result.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text("[slurm]\nbackend = 'rest'\n")
    result = _cli("config", "check", str(bad))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "slurm.backend" in result.stderr
    assert "Traceback" not in result.stderr


def test_config_check_warns_of_a_deprecated_setting(tmp_path: Path) -> None:
    """health.drain = false is still a valid file (exit 0) with a warning naming policy.act."""
    path = tmp_path / "old.toml"
    path.write_text("[health]\ndrain = false\n")
    result = _cli("config", "check", str(path))
    assert (result.returncode, result.stdout.strip()) == (0, f"{path}: ok")
    assert result.stderr.startswith(f"{path}: warning: health.drain = false is deprecated")
    assert "policy.act" in result.stderr and len(result.stderr.splitlines()) == 1


def test_config_show_with_broken_config_exits_2(tmp_path: Path) -> None:
    """`config show` under a broken SLURM_TRIAGE_CONFIG fails with exit 2, one line."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[paths]\nspool = 1\n")
    result = _cli("config", "show", env_extra={"SLURM_TRIAGE_CONFIG": str(bad)})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "paths.spool" in result.stderr


def test_config_show_prints_effective_values(tmp_path: Path) -> None:
    """`config show` reflects the file and the env overrides."""
    path = tmp_path / "c.toml"
    path.write_text("[slurm]\nattempts = 5\n")
    result = _cli(
        "--config", str(path), "config", "show", env_extra={"SLURM_TRIAGE__SLURM__TIMEOUT_S": "2"}
    )
    assert result.returncode == 0
    assert "attempts = 5" in result.stdout and "timeout_s = 2.0" in result.stdout


EXAMPLE = Path(__file__).resolve().parents[2] / "contrib" / "config.toml.example"


def test_example_config_is_the_generated_one_and_round_trips() -> None:
    """contrib/config.toml.example is `config show --defaults` (regenerate it with that
    command when a key changes), `config check` accepts it, it loads to the defaults, and
    it names every key of every section with a line saying what the key accepts."""
    from slurm_triage.config_example import example_toml

    text = EXAMPLE.read_text()
    assert text == example_toml(), "regenerate: slurm-triage config show --defaults > " + str(
        EXAMPLE
    )
    result = _cli("config", "check", str(EXAMPLE))
    assert (result.returncode, result.stdout.strip()) == (0, f"{EXAMPLE}: ok")
    assert load_config(EXAMPLE, env={}) == Config()
    for section in dataclasses.fields(Config):
        if section.name == "source":
            continue
        assert f"\n[{section.name}]\n" in text
        # The section's own lines: several sections have a key of the same name (socket).
        block = text.split(f"\n[{section.name}]\n", 1)[1].split("\n[", 1)[0]
        for key in dataclasses.fields(getattr(Config(), section.name)):
            (line,) = [x for x in block.splitlines() if x.startswith(f"{key.name} = ")]
            assert "  # " in line, line


def test_example_reads_the_comments_above_each_key() -> None:
    """The text of config.py's comments lands above its key, and a line's own comment after
    what the key accepts, so the example explains each key where the schema does."""
    from slurm_triage.config_example import example_toml

    lines = example_toml().splitlines()
    at = lines.index("timeout_s = 10.0  # a number, 0.1 to 600")
    assert (
        lines[at - 1]
        == "# Deadline for one whole operation, retries included; far below PrologEpilogTimeout."
    )
    assert any(x.startswith("ib_ports = []  # a list of strings; ") for x in lines)
    assert "requeue_causes = []  # a list of cause ids (docs/attribution.md)" in lines


def test_config_show_defaults_ignores_the_file(tmp_path: Path) -> None:
    """`config show --defaults` prints the annotated defaults, whatever the file says."""
    path = tmp_path / "c.toml"
    path.write_text("[slurm]\nattempts = 5\n")
    result = _cli("--config", str(path), "config", "show", "--defaults")
    assert result.returncode == 0 and "\nattempts = 3  # an integer, 1 to 10\n" in result.stdout
