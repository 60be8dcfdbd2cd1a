"""The root exception of a merged multi-node log: torchrun's teardown is collateral, the
earliest real error wins over later NCCL tracebacks, a traceback keeps no time borrowed from
an older line, and `srun --label` over torch's `[rankN]:` still shows the traceback."""

from __future__ import annotations

from datetime import UTC, datetime

from slurm_triage.attribution import attribute, decode_tail, job_window, tracebacks
from slurm_triage.attribution.logscan import scan_log
from slurm_triage.attribution.matcher import classify_exception
from slurm_triage.attribution.tiers import Tier
from slurm_triage.evidence import Fact, ProcessExit, RootException, SlurmState, Source
from slurm_triage.job_state import JobState
from slurm_triage.taxonomy import Cause
from tests.torchrun import child_failed

END = datetime(2026, 11, 24, 11, 40, 30, tzinfo=UTC).timestamp()
MIB = 1 << 20
SIGTERM_TEARDOWN = [
    "W1124 11:40:01.000000 999 torch/distributed/elastic/agent/server/api.py:704] Received "
    "Signals.SIGTERM death signal, shutting down workers",
    "Traceback (most recent call last):",
    '  File "/opt/conda/bin/torchrun", line 33, in <module>',
    "    sys.exit(load_entry_point('torch==2.3.0', 'console_scripts', 'torchrun')())",
    '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/multiprocessing/'
    'api.py", line 79, in _terminate_process_handler',
    '    raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)',
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 999 got signal: 15",
]
NCCL = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:2006, remote process exited or there was a network error, NCCL "
    "version 2.20.5"
)


def _summary(host: str, rank: int, exitcode: int, traceback: str) -> list[str]:
    return child_failed(
        host, rank, rank % 4, exitcode=exitcode, traceback=traceback, time="2026-11-24_11:40:00"
    )


def _tb(prefix: str, *body: str) -> list[str]:
    return [
        prefix + line
        for line in (
            "Traceback (most recent call last):",
            '  File "/home/ana/llm/train.py", line 188, in main',
            "    batch = collate(samples, vocab)",
            *body,
        )
    ]


def _failed(lines: list[str]) -> tuple[list[Fact], RootException | None]:
    scan = scan_log(lines, node=None, year=2026)
    facts: list[Fact] = [
        SlurmState(time=END, source=Source.ROOT, state=JobState.FAILED),
        ProcessExit(time=END, source=Source.ROOT, exit_code=1),
        *scan.facts,
    ]
    roots = [f for f in scan.facts if isinstance(f, RootException)]
    return facts, roots[0] if roots else None


def test_torchrun_signal_exception_is_a_death_signal_not_a_program_error():
    """torchrun's `SignalException` (srun's SIGTERM) reads as a signal: no cause, EXIT tier."""
    cause, role, _ = classify_exception(
        "torch.distributed.elastic.multiprocessing.api.SignalException",
        "Process 999 got signal: 15",
    )
    assert (cause, role) == (Cause.UNKNOWN, Tier.EXIT)


def test_teardown_after_a_watchdog_abort_leaves_the_nccl_timeout():
    """The reviewer's s19: node2's ranks hit the watchdog, its torchrun reports SIGABRT, then
    node1's torchrun is torn down by srun: the job is an NCCL timeout, not the user's bug."""
    watchdog = [
        f"[rank{r}]:[E1124 11:40:00.123456 3456 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog "
        "caught collective operation timeout: WorkNCCL(SeqNum=401, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."
        for r in range(4, 8)
    ]
    lines = [
        *watchdog,
        *_summary("node2", 4, -6, "Signal 6 (SIGABRT) received by PID 3456"),
        "srun: error: node2: task 1: Exited with exit code 1",
        "srun: Terminating StepId=7.0",
        *SIGTERM_TEARDOWN,
        "srun: error: node1: task 0: Exited with exit code 1",
    ]
    facts, root = _failed(lines)
    assert root is not None and root.exc_type.endswith("ChildFailedError")
    assert (root.node, root.signal) == ("node2", 6)
    verdict = attribute(facts, window=job_window(END))
    assert verdict.cause is Cause.NCCL_TIMEOUT


