"""The simulated node's sysfs: HCA ports under class/infiniband, PCI devices with AER counters.

Laid out as on a DGX/HGX H100 node (leptonai/gpud `infiniband/class/testdata/
sys-class-infiniband-h100.0`: ConnectX-7 MT4129 at 400 Gb/sec NDR, a BlueField-3 MT41692
on Ethernet), with the ports that are not the compute fabric:
- mlx5_0 .. mlx5_3: ConnectX-7, InfiniBand, `4: ACTIVE` / `5: LinkUp`, 400 Gb/sec (4X NDR);
- mlx5_4 / mlx5_5: a dual-port ConnectX-7 storage card, one PCI function per port; port 0
  runs RoCE (link_layer Ethernet, ACTIVE), port 1 is InfiniBand and not cabled
  (`1: DOWN` / `2: Polling`, the state an unplugged IB port trains in forever);
- mlx5_6 / mlx5_7: a BlueField-3 DPU, both Ethernet, the second port `3: Disabled`;
- mlx5_8: an SR-IOV virtual function of mlx5_0 (its PCI device has `physfn`), InfiniBand,
  logically `1: DOWN` until something assigns it, physically `5: LinkUp` like its PF.
Each `class/infiniband/<dev>/device` links to its PCI function.

PCI: `bus/pci/devices/<bdf>` are links into `devices/pci0000:00/<root port>/<bdf>`, as in
real sysfs, so a device's link partner is its parent directory. Every GPU, HCA function and
root port has `aer_dev_correctable`, `aer_dev_fatal`, `aer_dev_nonfatal` in the kernel's
format (drivers/pci/pcie/aer.c `aer_stats_dev_attr`: one `<name> <count>` line per named bit,
then `TOTAL_ERR_COR|FATAL|NONFATAL <count>`; Documentation/ABI/testing/
sysfs-bus-pci-devices-aer_stats), root ports also `aer_rootport_total_err_{cor,fatal,nonfatal}`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

IB_RATE = "400 Gb/sec (4X NDR)"
COUNTERS = (
    "link_downed",
    "symbol_error",
    "port_rcv_errors",
    "link_error_recovery",
    "local_link_integrity_errors",
)
# aer.c aer_correctable_error_string / aer_uncorrectable_error_string (named bits, in order).
AER_CORRECTABLE = (
    "RxErr", "BadTLP", "BadDLLP", "Rollover", "Timeout", "NonFatalErr", "CorrIntErr", "HeaderOF",
)  # fmt: skip
AER_UNCORRECTABLE = (
    "Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF",
    "MalfTLP", "ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked",
    "TLPBlockedErr", "PoisonTLPBlocked",
)  # fmt: skip
AER_FILES = {
    "correctable": ("aer_dev_correctable", AER_CORRECTABLE, "TOTAL_ERR_COR", "RxErr"),
    "nonfatal": ("aer_dev_nonfatal", AER_UNCORRECTABLE, "TOTAL_ERR_NONFATAL", "CmpltTO"),
    "fatal": ("aer_dev_fatal", AER_UNCORRECTABLE, "TOTAL_ERR_FATAL", "SDES"),
}
_ROOTPORT_FILE = {"correctable": "cor", "nonfatal": "nonfatal", "fatal": "fatal"}


@dataclass(frozen=True)
class HcaPort:
    device: str
    bdf: str
    link_layer: str
    state: str
    phys_state: str
    rate: str
    hca_type: str = "MT4129"
    board_id: str = "MT_0000000838"
    physfn: str | None = None  # the PF of a virtual function


COMPUTE_HCAS = 4
HCA_PORTS: tuple[HcaPort, ...] = (
    *(
        HcaPort(f"mlx5_{i}", f"0000:{0x1A + i:02x}:00.0", "InfiniBand", "4: ACTIVE", "5: LinkUp",
                IB_RATE)
        for i in range(COMPUTE_HCAS)
    ),
    HcaPort("mlx5_4", "0000:1e:00.0", "Ethernet", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)"),
    HcaPort("mlx5_5", "0000:1e:00.1", "InfiniBand", "1: DOWN", "2: Polling", "10 Gb/sec (4X SDR)"),
    HcaPort("mlx5_6", "0000:1f:00.0", "Ethernet", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (2X NDR)",
            "MT41692", "MT_0000000884"),
    HcaPort("mlx5_7", "0000:1f:00.1", "Ethernet", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)",
            "MT41692", "MT_0000000884"),
    HcaPort("mlx5_8", "0000:1a:00.1", "InfiniBand", "1: DOWN", "5: LinkUp", IB_RATE,
            "MT4130", "MT_0000000838", physfn="0000:1a:00.0"),
)  # fmt: skip


def write_node(sysfs: Path, gpu_bus_ids: Sequence[str]) -> None:
    """A healthy node's sysfs: the HCA ports above, the GPUs and HCAs on the PCI bus."""
    for index, bus_id in enumerate(gpu_bus_ids):
        dev = _pci_device(sysfs, bus_id.lower()[4:], index)
        _write(dev / "vendor", "0x10de")
        _write(dev / "class", "0x030200")
    functions = sorted({p.bdf for p in HCA_PORTS})
    slots: dict[str, Path] = {}  # the functions of one card (and its VFs) share a link
    for index, bdf in enumerate(functions, start=len(gpu_bus_ids)):
        port = next(p for p in HCA_PORTS if p.bdf == bdf)
        slot = (port.physfn or bdf).rsplit(".", 1)[0]
        dev = _pci_device(sysfs, bdf, index, parent=slots.get(slot))
        slots.setdefault(slot, dev.parent)
        _write(dev / "vendor", "0x15b3")
        _write(dev / "class", "0x020700" if port.link_layer == "InfiniBand" else "0x020000")
        if port.physfn:
            _link(dev / "physfn", f"../{port.physfn}")
            for name in AER_FILES.values():  # a VF has no AER capability of its own
                (dev / name[0]).unlink(missing_ok=True)
    for port in HCA_PORTS:
        _write_port(sysfs, port)


