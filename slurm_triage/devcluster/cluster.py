"""A real Slurm cluster on this one host: munged, MariaDB, slurmdbd, slurmctld, three slurmd.

Used by the integration tests and `make demo`. Everything lives under one directory
(`$SLURM_TRIAGE_DEVCLUSTER_DIR`, default /var/tmp/slurm-triage-devcluster) that `down`
removes. There is no systemd on these machines, so daemons are started directly and
their pids recorded; every wait is bounded.
"""

from __future__ import annotations

import importlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_triage.devcluster import config_files as cf
from slurm_triage.devcluster import runtime
from slurm_triage.devcluster.waiting import wait_until
from slurm_triage.errors import TriageError
from slurm_triage.logs import get_logger
from slurm_triage.simulate.estate import NodeEstate

DEFAULT_ROOT = Path("/var/tmp/slurm-triage-devcluster")
DEFAULT_BASE_PORT = 16800
# A second release gets its own tree and ports, so both can run side by side.
RELEASE_PORT_STEP = 100
PACKAGES = ("slurm-wlm", "slurm-client", "slurmdbd", "munge", "mariadb-server")
# What the Slurm built under /opt links against (../shared/slurm/README.md), plus the
# daemons it needs beside it.
BUILT_SLURM_PACKAGES = (
    "munge",
    "mariadb-server",
    "zstd",
    "libmunge2",
    "libjson-c5",
    "libhttp-parser2.9",
    "libyaml-0-2",
    "libjwt0",
    "libmariadb3",
    "libdbus-1-3",
    "libhwloc15",
    "liblz4-1",
    "libnuma1",
    "libreadline8",
)
# Where a built Slurm's install tree and pyslurm wheel are found (one folder per site).
BUNDLE_ENV = "SLURM_TRIAGE_SLURM_BUNDLE"
DEFAULT_BUNDLE = Path(__file__).resolve().parents[3] / "shared" / "slurm"
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")

log = get_logger(component="devcluster")


class DevClusterError(TriageError):
    """The dev cluster could not be brought up, checked or torn down."""


@dataclass(frozen=True)
class DaemonStatus:
    name: str
    pid: int | None
    alive: bool


def slurm_release(requested: str | None = None) -> str:
    """The Slurm release asked for (argument, else $SLURM_TRIAGE_DEVCLUSTER_SLURM, else
    Debian's 22.05); an unknown one is an error that lists the known ones."""
    release = requested or os.environ.get("SLURM_TRIAGE_DEVCLUSTER_SLURM") or cf.DEFAULT_SLURM
    if release not in cf.SLURM_PREFIXES:
        known = ", ".join(cf.SLURM_PREFIXES)
        raise DevClusterError(f"unknown Slurm release {release!r} (known: {known})")
    return release


BACKENDS = ("auto", "cli", "pyslurm")


def default_layout(slurm: str | None = None, backend: str | None = None) -> cf.ClusterLayout:
    """The cluster of a Slurm release; `backend` (else $SLURM_TRIAGE_DEVCLUSTER_BACKEND, else
    auto) is the door its hooks use: pyslurm needs a release with a pyslurm build (25.11)."""
    release = slurm_release(slurm)
    backend = backend or os.environ.get("SLURM_TRIAGE_DEVCLUSTER_BACKEND") or "auto"
    if backend not in BACKENDS:
        raise DevClusterError(f"unknown backend {backend!r} (known: {', '.join(BACKENDS)})")
    if backend == "pyslurm" and cf.SLURM_PREFIXES[release] is None:
        raise DevClusterError(f"no pyslurm build for Slurm {release}; use --slurm 25.11")
    offset = list(cf.SLURM_PREFIXES).index(release)
    suffix = "" if release == cf.DEFAULT_SLURM else f"-{release}"
    root = Path(os.environ.get("SLURM_TRIAGE_DEVCLUSTER_DIR", f"{DEFAULT_ROOT}{suffix}"))
    port = int(os.environ.get("SLURM_TRIAGE_DEVCLUSTER_PORT", str(DEFAULT_BASE_PORT)))
    return cf.ClusterLayout(
        root=root,
        hostname=socket.gethostname().split(".")[0],
        base_port=port + offset * RELEASE_PORT_STEP,
        # Built by `up` (runtime.py): hooks and jobs run as users who cannot reach our venv.
        bin_dir=root / "runtime" / "venv" / "bin",
        slurm=release,
        backend=backend,
    )


