"""The Slurm door onto a simulated Slurm: what the real actuators talk to in a replay or in
the cluster twin.

`actuator.carry_out` (a job end's Decision) and `actuator.carry_out_node` (a health run's
drain or resume) act on Slurm only through a `SlurmDoor`. SimDoor passes each call on to a
`SimSlurm`, the state a simulation keeps (the twin's cluster, replay's ledger), which
refuses what Slurm refuses with the door's own error classes (a finished job takes no
update, a pending one no requeue), so the actuators take the same paths as against a real
cluster. A simulated job is no array task and no het job component, so its id alone names
it to the SimSlurm (the real doors name those as `A_T` and by their leader: JobInfo's
record_spec and whole_job_spec). Accounting and node-event reads are not part of a
simulation: they raise. Nor are repairs (reboots, reservations, burn-in jobs, node weights
and features): a simulation has no reservations, and those changes are refused with
SlurmCommandError, which the repair actuator reports as REFUSED.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import NoReturn, Protocol

from slurm_triage.slurm.door import SlurmDoor
from slurm_triage.slurm.errors import SlurmCommandError
from slurm_triage.slurm.model import JobInfo, NodeEventLog, NodeInfo, ReservationInfo

SIMULATED_VERSION = "25.11.0"


class SimSlurm(Protocol):
    """The state behind a SimDoor. Each method raises what the door's backends raise
    (InvalidJobState, NotRequeueable, NodeNotFound, ...) where Slurm would refuse."""

    def job_info(self, job_id: int) -> JobInfo: ...

    def node_info(self, name: str) -> NodeInfo: ...

    def requeue(self, job_id: int, hold: bool) -> None: ...

    def hold(self, job_id: int) -> None: ...

    def release(self, job_id: int) -> None: ...

    def cancel(self, job_id: int) -> None: ...

    def exclude(self, job_id: int, nodes: tuple[str, ...], merge: bool) -> tuple[str, ...]: ...

    def begin_after(self, job_id: int, delay_s: float) -> None: ...

    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str) -> None: ...


class SimDoor(SlurmDoor):
    """A SlurmDoor whose every operation lands in a SimSlurm; `calls` counts them by name."""

    name = "simulated"

    def __init__(self, slurm: SimSlurm) -> None:
        self.slurm = slurm
        self.calls: Counter[str] = Counter()

    def job(self, job_id: int) -> JobInfo:
        self.calls["job"] += 1
        return self.slurm.job_info(job_id)

    def accounted_job(self, job_id: int) -> JobInfo:
        self.calls["accounted_job"] += 1
        return self.slurm.job_info(job_id)

    def nodes(self, names: Iterable[str] | None = None) -> tuple[NodeInfo, ...]:
        self.calls["nodes"] += 1
        if names is None:
            raise SlurmCommandError("a simulated Slurm lists nodes by name only")
        return tuple(self.slurm.node_info(n) for n in dict.fromkeys(names))

    def node_events(self, since: datetime, until: datetime | None = None) -> NodeEventLog:
        raise SlurmCommandError("a simulated Slurm keeps no accounting of node events")

    def accounting_text(
        self, since: datetime, until: datetime | None, fields: Sequence[str]
    ) -> str:
        raise SlurmCommandError("a simulated Slurm keeps no accounting of jobs")

    def requeue(self, job_id: int, *, hold: bool = False) -> None:
        self.calls["requeue"] += 1
        self.slurm.requeue(job_id, hold)

    def hold(self, job_id: int) -> None:
        self.calls["hold"] += 1
        self.slurm.hold(job_id)

    def release(self, job_id: int) -> None:
        self.calls["release"] += 1
        self.slurm.release(job_id)

    def cancel(self, job_id: int) -> None:
        self.calls["cancel"] += 1
        self.slurm.cancel(job_id)

    def set_excluded_nodes(
        self, job_id: int, nodes: Iterable[str], *, merge: bool = True
    ) -> tuple[str, ...]:
        self.calls["set_excluded_nodes"] += 1
        return self.slurm.exclude(job_id, tuple(dict.fromkeys(nodes)), merge)

    def set_begin_time(self, job_id: int, delay_s: float) -> None:
        self.calls["set_begin_time"] += 1
        self.slurm.begin_after(job_id, delay_s)

    def set_admin_comment(self, job_id: int, text: str) -> None:
        # Only accounting reads it, and a simulation keeps none: counted, not stored.
        self.calls["set_admin_comment"] += 1

    def set_accounted_admin_comment(self, job_id: int, text: str) -> None:
        self.calls["set_accounted_admin_comment"] += 1

    def drain(self, node: str, reason: str) -> None:
        self.calls["drain"] += 1
        if not reason.strip():
            raise SlurmCommandError("a drain needs a reason")
        self.slurm.drain(node, reason)

    def set_node_comment(self, node: str, text: str) -> None:
        self.calls["set_node_comment"] += 1

    def resume(self, node: str) -> None:
        self.calls["resume"] += 1
        self.slurm.resume(node)

    def reboot(self, node: str, reason: str) -> None:
        self._not_modelled("reboot")

    def reservations(self) -> tuple[ReservationInfo, ...]:
        self.calls["reservations"] += 1
        return ()

    def create_reservation(
        self, name: str, node: str, duration_s: int, users: Sequence[str]
    ) -> None:
        self._not_modelled("create_reservation")

    def delete_reservation(self, name: str) -> None:
        self._not_modelled("delete_reservation")

    def submit_burn_in(
        self,
        node: str,
        reservation: str,
        command: Sequence[str],
        *,
        job_name: str,
        output: str,
        time_limit_min: int,
    ) -> int:
        self._not_modelled("submit_burn_in")

    def set_node_weight(self, node: str, weight: int) -> None:
        self._not_modelled("set_node_weight")

    def set_node_features(self, node: str, available: Sequence[str], active: Sequence[str]) -> None:
        self._not_modelled("set_node_features")

    def _not_modelled(self, method: str) -> NoReturn:
        self.calls[method] += 1
        raise SlurmCommandError(f"a simulated Slurm does not model {method}")

    def slurm_version(self) -> str:
        return SIMULATED_VERSION
