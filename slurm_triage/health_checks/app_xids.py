"""Application XIDs (13, 31, 43, 68, 69, 137) counted as faults of jobs, never as lines.

One user fault makes the driver print a burst. XID 13 prints a Warp, a Global and an ESR
line for every SM that trapped, all with `pid='<unknown>'` (printed from the interrupt, where
there is no process), then, sometimes, one `Graphics Exception: ChID ...` line that names the
process; XID 43 follows for the channel it reset, XID 45 for the contexts torn down (leptonai/
gpud PR #46, vllm-project/vllm#5901, NVIDIA NVSentinel's XID 13/31 workflow). Bursts are
application XIDs on one GPU no more than `health.app_xid_burst_gap_s` apart; a burst is one
fault.

Which job: each job's Epilog claims the bursts of its run on its own GPUs (SLURM_JOB_GPUS,
matched to bus ids by gpu_ids.job_bus_ids) in a node-local ledger,
`<state_dir>/health/<node>.app-xids.json` (first claim wins; from SLURM_JOB_START_TIME where
Slurm gives it, else the 10-minute evidence window). A job whose GPUs are not known claims on
every GPU only when it had the node to itself, else nothing, and a job on MIG devices claims
nothing on a shared node: a neighbour ending while a user keeps faulting on another GPU would
otherwise take that user's bursts, and count one user as several. A job that hit its bug
three times (torchrun restarting its workers) is one job. The bursts no Epilog claimed (the
job running now's, or of one whose Epilog failed or could not tell its GPUs) count as one job
together, never as one per burst or per process (each restart is a new pid): one user's
faults on a GPU count as two users at most (their ended jobs' claims and the rest).

A GPU fails `gpu.xid` when its application XIDs came from `app_xid_repeats` distinct users'
jobs within `kernel_window_s`: the fault then follows the GPU, not the code (NVIDIA's
catalogue, WORKFLOW_XID_13/31: repeats on one GPU are a hardware suspect, solo bursts are the
app's). Users, not jobs: one user's three jobs hitting the same bug (or one out-of-bounds
store on purpose) are the one user's code, and must not drain the GPU. A claim of an earlier
build names no user and counts as its job.
"""

from __future__ import annotations

import fcntl
import json
import re
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_triage.atomic import write_atomically
from slurm_triage.attribution.xid import APPLICATION_XIDS
from slurm_triage.evidence import KernelEvent, KernelEventKind
from slurm_triage.health_checks.gpu_resets import gpu_key
from slurm_triage.logs import get_logger

# kernel_rc.c krcReportXid: `NVRM: Xid (<attr>): <xid>, pid=%s, name=%s, <msg>` when the
# channel names its process, `pid='<unknown>', name=<unknown>, ` (R535-R570) or nothing
# (older and R580+) when it does not. Anchored: the name and message are the user's text.
_PID = re.compile(r"^NVRM: Xid \([^)]*\): \d+, pid=(\d+), name=")
UNCLAIMED = "unclaimed"
MAX_CLAIMS = 1000
CLAIM_TTL_S = 7 * 86400


@dataclass(frozen=True)
class Burst:
    """Application XID lines on one GPU, each within the gap of the one before."""

    bus: str
    start: float
    end: float
    lines: int
    xids: tuple[int, ...]
    pids: frozenset[str]


@dataclass(frozen=True)
class Claim:
    """A job's Epilog saying: this burst on this GPU happened while I ran here."""

    bus: str
    start: float
    end: float
    job: str
    user: str = ""  # the job's uid (SLURM_JOB_UID); "" in an earlier build's ledger

    @property
    def faulting(self) -> str:
        """Who the fault counts against: the user, or the job where no user was recorded."""
        return f"user:{self.user}" if self.user else f"job:{self.job}"

    def covers(self, burst: Burst, gap_s: float) -> bool:
        return (
            self.bus == burst.bus
            and burst.start <= self.end + gap_s
            and self.start <= burst.end + gap_s
        )


