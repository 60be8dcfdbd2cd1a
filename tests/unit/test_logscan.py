"""Bounded log scanning: tails of huge files, bad bytes, endless lines, traceback roots."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import pytest

from slurm_triage.attribution import LogReadError, decode_tail, read_tail, scan_file, scan_lines
from slurm_triage.attribution.tracebacks import find_root
from slurm_triage.evidence import LogHit, RootException
from tests.torchrun import child_failed

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"


def _roots(lines):
    return [f for f in scan_lines(lines, node="n1") if isinstance(f, RootException)]


def _hits(lines):
    return {f.signature: f for f in scan_lines(lines, node="n1") if isinstance(f, LogHit)}


def test_tail_of_a_large_sparse_file_reads_only_the_end(tmp_path):
    """A 2 GiB sparse file: the tail is read by seeking, fast, and the real end is found."""
    path = tmp_path / "big.out"
    with open(path, "wb") as handle:
        handle.truncate(2 << 30)
        handle.seek(0, os.SEEK_END)
        handle.write(f'Traceback (most recent call last):\n  File "t.py", line 1\n{OOM}\n'.encode())
    start = time.perf_counter()
    facts = scan_file(path, node="n1", tail_bytes=1 << 20)
    assert time.perf_counter() - start < 2.0
    assert any(isinstance(f, LogHit) and f.signature == "torch.cuda_oom" for f in facts)
    data, whole = read_tail(path, 1 << 20)
    assert len(data) == 1 << 20 and not whole


def test_invalid_utf8_and_nuls_are_tolerated():
    """Undecodable bytes become replacement characters; NUL holes vanish; matching still works."""
    data = (
        b"\xff\xfe garbage \x80\n\x00\x00\x00" + b"RuntimeError: CUDA error: misaligned address\n"
    )
    lines = decode_tail(data, whole_file=True)
    assert "\ufffd" in lines[0]
    assert "misaligned" in lines[1] and "\x00" not in lines[1]
    assert "cuda.misaligned_address" in _hits(lines)


def test_partial_first_line_of_a_tail_is_dropped_unless_it_is_the_only_line():
    """A tail that starts mid-line drops that fragment; a single endless line is kept."""
    assert decode_tail(b"ment of a line\nfull line\n", whole_file=False) == ["full line", ""]
    assert decode_tail(b"x" * 10, whole_file=False) == ["x" * 10]


def test_a_50_mb_single_line_is_bounded(tmp_path):
    """One 50 MB line: only the tail is read and the kept line is capped, its end preserved."""
    path = tmp_path / "oneline.out"
    path.write_bytes(b"#" * (50 << 20) + b" No space left on device")
    data, whole = read_tail(path, 4 << 20)
    lines = decode_tail(data, whole_file=whole, max_line_chars=8192)
    assert len(lines) == 1 and len(lines[0]) <= 8192 + 5
    assert lines[0].endswith("No space left on device")
    assert "fs.no_space" in _hits(lines)


def test_carriage_returns_split_progress_bars():
    """tqdm's \\r redraws do not glue the traceback onto one endless line."""
    lines = decode_tail(
        b"10%|#  |\r20%|## |\rTraceback (most recent call last):\n"
        b'  File "x.py", line 1\nValueError: bad\n',
        whole_file=True,
    )
    assert _roots(lines)[0].exc_type == "ValueError"


def test_unreadable_paths_are_one_line_errors(tmp_path):
    """Missing files, directories and FIFOs (even with no writer) raise LogReadError at once."""
    with pytest.raises(LogReadError, match="No such file"):
        read_tail(tmp_path / "missing.out")
    with pytest.raises(LogReadError, match="not a regular file"):
        read_tail(tmp_path)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(LogReadError, match="not a regular file"):
        read_tail(fifo)


def test_symlinks_can_be_refused(tmp_path):
    """Root reading a user's log refuses a symlink (it could point at /etc/shadow)."""
    target = tmp_path / "real.out"
    target.write_text("hello\n")
    link = tmp_path / "link.out"
    link.symlink_to(target)
    assert read_tail(link)[0] == b"hello\n"
    with pytest.raises(LogReadError, match="cannot read"):
        read_tail(link, follow_symlinks=False)


