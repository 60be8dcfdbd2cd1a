"""A simulated GPU estate for nodes without GPUs: per-node NVML state, kernel log, sysfs, mounts.

Layout under the estate root, per node:
    <root>/<node>/nvml.json     the state the fake pynvml serves (8 H100-like GPUs)
    <root>/<node>/kern.log      kernel log in syslog RFC 3339 form (what rsyslog writes)
    <root>/<node>/sys/...       sysfs: class/infiniband/mlx5_N/ports/1/*, bus/pci/devices/*
    <root>/<node>/mountinfo     /proc/self/mountinfo lines for the required mounts
    <root>/<node>/mounts/NAME   the mount points; a hung mount is a FIFO, whose open() blocks
                                like a stat on a dead hard NFS mount
    <root>/<node>/persistent.json  faults injected with `persistent=True`: hardware that is
                                broken, not upset, so a reboot or a GPU reset brings them back
    <root>/<node>/boot-hang     `boot_hang`: the node does not come back from a reboot (the
                                dev cluster's RebootProgram stops its slurmd for good)

`inject()` changes that state the way the real fault would show up in each source, so the
real readers and checks see a consistent node. Writes are atomic (temp file + rename).
Two pseudo-faults repair: `reboot` (what the dev cluster's RebootProgram does: every transient
fault clears, the kernel logs a fresh boot banner, persistent faults come back) and
`gpu_reset` (what `nvidia-smi --gpu-reset -i N` does to one GPU's NVML-visible state).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurm_triage.atomic import write_atomically
from slurm_triage.errors import TriageError
from slurm_triage.simulate import driver_log, sysfs

GPUS = 8
HCAS = sysfs.COMPUTE_HCAS  # the compute fabric's ports; sysfs.py lists the others
MOUNTS = ("home", "shared", "datasets")
IB_RATE = sysfs.IB_RATE
NVLINKS = 18  # H100 SXM: 18 NVLink4 links
# PCI bus ids of an 8-GPU HGX H100 board (as `nvidia-smi` prints them).
BUS_IDS = (
    "00000000:18:00.0",
    "00000000:2A:00.0",
    "00000000:3A:00.0",
    "00000000:5D:00.0",
    "00000000:9A:00.0",
    "00000000:AB:00.0",
    "00000000:BA:00.0",
    "00000000:DB:00.0",
)
XID_TEXT = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
    31: "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f1a_2c000000. Fault is of "
    "type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer "
    "at partition 0, subpartition 0.",
    63: "Row Remapper: New row marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Error while marking row for remapping",
    74: "NVLink: fatal error detected on link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
    79: "GPU has fallen off the bus.",
    94: "Contained: CE User Channel (0x9). RST: No, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 103 "
    "(GSP_RM_ALLOC)",
}
# The boards a node can have, as NVML reports their NVLinks (fake_pynvml.py cites sources):
# HGX H100 SXM: 18 NVLink4 links, all active. H100 PCIe with NVLink bridges: 18 link slots
# of which 12 train (Azure/azurehpc-health-checks#162 lists links 4, 5, 10, 11, 16 among the
# six inactive ones; we take 17 as the sixth). Without bridges: all 18 read inactive.
BOARDS: dict[str, dict[str, Any]] = {
    "sxm": {"name": "NVIDIA H100 80GB HBM3", "nvlink": [1] * NVLINKS},
    "pcie": {
        "name": "NVIDIA H100 PCIe",
        "nvlink": [0 if link in (4, 5, 10, 11, 16, 17) else 1 for link in range(NVLINKS)],
    },
    "pcie_unbridged": {"name": "NVIDIA H100 PCIe", "nvlink": [0] * NVLINKS},
}
DRIVER_VERSION = "570.133.20"
FAULTS = (
    "xid",
    "ecc",
    "remap_pending",
    "remap_failure",
    "nvlink_down",
    "gpu_lost",
    "ib_down",
    *(f"aer_{kind}" for kind in sysfs.AER_FILES),
    "mount_hung",
    "nvml_hang",
    "nvml_error",
    "driver_unloaded",
    "boot_hang",
    "clear",
    "reboot",
    "gpu_reset",
    *(f"board_{board}" for board in BOARDS),
)
# What the kernel prints first at every boot (init/version.c's linux_banner), as rsyslog
# writes it to kern.log; the kernel-log check counts nothing from before the newest one.
BOOT_BANNER = (
    "Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) "
    "12.2.0, GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 "
    "(2024-11-22)"
)
# The pseudo-faults that repair or reset rather than break: never recorded as persistent.
# boot_hang is not recorded either: it stays until `clear` (a person's repair) by itself.
_NOT_FAULTS = ("clear", "reboot", "gpu_reset", "boot_hang")


class InjectError(TriageError):
    """A fault that cannot be injected as asked."""


CGROUP_ENV = "SLURM_TRIAGE_SIMULATE_CGROUP_GPUS"


def cgroup_minors(env: Mapping[str, str]) -> frozenset[int] | None:
    """The device cgroup a simulated process runs in: the minor numbers of the /dev/nvidiaN
    it may open ($SLURM_TRIAGE_SIMULATE_CGROUP_GPUS="4,5"); None: not constrained."""
    value = env.get(CGROUP_ENV)
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",") if p.strip()]
    return frozenset(int(p) for p in parts if p.isdigit())


def _gpu_state(index: int, board: str = "sxm") -> dict[str, Any]:
    return {
        "index": index,
        "bus_id": BUS_IDS[index],
        "minor": index,  # /dev/nvidia<minor>; may differ from PCI order (jobstats#34)
        "uuid": f"GPU-5e1a{index:04x}-sim0-4a4a-9c9c-00000000000{index}",
        "name": BOARDS[board]["name"],
        "lost": False,
        "reset_required": False,
        "ecc_volatile_uncorrected": 0,
        "ecc_aggregate_uncorrected": 0,
        "remap": [0, 0, 0, 0],
        "recovery_action": 0,
        "nvlink": list(BOARDS[board]["nvlink"]),
        "nvlink_errors": 0,
        "pcie": {"width": 16, "max_width": 16, "gen": 5, "max_gen": 5, "replays": 0},
        "temperature_c": 34,
        "slowdown_temperature_c": 90,
        "clock_reasons": 1,
        "utilization_pct": 0,
        "processes": [],
    }


def healthy_state(board: str = "sxm") -> dict[str, Any]:
    return {
        "version": 1,
        "board": board,
        "driver": {"loaded": True, "version": DRIVER_VERSION, "hang_s": 0},
        "gpus": [_gpu_state(i, board) for i in range(GPUS)],
        "events": [],
    }


@dataclass(frozen=True)
class NodeEstate:
    """The simulated hardware of one node."""

    root: Path
    node: str

    @property
    def dir(self) -> Path:
        return self.root / self.node

    @property
    def nvml_state(self) -> Path:
        return self.dir / "nvml.json"

    @property
    def kernel_log(self) -> Path:
        return self.dir / "kern.log"

    @property
    def sysfs(self) -> Path:
        return self.dir / "sys"

    @property
    def mountinfo(self) -> Path:
        return self.dir / "mountinfo"

    def mount(self, name: str) -> Path:
        return self.dir / "mounts" / name

    def ensure(self) -> NodeEstate:
        """Create a healthy node if it does not exist yet."""
        if not self.nvml_state.exists():
            self.reset()
        return self

    def reset(self, board: str | None = None) -> None:
        """Make the node healthy: fresh NVML state, empty kernel log, ports up, mounts.
        The board (SXM, PCIe) stays what it was unless `board` names another."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)
        write_json(self.nvml_state, healthy_state(board or self._board()))
        self.kernel_log.write_text("")
        self._write_sysfs()
        self._write_mounts()

    def _board(self) -> str:
        try:
            board = json.loads(self.nvml_state.read_text()).get("board", "sxm")
        except (OSError, ValueError):
            return "sxm"
        return board if board in BOARDS else "sxm"

    def _write_sysfs(self) -> None:
        sysfs.write_node(self.sysfs, BUS_IDS)

    def _write_mounts(self) -> None:
        lines = []
        for n, name in enumerate(MOUNTS):
            path = self.mount(name)
            if path.exists() and not path.is_dir():
                path.unlink()
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o755)
            lines.append(
                f"{100 + n} 1 0:{50 + n} / {path} rw,relatime shared:{n} - nfs4 "
                f"fs{n}:/export/{name} rw,vers=4.2,hard,proto=tcp"
            )
        self.mountinfo.write_text("\n".join(lines) + "\n")

    @property
    def boot_hang(self) -> Path:
        """Present: the node's next reboots do not come back (firmware hang, dead PSU)."""
        return self.dir / "boot-hang"

    @property
    def persistent(self) -> Path:
        return self.dir / "persistent.json"

    def persistent_faults(self) -> list[dict[str, Any]]:
        try:
            faults = json.loads(self.persistent.read_text())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise InjectError(f"{self.persistent}: unreadable ({exc})") from None
        return faults if isinstance(faults, list) else []

    def load(self) -> dict[str, Any]:
        return json.loads(self.nvml_state.read_text())

    def save(self, state: dict[str, Any]) -> None:
        write_json(self.nvml_state, state)

    def kernel_line(self, message: str, when: float | None = None) -> None:
        stamp = datetime.fromtimestamp(when or time.time(), UTC).isoformat(timespec="microseconds")
        with self.kernel_log.open("a") as fh:
            fh.write(f"{stamp} {self.node} kernel: {message}\n")


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=1))


