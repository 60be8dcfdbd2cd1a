"""Run selected checks on this node: gather facts (each source under a timeout), evaluate.

Fact sources are read lazily and once per run, each in a worker thread bounded by
`health.check_timeout_s` (NVML calls cannot be interrupted; a hung one is abandoned and the
checks that needed it are UNKNOWN). The prolog stops at the first high-severity failure and
honours its overall deadline. Cumulative counters are remembered per node between runs so
that "rising" can be judged.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slurm_triage.atomic import write_atomically
from slurm_triage.config import Config, HealthConfig, node_path
from slurm_triage.deadline import CallTimedOut, call_with_deadline
from slurm_triage.evidence import KernelEvent
from slurm_triage.gpu_ids import JobScope
from slurm_triage.health_checks import (
    aer,
    app_xids,
    gpu,
    gpu_resets,
    infiniband,
    kernel_log,
    mounts,
    registry,
)
from slurm_triage.health_checks.fact_cache import FactCache
from slurm_triage.health_checks.host import read_host
from slurm_triage.health_checks.nvml_facts import (
    NvmlFacts,
    gpu_processes,
    read_gpu_processes,
    read_nvml,
)
from slurm_triage.health_checks.nvml_xids import merge as nvml_xids_merge
from slurm_triage.health_checks.registry import CheckSpec
from slurm_triage.health_checks.result import CheckResult, CheckStatus, RunReport, Severity, unknown
from slurm_triage.logs import get_logger
from slurm_triage.nvml import nvml_module, read_pci_gpus

# Facts that change with every job's start and end: the GPUs' compute processes (the last
# job's may still be ending when facts are read between jobs), the host's free memory and
# scratch space. Read by every run, never taken from kept facts (health_checks.fact_cache).
PER_RUN = frozenset({"gpu_processes", "host"})


class FactError(Exception):
    """A fact source could not be read (timed out or raised); the reason is the message."""


def node_name(explicit: str | None = None) -> str:
    return explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


class FactSources:
    """Lazily read, cached fact sources for one run on one node.

    `nvml`: the NVML module a resident process holds open (the node agent), else this run
    loads its own; `nvml_xids`: the XIDs that process's NVML event watcher saw (kernel
    events, merged into the kernel log's: health_checks.nvml_xids); `kept`: that
    process's facts from earlier reads, used while fresh and given what this run reads
    (health_checks.fact_cache)."""

    def __init__(
        self,
        config: HealthConfig,
        node: str,
        timeout_s: float,
        *,
        nvml: Any = None,
        nvml_xids: Callable[[], Sequence[KernelEvent]] | None = None,
        kept: FactCache | None = None,
    ) -> None:
        self._config, self._node, self._timeout_s = config, node, timeout_s
        self._cache: dict[str, Any] = {}
        self._kept = kept
        self._read_here: set[str] = set()  # sources this run read itself (not kept ones)
        c = config
        watched = nvml_xids or tuple
        self._readers: dict[str, Callable[[], Any]] = {
            "nvml": lambda: read_nvml(nvml if nvml is not None else nvml_module(c, node)),
            "gpu_processes": lambda: self._gpu_processes(nvml),
            "pci": lambda: read_pci_gpus(node_path(c.sysfs_root, node)),
            "kernel": lambda: nvml_xids_merge(
                kernel_log.read_kernel_events(
                    node_path(c.kernel_log, node),
                    node,
                    clock_cache=node_path(c.kernel_clock_cache, node),
                ),
                watched(),
            ),
            "ib": lambda: infiniband.read_ports(node_path(c.sysfs_root, node), c.ib_ports),
            "mounts": lambda: mounts.probe_mounts(
                [node_path(m, node) for m in c.mounts],
                # Paths are bytes to the kernel: any that are not UTF-8 keep their escapes.
                Path(node_path(c.mountinfo, node)).read_bytes().decode("utf-8", "surrogateescape"),
                c.mount_timeout_s,
            ),
            "host": lambda: read_host(node_path(c.scratch_path, node)),
            "aer": lambda: aer.read_aer(
                node_path(c.sysfs_root, node), read_pci_gpus(node_path(c.sysfs_root, node))
            ),
        }

    def get(self, source: str) -> Any:
        if source not in self._cache:
            kept = self._kept if source not in PER_RUN else None
            fresh, value = kept.fresh(source) if kept is not None else (False, None)
            self._cache[source] = value if fresh else self.refresh(source)
        value = self._cache[source]
        if isinstance(value, FactError):
            raise value
        return value

    def refresh(self, source: str) -> Any:
        """Read `source` now, whatever is kept, and keep what the read gave."""
        self._read_here.add(source)
        if self._kept is None or source in PER_RUN:
            return self._read_bounded(source)
        generation, read_at = self._kept.generation(), self._kept.now()
        value = self._read_bounded(source)
        self._kept.keep(source, value, generation, read_at)
        return value

    def _gpu_processes(self, nvml: Any) -> dict[str, tuple[int, ...] | None]:
        """The GPUs' processes: from this run's own NVML read when it made one (a second
        nvmlInit after its shutdown would start the driver again on a node without
        persistence mode), else read now beside the kept facts."""
        facts = self._cache.get("nvml") if "nvml" in self._read_here else None
        if facts is not None and not isinstance(facts, FactError):
            return gpu_processes(facts)
        return read_gpu_processes(
            nvml if nvml is not None else nvml_module(self._config, self._node)
        )

    def _read_bounded(self, source: str) -> Any:
        reader = self._readers[source]
        try:
            # mounts forks its own killable children, so it runs in this thread.
            if source == "mounts":
                return reader()
            return call_with_deadline(reader, self._timeout_s, f"facts-{source}")
        except CallTimedOut as exc:
            if self._kept is not None and exc.worker is not None:
                self._kept.abandoned(source, exc.worker)
            return FactError(f"reading {source} facts timed out after {self._timeout_s:g}s")
        except Exception as exc:  # reported as the checks' UNKNOWN reason
            return FactError(
                f"reading {source} facts failed: {type(exc).__name__}: {str(exc)[:200]}"
            )

    def still_reading(self, source: str) -> bool:
        """A read of `source` abandoned at its timeout (a hung NVML call) by a run with the
        same kept facts is still running: the agent's background reads do not start
        another one beside it."""
        return self._kept is not None and self._kept.still_reading(source)

    def cached(self, source: str) -> Any | None:
        value = self._cache.get(source)
        return None if isinstance(value, FactError) else value


def _state_path(config: Config, node: str) -> Path:
    return Path(config.paths.state_dir) / "health" / f"{node}.json"


def load_previous(config: Config, node: str) -> dict[str, Any]:
    try:
        data = json.loads(_state_path(config, node).read_text())
        return data.get("counters", {}) if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _evaluate(spec: CheckSpec, sources: FactSources, base: dict[str, Any]) -> CheckResult:
    started = time.monotonic()
    try:
        kwargs = dict(base)
        for source in spec.needs:
            value = sources.get(source)
            kwargs.update(_kwargs_for(source, value, base))
        result = _noting_unread(spec.evaluate(**kwargs), kwargs.get("facts"))
    except FactError as exc:
        result = unknown(spec.name, str(exc))
    except Exception as exc:  # a crashing check must not pass, nor kill the run
        result = unknown(spec.name, f"check crashed: {type(exc).__name__}: {exc}")
    return _with_seconds(result, time.monotonic() - started)


def _noting_unread(result: CheckResult, facts: NvmlFacts | None) -> CheckResult:
    """The NVML calls that failed on some GPU (their facts unknown, not the GPU's), as
    evidence beside the result: a check judged without them says so."""
    unread = {g.label: list(g.unread) for g in facts.gpus if g.unread} if facts else {}
    if not unread:
        return result
    return replace(result, evidence={**result.evidence, "nvml_unread": unread})


def _kwargs_for(source: str, value: Any, base: dict[str, Any]) -> dict[str, Any]:
    if source == "nvml":
        return {"facts": value}
    if source == "pci":
        return {"pci_bus_ids": value}
    if source == "kernel":
        return {
            "events": value,
            "hardware_error": kernel_log.host_hardware_errors(value, base["config"], base["now"]),
        }
    if source == "ib":
        return {"ports": value}
    if source == "mounts":
        return {"mounts": value, "timeout_s": base["config"].mount_timeout_s}
    if source == "aer":
        return {"devices": value}
    if source == "gpu_processes":
        return {"gpu_processes": value}
    return {"host": value}


def _with_seconds(result: CheckResult, seconds: float) -> CheckResult:
    return replace(result, seconds=seconds)


def _node_passed_with(results: Sequence[CheckResult], check: str) -> bool:
    """Every check passed and `check` itself ran and was OK (not merely skipped or warned)."""
    passed = all(
        r.status in (CheckStatus.OK, CheckStatus.WARN, CheckStatus.SKIPPED) for r in results
    )
    return passed and any(r.check == check and r.status is CheckStatus.OK for r in results)


@dataclass
class Run:
    """One run of selected checks; `execute()` returns the report and saves counters."""

    config: Config
    specs: Sequence[CheckSpec]
    mode: str = "cli"  # prolog | cron | cli | epilog
    node: str = field(default_factory=node_name)
    stop_on_hard_failure: bool = False
    deadline_s: float | None = None
    job: JobScope | None = None  # the Prolog's job: gpu.processes looks at its GPUs only
    save_state: bool = True  # false for a dry run: counters and baselines stay as they were
    nvml: Any = None  # FactSources': NVML held open by the node agent
    nvml_xids: Callable[[], Sequence[KernelEvent]] | None = None  # and its watcher's XIDs
    kept: FactCache | None = None  # and the facts it keeps fresh

    def execute(self) -> RunReport:
        started_wall, started = time.time(), time.monotonic()
        health = self.config.health
        sources = FactSources(
            health,
            self.node,
            health.check_timeout_s,
            nvml=self.nvml,
            nvml_xids=self.nvml_xids,
            kept=self.kept,
        )
        base: dict[str, Any] = {
            "config": health,
            "previous": load_previous(self.config, self.node),
            "now": started_wall,
            "mode": self.mode,
            "job": self.job,
            # Which job each application-XID burst belongs to, as the Epilogs recorded it.
            "app_xid_claims": app_xids.read_claims(
                app_xids.ledger_path(self.config.paths.state_dir, self.node)
            ),
            # When this node's own health check last reset each GPU (gpu_repair).
            "gpu_resets": gpu_resets.read_resets(
                gpu_resets.ledger_path(self.config.paths.state_dir, self.node)
            ),
        }
        results: list[CheckResult] = []
        stopped = False
        for spec in self.specs:
            if self.deadline_s is not None and time.monotonic() - started > self.deadline_s:
                results.append(unknown(spec.name, f"run deadline {self.deadline_s:g}s passed"))
                continue
            result = _evaluate(spec, sources, base)
            results.append(result)
            if self.stop_on_hard_failure and result.failed and result.severity is Severity.HIGH:
                stopped = True
                break
        if self.save_state:
            self._save_counters(sources, base["previous"], results)
        return RunReport(
            self.node, self.mode, started_wall, time.monotonic() - started, tuple(results), stopped
        )

    def _save_counters(
        self, sources: FactSources, previous: dict[str, Any], results: Sequence[CheckResult]
    ) -> None:
        counters = dict(previous)
        # A counter is saved only by a run that judged it: saved by any run that merely
        # read it (the Prolog's set has no gpu.pcie; a Prolog stops at its first hard
        # failure; `check --only gpu.count`), its rise would be gone before its check ran.
        judged = {r.check for r in results if r.status is not CheckStatus.UNKNOWN}
        nvml = sources.cached("nvml")
        if nvml is not None and nvml.init_error is None:
            for key, values in gpu.saved_counters(nvml, previous).items():
                if gpu.COUNTER_CHECKS[key] in judged:
                    counters[key] = values
            # The NVLinks up when the node passed every check: gpu.nvlink's yardstick.
            counters[gpu.NVLINK_BASELINE_KEY] = gpu.nvlink_baseline(
                nvml, previous, _node_passed_with(results, "gpu.nvlink")
            )
        ports = sources.cached("ib")
        if ports is not None:
            if "ib.ports" in judged:
                counters["ib"] = {**previous.get("ib", {}), **infiniband.counters(ports)}
            # The fabric ports up at baseline: ib.ports checks these when none are named.
            baseline = previous.get(infiniband.BASELINE_KEY, [])
            counters[infiniband.BASELINE_KEY] = infiniband.baseline(ports, baseline)
        devices = sources.cached("aer")
        if devices is not None and "pcie.aer" in judged:
            counters[aer.COUNTERS_KEY] = {
                **previous.get(aer.COUNTERS_KEY, {}),
                **aer.counters(devices),
            }
        if counters == previous:
            # Facts the agent kept (fact_cache) give the counters saved after their first
            # use: an fsynced write per job start for nothing.
            return
        path = _state_path(self.config, self.node)
        try:
            write_atomically(path, json.dumps({"node": self.node, "counters": counters}))
        except OSError as exc:
            # Without a state dir "rising" is judged against nothing next time; never fatal.
            get_logger().warning("health_counters_unsaved", path=str(path), error=str(exc))


def run_checks(
    config: Config,
    *,
    mode: str,
    only: list[str] | None = None,
    everything: bool = False,
    node: str | None = None,
    job: JobScope | None = None,
    save_state: bool = True,
    nvml: Any = None,
    nvml_xids: Callable[[], Sequence[KernelEvent]] | None = None,
    kept: FactCache | None = None,
) -> RunReport:
    """Run the checks a mode selects (registry.select): the Prolog's fast set under its
    deadline, stopping at the first hard failure; every check for the others. `nvml`,
    `nvml_xids` and `kept` are the node agent's (FactSources)."""
    specs = registry.select(only, everything)
    prolog = mode == "prolog"
    return Run(
        config,
        specs,
        mode=mode,
        node=node_name(node),
        stop_on_hard_failure=prolog,
        deadline_s=config.health.prolog_deadline_s if prolog else None,
        job=job,
        save_state=save_state,
        nvml=nvml,
        nvml_xids=nvml_xids,
        kept=kept,
    ).execute()
