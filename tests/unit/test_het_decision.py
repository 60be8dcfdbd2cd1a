"""A het job is decided once, by its leader's EpilogSlurmctld, over every component's nodes.

slurmctld runs EpilogSlurmctld once per component, each with its own SLURM_JOB_ID and
nodes, SLURM_HET_JOB_ID and SLURM_HET_JOB_OFFSET; the leader's run alone has
SLURM_HET_JOB_NODELIST (job_mgr.c job_common_env_vars, 22.05 and 25.11). A node's Epilog
has SLURM_HET_JOB_ID too (prep_script_slurmd.c), and files its record under the leader."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config, DecisionConfig, HealthConfig, PathsConfig, PolicyConfig
from slurm_triage.decider import protocol
from slurm_triage.evidence.store import read_root_records
from slurm_triage.journal import Journal
from slurm_triage.prolog_epilog.decide import decide_from_env
from slurm_triage.prolog_epilog.epilog import run_epilog
from slurm_triage.prolog_epilog.job_end import JobEnd
from slurm_triage.slurm import JobState
from slurm_triage.testing import FakeDoor, job_info, node_infos

LEADER, PART = 200, 203  # component ids are not always the leader's + offset
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', GPU has fallen off the bus."


def controller_env(job_id: int, offset: int, nodes: str, **more: str) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": str(job_id),
        "SLURM_JOB_UID": "4242",
        "SLURM_JOB_EXIT_CODE2": "1:0",
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_HET_JOB_ID": str(LEADER),
        "SLURM_HET_JOB_OFFSET": str(offset),
        **more,
    }


def test_the_leaders_end_covers_every_components_nodes() -> None:
    env = controller_env(LEADER, 0, "node1", SLURM_HET_JOB_NODELIST="node[1,3]")
    end = JobEnd.from_env(env, 0.0)
    assert (end.nodes, end.het_job_id, end.evidence_job_id) == (("node1", "node3"), LEADER, LEADER)
    assert not end.het_component
    part = JobEnd.from_env(controller_env(PART, 1, "node3"), 0.0)
    assert (part.nodes, part.evidence_job_id, part.het_component) == (("node3",), LEADER, True)
    plain = JobEnd.from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node1"}, 0.0)
    assert (plain.het_job_id, plain.evidence_job_id, plain.het_component) == (None, 7, False)


def test_the_decider_passes_the_het_variables_on() -> None:
    """EpilogSlurmctld's request to the decider keeps what the decision needs of a het job."""
    env = controller_env(LEADER, 0, "node1", SLURM_HET_JOB_NODELIST="node[1,3]")
    read = {name: value for name, value in env.items() if name != "SLURM_HET_JOB_OFFSET"}
    assert protocol.parse_request(protocol.encode_request(env).rstrip(b"\n")) == read


def _config(tmp_path: Path) -> Config:
    evidence = tmp_path / "evidence"
    (evidence / "_root").mkdir(parents=True, exist_ok=True)
    os.chmod(evidence, 0o1777)
    kern = tmp_path / "kern.log"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 5))
    kern.write_text(f"{stamp} node3 kernel: {XID79}\n")
    return Config(
        paths=PathsConfig(evidence_dir=str(evidence), state_dir=str(tmp_path / "state")),
        health=HealthConfig(expected_gpus=0, kernel_log=str(kern), mounts=()),
        decision=replace(
            DecisionConfig(), journal=str(tmp_path / "journal.sqlite"), wait_for_nodes_s=0
        ),
        policy=PolicyConfig(),
    )


def _het_door() -> FakeDoor:
    leader = job_info(LEADER, nodes=("node1",), num_nodes=1, het_job_id=LEADER, het_job_offset=0)
    part = job_info(PART, nodes=("node3",), num_nodes=1, het_job_id=LEADER, het_job_offset=1)
    door = FakeDoor([replace(leader, excluded_nodes=("node4",)), part], node_infos(6))
    for job_id in (LEADER, PART):
        door.jobs[job_id] = replace(
            door.jobs[job_id], state=JobState.RUNNING, start_time=time.time() - 60
        )
        door.end_job(job_id, "FAILED", exit_code=1)
    return door