def bursts(events: Iterable[KernelEvent], gap_s: float) -> list[Burst]:
    """The application-XID bursts among dated kernel events, per GPU, oldest first."""
    by_bus: dict[str, list[KernelEvent]] = {}
    for e in events:
        if (
            e.event is KernelEventKind.XID
            and e.xid in APPLICATION_XIDS
            and e.time is not None
            and e.pci_bus_id
        ):
            by_bus.setdefault(e.pci_bus_id, []).append(e)
    found: list[Burst] = []
    for bus, lines in by_bus.items():
        lines.sort(key=lambda e: e.time or 0.0)
        group: list[KernelEvent] = []
        for e in lines:
            if group and (e.time or 0.0) - (group[-1].time or 0.0) > gap_s:
                found.append(_burst(bus, group))
                group = []
            group.append(e)
        found.append(_burst(bus, group))
    return sorted(found, key=lambda b: b.start)


def _burst(bus: str, lines: Sequence[KernelEvent]) -> Burst:
    pids = frozenset(m.group(1) for e in lines if (m := _PID.match(e.detail)))
    return Burst(
        bus,
        lines[0].time or 0.0,
        lines[-1].time or 0.0,
        len(lines),
        tuple(sorted({e.xid for e in lines if e.xid is not None})),
        pids,
    )


def owner(burst: Burst, claims: Sequence[Claim], gap_s: float) -> Claim | None:
    """The claim of the job whose Epilog claimed this burst, if one did."""
    return next((c for c in claims if c.covers(burst, gap_s)), None)


def faults_per_gpu(
    found: Sequence[Burst], claims: Sequence[Claim], gap_s: float
) -> dict[str, set[str]]:
    """Per GPU, the distinct faulting users: `user:<uid>` for each user whose jobs' Epilogs
    claimed a burst (`job:<id>` for a claim naming no user), and `unclaimed` once for all
    the bursts no Epilog claimed yet (the running job's)."""
    faults: dict[str, set[str]] = {}
    for b in found:
        claim = owner(b, claims, gap_s)
        faults.setdefault(b.bus, set()).add(UNCLAIMED if claim is None else claim.faulting)
    return faults


# --- the ledger: I/O ---------------------------------------------------------------------


def ledger_path(state_dir: str, node: str) -> Path:
    return Path(state_dir) / "health" / f"{node}.app-xids.json"


def read_claims(path: Path) -> tuple[Claim, ...]:
    """The claims in the ledger; none when it is missing or unreadable (logged): the bursts
    then count one by one, never fewer than they are."""
    try:
        data = json.loads(path.read_text())
        return tuple(_claim(item) for item in data["claims"])
    except FileNotFoundError:
        return ()
    except (OSError, ValueError, KeyError, TypeError) as exc:
        get_logger().warning("app_xid_ledger_unreadable", path=str(path), error=str(exc)[:200])
        return ()


def _claim(item: Mapping[str, object]) -> Claim:
    bus, job, user = item["bus"], item["job"], item.get("user", "")
    start, end = item["start"], item["end"]
    if not (isinstance(bus, str) and isinstance(job, str) and isinstance(user, str)):
        raise TypeError("claim bus, job and user must be strings")
    if not (isinstance(start, int | float) and isinstance(end, int | float)):
        raise TypeError("claim start and end must be numbers")
    return Claim(bus, float(start), float(end), job, user)


def claim_bursts(
    path: Path,
    found: Sequence[Burst],
    job: str,
    since: float,
    until: float,
    gap_s: float,
    now: float | None = None,
    user: str = "",
    gpus: Collection[str] | None = None,
) -> list[Claim]:
    """Record `job` (of `user`, its uid) as the owner of the bursts in [since, until] on its
    GPUs `gpus` (PCI bus ids; None: every GPU, for a job that had the node to itself) that
    no job claimed yet; the new claims. Only the job's own GPUs: on a shared node a
    neighbour's Epilog taking the bursts of a user still faulting on another GPU would count
    that one user as several. Serialised with other Epilogs of this node by a lock file."""
    now = time.time() if now is None else now
    mine = None if gpus is None else {gpu_key(g) for g in gpus} - {None}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        claims = [c for c in read_claims(path) if c.end >= now - CLAIM_TTL_S]
        new = [
            Claim(b.bus, b.start, b.end, job, user)
            for b in found
            if since - gap_s <= b.start <= until
            and (mine is None or gpu_key(b.bus) in mine)
            and owner(b, claims, gap_s) is None
        ]
        if new:
            claims = (claims + new)[-MAX_CLAIMS:]
            write_atomically(path, json.dumps({"claims": [c.__dict__ for c in claims]}))
    return new