def client_env(layout: cf.ClusterLayout) -> dict[str, str]:
    """Environment for Slurm clients and our programs talking to this cluster."""
    env = dict(os.environ)
    env["SLURM_CONF"] = str(layout.slurm_conf)
    env["SLURM_TRIAGE_CONFIG"] = str(layout.triage_conf)
    env["PATH"] = (
        f"{layout.slurm_path}{layout.bin_dir}:{env.get('PATH', '/usr/bin:/bin')}:/usr/sbin:/sbin"
    )
    return env


def _which(program: str, layout: cf.ClusterLayout | None = None) -> str | None:
    prefix = layout.slurm_prefix if layout else None
    if prefix is not None:
        for sub in ("sbin", "bin"):
            if os.access(prefix / sub / program, os.X_OK):
                return str(prefix / sub / program)
    return shutil.which(program) or next(
        (f"{d}/{program}" for d in SBIN if os.access(f"{d}/{program}", os.X_OK)), None
    )


def bundle_dir() -> Path:
    return Path(os.environ.get(BUNDLE_ENV) or DEFAULT_BUNDLE)


Progress = Callable[[str], object]


def _quiet(_: str) -> None:
    return None


def ensure_packages(layout: cf.ClusterLayout | None = None, progress: Progress = _quiet) -> None:
    """Install Slurm, munge and MariaDB if missing: Debian's packages for 22.05; for another
    release its runtime libraries from apt and its install tree from the bundle folder.
    `progress` hears one line before each slow step (the demo prints it)."""
    prefix = layout.slurm_prefix if layout else None
    needed = ("slurmctld", "slurmd", "slurmdbd", "sbatch", "munged", "mariadbd")
    if all(_which(p, layout) for p in needed) and (prefix is None or prefix.is_dir()):
        return
    if os.geteuid() != 0:
        raise DevClusterError("Slurm/munge/MariaDB are not installed and we are not root")
    if prefix is not None:
        _apt_install(BUILT_SLURM_PACKAGES, progress)
        if not prefix.is_dir():
            progress(f"unpacking Slurm {layout.slurm if layout else ''} into {prefix}")
            _unpack_built_slurm(prefix)
        return
    _apt_install(PACKAGES, progress)


def ensure_pyslurm(layout: cf.ClusterLayout) -> Path:
    """pyslurm for this release, installed from the bundle's wheel beside the release (not
    into any venv: a process that imports it without a slurm.conf is ended by libslurm)."""
    target = layout.pyslurm_dir
    assert target is not None  # default_layout refuses pyslurm for a release without one
    if (target / "pyslurm").is_dir():
        return target
    wheels = sorted(bundle_dir().glob(f"pyslurm-{layout.slurm}*.whl"))
    if not wheels:
        raise DevClusterError(f"no pyslurm-{layout.slurm}*.whl in {bundle_dir()}")
    log.info("devcluster_installing_pyslurm", wheel=str(wheels[-1]), target=str(target))
    _run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target",
         str(target), str(wheels[-1])],
        timeout=300,
    )  # fmt: skip
    # This process may import it next (open_door in a test session): its import system
    # remembers the folder as absent (sys.path_importer_cache) when it did not exist yet.
    importlib.invalidate_caches()
    return target


