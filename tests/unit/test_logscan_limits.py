"""The scan's work is bounded per log, not per line: a user's 1 MiB output tail, read by the
decision as SlurmUser, cannot buy minutes of CPU with srun-shaped lines. The bound is
asserted by counting the work the scan reports (`LogScan`), never by timing it
(bench/bench_classify.py times it)."""

from __future__ import annotations

import itertools

import pytest

from slurm_triage import hostlist
from slurm_triage.attribution import attribute, decode_tail, scan_lines
from slurm_triage.attribution.logscan import MAX_SCAN_NAMES, LogScan, scan_log
from slurm_triage.evidence import LogHit, RootException
from slurm_triage.taxonomy import Cause

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total"
MIB = 1 << 20


def _tail(*lines: str) -> list[str]:
    """1 MiB of `lines` repeated, decoded as the decision decodes a job's output tail."""
    block = "".join(f"{line}\n" for line in lines)
    return decode_tail((block * (MIB // len(block))).encode(), whole_file=True)


def _hits(scan: LogScan, signature: str) -> dict[str | None, LogHit]:
    return {f.node: f for f in scan.facts if isinstance(f, LogHit) and f.signature == signature}


def test_a_mib_of_task_ranges_maps_only_the_tasks_the_log_asks_about():
    """The reviewer's 1 MiB of `tasks 0-65534` lines (214 s before): no range is expanded,
    only the one rank a line names gets a node, and the answer is the one it was."""
    lines = _tail("srun: error: n1: tasks 0-65534: Exited with exit code 1")
    lines.append(f"[rank65000]: {OOM}")
    scan = scan_log(lines, node=None)
    assert scan.task_ids_mapped == 1
    assert scan.names_expanded == 0 and not scan.cut_short()
    assert _hits(scan, "torch.cuda_oom").keys() == {"n1"}
    assert _hits(scan, "srun.task_exit")["n1"].count == MIB // 56


def test_a_mib_of_one_node_failure_list_expands_it_once():
    """The reviewer's 1 MiB of `Node failure on n[00001-16384]` (about 22 min before): the
    list is expanded once, not once per line, and every node still counts every line."""
    lines = _tail("srun: error: Node failure on n[00001-16384]")
    scan = scan_log(lines, node="n1")
    hits = _hits(scan, "srun.node_failure")
    assert scan.names_expanded == 16384 and not scan.cut_short()
    assert len(hits) == 16384 and {h.count for h in hits.values()} == {len(lines) - 1}


def test_distinct_node_lists_stop_at_the_scan_budget_and_say_so():
    """Lists that differ in every line share one budget: past it they are not expanded,
    the scan says how many it cut, and the nodes of the first lists still decide."""
    lines = [f"srun: error: Node failure on n[{i:06d}-{i + 16383:06d}]" for i in range(1, 4001)]
    scan = scan_log(lines, node=None)
    assert scan.names_expanded == MAX_SCAN_NAMES
    assert scan.lists_cut == 3999 and scan.cut_short()
    assert len(_hits(scan, "srun.node_failure")) == MAX_SCAN_NAMES
    verdict = attribute(list(scan.facts))
    assert verdict.cause is Cause.NODE_FAILURE and len(verdict.nodes) == MAX_SCAN_NAMES


def test_a_list_of_a_million_names_costs_the_budget_only():
    """`n[1-999999]` is counted, not expanded: the scan makes MAX_SCAN_NAMES names of it."""
    scan = scan_log(["srun: error: Node failure on n[1-999999]"], node=None)
    assert scan.names_expanded == MAX_SCAN_NAMES and scan.lists_cut == 1
    assert sorted(_hits(scan, "srun.node_failure"))[:3] == ["n1", "n10", "n100"]


def _job_4096_gpus() -> list[str]:
    """The end of a 512-node, 4,096-task job whose rank 1234 ran out of GPU memory: srun
    reports every node's tasks, as it does, and a node failure names a list."""
    lines = [f"2024-11-21 10:00:{s:02d},000 INFO step {s}" for s in range(50)]
    lines += [
        "[rank1234]: Traceback (most recent call last):",
        '[rank1234]:   File "train.py", line 42, in <module>',
        f"[rank1234]: {OOM}",
    ]
    lines += [
        f"srun: error: gpu{n:04d}: tasks {8 * (n - 1)}-{8 * n - 1}: Killed" for n in range(1, 513)
    ]
    lines.append("srun: error: Node failure on gpu[0001-0512]")
    return lines


def test_a_4096_gpu_job_is_read_in_full():
    """512 nodes and 4,096 tasks fit the budget: every node is named, nothing is cut, and
    the failed rank lands on the node srun ran it on."""
    scan = scan_log(_job_4096_gpus(), node=None)
    assert not scan.cut_short() and scan.names_expanded == 512
    killed, failed = _hits(scan, "srun.task_killed"), _hits(scan, "srun.node_failure")
    assert len(killed) == len(failed) == 512
    (root,) = [f for f in scan.facts if isinstance(f, RootException)]
    assert root.rank == 1234 and root.node == "gpu0155"
    assert _hits(scan, "torch.cuda_oom").keys() == {"gpu0155"}
    assert scan_lines(_job_4096_gpus(), node=None) == list(scan.facts)


@pytest.mark.parametrize(
    "line",
    [
        "srun: error: Node failure on n[" + "9" * 5000 + "]",
        "srun: error: Node failure on " + "a[1]" * 2000,
        "srun: error: n1: task " + "9" * 5000 + ": Exited with exit code 1",
    ],
    ids=["5000-digit-node", "2000-brackets", "5000-digit-task"],
)
def test_srun_shaped_text_that_no_srun_writes_does_not_crash_the_scan(line):
    """Numbers over int()'s 4300 digits and brackets past the recursion limit (ValueError
    and RecursionError before) read as text that names no list, and the scan goes on."""
    facts = scan_lines([line, f"[rank3]: {OOM}"], node="n1")
    assert any(isinstance(f, LogHit) and f.signature == "torch.cuda_oom" for f in facts)


def test_iter_names_is_lazy_and_agrees_with_expand():
    """Names come one at a time in `expand`'s order; bad text fails before any name."""
    for text in ("n[1-3,7],gpu-a[01-02]", "r[1-2]-n[01-03]x", "a,b,a", "n[1,1,2]"):
        assert list(dict.fromkeys(hostlist.iter_names(text))) == hostlist.expand(text)
    assert list(itertools.islice(hostlist.iter_names("n[1-999999]"), 3)) == ["n1", "n2", "n3"]
    for bad in ("n[1-", "n[3-1]", "a[1]" * 200, "n[" + "9" * 300 + "]"):
        with pytest.raises(hostlist.HostlistError):
            hostlist.iter_names(bad)
