"""Issue 16 on the real local cluster: the node lifecycle through slurmctld's own reboot and
a real burn-in job. XID 79 on node2 → drained by its health check → `nodes reconcile`
reboots it (the dev cluster's RebootProgram restarts its slurmd) → burn-in job in a
maintenance reservation passes → node2 back in service; a node whose fault survives reboots
fails its burn-in until it goes to RMA with its evidence bundle."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from slurm_triage.config import RepairConfig
from slurm_triage.devcluster import cluster
from slurm_triage.journal import Journal
from slurm_triage.journal.records import LifecycleEvent
from slurm_triage.slurm import open_door
from tests.integration.slurmtest import (
    env,
    log_tail,
    run,
    sbatch,
    scontrol,
    triage_config,
    wait_for,
)

pytestmark = pytest.mark.integration

REPAIR = "\n[repair]\nenabled = true\nrma_after_cycles = 2\nmax_share_in_repair = 0.7\n"


def triage(layout, *args: str, node: str | None = None):  # type: ignore[no-untyped-def]
    return run(layout, *args, node=node, timeout=120)


@pytest.fixture
def repair(devcluster) -> Iterator[object]:  # type: ignore[no-untyped-def]
    """The cluster with `[repair] enabled`, put back as it was afterwards."""
    # A journal of its own: the session's other tests blamed these nodes before (lemon and
    # suspect history), which would change the lifecycle this test follows.
    main = str(devcluster.state_dir / "journal.sqlite")
    own = devcluster.state_dir / "journal-repair.sqlite"
    own.unlink(missing_ok=True)
    door = open_door(env=env(devcluster), timeout_s=15, backend=devcluster.backend)
    try:
        with triage_config(devcluster, REPAIR, replace={main: str(own)}):
            yield door
    finally:
        own.unlink(missing_ok=True)
        for node in ("node2", "node3"):
            triage(devcluster, "slurm-triage", "inject", "--node", node, "clear")
            for res in door.reservations():
                if res.name.startswith("triage_burnin_"):
                    scontrol(devcluster, "delete", f"ReservationName={res.name}")
            wait_for(lambda n=node: not door.node(n).reboot_pending, 60, f"{node} rebooted")
            info = door.node(node)
            if info.state == "DOWN" or info.drained:
                scontrol(devcluster, "update", f"nodename={node}", "state=resume")
            wait_for(lambda n=node: door.node(n).responding, 60, f"{node} in service")


def reconcile_row(layout, node: str) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """One `nodes reconcile` pass, as the timer runs it: `node`'s row, which holds no errors."""
    out = triage(layout, "slurm-triage", "nodes", "reconcile", "--json")
    assert out.returncode in (0, 3), out.stderr
    row = next(n for n in json.loads(out.stdout)["nodes"] if n["node"] == node)
    assert not row["errors"], row
    return row  # type: ignore[no-any-return]


def reconcile_until(layout, node: str, state: str, timeout_s: float = 120) -> list[dict]:  # type: ignore[no-untyped-def]
    """Run `nodes reconcile` as the timer would (every few seconds here) until `node` is in
    `state`; the passes' rows for that node."""
    seen: list[dict] = []

    def reached() -> bool:
        row = reconcile_row(layout, node)
        if row["action"] != "none" or not seen:
            seen.append(row)
        return row["state"] == state and row["action"] == "none"

    wait_for(reached, timeout_s, f"{node} {state}", interval_s=2)
    return seen


def _story(layout, rows: list[dict]) -> str:  # type: ignore[no-untyped-def,type-arg]
    """The passes' rows in full and slurmctld's lines about node2, for a failed story."""
    passes = [f"{r['state']} {r['action']} {r['reason']!r}" for r in rows]
    about = log_tail(layout, "slurmctld.log", 40, "node2", "JobId=")
    return "\n".join(["reconcile rows:", *passes, "--- slurmctld.log", *about])


def test_xid_79_node_is_rebooted_burned_in_and_returned(devcluster, repair) -> None:  # type: ignore[no-untyped-def]
    door = repair
    triage(devcluster, "slurm-triage", "inject", "--node", "node2", "xid=79", "--gpu", "3")
    assert triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node2").returncode == 0
    assert door.node("node2").reason.startswith("triage: gpu.lost GPU3")
    # With repair enabled the periodic check returns nothing by itself, even once it passes.
    triage(devcluster, "slurm-triage", "inject", "--node", "node2", "clear")
    triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node2")
    assert door.node("node2").drained
    triage(devcluster, "slurm-triage", "inject", "--node", "node2", "xid=79", "--gpu", "3")

    rows = reconcile_until(devcluster, "node2", "healthy")
    steps = [r["action"] for r in rows]
    done = [s for s in steps if s != "none"]
    assert done == ["reboot", "start_burn_in", "return_to_service"], _story(devcluster, rows)
    node = door.node("node2")
    assert not node.drained and node.state != "DOWN"
    assert not [r for r in door.reservations() if r.name == "triage_burnin_node2"]

    shown = json.loads(triage(devcluster, "slurm-triage", "nodes", "--json", "node2").stdout)
    row = shown["nodes"][0]
    assert row["state"] == "healthy" and row["repair_cycles"] == 1
    history = sorted(row["history"], key=lambda h: h["at"])
    assert [h["action"] for h in history if h["action"] != "none"] == [
        "reboot",
        "start_burn_in",
        "return_to_service",
    ]
    # A job lands on node2 again.
    job = sbatch(devcluster, "-N1", "-w", "node2", "--wrap", "true")
    wait_for(lambda: door.job(job).state.finished, 60, "a job on node2")


