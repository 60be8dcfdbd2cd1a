"""One wrapped run from start to finish: spawn, pass output through, watch, record, summarise.

The order matters. Signal handlers go in before the child exists; the pumps start right
after the spawn (the child's first line must not wait on anything of ours); the NVML
watcher starts last, in its own thread, so a slow NVML never delays the job. Once the child
has exited nothing of ours may change how the wrapper exits: every failure from there on
(an unwritable evidence directory, a bug in attribution) is one line on stderr.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping, Sequence

from slurm_triage.config import Config, HealthConfig, PathsConfig, WrapperConfig, node_path
from slurm_triage.evidence import NvmlCondition, NvmlFact, Source, Stall
from slurm_triage.frozen import Frozen, field, fields, replace, shallow_dict
from slurm_triage.logs import get_logger
from slurm_triage.wrapper.errorfile import ErrorFileError, ErrorReport, read_error_file
from slurm_triage.wrapper.files import Scratch, open_tees
from slurm_triage.wrapper.identity import StepIdentity, identity_from_env
from slurm_triage.wrapper.output import Pump, TailBuffer, make_pipe
from slurm_triage.wrapper.stepd import stepd_delivers_to_child
from slurm_triage.wrapper.supervise import MAIN_THREAD_SIGNALS, ChildExit, Supervisor
from slurm_triage.wrapper.watch import HangDetector, TreeRss, heartbeat_mtime, tick_for, usage_now

TYPE_CHECKING = False  # typing's flag without importing typing; mypy takes it as true
if TYPE_CHECKING:
    from slurm_triage.wrapper.nvml_watch import NvmlWatcher

# Set for the child: a nested `slurm-triage wrap` of the same rank runs its command directly.
WRAPPED_ENV = "SLURM_TRIAGE_WRAPPED"
PUMP_JOIN_S = 5.0
# How often the main loop looks at new NVML facts (the watcher itself polls every 0.5 s).
FATAL_XID_TICK_S = 0.5


class WrapOptions(Frozen):
    """The wrapper's settings: `[wrapper]` of the config, CLI overrides applied."""

    tail_bytes: int = WrapperConfig.tail_bytes
    kill_grace_s: float = WrapperConfig.kill_grace_s
    hang_timeout_s: float = WrapperConfig.hang_timeout_s
    watch_nvml: bool = WrapperConfig.watch_nvml
    end_on_fatal_xid: bool = WrapperConfig.end_on_fatal_xid
    tee_dir: str = WrapperConfig.tee_dir
    summary: bool = WrapperConfig.summary
    evidence_dir: str = PathsConfig.evidence_dir
    health: HealthConfig = field(default_factory=HealthConfig)

    @classmethod
    def from_config(cls, config: Config, **overrides: object) -> WrapOptions:
        """Options from `config`; overrides that are None (CLI flag not given) are ignored."""
        # Only the keys we know: a key added to [wrapper] later must not break a job.
        known = {f.name for f in fields(cls)}
        section = {k: v for k, v in shallow_dict(config.wrapper).items() if k in known}
        base = cls(**section, evidence_dir=config.paths.evidence_dir, health=config.health)
        given = {k: v for k, v in overrides.items() if v is not None}
        return replace(base, **given)


def already_wrapped(env: Mapping[str, str]) -> bool:
    """True inside a wrapper of this same rank (a site-wide wrap plus the user's own)."""
    return env.get(WRAPPED_ENV, "") == identity_from_env(env).label


class SetupError(Exception):
    """The wrapper failed before the command started (a bug of ours): run it unwrapped."""


def run_wrapped(
    command: Sequence[str],
    options: WrapOptions,
    env: Mapping[str, str] | None = None,
    *,
    stdout_fd: int = 1,
    stderr_fd: int = 2,
) -> ChildExit:
    """Run `command` under supervision and record its end; how it exited is returned.

    SpawnError when the command cannot be started; SetupError when something of ours failed
    before it started (nothing is recorded then). Must run in the main thread of a process
    that has no other children.
    """
    env = dict(os.environ if env is None else env)
    say = _sayer(stderr_fd)
    try:
        identity = identity_from_env(env)
        scratch = Scratch.create(identity)
    except Exception as exc:
        raise SetupError(_describe(exc)) from exc
    try:
        return _supervise(command, options, env, identity, scratch, say, (stdout_fd, stderr_fd))
    finally:
        scratch.remove()