def _unpack_built_slurm(prefix: Path) -> None:
    tarballs = sorted(bundle_dir().glob(f"slurm-{prefix.name.split('-')[-1]}*.tar.zst"))
    if not tarballs:
        raise DevClusterError(
            f"{prefix} is absent and no install tree for it in {bundle_dir()} "
            f"(set ${BUNDLE_ENV} to the folder holding slurm-*.tar.zst)"
        )
    log.info("devcluster_unpacking_slurm", tarball=str(tarballs[-1]), prefix=str(prefix))
    _run(["tar", "-C", str(prefix.parent), "--zstd", "-xf", str(tarballs[-1])], timeout=300)
    if not (prefix / "sbin" / "slurmctld").exists():
        raise DevClusterError(f"{tarballs[-1]} did not unpack to {prefix}")


def _apt_install(packages: tuple[str, ...], progress: Progress = _quiet) -> None:
    missing = [p for p in packages if not _dpkg_installed(p)]
    if not missing:
        return
    if not _which("apt-get"):
        raise DevClusterError(f"{', '.join(missing)} not installed and apt-get is not available")
    log.info("devcluster_installing_packages", packages=missing)
    progress(f"installing {', '.join(missing)} with apt-get (first use: a few minutes)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-1:]
            raise DevClusterError(f"{' '.join(cmd[:2])} failed: {' '.join(tail)}")


def _dpkg_installed(package: str) -> bool:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, timeout=30
    )
    return result.returncode == 0 and result.stdout.endswith("installed")


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def _wait_until(
    check: Callable[[], bool], timeout_s: float, what: str, log_file: Path | None = None
) -> None:
    def last_log_line() -> str:
        if not (log_file and log_file.exists()):
            return ""
        lines = log_file.read_text(errors="replace").strip().splitlines()
        return f" (last log line: {lines[-1][:200]})" if lines else ""

    wait_until(check, timeout_s, what, error=DevClusterError, hint=last_log_line)


DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", *[f"slurmd-{n}" for n in cf.NODE_NAMES])


def _pid_path(layout: cf.ClusterLayout, daemon: str) -> Path:
    if daemon == "munged":
        return layout.munge_dir / "munged.pid"
    return layout.pid_file(daemon)


def daemon_status(layout: cf.ClusterLayout) -> list[DaemonStatus]:
    statuses = []
    for daemon in DAEMONS:
        pid = _read_pid(_pid_path(layout, daemon))
        statuses.append(DaemonStatus(daemon, pid, _alive(pid)))
    return statuses


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def prepare(layout: cf.ClusterLayout) -> None:
    """Create the directory tree, config files, fake GPU devices and hook scripts."""
    for d in (
        layout.etc,
        layout.log,
        layout.run,
        layout.spool / "ctld",
        layout.hooks,
        layout.gpu_dir,
        layout.evidence_dir,
        layout.state_dir,
        layout.mysql_dir,
    ):
        d.mkdir(parents=True, exist_ok=True)
    for name in cf.NODE_NAMES:
        (layout.spool / name).mkdir(exist_ok=True)
        NodeEstate(layout.simulate_root, name).ensure()
    # Jobs of any user write evidence here; sticky like /tmp so users can't clobber others.
    layout.evidence_dir.chmod(0o1777)
    # Root's evidence area exists before any job runs, so no user can create it first.
    (layout.evidence_dir / "_root").mkdir(mode=0o755, exist_ok=True)
    for i in range(cf.GPUS_PER_NODE):
        dev = layout.gpu_dir / f"gpu{i}"
        if not dev.is_symlink():
            dev.symlink_to("/dev/null")
    _write(layout.slurm_conf, cf.slurm_conf(layout))
    _write(layout.etc / "gres.conf", cf.gres_conf(layout))
    _write(layout.etc / "slurmdbd.conf", cf.slurmdbd_conf(layout), 0o600)
    _write(layout.triage_conf, cf.triage_conf(layout))
    for hook, program in cf.HOOK_PROGRAMS.items():
        _write(layout.hooks / hook, cf.hook_script(layout, program), 0o755)
    _write(layout.hooks / "reboot", cf.reboot_script(layout), 0o755)
    _write(layout.hooks / "power-cycle", cf.power_cycle_script(layout), 0o755)
    layout.root.chmod(0o755)


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 60) -> None:
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise DevClusterError(f"{Path(cmd[0]).name} failed (rc {result.returncode}): {detail[0]}")


