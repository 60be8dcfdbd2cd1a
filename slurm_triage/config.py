"""The one configuration object: frozen dataclasses loaded from one TOML file plus env overrides.

Loaded once per process (`load_config()`); every program on a compute node reads it, so a
bad file must say exactly which key is wrong and what it accepts, in one line.

Precedence: built-in defaults < the TOML file < environment overrides named
`SLURM_TRIAGE__<SECTION>__<KEY>` (for example `SLURM_TRIAGE__SLURM__TIMEOUT_S=5`).
The file is `$SLURM_TRIAGE_CONFIG`, else `/etc/slurm-triage/config.toml`; a default file
that is not there at all means "all defaults", a missing file that was named explicitly is
an error, and so is a default file that is there but cannot be reached (a link to nothing,
an unsearchable directory).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from slurm_triage.errors import TriageError, cannot_read
from slurm_triage.frozen import MISSING, Frozen, field, fields, shallow_dict
from slurm_triage.taxonomy import Cause

# typing's flag without importing typing: a rank loads the config, and typing (with re and
# enum) is a third of what a wrapped `true` may cost (issue 20). mypy takes it as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Literal
else:

    class _Literal:
        """typing.Literal for typing.get_type_hints of a section (tests, tools): typing is
        imported then, never by a load, which reads Literal as `Choices` (declared_type)."""

        def __getitem__(self, values: object) -> object:
            import typing

            return typing.Literal[values]

    # Bound without an assignment so that linters read `Literal` as typing's, which is
    # what it gives typing.get_type_hints.
    globals()["Literal"] = _Literal()

# Paths are str or os.PathLike, read with os and open(): pathlib (with urllib.parse,
# ipaddress, fnmatch) is no import of the per-job programs (issue 20).
DEFAULT_CONFIG_PATH = "/etc/slurm-triage/config.toml"
# Config.source when the config was read from no file: built-in defaults, or a mapping
# (config_from_mapping); else it is the file's path.
DEFAULTS_SOURCE = "<defaults>"
MAPPING_SOURCE = "<mapping>"
NO_FILE_SOURCES = (DEFAULTS_SOURCE, MAPPING_SOURCE)
CONFIG_ENV = "SLURM_TRIAGE_CONFIG"
OVERRIDE_PREFIX = "SLURM_TRIAGE__"


class ConfigError(TriageError, ValueError):
    """A configuration file or override is invalid; the message is one line for the operator."""


def _range(minimum: float | None = None, maximum: float | None = None) -> dict[str, Any]:
    return {"min": minimum, "max": maximum}


class LoggingConfig(Frozen):
    """Where and how our structured log lines go."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    # auto: console rendering on a TTY, JSON lines otherwise (production).
    format: Literal["auto", "json", "console"] = "auto"
    destination: Literal["stderr", "file", "syslog"] = "stderr"
    file: str = "/var/log/slurm-triage/slurm-triage.log"
    syslog_facility: Literal[
        "user",
        "daemon",
        "local0",
        "local1",
        "local2",
        "local3",
        "local4",
        "local5",
        "local6",
        "local7",
    ] = "daemon"


class SlurmConfig(Frozen):
    """How we talk to Slurm: which backend, and how long any one call may take."""

    backend: Literal["auto", "cli", "pyslurm"] = "auto"
    # Deadline for one whole operation, retries included; far below PrologEpilogTimeout.
    timeout_s: float = field(default=10.0, metadata=_range(0.1, 600))
    attempts: int = field(default=3, metadata=_range(1, 10))
    retry_wait_s: float = field(default=0.5, metadata=_range(0, 60))
    # Directory holding scontrol/squeue/sinfo/sacct; empty means $PATH, then /usr/bin.
    bin_dir: str = ""


class PathsConfig(Frozen):
    """Where records live on disk."""

    evidence_dir: str = "/var/spool/slurm-triage/evidence"
    state_dir: str = "/var/lib/slurm-triage"


