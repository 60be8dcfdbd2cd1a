"""The GPU reset at the hardware boundary: nvidia-smi's exit status, a timeout, no nvidia-smi,
and the simulated estate's reset (which, like a real GPU, cannot reach one that fell off)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from slurm_triage.config import HealthConfig
from slurm_triage.health_checks.gpu_reset import ResetOutcome, reset_gpu
from slurm_triage.simulate.estate import BUS_IDS, NodeEstate, inject


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    """A stand-in nvidia-smi on PATH that records its arguments."""
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\n{body}\n')
    smi.chmod(smi.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{smi.parent}:{os.environ['PATH']}")
    return tmp_path / "args"


def test_nvidia_smi_names_the_gpu_by_bus_id(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    args = fake_smi(tmp_path, monkeypatch, 'echo "GPU 00000000:5D:00.0 was successfully reset."')
    done = reset_gpu(HealthConfig(), "node1", 3, "00000000:5D:00.0")
    assert done.outcome is ResetOutcome.RESET and done.done
    assert args.read_text().split() == ["--gpu-reset", "-i", "00000000:5D:00.0"]
    assert done.detail == "GPU 00000000:5D:00.0 was successfully reset."


def test_a_refused_reset_is_failed_with_nvidia_smis_words(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # Only the exit status is relied on; whatever nvidia-smi says first is passed on as is
    # (its words vary by driver: these are placeholders, not a recorded message).
    fake_smi(
        tmp_path,
        monkeypatch,
        'echo "The following GPUs could not be reset:" >&2\n'
        'echo "  GPU 00000000:5D:00.0: In use by another client" >&2\nexit 255',
    )
    done = reset_gpu(HealthConfig(), "node1", 3, "00000000:5D:00.0")
    assert done.outcome is ResetOutcome.FAILED
    assert done.detail == "exit 255: The following GPUs could not be reset:"


def test_a_hung_reset_is_unknown(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    fake_smi(tmp_path, monkeypatch, "sleep 5")
    done = reset_gpu(HealthConfig(), "node1", 0, BUS_IDS[0], timeout_s=0.3)
    assert done.outcome is ResetOutcome.UNKNOWN


def test_no_nvidia_smi_is_unavailable(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("PATH", str(tmp_path))
    assert reset_gpu(HealthConfig(), "n", 0, BUS_IDS[0]).outcome is ResetOutcome.UNAVAILABLE


def test_simulated_reset(tmp_path: Path) -> None:
    config = HealthConfig(nvml="simulated", simulate_root=str(tmp_path))
    estate = NodeEstate(tmp_path, "node2").ensure()
    inject(estate, "xid", 119, gpu=2)
    assert reset_gpu(config, "node2", 2, BUS_IDS[2]).done
    assert estate.load()["gpus"][2]["reset_required"] is False
    inject(estate, "xid", 79, gpu=4)
    lost = reset_gpu(config, "node2", 4, BUS_IDS[4])
    assert lost.outcome is ResetOutcome.FAILED and "reboot" in lost.detail
