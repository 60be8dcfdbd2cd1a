"""What EpilogSlurmctld imports when the decider decides (issue 20): the client alone. None
of the config, the decision, its attribution, policies, journal or door: they are what the
decider keeps loaded so that a job end does not pay them."""

from __future__ import annotations

from pathlib import Path

from slurm_triage.decider import protocol
from slurm_triage.decider.protocol import DecidedHow
from tests.unit.test_decider import fake_decider
from tests.unit.test_fast_path_imports import NEVER, _imported, _present

NOT_IN_DECIDER_CLIENT = (
    "slurm_triage.config",
    "tomllib",
    "slurm_triage.logs",
    "slurm_triage.prolog_epilog.decide",
    "slurm_triage.attribution",
    "slurm_triage.policies",
    "slurm_triage.journal",
    "slurm_triage.slurm",
    "slurm_triage.actuator",
    "slurm_triage.evidence",
    "sqlite3",
    "dataclasses",
    "typing",
    "threading",
    "subprocess",
)


def test_epilog_slurmctld_answered_by_the_decider(tmp_path: Path) -> None:
    """EpilogSlurmctld whose job end the decider accepted and decided imports the decider's
    client and its wire format, nothing of the decision."""
    path = str(tmp_path / "run" / "decider.sock")
    answers = [
        protocol.encode_accepted(5),
        protocol.encode_decided(DecidedHow.DECIDED, "gpu_unavailable", "requeue", 0.01),
    ]
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_JOB_EXIT_CODE2": "1:0",
        protocol.SOCKET_ENV: path,
        # were the config read, it would fail: the client must not read it
        "SLURM_TRIAGE_CONFIG": str(tmp_path / "absent.toml"),
    }
    code = (
        "import sys\nfrom slurm_triage.prolog_epilog.entry import epilog_slurmctld_main\n"
        "sys.exit(epilog_slurmctld_main())\n"
    )
    with fake_decider(path, answers):
        modules = _imported(code, tmp_path, env)
    assert "slurm_triage.decider.client" in modules
    assert _present(modules, NEVER + NOT_IN_DECIDER_CLIENT) == []