def test_uncorrectable_ecc_is_mended_by_the_nodes_own_gpu_reset(devcluster, repair) -> None:  # type: ignore[no-untyped-def]
    """The GPU-reset repair end to end: an uncorrectable ECC error drains node2 (gpu.ecc),
    reconcile asks for a GPU reset through the node's reason, node2's own health
    check resets it while node2 is idle and drained, its screen passes, and reconcile burns
    node2 in and returns it to service; no reboot."""
    door = repair
    triage(devcluster, "slurm-triage", "inject", "--node", "node2", "ecc=2", "--gpu", "1")
    triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node2")
    assert door.node("node2").reason.startswith("triage: gpu.ecc"), door.node("node2")

    row = reconcile_row(devcluster, "node2")
    assert (row["action"], row["errors"]) == ("request_gpu_reset", []), row
    asked = door.node("node2").reason
    # The check's reason names no GPU index the lifecycle reads: every GPU, on an idle node.
    assert asked.startswith("triage: repairing gpu_reset gpu=all gpu.ecc"), asked

    checked = triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node2")
    assert checked.returncode == 0, checked.stderr
    assert door.node("node2").reason.startswith("triage: burn-in pending gpu.ecc")
    assert door.node("node2").drained

    rows = reconcile_until(devcluster, "node2", "healthy")
    assert [r["action"] for r in rows if r["action"] != "none"] == [
        "start_burn_in",
        "return_to_service",
    ], rows
    node = door.node("node2")
    assert not node.drained and node.state != "DOWN" and not node.reboot_pending


def test_a_fault_that_survives_reboots_goes_to_rma_with_its_bundle(devcluster, repair) -> None:  # type: ignore[no-untyped-def]
    door = repair
    injected = triage(
        devcluster, "slurm-triage", "inject", "--node", "node3", "xid=79", "--gpu", "1",
        "--persistent",
    )  # fmt: skip
    assert injected.returncode == 0, injected.stderr
    triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node3")
    rows = reconcile_until(devcluster, "node3", "rma", timeout_s=240)
    actions = [r["action"] for r in rows]
    assert actions.count("reboot") == 2 and actions.count("fail_burn_in") == 1
    assert "send_to_rma" in actions
    bundle_path = next(r["bundle"] for r in rows if r["bundle"])
    with open(bundle_path) as fh:
        bundle = json.load(fh)
    assert bundle["node"] == "node3" and bundle["slurm"]["name"] == "node3"
    assert [h["action"] for h in bundle["repair_history"]].count("reboot") == 2
    lost = [f for f in bundle["burn_in_evidence"] if f.get("check") == "gpu.lost"]
    assert lost and "00000000:2A:00.0" in lost[0]["reason"] and lost[0]["time"]
    node = door.node("node3")
    assert node.drained and node.reason.startswith("triage: rma ")
    # Out for good: more passes and a passing check change nothing.
    triage(devcluster, "slurm-triage", "inject", "--node", "node3", "clear")
    triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node3")
    triage(devcluster, "slurm-triage", "nodes", "reconcile")
    assert door.node("node3").reason.startswith("triage: rma ")
    released = triage(devcluster, "slurm-triage", "nodes", "release", "node3")
    assert released.returncode == 0, released.stderr
    reconcile_until(devcluster, "node3", "healthy", timeout_s=120)


def test_a_reboot_that_does_not_come_back_is_left_for_a_person_until_the_node_boots(  # type: ignore[no-untyped-def]
    devcluster, repair
) -> None:
    """node2 does not come back from its repair reboot (inject boot_hang: the RebootProgram
    stops its slurmd for good). slurmctld times the reboot out after ResumeTimeout
    (" : reboot timed out"), and `nodes reconcile` leaves node2 DOWN for a person rather
    than rebooting it again. When the person has mended it and it boots, it is no longer
    DOWN (25.11: drained still, our reboot asked no next state; 22.05 cleared DRAIN at the
    timeout, so ReturnToService=2 returns it, and the journal says it is unproven), and
    reconcile burns it in and returns it to service."""
    door = repair
    for fault in ("boot_hang", "xid=79"):
        triage(devcluster, "slurm-triage", "inject", "--node", "node2", fault, "--gpu", "3")
    try:
        triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node2")
        assert door.node("node2").drained
        rows: list[dict] = []  # type: ignore[type-arg]

        def left_for_a_person() -> bool:
            row = reconcile_row(devcluster, "node2")
            rows.append(row)
            return "a person must look" in row["reason"]

        wait_for(left_for_a_person, 120, "node2's reboot timed out", interval_s=3)
        assert [r["action"] for r in rows if r["action"] != "none"] == ["reboot"], rows
        node = door.node("node2")
        assert node.state == "DOWN" and not node.reboot_pending, node
        assert node.reason.startswith("triage: repairing reboot gpu.lost : reboot issued"), node
        assert node.reason.endswith(" : reboot timed out"), node
        # Another pass changes nothing: no second reboot of a node that did not come back.
        assert left_for_a_person() and rows[-1]["action"] == "none", rows[-1]

        # The person's repair: the fault is mended and the node boots.
        triage(devcluster, "slurm-triage", "inject", "--node", "node2", "clear")
        cluster.start_slurmd(devcluster, "node2")
        wait_for(lambda: door.node("node2").state != "DOWN", 60, "node2 booted")
        later = reconcile_until(devcluster, "node2", "healthy", timeout_s=180)
        assert [r["action"] for r in later if r["action"] != "none"] == [
            "start_burn_in",
            "return_to_service",
        ], later
    finally:
        triage(devcluster, "slurm-triage", "inject", "--node", "node2", "clear")
        cluster.start_slurmd(devcluster, "node2")  # none when it runs