def _supervise(
    command: Sequence[str],
    options: WrapOptions,
    env: dict[str, str],
    identity: StepIdentity,
    scratch: Scratch,
    say: Callable[[str], None],
    destinations: tuple[int, int],
) -> ChildExit:
    child_env = {**env, **scratch.env(), WRAPPED_ENV: identity.label}
    try:
        streams = _Streams(options, identity, say, destinations)
        supervisor = Supervisor(
            command,
            kill_grace_s=options.kill_grace_s,
            env=child_env,
            stdout=streams.child_fds[0],
            stderr=streams.child_fds[1],
            already_delivered=stepd_delivers_to_child(env),
        )
        stack = contextlib.ExitStack()
        stack.enter_context(supervisor)  # signal handlers go in before the child exists
    except Exception as exc:
        raise SetupError(_describe(exc)) from exc
    with stack:
        started, started_wall = time.monotonic(), time.time()
        pid = streams.start(supervisor.start)
        watcher = _start_nvml(options, identity, env)
        monitor = _Monitor(supervisor, streams.pumps, scratch, options, identity, pid, say)
        if watcher is not None and options.end_on_fatal_xid:
            monitor.fatal = FatalXidGuard(watcher, supervisor, say)
            monitor.tick_s = min(monitor.tick_s, FATAL_XID_TICK_S)
        child = supervisor.wait(monitor.tick_s, monitor.tick)
        ended = _Ended(child, time.monotonic() - started, started_wall)
        try:
            _finish(identity, options, ended, streams.pumps, watcher, monitor, scratch, say)
        except Exception as exc:  # the last line of defence for the child's exit status
            say(f"slurm-triage: wrapper error after the command ended: {_describe(exc)}")
        return child


class _Ended(Frozen):
    child: ChildExit
    runtime_s: float
    started_wall: float


class _Streams:
    """The two pipes from the child, and the pumps that pass them on to our stdout/stderr."""

    def __init__(
        self,
        options: WrapOptions,
        identity: StepIdentity,
        say: Callable[[str], None],
        destinations: tuple[int, int],
    ) -> None:
        self._tees = open_tees(options.tee_dir, identity, say)
        self._tail_bytes = options.tail_bytes
        self._destinations = destinations
        self._pipes = (make_pipe(), make_pipe())
        self.pumps: tuple[Pump, ...] = ()

    @property
    def child_fds(self) -> tuple[int, int]:
        return self._pipes[0][1], self._pipes[1][1]

    def start(self, spawn: Callable[[], int]) -> int:
        """Spawn the child with `spawn`, then start pumping; the child's pid."""
        try:
            pid = spawn()
        except BaseException:
            for fd in (self._pipes[0][0], self._pipes[1][0], *self._tees):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in self.child_fds:
                os.close(fd)  # only the child writes now: its exit is our EOF
        names = ("stdout", "stderr")
        self.pumps = tuple(
            Pump(name, pipe[0], dst, TailBuffer(self._tail_bytes), tee, MAIN_THREAD_SIGNALS)
            for name, pipe, dst, tee in zip(
                names, self._pipes, self._destinations, self._tees, strict=True
            )
        )
        for pump in self.pumps:
            pump.start()
        return pid


class _Monitor:
    """The main loop's tick: peak RSS sampling and the hang detector (when enabled)."""

    def __init__(
        self,
        supervisor: Supervisor,
        pumps: Sequence[Pump],
        scratch: Scratch,
        options: WrapOptions,
        identity: StepIdentity,
        pid: int,
        say: Callable[[str], None],
    ) -> None:
        self._supervisor, self._pumps, self._scratch = supervisor, pumps, scratch
        self._node, self._say = identity.node, say
        timeout = options.hang_timeout_s
        self.tick_s = tick_for(timeout)
        self._hang = HangDetector(timeout, time.monotonic()) if timeout > 0 else None
        self.rss: TreeRss | None = TreeRss(pid)
        self.stall: Stall | None = None
        self.fatal: FatalXidGuard | None = None

    def tick(self) -> None:
        """Never raises: a watcher that fails is switched off, the run goes on."""
        now = time.monotonic()
        if self.rss is not None:
            try:
                self.rss.maybe_sample(now)
            except Exception:
                self.rss = None  # figures are a nicety
        if self.fatal is not None:
            self.fatal.check()
        if self._hang is not None and self.stall is None:
            try:
                self._check_hang(now)
            except Exception as exc:
                self._hang = None
                get_logger(component="wrapper").warning("hang_detector_failed", error=str(exc))

    def _check_hang(self, now: float) -> None:
        assert self._hang is not None
        output = sum(p.bytes_seen for p in self._pumps)
        beat = heartbeat_mtime(self._scratch.heartbeat) if self._scratch.heartbeat else None
        idle = self._hang.observe(now, output, beat)
        if idle is None:
            return
        self.stall = Stall(node=self._node, time=time.time(), source=Source.USER, idle_s=idle)
        self._say(
            f"slurm-triage: no output and no heartbeat for {idle:.0f} s: ending the command (hang)"
        )
        self._supervisor.terminate()


class FatalXidGuard:
    """Ends the command once NVML reports a node-fatal XID or a lost GPU on its GPUs.

    Which XIDs are node-fatal is the XID catalogue's call (its node action drains); an
    application XID (13, 31, 43, ...) is the program's own and is left to the program."""

    def __init__(
        self, watcher: NvmlWatcher, supervisor: Supervisor, say: Callable[[str], None]
    ) -> None:
        self._watcher, self._supervisor, self._say = watcher, supervisor, say
        self._seen = 0
        self.fired = False

    def check(self) -> None:
        if self.fired:
            return
        facts = self._watcher.facts
        for fact in facts[self._seen :]:
            if node_fatal(fact):
                self.fired = True
                self._say(
                    f"slurm-triage: {fact.detail} on GPU {fact.gpu}: a node fault, "
                    "ending the command now instead of waiting for a timeout"
                )
                self._supervisor.terminate()
                break
        self._seen = len(facts)


