"""How far back a stuck collective reaches a job's window (rule 5). Pure.

When one rank hangs (a GPU stops answering and its process does not exit), every other rank
waits in the collective until PyTorch's watchdog gives up: 10 minutes by default since
PyTorch 2.2, 30 before, whatever `timeout=` the program set. The job ends that long after
the fault, and root's fact of that moment (an XID 74 or 48 the GPU recovered from, which no
post-job check sees) lies just before rule 5's 10 minutes. The watchdog's line says how long
the collective had run:

    [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught
    collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168,
    NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.

so the job in effect stopped when that collective began, and root's evidence counts from 10
minutes before then. The wrapper's hang detector says the same (a `stall` fact: no output
for `idle_s` seconds before it ended the rank). Only root's evidence: the program's own
lines of those minutes are what it survived. The text is the job's, so the reach is capped
(MAX_HANG_S): a printed "ran for" can pull no older root fact in than an hour before the
watchdog fired, and the decision also holds it to the run's start.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from slurm_triage.evidence import Fact, LogHit, Stall

# torch's watchdog line, and the DistBackendError text that repeats it.
WATCHDOG_SIGNATURE = "torch.nccl_watchdog_timeout"
# The longest hang a watchdog line may reach back over: twice PyTorch's old 30-minute default.
# A watchdog stuck itself has printed "ran for 25624887 milliseconds" (pytorch#118369).
MAX_HANG_S = 3600.0
_RAN_FOR = re.compile(r"\bran for (\d{1,15}) milliseconds")


def hang_began(facts: Iterable[Fact], ended_at: float) -> float | None:
    """When the job's earliest hang began: each watchdog line's or stall's time (`ended_at`,
    the job's end, for one with none) less how long it says the collective ran or the rank
    was silent, at most MAX_HANG_S; None when none says."""
    began: float | None = None
    for fact in facts:
        hung_s = _hung_s(fact)
        if hung_s is None:
            continue
        fired = fact.time if fact.time is not None else ended_at
        start = fired - min(hung_s, MAX_HANG_S)
        began = start if began is None else min(began, start)
    return began


def _hung_s(fact: Fact) -> float | None:
    if isinstance(fact, Stall):
        return max(0.0, fact.idle_s)
    if not isinstance(fact, LogHit) or fact.signature != WATCHDOG_SIGNATURE:
        return None
    ran = _RAN_FOR.search(fact.excerpt)
    return int(ran.group(1)) / 1000 if ran is not None else None
