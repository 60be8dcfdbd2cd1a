"""Backend choice: pyslurm only where it matches the running Slurm and loads here (probed
in a child interpreter first, since libslurm ends a process that finds no slurm.conf), else
the command line. The child is the boundary: a stand-in interpreter plays libslurm's fatal
exit, a hang, or a clean answer."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_triage.config import SlurmConfig
from slurm_triage.slurm import (
    BackendMismatch,
    InvalidJobState,
    JobNotFound,
    NodeNotFound,
    NotRequeueable,
    NotYetAccounted,
    SlurmCommandError,
    SlurmOutputError,
    SlurmUnavailable,
    open_door,
    pyslurm_setup,
)
from slurm_triage.slurm.pyslurm_backend import translate
from slurm_triage.slurm.pyslurm_setup import Installed, check_compatible

HAVE_PYSLURM = importlib.util.find_spec("pyslurm") is not None

# What libslurm 25.11 prints before exit(1) when there is no slurm.conf and no DNS SRV record.
LIBSLURM_FATAL = """\
python3: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host
python3: error: fetch_config: DNS SRV lookup failed
python3: error: _establish_config_source: failed to fetch config
python3: fatal: Could not establish a configuration source
"""


@pytest.fixture(autouse=True)
def _fresh_probes() -> Iterator[None]:
    """Each test probes anew: the answers are kept per process."""
    pyslurm_setup.forget_probes()
    yield
    pyslurm_setup.forget_probes()


def _scontrol(tmp_path: Path, version: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f"#!/bin/sh\necho 'slurm {version}'\n")
    script.chmod(0o755)
    return bin_dir


@pytest.fixture
def fake_scontrol(tmp_path: Path) -> Path:
    return _scontrol(tmp_path, "22.05.8")


def _interpreter(tmp_path: Path, body: str) -> tuple[str, Path]:
    """A stand-in for the probe's Python: counts its runs in a file, then runs body."""
    runs = tmp_path / "probe-runs"
    script = tmp_path / "python"
    script.write_text(f'#!/bin/sh\necho run >> "{runs}"\n{body}\n')
    script.chmod(0o755)
    return str(script), runs


def _runs(counter: Path) -> int:
    return len(counter.read_text().splitlines()) if counter.exists() else 0


@pytest.fixture
def pyslurm_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Installed:
    """pyslurm 25.11.2 'installed' in a folder the stand-in interpreter is told about."""
    found = Installed(version="25.11.2", location=str(tmp_path / "site"))
    monkeypatch.setattr(pyslurm_setup, "installed", lambda: found)
    return found


def test_version_match_rules() -> None:
    """Same major.minor is compatible; PyPI's 25.11 against Debian's 22.05 is not."""
    check_compatible("22.5.1", "22.05.8")
    with pytest.raises(BackendMismatch, match=r"pyslurm 25.11.0 is built for Slurm 25.11.*22.05.8"):
        check_compatible("25.11.0", "22.05.8")


@pytest.mark.skipif(HAVE_PYSLURM, reason="this host has pyslurm installed")
def test_auto_falls_back_to_cli_without_pyslurm(fake_scontrol: Path) -> None:
    """With pyslurm absent, auto picks the command-line backend."""
    assert open_door(SlurmConfig(bin_dir=str(fake_scontrol))).name == "cli"


@pytest.mark.skipif(HAVE_PYSLURM, reason="this host has pyslurm installed")
def test_forcing_pyslurm_without_it_is_a_clear_error(fake_scontrol: Path) -> None:
    """backend = "pyslurm" where it cannot load is an error, not a silent fallback."""
    with pytest.raises(BackendMismatch, match="pyslurm is not importable"):
        open_door(SlurmConfig(bin_dir=str(fake_scontrol), backend="pyslurm"))


def test_cli_backend_never_imports_pyslurm(fake_scontrol: Path) -> None:
    """backend = "cli" is the command line, whatever is installed."""
    assert open_door(SlurmConfig(bin_dir=str(fake_scontrol), backend="cli")).name == "cli"


def test_probe_reports_libslurm_fatal_and_keeps_the_answer(
    tmp_path: Path, pyslurm_here: Installed
) -> None:
    """A child that libslurm ends with exit 1 is a BackendMismatch quoting its fatal line;
    the answer is kept, so the second door does not start another child."""
    python, runs = _interpreter(tmp_path, f"cat >&2 <<'EOF'\n{LIBSLURM_FATAL}EOF\nexit 1")
    for _ in range(2):
        with pytest.raises(BackendMismatch) as caught:
            pyslurm_setup.probe(pyslurm_here, "", env={}, timeout_s=5, python=python)
        assert str(caught.value) == (
            "pyslurm cannot initialise libslurm here (SLURM_CONF unset): "
            "python3: fatal: Could not establish a configuration source"
        )
    assert _runs(runs) == 1


