"""The text of the dev cluster's config files: pure functions of a `ClusterLayout`.

Choices here come from running Debian's Slurm 22.05 on one host (shared/reference/
slurm-behaviour.md): several slurmd on one host with distinct ports, fake GPUs as symlinks
to /dev/null, `config_overrides` so fake CPU/memory figures do not drain nodes, a short
`cred_expire` and scheduler intervals so a requeued job runs again within seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

NODE_NAMES = ("node1", "node2", "node3")
GPUS_PER_NODE = 8
CPUS_PER_NODE = 8
MEMORY_MB_PER_NODE = 16000
CLUSTER_NAME = "triage"
DB_USER = "slurm"
# Loopback-only throwaway database of a test cluster; not a secret.
DB_PASSWORD = "triage-devcluster"
# Real sites run slurmctld/slurmdbd as an unprivileged SlurmUser (EpilogSlurmctld runs as it)
# and jobs as ordinary users; the dev cluster does the same.
SLURM_USER = "slurm"
JOB_USER = "triage-job"

# The Slurm releases the dev cluster can run: Debian's packages (22.05, on PATH) or a tree
# built from SchedMD's source under /opt (see ../shared/slurm/README.md).
DEFAULT_SLURM = "22.05"
SLURM_PREFIXES: dict[str, Path | None] = {"22.05": None, "25.11": Path("/opt/slurm-25.11")}


@dataclass(frozen=True)
class ClusterLayout:
    """Where everything of one dev cluster lives; all of it under `root`."""

    root: Path
    hostname: str
    base_port: int
    bin_dir: Path  # where our installed programs (slurm-triage-prolog, ...) live
    slurm: str = DEFAULT_SLURM  # which release runs it: a key of SLURM_PREFIXES
    backend: str = "auto"  # slurm.backend of its hooks: auto, cli or pyslurm

    @property
    def pyslurm_dir(self) -> Path | None:
        """Where this release's pyslurm is installed (beside it, never in a venv)."""
        prefix = self.slurm_prefix
        return prefix / "python" if prefix else None

    @property
    def slurm_prefix(self) -> Path | None:
        """Where this release is installed; None for the distribution's (on PATH)."""
        return SLURM_PREFIXES[self.slurm]

    @property
    def slurm_path(self) -> str:
        """PATH entries that put this release's commands first ("" for the distribution's)."""
        prefix = self.slurm_prefix
        return f"{prefix}/bin:{prefix}/sbin:" if prefix else ""

    @property
    def etc(self) -> Path:
        return self.root / "etc"

    @property
    def slurm_conf(self) -> Path:
        return self.etc / "slurm.conf"

    @property
    def triage_conf(self) -> Path:
        return self.etc / "triage.toml"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def run(self) -> Path:
        return self.root / "run"

    @property
    def decider_socket(self) -> Path:
        """Where a decider (`slurm-triage decider`, SlurmUser) listens when a test starts
        one: EpilogSlurmctld asks there first, and decides itself when none answers."""
        return self.run / "decider" / "decider.sock"

    @property
    def spool(self) -> Path:
        return self.root / "spool"

    @property
    def munge_dir(self) -> Path:
        return self.root / "munge"

    @property
    def munge_socket(self) -> Path:
        return self.munge_dir / "munge.socket"

    @property
    def mysql_dir(self) -> Path:
        return self.root / "mysql"

    @property
    def hooks(self) -> Path:
        return self.root / "hooks"

    @property
    def gpu_dir(self) -> Path:
        return self.root / "dev"

    @property
    def evidence_dir(self) -> Path:
        return self.root / "evidence"

    @property
    def simulate_root(self) -> Path:
        return self.root / "simulate"

    @property
    def jobs_dir(self) -> Path:
        """The job user's working directory for test and demo jobs."""
        return self.root / "jobs"

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def metrics_dir(self) -> Path:
        """node_exporter's textfile directory: nodes (root) and the controller (SlurmUser)
        write their .prom files here."""
        return self.root / "metrics"

    @property
    def ctld_port(self) -> int:
        return self.base_port

    @property
    def dbd_port(self) -> int:
        return self.base_port + 1

    @property
    def mysql_port(self) -> int:
        return self.base_port + 2

    def node_port(self, index: int) -> int:
        return self.base_port + 10 + index

    def pid_file(self, daemon: str) -> Path:
        return self.run / f"{daemon}.pid"


HOOK_PROGRAMS = {
    "prolog": "slurm-triage-prolog",
    "epilog": "slurm-triage-epilog",
    "epilog-slurmctld": "slurm-triage-epilog-slurmctld",
    "healthcheck": "slurm-triage-healthcheck",
}


