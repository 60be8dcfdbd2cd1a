"""Pure evaluation of the gpu.* checks over NVML fact fixtures (no NVML, no mocks)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks import gpu, gpu_processes
from slurm_triage.health_checks.nvml_facts import GpuFacts, NvmlFacts, PcieLink, RowRemap
from slurm_triage.health_checks.result import Action, CheckStatus, Severity

CONFIG = HealthConfig()
PCI = tuple(f"0000:{b}:00.0" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db"))


def healthy_gpu(index: int) -> GpuFacts:
    return GpuFacts(
        index=index,
        bus_id=f"00000000:{PCI[index][5:7].upper()}:00.0",
        uuid=f"GPU-{index}",
        ecc_volatile_uncorrected=0,
        ecc_aggregate_uncorrected=0,
        retired_pages_pending=None,
        remap=RowRemap(0, 0, False, False),
        recovery_action=0,
        nvlink_up=(True,) * 18,
        nvlink_errors=0,
        pcie_width=PcieLink(16, 16),
        pcie_gen=PcieLink(5, 5),
        pcie_replays=0,
        utilization_pct=0,
        temperature_c=35,
        slowdown_temperature_c=90,
        clock_reasons=1,
        processes=(),
    )


def node(*changes: tuple[int, dict]) -> NvmlFacts:
    gpus = [healthy_gpu(i) for i in range(8)]
    for index, fields in changes:
        gpus[index] = replace(gpus[index], **fields)
    return NvmlFacts(None, None, "550.90.07", tuple(gpus))


def run(check, facts: NvmlFacts, **extra):  # type: ignore[no-untyped-def]
    kwargs = {
        "facts": facts,
        "pci_bus_ids": PCI,
        "config": CONFIG,
        "previous": {},
        "mode": "prolog",
        **extra,
    }
    return check(**kwargs)


ALL_GPU_CHECKS = [
    gpu.check_count,
    gpu.check_lost,
    gpu.check_ecc,
    gpu.check_row_remap,
    gpu.check_nvlink,
    gpu.check_pcie,
    gpu.check_thermal,
    gpu_processes.check_processes,
]


@pytest.mark.parametrize("check", ALL_GPU_CHECKS)
def test_healthy_node_passes_every_check(check) -> None:  # type: ignore[no-untyped-def]
    """Eight healthy H100s pass every gpu.* check."""
    assert run(check, node()).status is CheckStatus.OK


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        ("NVMLError_DriverNotLoaded", "kernel driver not loaded"),
        ("NVMLError_LibRmVersionMismatch", "versions differ"),
        ("NVMLError_LibraryNotFound", "library not found"),
    ],
)
def test_nvml_init_errors_fail_count_and_make_others_unknown(error: str, reason: str) -> None:
    """NVML init failure fails gpu.count (high, drain now); other checks cannot decide."""
    facts = NvmlFacts(error, 9, None, ())
    result = run(gpu.check_count, facts)
    assert (result.status, result.severity, result.action) == (
        CheckStatus.FAIL,
        Severity.HIGH,
        Action.DRAIN_NOW,
    )
    assert reason in result.reason
    for check in ALL_GPU_CHECKS[1:-1]:
        assert run(check, facts).status is CheckStatus.UNKNOWN


def test_count_missing_gpu_and_gpu_invisible_to_driver() -> None:
    """Fewer GPUs than expected, or more on the PCI bus than NVML sees, fails gpu.count."""
    seven = NvmlFacts(None, None, "x", node().gpus[:7])
    missing = run(gpu.check_count, seven, pci_bus_ids=PCI[:7])
    assert missing.failed and "7 of 8 GPUs visible" in missing.reason
    invisible = run(
        gpu.check_count, seven, config=replace(CONFIG, expected_gpus=7), pci_bus_ids=PCI
    )
    assert invisible.failed and "1 GPU(s) on the PCI bus invisible" in invisible.reason
    off_bus = run(gpu.check_count, node(), pci_bus_ids=PCI[:6])
    assert off_bus.failed and "6 of 8 GPUs on the PCI bus" in off_bus.reason


def test_count_skipped_when_no_gpus_expected() -> None:
    """A CPU node (expected_gpus = 0) skips gpu.count instead of failing it."""
    result = run(
        gpu.check_count, NvmlFacts(None, None, "x", ()), config=replace(CONFIG, expected_gpus=0)
    )
    assert result.status is CheckStatus.SKIPPED


def test_lost_gpu_named_by_pci_order() -> None:
    """A lost GPU has no NVML handle; the reason names it by index and PCI bus id."""
    facts = node((3, {"bus_id": None, "error": "NVMLError_GpuIsLost", "error_code": 15}))
    result = run(gpu.check_lost, facts)
    assert result.failed and result.severity is Severity.HIGH
    assert result.reason.startswith("GPU3 00000000:5D:00.0 GPU is lost")
    assert result.action is Action.REBOOT


def test_reset_required_fails_lost() -> None:
    """NVML's ResetRequired is a lost-class failure asking for a GPU reset."""
    result = run(gpu.check_lost, node((1, {"error": "NVMLError_ResetRequired"})))
    assert result.failed and result.action is Action.RESET_GPU


