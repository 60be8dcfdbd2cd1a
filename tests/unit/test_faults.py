"""Faults of the things we call: Slurm commands, NVML, disks and the journal.

Each must end inside its deadline with our own clear error or outcome, and leave no
half-written record behind.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from slurm_triage.config import Config, DecisionConfig, HealthConfig, PathsConfig, SlurmConfig
from slurm_triage.evidence import EvidenceRecord, Source, record_to_json, store
from slurm_triage.health_checks import gpu
from slurm_triage.health_checks.nvml_facts import read_nvml
from slurm_triage.health_checks.result import CheckStatus
from slurm_triage.journal import Journal, JournalError
from slurm_triage.prolog_epilog.decide import decide_from_env
from slurm_triage.simulate.estate import NodeEstate, inject
from slurm_triage.simulate.fake_pynvml import FakeNvml
from slurm_triage.slurm import SlurmOutputError, SlurmUnavailable, open_door

NVML_ERRORS = [
    pynvml.NVML_ERROR_UNINITIALIZED,
    pynvml.NVML_ERROR_INVALID_ARGUMENT,
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_NO_PERMISSION,
    pynvml.NVML_ERROR_NOT_FOUND,
    pynvml.NVML_ERROR_INSUFFICIENT_SIZE,
    pynvml.NVML_ERROR_INSUFFICIENT_POWER,
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    pynvml.NVML_ERROR_TIMEOUT,
    pynvml.NVML_ERROR_IRQ_ISSUE,
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    pynvml.NVML_ERROR_CORRUPTED_INFOROM,
    pynvml.NVML_ERROR_GPU_IS_LOST,
    pynvml.NVML_ERROR_RESET_REQUIRED,
    pynvml.NVML_ERROR_OPERATING_SYSTEM,
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    pynvml.NVML_ERROR_UNKNOWN,
]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs, filled up: every write there fails with ENOSPC."""
    mount = tmp_path / "full"
    mount.mkdir()
    if (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)]).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here")
    try:
        with open(mount / "filler", "wb") as fh, contextlib.suppress(OSError):
            fh.write(b"\0" * (128 << 10))
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("code", NVML_ERRORS)
def test_every_nvml_init_error_class_is_handled(tmp_path: Path, code: int) -> None:
    """nvmlInit raising any pynvml error class gives facts, never an exception, and
    gpu.count fails (an unusable NVML is never OK)."""
    estate = NodeEstate(tmp_path, "n").ensure()
    inject(estate, "nvml_error", code)
    facts = read_nvml(FakeNvml(estate.nvml_state))
    assert facts.init_error == type(pynvml.NVMLError(code)).__name__
    result = gpu.check_count(facts=facts, pci_bus_ids=(), config=HealthConfig())
    assert result.status is CheckStatus.FAIL


def _fake_slurm(bin_dir: Path, body: str) -> SlurmConfig:
    for name in ("scontrol", "sinfo", "sacct"):
        (bin_dir / name).write_text("#!/bin/sh\n" + body + "\n")
        (bin_dir / name).chmod(0o755)
    return SlurmConfig(
        bin_dir=str(bin_dir), timeout_s=2, attempts=2, retry_wait_s=0.1, backend="cli"
    )


def test_garbage_from_slurm_is_our_error(tmp_path: Path) -> None:
    """Slurm commands printing garbage give SlurmOutputError, not a traceback."""
    door = open_door(_fake_slurm(tmp_path, "head -c 3000 /dev/urandom; exit 0"))
    with pytest.raises(SlurmOutputError):
        door.job(5)
    with pytest.raises(SlurmOutputError):
        door.nodes()


def test_slow_slurm_within_deadline_succeeds(tmp_path: Path) -> None:
    """A slow (but not hung) scontrol is waited for up to the deadline."""
    door = open_door(_fake_slurm(tmp_path, "sleep 0.5; echo 'slurm 22.05.8'"))
    assert door.slurm_version() == "22.05.8"


def _config(tmp_path: Path, **decision: object) -> Config:
    return Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        decision=DecisionConfig(
            journal=str(tmp_path / "j.sqlite"), wait_for_nodes_s=0.2, **decision
        ),
        slurm=_fake_slurm(
            tmp_path, "echo 'Unable to contact slurm controller (connect failure)' >&2; exit 1"
        ),
    )


def test_decision_with_slurmctld_down_finishes_in_time(tmp_path: Path) -> None:
    """slurmctld down: the decision gives up within its deadline and logs, no exception."""
    config = _config(tmp_path)
    env = {
        "SLURM_JOB_ID": "12",
        "SLURM_JOB_NODELIST": "node1",
        "SLURM_JOB_UID": "0",
        "SLURM_JOB_EXIT_CODE2": "1:0",
    }
    started = time.monotonic()
    assert decide_from_env(config, env) is None
    assert time.monotonic() - started < 10
    with pytest.raises(SlurmUnavailable):
        open_door(config.slurm).job(12)


def test_locked_journal_is_a_bounded_error(tmp_path: Path) -> None:
    """Another writer holding the journal's lock makes us fail after the busy timeout."""
    path = tmp_path / "j.sqlite"
    Journal(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        with pytest.raises(JournalError, match="busy"):
            Journal(path, busy_timeout_s=0.3).claim(1, 0, "me")
        assert time.monotonic() - started < 3
    finally:
        holder.execute("ROLLBACK")
    assert Journal(path, busy_timeout_s=0.3).claim(1, 0, "me")  # free again


def test_full_disk_under_evidence_leaves_no_partial_record(full_disk: Path) -> None:
    """ENOSPC while writing root's record: an error, and no record or temp file left."""
    big = record_to_json(
        EvidenceRecord(job_id="5", node="n1", step="epilog", collected_by=Source.ROOT, facts=())
    )
    with pytest.raises(OSError):
        store.write_root_record(str(full_disk), 5, "n1", big + b" " * (256 << 10))
    leftovers = (
        list((full_disk / "_root" / "5").iterdir()) if (full_disk / "_root" / "5").exists() else []
    )
    assert leftovers == []


def test_full_disk_under_journal_loses_nothing_half_written(full_disk: Path) -> None:
    """A journal on a full disk fails with JournalError; nothing half-written remains."""
    with pytest.raises(JournalError):
        journal = Journal(full_disk / "journal.sqlite")
        journal.claim(1, 0, "me")
        journal.record(1, 0, {"evidence": ["x" * 200_000]})


def test_epilog_survives_unwritable_evidence_dir(tmp_path: Path) -> None:
    """The epilog's own trouble (evidence dir missing) is logged; it still exits 0."""
    from slurm_triage.prolog_epilog.epilog import run_epilog

    config = Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "missing"), state_dir=str(tmp_path / "st")),
        health=HealthConfig(expected_gpus=0, kernel_log=str(tmp_path / "none")),
    )
    env = {
        "SLURM_JOB_ID": "3",
        "SLURMD_NODENAME": "n1",
        "SLURM_JOB_UID": "0",
        "SLURM_JOB_EXIT_CODE2": "0:0",
    }
    assert run_epilog(config, env) == 0
    assert not os.path.exists(tmp_path / "missing")