def inject(
    estate: NodeEstate,
    fault: str,
    value: int | None = None,
    gpu: int = 0,
    port: int = 0,
    mount: str = MOUNTS[0],
    *,
    persistent: bool = False,
) -> str:
    """Change the node's state as `fault` would; returns a one-line description.

    `persistent`: the hardware is broken for good (until `clear`, a person's repair): the
    fault comes back after every `reboot` and `gpu_reset`."""
    estate.ensure()
    if fault == "clear":
        estate.reset()
        estate.persistent.unlink(missing_ok=True)
        estate.boot_hang.unlink(missing_ok=True)
        return f"{estate.node}: all faults cleared"
    if persistent and (fault in _NOT_FAULTS or fault.startswith("board_")):
        raise InjectError(f"{fault} cannot be persistent: it is a repair, or stays until clear")
    if fault == "boot_hang":
        estate.boot_hang.write_text("")
        return f"{estate.node}: the next reboot does not come back (until clear)"
    if fault == "reboot":
        return reboot(estate)
    if fault == "gpu_reset":
        if not 0 <= gpu < GPUS:
            raise InjectError(f"--gpu must be 0..{GPUS - 1}")
        return reset_gpu(estate, gpu)
    described = _inject_fault(estate, fault, value, gpu, port, mount)
    if persistent:
        faults = estate.persistent_faults()
        faults.append({"fault": fault, "value": value, "gpu": gpu, "port": port, "mount": mount})
        write_atomically(estate.persistent, json.dumps(faults, indent=1))
        described += " (persistent: survives reboot and GPU reset)"
    return described


