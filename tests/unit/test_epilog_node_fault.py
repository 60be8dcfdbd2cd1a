"""The node Epilog exits non-zero exactly when root's evidence on its own node would drain
it (Slurm then drains the node at once and restarts an expedited-requeue job elsewhere)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_triage.config import Config, DecisionConfig, HealthConfig, PathsConfig, PolicyConfig
from slurm_triage.prolog_epilog.epilog import NODE_FAULT_EXIT, run_epilog


def _stamp(offset_s: float = -5.0) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() + offset_s))


XID79 = "node1 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', GPU has fallen off the bus."
XID13 = "node1 kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception"
# A fault in a user's file named like the driver's message: the kernel prints the name.
FORGED = (
    "node1 kernel: python[4242]: segfault at 8 ip 00007f3c2a1b4e10 sp 00007ffd5e2c1a08 error 15 "
    "in NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.[7f0000000000+1000]"
)


def _config(tmp_path: Path, kernel_line: str, **decision: object) -> Config:
    kern = tmp_path / "kern.log"
    kern.write_text(f"{_stamp()} {kernel_line}\n")
    return Config(
        paths=PathsConfig(evidence_dir=str(tmp_path / "ev"), state_dir=str(tmp_path / "st")),
        health=HealthConfig(expected_gpus=0, kernel_log=str(kern), mounts=()),
        decision=replace(DecisionConfig(), **decision),  # type: ignore[arg-type]
    )


def _env(exit2: str = "1:0") -> dict[str, str]:
    return {
        "SLURM_JOB_ID": "41",
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_UID": "1000",
        "SLURM_JOB_EXIT_CODE2": exit2,
        "SLURM_JOB_NODELIST": "node[1-2]",
    }


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    (tmp_path / "ev" / "_root").mkdir(parents=True)
    return tmp_path


def test_a_failed_job_with_xid79_on_this_node_fails_the_epilog(evidence: Path) -> None:
    assert run_epilog(_config(evidence, XID79), _env()) == NODE_FAULT_EXIT
    # The record is written first: the decision still reads this node's evidence.
    assert list((evidence / "ev").rglob("*node1*"))


@pytest.mark.parametrize(
    "line, exit2",
    [
        (XID79, "0:0"),  # the job completed: the decision does not drain for it either
        (XID13, "1:0"),  # a user's own GPU exception is no node fault
        (FORGED, "1:0"),  # user-made kernel text is the user's segfault, not hardware
        ("node1 kernel: e1000e: eth0 NIC Link is Up 1000 Mbps", "1:0"),
    ],
)
def test_no_node_fault_means_exit_zero(evidence: Path, line: str, exit2: str) -> None:
    assert run_epilog(_config(evidence, line), _env(exit2)) == 0


def test_switched_off_or_dry_run_never_fails_the_epilog(evidence: Path) -> None:
    assert run_epilog(_config(evidence, XID79, fail_epilog_on_node_fault=False), _env()) == 0
    dry = replace(_config(evidence, XID79), policy=PolicyConfig(act=False))
    assert run_epilog(dry, _env()) == 0


def test_a_cause_the_site_does_not_drain_for_never_fails_the_epilog(evidence: Path) -> None:
    config = replace(_config(evidence, XID79), policy=PolicyConfig(drain_causes=("filesystem",)))
    assert run_epilog(config, _env()) == 0