class HealthConfig(Frozen):
    """Node health checks (prolog, cron/HealthCheckProgram, `slurm-triage check`).

    Path values may contain `{node}`, replaced by this node's Slurm name, so one file
    serves a whole cluster (and the simulated estate, where every node has its own tree).
    """

    # "real": nvidia-ml-py against the driver; "simulated": the fake estate (no GPUs here).
    nvml: Literal["real", "simulated"] = "real"
    simulate_root: str = "/var/lib/slurm-triage/simulate"
    expected_gpus: int = field(default=8, metadata=_range(0, 64))
    # How Slurm numbers GPUs in SLURM_JOB_GPUS / SLURM_STEP_GPUS (slurm_triage/gpu_ids.py):
    # "pci_bus" with gres.conf AutoDetect=nvml, "minor_number" with File=/dev/nvidia[...] lines.
    slurm_gpu_order: Literal["pci_bus", "minor_number"] = "pci_bus"
    # NVLinks each GPU must have up: -1 judges against the links up when the node last
    # passed every check (H100 PCIe boards have inactive links by design), 0 does not check,
    # 18 is an HGX H100 SXM's full set (docs/health-checks.md).
    nvlinks_per_gpu: int = field(default=-1, metadata=_range(-1, 36))
    kernel_log: str = "/dev/kmsg"
    # Where a root reader of /dev/kmsg keeps this boot's measures of the kernel's clock,
    # retaken hourly (a mark line in the log each time); "" dates kmsg as `dmesg -T` does.
    kernel_clock_cache: str = "/run/slurm-triage-kmsg-clock.json"
    # XIDs and MCE/EDAC lines count when younger than this (the taxonomy's 10 min window).
    kernel_window_s: float = field(default=600.0, metadata=_range(1, 86400 * 7))
    # An application XID (13, 31, 43, 68, 69, 137) fails a GPU only when jobs of this many
    # distinct users hit it on the same GPU within the window (it follows the GPU, not the
    # code). One fault prints a burst of lines: lines this close together are one fault.
    app_xid_repeats: int = field(default=3, metadata=_range(1, 1000))
    app_xid_burst_gap_s: float = field(default=5.0, metadata=_range(0, 600))
    sysfs_root: str = "/sys"
    # HCA ports that must be up, any link layer. Empty: the InfiniBand ports of physical
    # functions that were up at baseline (RoCE, VFs, never-cabled ports are left alone).
    ib_ports: tuple[str, ...] = ()  # "mlx5_0:1"; empty: InfiniBand ports up at baseline
    ib_rate_gbps: float = field(default=0.0, metadata=_range(0, 10000))  # 0: rate not checked
    mounts: tuple[str, ...] = ()
    mountinfo: str = "/proc/self/mountinfo"
    mount_timeout_s: float = field(default=2.0, metadata=_range(0.05, 60))
    min_free_memory_gb: float = field(default=1.0, metadata=_range(0, 100000))
    scratch_path: str = "/tmp"
    min_free_disk_gb: float = field(default=1.0, metadata=_range(0, 1000000))
    max_temperature_c: float = field(default=87.0, metadata=_range(0, 150))
    check_timeout_s: float = field(default=5.0, metadata=_range(0.05, 300))
    prolog_deadline_s: float = field(default=10.0, metadata=_range(0.1, 300))
    # Deprecated: policy.act is the one switch for every change to Slurm, health drains
    # included. false here still makes health runs a dry run (decide and report, drain and
    # resume nothing); set policy.act = false instead. `config check` warns while it is set.
    drain: bool = True
    # Circuit breaker: stop draining for a check that already drained more than this share
    # of the cluster's nodes (and at least breaker_min_nodes) within breaker_window_s; also
    # for a failed job's post-job check (its Epilog, and the decision's drain and exclusion).
    breaker_max_share: float = field(default=0.1, metadata=_range(0, 1))
    breaker_min_nodes: int = field(default=2, metadata=_range(0, 100000))
    breaker_window_s: float = field(default=900.0, metadata=_range(1, 86400 * 7))
    # Before draining, a node marks its failure in its Slurm node Comment and waits this
    # long for others failing the same check at the same time to do so (0: no wait).
    breaker_settle_s: float = field(default=3.0, metadata=_range(0, 300))


