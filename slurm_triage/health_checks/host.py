"""`host.memory` and `host.disk`: free memory and scratch space above thresholds, and no
uncorrected machine check / EDAC error in the kernel log window."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from slurm_triage.config import HealthConfig
from slurm_triage.evidence import KernelEvent
from slurm_triage.health_checks.result import Action, CheckResult, Severity, fail, ok, unknown

GB = 1 << 30


@dataclass(frozen=True)
class HostFacts:
    available_memory_bytes: int | None
    scratch_free_bytes: int | None
    scratch_error: str = ""


def read_host(scratch_path: str) -> HostFacts:
    import psutil

    try:
        memory: int | None = int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):
        memory = None
    try:
        st = os.statvfs(scratch_path)
        return HostFacts(memory, st.f_bavail * st.f_frsize)
    except OSError as exc:
        return HostFacts(memory, None, f"{scratch_path}: {exc.strerror}")


def check_memory(
    host: HostFacts, hardware_error: KernelEvent | None, config: HealthConfig, **_: Any
) -> CheckResult:
    name = "host.memory"
    if hardware_error is not None:
        return fail(
            name,
            f"{hardware_error.event.value}: {hardware_error.detail[:120]}",
            Severity.HIGH,
            Action.DRAIN_NOW,
            line=hardware_error.detail,
        )
    if host.available_memory_bytes is None:
        return unknown(name, "cannot read available memory")
    free_gb = host.available_memory_bytes / GB
    if free_gb < config.min_free_memory_gb:
        return fail(
            name,
            f"{free_gb:.1f} GB memory available, need {config.min_free_memory_gb:g}",
            Severity.LOW,
            Action.DRAIN,
            available_gb=round(free_gb, 2),
        )
    return ok(name, f"{free_gb:.1f} GB available", available_gb=round(free_gb, 2))


def check_disk(host: HostFacts, config: HealthConfig, **_: Any) -> CheckResult:
    name = "host.disk"
    if host.scratch_free_bytes is None:
        return fail(
            name,
            f"scratch unusable: {host.scratch_error}",
            Severity.HIGH,
            Action.DRAIN_NOW,
            path=config.scratch_path,
        )
    free_gb = host.scratch_free_bytes / GB
    if free_gb < config.min_free_disk_gb:
        return fail(
            name,
            f"{config.scratch_path} has {free_gb:.1f} GB free, need {config.min_free_disk_gb:g}",
            Severity.LOW,
            Action.DRAIN,
            free_gb=round(free_gb, 2),
        )
    return ok(name, f"{config.scratch_path} {free_gb:.1f} GB free", free_gb=round(free_gb, 2))