def test_direct_cause_chain_root_is_the_first_exception():
    """`raise X from Y`: the root is Y."""
    lines = [
        "Traceback (most recent call last):",
        '  File "a.py", line 1',
        "KeyError: 'ids'",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        '  File "a.py", line 3',
        "RuntimeError: failed to collate",
    ]
    (root,) = _roots(lines)
    assert (root.exc_type, root.message) == ("KeyError", "'ids'")


def test_during_handling_chain_prefers_the_real_error_over_a_benign_one():
    """A queue.Empty in the chain is background; the real error behind it is the root."""
    lines = [
        "Traceback (most recent call last):",
        '  File "q.py", line 1',
        "_queue.Empty",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "d.py", line 2',
        "RuntimeError: DataLoader worker (pid(s) 61) exited unexpectedly",
    ]
    assert _roots(lines)[0].exc_type == "RuntimeError"


def test_during_handling_chain_prefers_a_specific_error_anywhere_in_the_chain():
    """ENOSPC raised while handling a save failure is the root (it names the real problem)."""
    lines = [
        "Traceback (most recent call last):",
        '  File "s.py", line 1',
        "RuntimeError: PytorchStreamWriter failed writing file data/1: file write failed",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "s.py", line 3',
        "OSError: [Errno 28] No space left on device",
    ]
    assert _roots(lines)[0].exc_type == "OSError"


def test_earliest_real_error_wins_and_rank_prefixes_are_separated():
    """Interleaved `[rankN]:` tracebacks are parsed per rank; the program's own error (rank
    1's CUDA OOM) is the root, not the NCCL error it caused on rank 0, which ends later."""
    lines = [
        "[rank1]: Traceback (most recent call last):",
        "[rank0]: Traceback (most recent call last):",
        '[rank1]:   File "t.py", line 9',
        '[rank0]:   File "t.py", line 9',
        f"[rank1]: {OOM}",
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: x, remote process exited "
        "or there was a network error, NCCL version 2.20.5",
    ]
    (root,) = _roots(lines)
    assert root.exc_type == "torch.OutOfMemoryError"
    assert {"torch.cuda_oom", "nccl.remote_error"} <= set(_hits(lines))


# torchrun's summary up to the failed rank's line, the rest left to each test
SUMMARY_HEAD = child_failed("node07.cluster", 3, 3)[:15]


def test_childfailederror_signal_root_cause():
    """A torchrun summary whose root cause died of a signal reports rank, exit code and signal."""
    lines = SUMMARY_HEAD + [
        "  exitcode  : -9 (pid: 1234)",
        "  error_file: <N/A>",
        "  traceback : Signal 9 (SIGKILL) received by PID 1234",
        "=" * 60,
    ]
    root = find_root(lines)
    assert (root.rank, root.exit_code, root.signal, root.host) == (3, -9, 9, "node07.cluster")
    (fact,) = [f for f in scan_lines(lines, node=None) if isinstance(f, RootException)]
    assert fact.node == "node07" and fact.signal == 9
    assert fact.time == datetime(2024, 11, 21, 10, 0, 5, tzinfo=UTC).timestamp()


def test_childfailederror_embedded_traceback_root_cause():
    """With @record, the child's traceback is inside the summary; its exception is the root."""
    lines = SUMMARY_HEAD + [
        "  exitcode  : 1 (pid: 1234)",
        "  error_file: /tmp/torchelastic/attempt_0/3/error.json",
        "  traceback : Traceback (most recent call last):",
        '    File "t.py", line 4, in f',
        "      x = g()",
        f"  {OOM}",
        "",
        "=" * 60,
    ]
    (root,) = _roots(lines)
    assert root.exc_type == "torch.OutOfMemoryError" and root.rank == 3


def test_childfailederror_without_record_falls_back_to_the_failed_ranks_traceback():
    """'To enable traceback see' → the failed rank's own earlier traceback is the root."""
    rank3 = [
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "t.py", line 2',
        "[rank3]: ValueError: sequence too long",
    ]
    rank0 = [
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "t.py", line 2',
        "[rank0]: torch.distributed.DistBackendError: NCCL error",
    ]
    lines = (
        rank3
        + rank0
        + SUMMARY_HEAD
        + [
            "  exitcode  : 1 (pid: 1)",
            "  error_file: <N/A>",
            "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html",
            "=" * 60,
        ]
    )
    (root,) = _roots(lines)
    assert (root.exc_type, root.rank) == ("ValueError", 3)


