"""The wrapper's kill grace and Slurm's KillWait / GraceTime: a SIGTERM that slurmstepd gave
the child itself arms no SIGKILL of the wrapper's (Slurm sends its own, after KillWait or the
partition's GraceTime, which sites raise so that jobs can checkpoint); a SIGTERM that only the
wrapper passed on still ends the child after the grace.

Each scenario runs in a process of its own (the "wrapper"), so that the signals it blocks and
waits for are no concern of pytest's. The clock is the Supervisor's seam: every tick moves it
1000 s on, far past the 25 s grace, so no test waits for the grace to pass.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from pathlib import Path

from slurm_triage.wrapper.plain_signal import signal
from slurm_triage.wrapper.stepd import stepd_delivers_to_child
from slurm_triage.wrapper.supervise import Supervisor

REPO = Path(__file__).resolve().parents[2]
# Traps SIGTERM ("checkpointing"), then finishes its checkpoint when the test lets it (EOF on
# the release pipe) and exits 0: a trainer that needs longer than the grace to save.
CHECKPOINTING_CHILD = (
    "import os, signal, sys\n"
    "signal.signal(signal.SIGTERM, lambda *_: print('checkpointing', flush=True))\n"
    "print('ready', flush=True)\n"
    "while os.read(int(sys.argv[1]), 1): pass\n"
    "print('checkpoint saved', flush=True)\n"
)
# A process named slurmstepd that signals as slurmstepd does under proctrack/cgroup (every
# process of the step: the child and the wrapper), then stays, so that its name can be read.
STEPD = (
    "import ctypes, os, sys, time\n"
    "ctypes.CDLL(None).prctl(15, b'slurmstepd', 0, 0, 0)\n"
    "for pid in sys.argv[1:]: os.kill(int(pid), 15)\n"
    "print('sent', flush=True)\n"
    "time.sleep(120)\n"
)
# Then the clock is 5000 s past the SIGTERM; without a SIGKILL by then the child goes on to
# exit by itself (a wrapper that never killed would end the scenario, and its test would fail).
TICKS_BEFORE_RELEASE = 5


def supervise_a_checkpointing_child(sender: str, slurm_conf: str) -> None:
    """The wrapper's side: start the child, have `sender` ("slurmstepd" or "user") SIGTERM
    it, and print how the child ended as JSON."""
    release_r, release_w = os.pipe()
    os.set_inheritable(release_r, True)
    out_r, out_w = os.pipe()
    now = [0.0]
    output = bytearray()
    env = {**os.environ, "SLURM_JOB_ID": "5", "SLURM_CONF": slurm_conf}
    supervisor = Supervisor(
        [sys.executable, "-c", CHECKPOINTING_CHILD, str(release_r)],
        kill_grace_s=25.0,
        stdout=out_w,
        already_delivered=stepd_delivers_to_child(env),
        clock=lambda: now[0],
    )
    ticks = 0

    def tick() -> None:
        nonlocal ticks, release_w
        while select.select([out_r], [], [], 0)[0] and (chunk := os.read(out_r, 4096)):
            output.extend(chunk)  # (at EOF, a child killed but not reaped yet, select says ready)
        if b"checkpointing" not in output:
            return  # the clock starts once the child shows that it has the SIGTERM
        now[0] += 1000.0
        ticks += 1
        if release_w >= 0 and ticks >= TICKS_BEFORE_RELEASE:
            os.close(release_w)
            release_w = -1

    stepd = None
    with supervisor:
        pid = supervisor.start()
        os.close(release_r)
        os.close(out_w)
        assert _read_line(out_r) == b"ready\n"
        if sender == "slurmstepd":
            argv = [sys.executable, "-c", STEPD, str(pid), str(os.getpid())]
            stepd = subprocess.Popen(argv, stdout=subprocess.PIPE)
            assert stepd.stdout is not None and stepd.stdout.readline() == b"sent\n"
        else:
            os.kill(os.getpid(), signal.SIGTERM)  # the user's kill: only the wrapper has it
        try:
            child = supervisor.wait(0.01, tick)
        finally:
            if stepd is not None:
                stepd.kill()
                stepd.wait()
    output.extend(_read_to_end(out_r))
    result = {
        "exit_code": child.exit_code,
        "signal": child.signal_number,
        "skipped": supervisor.skipped,
        "output": output.decode(),
    }
    print(json.dumps(result), flush=True)


def _read_line(fd: int) -> bytes:
    """Up to the first newline, a byte at a time (a write may come in two reads)."""
    line = bytearray()
    while not line.endswith(b"\n") and (byte := os.read(fd, 1)):
        line.extend(byte)
    return bytes(line)


def _read_to_end(fd: int) -> bytes:
    data = bytearray()
    while chunk := os.read(fd, 4096):
        data.extend(chunk)
    return bytes(data)


def _scenario(tmp_path: Path, sender: str) -> dict[str, object]:
    conf = tmp_path / "slurm.conf"
    conf.write_text("ProctrackType=proctrack/cgroup\n")
    code = (
        "from tests.unit.test_fix_wrapgrace_kill import supervise_a_checkpointing_child as s; "
        f"s({sender!r}, {str(conf)!r})"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, object] = json.loads(done.stdout.decode().splitlines()[-1])
    return result


def test_slurmstepd_sigterm_lets_the_child_checkpoint_past_the_grace(tmp_path: Path) -> None:
    """slurmstepd's SIGTERM (time limit, preemption) reached the child itself: long after the
    grace the child is still running, finishes its checkpoint and exits 0 by itself."""
    result = _scenario(tmp_path, "slurmstepd")
    assert result["skipped"] == 1  # not forwarded: the child had it from slurmstepd
    assert (result["exit_code"], result["signal"]) == (0, None), result
    assert result["output"] == "checkpointing\ncheckpoint saved\n"


def test_a_sigterm_only_the_wrapper_passed_on_still_ends_the_child_after_the_grace(
    tmp_path: Path,
) -> None:
    """A user's `kill` of the wrapper has no SIGKILL of Slurm's behind it: once the grace is
    over the child's group gets SIGKILL, as before."""
    result = _scenario(tmp_path, "user")
    assert result["skipped"] == 0
    assert (result["exit_code"], result["signal"]) == (None, signal.SIGKILL), result
    assert result["output"] == "checkpointing\n"