def test_ecc_volatile_uncorrected_fails_high() -> None:
    """Any uncorrectable ECC error since driver load fails gpu.ecc at high severity."""
    result = run(
        gpu.check_ecc, node((2, {"ecc_volatile_uncorrected": 1, "ecc_aggregate_uncorrected": 1}))
    )
    assert result.failed and result.severity is Severity.HIGH and "GPU2" in result.reason


def test_ecc_historic_aggregate_warns_and_rising_fails() -> None:
    """Old aggregate errors only warn; a rise since the last run fails."""
    facts = node((4, {"ecc_aggregate_uncorrected": 3}))
    assert run(gpu.check_ecc, facts).status is CheckStatus.WARN
    rising = run(gpu.check_ecc, facts, previous={"ecc_aggregate": {"4": 2}})
    assert rising.failed and "rose 2->3" in rising.reason


@pytest.mark.parametrize(
    ("action_code", "expected"), [(1, Action.RESET_GPU), (2, Action.REBOOT), (4, Action.DRAIN_NOW)]
)
def test_recovery_action_field_decides(action_code: int, expected: Action) -> None:
    """NVML's GPU recovery action (field 230) other than NONE fails with its action."""
    result = run(gpu.check_ecc, node((0, {"recovery_action": action_code})))
    assert result.failed and result.action is expected


def test_ecc_not_supported_is_skipped() -> None:
    """ECC NotSupported everywhere is 'not applicable' (SKIPPED), not OK or FAIL."""
    facts = NvmlFacts(
        None,
        None,
        "x",
        tuple(
            replace(
                healthy_gpu(i),
                ecc_volatile_uncorrected=None,
                ecc_aggregate_uncorrected=None,
                recovery_action=None,
            )
            for i in range(8)
        ),
    )
    assert run(gpu.check_ecc, facts).status is CheckStatus.SKIPPED


def test_row_remap_pending_low_failure_high_unsupported_skipped() -> None:
    """Pending remap: drain and reset (low); failed remap: RMA (high); pre-Ampere: SKIPPED."""
    pending = run(gpu.check_row_remap, node((5, {"remap": RowRemap(0, 1, True, False)})))
    assert (pending.severity, pending.action) == (Severity.LOW, Action.RESET_GPU)
    failed = run(gpu.check_row_remap, node((5, {"remap": RowRemap(0, 512, False, True)})))
    assert (failed.severity, failed.action) == (Severity.HIGH, Action.RMA)
    old = NvmlFacts(None, None, "x", tuple(replace(g, remap=None) for g in node().gpus))
    assert run(gpu.check_row_remap, old).status is CheckStatus.SKIPPED


ALL_UP = {f"GPU-{i}": list(range(18)) for i in range(8)}  # healthy_gpu's uuids, 18 links


def test_nvlink_down_fails_against_the_baseline_and_rising_errors_warn() -> None:
    """A link that was up at the node's baseline and is down now fails gpu.nvlink; error
    counters rising between runs warn."""
    links = (True,) * 3 + (False,) + (True,) * 14
    down = run(
        gpu.check_nvlink,
        node((6, {"nvlink_up": links})),
        previous={gpu.NVLINK_BASELINE_KEY: ALL_UP},
    )
    assert down.failed and "GPU6" in down.reason and "NVLink 3 down" in down.reason
    assert down.evidence["links_down"] == [3]
    rising = run(
        gpu.check_nvlink, node((6, {"nvlink_errors": 50})), previous={"nvlink_errors": {"6": 10}}
    )
    assert rising.status is CheckStatus.WARN


H100_PCIE_BRIDGED = tuple(link not in (4, 5, 10, 11, 16, 17) for link in range(18))


@pytest.mark.parametrize(
    "links",
    [H100_PCIE_BRIDGED, (False,) * 18],
    ids=["pcie-bridged", "pcie-unbridged"],
)
def test_inactive_links_of_pcie_boards_pass(links: tuple[bool, ...]) -> None:
    """H100 PCIe boards list 18 links and leave 6 (bridged) or all (no bridges) inactive:
    with no baseline yet, or against a baseline of the same board, that passes."""
    facts = node(*((i, {"nvlink_up": links}) for i in range(8)))
    assert run(gpu.check_nvlink, facts).status is CheckStatus.OK
    baseline = gpu.nvlink_baseline(facts, {}, node_healthy=True)
    again = run(gpu.check_nvlink, facts, previous={gpu.NVLINK_BASELINE_KEY: baseline})
    assert again.status is CheckStatus.OK