def _write_port(sysfs: Path, port: HcaPort) -> None:
    base = sysfs / "class/infiniband" / port.device
    _write(base / "hca_type", port.hca_type)
    _write(base / "board_id", port.board_id)
    _link(base / "device", os.path.relpath(pci_path(sysfs, port.bdf), base))
    files = base / "ports/1"
    for name, value in (
        ("state", port.state),
        ("phys_state", port.phys_state),
        ("rate", port.rate),
        ("link_layer", port.link_layer),
    ):
        _write(files / name, value)
    for counter in COUNTERS:
        _write(files / "counters" / counter, "0")


def pci_path(sysfs: Path, bdf: str) -> Path:
    """The device's directory under devices/ (what bus/pci/devices/<bdf> links to)."""
    return (sysfs / "bus/pci/devices" / bdf).resolve()


def _pci_device(sysfs: Path, bdf: str, index: int, parent: Path | None = None) -> Path:
    if parent is None:
        parent = sysfs / f"devices/pci0000:00/0000:00:{0x01 + index:02x}.0"
        _aer_files(parent, root_port=True)
        _write(parent / "class", "0x060400")  # PCI bridge (root port)
    dev = parent / bdf
    _aer_files(dev)
    _link(
        sysfs / "bus/pci/devices" / parent.name, os.path.relpath(parent, sysfs / "bus/pci/devices")
    )
    _link(sysfs / "bus/pci/devices" / bdf, os.path.relpath(dev, sysfs / "bus/pci/devices"))
    return dev


def _aer_files(dev: Path, root_port: bool = False) -> None:
    for kind, (name, bits, total, _) in AER_FILES.items():
        _write(dev / name, "\n".join([*(f"{bit} 0" for bit in bits), f"{total} 0"]))
        if root_port:
            _write(dev / f"aer_rootport_total_err_{_ROOTPORT_FILE[kind]}", "0")


def raise_aer(sysfs: Path, bdf: str, kind: str, count: int) -> Path:
    """`count` more errors of `kind` reported by the device `bdf` (its first bit of that kind,
    e.g. Completion Timeout for non-fatal), and the messages its root port received; the
    root port's path."""
    name, _, total, bit = AER_FILES[kind]
    dev = pci_path(sysfs, bdf)
    _add(dev / name, {bit: count, total: count})
    root = dev.parent
    while root.parent.name.startswith("0000:"):
        root = root.parent
    counter = root / f"aer_rootport_total_err_{_ROOTPORT_FILE[kind]}"
    _write(counter, str(int(counter.read_text()) + count))
    return root


def _add(path: Path, more: dict[str, int]) -> None:
    lines = []
    for line in path.read_text().splitlines():
        key, _, value = line.rpartition(" ")
        lines.append(f"{key} {int(value) + more.get(key, 0)}")
    _write(path, "\n".join(lines))


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        if path.is_symlink() and os.readlink(path) == target:
            return
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    path.symlink_to(target)