def test_auto_falls_back_to_cli_when_libslurm_would_end_the_process(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pyslurm_here: Installed
) -> None:
    """pyslurm built for the running Slurm but no slurm.conf to be found: auto is the command
    line, pyslurm is a one-line error, and this process never imported pyslurm."""
    python, runs = _interpreter(tmp_path, f"cat >&2 <<'EOF'\n{LIBSLURM_FATAL}EOF\nexit 1")
    monkeypatch.setattr(pyslurm_setup, "PYTHON", python)
    config = SlurmConfig(bin_dir=str(_scontrol(tmp_path, "25.11.7")))
    env = {"PATH": "/usr/bin:/bin"}  # no SLURM_CONF
    imported_before = "pyslurm" in sys.modules
    assert open_door(config, env=env).name == "cli"
    with pytest.raises(BackendMismatch, match="fatal: Could not establish a configuration source"):
        open_door(config, env=env, backend="pyslurm")
    assert _runs(runs) == 1
    assert ("pyslurm" in sys.modules) == imported_before


def test_version_mismatch_is_decided_before_any_child(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, pyslurm_here: Installed, fake_scontrol: Path
) -> None:
    """pyslurm 25.11 on a Slurm 22.05 host: the command line, without starting a probe."""
    python, runs = _interpreter(tmp_path, "exit 1")
    monkeypatch.setattr(pyslurm_setup, "PYTHON", python)
    assert open_door(SlurmConfig(bin_dir=str(fake_scontrol))).name == "cli"
    assert _runs(runs) == 0


def test_unreadable_slurm_conf_is_refused_without_a_child(
    tmp_path: Path, pyslurm_here: Installed
) -> None:
    """A SLURM_CONF naming a missing file is refused at once (libslurm would end on it)."""
    python, runs = _interpreter(tmp_path, "exit 0")
    conf = str(tmp_path / "absent" / "slurm.conf")
    with pytest.raises(BackendMismatch, match=f"SLURM_CONF={conf} is not a readable file"):
        pyslurm_setup.probe(pyslurm_here, conf, env={}, timeout_s=5, python=python)
    assert _runs(runs) == 0


def test_probe_that_hangs_is_cut_at_the_deadline_and_asked_again(
    tmp_path: Path, pyslurm_here: Installed
) -> None:
    """A child still loading at the deadline is killed; a slow moment is not kept as an
    answer, so the next door probes again."""
    python, runs = _interpreter(tmp_path, "exec sleep 30")
    for _ in range(2):
        with pytest.raises(BackendMismatch, match=r"did not finish loading within 0.3s"):
            pyslurm_setup.probe(pyslurm_here, "", env={}, timeout_s=0.3, python=python)
    assert _runs(runs) == 2


def test_probe_reads_the_child_answer_and_passes_slurm_conf(
    tmp_path: Path, pyslurm_here: Installed
) -> None:
    """A clean child prints pyslurm's version and cluster; it got the pyslurm folder and
    the slurm.conf as arguments and SLURM_CONF in its environment."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=lab\n")
    seen = tmp_path / "seen"
    python, _ = _interpreter(
        tmp_path,
        f'echo "$5 $6 $SLURM_CONF" > "{seen}"\necho \'{{"version": "25.11.2", "cluster": "lab"}}\'',
    )
    result = pyslurm_setup.probe(pyslurm_here, str(conf), env={}, timeout_s=5, python=python)
    assert (result.version, result.cluster) == ("25.11.2", "lab")
    assert seen.read_text().split() == [pyslurm_here.location, str(conf), str(conf)]


def test_probe_without_an_answer_names_the_child_last_words(
    tmp_path: Path, pyslurm_here: Installed
) -> None:
    """A child that exits 0 but prints no answer (a broken pyslurm) is a mismatch too."""
    python, _ = _interpreter(tmp_path, "echo 'ImportError: libslurm.so.43: cannot open' >&2")
    with pytest.raises(BackendMismatch, match="printed no answer.*libslurm.so.43"):
        pyslurm_setup.probe(pyslurm_here, "", env={}, timeout_s=5, python=python)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("Invalid job id specified"), JobNotFound),
        (RuntimeError("Job 5 does not exist on Cluster triage"), JobNotFound),
        (RuntimeError("Invalid node name specified"), NodeNotFound),
        (RuntimeError("Node 'node9' does not exist"), NodeNotFound),
        (RuntimeError("Requested operation is presently disabled"), NotRequeueable),
        (RuntimeError("Job/step already completing or completed"), InvalidJobState),
        (RuntimeError("Unable to contact slurm controller (connect failure)"), SlurmUnavailable),
        (RuntimeError("Failed to open onnection to slurmdbd"), SlurmUnavailable),
        (RuntimeError("Socket timed out on send/recv operation"), SlurmUnavailable),
        (ValueError("Invalid Time Specification: x"), SlurmCommandError),
        (AttributeError("'Job' object has no attribute 'nodes'"), SlurmOutputError),
        # db.Job.modify that selected no record (pyslurm 25.11 db/job.pyx): an empty list,
        # or NULL with slurmdbd's SLURM_NO_CHANGE_IN_DATA (RPCError() reads its strerror)
        (RuntimeError("Nothing was modified"), NotYetAccounted),
        (RuntimeError("Data has not changed since time specified"), NotYetAccounted),
    ],
)
def test_pyslurm_errors_become_the_door_error_classes(
    error: Exception, expected: type[Exception]
) -> None:
    """pyslurm's RPCError texts (slurm_strerror's, as the clients print them) and its own
    messages map to the same classes as the command line's; a pyslurm that changed shape
    is an output error, never a traceback."""
    translated = translate("job", error)
    assert type(translated) is expected
    assert str(translated).startswith("pyslurm job: ")