def node_fatal(fact: NvmlFact) -> bool:
    if fact.condition in (NvmlCondition.GPU_LOST, NvmlCondition.ECC_UNCORRECTED):
        return True
    if fact.condition is NvmlCondition.XID_EVENT and fact.value is not None:
        from slurm_triage.attribution.xid import lookup

        return lookup(fact.value).drains_node()
    return False


def _start_nvml(
    options: WrapOptions, identity: StepIdentity, env: Mapping[str, str]
) -> NvmlWatcher | None:
    if not options.watch_nvml:
        return None
    from slurm_triage.gpu_ids import slurm_gpu_ids

    gpus = slurm_gpu_ids(env)  # Slurm's global ids, not NVML indices (gpu_ids.py)
    try:
        # Imported here, in the main thread: imports racing between threads can meet a
        # partially initialised module when packages import each other.
        from slurm_triage.nvml import nvml_module, read_pci_gpus

        sysfs = node_path(options.health.sysfs_root, identity.node)
        if gpus is None and not read_pci_gpus(sysfs):
            # Slurm names no GPUs for the step and the PCI bus holds no NVIDIA GPU: NVML has
            # nothing to watch here (it would fail to start, or show no GPU), so CPU nodes
            # are spared pynvml's import (~15 ms) and the thread (issue 20).
            get_logger(component="wrapper.nvml", node=identity.node).debug(
                "nvml_unavailable", error="no NVIDIA GPU on the PCI bus", watching=False
            )
            return None
        nvml = nvml_module(options.health, identity.node)
    except Exception as exc:
        get_logger(component="wrapper.nvml").warning("nvml_unavailable", error=_describe(exc))
        return None
    from slurm_triage.wrapper.nvml_watch import NvmlWatcher

    watcher = NvmlWatcher(
        lambda: nvml,
        identity.node,
        gpus,
        gpus_expected=gpus is not None,
        host_bus_ids=lambda: read_pci_gpus(sysfs),
        order=options.health.slurm_gpu_order,
        block_signals=MAIN_THREAD_SIGNALS,
    )
    watcher.start()
    return watcher


def _finish(
    identity: StepIdentity,
    options: WrapOptions,
    ended: _Ended,
    pumps: Sequence[Pump],
    watcher: NvmlWatcher | None,
    monitor: _Monitor,
    scratch: Scratch,
    say: Callable[[str], None],
) -> None:
    """Gather, record and summarise once the child has exited."""
    for pump in pumps:
        pump.join(PUMP_JOIN_S)
    nvml = tuple(watcher.stop()) if watcher is not None else ()
    # Attribution's tables are only imported now, when the child is gone and the watcher
    # thread has stopped (see _start_nvml on imports from two threads).
    from slurm_triage.wrapper.record import RunOutcome
    from slurm_triage.wrapper.report import conclude

    error = _read_error(scratch.error_file, identity)
    stdout, stderr = pumps
    tails = (
        (stderr.tail.snapshot(), stderr.tail.whole),
        (stdout.tail.snapshot(), stdout.tail.whole),
    )
    outcome = RunOutcome(
        identity, ended.child, ended.runtime_s, time.time(), tails, error, nvml, monitor.stall
    )
    for line in conclude(outcome, options.evidence_dir, summary=options.summary):
        say(line)
    _log_usage(identity, ended, monitor, pumps)


def _read_error(path: str | None, identity: StepIdentity) -> ErrorReport | None:
    if not path:
        return None
    try:
        return read_error_file(path)
    except ErrorFileError as exc:
        get_logger(component="wrapper", node=identity.node).warning(
            "error_file_ignored", reason=str(exc)
        )
        return None


def _log_usage(
    identity: StepIdentity, ended: _Ended, monitor: _Monitor, pumps: Sequence[Pump]
) -> None:
    usage = usage_now(monitor.rss.peak if monitor.rss is not None else 0)
    get_logger(component="wrapper", node=identity.node).debug(
        "wrapper_usage",
        job=identity.job_id,
        task=identity.task,
        runtime_s=round(ended.runtime_s, 3),
        started=ended.started_wall,
        stdout_bytes=pumps[0].tail.total,
        stderr_bytes=pumps[1].tail.total,
        stdout_error=pumps[0].dst_error,
        stderr_error=pumps[1].dst_error,
        **shallow_dict(usage),
    )


def _sayer(fd: int) -> Callable[[str], None]:
    def say(line: str) -> None:
        with contextlib.suppress(OSError):
            os.write(fd, (" ".join(line.split()) + "\n").encode("utf-8", "replace"))

    return say


def _describe(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