class WrapperConfig(Frozen):
    """`slurm-triage wrap`: the supervisor researchers put under srun."""

    # Bytes of the tail of each of stdout and stderr kept in memory for attribution.
    tail_bytes: int = field(default=1 << 20, metadata=_range(4096, 1 << 30))
    # SIGKILL the command this long after a SIGTERM it passed on or sent (not one slurmstepd
    # gave it: Slurm's KillWait governs that); keep it below Slurm's KillWait.
    kill_grace_s: float = field(default=25.0, metadata=_range(0, 3600))
    # No output and no heartbeat-file touch for this long -> record a hang, end the command.
    # 0 turns the hang detector off.
    hang_timeout_s: float = field(default=0.0, metadata=_range(0, 86400 * 7))
    # Watch NVML XID/ECC events for the step's GPUs while the command runs.
    watch_nvml: bool = True
    # End the command at once when NVML reports a node-fatal XID (79, 48, 74, 95, ...) or a
    # lost GPU on its GPUs: the job is dead anyway, and every rank would otherwise wait for
    # the NCCL timeout before the requeue can start.
    end_on_fatal_xid: bool = True
    # Also copy each rank's output to <tee_dir>/<job>/<node>.<step>.<task>.{out,err}; "" = off.
    tee_dir: str = ""
    # Print a one-line attribution summary to stderr when the command failed.
    summary: bool = True


# Taxonomy cause ids (shared/TAXONOMY.md), so a typo in a policy list is a config error.
if TYPE_CHECKING:
    CauseName = str
else:  # the annotation's text: typing.get_type_hints and declared_type evaluate it
    CauseName = "Literal[" + ", ".join(repr(c.value) for c in Cause) + "]"


class PolicyConfig(Frozen):
    """What the decision does with an attributed job end (docs/decisions.md)."""

    # Replace the taxonomy's defaults: causes to requeue (with exclusion when the taxonomy
    # says requeue_exclude), causes never to requeue. Empty: the taxonomy's defaults.
    requeue_causes: tuple[CauseName, ...] = ()
    never_requeue_causes: tuple[CauseName, ...] = ()
    # Drain blamed nodes (only when root-collected evidence backs the blame) for these causes.
    drain_causes: tuple[CauseName, ...] = (
        "gpu_unavailable",
        "gpu_memory",
        "gpu_nvlink",
        "gpu_driver",
        "pcie",
        "infiniband",
        "thermal",
        "host_hardware",
        "filesystem",
        "health_check",
    )
    # Requeue budget per job: in total (failures: preemptions and resumable time limits are
    # kept to their own family's budget only), and per cause family; past it the job is held.
    max_requeues: int = field(default=10, metadata=_range(0, 10000))
    max_node_failure_requeues: int = field(default=5, metadata=_range(0, 10000))
    max_preemption_requeues: int = field(default=50, metadata=_range(0, 10000))
    max_unknown_requeues: int = field(default=1, metadata=_range(0, 10000))
    # Exponential backoff between requeues for the same cause: 0, base, 2*base, ... max.
    backoff_base_s: float = field(default=60.0, metadata=_range(0, 86400))
    backoff_max_s: float = field(default=1800.0, metadata=_range(0, 86400 * 7))
    # When excluding the blamed nodes would leave too few nodes in the partition.
    cant_fit: Literal["requeue_without_exclusion", "hold"] = "requeue_without_exclusion"
    # Sites that want it opt-in: only jobs whose --comment contains "triage:requeue" are
    # requeued (a submit environment never reaches EpilogSlurmctld, so it cannot opt in).
    opt_in: bool = False
    opt_out_users: tuple[str, ...] = ()
    opt_out_partitions: tuple[str, ...] = ()
    # Lemon nodes: drain a node whose recent history crosses these thresholds.
    lemon_window_days: float = field(default=7.0, metadata=_range(0.01, 365))
    lemon_failed_jobs: int = field(default=4, metadata=_range(1, 100000))
    lemon_distinct_xids: int = field(default=3, metadata=_range(1, 1000))
    lemon_times_drained: int = field(default=3, metadata=_range(1, 100000))
    # false: a dry run. Decide, record and report every decision (job ends and health
    # runs: requeues, exclusions, drains, resumes), but change nothing in Slurm.
    act: bool = True