def reboot(estate: NodeEstate) -> str:
    """What a power cycle does to the node: every transient fault clears, the kernel starts
    a new log with its banner, and what is broken for good is broken again."""
    faults = estate.persistent_faults()
    earlier = estate.kernel_log.read_text() if estate.kernel_log.exists() else ""
    estate.reset()
    # kern.log is a file: it keeps the old boot's lines, as rsyslog's does.
    estate.kernel_log.write_text(earlier)
    estate.kernel_line(BOOT_BANNER)
    for f in faults:
        _inject_fault(estate, f["fault"], f["value"], f["gpu"], f["port"], f["mount"])
    back = f"; {len(faults)} persistent fault(s) back" if faults else ""
    return f"{estate.node}: rebooted{back}"


def reset_gpu(estate: NodeEstate, gpu: int) -> str:
    """What a GPU reset does to one GPU's NVML state: a reset-required GPU comes back,
    volatile ECC counts clear, a pending row remap is applied; aggregate counts and a remap
    failure stay, and a GPU that fell off the bus cannot be reset. A persistent fault on that
    GPU is back at once."""
    state = estate.load()
    if not state["driver"].get("loaded", True):
        raise InjectError("no GPU reset without the NVIDIA driver loaded")
    g = state["gpus"][gpu]
    if g["lost"]:
        # As on real GPUs: one that fell off the bus (XID 79) does not answer a reset.
        raise InjectError(f"GPU{gpu} {g['bus_id']} is lost: a reset cannot reach it (reboot)")
    fresh = _gpu_state(gpu, estate._board())
    for key in ("reset_required", "ecc_volatile_uncorrected", "recovery_action"):
        g[key] = fresh[key]
    g["nvlink"] = fresh["nvlink"]
    if g["remap"][2]:
        g["remap"][2] = 0
    estate.save(state)
    back = [
        f for f in estate.persistent_faults() if f["gpu"] == gpu and f["fault"] not in _NODE_WIDE
    ]
    for f in back:
        _inject_fault(estate, f["fault"], f["value"], f["gpu"], f["port"], f["mount"])
    again = f"; {len(back)} persistent fault(s) back" if back else ""
    return f"{estate.node}: GPU{gpu} {g['bus_id']} reset{again}"


