"""Reset one GPU on this node: `nvidia-smi --gpu-reset -i <bus id>` on GPU nodes, the simulated
estate's reset where there are none (`health.nvml = "simulated"`).

The hardware boundary of the repair loop's GPU reset (docs/repair.md). NVIDIA's rules, which
the caller must check first: no process may hold the GPU (the reset fails while one does), and
a GPU that fell off the bus (XID 79) does not answer a reset: only a reboot brings it back.
Root only. Never raises for a failed reset: the outcome says what happened.
"""

from __future__ import annotations

import enum
import shutil
import subprocess
from dataclasses import dataclass

from slurm_triage.config import HealthConfig

RESET_TIMEOUT_S = 120.0


class ResetOutcome(enum.StrEnum):
    RESET = "reset"
    FAILED = "failed"  # nvidia-smi (or the simulation) refused or failed: reboot next
    UNAVAILABLE = "unavailable"  # no nvidia-smi on this node
    UNKNOWN = "unknown"  # timed out: the GPU's state is not known


@dataclass(frozen=True)
class GpuReset:
    gpu: int
    bus_id: str
    outcome: ResetOutcome
    detail: str = ""

    @property
    def done(self) -> bool:
        return self.outcome is ResetOutcome.RESET


def reset_gpu(
    config: HealthConfig, node: str, index: int, bus_id: str, timeout_s: float = RESET_TIMEOUT_S
) -> GpuReset:
    """Reset GPU `index` (PCI `bus_id`, which names it to nvidia-smi whatever the index
    order) and say how it went."""
    if config.nvml == "simulated":
        return _simulated(config, node, index, bus_id)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuReset(index, bus_id, ResetOutcome.UNAVAILABLE, "nvidia-smi not found")
    try:
        done = subprocess.run(
            [smi, "--gpu-reset", "-i", bus_id],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return GpuReset(index, bus_id, ResetOutcome.UNKNOWN, f"no answer in {timeout_s:g}s")
    except OSError as exc:
        return GpuReset(index, bus_id, ResetOutcome.FAILED, str(exc))
    said = _first_line(done.stdout + "\n" + done.stderr)
    if done.returncode == 0:
        return GpuReset(index, bus_id, ResetOutcome.RESET, said)
    return GpuReset(index, bus_id, ResetOutcome.FAILED, f"exit {done.returncode}: {said}")


def _simulated(config: HealthConfig, node: str, index: int, bus_id: str) -> GpuReset:
    from slurm_triage.nvml import simulated_gpu_reset

    done, said = simulated_gpu_reset(config, node, index)
    return GpuReset(index, bus_id, ResetOutcome.RESET if done else ResetOutcome.FAILED, said)


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0][:200] if lines else ""
