"""`slurm-triage classify` as a real subprocess: good input, bad input, exit codes, stderr."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
ENV_TZ = {"TZ": "UTC", "PATH": "/usr/bin:/bin"}


def classify(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_triage", "classify", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**ENV_TZ, "SLURM_TRIAGE_CONFIG": "/dev/null"},
    )


@pytest.fixture
def oom_log(tmp_path: Path) -> Path:
    path = tmp_path / "node02.out"
    path.write_text(
        'Traceback (most recent call last):\n  File "t.py", line 3, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0\n"
    )
    return path


@pytest.fixture
def timeout_log(tmp_path: Path) -> Path:
    path = tmp_path / "node01.out"
    path.write_text(
        "[rank0]:[E1121 10:00:05.1 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for "
        "600010 milliseconds before timing out.\n"
    )
    return path


def test_json_output_has_the_contract_keys(oom_log, timeout_log):
    """--json prints one object; a per-node log ties the OOM to its node over the others' NCCL."""
    done = classify(
        "--state",
        "FAILED",
        "--exit-code",
        "1",
        "--log",
        f"node02={oom_log}",
        "--log",
        f"node01={timeout_log}",
        "--json",
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {"cause", "domain", "action", "nodes", "confidence", "evidence"} <= set(out)
    assert (out["cause"], out["nodes"], out["action"]) == ("cuda_oom", ["node02"], "none")
    assert 0 <= out["confidence"] <= 1 and out["evidence"]


def test_human_output_explains_cause_why_and_action():
    """Without --json: the cause, why, and what will be done, in a few lines."""
    done = classify("--state", "TIMEOUT")
    assert done.returncode == 0, done.stderr
    assert "cause:   timeout (scheduler)" in done.stdout
    assert "why:" in done.stdout
    assert "requeue the job if it is resumable" in done.stdout


def test_kernel_log_with_node_blames_that_node(tmp_path, timeout_log):
    """--kernel-log NODE=PATH: an XID 79 there beats NCCL timeouts, root-backed, drain advised."""
    kern = tmp_path / "kern.log"
    kern.write_text(
        "[ 812345.101240] NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
    )
    done = classify(
        "--log", f"node01={timeout_log}", "--kernel-log", f"node07={kern}", "--signal", "SIGABRT"
    )
    assert done.returncode == 0, done.stderr
    assert "gpu_unavailable" in done.stdout and "drain node07" in done.stdout


def test_signal_names_and_numbers_are_equivalent():
    """--signal SEGV, SIGSEGV and 11 all classify as segfault."""
    for sig in ("SEGV", "SIGSEGV", "11"):
        out = json.loads(classify("--signal", sig, "--json").stdout)
        assert out["cause"] == "segfault"


def test_completed_wins_over_a_scary_log(oom_log):
    """COMPLETED with exit 0 is completed whatever the log says."""
    out = json.loads(
        classify("--state", "COMPLETED", "--exit-code", "0", "--log", oom_log, "--json").stdout
    )
    assert out["cause"] == "completed"


def test_evidence_file_and_corpus_case():
    """--evidence reads a record; a corpus case classifies the same through the CLI."""
    case = next(CORPUS.glob("*-nvml-gpu-lost-epilog"))
    done = classify(
        "--state",
        "FAILED",
        "--exit-code",
        "1",
        "--log",
        f"node31={case / 'node31.out'}",
        "--evidence",
        case / "evidence-node31-root.json",
        "--json",
    )
    out = json.loads(done.stdout)
    assert (out["cause"], out["nodes"], out["root_backed"]) == ("gpu_unavailable", ["node31"], True)


def test_end_time_applies_the_window(tmp_path):
    """With --end-time, a kernel event long before the job ended does not count."""
    kern = tmp_path / "kern.log"
    kern.write_text("2024-11-21T07:00:00+00:00 node07 kernel: NVRM: Xid (PCI:0000:5d:00): 79, x\n")
    args = ("--exit-code", "1", "--kernel-log", kern, "--json")
    assert json.loads(classify(*args).stdout)["cause"] == "gpu_unavailable"
    late = json.loads(classify(*args, "--end-time", "2024-11-21T10:00:00+00:00").stdout)
    assert late["cause"] == "unknown"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--log", "/nonexistent/job.out"), "cannot read /nonexistent/job.out"),
        (("--kernel-log", "node01=/nonexistent/kern.log"), "cannot read /nonexistent/kern.log"),
        (("--evidence", "/nonexistent.json"), "cannot read /nonexistent.json"),
        (("--signal", "SIGWHATEVER"), "unknown signal"),
        (("--state", "FINISHED"), "unknown Slurm job state"),
        (("--exit-code", "abc"), "bad exit code"),
        (("--tail-bytes", "-5"), "bad --tail-bytes"),
        (("--end-time", "yesterday"), "bad --end-time"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    """Each bad input: exit status 2, one stderr line, no traceback, nothing on stdout."""
    done = classify(*args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("slurm-triage: error: ")
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_a_directory_or_a_bad_record_is_one_line(tmp_path):
    """A directory as a log, or a malformed evidence record, is a one-line error too."""
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "slurm-triage/evidence", "version": 9}')
    for args, message in (
        (("--log", tmp_path), "not a regular file"),
        (("--evidence", bad), "unsupported version 9"),
    ):
        done = classify(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert message in done.stderr


MULTINODE = Path(__file__).resolve().parents[1] / "fixtures" / "multinode"


@pytest.mark.parametrize(
    ("log", "cause", "nodes"),
    [
        (f"{name}.slurm-{version}.out", cause, nodes)
        for name, cause, nodes in (
            ("nccl-timeout-rank1", "nccl_timeout", []),
            ("keyerror-rank1", "user_code", ["node2"]),
            ("cuda-oom-rank1", "cuda_oom", ["node2"]),
        )
        for version in ("22.05", "25.11")
    ],
)
def test_rank1_failure_under_kill_on_bad_exit_is_the_cause(log, cause, nodes):
    """Real 2-node job logs (22.05, recorded on the local cluster; 25.11's banner wording):
    rank 1 fails on node2, srun ends rank 0 and slurmstepd prints its step-cancel banner.
    The failing rank's cause wins, not `cancelled`."""
    done = classify("--state", "FAILED", "--exit-code", "1", "--log", MULTINODE / log, "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["cause"], result["nodes"]) == (cause, nodes), result["reason"]