def test_a_node_back_in_service_before_its_burn_in_is_burned_in_after_the_job_it_took(  # type: ignore[no-untyped-def]
    devcluster, repair
) -> None:
    """Our reboot leaves node2 drained (no next state), but someone may return it before
    reconcile's next pass: an admin's resume (as here), or ReturnToService=2 after a reboot
    an older version asked with nextstate=DOWN. A job lands there and our reason is gone.
    The journal still holds our reboot as the cycle's last step: reconcile reserves node2
    (IGNORE_JOBS: the job runs on), the burn-in waits for that job, passes, and node2 is
    back in service."""
    door = repair
    triage(devcluster, "slurm-triage", "inject", "--node", "node2", "xid=79", "--gpu", "3")
    triage(devcluster, str(devcluster.hooks / "healthcheck"), node="node2")
    assert door.node("node2").drained
    assert reconcile_row(devcluster, "node2")["action"] == "reboot"
    wait_for(
        lambda: not (n := door.node("node2")).reboot_pending and n.state != "DOWN",
        60,
        "node2 rebooted",
    )
    assert door.node("node2").drained  # drained through the reboot: nothing lands there
    job = sbatch(devcluster, "-N1", "-w", "node2", "--wrap", "sleep 20")
    scontrol(devcluster, "update", "nodename=node2", "state=resume")
    wait_for(lambda: door.job(job).state == "RUNNING", 60, "the job on node2")
    assert not door.node("node2").reason.startswith("triage:"), door.node("node2")

    row = reconcile_row(devcluster, "node2")
    assert (row["state"], row["action"]) == ("repairing", "start_burn_in"), row
    assert door.job(job).state == "RUNNING"  # the reservation let it run on
    rows = reconcile_until(devcluster, "node2", "healthy", timeout_s=180)
    assert [r["action"] for r in rows if r["action"] != "none"] == ["return_to_service"], rows
    assert door.job(job).state == "COMPLETED"
    history = json.loads(triage(devcluster, "slurm-triage", "nodes", "--json", "node2").stdout)
    steps = sorted(history["nodes"][0]["history"], key=lambda h: h["at"])
    done = [h["action"] for h in steps if h["action"] != "none"]
    assert done == ["reboot", "start_burn_in", "return_to_service"], done


def _marked(node) -> bool:  # type: ignore[no-untyped-def]
    return "triage_suspect" in node.features and node.weight == RepairConfig().suspect_weight


def test_a_suspect_mark_scontrol_reconfigure_dropped_is_set_again(devcluster, repair) -> None:  # type: ignore[no-untyped-def]
    """`scontrol reconfigure` resets Weight and features from slurm.conf, taking the suspect
    mark off. The journal still holds it (written here as reconcile writes a lemon's mark):
    the next pass marks node1 again."""
    door = repair
    journal = Journal(str(devcluster.state_dir / "journal-repair.sqlite"))
    mark = LifecycleEvent("node1", time.time() - 60, "healthy", "mark_suspect", True, "lemon")
    journal.add_lifecycle_events([replace(mark, detail={"weight_before": 1})])
    journal.close()
    try:
        row = reconcile_row(devcluster, "node1")
        assert (row["state"], row["action"]) == ("suspect", "mark_suspect"), row
        assert _marked(door.node("node1")), door.node("node1")
        scontrol(devcluster, "reconfigure")
        wait_for(lambda: not _marked(door.node("node1")), 60, "node1's mark dropped")
        wait_for(lambda: door.node("node1").responding, 60, "node1 responding")
        row = reconcile_row(devcluster, "node1")
        assert (row["state"], row["action"]) == ("suspect", "mark_suspect"), row
        assert _marked(door.node("node1")), door.node("node1")
    finally:
        scontrol(devcluster, "reconfigure")  # slurm.conf's Weight and features back
        wait_for(lambda: not _marked(door.node("node1")), 60, "node1 unmarked")
        wait_for(lambda: door.node("node1").responding, 60, "node1 responding")