class DecisionConfig(Frozen):
    """Where the once-per-job decision runs and how long it may wait for the nodes."""

    # epilog_slurmctld: EpilogSlurmctld= on the controller (recommended);
    # first_node_epilog: the Epilog of the job's first node, for sites without it.
    run_in: Literal["epilog_slurmctld", "first_node_epilog"] = "epilog_slurmctld"
    # Wait this long for every node's root-side evidence before deciding without it.
    wait_for_nodes_s: float = field(default=20.0, metadata=_range(0, 600))
    # The whole decision, Slurm calls included, must finish within this.
    deadline_s: float = field(default=60.0, metadata=_range(1, 3600))
    # The node epilog's own deadline (Slurm drains the node if an Epilog overruns).
    epilog_deadline_s: float = field(default=20.0, metadata=_range(1, 3600))
    # A failed job's node Epilog exits non-zero when root's evidence on that node alone would
    # drain it (a drain cause, root-backed, this node blamed). Slurm then drains the node at
    # once ("Epilog error", relabelled by the decision) and, on Slurm 25.11 with
    # SlurmctldParameters=enable_expedited_requeue, restarts an `sbatch --requeue=expedite`
    # job elsewhere within a second (docs/expedited-requeue.md). Never with policy.act false.
    fail_epilog_on_node_fault: bool = True
    # Journal: SQLite (WAL). Keep it on the controller's local disk, or on a filesystem
    # with working POSIX locks when decisions run in first-node epilogs.
    journal: str = "/var/lib/slurm-triage/journal.sqlite"
    journal_busy_timeout_s: float = field(default=10.0, metadata=_range(0.1, 600))


class MetricsConfig(Frozen):
    """Prometheus metrics: node_exporter textfiles and `slurm-triage metrics`."""

    # node_exporter textfile the Prolog, Epilog and health checks write on each node ({node}
    # is the node's name), e.g. /var/lib/node_exporter/textfile/slurm_triage_{node}.prom.
    # Empty: no node metrics are kept.
    node_textfile: str = ""
    # node_exporter textfile the decision writes on the controller (as SlurmUser), e.g.
    # /var/lib/node_exporter/textfile/slurm_triage_controller.prom. Empty: not written.
    controller_textfile: str = ""
    # `slurm-triage metrics serve`: where to listen (localhost unless you mean otherwise).
    listen_address: str = "127.0.0.1"
    listen_port: int = field(default=9717, metadata=_range(1, 65535))


if TYPE_CHECKING:
    NoticeKindName = Literal["drain", "rma", "breaker_trip", "hold"]
else:  # the same, as text (as CauseName)
    NoticeKindName = 'Literal["drain", "rma", "breaker_trip", "hold"]'


class NotifyConfig(Frozen):
    """Webhook notifications of drains, RMA candidates, breaker trips and held jobs."""

    # A file holding the webhook's URL on one line; empty turns notifications off. A file,
    # not the URL itself: a Slack webhook URL is a password and config.toml is readable by
    # every job. Keep it readable by root and SlurmUser only (0640 root:slurm).
    webhook_url_file: str = ""
    # "slack": {"text": "..."} (Slack, Mattermost, Rocket.Chat incoming webhooks);
    # "json": every field of the event as a JSON object (docs/observability.md).
    webhook_format: Literal["slack", "json"] = "slack"
    events: tuple[NoticeKindName, ...] = ("drain", "rma", "breaker_trip", "hold")
    # One HTTP attempt's timeout, the attempts for a transient failure (connection refused,
    # timeout, HTTP 429 or 5xx), and the first wait between them (doubled each time).
    webhook_timeout_s: float = field(default=2.0, metadata=_range(0.1, 60))
    webhook_attempts: int = field(default=3, metadata=_range(1, 10))
    webhook_retry_wait_s: float = field(default=0.5, metadata=_range(0, 60))
    # Events waiting to be sent; past this many, new ones are dropped (and counted).
    queue_size: int = field(default=100, metadata=_range(1, 10000))
    # The most a decision or a health run waits for its notifications at its end; what is
    # not delivered by then is given up (counted as abandoned), never holding up Slurm.
    max_wait_s: float = field(default=3.0, metadata=_range(0.1, 60))


