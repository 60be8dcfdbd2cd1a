"""Which node a `[rankN]:` line of a merged batch log came from.

torch prints its global rank (`[rank5]:`, from the excepthook init_process_group installs);
srun's own lines name its task ids (`srun: error: node6: task 5: Exited ...`). The two are the
same number only when srun started one task per rank. Under `srun -N8 --ntasks-per-node=1
torchrun --nproc-per-node=4` rank 5 runs on node2 (node_rank 1 * 4 + local_rank 1) while
srun's task 5 is node6: blaming node6 would requeue the job onto the faulty node2. A rank
whose node the log does not show has no node."""

from __future__ import annotations

from slurm_triage.attribution import attribute, scan_lines
from slurm_triage.attribution.logscan import scan_log
from slurm_triage.evidence import LogHit, RootException
from slurm_triage.taxonomy import Cause
from tests.torchrun import child_failed

NODES = [f"node{i}" for i in range(1, 9)]
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
NCCL_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:2006, remote process exited or there was a network error, NCCL "
    "version 2.20.5"
)


def _rank5_ecc(prefix: str = "[rank5]: ") -> list[str]:
    return [
        f"{prefix}Traceback (most recent call last):",
        f'{prefix}  File "/home/ana/train.py", line 190, in main',
        f"{prefix}    loss.backward()",
        f"{prefix}{ECC}",
    ]


def _others(world: int = 32) -> list[str]:
    return [f"[rank{r}]: {NCCL_ERROR}" for r in range(world) if r != 5]


def _srun_one_task_per_node() -> list[str]:
    return [f"srun: error: {n}: task {i}: Exited with exit code 1" for i, n in enumerate(NODES)]


def _srun_four_tasks_per_node() -> list[str]:
    return [
        f"srun: error: {n}: tasks {4 * i}-{4 * i + 3}: Exited with exit code 1"
        for i, n in enumerate(NODES)
    ]


def _root(lines: list[str]) -> RootException:
    (root,) = [f for f in scan_lines(lines, node=None) if isinstance(f, RootException)]
    return root


def _hit_nodes(lines: list[str], signature: str) -> set[str | None]:
    return {
        f.node
        for f in scan_lines(lines, node=None)
        if isinstance(f, LogHit) and f.signature == signature
    }


def test_torchrun_per_node_without_its_summary_leaves_the_rank_without_a_node():
    """The reviewer's s13: srun's task 5 (node6) is not rank 5; no node rather than node6,
    so the requeue does not exclude a healthy node and keep the faulty one."""
    lines = _rank5_ecc() + _others() + _srun_one_task_per_node()
    assert _root(lines).node is None
    assert _hit_nodes(lines, "cuda.ecc_uncorrectable") == {None}
    result = attribute(scan_lines(lines, node=None))
    assert result.cause is Cause.GPU_MEMORY and "node6" not in result.nodes


def test_torchrun_per_node_with_only_the_failed_rank_printing_is_still_not_mapped():
    """srun's task ids reach rank 5 but each node ran one task: srun did not start the ranks."""
    lines = _rank5_ecc() + _srun_one_task_per_node()
    assert _root(lines).node is None


def test_torchrun_names_the_node_of_the_rank_it_ran():
    """torchrun's failure entry (`host : node2`, `rank : 5 (local_rank: 1)`) places rank 5,
    its traceback and its log hits on node2, not on srun's task 5."""
    lines = (
        _rank5_ecc()
        + _others()
        + child_failed("node2.cluster.local", 5, 1)
        + _srun_one_task_per_node()
    )
    assert _root(lines).node == "node2"
    assert _hit_nodes(lines, "cuda.ecc_uncorrectable") == {"node2"}
    result = attribute(scan_lines(lines, node=None))
    assert (result.cause, result.nodes) == (Cause.GPU_MEMORY, ("node2",))


def test_torchrun_entries_that_place_one_rank_on_two_nodes_place_it_on_neither():
    """An elastic restart can move a rank: two hosts for rank 5 name no node."""
    lines = (
        _rank5_ecc()
        + child_failed("node2", 5, 1)
        + child_failed("node3", 5, 1)
        + _srun_one_task_per_node()
    )
    assert _hit_nodes(lines, "cuda.ecc_uncorrectable") == {None}


def test_srun_one_task_per_gpu_maps_rank_to_task():
    """`srun -N8 --ntasks-per-node=4 python train.py`: srun ran the ranks, rank 5 is its
    task 5 on node2."""
    lines = _rank5_ecc() + _others() + _srun_four_tasks_per_node()
    assert _root(lines).node == "node2"
    assert _hit_nodes(lines, "cuda.ecc_uncorrectable") == {"node2"}
    result = attribute(scan_lines(lines, node=None))
    assert (result.cause, result.nodes) == (Cause.GPU_MEMORY, ("node2",))


def test_srun_one_task_per_gpu_named_task_by_task_maps_rank_to_task():
    """srun's lines one task at a time: two tasks on one node show srun ran the ranks."""
    srun = [f"srun: error: {NODES[t // 4]}: task {t}: Exited with exit code 1" for t in range(32)]
    assert _root(_rank5_ecc() + _others() + srun).node == "node2"


def test_one_gpu_per_node_maps_when_nccls_world_is_srun_tasks():
    """`srun -N8 --ntasks-per-node=1 python train.py` with one GPU each: NCCL's 8-rank world
    is srun's 8 tasks, so rank 5 is task 5; a 32-rank world is not."""
    nccl = "node1:4242:4300 [0] NCCL INFO comm 0x55d5c8a000 rank 0 nranks {} cudaDev 0 - Init"
    lines = [nccl.format(8)] + _rank5_ecc() + _others(8) + _srun_one_task_per_node()
    assert _root(lines).node == "node6"
    lines = [nccl.format(32)] + _rank5_ecc() + _srun_one_task_per_node()
    assert _root(lines).node is None


def test_a_rank_past_sruns_tasks_is_not_mapped():
    """Rank 31 printed, srun's tasks end at 7: ranks are not srun's tasks."""
    lines = _rank5_ecc() + [f"[rank31]: {NCCL_ERROR}"] + _srun_four_tasks_per_node()[:2]
    assert _root(lines).node is None


def test_srun_label_is_sruns_own_task_id_even_under_torchrun():
    """`srun --label`'s `1: ` is srun's task id: task 1's node, whatever torch's rank."""
    lines = (
        _rank5_ecc(prefix="1: [rank5]: ")
        + [f"1: W1121 10:00:00.412000 23400 torch/distributed/run.py:793] {'*' * 10}"]
        + _srun_one_task_per_node()
    )
    assert _root(lines).node == "node2"
    assert _hit_nodes(lines, "cuda.ecc_uncorrectable") == {"node2"}


def test_torchruns_tee_prefix_is_a_local_rank_and_names_no_node():
    """`[default1]:` (torchrun --tee) is local rank 1 on every node: srun's task 1 says
    nothing of where it ran."""
    lines = [f"[default1]: {ECC}"] + _srun_four_tasks_per_node()
    assert _hit_nodes(lines, "cuda.ecc_uncorrectable") == {None}


def test_only_the_tasks_asked_about_are_mapped():
    """The scan still maps only the task ids the log's lines ask about."""
    scan = scan_log(_rank5_ecc() + _srun_four_tasks_per_node(), node=None)
    assert scan.task_ids_mapped == 1
