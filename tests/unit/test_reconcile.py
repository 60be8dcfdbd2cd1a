"""`slurm-triage nodes reconcile` against a FakeDoor that behaves as slurmctld (issue 16):
drained -> rebooted -> burn-in -> back in service; a failed remap -> RMA with its bundle;
idempotent passes, an admin's drain untouched, the breaker, dry runs, and the CLI."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.cli.main import main
from slurm_triage.cli.reconcile import reconcile
from slurm_triage.clock import Clock
from slurm_triage.config import Config, DecisionConfig, PathsConfig, RepairConfig
from slurm_triage.job_state import JobState
from slurm_triage.journal import Journal
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.observe.controller import controller_families, read_facts
from slurm_triage.policies.lifecycle import LifecycleAction, NodeLifecycle, burn_in_reservation
from slurm_triage.slurm import SlurmUnavailable
from slurm_triage.testing import FakeDoor, node_info

A, S = LifecycleAction, NodeLifecycle


class Ticking:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def clock(self) -> Clock:
        return Clock(time=lambda: self.now, monotonic=lambda: self.now, sleep=lambda s: None)


def _config(tmp_path: Path, **repair: object) -> Config:
    (tmp_path / "ev").mkdir(exist_ok=True)
    return Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        decision=DecisionConfig(journal=str(tmp_path / "j.sqlite")),
        repair=RepairConfig(**{"enabled": True, **repair}),  # type: ignore[arg-type]
    )


def _door(count: int = 20) -> FakeDoor:
    return FakeDoor(nodes=[node_info(f"node{i}") for i in range(1, count + 1)])


def _pass(config: Config, door: FakeDoor, journal: Journal, t: Ticking, **kw: object):  # type: ignore[no-untyped-def]
    steps = reconcile(config, door, journal, dry_run=False, clock=t.clock(), **kw)  # type: ignore[arg-type]
    return {s.decision.node: s for s in steps}


def test_a_node_returned_to_service_by_slurm_after_its_reboot_is_burned_in(
    tmp_path: Path,
) -> None:
    """A reboot an older version asked with nextstate=DOWN, mid-upgrade: slurmctld cleared
    DRAIN at boot, appended ' : reboot complete', and ReturnToService=2's next ping answer
    put the node back in service, our reason kept; the next pass burns it in all the same."""
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.xid XID 79 GPU 0000:3b:00.0 GPU has fallen off the bus")
    assert _pass(config, door, journal, t)["node2"].decision.action is A.REBOOT
    door.complete_reboot("node2")
    booted = door.node("node2")
    door.node_table["node2"] = replace(
        booted, state="IDLE", flags=frozenset(), reason=f"{booted.reason} : reboot complete"
    )
    t.now += 60
    step = _pass(config, door, journal, t)["node2"]
    assert step.decision.action is A.START_BURN_IN and step.applied, step
    assert not door.usable_by("node2")  # nothing else lands there during the burn-in


def test_a_returned_node_whose_reason_a_job_cleared_is_burned_in_after_that_job(
    tmp_path: Path,
) -> None:
    """Someone returned the rebooted node (an admin's resume; or ReturnToService=2 after an
    older version's nextstate=DOWN reboot), then a job landed and slurmctld cleared our
    reason: the journal still holds the reboot as the cycle's last step, so the burn-in is
    reserved (no new job lands) and runs after that job."""
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.xid XID 79 GPU 0000:3b:00.0 GPU has fallen off the bus")
    assert _pass(config, door, journal, t)["node2"].decision.action is A.REBOOT
    door.complete_reboot("node2")
    door.node_table["node2"] = replace(
        door.node("node2"), state="ALLOCATED", flags=frozenset(), reason=""
    )
    t.now += 60
    step = _pass(config, door, journal, t)["node2"]
    assert (step.decision.state, step.decision.action) == (S.REPAIRING, A.START_BURN_IN)
    assert step.applied and step.decision.cycle == 1, step
    assert not door.usable_by("node2")
    t.now += 60
    assert _pass(config, door, journal, t)["node2"].decision.state is S.BURN_IN


def test_a_suspect_mark_lost_to_scontrol_reconfigure_is_set_again(tmp_path: Path) -> None:
    """The journal holds node2's suspect mark; `scontrol reconfigure` reset its Weight and
    features from slurm.conf (seen on both releases). The next pass marks it again."""
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    mark = LifecycleEvent("node2", t.now - 3600, "healthy", "mark_suspect", True, "lemon")
    journal.add_lifecycle_events([replace(mark, detail={"weight_before": 1})])
    step = _pass(config, door, journal, t)["node2"]
    assert (step.decision.state, step.decision.action, step.applied) == (
        S.SUSPECT,
        A.MARK_SUSPECT,
        True,
    )
    node = door.node("node2")
    assert "triage_suspect" in node.features and node.weight == config.repair.suspect_weight
    t.now += 60
    assert _pass(config, door, journal, t)["node2"].decision.action is A.NONE  # cooling down


def test_a_reboot_that_times_out_is_left_for_a_person_until_the_node_boots(
    tmp_path: Path,
) -> None:
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.xid XID 79 GPU 0000:3b:00.0 GPU has fallen off the bus")
    assert _pass(config, door, journal, t)["node2"].decision.action is A.REBOOT
    door.time_out_reboot("node2")
    assert door.node("node2").reason.endswith(" : reboot timed out")
    for _ in range(2):
        t.now += 60
        step = _pass(config, door, journal, t)["node2"]
        assert step.decision.action is A.NONE and "a person must look" in step.decision.reason
    assert len(door.calls_to("reboot")) == 1
    door.complete_reboot("node2")  # booted after all: a person mended it
    t.now += 60
    assert _pass(config, door, journal, t)["node2"].decision.action is A.START_BURN_IN


def test_a_node_goes_drained_rebooted_burnt_in_and_back(tmp_path: Path) -> None:
    """The demo's story: XID 79 drain -> reboot -> burn-in passes -> node2 in service."""
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.xid XID 79 GPU 0000:3b:00.0 GPU has fallen off the bus")

    step = _pass(config, door, journal, t)["node2"]
    assert (step.decision.state, step.decision.action, step.applied) == (S.DRAINED, A.REBOOT, True)
    assert door.calls_to("reboot")[0].args == ("node2", "triage: repairing reboot gpu.xid")
    t.now += 60
    assert _pass(config, door, journal, t)["node2"].decision.action is A.NONE  # pending

    door.complete_reboot("node2")
    assert not door.usable_by("node2")  # drained through the reboot: nothing lands
    t.now += 60
    step = _pass(config, door, journal, t)["node2"]
    assert step.decision.action is A.START_BURN_IN and step.applied
    job_id = step.results[0].job_id
    assert job_id is not None
    assert burn_in_reservation("node2") in {r.name for r in door.reservations()}
    submitted = door.calls_to("submit_burn_in")[0]
    assert (
        submitted.args[2][-1] == "burn-in" and submitted.kwargs["job_name"] == "triage-burnin-node2"
    )
    assert not door.node("node2").drained and door.usable_by("node2", burn_in_reservation("node2"))
    assert not door.usable_by("node2")  # nothing else lands there during the burn-in

    door.start_job(job_id)
    t.now += 60
    assert _pass(config, door, journal, t)["node2"].decision.reason.endswith("running")
    door.end_job(job_id, JobState.COMPLETED)
    door.jobs[job_id] = replace(door.jobs[job_id], state=JobState.COMPLETED)  # completing done
    t.now += 60
    step = _pass(config, door, journal, t)["node2"]
    assert (step.decision.state, step.decision.action) == (S.BURN_IN, A.RETURN_TO_SERVICE)
    assert door.reservations() == () and door.usable_by("node2")

    t.now += 60
    assert _pass(config, door, journal, t)["node2"].decision.state is S.HEALTHY
    actions = [s.action for s in journal.lifecycle_events(node="node2")]
    assert actions[0] == "reboot" and "start_burn_in" in actions and "return_to_service" in actions
    families = {f.spec.name: f for f in controller_families(read_facts(journal, config, t.now))}
    by_state = families["slurm_triage_nodes_by_lifecycle_state"].samples
    assert by_state[("healthy",)] == 1 and by_state[("rma",)] == 0 and len(by_state) == 8


def test_reconcile_is_idempotent(tmp_path: Path) -> None:
    """A second pass over an unchanged cluster changes nothing and records nothing."""
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node3", "triage: ib.ports mlx5_0:1 DOWN")  # needs a person
    door.drain("node4", "cabling, ticket 123")  # an admin's
    _pass(config, door, journal, t)
    recorded = len(journal.lifecycle_events())
    door.calls.clear()
    t.now += 60
    steps = _pass(config, door, journal, t)
    assert door.mutations() == [] and len(journal.lifecycle_events()) == recorded
    assert (
        steps["node3"].decision.state is S.DRAINED
        and "needs a person" in steps["node3"].decision.reason
    )
    assert steps["node4"].decision.state is S.ADMIN
    assert door.node("node4").reason == "cabling, ticket 123"


def test_a_failed_remap_goes_to_rma_with_its_bundle(tmp_path: Path) -> None:
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node5", "triage: gpu.row_remap GPU 1 (0000:3b:00.0) row remap failure (RMA)")
    step = _pass(config, door, journal, t)["node5"]
    assert step.decision.action is A.SEND_TO_RMA and step.applied
    assert door.node("node5").reason.startswith("triage: rma gpu.row_remap")
    bundle = json.loads(Path(step.bundle).read_text())
    assert bundle["node"] == "node5" and bundle["slurm"]["reason"].startswith("triage: rma")
    assert Path(step.bundle).parent == tmp_path / "ev" / "_root" / "rma"
    t.now += 3600
    again = _pass(config, door, journal, t)["node5"]
    assert (again.decision.state, again.decision.action) == (S.RMA, A.NONE)


def test_the_breaker_holds_repairs_back(tmp_path: Path) -> None:
    """With 20 nodes and 5%: one node at a time; the others wait drained."""
    config, door, t = (
        _config(tmp_path, max_share_in_repair=0.05, min_nodes_in_repair=1),
        _door(),
        Ticking(),
    )
    journal = Journal(config.decision.journal)
    for name in ("node1", "node2", "node3"):
        door.drain(name, "triage: gpu.lost GPU 0 lost")
    steps = _pass(config, door, journal, t)
    started = [n for n, s in steps.items() if s.decision.action is A.REBOOT]
    waiting = [n for n, s in steps.items() if "waiting" in s.decision.reason]
    assert started == ["node1"] and waiting == ["node2", "node3"]


def test_a_dry_run_changes_nothing_and_records_once(tmp_path: Path) -> None:
    config, door, t = _config(tmp_path), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.lost GPU 0 lost")
    door.calls.clear()
    steps = reconcile(config, door, journal, dry_run=True, clock=t.clock())
    step = next(s for s in steps if s.decision.node == "node2")
    assert step.decision.action is A.REBOOT and not step.applied
    assert door.mutations() == []
    reconcile(config, door, journal, dry_run=True, clock=t.clock())
    assert [e.applied for e in journal.lifecycle_events(node="node2")] == [False]


def test_repair_disabled_only_records(tmp_path: Path) -> None:
    config, door, t = _config(tmp_path, enabled=False), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.lost GPU 0 lost")
    door.calls.clear()
    step = _pass(config, door, journal, t)["node2"]
    assert step.decision.action is A.NONE and door.mutations() == []


def test_a_failed_burn_in_drains_it_again_then_rma(tmp_path: Path) -> None:
    config, door, t = _config(tmp_path, rma_after_cycles=1), _door(), Ticking()
    journal = Journal(config.decision.journal)
    door.drain("node2", "triage: gpu.lost GPU 0 lost")
    _pass(config, door, journal, t)
    door.complete_reboot("node2")
    job_id = _pass(config, door, journal, t)["node2"].results[0].job_id
    assert job_id is not None
    door.start_job(job_id)
    door.end_job(job_id, JobState.FAILED, exit_code=1)
    door.jobs[job_id] = replace(door.jobs[job_id], state=JobState.FAILED)
    step = _pass(config, door, journal, t)["node2"]
    assert step.decision.action is A.SEND_TO_RMA
    assert [r.action.value for r in step.results] == ["rma", "end_burn_in"]
    assert door.node("node2").drained and door.reservations() == ()


@pytest.fixture
def cli_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "ev").mkdir()
    path = tmp_path / "c.toml"
    path.write_text(
        f'[paths]\nevidence_dir = "{tmp_path}/ev"\nstate_dir = "{tmp_path}/st"\n'
        f'[decision]\njournal = "{tmp_path}/j.sqlite"\n[repair]\nenabled = true\n'
    )
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(path))
    return tmp_path