class RepairConfig(Frozen):
    """The node lifecycle after a drain: repair, burn-in, return or RMA (docs/repair.md).

    Carried out by `slurm-triage nodes reconcile` on the controller (a systemd timer,
    contrib/slurm-triage-reconcile.timer). With enabled = false nothing is repaired and the
    health check resumes the nodes it drained itself, as before; lemons and RMA nodes
    never come back by themselves either way."""

    # true: reconcile repairs drained nodes (GPU reset, reboot), burns them in and returns
    # them; the health check then resumes nothing: every return goes through burn-in.
    enabled: bool = False
    # The repairs reconcile may ask for. A reset the cause allows needs the node idle and
    # its own HealthCheckProgram (root) to do it; a reboot is `scontrol reboot` of the
    # drained node and needs slurm.conf's RebootProgram. A cause whose repair is not
    # allowed stays drained for a person.
    gpu_reset: bool = True
    reboot: bool = True
    # Circuit breaker: never more than this share of the cluster's nodes (and at least
    # min_nodes_in_repair) repairing or in burn-in at once; the others wait drained.
    max_share_in_repair: float = field(default=0.05, metadata=_range(0, 1))
    min_nodes_in_repair: int = field(default=1, metadata=_range(0, 100000))
    # A node repaired this many times within rma_window_days goes to RMA instead.
    rma_after_cycles: int = field(default=3, metadata=_range(1, 1000))
    rma_window_days: float = field(default=30.0, metadata=_range(0.01, 3650))
    # A reboot or GPU reset that has not finished after this long needs a person.
    repair_timeout_s: float = field(default=3600.0, metadata=_range(60, 86400 * 7))
    # After a passed burn-in a lemon (policy.lemon_*) stays suspect this long: in service,
    # with a higher Weight and the feature below, so large jobs land elsewhere first.
    lemon_cooldown_h: float = field(default=24.0, metadata=_range(0, 24 * 365))
    # A node in service becomes suspect when this many failed jobs blamed it (root-backed)
    # within policy.lemon_window_days, below the lemon bar; 0: only lemons are suspect.
    suspect_failed_jobs: int = field(default=2, metadata=_range(0, 100000))
    # The Slurm node Weight and feature of a suspect node (Slurm fills low weights first;
    # jobs may ask --constraint='!triage_suspect').
    suspect_weight: int = field(default=65000, metadata=_range(1, 4294967294))
    suspect_feature: str = "triage_suspect"
    # Burn-in runs as a Slurm job (`slurm-triage burn-in`) in a maintenance reservation
    # triage_burnin_<node> for this user; root by default, since the screen reads the
    # kernel log and NVML as root.
    burn_in_user: str = "root"
    burn_in_time_limit_min: int = field(default=60, metadata=_range(1, 10080))
    # The site's own burn-in after the health screen and DCGM, e.g. an NCCL all-reduce or a
    # GEMM test: an argument list, run without a shell; exit 0 passes. Empty: none.
    burn_in_command: tuple[str, ...] = ()
    # Run `dcgmi diag -r <level>` during burn-in when dcgmi is on PATH (0: never).
    burn_in_dcgm_level: int = field(default=2, metadata=_range(0, 4))


class AgentConfig(Frozen):
    """The resident node agent (`slurm-triage agent`, docs/agent.md): a root daemon on each
    node that keeps the config, logging and NVML open and runs the Prolog's screen for it.

    The Prolog reads no config file before asking the agent (that is the time it saves): it
    takes `socket`, `connect_timeout_s` and `answer_timeout_s` from its environment's
    SLURM_TRIAGE__AGENT__* overrides or these defaults, and warns when the file says
    otherwise. Without an answer it runs its checks itself, as it did before the agent."""

    # The Unix socket the agent listens on: root's, mode 0600, in systemd's RuntimeDirectory.
    socket: str = "/run/slurm-triage/agent.sock"
    # Peers served besides root (SO_PEERCRED uids); anyone else is refused before reading.
    allowed_uids: tuple[int, ...] = ()
    # The Prolog's waits for the agent: to connect, then for the answer (above the screen's
    # own bound, health.prolog_deadline_s plus one check_timeout_s).
    connect_timeout_s: float = field(default=0.5, metadata=_range(0.01, 10))
    answer_timeout_s: float = field(default=20.0, metadata=_range(0.1, 600))
    # Prologs served at once (one thread each); more are answered busy and run in-process.
    max_concurrent: int = field(default=8, metadata=_range(1, 256))
    # Watch NVML XID events for the agent's lifetime (nvmlEventSetWait): an XID seen there
    # fails the next Prolog's gpu.xid as the kernel log's line would.
    watch_xids: bool = True
    # The facts the Prolog's checks read (NVML, kernel log, PCIe AER, links, mounts, host)
    # are read in the background every `facts_refresh_s`, and a Prolog's checks use facts
    # at most `facts_max_age_s` old, reading older ones for itself (docs/agent.md). An XID
    # the watcher sees and a GPU reset drop them at once. Keep the refresh below the age.
    # facts_max_age_s = 0: every Prolog reads every fact (no background reads either).
    facts_max_age_s: float = field(default=30.0, metadata=_range(0, 3600))
    facts_refresh_s: float = field(default=10.0, metadata=_range(1, 3600))