# Faults that are not a GPU's own: a GPU reset does not bring them back (or clear them).
_NODE_WIDE = ("ib_down", "mount_hung", "nvml_hang", "nvml_error", "driver_unloaded") + tuple(
    f"aer_{kind}" for kind in sysfs.AER_FILES
)


def _inject_fault(
    estate: NodeEstate, fault: str, value: int | None, gpu: int, port: int, mount: str
) -> str:
    if fault.startswith("board_") and fault in FAULTS:
        board = fault.removeprefix("board_")
        estate.reset(board)
        return f"{estate.node}: healthy {BOARDS[board]['name']} board ({board})"
    if fault not in FAULTS:
        raise InjectError(f"unknown fault {fault!r}; valid: {', '.join(FAULTS)}")
    if not 0 <= gpu < GPUS:
        raise InjectError(f"--gpu must be 0..{GPUS - 1}")
    if fault == "ib_down":
        return _ib_down(estate, port)
    if fault.startswith("aer_"):
        return _aer(estate, fault.removeprefix("aer_"), value or 1, gpu)
    if fault == "mount_hung":
        return _mount_hung(estate, mount)
    state = estate.load()
    g = state["gpus"][gpu]
    describe = _apply_gpu_fault(estate, state, g, fault, value)
    estate.save(state)
    return f"{estate.node}: {describe}"


