"""A traceback the program printed and survived is not the root of the job's end: only the
last traceback of a rank's stream ended that rank, and unprefixed output (which process
printed what is unknown) is read by its last traceback, as a file appended to by requeued
runs must be."""

from __future__ import annotations

from slurm_triage.attribution.tracebacks import find_root

CAUGHT = [  # a checkpoint upload thread's, printed by threading's excepthook; training goes on
    "Exception in thread Thread-4 (_upload):",
    "Traceback (most recent call last):",
    '  File "/home/ana/llm/ckpt.py", line 40, in _upload',
    "PermissionError: [Errno 13] Permission denied: '/bucket/ckpt-100.pt'",
    "step 101 loss 2.1",
]
NCCL = [
    "[rank0]: Traceback (most recent call last):",
    '[rank0]:   File "/home/ana/llm/train.py", line 188, in main',
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:2006, unhandled system error (run with NCCL_DEBUG=INFO for details), "
    "NCCL version 2.20.5",
]
ECC = [
    "[rank3]: Traceback (most recent call last):",
    '[rank3]:   File "/home/ana/llm/train.py", line 188, in main',
    "[rank3]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
]
KEYERROR = [
    "[rank9]: Traceback (most recent call last):",
    '[rank9]:   File "/home/ana/llm/data.py", line 50, in __getitem__',
    "[rank9]: KeyError: '<|im_sep|>'",
]


def root_type(lines: list[str]) -> str:
    found = find_root(lines)
    assert found is not None
    return found.exc.exc_type.rsplit(".", 1)[-1]


def test_a_survived_traceback_does_not_outrank_the_nccl_error_that_ended_the_job() -> None:
    assert root_type(CAUGHT + NCCL) == "DistBackendError"


def test_a_survived_traceback_does_not_outrank_a_ranks_gpu_error() -> None:
    assert root_type(CAUGHT + ECC) == "RuntimeError"


def test_the_rank_that_failed_first_outranks_the_nccl_errors_it_caused() -> None:
    assert root_type(KEYERROR + NCCL) == "KeyError"
    assert root_type(ECC + KEYERROR) == "RuntimeError"  # rank 3 failed first


def test_a_ranks_own_last_traceback_is_what_ended_it() -> None:
    """Rank 9 printed a KeyError it survived (a skipped sample), then died of NCCL: its end
    is the NCCL error, not a real error of the program."""
    rank_9_nccl = [line.replace("rank0", "rank9") for line in NCCL]
    assert root_type(KEYERROR + rank_9_nccl) == "DistBackendError"


def test_unprefixed_output_is_read_by_its_last_traceback() -> None:
    """A requeued job's file appended to, with no stamps to tell the runs apart: run 1's
    ECC error, then run 2's own KeyError."""
    run_1 = [line.removeprefix("[rank3]: ") for line in ECC]
    run_2 = [line.removeprefix("[rank9]: ") for line in KEYERROR]
    assert root_type(run_1 + ["step 1 loss 9.9"] + run_2) == "KeyError"
