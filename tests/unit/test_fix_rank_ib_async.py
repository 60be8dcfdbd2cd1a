"""NCCL's InfiniBand async-event lines in every NCCL version's words: an HCA port error or a
dead HCA blames the node NCCL printed it on; the events of a healthy fabric blame nothing.

The texts are NCCL's WARN formats (src/transport/net_ib.cc, net_ib/common.cc at v2.19.3-1,
v2.21.5-1, v2.23.4-1, v2.27.3-1, v2.28.9-1, v2.30.7-1) with the event names rdma-core's
ibv_event_type_str() gives."""

from __future__ import annotations

import pytest

from slurm_triage.attribution import attribute, scan_lines
from slurm_triage.evidence import LogHit
from slurm_triage.taxonomy import Cause

HEAD = "node13:8811:8990 [3] NCCL WARN NET/IB : "

FAULTS = {
    "2.12-2.19": "Got async event : port error",
    "2.12-2.19 device": "Got async event : local catastrophic error",
    "2.20-2.22": "mlx5_3:1 Got async event : port error",
    "2.23-2.28.3 non-fatal": "mlx5_3:1 Got async error event: port error",
    "2.23+ fatal": "mlx5_3:1 async fatal event: local catastrophic error",
    "2.28.7+ non-fatal": "mlx5_3:1 Got non-fatal async event: port error(10)",
}

# Events of the same lines that are no fault of the node, and NCCL's per-connection errors.
NOT_FAULTS = {
    "port active 2.19": "Got async event : port active",
    "port active 2.30": "mlx5_3:1 Got non-fatal async event: port active(9)",
    "LID change": "mlx5_3:1 Got async event : LID change",
    "GID table change 2.23": "mlx5_3:1 Got async error event: GID table change",
    "GID table changed 2.30": "mlx5_3:1 GID table changed",
    "client reregistration": "mlx5_3:1 Got non-fatal async event: client reregistration(17)",
    "SM change": "mlx5_3:1 Got async error event: SM change",
    "P_Key change": "mlx5_3:1 Got async event : P_Key change",
    "QP fatal": "mlx5_3:1 async fatal event on QP (0x55d5c8a0f0): "
    "local work queue catastrophic error",
    "CQ error": "mlx5_3:1 async fatal event on CQ (0x55d5c8a0e0): CQ error",
}


def _ib_hits(line: str) -> list[LogHit]:
    return [
        f
        for f in scan_lines([line], node=None)
        if isinstance(f, LogHit) and f.signature == "nccl.ib_async_event"
    ]


@pytest.mark.parametrize("event", FAULTS.values(), ids=FAULTS.keys())
def test_every_nccl_version_of_a_port_error_or_dead_hca_names_its_node(event):
    """Each version's words for a port error or a catastrophic HCA error hit the IB
    signature on the node of NCCL's `host:pid:tid` prefix (2.23+ were missed before)."""
    (hit,) = _ib_hits(HEAD + event)
    assert (hit.node, hit.cause) == ("node13", Cause.INFINIBAND)


@pytest.mark.parametrize("event", NOT_FAULTS.values(), ids=NOT_FAULTS.keys())
def test_events_of_a_healthy_fabric_and_connection_errors_are_no_ib_fault(event):
    """A port coming back, the subnet manager's changes and one QP's error blame no node."""
    assert _ib_hits(HEAD + event) == []


def test_a_fatal_hca_event_in_a_merged_log_blames_its_node_over_the_nccl_errors():
    """NCCL 2.23+: node13's dead HCA is the cause; every rank's NCCL error is its symptom."""
    lines = [
        "node12:7711:7890 [0] NCCL INFO comm 0x55d5c8a000 rank 0 nranks 16 cudaDev 0 - Init "
        "COMPLETE",
        HEAD + FAULTS["2.23+ fatal"],
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
        "c10d/NCCLUtils.hpp:275, remote process exited or there was a network error, NCCL "
        "version 2.23.4",
        "srun: error: node12: task 0: Exited with exit code 1",
        "srun: error: node13: task 1: Exited with exit code 1",
    ]
    result = attribute(scan_lines(lines, node=None))
    assert (result.cause, result.nodes) == (Cause.INFINIBAND, ("node13",))