class DeciderConfig(Frozen):
    """The resident decider (`slurm-triage decider`, docs/decider.md): a daemon on the
    slurmctld host, run as SlurmUser, that keeps the config, logging and the decision code
    loaded and makes the once-per-job decision when EpilogSlurmctld asks.

    EpilogSlurmctld reads no config file before asking (that is the time it saves): it
    takes `socket`, `connect_timeout_s` and `accept_timeout_s` from its environment's
    SLURM_TRIAGE__DECIDER__* overrides or these defaults. Without an acceptance it decides
    itself, as it did before the decider; once the decider accepted, it never does."""

    # The Unix socket the decider listens on: SlurmUser's, mode 0600, in the directory
    # systemd's RuntimeDirectory makes for it (contrib/slurm-triage-decider.service).
    socket: str = "/run/slurm-triage-decider/decider.sock"
    # Peers served besides root and the decider's own uid (SO_PEERCRED uids); anyone else
    # is refused before a byte of theirs is read.
    allowed_uids: tuple[int, ...] = ()
    # EpilogSlurmctld's waits: to connect, then for the decider's `accepted` (or busy,
    # refused). After `accepted` it waits for the decision up to decision.deadline_s plus
    # decision.wait_for_nodes_s and a margin, as the decider tells it.
    connect_timeout_s: float = field(default=0.5, metadata=_range(0.01, 10))
    accept_timeout_s: float = field(default=5.0, metadata=_range(0.1, 600))
    # Decisions in flight at once (one thread each; most of their time is waiting for the
    # nodes' records, decision.wait_for_nodes_s): sized for a few hundred job ends a
    # minute. More are answered busy and decide in their own EpilogSlurmctld process.
    max_concurrent: int = field(default=128, metadata=_range(1, 1024))