def test_teardown_after_an_ecc_error_blames_the_node_of_the_ecc_error():
    """The reviewer's s18: rank 5's uncorrectable ECC error on node2, then node1's teardown:
    the ECC error is the root and names node2 (through torchrun's summary)."""
    lines = [
        *_tb("[rank5]: ", "RuntimeError: CUDA error: uncorrectable ECC error encountered"),
        *_summary(
            "node2",
            5,
            1,
            "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
        ),
        "srun: error: node2: task 1: Exited with exit code 1",
        "slurmstepd: error: *** STEP 7.0 ON node1 CANCELLED AT 2026-11-24T11:40:01 DUE TO TASK "
        "FAILURE ***",
        *SIGTERM_TEARDOWN,
        "srun: error: node1: task 0: Exited with exit code 1",
    ]
    facts, root = _failed(lines)
    assert root is not None and root.message.endswith("uncorrectable ECC error encountered")
    assert root.node == "node2"
    verdict = attribute(facts, window=job_window(END))
    assert (verdict.cause, verdict.nodes) == (Cause.GPU_MEMORY, ("node2",))


def test_teardown_alone_is_still_read_and_blames_nobody():
    """A log whose only traceback is the teardown keeps it as the root, read as a signal."""
    facts, root = _failed(SIGTERM_TEARDOWN)
    assert root is not None and root.exc_type.endswith("SignalException")
    assert attribute(facts).cause is Cause.UNKNOWN


def _keyerror_then_nccl_everywhere() -> list[str]:
    """The reviewer's s5: rank 9's KeyError, then 15 ranks' NCCL errors after it."""
    lines = _tb("[rank9]: ", "KeyError: '<|im_sep|>'")
    lines.append("srun: error: node2: task 9: Exited with exit code 1")
    for rank in (*range(9), *range(10, 16)):
        lines += _tb(
            f"[rank{rank}]: ",
            NCCL,
            "ncclRemoteError: A call failed possibly due to a network error or a remote process "
            "exiting prematurely.",
        )
    lines.append("srun: error: node1: tasks 0-7: Exited with exit code 1")
    lines.append("srun: error: node2: tasks 8,10-15: Exited with exit code 1")
    return lines


def test_the_earliest_real_error_wins_over_later_nccl_tracebacks():
    """A user's KeyError followed by every other rank's NCCL error is the user's KeyError, on
    the node srun ran rank 9 on: not a network fault requeued until its budget runs out."""
    facts, root = _failed(_keyerror_then_nccl_everywhere())
    assert root is not None and (root.exc_type, root.rank, root.node) == ("KeyError", 9, "node2")
    verdict = attribute(facts)
    assert (verdict.cause, verdict.nodes) == (Cause.USER_CODE, ("node2",))


def test_without_a_real_error_the_last_traceback_still_wins():
    """NCCL tracebacks only: the root is the last one, as before."""
    lines = _tb("[rank0]: ", NCCL) + _tb("[rank1]: ", NCCL.replace("2006", "2007"))
    root = tracebacks.find_root(lines)
    assert root is not None and root.rank == 1 and "2007" in root.exc.message


def test_a_summary_naming_the_failed_rank_gives_its_node():
    """torchrun's summaries are per node; the one naming the earliest error's rank gives its
    host, even when a later node's summary (SIGABRT) is the last traceback."""
    lines = [
        *_tb("[rank5]: ", "KeyError: '<|im_sep|>'"),
        *_summary("gpu-b01", 5, 1, "To enable traceback see: https://pytorch.org/docs"),
        *_summary("gpu-b02", 13, -6, "Signal 6 (SIGABRT) received by PID 3456"),
    ]
    root = tracebacks.find_root(lines)
    assert root is not None
    assert (root.exc.exc_type, root.rank, root.host, root.exit_code) == (
        "KeyError",
        5,
        "gpu-b01",
        1,
    )


def test_a_dataloader_workers_original_traceback_is_where_the_chain_started():
    """torch re-raises a worker's KeyError as "Caught KeyError in DataLoader worker process
    0." with the worker's traceback after it: the worker's KeyError is the root."""
    lines = [
        "Traceback (most recent call last):",
        '  File "/home/al/asr/train.py", line 140, in <module>',
        "    for batch in train_loader:",
        '  File "/opt/venv/lib/python3.11/site-packages/torch/_utils.py", line 733, in reraise',
        "    raise exception",
        "KeyError: Caught KeyError in DataLoader worker process 0.",
        "Original Traceback (most recent call last):",
        '  File "/home/al/asr/data.py", line 58, in __getitem__',
        '    return {"audio": wav, "text": row["transcript"]}',
        "KeyError: 'transcript'",
    ]
    root = tracebacks.find_root(lines)
    assert root is not None and root.exc.message == "'transcript'"


