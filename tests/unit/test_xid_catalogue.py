"""The XID catalogue against NVIDIA's (Xid Catalog as generated 2025-10-29 into
leptonai/gpud catalog_generated.go @4a8de33a): rows changed to follow it, XID 154's recovery
action, NVLink5 severity, and application XIDs that never blame a node."""

from __future__ import annotations

import pytest

from slurm_triage.attribution import attribute
from slurm_triage.attribution.xid import (
    APPLICATION_XIDS,
    CATALOGUE_VERSION,
    XID_CATALOGUE,
    NodeAction,
    Origin,
    lookup,
)
from slurm_triage.evidence import KernelEvent, KernelEventKind, NvmlCondition, NvmlFact, Source
from slurm_triage.taxonomy import Cause, Domain, info

A = NodeAction


def kernel_xid(number: int, rest: str = "x", node: str = "n1") -> KernelEvent:
    return KernelEvent(
        node=node,
        source=Source.ROOT,
        event=KernelEventKind.XID,
        xid=number,
        pci_bus_id="0000:3b:00",
        detail=f"NVRM: Xid (PCI:0000:3b:00): {number}, {rest}",
    )


@pytest.mark.parametrize(
    ("number", "mnemonic", "immediate", "investigatory"),
    [
        (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "IGNORE", "CONTACT_SUPPORT"),
        (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "IGNORE", "CONTACT_SUPPORT"),
        (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "WORKFLOW_XID_45",
         "Solo: RESTART_FM; Not Solo: IGNORE (follow other Xid)"),
        (46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU", "CONTACT_SUPPORT"),
        (54, "SILENT_RUNNING_PWR_REDUCED_CLOCKING", "CHECK_MECHANICALS", "CONTACT_SUPPORT"),
        (63, "INFOROM_DRAM_RETIREMENT_EVENT", "IGNORE", "IGNORE"),
        (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "RESET_GPU", "CONTACT_SUPPORT"),
        (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "RESTART_APP", "CHECK_APP/CUDA"),
        (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "RESTART_BM", "CONTACT_SUPPORT"),
        (93, "INFOROM_ERASE_LIMIT_EXCEEDED", "IGNORE", "CONTACT_SUPPORT"),
        (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "RESET_GPU", "CONTACT_SUPPORT"),
        (122, "SPI_PMU_RPC_READ_FAIL", "CONTACT_SUPPORT", ""),
        (123, "SPI_PMU_RPC_WRITE_FAIL", "CONTACT_SUPPORT", ""),
        (124, "SPI_PMU_RPC_ERASE_FAIL", "CONTACT_SUPPORT", ""),
        (125, "INFOROM_FS_ERROR", "CONTACT_SUPPORT", ""),
        (144, "NVLINK_SAW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
        (145, "NVLINK_RLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
        (146, "NVLINK_TLW_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
        (147, "NVLINK_TREX_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
        (148, "NVLINK_NVLPW_CTRL_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
        (149, "NVLINK_NETIR_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
        (150, "NVLINK_MSE_ERROR", "WORKFLOW_NVLINK5_ERR", "WORKFLOW_NVLINK5_ERR"),
        (154, "GPU_RECOVERY_ACTION_CHANGED", "XID_154",
         "N/A Informational only regarding another Xid"),
        (157, "RESOURCE_RETIREMENT_FAILURE", "IGNORE", "CONTACT_SUPPORT"),
        (162, "PSHC_REENGAGED", "", ""),
        (169, "SEC2_HALT_ERROR", "", ""),
    ],
)  # fmt: skip
def test_mnemonics_and_resolutions_are_nvidias(number, mnemonic, immediate, investigatory):
    """Mnemonics and NVIDIA's immediate → investigatory resolutions, as in the catalogue."""
    row = XID_CATALOGUE[number]
    assert (row.mnemonic, row.immediate, row.investigatory) == (
        mnemonic,
        immediate,
        investigatory,
    )


def test_catalogue_version_is_cited():
    """The module names the catalogue it follows."""
    assert "2025-10-29" in CATALOGUE_VERSION and "4a8de33a" in CATALOGUE_VERSION


@pytest.mark.parametrize(
    ("number", "cause", "action", "decisive"),
    [
        # IGNORE/IGNORE: a remap event follows an error with its own XID; the pending remap
        # is NVML's row_remap_pending.
        (63, Cause.GPU_MEMORY, A.WATCH, False),
        # RESET_GPU → CONTACT_SUPPORT: drain and reset, not RMA.
        (64, Cause.GPU_MEMORY, A.DRAIN_RESET, True),
        # RESTART_APP / CHECK_APP/CUDA: the application's.
        (69, Cause.CUDA_USER_ERROR, A.NONE, False),
        # RESET_GPU: the driver's, and the node needs a reset (TAXONOMY: gpu_driver).
        (109, Cause.GPU_DRIVER, A.DRAIN_RESET, True),
        # IGNORE now, CONTACT_SUPPORT to investigate: not decisive, watched.
        (157, Cause.GPU_MEMORY, A.WATCH, False),
        # CONTACT_SUPPORT as the immediate action: drain for a person to look.
        (123, Cause.GPU_DRIVER, A.DRAIN_INSPECT, True),
    ],
)
def test_changed_rows(number, cause, action, decisive):
    """The rows whose handling changed to follow NVIDIA's resolutions."""
    row = lookup(number)
    assert (row.cause, row.node_action, row.decisive) == (cause, action, decisive)


def test_xid_63_alone_is_not_a_cause_and_64_drains_for_reset():
    """A remap event explains nothing on its own; a remap failure is root-backed gpu_memory."""
    assert attribute([kernel_xid(63, "pid=1896, Row Remapper: New row marked")]).nodes == ()
    result = attribute([kernel_xid(64, "pid=1896, Row Remapper: failure")])
    assert (result.cause, result.nodes, result.root_backed) == (Cause.GPU_MEMORY, ("n1",), True)


def test_xid_109_is_a_driver_fault_needing_a_reset():
    """XID 109 (context switch timeout) is gpu_driver on its node, root-backed."""
    result = attribute([kernel_xid(109, "pid=44, name=python, Ch 00000010")])
    assert (result.cause, result.nodes, result.root_backed) == (Cause.GPU_DRIVER, ("n1",), True)


@pytest.mark.parametrize(
    ("text", "action", "decisive"),
    [
        # gpu.c: nvErrorLog_va(..., "GPU recovery action changed from 0x%x (%s) to 0x%x (%s)")
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
         A.DRAIN_RESET, True),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)",
         A.DRAIN_REBOOT, True),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", A.DRAIN_RESET, True),
        ("pid='<unknown>', name=<unknown>, GPU recovery action changed from 0x0 (None) to 0x4 "
         "(Drain and Reset)", A.DRAIN_RESET, True),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
         A.NONE, False),
        ("GPU recovery action changed from 0x0 (None) to 0x5 (Recover IMEX Domain)",
         A.WATCH, False),
        ("some other text", A.WATCH, False),
    ],
)  # fmt: skip
def test_xid_154_follows_the_new_recovery_action(text, action, decisive):
    """XID 154's node action is the new recovery action's (nvmlDeviceGpuRecoveryAction_t)."""
    for given in (text, f"NVRM: Xid (PCI:0009:01:00): 154, {text}"):
        row = lookup(154, given)
        assert (row.node_action, row.decisive) == (action, decisive)


def test_xid_154_back_to_none_explains_nothing_and_reboot_drains():
    """154 → None gives no finding; 154 → Node Reboot Required is root-backed gpu_driver."""
    back = kernel_xid(
        154, "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    )
    assert attribute([back]).nodes == ()
    reboot = kernel_xid(
        154, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    )
    result = attribute([reboot])
    assert (result.cause, result.nodes, result.root_backed) == (Cause.GPU_DRIVER, ("n1",), True)


FATAL = {
    # gpud kmsg.go / signatures.md §1.3 example
    149: "NETIR_LINK_EVT Fatal XC0 i0 Link 08 (0x004505c6 0x00000000 0x00000000 0x00000000 "
    "0x00000000 0x00000000)",
    144: "SAW_MVB Fatal XC0 i0 Link -1 (0x00000021 0x00000002 0x00000000 0x00000000)",
    150: "MSE_WATCHDOG Fatal XC0 i0 Link -1 (0x00000000 0x00000000 0x00000000 0x00000000)",
    145: "pid=1234, name=python, RLW_REMAP Fatal XC1 i0 Link 02 (0x00000082 0x00000040 "
    "0x00000000 0x00000000)",
}
NONFATAL = {
    # gpud health_state_test.go
    145: "RLW_CTRL Nonfatal XC0 i0 Link 00 (0x00000003 0x80000000 0x00000000 0x00000000)",
    149: "NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 0x00000000 0x00000000 0x00000000)",
    146: "TLW_TX Nonfatal XC0 i0 Link 05 (0x00000063 0x00000001 0x00000000 0x00000000)",
}


@pytest.mark.parametrize(("number", "rest"), FATAL.items())
def test_nvlink5_fatal_is_decisive(number, rest):
    """144-150 with `Fatal`: drain and reset, root-backed gpu_nvlink."""
    row = lookup(number, rest)
    assert (row.decisive, row.node_action, row.cause) == (True, A.DRAIN_RESET, Cause.GPU_NVLINK)
    result = attribute([kernel_xid(number, rest)])
    assert (result.cause, result.root_backed) == (Cause.GPU_NVLINK, True)


@pytest.mark.parametrize(("number", "rest"), NONFATAL.items())
def test_nvlink5_nonfatal_is_watched(number, rest):
    """144-150 with `Nonfatal`: watch only, never root-backed."""
    row = lookup(number, rest)
    assert (row.decisive, row.node_action) == (False, A.WATCH)
    assert attribute([kernel_xid(number, rest)]).root_backed is False


def test_nvlink5_severity_is_read_from_its_field_only():
    """`Fatal` elsewhere in the line (a process name, a free text) does not count."""
    assert not lookup(149, "pid=1, name=Fatal, Placeholder message").decisive
    assert not lookup(149, "NETIR_LINK_EVT Nonfatal XC0 i0 Link 08 (0x0 Fatal)").decisive
    assert not lookup(149).decisive


@pytest.mark.parametrize("number", [13, 31, 43, 45, 68, 69])
def test_application_xids_never_blame_a_node(number):
    """Application XIDs, even root-collected, never back a drain or blame hardware."""
    assert XID_CATALOGUE[number].origin in (Origin.APP, Origin.SIDE_EFFECT)
    assert lookup(number).node_action is A.NONE
    result = attribute([kernel_xid(number, "pid=8812, name=python, Graphics Exception")])
    assert result.root_backed is False
    assert info(result.cause).domain in (Domain.USER, Domain.UNKNOWN)
    assert result.action == "none" or result.cause is Cause.UNKNOWN
    nvml = NvmlFact(node="n1", source=Source.ROOT, condition=NvmlCondition.XID_EVENT, value=number)
    assert attribute([nvml]).root_backed is False


def test_xid_45_is_never_the_cause():
    """45 follows another XID: the earlier XID is the cause, 45 alone is nothing."""
    assert attribute([kernel_xid(45, "pid=1, name=python, Ch 00000010")]).nodes == ()
    result = attribute([kernel_xid(48, "pid=1, DBE"), kernel_xid(45, "pid=1, Ch 00000010")])
    assert (result.cause, result.root_backed) == (Cause.GPU_MEMORY, True)


def test_application_set():
    """The application set is what NVIDIA's RESTART_APP/CHECK_APP buckets say it is."""
    assert {13, 31, 43, 68, 69} <= APPLICATION_XIDS and 109 not in APPLICATION_XIDS


def test_every_row_is_consistent():
    """Decisive rows drain or reset; non-decisive ones never drain; app rows never act."""
    drains = {A.DRAIN_RESET, A.DRAIN_REBOOT, A.DRAIN_RMA, A.DRAIN_INSPECT}
    for number, row in XID_CATALOGUE.items():
        assert row.number == number and row.mnemonic
        if row.origin is Origin.APP:
            assert row.node_action is A.NONE and row.cause is Cause.CUDA_USER_ERROR
        elif row.decisive:
            assert row.node_action in drains | {A.RESET_GPU}
        else:
            assert row.node_action not in drains


def test_drains_node_is_the_drain_actions_and_nothing_else() -> None:
    """One predicate says which XIDs take the node out of service (the wrapper's node-fatal
    XIDs and the health check's high-severity drains): the drain_* actions only (the checks'
    DRAIN_NOW among them)."""
    assert {a for a in A if a.drains_node} == {
        A.DRAIN_RESET,
        A.DRAIN_REBOOT,
        A.DRAIN_RMA,
        A.DRAIN_INSPECT,
        A.DRAIN_NOW,
    }
    assert lookup(79).drains_node() and lookup(48).drains_node()
    assert not lookup(13).drains_node() and not lookup(8).drains_node()


def test_the_checks_and_the_catalogue_share_one_node_action() -> None:
    """One type: a check's action and a catalogue row's node action are both
    taxonomy.NodeAction, and every action that takes a node out of service now also drains
    it when a failed check asks for it."""
    from slurm_triage.health_checks.result import Action
    from slurm_triage.taxonomy import NodeAction as TaxonomyNodeAction

    assert A is TaxonomyNodeAction and Action is TaxonomyNodeAction
    assert {a for a in A if not a.drains} == {A.NONE, A.WATCH}
    assert all(a.drains for a in A if a.drains_node)
    assert all(isinstance(row.node_action, Action) for row in XID_CATALOGUE.values())
