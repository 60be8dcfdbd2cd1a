"""`pcie.aer`: rising PCIe AER counters of the GPUs and HCAs are evidence (issue 14, item 8),
read from the simulated node's sysfs in the kernel's own format."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_triage.config import Config
from slurm_triage.health_checks import aer, registry
from slurm_triage.health_checks.result import Action, CheckStatus, Severity
from slurm_triage.health_checks.runner import Run
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.taxonomy import Cause
from tests.unit.test_health_runner import sim_config

# Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats (4.19's long names).
ABI_SAMPLE = """Receiver Error 2
Bad TLP 0
Bad DLLP 0
RELAY_NUM Rollover 0
Replay Timer Timeout 0
Advisory Non-Fatal 0
Corrected Internal Error 0
Header Log Overflow 0
TOTAL_ERR_COR 2
"""
# aer.c today: short names, and `<array>_bit[n]` for an unnamed bit that counted.
CURRENT = "RxErr 0\nBadTLP 3\nRollover 0\ndev_cor_errs_bit[1] 1\nTOTAL_ERR_COR 4\n"


def test_both_generations_of_the_file_format_parse() -> None:
    """Names with spaces (4.19) and short names (today) give the total and the non-zero ones."""
    assert aer.parse_aer_stats(ABI_SAMPLE, "TOTAL_ERR_COR") == (2, {"Receiver Error": 2})
    assert aer.parse_aer_stats(CURRENT, "TOTAL_ERR_COR") == (
        4,
        {"BadTLP": 3, "dev_cor_errs_bit[1]": 1},
    )
    assert aer.parse_aer_stats("garbage\n", "TOTAL_ERR_COR") == (None, {})


@pytest.fixture
def node(tmp_path: Path) -> tuple[Config, NodeEstate]:
    config = sim_config(tmp_path)
    return config, NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def aer_check(config: Config):  # type: ignore[no-untyped-def]
    (result,) = Run(config, registry.select(["pcie.aer"], False), node="node2").execute().results
    return result


def test_the_gpus_hcas_and_their_links_are_read(node) -> None:  # type: ignore[no-untyped-def]
    """8 GPUs, the HCAs' physical functions (not the VF) and each one's upstream port."""
    config, estate = node
    devices = aer.read_aer(str(estate.sysfs), [f"0000:{b}:00.0" for b in ("18", "2a")])
    roles = {d.bdf: d.role for d in devices}
    assert roles["0000:18:00.0"] == "GPU" and roles["0000:00:01.0"] == "upstream of 0000:18:00.0"
    assert roles["0000:1a:00.0"] == "HCA mlx5_0" and "0000:1a:00.1" not in roles  # the VF
    assert roles["0000:1e:00.1"] == "HCA mlx5_5"
    assert all(d.totals == {"correctable": 0, "nonfatal": 0, "fatal": 0} for d in devices)
    result = aer_check(config)
    # 8 GPUs and their 8 ports; 8 HCA functions (two dual-port cards) and their 6 ports
    assert result.status is CheckStatus.OK and result.evidence["devices"] == 30


@pytest.mark.parametrize(
    ("fault", "status", "severity", "action", "error"),
    [
        ("aer_fatal", CheckStatus.FAIL, Severity.HIGH, Action.DRAIN_NOW, "SDES 2"),
        ("aer_nonfatal", CheckStatus.FAIL, Severity.LOW, Action.DRAIN, "CmpltTO 2"),
        ("aer_correctable", CheckStatus.WARN, Severity.LOW, Action.WATCH, "RxErr 2"),
    ],
)
def test_rising_counts_are_evidence(node, fault, status, severity, action, error) -> None:  # type: ignore[no-untyped-def]
    """Between two runs GPU 2 reports AER errors: fatal drains now, non-fatal drains after
    the jobs, correctable warns."""
    config, estate = node
    assert aer_check(config).status is CheckStatus.OK
    inject(estate, fault, 2, gpu=2)
    result = aer_check(config)
    kind = fault.removeprefix("aer_")
    assert (result.status, result.severity, result.action) == (status, severity, action)
    assert result.reason == f"GPU 0000:3a:00.0 {kind} AER errors rose 0->2 ({error})"
    assert aer_check(config).status is CheckStatus.OK  # judged once: the next run sees no rise


def test_errors_seen_only_by_the_link_partner_count(node) -> None:  # type: ignore[no-untyped-def]
    """The endpoint may count nothing while its upstream port counts the errors."""
    config, estate = node
    aer_check(config)
    port = estate.sysfs / "devices/pci0000:00/0000:00:01.0/aer_dev_nonfatal"
    port.write_text(port.read_text().replace("TOTAL_ERR_NONFATAL 0", "TOTAL_ERR_NONFATAL 1"))
    result = aer_check(config)
    assert result.failed and result.reason.startswith(
        "upstream of 0000:18:00.0 0000:00:01.0 nonfatal AER errors rose 0->1"
    )


def test_errors_from_before_the_first_run_only_warn(node) -> None:  # type: ignore[no-untyped-def]
    """Uncorrectable errors counted since boot, with nothing to compare: when is unknown."""
    config, estate = node
    inject(estate, "aer_fatal", 1, gpu=0)
    result = aer_check(config)
    assert result.status is CheckStatus.WARN and "1 since boot" in result.reason


def test_no_aer_files_is_not_applicable(tmp_path: Path) -> None:
    """A kernel without AER statistics (or no AER capability) leaves the check SKIPPED."""
    assert (
        aer.check_aer(aer.read_aer(str(tmp_path), ["0000:18:00.0"]), {}).status
        is CheckStatus.SKIPPED
    )


def test_a_failed_job_checks_aer_and_blames_pcie() -> None:
    """The Epilog's post-job checks include pcie.aer, and its failure is the pcie cause."""
    assert "pcie.aer" in registry.POST_JOB_SET
    assert registry.BY_NAME["pcie.aer"].cause is Cause.PCIE
    assert "pcie.aer" in registry.PROLOG_SET