def slurm_conf(layout: ClusterLayout) -> str:
    hooks = layout.hooks
    nodes = "\n".join(
        f"NodeName={name} NodeHostname={layout.hostname} NodeAddr=127.0.0.1 "
        f"Port={layout.node_port(i)} CPUs={CPUS_PER_NODE} RealMemory={MEMORY_MB_PER_NODE} "
        f"Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        for i, name in enumerate(NODE_NAMES)
    )
    return f"""\
# slurm-triage dev cluster: three slurmd on one host. Generated; `devcluster down` removes it.
ClusterName={CLUSTER_NAME}
SlurmctldHost={layout.hostname}(127.0.0.1)
SlurmctldPort={layout.ctld_port}
SlurmUser={SLURM_USER}
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job waits cred_expire seconds before it may start again (default 120).
AuthInfo=socket={layout.munge_socket},cred_expire=10
StateSaveLocation={layout.spool}/ctld
SlurmdSpoolDir={layout.spool}/%n
SlurmctldPidFile={layout.pid_file("slurmctld")}
SlurmdPidFile={layout.run}/slurmd-%n.pid
SlurmctldLogFile={layout.log}/slurmctld.log
SlurmdLogFile={layout.log}/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
# nohold_on_prolog_fail: a job whose Prolog failed is requeued, not held.
SchedulerParameters=bf_interval=1,sched_interval=2,nohold_on_prolog_fail
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
DefMemPerCPU=100
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={layout.dbd_port}
AccountingStorageTRES=gres/gpu
# For accounting, the munge socket is named here, not by AuthInfo.
AccountingStoragePass={layout.munge_socket}
JobCompType=jobcomp/none
MailProg=/bin/true
ReturnToService=2
MinJobAge=600
KillWait=10
InactiveLimit=0
MessageTimeout=10
PrologFlags=Alloc
{_release_lines(layout)}PrologEpilogTimeout=60
Prolog={hooks}/prolog
Epilog={hooks}/epilog
EpilogSlurmctld={hooks}/epilog-slurmctld
HealthCheckProgram={hooks}/healthcheck
# slurmd runs it at start; the periodic screen is run on demand here (tests, demo), as
# cron would on a real cluster, so a test never races a background drain.
HealthCheckInterval=0
HealthCheckNodeState=ANY
# `scontrol reboot` runs it on the node (slurmd's system()): the dev cluster's "reboot"
# (reboot_script below); slurmd runs with -b, so its restart reads as a new boot.
RebootProgram={hooks}/reboot
# A dev reboot takes seconds; a node that does not come back (inject boot_hang) is DOWN with
# "reboot timed out" this long after the reboot was issued (plus slurmctld's 30 s timer).
ResumeTimeout=30
{nodes}
PartitionName=gpu Nodes={",".join(NODE_NAMES)} Default=YES MaxTime=INFINITE State=UP
"""


def _release_lines(layout: ClusterLayout) -> str:
    if layout.slurm == "22.05":
        return ""
    # 25.11: `sbatch --requeue=expedite` restarts a job at once when one of its Epilogs
    # failed (issue 13.6, docs/expedited-requeue.md).
    return "SlurmctldParameters=enable_expedited_requeue\n"


def gres_conf(layout: ClusterLayout) -> str:
    # Count-only lines are dropped and regular files rejected; symlinks to /dev/null work.
    return (
        f"NodeName={','.join(NODE_NAMES)} Name=gpu "
        f"File={layout.gpu_dir}/gpu[0-{GPUS_PER_NODE - 1}]\n"
    )


def slurmdbd_conf(layout: ClusterLayout) -> str:
    return f"""\
AuthType=auth/munge
AuthInfo=socket={layout.munge_socket}
DbdHost={layout.hostname}
DbdAddr=127.0.0.1
DbdPort={layout.dbd_port}
SlurmUser={SLURM_USER}
LogFile={layout.log}/slurmdbd.log
PidFile={layout.pid_file("slurmdbd")}
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={layout.mysql_port}
StorageUser={DB_USER}
StoragePass={DB_PASSWORD}
StorageLoc=slurm_acct_db
"""


def triage_conf(layout: ClusterLayout) -> str:
    from slurm_triage.simulate.estate import MOUNTS

    mounts = ", ".join(f'"{layout.simulate_root}/{{node}}/mounts/{m}"' for m in MOUNTS)
    return f"""\
# slurm-triage config used by the dev cluster's Prolog/Epilog/HealthCheck programs.
[logging]
destination = "file"
file = "{layout.log}/slurm-triage.log"
format = "json"
level = "info"

[slurm]
backend = "{layout.backend}"

[paths]
evidence_dir = "{layout.evidence_dir}"
state_dir = "{layout.state_dir}"

[decision]
journal = "{layout.state_dir}/journal.sqlite"
wait_for_nodes_s = 10

[metrics]
node_textfile = "{layout.metrics_dir}/slurm_triage_{{node}}.prom"
controller_textfile = "{layout.metrics_dir}/slurm_triage_controller.prom"

[health]
# No GPUs here: NVML, the kernel log, sysfs and mounts come from the simulated estate,
# one tree per node ({{node}} is replaced by the node's name).
nvml = "simulated"
simulate_root = "{layout.simulate_root}"
expected_gpus = 8
kernel_log = "{layout.simulate_root}/{{node}}/kern.log"
sysfs_root = "{layout.simulate_root}/{{node}}/sys"
mountinfo = "{layout.simulate_root}/{{node}}/mountinfo"
mounts = [{mounts}]
ib_ports = ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]
ib_rate_gbps = 400
mount_timeout_s = 1.0
scratch_path = "/tmp"
"""