@pytest.fixture
def cli_door(cli_env: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDoor:
    """Four nodes: the door the CLI opens."""
    door = _door(4)
    monkeypatch.setattr("slurm_triage.slurm.open_door", lambda *a, **k: door)
    return door


def test_the_cli_prints_reconciles_and_releases(
    cli_door: FakeDoor, capsys: pytest.CaptureFixture[str]
) -> None:
    door = cli_door
    door.drain("node2", "triage: rma gpu.row_remap part replacement")
    assert main(["nodes", "reconcile", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {n["node"]: n["state"] for n in out["nodes"]}["node2"] == "rma"
    assert main(["nodes", "--json", "node2"]) == 0
    shown = json.loads(capsys.readouterr().out)["nodes"][0]
    assert (shown["node"], shown["state"]) == ("node2", "rma")
    assert main(["nodes", "release", "node2"]) == 0
    assert door.node("node2").reason.startswith("triage: burn-in pending gpu.row_remap released by")
    assert main(["nodes", "release", "node1"]) == 2  # not ours to release
    assert "nothing to release" in capsys.readouterr().err
    assert main(["nodes", "release", "node1;reboot"]) == 2
    assert main(["nodes", "release", "node[1-2]"]) == 2
    assert main(["nodes", "--dry-run"]) == 2
    capsys.readouterr()
    door.fail("nodes", SlurmUnavailable("scontrol: Unable to contact slurm controller"))
    assert main(["nodes", "reconcile"]) == 3  # as --help says
    assert capsys.readouterr().err.strip() == (
        "slurm-triage: error: Slurm could not be read: scontrol: Unable to contact slurm controller"
    )


def test_nodes_shows_a_node_back_before_its_burn_in_as_repairing(
    cli_door: FakeDoor, capsys: pytest.CaptureFixture[str]
) -> None:
    """`nodes` reads the journal as reconcile does: rebooted, in service, reason cleared."""
    door = cli_door
    door.drain("node2", "triage: gpu.xid XID 79 GPU 0000:3b:00.0 GPU has fallen off the bus")
    assert main(["nodes", "reconcile", "--json"]) == 0
    door.complete_reboot("node2")
    door.node_table["node2"] = replace(
        door.node("node2"), state="IDLE", flags=frozenset(), reason=""
    )
    capsys.readouterr()
    assert main(["nodes", "--json", "node1", "node2"]) == 0
    shown = {n["node"]: n["state"] for n in json.loads(capsys.readouterr().out)["nodes"]}
    assert shown == {"node1": "healthy", "node2": "repairing"}


def test_the_bundle_carries_what_root_recorded_for_the_burn_in_jobs(tmp_path: Path) -> None:
    """A burn-in on a broken node fails in the Prolog's screen (seen on the dev cluster):
    the bundle carries that record's failed checks, with times and PCI ids; passing checks
    and other nodes' facts stay out."""
    from slurm_triage.cli.rma_bundle import _burn_in_facts
    from slurm_triage.evidence.store.root_records import write_root_file

    config = _config(tmp_path)
    failed = {"kind": "health_check", "node": "node3", "time": 1.0, "check": "gpu.lost",
              "status": "FAIL", "reason": "GPU1 00000000:2A:00.0 GPU is lost"}  # fmt: skip
    passed = {**failed, "check": "fs.mounts", "status": "OK"}
    other = {**failed, "node": "node4"}
    record = {"facts": [failed, passed, other]}
    write_root_file(
        config.paths.evidence_dir, "12", "node3.prolog.json", json.dumps(record).encode()
    )
    assert _burn_in_facts(config, "node3", [12, 12, 13]) == [{"job_id": 12, **failed}]
