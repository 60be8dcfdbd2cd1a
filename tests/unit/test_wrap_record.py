"""The wrapper's record says why its child ended: log tails, NVML events, the error file."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from slurm_triage.attribution import attribute
from slurm_triage.evidence import (
    EvidenceRecord,
    LogHit,
    NvmlCondition,
    NvmlFact,
    ProcessExit,
    RootException,
    parse_record,
)
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.taxonomy import Cause
from tests.unit.test_wrap import WRAP, wrap_env

CUDA_OOM_LOG = """\
2024-12-18 09:02:19,870 - train - INFO - step 1200 | loss 2.8770
Traceback (most recent call last):
  File "/home/u/train.py", line 212, in <module>
    main()
  File "/home/u/train.py", line 171, in main
    loss.backward()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
capacity of 79.19 GiB of which 1.06 GiB is free.
"""

NCCL_TIMEOUT_LOG = """\
[rank3]:[E1121 10:30:00.123456 1234 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught \
collective operation timeout: WorkNCCL(SeqNum=5012, OpType=ALLREDUCE, NumelIn=1048576, \
NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.
[rank3]:[E1121 10:30:00.123789 1234 ProcessGroupNCCL.cpp:1785] [PG 0 Rank 3] Some NCCL \
operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, \
subsequent GPU operations might run on corrupted/incomplete data.
[rank3]:[E1121 10:30:00.124000 1234 ProcessGroupNCCL.cpp:1834] To avoid data inconsistency, \
we are taking the entire process down.
"""


def _run(tmp_path: Path, script: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*WRAP, "--", sys.executable, "-c", script],
        env=wrap_env(tmp_path, **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _record(tmp_path: Path, name: str = "nodeA.0.json", job: str = "77") -> EvidenceRecord:
    return parse_record((tmp_path / "evidence" / job / name).read_bytes())


def test_cuda_oom_log_is_attributed(tmp_path: Path) -> None:
    """A CUDA OOM traceback on stderr: cuda_oom, the root exception recorded, one summary line."""
    script = f"import sys; sys.stderr.write({CUDA_OOM_LOG!r}); sys.exit(1)"
    result = _run(tmp_path, script, SLURM_PROCID="3")
    assert result.returncode == 1
    record = _record(tmp_path)
    assert "torch.cuda_oom" in {f.signature for f in record.facts if isinstance(f, LogHit)}
    (root,) = [f for f in record.facts if isinstance(f, RootException)]
    assert (root.exc_type, root.rank, root.node) == ("torch.OutOfMemoryError", 3, "nodeA")
    assert attribute(record.facts).cause is Cause.CUDA_OOM
    summary = result.stderr.splitlines()[-1]
    assert summary.startswith(
        "slurm-triage: job 77 nodeA rank 3: cuda_oom (user) - torch.OutOfMemoryError: "
        "CUDA out of memory. Tried to allocate 2.00 GiB"
    )
    assert summary.endswith(" - not requeued")


def test_nccl_watchdog_timeout_log_is_attributed(tmp_path: Path) -> None:
    """NCCL watchdog lines then SIGABRT: nccl_timeout, and the signal death is recorded."""
    script = (
        f"import os,sys; sys.stderr.write({NCCL_TIMEOUT_LOG!r}); sys.stderr.flush(); os.abort()"
    )
    result = _run(tmp_path, script)
    assert result.returncode == -6
    record = _record(tmp_path)
    (exit_fact,) = [f for f in record.facts if isinstance(f, ProcessExit)]
    assert exit_fact.signal == 6
    signatures = {f.signature for f in record.facts if isinstance(f, LogHit)}
    assert "torch.nccl_watchdog_timeout" in signatures
    assert attribute(record.facts).cause is Cause.NCCL_TIMEOUT
    assert "nccl_timeout (infrastructure)" in result.stderr.splitlines()[-1]


def test_success_prints_nothing_and_records_completion(tmp_path: Path) -> None:
    """A child that exits 0 gets no summary line, whatever its log says."""
    script = f"import sys; sys.stderr.write({CUDA_OOM_LOG!r})"
    result = _run(tmp_path, script)
    assert result.returncode == 0
    assert result.stderr == CUDA_OOM_LOG
    assert attribute(_record(tmp_path).facts).cause is Cause.COMPLETED


def test_xid_injected_during_the_run_is_recorded(tmp_path: Path) -> None:
    """An XID 79 injected on one of the step's GPUs while the child runs is an NVML fact
    and the attribution; an XID on a GPU of another step is not recorded."""
    sim = tmp_path / "sim"
    estate = NodeEstate(sim, "nodeA").ensure()
    log = tmp_path / "triage.log"
    config = (
        f'[logging]\ndestination = "file"\nfile = "{log}"\nlevel = "debug"\nformat = "json"\n'
        f'[health]\nnvml = "simulated"\nsimulate_root = "{sim}"\n'
    )
    go = tmp_path / "go"
    script = (
        "import os,sys,time\n"
        f"deadline = time.monotonic() + 30\n"
        f"while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n"
        "print('RuntimeError: CUDA error: unknown error', file=sys.stderr); sys.exit(1)\n"
    )
    env = wrap_env(tmp_path, config=config, SLURM_STEP_GPUS="2,3")
    env["SLURM_TRIAGE__WRAPPER__WATCH_NVML"] = "true"
    proc = subprocess.Popen(
        [*WRAP, "--keep-on-xid", "--", sys.executable, "-c", script],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_log(log, '"nvml_watching"', timeout_s=30)
    inject(estate, "xid", 48, gpu=5)  # not this step's GPU
    inject(estate, "xid", 79, gpu=3)
    go.write_text("")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    record = _record(tmp_path)
    nvml = [f for f in record.facts if isinstance(f, NvmlFact)]
    assert [(f.condition, f.gpu, f.value) for f in nvml] == [(NvmlCondition.XID_EVENT, "3", 79)]
    verdict = attribute(record.facts)
    assert verdict.cause is Cause.GPU_UNAVAILABLE and verdict.nodes == ("nodeA",)
    assert not verdict.root_backed  # the wrapper is the user: it can requeue, never drain
    assert "gpu_unavailable (hardware)" in err.splitlines()[-1]
    assert err.splitlines()[-1].endswith("requeue excluding nodeA")


def test_fatal_xid_ends_the_command_at_once(tmp_path: Path) -> None:
    """A node-fatal XID on the step's GPU ends a command that would otherwise hang (in NCCL)
    within seconds; an application XID (13) before it does not."""
    sim = tmp_path / "sim"
    estate = NodeEstate(sim, "nodeA").ensure()
    log = tmp_path / "triage.log"
    config = (
        f'[logging]\ndestination = "file"\nfile = "{log}"\nlevel = "debug"\nformat = "json"\n'
        f'[health]\nnvml = "simulated"\nsimulate_root = "{sim}"\n'
    )
    env = wrap_env(tmp_path, config=config, SLURM_STEP_GPUS="3")
    env["SLURM_TRIAGE__WRAPPER__WATCH_NVML"] = "true"
    proc = subprocess.Popen(
        [*WRAP, "--kill-grace", "1", "--", sys.executable, "-c", "import time; time.sleep(120)"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_log(log, '"nvml_watching"', timeout_s=30)
    inject(estate, "xid", 13, gpu=3)
    time.sleep(1.5)
    assert proc.poll() is None  # the program's own fault is left to the program
    started = time.monotonic()
    inject(estate, "xid", 79, gpu=3)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - started < 5
    assert proc.returncode == -signal.SIGTERM
    assert "XID 79" in err and "ending the command now" in err
    verdict = attribute(_record(tmp_path).facts)
    assert verdict.cause is Cause.GPU_UNAVAILABLE and verdict.nodes == ("nodeA",)


def _wait_for_log(path: Path, needle: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text():
            return
        time.sleep(0.02)
    raise AssertionError(f"{needle} not logged within {timeout_s}s")


def test_error_file_gives_the_root_exception(tmp_path: Path) -> None:
    """A Python child using record_exceptions() that dies of KeyError: the record's root
    exception is KeyError, from the error file, with its message."""
    script = (
        "from slurm_triage.wrapper import record_exceptions\n"
        "record_exceptions()\n"
        "print('a line that looks like a traceback end: ValueError: not me')\n"
        "{}['learning_rate']\n"
    )
    result = _run(tmp_path, script)
    assert result.returncode == 1
    assert "KeyError: 'learning_rate'" in result.stderr  # the default hook still printed it
    (root,) = [f for f in _record(tmp_path).facts if isinstance(f, RootException)]
    assert (root.exc_type, root.message, root.rank) == ("KeyError", "'learning_rate'", 0)
    assert attribute(_record(tmp_path).facts).cause is Cause.USER_CODE


def test_decorator_records_the_first_failure(tmp_path: Path) -> None:
    """@record_exceptions on main records what escapes it; the later hook does not overwrite."""
    script = (
        "from slurm_triage.wrapper import record_exceptions\n"
        "record_exceptions()\n"
        "@record_exceptions\n"
        "def main():\n"
        "    raise FileNotFoundError(2, 'No such file or directory', '/data/shard-0001')\n"
        "main()\n"
    )
    _run(tmp_path, script)
    (root,) = [f for f in _record(tmp_path).facts if isinstance(f, RootException)]
    assert root.exc_type == "FileNotFoundError" and "/data/shard-0001" in root.message


def test_without_error_file_the_log_tail_gives_the_root(tmp_path: Path) -> None:
    """No record_exceptions: the root exception comes from the traceback in the tail."""
    _run(tmp_path, "raise ValueError('bad batch size')")
    (root,) = [f for f in _record(tmp_path).facts if isinstance(f, RootException)]
    assert (root.exc_type, root.message) == ("ValueError", "bad batch size")


def test_invalid_error_file_is_ignored(tmp_path: Path) -> None:
    """Garbage in the error file is ignored (one log line); the log tail still gives the root."""
    script = (
        "import os\n"
        "open(os.environ['SLURM_TRIAGE_ERROR_FILE'], 'w').write('{\"type\": 1}')\n"
        "raise ImportError('no module named apex')\n"
    )
    result = _run(tmp_path, script)
    assert result.returncode == 1
    (root,) = [f for f in _record(tmp_path).facts if isinstance(f, RootException)]
    assert root.exc_type == "ImportError"
    assert "error_file_ignored" in result.stderr


def test_ranks_sharing_a_node_write_one_record_each(tmp_path: Path) -> None:
    """With 2 tasks of the step on the node, each rank's record is named by its task id."""
    for rank in ("0", "1"):
        _run(tmp_path, "pass", SLURM_PROCID=rank, SLURM_STEP_TASKS_PER_NODE="2(x3)")
    names = sorted(p.name for p in (tmp_path / "evidence" / "77").iterdir())
    assert names == ["nodeA.0.0.json", "nodeA.0.1.json"]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train.py"


def test_example_trainer_checkpoints_on_signals_and_resumes(tmp_path: Path) -> None:
    """examples/train.py under the wrapper: SIGUSR1 makes it checkpoint, SIGTERM makes it
    checkpoint and exit, a new run resumes from there, and a failure is recorded exactly."""
    ckpt = tmp_path / "ckpt.json"
    argv = [*WRAP, "--", sys.executable, str(EXAMPLE), "--checkpoint", str(ckpt)]
    proc = subprocess.Popen(
        [*argv, "--steps", "100000", "--step-seconds", "0.01", "--checkpoint-every", "100000"],
        env=wrap_env(tmp_path),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    lines = iter(proc.stdout.readline, "")
    assert next(line for line in lines if line.startswith("step 3 "))
    proc.send_signal(signal.SIGUSR1)
    assert next(line for line in lines if line.startswith("checkpoint: step"))
    proc.send_signal(signal.SIGTERM)
    saved = next(line for line in lines if line.startswith("checkpoint: step"))
    assert proc.wait(timeout=30) == 143
    step = int(saved.split()[2])
    assert json.loads(ckpt.read_text())["step"] == step
    result = subprocess.run(
        [*argv, "--steps", str(step + 5), "--step-seconds", "0", "--fail-at", str(step + 2)],
        env=wrap_env(tmp_path, SLURM_JOB_ID="78"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.startswith(f"starting at step {step} (restart 0)")
    assert result.returncode == 1
    (root,) = [f for f in _record(tmp_path, job="78").facts if isinstance(f, RootException)]
    assert (root.exc_type, root.message) == (
        "RuntimeError",
        f"simulated failure at step {step + 2}",
    )