def test_a_mib_of_distinct_nccl_tracebacks_is_classified_in_one_scan(monkeypatch):
    """A user's 1 MiB of distinct NCCL tracebacks before a KeyError: every exception is
    classified by one needle scan over all of them, none one at a time."""
    lines = []
    for i in range(MIB // 120):
        lines += [
            f"[rank{i % 4096}]: Traceback (most recent call last):",
            f"[rank{i % 4096}]: {NCCL} {i}",
        ]
    lines += _tb("[rank7]: ", "KeyError: 'x'")
    one_at_a_time: list[str] = []
    monkeypatch.setattr(
        tracebacks,
        "classify_exception",
        lambda t, m: one_at_a_time.append(t) or classify_exception(t, m),
    )
    root = tracebacks.find_root(lines)
    assert root is not None and root.exc.exc_type == "KeyError"
    assert one_at_a_time == []


def test_a_mib_of_torchrun_summaries_reads_each_line_a_few_times_at_most(monkeypatch):
    """1 MiB of `ChildFailedError` lines (each a summary with nothing after it): each summary
    is read up to the next one, never 400 lines past it."""
    lines = decode_tail(
        b"ChildFailedError\nRoot Cause\n  rank : 1\n" * (MIB // 40), whole_file=True
    )
    read = 0
    real_fields = tracebacks._summary_fields

    def counting(lines: list[str], start: int, stop: int):
        nonlocal read
        read += max(0, min(stop, start + 400, len(lines)) - start)
        return real_fields(lines, start, stop)

    monkeypatch.setattr(tracebacks, "_summary_fields", counting)
    assert tracebacks.find_root(lines) is not None
    assert read <= 3 * len(lines)


def test_a_traceback_keeps_no_time_from_an_older_progress_line():
    """The reviewer's s4b: a progress line 15 minutes before the KeyError's traceback is no
    time of the KeyError's, and must not drop it from the job's window."""
    lines = [
        "2026-11-24 11:25:30,123 - INFO - train - step 400 loss 3.11",
        "Traceback (most recent call last):",
        '  File "/home/ana/train.py", line 188, in main',
        "    batch = collate(samples, vocab)",
        "KeyError: '<|im_sep|>'",
    ]
    facts, root = _failed(lines)
    assert root is not None and root.time is None
    verdict = attribute(facts, window=job_window(END))
    assert verdict.cause is Cause.USER_CODE


def test_a_logged_exception_takes_its_records_time():
    """`logger.exception` prints its record's line, then the traceback: that time is the
    exception's, across other tasks' lines in between."""
    lines = [
        "[rank3]: 2026-11-24 11:39:58,500 - ERROR - train - batch 17 failed",
        "[rank1]: 2026-11-24 11:39:58,900 - INFO - train - step 400",
        *_tb("[rank3]: ", "KeyError: 'x'"),
    ]
    _, root = _failed(lines)
    assert (
        root is not None
        and root.time == datetime(2026, 11, 24, 11, 39, 58, 500000, UTC).timestamp()
    )


def test_a_date_in_the_exception_message_is_no_time():
    """A path holding a date in the exception's own message is the program's text."""
    lines = _tb("", "FileNotFoundError: [Errno 2] No such file: '/ckpt/2024-01-02_03:04:05/m.pt'")
    _, root = _failed(lines)
    assert root is not None and root.time is None


def test_srun_label_over_torch_rank_prefix_still_shows_the_traceback():
    """`srun --label` puts `1: ` before torch's `[rank9]: `: the traceback is read, keyed by
    srun's task id, so srun's `task 1` line names its node."""
    lines = [
        "1: [rank9]: Traceback (most recent call last):",
        '1: [rank9]:   File "/home/ana/llm/train.py", line 188, in main',
        "1: [rank9]:     batch = collate(samples, vocab)",
        "1: [rank9]: KeyError: '<|im_sep|>'",
        "srun: error: node2: task 1: Exited with exit code 1",
    ]
    root = tracebacks.find_root(lines)
    assert root is not None and (root.exc.exc_type, root.rank) == ("KeyError", 1)
    assert tracebacks.split_prefix(lines[1]) == (
        "1",
        '  File "/home/ana/llm/train.py", line 188, in main',
    )
    _, fact = _failed(lines)
    assert fact is not None and fact.node == "node2"
