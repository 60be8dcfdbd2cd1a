"""What slurmd and slurmctld tell the slurm.conf programs, read from one table of SLURM_*
names, and the one JobEnd both the node Epilog and the decision take from it.

slurm.conf(5) "Prolog and Epilog Scripts" lists what each program's environment holds:
SLURM_JOB_EXIT_CODE2 and SLURM_JOB_RESTART_COUNT are given to the Epilog and to
EpilogSlurmctld, SLURM_JOB_START_TIME from Slurm 23.02 on, SLURMD_NODENAME only on a node.
The node Epilog also gets the job's GPUs on its node, SLURM_JOB_GPUS (gres_common.c
gres_common_epilog_set_env in 22.05, gres_common_prep_set_env in 25.11, merged by
prep_script_slurmd.c _build_env), and from 25.11 SLURM_JOB_OVERSUBSCRIBE (NO: --exclusive).
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_triage import hostlist
from slurm_triage.frozen import Frozen
from slurm_triage.gpu_ids import JobScope, job_scope

# Our name for each variable -> Slurm's.
SLURM_ENV = {
    "job_id": "SLURM_JOB_ID",
    "uid": "SLURM_JOB_UID",
    "gid": "SLURM_JOB_GID",
    "user": "SLURM_JOB_USER",
    "partition": "SLURM_JOB_PARTITION",
    "node": "SLURMD_NODENAME",
    "nodelist": "SLURM_JOB_NODELIST",
    "nodelist_before_23_02": "SLURM_NODELIST",
    "exit_code2": "SLURM_JOB_EXIT_CODE2",
    "restart_count": "SLURM_JOB_RESTART_COUNT",
    "start_time": "SLURM_JOB_START_TIME",
    "context": "SLURM_SCRIPT_CONTEXT",
    # A het job's: every program of every component has its leader's id (job_mgr.c
    # job_common_env_vars, prep_script_slurmd.c _build_env), and the leader's
    # EpilogSlurmctld every component's nodes. (Its SLURM_HET_JOB_OFFSET is not needed: the
    # leader is the component whose id is the het job's.)
    "het_job_id": "SLURM_HET_JOB_ID",
    "het_job_nodelist": "SLURM_HET_JOB_NODELIST",
}


def slurm_env(env: Mapping[str, str], name: str, default: str = "") -> str:
    """One variable of the table, by our name."""
    return env.get(SLURM_ENV[name], default)


def job_nodes(env: Mapping[str, str]) -> tuple[str, ...]:
    """The job's nodes, expanded (a het job leader's EpilogSlurmctld: every component's);
    HostlistError when the expression is not one."""
    expression = (
        slurm_env(env, "het_job_nodelist")
        or slurm_env(env, "nodelist")
        or slurm_env(env, "nodelist_before_23_02")
    )
    return tuple(hostlist.expand(expression))


class JobEnd(Frozen, kw_only=True):
    """One job end as a slurm.conf program sees it (the node Epilog, the decision)."""

    job_id: int
    ended_at: float
    restart: int = 0
    nodes: tuple[str, ...] = ()
    node: str = ""  # the node this program runs on ("" on the controller)
    uid: int = -1
    # None when Slurm did not say (the controller's ExitCode is read then).
    exit_code: int | None = None
    exit_signal: int | None = None
    # When this run started, as Slurm says (SLURM_JOB_START_TIME); None when not given.
    start_time: float | None = None
    # The decision's: records written before this belong to earlier runs of a requeued job
    # (same job id, same directory) and must not be read as this run's.
    records_since: float | None = None
    # A het job component's leader (SLURM_HET_JOB_ID; the leader's own id for the leader),
    # None for any other job.
    het_job_id: int | None = None
    # The job's GPUs on this node and whether it had the node to itself, as the node
    # Epilog's environment says (gpu_ids.job_scope); None: not read from a Slurm
    # environment (a test, a tool), taken as the whole node.
    scope: JobScope | None = None

    @property
    def whole_node(self) -> bool:
        """No other job shared this node with it, as far as Slurm said (`scope`)."""
        return self.scope is None or self.scope.whole_node

    @property
    def evidence_job_id(self) -> int:
        """The job id this end's evidence is filed and read under: a het job's leader for
        every component, so that the one decision of the het job (the leader's) reads the
        root records of every component's nodes."""
        return self.job_id if self.het_job_id is None else self.het_job_id

    @property
    def het_component(self) -> bool:
        """A het job component other than the leader: its end is decided with the
        leader's, by the leader's EpilogSlurmctld, never on its own."""
        return self.het_job_id is not None and self.het_job_id != self.job_id

    @property
    def failed(self) -> bool:
        """It did not end with exit code 0 and no signal."""
        return bool(self.exit_code) or bool(self.exit_signal)

    @classmethod
    def from_env(cls, env: Mapping[str, str], now: float, *, nodes_required: bool = True) -> JobEnd:
        """KeyError without SLURM_JOB_ID, ValueError for a number that is not one,
        HostlistError for a bad node list (an empty one unless `nodes_required`)."""
        exit2 = env.get(SLURM_ENV["exit_code2"])
        code, _, sig = (exit2 or "").partition(":")
        start = slurm_env(env, "start_time")
        het = slurm_env(env, "het_job_id")
        try:
            nodes = job_nodes(env)
        except hostlist.HostlistError:
            if nodes_required:
                raise
            nodes = ()
        return cls(
            job_id=int(env[SLURM_ENV["job_id"]]),
            ended_at=now,
            restart=int(slurm_env(env, "restart_count") or 0),
            nodes=nodes,
            node=slurm_env(env, "node"),
            uid=int(slurm_env(env, "uid", "-1")),
            exit_code=int(code or 0) if exit2 else None,
            exit_signal=int(sig or 0) if exit2 else None,
            start_time=float(start) if start.isdigit() and int(start) > 0 else None,
            het_job_id=int(het) if het else None,
            scope=job_scope(env),
        )
