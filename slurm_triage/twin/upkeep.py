"""The twin's node upkeep: our Prolog and periodic health checks, the site's checks and
operators, repairs and the return of nodes to service.

Our Prolog and health checks decide with `policies.nodes.decide_node` (the circuit breaker
included) and act with `actuator.carry_out_node` through the simulated door, as on a real
node. The site's own periodic checks (for `none` and `native`) drain a
node whose fault they can see; operators drain, every `admin_review_h`, the nodes that
failed `admin_drain_failures` jobs since their last review. Every drained node goes to
repair: a reset (`reset_h`) when nothing is left wrong, a repair (`repair_h`) of a
persistent fault, an RMA (`rma_h`) of a node drained as a lemon, which fixes the lemon with
probability `lemon_fix`. Then our health check resumes the nodes we drained (repair on), or
an operator returns them `admin_return_h` after the drain (repair off); the site returns
its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurm_triage.actuator import carry_out_node
from slurm_triage.health_checks.result import Action as CheckAction
from slurm_triage.health_checks.result import RunReport, Severity, fail, ok
from slurm_triage.policies.nodes import NodeOutcome, decide_node
from slurm_triage.replay.door import SimDoor
from slurm_triage.twin.jobs import ADMIN_RETURN, CHECK, REPAIRED, RESUME_CHECK, REVIEW, Job
from slurm_triage.twin.nodes import OURS
from slurm_triage.twin.policysets import Kind
from slurm_triage.twin.scenario import FAULT_KINDS, FaultKind
from slurm_triage.twin.slurm_view import ClusterView, SlurmView

if TYPE_CHECKING:
    from slurm_triage.twin.engine import Twin

# A drained node with no fault in this long before its drain was drained for nothing.
FALSE_DRAIN_WINDOW_S = 3600.0


class Upkeep:
    def __init__(self, twin: Twin) -> None:
        self.twin = twin
        self.s = twin.s
        self.kind = twin.ps.kind
        self.view = SlurmView(twin)
        self.door = SimDoor(self.view)
        self.cluster = ClusterView(self.view)
        self.failed_since_review: dict[int, int] = {}

    def prolog_passes(self, job: Job, picked: list[int]) -> bool:
        """Our Prolog (triage) sees a visible persistent fault on a node it starts on with
        probability prolog_catch: it drains the node and Slurm requeues the job."""
        if self.kind is not Kind.TRIAGE or not self.twin.ps.prolog:
            return True
        twin, plan = self.twin, self.twin.faults
        for n in picked:
            i = twin.nodes.broken[n]
            if i is None or not plan.visible[i] or twin.rng.random() >= self.s.prolog_catch:
                continue
            if self._health_drain(n, FAULT_KINDS[int(plan.kind[i])], "prolog"):
                twin.measure.prolog_catches += 1
                job.restarts += 1  # Slurm requeues a job whose Prolog failed
                job.urgent = True
                return False
        return True

    def on_check(self, n: int, _token: int, i: int) -> None:
        """A periodic health check on a node whose persistent fault it can see."""
        twin = self.twin
        nodes = twin.nodes
        if nodes.broken[n] != i or nodes.drained[n]:
            return
        kind = FAULT_KINDS[int(twin.faults.kind[i])]
        if nodes.down[n]:
            drained = False
        elif self.kind is Kind.TRIAGE:
            drained = self._health_drain(n, kind, "health_check")
        else:
            drained = self.site_drain(n, f"NHC: {kind.check} failed", "site_check")
        if not drained:  # checked again at the next run
            twin.push(twin.now + self.s.check_interval_min * 60.0, CHECK, n, 0, i)

    def _health_drain(self, n: int, kind: FaultKind, why: str) -> bool:
        """Our health run failing `kind.check` on node n: decided by the node policy
        (circuit breaker included) and carried out by the node actuator, through the door."""
        twin = self.twin
        name = twin.nodes.names[n]
        result = fail(kind.check, "simulated fault", Severity.HIGH, CheckAction.DRAIN_NOW)
        report = RunReport(name, why, twin.now, 0.0, (result,))
        decision = decide_node(
            report,
            self.view.node_info(name),
            self.cluster,
            twin.ps.health,
            may_resume=True,
            now=twin.now,
        )
        if decision.outcome is NodeOutcome.BREAKER_OPEN:
            twin.measure.breaker_trips += 1
            return False
        done = carry_out_node(decision, self.door, dry_run=self._dry_run())
        self.settle(why)
        return done.applied and done.outcome is NodeOutcome.DRAIN

    def site_drain(self, n: int, reason: str, why: str) -> bool:
        """The site's own checks or operators drain the node (not our prefix)."""
        nodes = self.twin.nodes
        if nodes.drained[n]:
            return False
        nodes.set_drained(n, reason, self.twin.now)
        self.twin.measure.drain(why, self._false_drain(n))
        self._start_repair(n, rma=False)
        return True

    def _dry_run(self) -> bool:
        """As a health run: no change to Slurm when policy.act (or health.drain) is off."""
        ps = self.twin.ps
        return not (ps.policy.act and ps.health.drain)

    def settle(self, why: str, lemons: set[str] | frozenset[str] = frozenset()) -> None:
        """Count the drains just made through the door and send the nodes to repair."""
        nodes, m = self.twin.nodes, self.twin.measure
        for n in self.view.new_drains:
            rma = nodes.names[n] in lemons
            m.drain("lemon" if rma else why, self._false_drain(n))
            if rma and nodes.lemon[n]:
                m.lemons_drained.add(n)
            self._start_repair(n, rma)
        self.view.new_drains.clear()

    def _false_drain(self, n: int) -> bool:
        nodes = self.twin.nodes
        recent = self.twin.now - nodes.last_fault_s[n] <= FALSE_DRAIN_WINDOW_S
        return nodes.broken[n] is None and not nodes.lemon[n] and not recent

    # -- repair and return to service ----------------------------------------------------

    def _start_repair(self, n: int, rma: bool) -> None:
        nodes, s = self.twin.nodes, self.s
        hours = s.rma_h if rma else (s.repair_h if nodes.broken[n] is not None else s.reset_h)
        at = self.twin.now + hours * 3600.0
        self.twin.push(at, REPAIRED, n, nodes.token[n], int(rma))

    def on_repaired(self, n: int, token: int, rma: int) -> None:
        twin, nodes = self.twin, self.twin.nodes
        if nodes.token[n] != token or not nodes.drained[n]:
            return
        if nodes.broken[n] is not None:
            nodes.broken[n] = None
            nodes.broken_set.discard(n)
        if rma and nodes.lemon[n] and twin.rng.random() < self.s.lemon_fix:
            nodes.lemon[n] = False
            twin.measure.lemons_fixed += 1
        if nodes.owner[n] != OURS:
            nodes.set_resumed(n)  # the site's repair process returns its nodes
            twin.kick()
        elif self.kind is Kind.TRIAGE and twin.ps.repair:
            at = twin.now + twin.rng.random() * self.s.check_interval_min * 60.0
            twin.push(at, RESUME_CHECK, n, nodes.token[n])
        else:
            at = max(twin.now, nodes.drained_at[n] + self.s.admin_return_h * 3600.0)
            twin.push(at, ADMIN_RETURN, n, nodes.token[n])

    def on_resume_check(self, n: int, token: int, _: int) -> None:
        """Our periodic check passes on a node we drained: the node policy resumes it (only
        our own drains, never an operator's)."""
        twin, nodes = self.twin, self.twin.nodes
        if nodes.token[n] != token or not nodes.drained[n]:
            return
        if nodes.broken[n] is not None:  # a new fault while drained: back to repair
            self._start_repair(n, rma=False)
            return
        name = nodes.names[n]
        report = RunReport(name, "cron", twin.now, 0.0, (ok("gpu.count"),))
        decision = decide_node(
            report,
            self.view.node_info(name),
            self.cluster,
            twin.ps.health,
            may_resume=True,
            now=twin.now,
        )
        carry_out_node(decision, self.door, dry_run=self._dry_run())

    def on_admin_return(self, n: int, token: int, _: int) -> None:
        nodes = self.twin.nodes
        if nodes.token[n] == token and nodes.drained[n]:
            nodes.set_resumed(n)
            self.twin.kick()

    def on_review(self, *_: int) -> None:
        """Operators drain the nodes that failed too many jobs since their last review."""
        twin = self.twin
        for n, failed in sorted(self.failed_since_review.items()):
            if failed >= self.s.admin_drain_failures:
                self.site_drain(n, f"admin: {failed} failed jobs", "operator")
        self.failed_since_review.clear()
        twin.push(twin.now + self.s.admin_review_h * 3600.0, REVIEW)
