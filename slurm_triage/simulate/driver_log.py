"""The NVIDIA driver's kernel-log lines for an XID, as a real GPU prints them.

Format: open-gpu-kernel-modules `kernel_rc.c` krcReportXid, `NVRM: Xid (PCI:%04x:%02x:%02x):
%d, pid=%s, name=%s, <message>`. The pid and name are the process owning the faulting
channel; an error reported from the interrupt, with no channel to name, prints
`pid='<unknown>', name=<unknown>` in the R535-R570 drivers this estate models (R580+ print
neither). An application fault is a burst, not a line (leptonai/gpud PR #46, vllm-project/
vllm#5901, NVIDIA NVSentinel's XID 13 workflow): XID 13 logs a Warp, a Global and an ESR line
for each SM that trapped, all without a process, then the channel's `Graphics Exception:
ChID ...` line naming the process, and XID 43 as the driver resets that channel.
"""

from __future__ import annotations

UNKNOWN = "pid='<unknown>', name=<unknown>"
# SMs that trap in a simulated XID 13 (GPC, TPC, SM): several per fault, as on real GPUs.
_TRAPPED_SMS = ((1, 0, 0), (1, 0, 1), (3, 2, 0))

# Texts the estate's table (estate.XID_TEXT) does not carry.
_TEXT = {
    43: "Ch 00000010",
    154: "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
}
# XIDs raised on a process's channel: the line names that process.
_CHANNEL_XIDS = frozenset({31, 43, 45, 94})


def xid_lines(
    xid: int, bdf: str, text: str | None = None, pid: int = 4242, name: str = "python"
) -> list[str]:
    """The kernel messages the driver prints for one occurrence of `xid` on GPU `bdf`
    (`0000:18:00`), oldest first; `text` is the message of a one-line XID."""
    head = f"NVRM: Xid (PCI:{bdf}): "
    proc = f"pid={pid}, name={name}"
    if xid == 13:
        lines = []
        for n, (gpc, tpc, sm) in enumerate(_TRAPPED_SMS):
            where = f"(GPC {gpc}, TPC {tpc}, SM {sm})"
            esr = 0x504730 + 0x800 * n
            lines += [
                f"13, {UNKNOWN}, Graphics SM Warp Exception on {where}: Out Of Range Address",
                f"13, {UNKNOWN}, Graphics SM Global Exception on {where}: Multiple Warp Errors",
                f"13, {UNKNOWN}, Graphics Exception: ESR 0x{esr:x}=0x102000e 0x{esr + 4:x}=0x24 "
                f"0x{esr - 8:x}=0x1f81fb60 0x{esr - 4:x}=0x1174",
            ]
        lines += [
            f"13, {proc}, Graphics Exception: ChID 0010, Class 0000c6c0, Offset 00000000, "
            "Data 00000000",
            f"43, {proc}, {_TEXT[43]}",
        ]
        return [head + line for line in lines]
    who = proc if xid in _CHANNEL_XIDS else UNKNOWN
    return [f"{head}{xid}, {who}, {text or _TEXT.get(xid, 'Simulated Xid')}"]