def _start_munge(layout: cf.ClusterLayout) -> None:
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        _run([_which("mungekey") or "mungekey", "--create"])
        shutil.chown(key, "munge", "munge")
    layout.munge_dir.mkdir(exist_ok=True)
    layout.munge_dir.chmod(0o755)
    shutil.chown(layout.munge_dir, "munge", "munge")
    _run(
        [
            "runuser",
            "-u",
            "munge",
            "--",
            _which("munged") or "munged",
            f"--socket={layout.munge_socket}",
            f"--pid-file={layout.munge_dir}/munged.pid",
            f"--log-file={layout.munge_dir}/munged.log",
            f"--seed-file={layout.munge_dir}/seed",
            "--num-threads=2",
        ]
    )
    _wait_until(layout.munge_socket.exists, 10, "munged socket", layout.munge_dir / "munged.log")


def _mysql_client(layout: cf.ClusterLayout, sql: str) -> None:
    _run(
        [
            _which("mariadb") or "mysql",
            "--no-defaults",
            "-uroot",
            f"--socket={layout.mysql_dir}/mysqld.sock",
            "-e",
            sql,
        ]
    )


def _start_mariadb(layout: cf.ClusterLayout) -> None:
    datadir = layout.mysql_dir / "data"
    fresh = not (datadir / "mysql").exists()
    if fresh:
        _run(
            [
                _which("mariadb-install-db") or "mysql_install_db",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
            ],
            timeout=120,
        )
    sock = layout.mysql_dir / "mysqld.sock"
    log_file = layout.log / "mariadb.log"
    with open(log_file, "ab") as out:
        subprocess.Popen(
            [
                _which("mariadbd") or "mariadbd",
                "--no-defaults",
                f"--datadir={datadir}",
                "--user=root",
                f"--socket={sock}",
                f"--port={layout.mysql_port}",
                "--bind-address=127.0.0.1",
                f"--pid-file={layout.pid_file('mariadbd')}",
                "--innodb-buffer-pool-size=64M",
                "--skip-log-bin",
                "--innodb-log-file-size=16M",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    _wait_until(sock.exists, 30, "MariaDB socket", log_file)
    if fresh:
        user = f"'{cf.DB_USER}'@'127.0.0.1'"
        _mysql_client(
            layout,
            f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY "
            f"'{cf.DB_PASSWORD}'; GRANT ALL ON slurm_acct_db.* TO {user};",
        )


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _start_slurm_daemon(
    layout: cf.ClusterLayout, daemon: str, args: list[str], pid_file: Path, port: int
) -> None:
    env = dict(os.environ, SLURM_CONF=str(layout.slurm_conf))
    log_file = layout.log / (f"slurmd-{args[-1]}.log" if daemon == "slurmd" else f"{daemon}.log")
    offset = log_file.stat().st_size if log_file.exists() else 0
    _run([_which(daemon, layout) or daemon, *args], env=env)

    def ready() -> bool:
        if _alive(_read_pid(pid_file)) and _port_open(port):
            return True
        fatal = _new_fatal_line(log_file, offset)
        if fatal:
            raise DevClusterError(f"{daemon} {' '.join(args[-1:])} exited: {fatal}")
        return False

    _wait_until(ready, 30, f"{daemon} {' '.join(args[-1:])}", log_file)


def _new_fatal_line(log_file: Path, offset: int) -> str | None:
    try:
        with open(log_file, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    return next((line[:200] for line in text.splitlines() if "fatal:" in line), None)


def ensure_users() -> None:
    """The unprivileged SlurmUser and job user exist (system accounts, no home, no login)."""
    for user in (cf.SLURM_USER, cf.JOB_USER):
        try:
            pwd.getpwnam(user)
        except KeyError:
            _run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", user])


def _own(path: Path, user: str, mode: int | None = None) -> None:
    if not path.exists():
        path.touch()
    shutil.chown(path, user, user)
    if mode is not None:
        path.chmod(mode)


def set_owners(layout: cf.ClusterLayout) -> None:
    """What slurmctld, slurmdbd and EpilogSlurmctld (all SlurmUser) write, SlurmUser owns:
    the controller's state and logs, our journal's directory and our shared log file. The
    job user owns the directory test and demo jobs run in."""
    layout.metrics_dir.mkdir(exist_ok=True)
    for directory in (layout.spool / "ctld", layout.state_dir, layout.metrics_dir):
        for path in (directory, *directory.rglob("*")):
            shutil.chown(path, cf.SLURM_USER, cf.SLURM_USER)
    layout.state_dir.chmod(0o755)
    layout.metrics_dir.chmod(0o755)
    # The decider's RuntimeDirectory: SlurmUser's alone, as systemd makes it.
    layout.decider_socket.parent.mkdir(exist_ok=True)
    _own(layout.decider_socket.parent, cf.SLURM_USER, 0o700)
    layout.jobs_dir.mkdir(exist_ok=True)
    shutil.chown(layout.jobs_dir, cf.JOB_USER, cf.JOB_USER)
    for name in ("slurmctld.log", "slurmdbd.log", "slurm-triage.log"):
        _own(layout.log / name, cf.SLURM_USER, 0o644)
    _own(layout.etc / "slurmdbd.conf", cf.SLURM_USER, 0o600)


def up(
    layout: cf.ClusterLayout | None = None, timeout_s: float = 60, progress: Progress = _quiet
) -> cf.ClusterLayout:
    """Bring the cluster up (idempotent): start whatever is not running, wait for IDLE nodes.
    `progress` hears one line before each slow step."""
    layout = layout or default_layout()
    if os.geteuid() != 0:
        raise DevClusterError("the dev cluster runs Slurm daemons as root; run as root")
    ctld_alive = any(s.alive for s in daemon_status(layout) if s.name == "slurmctld")
    if not ctld_alive and controller_state_lost(layout.spool / "ctld"):
        progress(
            f"the cluster in {layout.root} was killed before it saved its state; starting afresh"
        )
        log.warning("devcluster_state_lost", root=str(layout.root))
        down(layout)
    ensure_packages(layout, progress)
    ensure_users()
    before = layout.slurm_conf.read_text() if layout.slurm_conf.exists() else ""
    extra: tuple[str, ...] = ()
    if layout.backend == "pyslurm":
        extra = (str(ensure_pyslurm(layout)),)
    progress("copying slurm-triage where the hooks and the job user can run it")
    try:
        runtime.build(layout.bin_dir.parents[1], extra_paths=extra)
    except runtime.RuntimeBuildError as exc:
        raise DevClusterError(str(exc)) from None
    prepare(layout)
    set_owners(layout)
    running = {s.name for s in daemon_status(layout) if s.alive}
    if "slurmctld" in running and before != layout.slurm_conf.read_text():
        # A newer slurm-triage wrote a different slurm.conf: make the daemons read it.
        _run([_which("scontrol", layout) or "scontrol", "reconfigure"], env=client_env(layout))
    started = time.monotonic()
    if len(running) < len(DAEMONS):
        progress(f"starting {', '.join(d for d in DAEMONS if d not in running)}")
    if "munged" not in running:
        _start_munge(layout)
    if "mariadbd" not in running:
        _start_mariadb(layout)
    if "slurmdbd" not in running:
        _start_slurm_daemon(layout, "slurmdbd", [], layout.pid_file("slurmdbd"), layout.dbd_port)
    if "slurmctld" not in running:
        _start_slurm_daemon(
            layout,
            "slurmctld",
            ["-f", str(layout.slurm_conf)],
            layout.pid_file("slurmctld"),
            layout.ctld_port,
        )
    for node in cf.NODE_NAMES:
        start_slurmd(layout, node)
    _wait_for_nodes(layout, timeout_s - (time.monotonic() - started))
    log.info("devcluster_up", root=str(layout.root), seconds=round(time.monotonic() - started, 1))
    return layout


def controller_state_lost(ctld_spool: Path) -> bool:
    """Whether slurmctld left a state it cannot start from: it names its cluster at once but
    saves association usage only at its periodic save or its shutdown, so one killed in its
    first minutes leaves `clustername` without `assoc_usage`, which 25.11 refuses to start
    from ("fatal: No Assoc usage file ... to recover", assoc_mgr.c) and 22.05 ignores.
    Its job ids would also restart under the accounting of the killed run's jobs."""
    return (ctld_spool / "clustername").exists() and not (ctld_spool / "assoc_usage").exists()


def start_slurmd(layout: cf.ClusterLayout, node: str) -> None:
    """Start one node's slurmd, unless it runs, (as at boot: with the boot flag) and wait
    until it listens; whether slurmctld takes the node back is slurmctld's business (a node
    that was DOWN stays DOWN, unless ReturnToService says otherwise)."""
    pid_file = layout.pid_file(f"slurmd-{node}")
    if _alive(_read_pid(pid_file)):
        return
    _start_slurm_daemon(
        layout,
        "slurmd",
        [cf.SLURMD_BOOT_FLAG, "-f", str(layout.slurm_conf), "-N", node],
        pid_file,
        layout.node_port(cf.NODE_NAMES.index(node)),
    )


def _wait_for_nodes(layout: cf.ClusterLayout, timeout_s: float) -> None:
    from slurm_triage.slurm import SlurmError, open_door

    door = open_door(env=client_env(layout), timeout_s=5)

    def nodes_ready() -> bool:
        try:
            nodes = door.nodes(cf.NODE_NAMES)
        except SlurmError:
            return False
        # A node drained by an earlier test run is still "up"; only unknown/down is not.
        return len(nodes) == len(cf.NODE_NAMES) and all(n.responding for n in nodes)

    _wait_until(
        nodes_ready, max(timeout_s, 5), "three responding nodes", layout.log / "slurmctld.log"
    )


def _stop(pid: int | None, name: str, timeout_s: float) -> None:
    if not _alive(pid):
        return
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    try:
        _wait_until(lambda: not _alive(pid), timeout_s, f"{name} to stop")
    except DevClusterError:
        log.warning("devcluster_kill", daemon=name, pid=pid)
        os.kill(pid, signal.SIGKILL)
        _wait_until(lambda: not _alive(pid), 5, f"{name} to die")


def down(layout: cf.ClusterLayout | None = None) -> None:
    """Stop every daemon (slurmd first, the database last) and remove the directory."""
    layout = layout or default_layout()
    statuses = {s.name: s for s in daemon_status(layout)}
    for daemon in reversed(DAEMONS):
        # slurmd waits for a gone slurmctld; it is only worth a short SIGTERM grace.
        _stop(statuses[daemon].pid, daemon, 3 if daemon.startswith("slurmd") else 10)
    _kill_leftover_jobs(layout)
    shutil.rmtree(layout.root, ignore_errors=True)
    log.info("devcluster_down", root=str(layout.root))


def _kill_leftover_jobs(layout: cf.ClusterLayout) -> None:
    """slurmstepd and job processes can outlive slurmd; kill those launched from our tree."""
    try:
        import psutil
    except ImportError:
        return
    marker = str(layout.root)
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            env = proc.info.get("environ") or {}
            if env.get("SLURM_CONF", "").startswith(marker) and proc.pid != os.getpid():
                proc.kill()
        except (psutil.Error, OSError):
            continue
