"""The one NVML module loader, and the GPUs on the PCI bus: what the health checks, the
Epilog and the wrapper see of the GPUs goes through here.

`nvml_module` is the real nvidia-ml-py `pynvml` on GPU nodes, or the simulated estate's
stand-in (slurm_triage.simulate.fake_pynvml: the same functions and error classes) where
there are no GPUs (`health.nvml = "simulated"`). Import-light: pynvml and the simulation are
imported only when asked for, since the wrapper and the Prolog import this on every job.
"""

from __future__ import annotations

import os

from slurm_triage.config import HealthConfig, node_path

TYPE_CHECKING = False  # typing's flag without importing typing; mypy takes it as true
if TYPE_CHECKING:
    from typing import Any


def nvml_module(config: HealthConfig, node: str) -> Any:
    """The real pynvml, or the simulated estate's stand-in for this node (and this process's
    simulated device cgroup, $SLURM_TRIAGE_SIMULATE_CGROUP_GPUS: the /dev/nvidiaN minor
    numbers it allows, as Slurm's ConstrainDevices would)."""
    if config.nvml == "simulated":
        from pathlib import Path

        from slurm_triage.simulate.estate import NodeEstate, cgroup_minors
        from slurm_triage.simulate.fake_pynvml import FakeNvml

        estate = NodeEstate(Path(node_path(config.simulate_root, node)), node)
        return FakeNvml(estate.nvml_state, allowed_minors=cgroup_minors(os.environ))
    import pynvml

    return pynvml


def simulated_gpu_reset(config: HealthConfig, node: str, index: int) -> tuple[bool, str]:
    """Reset GPU `index` of this node's simulated estate, as `nvidia-smi --gpu-reset` would
    (health_checks.gpu_reset's stand-in where there are no GPUs): (done, what it said)."""
    from pathlib import Path

    from slurm_triage.simulate.estate import InjectError, NodeEstate, inject

    estate = NodeEstate(Path(node_path(config.simulate_root, node)), node)
    try:
        return True, inject(estate, "gpu_reset", gpu=index)
    except (InjectError, OSError, ValueError) as exc:
        return False, str(exc)


def read_pci_gpus(sysfs_root: str) -> tuple[str, ...]:
    """Bus ids (dddd:bb:dd.f) of NVIDIA display/3D controllers on the PCI bus, sorted. (The
    wrapper asks on every rank: os rather than pathlib, whose import costs a third of
    Python's start: issue 20.)"""
    devices = os.path.join(sysfs_root, "bus/pci/devices")
    try:
        names = sorted(os.listdir(devices))  # as Path.glob("*"): hidden names too
    except OSError:
        names = []  # no such directory, or not one: none on the bus
    found = []
    for name in names:
        try:
            vendor = _read_text(os.path.join(devices, name, "vendor"))
            klass = _read_text(os.path.join(devices, name, "class"))
        except OSError:
            continue
        if vendor == "0x10de" and klass[:6] in ("0x0302", "0x0300"):
            found.append(name)
    return tuple(found)


def _read_text(path: str) -> str:
    with open(path) as file:  # noqa: PLW1514 (as Path.read_text: the locale's encoding)
        return file.read().strip()