# slurmd's flag that reports the node rebooted when slurmd starts (its boot time is then the
# start time: 22.05's get_up_time(), 25.11's SLURMD_BOOT_TIME or now), what makes a slurmd
# restart look like the reboot slurmctld waits for after `scontrol reboot`.
SLURMD_BOOT_FLAG = "-b"


def reboot_script(layout: ClusterLayout) -> str:
    """The RebootProgram: reboot one simulated node. slurmd runs it through system() with no
    node name, so it finds the slurmd above it and takes its `-N`; it reboots that node's
    simulated hardware (transient faults clear, persistent ones return) and has
    power_cycle_script restart that slurmd, as a power cycle would, once slurmd has handed
    the request over. Each step goes to log/reboot-<node>.log, so a reboot that slurmctld
    still waits for says where it stopped."""
    system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return f"""#!/bin/sh
export PATH={layout.slurm_path}{layout.bin_dir}:{system}
export SLURM_CONF={layout.slurm_conf}
export SLURM_TRIAGE_CONFIG={layout.triage_conf}
pid=$PPID
while [ "$pid" -gt 1 ] && [ "$(cat /proc/$pid/comm 2>/dev/null)" != slurmd ]; do
    pid=$(sed 's/^.*) //' /proc/$pid/stat | cut -d' ' -f2)
done
[ "$pid" -gt 1 ] || {{ echo "reboot: no slurmd above process $$" >&2; exit 1; }}
node=$(tr '\\0' '\\n' </proc/$pid/cmdline | sed -n '/^-N$/{{n;p;}}')
[ -n "$node" ] || {{ echo "reboot: slurmd $pid has no -N" >&2; exit 1; }}
log={layout.log}/reboot-$node.log
echo "$(date +%FT%T.%N) reboot of $node: slurmd $pid" >>"$log"
logger -t slurm-triage-devcluster "rebooting $node (slurmd $pid)" 2>/dev/null
{layout.bin_dir}/slurm-triage inject --node "$node" reboot >>"$log" 2>&1 || exit 1
setsid {layout.hooks}/power-cycle "$pid" "$node" </dev/null >>"$log" 2>&1 &
"""


def power_cycle_script(layout: ClusterLayout) -> str:
    """What the reboot does to the node's slurmd: stopped a second after it ran the
    RebootProgram, then started again with the boot flag. A slurmd that has exited but not
    been reaped yet (a zombie: its parent waits late, or never) counts as stopped. The new
    slurmd starts with a clean environment, as after a boot: slurmd re-execs itself for
    `scontrol reconfigure` with SLURMD_RECONF, SLURMD_RECONF_LISTEN_FD and SLURMD_BOOT_TIME
    in its environment, which the RebootProgram inherits; a slurmd started with them takes
    itself for that re-exec and reports the old boot time, so slurmctld waits for a boot
    that never comes ("reboot timed out"). A node with `inject boot_hang` stays down: the
    reboot that never ends, which slurmctld times out after ResumeTimeout."""
    return f"""#!/bin/sh
pid=$1 node=$2
stamp() {{ date +%FT%T.%N; }}
sleep 1
kill "$pid" 2>/dev/null
n=0
while [ -d /proc/$pid ] && [ "$(sed 's/^.*) //' /proc/$pid/stat 2>/dev/null | cut -c1)" != Z ]; do
    n=$((n + 1))
    if [ $n -eq 150 ]; then
        echo "$(stamp) slurmd $pid still running 30 s after SIGTERM: SIGKILL"
        kill -9 "$pid" 2>/dev/null
    fi
    sleep 0.2
done
if [ -e {layout.simulate_root}/"$node"/boot-hang ]; then
    echo "$(stamp) slurmd $pid stopped; $node does not come back (inject boot_hang)"
    exit 0
fi
echo "$(stamp) slurmd $pid stopped; starting $node's slurmd"
conf={layout.slurm_conf}
exec env -i PATH="$PATH" SLURM_CONF="$conf" slurmd {SLURMD_BOOT_FLAG} -f "$conf" -N "$node"
"""


def hook_script(layout: ClusterLayout, program: str) -> str:
    # slurmd gives Prolog/Epilog no PATH and none of its own environment, so the hook names
    # our config and PATH itself, then runs the installed program.
    system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    return f"""#!/bin/sh
export PATH={layout.slurm_path}{layout.bin_dir}:{system}
export SLURM_CONF={layout.slurm_conf}
export SLURM_TRIAGE_CONFIG={layout.triage_conf}
export SLURM_TRIAGE__DECIDER__SOCKET={layout.decider_socket}
exec {layout.bin_dir}/{program} "$@"
"""
