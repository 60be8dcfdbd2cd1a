"""The `slurm-triage` command and the four slurm.conf programs, run as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_triage.cli.main import build_parser

BIN = Path(sys.executable).parent


def _run(
    argv: list[str],
    env_extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)


def _subcommands() -> list[list[str]]:
    parser = build_parser()
    found: list[list[str]] = []

    def walk(p, prefix):  # type: ignore[no-untyped-def]
        for action in p._actions:  # argparse keeps subparsers here
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                for name, child in action.choices.items():
                    found.append([*prefix, name])
                    walk(child, [*prefix, name])

    walk(parser, [])
    return found


def test_top_level_help_lists_commands() -> None:
    """`slurm-triage --help` names each command with a one-line description."""
    result = _run([str(BIN / "slurm-triage"), "--help"])
    assert result.returncode == 0
    for command in ("config", "slurm", "wrap", "devcluster"):
        assert f"    {command}" in result.stdout


@pytest.mark.parametrize("path", _subcommands(), ids=lambda p: " ".join(p))
def test_every_subcommand_has_help(path: list[str]) -> None:
    """Every subcommand answers --help with a usage line and a description."""
    result = _run([sys.executable, "-m", "slurm_triage", *path, "--help"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: slurm-triage " + " ".join(path))
    assert len(result.stdout.splitlines()) >= 3


@pytest.mark.parametrize("argv", [["nonsense"], ["slurm", "job", "abc"], ["config", "check"]])
def test_usage_errors_exit_2(argv: list[str]) -> None:
    """Bad usage exits 2 with argparse's message, no traceback."""
    result = _run([sys.executable, "-m", "slurm_triage", *argv])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "error:" in result.stderr


def test_slurm_unreachable_exit_3(tmp_path: Path) -> None:
    """When Slurm's commands are missing, `slurm nodes` says so in one line, exit 3."""
    result = _run(
        [sys.executable, "-m", "slurm_triage", "slurm", "nodes"],
        {"SLURM_TRIAGE__SLURM__BIN_DIR": str(tmp_path), "SLURM_TRIAGE__SLURM__ATTEMPTS": "1"},
    )
    assert result.returncode == 3
    assert result.stderr.strip().count("\n") == 0 and "command not found" in result.stderr


@pytest.mark.parametrize(
    "program",
    [
        "slurm-triage-prolog",
        "slurm-triage-epilog",
        "slurm-triage-epilog-slurmctld",
        "slurm-triage-healthcheck",
    ],
)
def test_slurm_conf_programs_exit_0_with_a_log_line(program: str, tmp_path: Path) -> None:
    """Each slurm.conf program runs without arguments, exits 0 and logs a JSON line."""
    log = tmp_path / "triage.log"
    config = tmp_path / "c.toml"
    # A node with no GPUs expected and nothing else required is healthy.
    config.write_text(
        f'[logging]\ndestination = "file"\nfile = "{log}"\n'
        f'[paths]\nstate_dir = "{tmp_path}/state"\n'
        "[health]\nexpected_gpus = 0\n"
    )
    result = _run(
        [str(BIN / program)],
        {"SLURM_TRIAGE_CONFIG": str(config), "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node2"},
    )
    assert result.returncode == 0, result.stderr
    line = json.loads(log.read_text().splitlines()[-1])
    assert line["event"] == "role_done" and line["job_id"] == "42" and line["node"] == "node2"
    assert line["program"] == program


def test_prolog_fails_on_a_node_with_a_lost_gpu(tmp_path: Path) -> None:
    """On a (simulated) node whose GPU fell off the bus the prolog exits 1, even when Slurm
    cannot be reached to drain it, so Slurm itself keeps the job off the node."""
    from slurm_triage.simulate.estate import NodeEstate, inject

    sim = tmp_path / "sim"
    inject(NodeEstate(sim, "node2").ensure(), "xid", 79, gpu=3)
    config = tmp_path / "c.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{tmp_path}"\n'
        f'attempts = 1\n[health]\nnvml = "simulated"\nsimulate_root = "{sim}"\n'
        f'kernel_log = "{sim}/{{node}}/kern.log"\nsysfs_root = "{sim}/{{node}}/sys"\n'
    )
    result = _run(
        [str(BIN / "slurm-triage-prolog")],
        {"SLURM_TRIAGE_CONFIG": str(config), "SLURMD_NODENAME": "node2"},
    )
    assert result.returncode == 1
    assert "gpu.lost" in result.stderr and "health_slurm_unreachable" in result.stderr


def test_slurm_conf_program_survives_broken_config(tmp_path: Path) -> None:
    """A broken config must not drain nodes: the prolog logs the error and exits 0."""
    config = tmp_path / "c.toml"
    config.write_text("[slurm]\nbackend = 'nope'\n")
    result = _run([str(BIN / "slurm-triage-prolog")], {"SLURM_TRIAGE_CONFIG": str(config)})
    assert result.returncode == 0
    assert "config_invalid" in result.stderr and "slurm.backend" in result.stderr
