"""`slurm-triage wrap`: the child's exit is the wrapper's exit, signals included.

Every test runs the real CLI as a real process around a real child; the child's Slurm
identity is fixed (job 77, nodeA, step 0, rank 0) and evidence goes to a temp directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_triage.evidence import ProcessExit, parse_record

WRAP = [sys.executable, "-m", "slurm_triage", "wrap"]


def wrap_env(tmp_path: Path, config: str = "", **extra: str) -> dict[str, str]:
    """A clean environment: no inherited Slurm variables, our own config and evidence dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM", "CUDA_VISIBLE")) and k != "PYTHONUNBUFFERED"
    }
    config_file = tmp_path / "triage.toml"
    config_file.write_text(config)
    (tmp_path / "evidence").mkdir(exist_ok=True)
    env.update(
        SLURM_TRIAGE_CONFIG=str(config_file),
        SLURM_TRIAGE__PATHS__EVIDENCE_DIR=str(tmp_path / "evidence"),
        SLURM_TRIAGE__WRAPPER__WATCH_NVML="false",
        SLURM_JOB_ID="77",
        SLURMD_NODENAME="nodeA",
        SLURM_STEP_ID="0",
        SLURM_PROCID="0",
        TMPDIR=str(tmp_path),  # scratch dirs of wrappers a test kills stay in the test's dir
    )
    env.update(extra)
    return env


def record_of(tmp_path: Path, name: str = "nodeA.0.json") -> dict[str, object]:
    return json.loads((tmp_path / "evidence" / "77" / name).read_bytes())


@pytest.mark.parametrize("code", [0, 1, 3, 42, 127, 255])
def test_exit_code_passes_through(tmp_path: Path, code: int) -> None:
    """The wrapper exits with the child's exit code (all 256 are in test_wrap_exit.py)."""
    result = subprocess.run(
        [*WRAP, "--", "sh", "-c", f"exit {code}"], env=wrap_env(tmp_path), timeout=30
    )
    assert result.returncode == code


@pytest.mark.parametrize(
    "sig",
    [signal.SIGSEGV, signal.SIGABRT, signal.SIGKILL, signal.SIGTERM, signal.SIGBUS, signal.SIGFPE],
)
def test_signal_death_passes_through(tmp_path: Path, sig: signal.Signals) -> None:
    """When the child dies of a signal the wrapper dies of the same one, and the record
    names the signal."""
    result = subprocess.run(
        [*WRAP, "--", "sh", "-c", f"kill -{sig.name[3:]} $$"],
        env=wrap_env(tmp_path),
        capture_output=True,
        timeout=30,
    )
    assert result.returncode == -sig
    record = parse_record((tmp_path / "evidence/77/nodeA.0.json").read_bytes())
    (exit_fact,) = [f for f in record.facts if isinstance(f, ProcessExit)]
    assert exit_fact.signal == sig and exit_fact.exit_code is None


def test_sigusr1_is_forwarded_to_child(tmp_path: Path) -> None:
    """SIGUSR1 sent to the wrapper (Slurm's --signal=B:USR1) reaches the child's handler."""
    marker = tmp_path / "got"
    child = (
        f"import signal,sys,time\n"
        f"signal.signal(signal.SIGUSR1, lambda *a: (open({str(marker)!r},'w').write('1'),"
        f" sys.exit(0)))\nprint('ready', flush=True)\ntime.sleep(30)\nsys.exit(9)"
    )
    proc = subprocess.Popen(
        [*WRAP, "--", sys.executable, "-c", child], stdout=subprocess.PIPE, env=wrap_env(tmp_path)
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGUSR1)
    assert proc.wait(timeout=20) == 0
    assert marker.read_text() == "1"