def test_hit_times_come_from_the_line_or_just_before():
    """A watchdog line's glog time is its time; a traceback takes the log line just before it."""
    lines = [
        "[rank0]:[E1121 10:00:05.123456 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1) ran for 600001 milliseconds",
        "2024-11-21 10:00:09,500 - train - ERROR - batch failed",
        "Traceback (most recent call last):",
        '  File "a.py", line 1',
        '  File "b.py", line 2',
        '  File "c.py", line 3',
        "ValueError: bad",
    ]
    facts = scan_lines(lines, node="n1", year=2024)
    base = datetime(2024, 11, 21, 10, 0, 0, tzinfo=UTC).timestamp()
    watchdog = next(f for f in facts if isinstance(f, LogHit))
    root = next(f for f in facts if isinstance(f, RootException))
    assert watchdog.time == pytest.approx(base + 5.123456)
    assert root.time == base + 9.5


def test_hits_are_counted_once_per_signature_and_node():
    """Repeated lines make one fact with a count, not one fact per line."""
    lines = ["Connection reset by peer"] * 5 + ["srun: error: node02: task 3: Out Of Memory"]
    hits = _hits(lines)
    assert hits["net.connection_reset"].count == 5
    assert hits["srun.out_of_memory"].node == "node02"


def test_the_word_xid_in_a_job_log_is_not_a_signature():
    """A job log quoting kernel XID lines yields no hardware evidence."""
    lines = ["$ dmesg | grep -i xid", "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."]
    assert _hits(lines) == {}


def test_needles_are_literals_every_match_must_contain():
    """The prefilter never hides a match: over every corpus line, a regex match implies a needle."""
    from pathlib import Path

    from slurm_triage.attribution import SIGNATURES
    from slurm_triage.attribution.matcher import _NEEDLES

    corpus = Path(__file__).resolve().parents[1] / "corpus"
    lines = [ln for f in sorted(corpus.glob("*/*.out")) for ln in f.read_text().splitlines()]
    matched = 0
    for sig in SIGNATURES:
        for line in lines:
            if sig.pattern.search(line):
                matched += 1
                assert any(n in line for n in _NEEDLES[sig.name]), (sig.name, line)
    assert matched > 100


@pytest.mark.parametrize(
    ("regex", "needles"),
    [
        (r"\*\*\* (?:JOB|STEP) \S+ CANCELLED AT \S+ DUE TO TIME LIMIT", (" DUE TO TIME LIMIT",)),
        (r"srun: error: (?P<host>[\w.-]+): tasks? [\d,-]+: Out Of Memory", (": Out Of Memory",)),
        (r"Stale file handle|\[Errno 116\]", ("Stale file handle", "[Errno 116]")),
        (r"DataLoader worker \(pid\(?s?\)?[^)]*\)? is killed", ("DataLoader worker (pid",)),
    ],
)
def test_needle_extraction(regex, needles):
    """Needles: the longest plain run of each alternative, escapes decoded, optionals out."""
    from slurm_triage.attribution.matcher import needles_of

    assert needles_of(regex) == needles


def _runs_a_character_at_a_time(alternative: str) -> list[str]:
    """The needles' first reader, kept as the reference: one character (or escape, class,
    count) at a time, the rules spelt out per character."""
    escapes = set(".()[]{}*+?|^$\\/-'\"` :,=<>#")

    def class_end(i: int) -> int:
        j = i + 1
        while j < len(alternative) and alternative[j] != "]":
            j += 2 if alternative[j] == "\\" else 1
        return j

    def token(i: int) -> tuple[str, int]:
        char = alternative[i]
        if char == "\\":
            escaped = alternative[i + 1] if i + 1 < len(alternative) else ""
            return (escaped if escaped in escapes else ""), 2
        if char == "[":
            return "", class_end(i) + 1 - i
        if char == "{":
            close = alternative.find("}", i)
            return "", (close + 1 - i) if close > 0 else 1
        return ("", 1) if char in "().^$+*?|" else (char, 1)

    runs, run, i, depth, size = [], "", 0, 0, len(alternative)
    while i < size:
        literal, width = token(i)
        char = alternative[i]
        depth += {"(": 1, ")": -1}.get(char, 0) if not literal or depth else 0
        after = alternative[i + width] if i + width < size else ""
        if depth or char == ")" or (after and after in "?*{"):
            literal = ""
        if literal:
            run += literal
        if not literal or after == "+":
            runs.append(run)
            run = ""
        i += width
    runs.append(run)
    return runs