def test_nvlinks_per_gpu_sets_the_count() -> None:
    """health.nvlinks_per_gpu = 18 (HGX SXM) fails a GPU with 17 up from the first run;
    = 12 passes a bridged PCIe board; = 0 skips the check."""
    one_down = node((2, {"nvlink_up": (True,) * 17 + (False,)}))
    sxm = run(gpu.check_nvlink, one_down, config=replace(CONFIG, nvlinks_per_gpu=18))
    assert sxm.failed and "GPU2" in sxm.reason and "17 of 18" in sxm.reason
    pcie = node(*((i, {"nvlink_up": H100_PCIE_BRIDGED}) for i in range(8)))
    assert run(gpu.check_nvlink, pcie, config=replace(CONFIG, nvlinks_per_gpu=12)).status is (
        CheckStatus.OK
    )
    off = run(gpu.check_nvlink, one_down, config=replace(CONFIG, nvlinks_per_gpu=0))
    assert off.status is CheckStatus.SKIPPED


def test_without_a_baseline_a_gpu_behind_its_peers_warns() -> None:
    """No baseline yet: a GPU with fewer links up than its peers warns (never drains)."""
    result = run(gpu.check_nvlink, node((2, {"nvlink_up": (True,) * 17 + (False,)})))
    assert result.status is CheckStatus.WARN and "GPU2 has 17 NVLinks up" in result.reason


def test_baseline_only_grows_when_the_node_passed() -> None:
    """The baseline keeps the links up at the last healthy run: an unhealthy run changes
    nothing, a healthy one adds the links up now."""
    facts = node(*((i, {"nvlink_up": H100_PCIE_BRIDGED}) for i in range(8)))
    first = gpu.nvlink_baseline(facts, {}, node_healthy=True)
    assert first["GPU-0"] == [0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15]
    previous = {gpu.NVLINK_BASELINE_KEY: first}
    assert gpu.nvlink_baseline(node(), previous, node_healthy=False) == first
    assert gpu.nvlink_baseline(node(), previous, node_healthy=True)["GPU-0"] == list(range(18))


def test_pcie_width_fails_but_idle_gen_does_not() -> None:
    """A narrower link fails; a lower generation only counts when the GPU is busy."""
    assert run(gpu.check_pcie, node((0, {"pcie_width": PcieLink(8, 16)}))).failed
    idle = run(gpu.check_pcie, node((0, {"pcie_gen": PcieLink(1, 5), "utilization_pct": 0})))
    assert idle.status is CheckStatus.OK
    busy = run(gpu.check_pcie, node((0, {"pcie_gen": PcieLink(3, 5), "utilization_pct": 95})))
    assert busy.failed and "under load" in busy.reason


def test_thermal_slowdown_and_temperature() -> None:
    """HW slowdown / power brake throttle bits and over-temperature fail gpu.thermal."""
    slow = run(gpu.check_thermal, node((7, {"clock_reasons": 0x1 | 0x40})))
    assert slow.failed and "HwThermalSlowdown" in slow.reason
    hot = run(gpu.check_thermal, node((7, {"temperature_c": 95})))
    assert hot.failed and "95 C" in hot.reason
    power_cap = run(gpu.check_thermal, node((7, {"clock_reasons": 0x4})))
    assert power_cap.status is CheckStatus.OK  # SwPowerCap is normal under load


def test_stray_processes_fail_only_in_prolog() -> None:
    """A compute process on a GPU before a job fails the prolog; cron skips the check."""
    facts = node((1, {"processes": (4242,)}))
    assert run(gpu_processes.check_processes, facts, mode="prolog").failed
    assert run(gpu_processes.check_processes, facts, mode="cron").status is CheckStatus.SKIPPED


def test_counters_remember_cumulative_values() -> None:
    """The counters saved for the next run carry each GPU's cumulative values."""
    saved = gpu.counters(node((2, {"nvlink_errors": 7, "pcie_replays": 3})))
    assert saved["nvlink_errors"]["2"] == 7 and saved["pcie_replays"]["2"] == 3


def test_gpu_facts_answer_by_predicate() -> None:
    """Lost, reset-required and pending or failed remaps are asked of the facts, not read
    from NVML's error names or a tuple's positions."""
    lost = GpuFacts(index=1, error="NVMLError_GpuIsLost")
    reset = GpuFacts(index=1, error="NVMLError_ResetRequired")
    assert lost.is_lost() and not lost.requires_reset() and lost.is_unusable()
    assert reset.requires_reset() and not reset.is_lost() and reset.is_unusable()
    assert not healthy_gpu(1).is_unusable()
    assert RowRemap(0, 1, True, False).requires_reset()
    assert not RowRemap(0, 1, True, False).qualifies_for_rma()
    assert RowRemap(0, 512, False, True).qualifies_for_rma()
    assert PcieLink(8, 16).below_maximum() and not PcieLink(16, 16).below_maximum()


def test_reasons_name_a_gpu_without_a_bus_id_with_a_question_mark() -> None:
    """A GPU whose bus id NVML did not give is `GPU5 ?` in a reason, never `GPU5 None`."""
    failed = run(
        gpu.check_row_remap, node((5, {"bus_id": None, "remap": RowRemap(0, 9, False, True)}))
    )
    assert failed.reason.startswith("GPU5 ? row remap failure")