class Config(Frozen):
    """The effective configuration of one slurm-triage process."""

    logging: LoggingConfig = field(default_factory=LoggingConfig)
    slurm: SlurmConfig = field(default_factory=SlurmConfig)
    paths: PathsConfig = field(default_factory=PathsConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    wrapper: WrapperConfig = field(default_factory=WrapperConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    decision: DecisionConfig = field(default_factory=DecisionConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    decider: DeciderConfig = field(default_factory=DeciderConfig)
    source: str = field(default=DEFAULTS_SOURCE, compare=False)


_SECTIONS: dict[str, type] = {
    f.name: f.default_factory for f in fields(Config) if f.default_factory is not MISSING
}


class Choices:
    """A key's `Literal[...]` as declared_type reads it: the values it accepts."""

    __slots__ = ("values",)

    def __init__(self, values: object) -> None:
        self.values = values if isinstance(values, tuple) else (values,)

    def __repr__(self) -> str:
        return f"Literal[{', '.join(repr(v) for v in self.values)}]"


class _ChoicesOf:
    def __getitem__(self, values: object) -> Choices:
        return Choices(values)


# What declared_type evaluates an annotation with, over the module's own names.
_DECLARED_NAMES = {"Literal": _ChoicesOf()}


def declared_type(cls: type, key: str) -> Any:
    """The type a field of a section declares, without typing: bool, int, float, str, a
    `Choices` for a Literal, or tuple[item, ...] (a types.GenericAlias) of one of them. The
    annotation is our own source text (`from __future__ import annotations`), evaluated in
    its module, as typing.get_type_hints would, for the keys a file or override sets only
    (evaluating every field of every section was most of a load, issue 20)."""
    return _evaluate(cls.__annotations__[key], vars(sys.modules[cls.__module__]))


def _evaluate(hint: Any, names: dict[str, Any]) -> Any:
    if isinstance(hint, str):
        return _evaluate(eval(hint, names, _DECLARED_NAMES), names)
    if _origin(hint) in (tuple, list):
        return _origin(hint)[tuple(_evaluate(arg, names) for arg in _args(hint))]
    return hint


def _origin(tp: Any) -> Any:
    return getattr(tp, "__origin__", None)


def _args(tp: Any) -> tuple[Any, ...]:
    return tuple(getattr(tp, "__args__", ()))


def _describe(tp: Any) -> str:
    if isinstance(tp, Choices):
        return "one of " + ", ".join(repr(c) for c in tp.values)
    if _origin(tp) in (tuple, list):
        return "a list of " + _describe(_args(tp)[0])
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        tp, str(tp)
    )


def _coerce(name: str, tp: Any, value: Any, from_env: bool) -> Any:
    """Check one value against its declared type; env strings are parsed first."""
    origin = _origin(tp)
    if from_env and isinstance(value, str):
        value = _parse_env_value(name, tp, value)
    if isinstance(tp, Choices):
        if value not in tp.values:
            raise ConfigError(f"{name} = {value!r} is not valid; expected {_describe(tp)}")
        return value
    if origin in (tuple, list):
        (item_tp, *_) = _args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{name} = {value!r} is not valid; expected {_describe(tp)}")
        return tuple(_coerce(f"{name}[{i}]", item_tp, v, False) for i, v in enumerate(value))
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(tp)
    if ok is None:
        raise ConfigError(f"{name}: unsupported type {tp}")
    if not ok:
        raise ConfigError(f"{name} = {value!r} is not valid; expected {_describe(tp)}")
    return _finite(name, value) if tp is float else value


def _finite(name: str, value: int | float) -> float:
    """A number key's value as a float, NaN and infinity refused: every comparison with NaN
    is false, so a NaN would pass the range check and then switch its check off."""
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        number = float("inf")
    if not abs(number) <= sys.float_info.max:
        raise ConfigError(f"{name} = {value!r} is not valid; expected a finite number")
    return number


def _parse_env_value(name: str, tp: Any, raw: str) -> Any:
    origin = _origin(tp)
    try:
        if tp is bool:
            lowered = raw.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError
        if tp is int:
            return int(raw)
        if tp is float:
            return float(raw)
        if origin in (tuple, list):
            # Comma-separated; each item read as its declared type (`agent.allowed_uids=0,64030`).
            (item_type, *_) = _args(tp) or (str,)
            items = [item.strip() for item in raw.split(",") if item.strip()]
            return [_parse_env_value(f"{name}[{i}]", item_type, x) for i, x in enumerate(items)]
    except ValueError:
        raise ConfigError(f"{name} = {raw!r} is not valid; expected {_describe(tp)}") from None
    return raw


def _check_range(name: str, meta: Any, value: Any) -> None:
    low, high = meta.get("min"), meta.get("max")
    if low is not None and value < low:
        raise ConfigError(f"{name} = {value!r} is too small; expected >= {low}")
    if high is not None and value > high:
        raise ConfigError(f"{name} = {value!r} is too large; expected <= {high}")


def _build_section(section: str, cls: type, values: dict[str, Any], from_env: set[str]) -> Any:
    if not values:
        return cls()
    declared = {f.name: f for f in fields(cls)}
    unknown = sorted(set(values) - set(declared))
    if unknown:
        raise ConfigError(
            f"unknown key {section}.{unknown[0]}; valid keys in [{section}]: " + ", ".join(declared)
        )
    kwargs = {}
    for key, value in values.items():
        name = f"{section}.{key}"
        coerced = _coerce(name, declared_type(cls, key), value, key in from_env)
        if isinstance(coerced, int | float) and not isinstance(coerced, bool):
            _check_range(name, declared[key].metadata, coerced)
        kwargs[key] = coerced
    return cls(**kwargs)


def config_from_mapping(
    data: dict[str, Any], env: dict[str, str] | None = None, source: str = MAPPING_SOURCE
) -> Config:
    """Build a Config from parsed TOML and override variables; pure, raises ConfigError."""
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise ConfigError(
            f"unknown section [{unknown[0]}]; valid sections: " + ", ".join(_SECTIONS)
        )
    merged: dict[str, dict[str, Any]] = {}
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table of keys, not {values!r}")
        merged[section] = dict(values)
    env_keys: dict[str, set[str]] = {s: set() for s in _SECTIONS}
    for var, raw in (env or {}).items():
        if not var.startswith(OVERRIDE_PREFIX):
            continue
        parts = var[len(OVERRIDE_PREFIX) :].lower().split("__")
        if len(parts) != 2 or parts[0] not in _SECTIONS:
            raise ConfigError(
                f"bad override {var}; expected {OVERRIDE_PREFIX}<SECTION>__<KEY> with SECTION"
                " one of " + ", ".join(s.upper() for s in _SECTIONS)
            )
        merged.setdefault(parts[0], {})[parts[1]] = raw
        env_keys[parts[0]].add(parts[1])
    sections = {
        name: _build_section(name, cls, merged.get(name, {}), env_keys[name])
        for name, cls in _SECTIONS.items()
    }
    return Config(**sections, source=source)


def deprecations(config: Config) -> tuple[str, ...]:
    """One line for each deprecated setting in effect: still honoured, to be replaced."""
    found = []
    if not config.health.drain:
        found.append(
            "health.drain = false is deprecated: set policy.act = false, the one switch for "
            "every change to Slurm (health.drain = false still makes health runs a dry run)"
        )
    return tuple(found)


def node_path(path: str, node: str) -> str:
    """A configured path for one node: `{node}` replaced by its Slurm name (HealthConfig)."""
    return path.replace("{node}", node)


def config_path(env: Mapping[str, str] | None = None) -> tuple[str | os.PathLike[str], bool]:
    """The file to read, and whether it was named explicitly (so must exist)."""
    named = (os.environ if env is None else env).get(CONFIG_ENV, "").strip()
    return (named, True) if named else (DEFAULT_CONFIG_PATH, False)


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse one TOML file; every failure is a one-line ConfigError naming the file. The
    parse is the file's parsed copy beside it while that is fresh (config_cache), so an
    unchanged file costs no tomllib import; a process on built-in defaults reads nothing."""
    from slurm_triage.config_cache import ConfigFileError, read_config_file

    try:
        return read_config_file(path, check_settings)
    except ConfigFileError as exc:
        raise ConfigError(str(exc)) from None


def check_settings(parsed: dict[str, Any]) -> None:
    """Raise the ConfigError for a parsed file whose own settings (no environment
    overrides) are invalid: config_cache writes a parsed copy of a valid file only."""
    config_from_mapping(parsed, {})


def load_config(
    path: str | os.PathLike[str] | None = None, env: dict[str, str] | None = None
) -> Config:
    """Load the effective config: the named or default file, then env overrides."""
    env = dict(os.environ) if env is None else env
    explicit = path is not None
    if path is None:
        path, explicit = config_path(env)
    if not explicit and _not_installed(os.fspath(path)):
        return config_from_mapping({}, env, source=DEFAULTS_SOURCE)
    return config_from_mapping(read_toml(path), env, source=os.fspath(path))


def _not_installed(path: str) -> bool:
    """Whether the default config file is simply not there: nothing at its path, not even a
    link, in a directory that is there or itself not there. Anything else that keeps it from
    being read (a link to nothing, at the file or at a directory above it; a directory that
    cannot be searched; a file where a directory should be) is a ConfigError: the admin
    installed a config, and built-in defaults in its place would go unnoticed."""
    try:
        os.stat(path)
        return False  # there: read it
    except FileNotFoundError:
        pass
    except OSError as exc:
        message = cannot_read(path, exc, missing="config file", not_a="a config file")
        raise ConfigError(message) from None
    here = path
    while True:
        if os.path.lexists(here):
            raise ConfigError(f"{path}: cannot read: {here} is a symbolic link to nothing")
        parent = os.path.dirname(here)
        if parent in ("", here) or os.path.isdir(parent):
            return True
        here = parent


def to_toml(config: Config) -> str:
    """Render a config as TOML that `load_config` reads back to an equal object."""
    lines = [f"# effective slurm-triage configuration (from {config.source})"]
    for section in _SECTIONS:
        lines.append(f"\n[{section}]")
        for key, value in shallow_dict(getattr(config, section)).items():
            lines.append(f"{key} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'
