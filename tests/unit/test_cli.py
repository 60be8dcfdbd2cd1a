"""The `slurm-triage` command and the four slurm.conf programs, run as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_triage.cli.main import build_parser

BIN = Path(sys.executable).parent
# Client commands that would reach a real slurmctld/slurmdbd (a dev cluster may be up).
SLURM_COMMANDS = ("scontrol", "sinfo", "sacct", "squeue", "sbatch", "srun", "scancel", "sacctmgr")
# Host paths a test process must never write (journal, evidence, state, logs, config).
HOST_PATHS = ("/var/lib", "/var/spool", "/var/log", "/etc")
# Put first on every child's PYTHONPATH: its sitecustomize installs the audit hook.
GUARD_HOOK_DIR = Path(__file__).parent / "_guard"


@pytest.fixture(autouse=True)
def _no_real_slurm_no_host_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    """Every child process of these tests finds fake Slurm commands first on PATH (they
    exit 99 and say so) and runs under an audit hook that refuses Slurm commands and writes
    under HOST_PATHS; the test fails if either was tried."""
    guard = tmp_path / "_guard"
    (guard / "bin").mkdir(parents=True)
    report = guard / "refused"
    for command in SLURM_COMMANDS:
        fake = guard / "bin" / command
        fake.write_text(
            f'#!/bin/sh\necho "$$ {command} $*" >> "{report}"\n'
            f'echo "{command}: blocked by the unit-test guard" >&2\nexit 99\n'
        )
        fake.chmod(0o755)
    monkeypatch.setenv("GUARD_REPORT", str(report))
    monkeypatch.setenv("GUARD_COMMANDS", ":".join(SLURM_COMMANDS))
    monkeypatch.setenv("GUARD_FAKES", str(guard / "bin"))
    monkeypatch.setenv("GUARD_PATHS", ":".join(HOST_PATHS))
    monkeypatch.setenv("PATH", f"{guard / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    pythonpath = os.environ.get("PYTHONPATH")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(GUARD_HOOK_DIR), pythonpath]))
    )
    yield
    refused = report.read_text() if report.exists() else ""
    assert not refused, f"a child process tried to reach Slurm or write the host:\n{refused}"


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
    (tmp_path / "evidence").mkdir()
    # A node with no GPUs expected and nothing else required is healthy. Slurm's commands
    # are looked for in an empty directory, the journal and the evidence live in tmp_path,
    # and the kernel log is an empty file: this host's /dev/kmsg is not the test's to read
    # (what it held once made the Prolog fail here).
    config.write_text(
        f'[logging]\ndestination = "file"\nfile = "{log}"\n'
        f'[paths]\nstate_dir = "{tmp_path}/state"\nevidence_dir = "{tmp_path}/evidence"\n'
        f'[slurm]\nbin_dir = "{tmp_path}/no-slurm"\nattempts = 1\n'
        f'[decision]\njournal = "{tmp_path}/journal.sqlite"\nwait_for_nodes_s = 0\n'
        f'[health]\nexpected_gpus = 0\nkernel_log = "{tmp_path}/kern.log"\n'
    )
    (tmp_path / "kern.log").write_text("")
    result = _run(
        [str(BIN / program)],
        {"SLURM_TRIAGE_CONFIG": str(config), "SLURM_JOB_ID": "42", "SLURMD_NODENAME": "node2"},
    )
    assert result.returncode == 0, result.stderr
    line = json.loads(log.read_text().splitlines()[-1])
    assert line["event"] == "role_done" and line["job_id"] == "42" and line["node"] == "node2"
    assert line["program"] == program


def _simulated_node2(tmp_path: Path, *faults: tuple[str, int], extra: str = "") -> Path:
    """A config for simulated node2 (with `faults` injected) whose Slurm commands are
    looked for in an empty directory, so Slurm is unreachable."""
    from slurm_triage.simulate.estate import NodeEstate, inject

    sim = tmp_path / "sim"
    estate = NodeEstate(sim, "node2").ensure()
    for fault, value in faults:
        inject(estate, fault, value, gpu=3)
    config = tmp_path / "c.toml"
    config.write_text(
        f'[paths]\nstate_dir = "{tmp_path}/state"\n[slurm]\nbin_dir = "{tmp_path}"\n'
        f'attempts = 1\n[health]\nnvml = "simulated"\nsimulate_root = "{sim}"\n'
        f'kernel_log = "{sim}/{{node}}/kern.log"\nsysfs_root = "{sim}/{{node}}/sys"\n{extra}'
    )
    return config


def test_prolog_fails_on_a_node_with_a_lost_gpu(tmp_path: Path) -> None:
    """On a (simulated) node whose GPU fell off the bus the prolog exits 1, even when Slurm
    cannot be reached to drain it, so Slurm itself keeps the job off the node."""
    config = _simulated_node2(tmp_path, ("xid", 79))
    result = _run(
        [str(BIN / "slurm-triage-prolog")],
        {"SLURM_TRIAGE_CONFIG": str(config), "SLURMD_NODENAME": "node2"},
    )
    assert result.returncode == 1
    assert "gpu.lost" in result.stderr and "health_slurm_unreachable" in result.stderr


def test_check_exits_3_when_its_drain_could_not_be_applied(tmp_path: Path) -> None:
    """Issue 17.5: `check` found a lost GPU but could not reach Slurm to drain the node: it
    says so and exits 3 (Slurm unreachable), never 0 (or 1, as for a drained node)."""
    config = _simulated_node2(tmp_path, ("xid", 79), extra="breaker_settle_s = 0\n")
    result = _run(
        [sys.executable, "-m", "slurm_triage", "check", "--node", "node2"],
        {"SLURM_TRIAGE_CONFIG": str(config)},
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "slurm_error (not applied)" in result.stdout
    assert "node action not applied" in result.stderr


def test_check_dry_run_writes_nothing(tmp_path: Path) -> None:
    """Issue 17.6: `check --dry-run` changes nothing, on this host either: no counters or
    last-report file under the state directory (it wrote /var/lib before)."""
    config = _simulated_node2(tmp_path)
    result = _run(
        [sys.executable, "-m", "slurm_triage", "check", "--all", "--dry-run", "--node", "node2"],
        {"SLURM_TRIAGE_CONFIG": str(config)},
    )
    assert "Traceback" not in result.stderr, result.stderr
    state = tmp_path / "state"
    assert not state.exists() or not any(state.rglob("*"))


def test_slurm_conf_program_survives_broken_config(tmp_path: Path) -> None:
    """A broken config must not drain nodes: the prolog logs the error and exits 0."""
    config = tmp_path / "c.toml"
    config.write_text("[slurm]\nbackend = 'nope'\n")
    result = _run([str(BIN / "slurm-triage-prolog")], {"SLURM_TRIAGE_CONFIG": str(config)})
    assert result.returncode == 0
    assert "config_invalid" in result.stderr and "slurm.backend" in result.stderr


@pytest.mark.parametrize(
    "code",
    [
        "import subprocess; subprocess.run(['scontrol', 'ping'], check=True)",
        "import subprocess; subprocess.run(['/usr/bin/sinfo'])",
        "import os; os.execv('/usr/bin/scontrol', ['scontrol', 'ping'])",
        "import os; os.execvp('sinfo', ['sinfo'])",
        "import sqlite3; sqlite3.connect('/var/lib/slurm-triage/guard-probe.sqlite')",
        "open('/var/spool/slurm-triage-guard-probe', 'w')",
        "import os; os.mkdir('/var/lib/slurm-triage-guard-probe')",
    ],
)
def test_the_guard_refuses_slurm_and_host_writes(code: str, tmp_path: Path) -> None:
    """The autouse guard stops a child that starts a Slurm command or writes the host, and
    reports it (the report is cleared here so that only this test knows)."""
    result = _run([sys.executable, "-c", code])
    report = tmp_path / "_guard" / "refused"
    assert result.returncode != 0 and "blocked by the unit-test guard" in result.stderr
    assert report.exists() and report.read_text().strip()
    report.unlink()
    assert not Path("/var/lib/slurm-triage-guard-probe").exists()
    assert not Path("/var/spool/slurm-triage-guard-probe").exists()
