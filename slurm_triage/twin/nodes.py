"""The twin's nodes: their state in Slurm's terms, what is really wrong with them, and
the free pools the scheduler picks from.

Plain lists indexed by node number (a 16,384-node cluster is touched millions of times):
`down` (NODE_FAIL until its reboot), `drained` with Slurm's reason and who drained it
(`ours`: our decision, Prolog or health check, recognised by our prefix as Slurm shows it;
`site`: the site's checks and operators), `broken` (a persistent fault that is still
there) and `lemon`. A node is schedulable when up and not drained; the pools hold the
schedulable nodes by free GPUs: `idle` (all free) and `partial[f]` (f free).
"""

from __future__ import annotations

from itertools import islice

from slurm_triage.policies.reasons import is_ours

OURS, SITE = "ours", "site"


class Nodes:
    def __init__(self, count: int, gpus_per_node: int) -> None:
        width = max(5, len(str(count)))
        self.names = [f"node{i + 1:0{width}d}" for i in range(count)]
        self.index = {name: i for i, name in enumerate(self.names)}
        self.gpn = gpus_per_node
        self.free = [gpus_per_node] * count
        self.jobs: list[list[object]] = [[] for _ in range(count)]
        self.down = [False] * count
        self.drained = [False] * count
        self.reason = [""] * count
        self.owner = [""] * count
        self.drained_at = [0.0] * count
        self.token = [0] * count  # bumped by every drain and resume: stale events ignore it
        self.broken: list[int | None] = [None] * count  # index of the persistent fault
        self.broken_set: set[int] = set()
        self.lemon = [False] * count
        self.last_fault_s = [-1e18] * count
        self.failed_jobs = [0] * count  # job failures it caused since the operators' review
        self.drained_set: set[int] = set()
        self.down_set: set[int] = set()
        self.idle: set[int] = set(range(count))
        self.partial: list[set[int]] = [set() for _ in range(gpus_per_node)]
        self._pool = [gpus_per_node] * count  # gpn: idle, f: partial[f], 0: none
        self.version = 0  # bumped whenever the set of usable nodes changes

    def __len__(self) -> int:
        return len(self.names)

    def usable(self, n: int) -> bool:
        return not (self.down[n] or self.drained[n])

    def repool(self, n: int) -> None:
        """Put the node in the pool its state and free GPUs say."""
        free = self.free[n]
        key = free if (free and self.usable(n)) else 0
        old = self._pool[n]
        if key == old:
            return
        if old == self.gpn:
            self.idle.discard(n)
        elif old:
            self.partial[old].discard(n)
        if key == self.gpn:
            self.idle.add(n)
        elif key:
            self.partial[key].add(n)
        self._pool[n] = key

    def pick_idle(self, count: int, excluded: set[int]) -> list[int] | None:
        """`count` idle nodes none of which is excluded, or None."""
        if len(self.idle) < count:
            return None
        if not excluded:
            return list(islice(self.idle, count))
        picked = []
        for n in self.idle:
            if n not in excluded:
                picked.append(n)
                if len(picked) == count:
                    return picked
        return None

    def pick_partial(self, gpus: int, excluded: set[int]) -> int | None:
        """The fullest partly used node with `gpus` free GPUs (best fit), or None."""
        for free in range(gpus, self.gpn):
            for n in self.partial[free]:
                if n not in excluded:
                    return n
        return None

    def has_partial(self) -> bool:
        return any(self.partial[f] for f in range(1, self.gpn))

    def allocate(self, n: int, gpus: int, job: object) -> None:
        self.free[n] -= gpus
        self.jobs[n].append(job)
        self.repool(n)

    def release(self, n: int, gpus: int, job: object) -> None:
        self.free[n] += gpus
        self.jobs[n].remove(job)
        self.repool(n)

    def set_drained(self, n: int, reason: str, at: float) -> None:
        self.drained[n] = True
        self.drained_set.add(n)
        self.reason[n] = reason
        self.owner[n] = OURS if is_ours(reason) else SITE
        self.drained_at[n] = at
        self.token[n] += 1
        self.version += 1
        self.repool(n)

    def set_resumed(self, n: int) -> None:
        self.drained[n] = False
        self.drained_set.discard(n)
        self.reason[n] = ""
        self.owner[n] = ""
        self.token[n] += 1
        self.version += 1
        self.repool(n)

    def set_down(self, n: int, down: bool) -> None:
        self.down[n] = down
        if down:
            self.down_set.add(n)
        else:
            self.down_set.discard(n)
        self.version += 1
        self.repool(n)

    def out_of_service(self) -> tuple[int, int]:
        """(drained, down-and-not-drained) node counts."""
        return len(self.drained_set), len(self.down_set - self.drained_set)
