"""What is left when the wrapper is gone: no processes, no half records; and the hang detector."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from slurm_triage.attribution import attribute
from slurm_triage.evidence import ProcessExit, Stall, parse_record
from slurm_triage.taxonomy import Cause
from tests.unit.test_wrap import WRAP, wrap_env


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] != b"Z"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def test_no_grandchild_outlives_the_wrapper(tmp_path: Path) -> None:
    """A grandchild left in the child's group and one that escaped it with setsid are both
    gone (killed and reaped, not zombies) when the wrapper has exited."""
    escape = (
        "import os,time\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid(); os.write(w, b'1'); time.sleep(300); os._exit(0)\n"
        "os.read(r, 1); print(pid, flush=True)\n"
    )
    script = f'sleep 300 & echo $!; {sys.executable} -c "{escape}"; exit 3'
    result = subprocess.run(
        [*WRAP, "--", "sh", "-c", script],
        env=wrap_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 3
    pids = [int(p) for p in result.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        assert not _alive(pid), f"pid {pid} outlived the wrapper"


def test_sigkilled_wrapper_leaves_no_record(tmp_path: Path) -> None:
    """A wrapper killed with SIGKILL mid-run leaves no record and no partial file."""
    script = "import os,time; print(os.getpid(), flush=True); time.sleep(60)"
    proc = subprocess.Popen(
        [*WRAP, "--", sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        env=wrap_env(tmp_path),
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        proc.kill()
        assert proc.wait(timeout=10) == -signal.SIGKILL
        job_dir = tmp_path / "evidence" / "77"
        assert not job_dir.exists() or list(job_dir.iterdir()) == []
    finally:
        _kill_group(child)


def test_hang_is_recorded_and_ends_the_child(tmp_path: Path) -> None:
    """No output and no heartbeat for --hang-timeout: a stall fact, SIGTERM to the group, a
    one-line notice, and the wrapper dies of the child's SIGTERM."""
    script = "import time; print('started', flush=True); time.sleep(60)"
    result = subprocess.run(
        [*WRAP, "--hang-timeout", "0.6", "--kill-grace", "5", "--", sys.executable, "-c", script],
        env=wrap_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == -signal.SIGTERM
    lines = result.stderr.splitlines()
    assert lines[0].startswith("slurm-triage: no output and no heartbeat for")
    assert "hang" in lines[-1] and lines[-1].startswith("slurm-triage: job 77 nodeA rank 0: hang")
    record = parse_record((tmp_path / "evidence/77/nodeA.0.json").read_bytes())
    (stall,) = [f for f in record.facts if isinstance(f, Stall)]
    assert stall.idle_s >= 0.6
    assert attribute(record.facts).cause is Cause.HANG


def test_heartbeat_touches_keep_a_silent_child_alive(tmp_path: Path) -> None:
    """A child that prints nothing but touches $SLURM_TRIAGE_HEARTBEAT is not a hang."""
    script = (
        "import os,time\n"
        "for _ in range(25):\n"
        "    os.utime(os.environ['SLURM_TRIAGE_HEARTBEAT']); time.sleep(0.1)\n"
    )
    # 2.5 s of silence, longer than the 1.5 s timeout: only the heartbeat keeps it alive.
    result = subprocess.run(
        [*WRAP, "--hang-timeout", "1.5", "--", sys.executable, "-c", script],
        env=wrap_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    record = parse_record((tmp_path / "evidence/77/nodeA.0.json").read_bytes())
    assert not [f for f in record.facts if isinstance(f, Stall)]


def test_missing_evidence_dir_keeps_the_exit_status(tmp_path: Path) -> None:
    """An evidence directory that does not exist is one line on stderr; the exit is the child's."""
    env = wrap_env(tmp_path, SLURM_TRIAGE__PATHS__EVIDENCE_DIR=str(tmp_path / "nope"))
    result = subprocess.run(
        [*WRAP, "--", "sh", "-c", "exit 7"], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 7
    lines = result.stderr.splitlines()
    assert (
        lines[0]
        == f"slurm-triage: evidence not recorded: evidence directory {tmp_path}/nope does not exist"
    )
    assert lines[1].startswith("slurm-triage: job 77 nodeA rank 0: unknown")
    assert len(lines) == 2


def test_unwritable_job_dir_keeps_the_signal(tmp_path: Path) -> None:
    """When the job's directory cannot be made, the wrapper says so and still dies of the
    child's signal."""
    (tmp_path / "evidence").mkdir()
    (tmp_path / "evidence" / "77").write_text("in the way")
    result = subprocess.run(
        [*WRAP, "--", "sh", "-c", "kill -SEGV $$"],
        env=wrap_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == -signal.SIGSEGV
    assert result.stderr.splitlines()[0].startswith("slurm-triage: evidence not recorded:")
    assert "77 is not a directory" in result.stderr


def test_record_is_private_to_this_rank_and_readable(tmp_path: Path) -> None:
    """The job directory is 0755, the record 0644, and no temp file is left next to it."""
    subprocess.run([*WRAP, "--", "true"], env=wrap_env(tmp_path), timeout=30, check=True)
    job_dir = tmp_path / "evidence" / "77"
    assert job_dir.stat().st_mode & 0o777 == 0o755
    assert [p.name for p in job_dir.iterdir()] == ["nodeA.0.json"]
    assert (job_dir / "nodeA.0.json").stat().st_mode & 0o777 == 0o644
    record = parse_record((job_dir / "nodeA.0.json").read_bytes())
    assert (record.job_id, record.node, record.step, record.collected_by.value) == (
        "77",
        "nodeA",
        "0",
        "user",
    )
    (exit_fact,) = [f for f in record.facts if isinstance(f, ProcessExit)]
    assert exit_fact.exit_code == 0 and exit_fact.runtime_s is not None


def test_interactive_child_gets_the_terminal(tmp_path: Path) -> None:
    """Under a terminal (srun --pty) the child reads its input instead of being stopped by
    SIGTTIN for reading from a background process group."""
    env = wrap_env(tmp_path)
    argv = [*WRAP, "--", sys.executable, "-c", "print('got', input())"]
    pid, master = pty.fork()
    if pid == 0:  # the session leader, with the pty as its controlling terminal
        os.execve(argv[0], argv, env)
    try:
        os.write(master, b"hello\n")
        output = _read_until_eof(master, timeout_s=20)
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(master)
    assert os.waitstatus_to_exitcode(status) == 0
    assert b"got hello" in output


def _read_until_eof(fd: int, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    out = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the slave side is closed
            return out
        if not chunk:
            return out
        out += chunk
    raise AssertionError(f"no EOF within {timeout_s}s; output so far: {out!r}")


def _unread(fd: int) -> int:
    import fcntl
    import termios

    buffer = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, buffer)
    return int.from_bytes(buffer, "little")


def _wrap_into_a_pipe(tmp_path: Path, script: str) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """`wrap -- sh -c SCRIPT` with its stderr a pipe the test reads when it chooses."""
    proc = subprocess.Popen(
        [*WRAP, "--", "sh", "-c", script],
        env=wrap_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    return proc, proc.stderr


def test_a_rank_dying_of_sigterm_waits_for_its_output_to_be_read(tmp_path: Path) -> None:
    """srun stops copying a step's output once a task is reported dead of SIGTERM, so the
    wrapper dies of its child's SIGTERM only after its stderr pipe has been read (bounded):
    with its summary waiting unread it is still alive; read, it dies of the signal."""
    proc, stderr = _wrap_into_a_pipe(tmp_path, "kill -TERM $$")
    try:
        deadline = time.monotonic() + 20
        while _unread(stderr.fileno()) == 0 and proc.poll() is None:
            assert time.monotonic() < deadline, "no summary from the wrapper"
            time.sleep(0.01)
        time.sleep(0.3)  # more than the settle time; less than the drain timeout
        assert proc.poll() is None, "the wrapper died with its summary unread"
        summary = os.read(stderr.fileno(), 65536).decode()
        assert proc.wait(timeout=10) == -signal.SIGTERM
        assert "slurm-triage: job 77 nodeA rank 0:" in summary, summary
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        stderr.close()


def test_an_unread_pipe_holds_the_dying_wrapper_for_a_bounded_time(tmp_path: Path) -> None:
    """Nobody reading the wrapper's stderr does not keep it from dying of the signal."""
    result, stderr = _wrap_into_a_pipe(tmp_path, "kill -KILL $$")
    try:
        assert result.wait(timeout=20) == -signal.SIGKILL
        assert "rank 0:" in stderr.read().decode()
    finally:
        stderr.close()