@pytest.mark.skipif(os.geteuid() != 0, reason="root's evidence area is root's")
def test_a_fault_on_a_components_node_is_decided_once_by_the_leader(tmp_path: Path) -> None:
    """XID 79 on node3, the component's node: its Epilog files the record under the leader;
    the component's EpilogSlurmctld decides nothing; the leader's blames node3, requeues
    the het job once and excludes node3 from each component, keeping the leader's own."""
    config = _config(tmp_path)
    node_env = {
        "SLURM_JOB_ID": str(PART),
        "SLURM_HET_JOB_ID": str(LEADER),
        "SLURMD_NODENAME": "node3",
        "SLURM_JOB_UID": "4242",
        "SLURM_JOB_EXIT_CODE2": "1:0",
        "SLURM_JOB_NODELIST": "node3",
    }
    run_epilog(config, node_env)
    (record,) = read_root_records(config.paths.evidence_dir, LEADER, ["node3"]).records
    assert record.job_id == str(LEADER)

    door = _het_door()
    assert decide_from_env(config, controller_env(PART, 1, "node3"), door) is None
    assert door.calls == []
    outcome = decide_from_env(
        config, controller_env(LEADER, 0, "node1", SLURM_HET_JOB_NODELIST="node[1,3]"), door
    )
    assert outcome is not None and outcome.attribution is not None
    assert (outcome.attribution.cause.value, outcome.attribution.nodes) == (
        "gpu_unavailable",
        ("node3",),
    )
    assert door.methods().count("requeue") == 1
    assert door.jobs[LEADER].excluded_nodes == ("node4", "node3")
    assert door.jobs[PART].excluded_nodes == ("node3",)
    assert [j.restart_count for j in (door.jobs[LEADER], door.jobs[PART])] == [1, 1]
    rows = Journal(config.decision.journal).decisions()
    assert [(r.job_id, r.nodes) for r in rows] == [(LEADER, ("node1", "node3"))]


def test_the_agent_passes_the_het_leader_to_the_prolog_it_serves() -> None:
    """A Prolog served by the node agent files a turned-away record under the leader too."""
    from slurm_triage.agent import protocol as agent_protocol

    env = {"SLURM_JOB_ID": str(PART), "SLURM_HET_JOB_ID": str(LEADER), "SLURMD_NODENAME": "node3"}
    line = agent_protocol.encode_request(env)
    assert agent_protocol.parse_request(line.rstrip(b"\n")).env == env


@pytest.mark.skipif(os.geteuid() != 0, reason="the job's output is chowned")
def test_a_het_jobs_output_is_not_pinned_to_the_leaders_one_node(tmp_path: Path) -> None:
    """A CPU leader on one node and a GPU component elsewhere: the leader's output file is
    every component's, so its lines name no node of their own (srun's lines name theirs)."""
    from slurm_triage.clock import Clock
    from slurm_triage.evidence import RootException
    from slurm_triage.prolog_epilog.gather import output_facts

    out = tmp_path / "slurm-200.out"
    out.write_text(
        "[rank5]: Traceback (most recent call last):\n"
        '[rank5]:   File "/home/ana/train.py", line 188, in main\n'
        "[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    )
    os.chown(out, 4242, 4242)
    leader = job_info(LEADER, nodes=("cpu1",), num_nodes=1, batch_host="cpu1", std_out=str(out))
    leader = replace(leader, het_job_id=LEADER, het_job_offset=0)

    def root_node(nodes: tuple[str, ...] | None) -> str | None:
        facts, _ = output_facts(leader, 4242, time.monotonic() + 30, Clock(), nodes=nodes)
        (root,) = [f for f in facts if isinstance(f, RootException)]
        return root.node

    assert root_node(None) == "cpu1"  # a job of one node: its batch host wrote every line
    assert root_node(("cpu1", "gpu3")) is None