def _apply_gpu_fault(
    estate: NodeEstate, state: dict[str, Any], g: dict[str, Any], fault: str, value: int | None
) -> str:
    label = f"GPU{g['index']} {g['bus_id']}"
    if fault == "xid":
        if value is None or value <= 0:
            raise InjectError("xid needs a number, e.g. xid=79")
        _xid_effects(g, value)
        bdf = g["bus_id"].lower()[4:].rsplit(".", 1)[0]
        now = time.time()  # a burst's lines come a millisecond or two apart, as on a GPU
        for n, line in enumerate(driver_log.xid_lines(value, bdf, XID_TEXT.get(value))):
            estate.kernel_line(line, now + n * 0.0015)
        state["events"].append(
            {"gpu": g["index"], "type": "xid", "data": value, "time": time.time()}
        )
        return f"XID {value} on {label}"
    if fault == "ecc":
        n = value or 1
        g["ecc_volatile_uncorrected"] += n
        g["ecc_aggregate_uncorrected"] += n
        state["events"].append({"gpu": g["index"], "type": "dbe", "data": n, "time": time.time()})
        return f"{n} uncorrectable ECC error(s) on {label}"
    if fault in ("remap_pending", "remap_failure"):
        g["remap"][2 if fault == "remap_pending" else 3] = 1
        g["remap"][1] += 1
        return f"row remap {fault.split('_')[1]} on {label}"
    if fault == "nvlink_down":
        g["nvlink"][value or 0] = 0
        return f"NVLink {value or 0} down on {label}"
    if fault == "gpu_lost":
        g["lost"] = True
        return f"{label} lost (fell off the bus, no XID line)"
    if fault == "nvml_hang":
        state["driver"]["hang_s"] = value or 3600
        return f"NVML calls hang for {value or 3600}s"
    if fault == "nvml_error":
        if not value:
            raise InjectError("nvml_error needs an NVML return code, e.g. nvml_error=18")
        state["driver"]["init_error"] = value
        return f"nvmlInit fails with NVML error {value}"
    state["driver"]["loaded"] = False
    return "NVIDIA kernel driver unloaded"


def _xid_effects(g: dict[str, Any], xid: int) -> None:
    """The NVML-visible consequences of an XID, as on real GPUs."""
    if xid == 79:
        g["lost"] = True
    elif xid in (48, 95):
        g["ecc_volatile_uncorrected"] += 1
        g["ecc_aggregate_uncorrected"] += 1
        g["remap"][2] = 1
        g["remap"][1] += 1
        g["recovery_action"] = 4 if xid == 95 else 1
    elif xid == 63:
        g["remap"][2] = 1
    elif xid == 64:
        g["remap"][3] = 1
    elif xid == 74:
        g["nvlink"][3] = 0
        g["nvlink_errors"] += 100
    elif xid in (119, 120, 62):
        g["reset_required"] = True


def _ib_down(estate: NodeEstate, port: int) -> str:
    if not 0 <= port < HCAS:
        raise InjectError(f"--port must be 0..{HCAS - 1}")
    base = estate.sysfs / f"class/infiniband/mlx5_{port}/ports/1"
    (base / "state").write_text("1: DOWN\n")
    (base / "phys_state").write_text("3: Disabled\n")
    counter = base / "counters/link_downed"
    counter.write_text(f"{int(counter.read_text()) + 1}\n")
    estate.kernel_line(f"mlx5_core 0000:{0x1A + port:02x}:00.0: mlx5_{port}: Link down")
    return f"{estate.node}: mlx5_{port} port 1 down"


def _aer(estate: NodeEstate, kind: str, count: int, gpu: int) -> str:
    """PCIe AER errors reported by GPU `gpu`: its counters and its root port's rise, and the
    kernel logs them as aer.c does."""
    bdf = BUS_IDS[gpu].lower()[4:]
    root = sysfs.raise_aer(estate.sysfs, bdf, kind, count)
    severity = {"correctable": "Corrected", "nonfatal": "Uncorrected (Non-Fatal)"}.get(
        kind, "Uncorrected (Fatal)"
    )
    estate.kernel_line(f"pcieport {root.name}: AER: {severity} error received: {bdf}")
    return f"{estate.node}: {count} {kind} AER error(s) on GPU{gpu} {BUS_IDS[gpu]}"


def _mount_hung(estate: NodeEstate, name: str) -> str:
    if name not in MOUNTS:
        raise InjectError(f"unknown mount {name!r}; valid: {', '.join(MOUNTS)}")
    path = estate.mount(name)
    if path.is_dir():
        shutil.rmtree(path)
    if not path.exists():
        os.mkfifo(path, 0o644)
    estate.kernel_line(f"nfs: server fs{MOUNTS.index(name)} not responding, still trying")
    return f"{estate.node}: mount {path} hung"
