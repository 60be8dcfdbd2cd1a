"""The simulated estate's repairs (reboot, GPU reset) and persistent faults, seen by the real
health screen: a reboot clears what a power cycle clears, a broken part comes back, and the
kernel-log check counts nothing from before the newest boot banner."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from slurm_triage.attribution import parse_kernel_lines
from slurm_triage.config import Config
from slurm_triage.evidence import KernelEventKind
from slurm_triage.simulate.estate import BOOT_BANNER, InjectError, NodeEstate, inject
from tests.unit.test_health_runner import run, sim_config


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Config, NodeEstate]:
    config = sim_config(tmp_path)
    return config, NodeEstate(Path(config.health.simulate_root), "node2").ensure()


def failed(config: Config) -> set[str]:
    return {r.check for r in run(config).results if r.failed}


def test_reboot_clears_a_transient_xid_79(setup) -> None:  # type: ignore[no-untyped-def]
    config, estate = setup
    inject(estate, "xid", 79, gpu=3)
    assert "gpu.xid" in failed(config) and "gpu.lost" in failed(config)
    assert inject(estate, "reboot") == "node2: rebooted"
    assert failed(config) == set()
    # The old boot's XID line is still in the file, as in rsyslog's kern.log.
    assert "Xid" in estate.kernel_log.read_text()


def test_persistent_fault_returns_after_reboot_and_gpu_reset(setup) -> None:  # type: ignore[no-untyped-def]
    config, estate = setup
    inject(estate, "xid", 79, gpu=3, persistent=True)
    inject(estate, "xid", 119, gpu=4, persistent=True)
    assert "2 persistent fault(s) back" in inject(estate, "reboot")
    assert {"gpu.xid", "gpu.lost"} <= failed(config)
    assert "1 persistent fault(s) back" in inject(estate, "gpu_reset", gpu=4)
    assert estate.load()["gpus"][4]["reset_required"] is True
    with pytest.raises(InjectError, match="lost: a reset cannot reach it"):
        inject(estate, "gpu_reset", gpu=3)  # fell off the bus: only a reboot
    inject(estate, "clear")
    inject(estate, "reboot")
    assert failed(config) == set()


def test_gpu_reset_clears_one_gpu_and_keeps_lasting_damage(setup) -> None:  # type: ignore[no-untyped-def]
    _, estate = setup
    inject(estate, "xid", 119, gpu=2)  # GSP timeout: the GPU needs a reset
    inject(estate, "remap_pending", gpu=2)
    inject(estate, "ecc", 2, gpu=2)
    inject(estate, "xid", 119, gpu=5)
    inject(estate, "gpu_reset", gpu=2)
    g2, g5 = estate.load()["gpus"][2], estate.load()["gpus"][5]
    assert g2["reset_required"] is False and g2["remap"][2] == 0
    assert g2["ecc_volatile_uncorrected"] == 0 and g2["ecc_aggregate_uncorrected"] == 2
    assert g5["reset_required"] is True  # another GPU: untouched


def test_repairs_cannot_be_persistent_and_gpu_must_exist(setup) -> None:  # type: ignore[no-untyped-def]
    _, estate = setup
    with pytest.raises(InjectError, match="repair"):
        inject(estate, "reboot", persistent=True)
    with pytest.raises(InjectError, match="--gpu"):
        inject(estate, "gpu_reset", gpu=8)


def test_xid_after_the_boot_banner_still_fails(setup) -> None:  # type: ignore[no-untyped-def]
    config, estate = setup
    inject(estate, "reboot")
    inject(estate, "xid", 79, gpu=1)
    assert "gpu.xid" in failed(config)


def test_boot_banner_is_an_event_and_a_forged_one_is_not(setup) -> None:  # type: ignore[no-untyped-def]
    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))
    real = f"{stamp} node2 kernel: {BOOT_BANNER}"
    # What a process can make the kernel print starts with its (16-byte) name.
    forged = f"{stamp} node2 kernel: Linux version 6.[4242]: segfault at 0 ip 0 sp 0 error 4"
    kinds = [e.event for e in parse_kernel_lines([real, forged], node="node2")]
    assert kinds.count(KernelEventKind.BOOT) == 1