@pytest.mark.parametrize("sig", [signal.SIGUSR2, signal.SIGHUP, signal.SIGINT])
def test_other_signals_reach_the_child_and_its_group(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGUSR2, SIGHUP and SIGINT reach every process of the child's group, not just the child."""
    # The grandchild is Python: sh makes background jobs ignore SIGINT, Python can undo it.
    grandchild = (
        f"import signal,sys,time; signal.signal({int(sig)}, lambda *a: "
        "(print('sub-got', file=sys.stderr, flush=True), sys.exit(0))); "
        "print('ready', flush=True); time.sleep(30)"
    )
    child = (
        f"trap 'echo parent-got; wait; exit 5' {sig.name[3:]}; "
        f'{sys.executable} -c "{grandchild}" & wait; wait'
    )
    proc = subprocess.Popen(
        [*WRAP, "--", "sh", "-c", child],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=wrap_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 5
    assert b"parent-got" in out and b"sub-got" in err


def test_sigcont_is_forwarded(tmp_path: Path) -> None:
    """SIGCONT (after a Slurm suspend) is forwarded like the others."""
    child = (
        "import signal,sys,time\n"
        "signal.signal(signal.SIGCONT, lambda *a: sys.exit(4))\n"
        "print('ready', flush=True)\ntime.sleep(30)"
    )
    proc = subprocess.Popen(
        [*WRAP, "--", sys.executable, "-c", child], stdout=subprocess.PIPE, env=wrap_env(tmp_path)
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGCONT)
    assert proc.wait(timeout=20) == 4


def test_sigterm_then_sigkill_after_grace(tmp_path: Path) -> None:
    """A child that ignores SIGTERM is SIGKILLed once the grace period is over, not before."""
    child = "trap '' TERM; echo ready; sleep 60"
    proc = subprocess.Popen(
        [*WRAP, "--kill-grace", "0.5", "--", "sh", "-c", child],
        stdout=subprocess.PIPE,
        env=wrap_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGKILL
    assert 0.4 < time.monotonic() - started < 10


def test_grace_comes_from_config(tmp_path: Path) -> None:
    """wrapper.kill_grace_s in the config file sets the grace when --kill-grace is absent."""
    child = "trap '' TERM; echo ready; sleep 60"
    env = wrap_env(tmp_path, config="[wrapper]\nkill_grace_s = 0.2\n")
    proc = subprocess.Popen([*WRAP, "--", "sh", "-c", child], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def test_child_that_exits_on_sigterm_is_not_killed(tmp_path: Path) -> None:
    """A child that exits cleanly on SIGTERM within the grace keeps its own exit code."""
    child = "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done"
    proc = subprocess.Popen(
        [*WRAP, "--kill-grace", "5", "--", "sh", "-c", child],
        stdout=subprocess.PIPE,
        env=wrap_env(tmp_path),
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


def test_missing_command_is_one_line_error(tmp_path: Path) -> None:
    """A command that does not exist is a one-line error, exit 2."""
    result = subprocess.run(
        [*WRAP, "--", "/nonexistent/train.py"],
        capture_output=True,
        text=True,
        timeout=30,
        env=wrap_env(tmp_path),
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "command not found" in result.stderr


def test_bad_config_runs_with_defaults(tmp_path: Path) -> None:
    """A broken config file is one line on stderr; the command still runs and exits as it did."""
    env = wrap_env(tmp_path, config="[wrapper]\nkill_grace_s = 'soon'\n")
    result = subprocess.run(
        [*WRAP, "--", "sh", "-c", "echo ran; exit 6"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 6
    assert result.stdout == "ran\n"
    first = result.stderr.splitlines()[0]
    assert first.startswith("slurm-triage: config error:") and "kill_grace_s" in first
    assert "running the command with defaults" in first


def test_cli_flags_are_checked(tmp_path: Path) -> None:
    """Negative durations and tiny tails are refused before anything runs."""
    for flags in (["--kill-grace", "-1"], ["--hang-timeout", "-2"], ["--tail-bytes", "10"]):
        result = subprocess.run(
            [*WRAP, *flags, "--", "true"],
            capture_output=True,
            text=True,
            timeout=30,
            env=wrap_env(tmp_path),
        )
        assert result.returncode == 2, flags
        assert result.stderr.startswith("slurm-triage: error: --"), flags


def test_child_sees_heartbeat_and_error_file_variables(tmp_path: Path) -> None:
    """The child gets per-rank SLURM_TRIAGE_HEARTBEAT and SLURM_TRIAGE_ERROR_FILE paths,
    in a private directory that is gone after the run."""
    script = (
        "import os; print(os.environ['SLURM_TRIAGE_HEARTBEAT']); "
        "print(os.environ['SLURM_TRIAGE_ERROR_FILE']); "
        "print(os.path.exists(os.environ['SLURM_TRIAGE_HEARTBEAT']))"
    )
    result = subprocess.run(
        [*WRAP, "--", sys.executable, "-c", script],
        env=wrap_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    heartbeat, error_file, existed = result.stdout.split()
    assert Path(heartbeat).parent == Path(error_file).parent
    assert Path(heartbeat).parent.parent == tmp_path  # made under $TMPDIR
    assert Path(heartbeat).parent.name.startswith("slurm-triage-77.nodeA.0.0.")
    assert existed == "True"
    assert not Path(heartbeat).parent.exists()


def test_nested_wrap_of_same_rank_runs_command_directly(tmp_path: Path) -> None:
    """`wrap -- wrap -- CMD` on one rank writes one record and exits as CMD did."""
    result = subprocess.run(
        [*WRAP, "--", *WRAP, "--", "sh", "-c", "echo $$; exit 9"],
        env=wrap_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 9
    records = [p.name for p in (tmp_path / "evidence/77").iterdir() if not p.name.startswith(".")]
    assert records == ["nodeA.0.json"]
    # One summary line: the inner wrapper exec'd the command instead of wrapping it again.
    assert result.stderr.count("slurm-triage: job 77") == 1


# A stand-in for slurmstepd: names itself so, starts the wrapper, and (like proctrack/cgroup)
# sends SIGUSR1 to every process of the "step": the trainer and the wrapper.
FAKE_STEPD = r"""
import ctypes, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(15, b"slurmstepd", 0, 0, 0)  # PR_SET_NAME
wrap = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)
child = int(wrap.stdout.readline())
os.kill(child, signal.SIGUSR1)
assert wrap.stdout.readline() == b"handled\n"  # spaced out: Python would merge two at once
os.kill(wrap.pid, signal.SIGUSR1)
print("sent", flush=True)
sys.stdout.write(wrap.stdout.read().decode())
sys.exit(wrap.wait())
"""

COUNTING_CHILD = (
    "import os,signal,sys,time\n"
    "got = {signal.SIGUSR1: 0, signal.SIGUSR2: 0}\n"
    "def note(sig, _):\n"
    "    got[sig] += 1\n"
    "    if sig == signal.SIGUSR1: os.write(1, b'handled\\n')  # print() is not reentrant\n"
    "signal.signal(signal.SIGUSR1, note); signal.signal(signal.SIGUSR2, note)\n"
    "print(os.getpid(), flush=True)\n"
    "deadline = time.monotonic() + 20\n"
    "while not got[signal.SIGUSR2] and time.monotonic() < deadline: time.sleep(0.02)\n"
    "time.sleep(0.3)  # a duplicate would arrive within this\n"
    "print(got[signal.SIGUSR1], got[signal.SIGUSR2])\n"
)


def test_signals_slurmstepd_gave_the_child_are_not_doubled(tmp_path: Path) -> None:
    """A signal from our parent slurmstepd already reached the child (it signals the whole
    step): not forwarded again. One from anyone else is forwarded."""
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_STEPD, *WRAP, "--", sys.executable, "-c", COUNTING_CHILD],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=wrap_env(tmp_path, SLURM_CONF=str(tmp_path / "no-slurm.conf")),
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().strip() == "sent", proc.stderr.read()
    wrapper = int(
        subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout
    )
    os.kill(wrapper, signal.SIGUSR2)  # from us, not from "slurmstepd": forwarded
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.split()[-2:] == ["1", "1"]