def test_needles_read_a_piece_at_a_time_are_the_same_runs():
    """The literal runs, read a run of plain characters at once (issue 20: the needles are
    derived at every start), are the per-character reader's, over every signature and
    30,000 random strings of regex syntax."""
    import random

    from slurm_triage.attribution import SIGNATURES
    from slurm_triage.attribution.matcher import _literal_runs, _split_top

    alternatives = [a for sig in SIGNATURES for a in _split_top(sig.regex)]
    pick = random.Random(20).choice
    alternatives += [
        "".join(pick("ab c\\[](){}.^$+*?|-:='#") for _ in range(n % 15)) for n in range(30000)
    ]
    for alternative in alternatives:
        mine = [run for run in _literal_runs(alternative) if run]
        assert mine == [r for r in _runs_a_character_at_a_time(alternative) if r], alternative


def test_a_pattern_without_a_usable_literal_is_rejected():
    """An alternative with no literal of 4+ characters cannot be prefiltered: refuse it."""
    from slurm_triage.attribution.matcher import needles_of

    with pytest.raises(ValueError, match="no literal"):
        needles_of(r"good literal|\d+ ab")


def test_signatures_compile_on_first_use_only():
    """Importing the tables compiles no regex (every EpilogSlurmctld and classify pays for
    the import); a scan compiles only the signatures whose needles its lines hold, and every
    signature still compiles (issue 20)."""
    import json
    import subprocess
    import sys

    from slurm_triage.attribution import SIGNATURES

    code = (
        "import json\n"
        "from slurm_triage.attribution.signatures import SIGNATURES\n"
        "from slurm_triage.attribution.matcher import scan_text\n"
        "before = [s.name for s in SIGNATURES if 'pattern' in vars(s)]\n"
        "hits = [s.name for _, s, _ in scan_text("
        "'x\\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\\n')]\n"
        "after = [s.name for s in SIGNATURES if 'pattern' in vars(s)]\n"
        "print(json.dumps([before, hits, after]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, hits, after = json.loads(done.stdout)
    assert before == []
    assert hits and set(hits) <= set(after)
    assert len(after) < len(SIGNATURES) // 4
    assert all(sig.pattern.pattern == sig.regex for sig in SIGNATURES)


def test_the_needles_table_is_current():
    """needles_table.py holds what needles_of derives for every signature regex, and is the
    generator's text: after an edit of the signature table it fails until the file is
    written again (`python -m slurm_triage.attribution.matcher > .../needles_table.py`)."""
    from pathlib import Path

    from slurm_triage.attribution import SIGNATURES, matcher
    from slurm_triage.attribution.needles_table import NEEDLES

    assert {s.regex: matcher.needles_of(s.regex) for s in SIGNATURES} == NEEDLES
    assert {s.name: NEEDLES[s.regex] for s in SIGNATURES} == matcher._NEEDLES
    table = Path(matcher.__file__).with_name("needles_table.py")
    assert table.read_text() == matcher.needles_table_text()


def test_a_regex_missing_from_the_needles_table_is_derived(monkeypatch):
    """A stale table is slower, never wrong: a regex it lacks gets derived needles."""
    import importlib

    from slurm_triage.attribution import matcher, needles_table

    monkeypatch.setattr(needles_table, "NEEDLES", {})
    try:
        fresh = importlib.reload(matcher)
        assert {s.name: matcher.needles_of(s.regex) for s in fresh.SIGNATURES} == fresh._NEEDLES
    finally:
        monkeypatch.undo()
        importlib.reload(matcher)
