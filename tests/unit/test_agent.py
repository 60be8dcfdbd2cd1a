"""The node agent (agent.server) and the Prolog's way to it (prolog_epilog.entry): the same
verdict and exit status as the screen in-process, on a simulated 8-GPU, 4-HCA, 3-mount node,
healthy and broken; the Prolog's fallback when the agent is absent, stale, hung or talks
garbage; peers refused by uid; bad requests answered and survived; concurrent Prologs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from slurm_triage.agent import client, protocol, server
from slurm_triage.agent.client import Outcome
from slurm_triage.agent.server import Agent, open_nvml, serve
from slurm_triage.agent.xids import XidWatch
from slurm_triage.config import Config, load_config
from slurm_triage.health_checks.fact_cache import FactCache
from slurm_triage.logs import setup_logging
from slurm_triage.prolog_epilog.entry import prolog_main
from slurm_triage.prolog_epilog.prolog import prolog
from slurm_triage.simulate.estate import MOUNTS, NodeEstate, inject
from slurm_triage.unix_socket.listen import ListenError, bind_socket
from tests.unit.socket_races import answers_then_closes

BIN = Path(sys.executable).parent
NOBODY = 65534


class Node:
    """A simulated node1, its config file, and where the agent listens."""

    def __init__(self, root: Path, socket_dir: Path, **agent: object) -> None:
        self.root, self.socket = root, str(socket_dir / "agent.sock")
        self.estate = NodeEstate(root / "sim", "node1").ensure()
        (root / "no-slurm").mkdir(exist_ok=True)
        (root / "evidence").mkdir(mode=0o1777, exist_ok=True)
        self.log = root / "triage.log"
        sim = root / "sim"
        mounts = ", ".join(f'"{sim}/{{node}}/mounts/{m}"' for m in MOUNTS)
        extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in agent.items())
        self.config_path = root / f"config{len(list(root.glob('config*.toml')))}.toml"
        self.config_path.write_text(
            f'[logging]\ndestination = "file"\nfile = "{self.log}"\nformat = "json"\n'
            f'[paths]\nstate_dir = "{root}/state"\nevidence_dir = "{root}/evidence"\n'
            f'[slurm]\nbin_dir = "{root}/no-slurm"\nattempts = 1\ntimeout_s = 2\n'
            f'[health]\nnvml = "simulated"\nsimulate_root = "{sim}"\n'
            f'kernel_log = "{sim}/{{node}}/kern.log"\nsysfs_root = "{sim}/{{node}}/sys"\n'
            f'mountinfo = "{sim}/{{node}}/mountinfo"\nmounts = [{mounts}]\n'
            'ib_ports = ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]\nib_rate_gbps = 400\n'
            f'[agent]\nsocket = "{self.socket}"\n{extra}'
        )
        self.config: Config = load_config(self.config_path, env={})

    def env(self, job: int, **more: str) -> dict[str, str]:
        """The Prolog's environment for job `job` (what slurmd gives it, plus where the
        agent is)."""
        return {
            "SLURM_JOB_ID": str(job),
            "SLURM_JOB_UID": "0",
            "SLURM_JOB_GID": "0",
            "SLURMD_NODENAME": "node1",
            "SLURM_SCRIPT_CONTEXT": "prolog_slurmd",
            protocol.SOCKET_ENV: self.socket,
            **more,
        }

    def verdict(self) -> list[tuple[str, str, str]]:
        """The last screen's checks, statuses and reasons (its saved report)."""
        report = json.loads((self.root / "state" / "health" / "node1.last.json").read_text())
        return [(r["check"], r["status"], r["reason"]) for r in report["results"]]

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [e for e in map(json.loads, lines) if e.get("event") == name]


@pytest.fixture
def node(tmp_path: Path) -> Node:
    node = Node(tmp_path, tmp_path / "run")
    setup_logging(node.config.logging, program="test-agent")
    return node


@contextlib.contextmanager
def serving(
    config: Config,
    screen: Callable[..., int] = prolog,
    *,
    xids: XidWatch | None = None,
    kept: FactCache | None = None,
) -> Iterator[Agent]:
    """The agent's server in a thread of this process, on config.agent.socket."""
    listener = bind_socket(config.agent.socket)
    nvml, held = open_nvml(config, "node1")
    agent = Agent(config, "node1", screen, nvml=nvml, nvml_held=held, xids=xids, kept=kept)
    stop = threading.Event()
    thread = threading.Thread(target=serve, args=(listener, agent, stop), daemon=True)
    thread.start()
    try:
        yield agent
    finally:
        stop.set()
        thread.join(5)
        listener.close()
        agent.close()


def _raw(path: str, payload: bytes, *, wait_s: float = 10.0) -> dict[str, Any]:
    """Send bytes as they are and read the one answer line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(wait_s)
        conn.connect(path)
        conn.sendall(payload)
        answer = conn.makefile("rb").readline()
    return dict(json.loads(answer))


# -- the same verdict ------------------------------------------------------------------------


def test_a_healthy_node_passes_through_the_agent_as_in_process(node: Node) -> None:
    """Exit 0 and the same checks with the same statuses and reasons either way (after a
    first screen, which sets the NVLink baseline both then judge against)."""
    assert prolog(node.config, node.env(10)) == 0
    with serving(node.config):
        reply = client.ask_agent(node.env(11))
    assert (reply.outcome, reply.exit_status) == (Outcome.ANSWERED, 0)
    through_agent = node.verdict()
    assert prolog(node.config, node.env(12)) == 0
    assert node.verdict() == through_agent
    assert {status for _, status, _ in through_agent} <= {"OK", "SKIPPED"}
    (done,) = [e for e in node.events("role_done") if e.get("via") == "agent"]
    assert (done["job_id"], done["exit_status"]) == ("11", 0)


def test_a_broken_node_turns_the_job_away_through_the_agent_as_in_process(node: Node) -> None:
    """XID 79 (GPU fallen off the bus): exit 1, the same failed check, and root's record for
    the decision, either way (Slurm unreachable here: the drain is a logged outcome)."""
    assert prolog(node.config, node.env(20)) == 0
    inject(node.estate, "xid", 79, gpu=2)
    with serving(node.config):
        reply = client.ask_agent(node.env(21))
    assert (reply.outcome, reply.exit_status) == (Outcome.ANSWERED, 1)
    through_agent = node.verdict()
    assert prolog(node.config, node.env(22)) == 1
    assert node.verdict() == through_agent
    assert any(status == "FAIL" for _, status, _ in through_agent)
    for job in (21, 22):
        assert (node.root / "evidence" / "_root" / str(job) / "node1.prolog.json").exists()


def test_an_xid_only_the_agent_saw_fails_its_screen(node: Node) -> None:
    """The agent's NVML watcher saw XID 109 (context switch timeout) that the kernel log no
    longer holds (its ring overwritten): the agent turns the job away; a cold Prolog,
    which only has the log, cannot know."""
    nvml, _ = open_nvml(node.config, "node1")
    watch = XidWatch(nvml, "node1", window_s=600, poll_ms=50)
    watch.start()
    try:
        assert watch.watching.wait(10)
        inject(node.estate, "xid", 109, gpu=5)
        node.estate.kernel_log.write_text("")
        deadline = time.monotonic() + 10
        while not watch.recent():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        with serving(node.config, xids=watch):
            reply = client.ask_agent(node.env(31))
    finally:
        watch.stop()
    assert reply.exit_status == 1
    assert ("gpu.xid", "FAIL") in [(c, s) for c, s, _ in node.verdict()]
    assert prolog(node.config, node.env(32)) == 0


# -- the Prolog without the agent --------------------------------------------------------------


@contextlib.contextmanager
def _absent(path: str) -> Iterator[None]:
    yield


@contextlib.contextmanager
def _stale(path: str) -> Iterator[None]:
    """A socket file nobody listens on (an agent that died without cleaning up)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.close()
    yield


@contextlib.contextmanager
def _hung(path: str) -> Iterator[None]:
    """Listening, never accepting: connect succeeds (the backlog), no answer ever comes."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(path)
        sock.listen(8)
        yield


@contextlib.contextmanager
def _garbage(path: str) -> Iterator[None]:
    """Answers every connection with a line that is not this protocol's."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    sock.listen(8)

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = sock.accept()
                with conn:
                    conn.recv(65536)
                    conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    try:
        yield
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("agent", "outcome"),
    [
        (_absent, Outcome.NOT_RUNNING),
        (_stale, Outcome.NOT_RUNNING),
        (_hung, Outcome.TIMED_OUT),
        (_garbage, Outcome.GARBAGE),
    ],
)
@pytest.mark.parametrize("fault", [None, "xid=79"])
def test_without_an_agents_verdict_the_prolog_screens_itself(
    node: Node,
    monkeypatch: pytest.MonkeyPatch,
    agent: Callable[[str], contextlib.AbstractContextManager[None]],
    outcome: str,
    fault: str | None,
) -> None:
    """The Prolog entry exits as the screen in this process says (0 healthy, 1 broken),
    and logs why the agent gave no verdict."""
    if fault:
        inject(node.estate, "xid", 79, gpu=0)
    expected = prolog(node.config, node.env(40))
    assert expected == (1 if fault else 0)
    os.makedirs(os.path.dirname(node.socket), exist_ok=True)
    for name, value in node.env(41).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(node.config_path))
    monkeypatch.setenv(protocol.ANSWER_TIMEOUT_ENV, "0.3")
    started = time.monotonic()
    with agent(node.socket):
        assert prolog_main() == expected
    assert time.monotonic() - started < 8
    (fallback,) = node.events("prolog_agent_fallback")
    assert fallback["outcome"] == outcome
    assert fallback["level"] == ("info" if outcome == Outcome.NOT_RUNNING else "warning")


def test_an_agent_that_refuses_leaves_the_screen_to_the_prolog(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error answer (here: a job environment the agent does not take) is a fallback
    too, with the same verdict as in-process."""
    for name, value in node.env(51, SLURM_JOB_GPUS="GPU-8f3e2a").items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(node.config_path))
    with serving(node.config):
        assert prolog_main() == 0
    (fallback,) = node.events("prolog_agent_fallback")
    assert fallback["outcome"] == "refused" and "SLURM_JOB_GPUS" in fallback["detail"]


# -- hostile and broken clients ----------------------------------------------------------------


def test_bad_requests_get_an_error_answer_and_the_agent_serves_on(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "REQUEST_TIMEOUT_S", 0.3)
    good = protocol.encode_request(node.env(61))
    with serving(node.config):
        too_long = _raw(node.socket, b"a" * (protocol.MAX_REQUEST_BYTES + 500))
        assert "longer than" in too_long["error"]
        long_line = b'{"v": 1, "kind": "prolog", "env": {}, "pad": "' + b"x" * 9000 + b'"}\n'
        assert "longer than" in _raw(node.socket, long_line)["error"]
        assert "error" in _raw(node.socket, b"not json\n")
        assert "error" in _raw(node.socket, b'{"v": 1, "kind": "prolog", "env": []}\n')
        hostile = {"v": 1, "kind": "prolog", "env": {"LD_PRELOAD": "/tmp/x.so"}}
        assert "does not take" in _raw(node.socket, json.dumps(hostile).encode() + b"\n")["error"]
        assert (
            "node1"
            in _raw(node.socket, protocol.encode_request(node.env(62, SLURMD_NODENAME="node9")))[
                "error"
            ]
        )
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
            silent.settimeout(5)
            silent.connect(node.socket)
            assert b"no whole request" in silent.makefile("rb").readline()
        half = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        half.connect(node.socket)
        half.sendall(good[:20])
        half.close()
        assert _raw(node.socket, good) == {"v": 1, "exit_status": 0}
    refused = node.events("agent_request_refused")
    assert len(refused) >= 6 and all("\n" not in e["reason"] for e in refused)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_a_peer_uid_not_allowed_is_refused_before_its_request_is_read(
    tmp_path: Path,
) -> None:
    """Past the socket's mode (made 0666 here, as a mistake would), the agent still serves
    only root and agent.allowed_uids, by the kernel's word (SO_PEERCRED)."""
    socket_dir = Path(tempfile.mkdtemp(prefix="agent-peer-", dir="/tmp"))
    try:
        socket_dir.chmod(0o755)
        ask = (
            "import socket, sys\n"
            "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); s.settimeout(20)\n"
            "s.connect(sys.argv[1])\n"
            # A refused peer's connection is answered and closed before its request is read.
            "try:\n    s.sendall(sys.argv[2].encode())\nexcept BrokenPipeError:\n    pass\n"
            "print(s.makefile().readline(), end='')\n"
        )
        for allowed, served in (((), False), ((NOBODY,), True)):
            node = Node(tmp_path, socket_dir, allowed_uids=list(allowed))
            setup_logging(node.config.logging, program="test-agent")
            request = protocol.encode_request(node.env(71)).decode()
            with serving(node.config):
                os.chmod(node.socket, 0o666)
                done = subprocess.run(
                    ["python3", "-I", "-c", ask, node.socket, request],
                    user=NOBODY,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    cwd="/",
                )
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            if served:
                assert answer == {"v": 1, "exit_status": 0}
            else:
                assert answer == {"v": 1, "error": f"uid {NOBODY} may not use the agent"}
                assert [e["uid"] for e in node.events("agent_peer_refused")] == [NOBODY]
    finally:
        for leftover in socket_dir.iterdir():
            leftover.unlink()
        socket_dir.rmdir()


# -- several jobs starting at once ---------------------------------------------------------------


def test_concurrent_prologs_are_each_served(node: Node) -> None:
    """Six jobs starting together on one node: six screens in their own threads, each
    answered 0, and NVML's init count back to the agent's own one."""
    with serving(node.config) as agent:
        replies: dict[int, client.Reply] = {}

        def ask(job: int) -> None:
            replies[job] = client.ask_agent(node.env(job))

        threads = [threading.Thread(target=ask, args=(job,)) for job in range(100, 106)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert {job: r.exit_status for job, r in replies.items()} == dict.fromkeys(
            range(100, 106), 0
        )
        assert agent.nvml._initialised == 1
    done = [e for e in node.events("role_done") if e.get("via") == "agent"]
    assert sorted(e["job_id"] for e in done) == [str(j) for j in range(100, 106)]


def test_past_max_concurrent_a_prolog_is_answered_busy(tmp_path: Path) -> None:
    """With every slot taken, the next Prolog is told busy at once (and screens itself)."""
    node = Node(tmp_path, tmp_path / "run", max_concurrent=1)
    entered, release = threading.Event(), threading.Event()

    def slow_screen(*_args: object, **_kwargs: object) -> int:
        entered.set()
        release.wait(30)
        return 0

    with serving(node.config, slow_screen):
        first: list[client.Reply] = []
        holder = threading.Thread(target=lambda: first.append(client.ask_agent(node.env(1))))
        holder.start()
        assert entered.wait(10)
        busy = client.ask_agent(node.env(2))
        release.set()
        holder.join(30)
    assert (busy.outcome, busy.detail) == (Outcome.REFUSED, "agent refused: busy")
    assert first[0].exit_status == 0


# -- the agent as systemd runs it ----------------------------------------------------------------


def test_the_agent_process_serves_the_prolog_program_and_stops_clean(node: Node) -> None:
    """`slurm-triage agent` listens (socket 0600), `slurm-triage-prolog` gets its verdict,
    a second agent on the same socket is refused (exit 2, one line), SIGTERM stops the
    first with exit 0 and removes its socket."""
    env = {**os.environ, "SLURM_TRIAGE_CONFIG": str(node.config_path)}
    agent = subprocess.Popen(
        [str(BIN / "slurm-triage"), "agent", "--node", "node1"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not node.events("agent_started"):
            assert agent.poll() is None, agent.stderr.read() if agent.stderr else ""
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert os.stat(node.socket).st_mode & 0o777 == 0o600
        prolog_env = {**env, **node.env(81)}
        done = subprocess.run(
            [str(BIN / "slurm-triage-prolog")], env=prolog_env, capture_output=True, timeout=60
        )
        assert done.returncode == 0
        assert [e["job_id"] for e in node.events("role_done") if e.get("via") == "agent"] == ["81"]
        assert node.events("prolog_agent_fallback") == []
        second = subprocess.run(
            [str(BIN / "slurm-triage"), "agent", "--node", "node1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"slurm-triage: error: {node.socket}: another agent is serving it"
        ]
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0
    assert not os.path.exists(node.socket)
    assert node.events("agent_stopped")


def test_the_socket_is_not_taken_from_what_is_not_ours(tmp_path: Path) -> None:
    """A path that is not a socket, a relative path, or a directory others may write: the
    agent does not start (ListenError: one line, exit 2)."""
    plain = tmp_path / "run" / "agent.sock"
    plain.parent.mkdir()
    plain.write_text("not a socket")
    with pytest.raises(ListenError, match="is not a socket"):
        bind_socket(str(plain))
    with pytest.raises(ListenError, match="absolute"):
        bind_socket("run/agent.sock")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ListenError, match="writable by no one else"):
        bind_socket(str(shared / "agent.sock"))
    assert not (shared / "agent.sock").exists()


def test_a_bad_node_name_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from slurm_triage.cli.main import main

    assert main(["agent", "--node", "../etc"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "slurm-triage: error: --node '../etc': not a Slurm node name (letters, digits, . _ -)"
    ]


def test_the_systemd_unit_makes_the_default_sockets_directory() -> None:
    """contrib's unit runs `slurm-triage agent` as Type=notify (the agent says READY=1) and
    has systemd make /run/slurm-triage, where the default agent.socket is."""
    import configparser

    unit = configparser.ConfigParser(interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(Path(__file__).resolve().parents[2] / "contrib" / "slurm-triage-agent.service")
    service = unit["Service"]
    program, command = service["ExecStart"].split()[-2:]
    assert (os.path.basename(program), command) == ("slurm-triage", "agent")
    assert service["Type"] == "notify" and service["Restart"] == "on-failure"
    assert f"/run/{service['RuntimeDirectory']}" == os.path.dirname(protocol.DEFAULT_SOCKET)


# -- a GPU reset needs the agent to let go of NVML ---------------------------------------------


def _watching(node: Node) -> XidWatch:
    nvml, _ = open_nvml(node.config, "node1")
    nvml.nvmlShutdown()  # the watcher's own module; its init is the watcher's
    watch = XidWatch(nvml, "node1", window_s=600, poll_ms=50)
    watch.start()
    assert watch.watching.wait(10)
    return watch


def test_the_agent_lets_go_of_nvml_for_a_reset_and_takes_it_back(node: Node) -> None:
    """release_nvml: the agent's own init and the XID watch's are let go (NVIDIA refuses a
    reset while any process holds the GPU), Prologs are still served meanwhile, and NVML is
    held again when asked (0 s) or when the time asked for is over."""
    watch = _watching(node)
    with serving(node.config, xids=watch) as agent:
        holders = agent.nvml._initialised
        assert holders == 1 and agent.nvml_held
        ask = (node.socket, 0.5, 20.0)
        assert client.release_nvml(ask[0], 300, *ask[1:]) == (Outcome.ANSWERED, 300, "")
        assert agent.nvml._initialised == 0 and not agent.nvml_held
        assert not watch.watching.is_set()
        assert client.ask_agent(node.env(91)).exit_status == 0
        assert agent.nvml._initialised == 0
        assert client.release_nvml(ask[0], 0, *ask[1:]) == (Outcome.ANSWERED, 0, "")
        assert watch.watching.wait(10) and agent.nvml_held
        assert client.release_nvml(ask[0], 1, *ask[1:])[:2] == (Outcome.ANSWERED, 1)
        assert not agent.nvml_held
        deadline = time.monotonic() + 10
        while not (agent.nvml_held and watch.watching.is_set()):
            assert time.monotonic() < deadline, "NVML not taken back when the time was over"
            time.sleep(0.05)
    assert not watch.is_alive()
    assert len(node.events("agent_nvml_released")) == 2


def test_the_nodes_gpu_reset_asks_the_agent_to_let_go(node: Node) -> None:
    """The periodic health check's GPU reset (gpu_repair) has the agent let go of NVML
    before the resets and take it back after them."""
    from dataclasses import replace

    from slurm_triage.config import RepairConfig
    from slurm_triage.policies.drain_words import gpu_reset_reason
    from slurm_triage.prolog_epilog.gpu_repair import GpuRepairOutcome
    from slurm_triage.prolog_epilog.healthcheck import periodic
    from slurm_triage.slurm.model import NodeFlag
    from slurm_triage.testing import FakeDoor, node_info

    config = replace(node.config, repair=RepairConfig(enabled=True))
    inject(node.estate, "xid", 119, gpu=2)
    reason = gpu_reset_reason((2,), "gpu.lost")
    door = FakeDoor(
        nodes=[node_info("node1", state="IDLE", flags=frozenset({NodeFlag.DRAIN}), reason=reason)]
    )
    with serving(node.config) as agent:
        run = periodic(config, node="node1", door=door)
        assert agent.nvml_held
    assert run.gpu_repair is not None and run.gpu_repair.outcome is GpuRepairOutcome.REPAIRED
    released = node.events("agent_nvml_released")
    taken = node.events("agent_nvml_taken_back")
    assert len(released) == len(taken) == 1
    assert released[0]["seconds"] > 120  # at least one reset's longest time


# -- fresh facts: the agent's kept facts (health_checks.fact_cache, agent.refresh) ------------


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_prolog_uses_the_kept_facts_while_fresh_and_reads_them_again_after(node: Node) -> None:
    """Facts read in the background before GPU 2 fell off the bus (XID 79, NVML and the
    kernel log both say so) still pass a job within facts_max_age_s: that is the bargain.
    Past it the Prolog reads them itself and turns the job away, as a cold one does."""
    clock = Clock()
    kept = FactCache(30.0, clock)
    with serving(node.config, kept=kept) as agent:
        agent.refresh_facts()
        assert all(kept.fresh(source)[0] for source in server.prolog_sources())
        inject(node.estate, "xid", 79, gpu=2)
        clock.now += 29
        assert client.ask_agent(node.env(101)).exit_status == 0
        clock.now += 2
        assert client.ask_agent(node.env(102)).exit_status == 1
        assert ("gpu.lost", "FAIL") in [(c, s) for c, s, _ in node.verdict()]
        # What that Prolog read is kept for the next one.
        assert client.ask_agent(node.env(103)).exit_status == 1
    assert prolog(node.config, node.env(104)) == 1


def test_an_xid_the_watcher_sees_drops_the_kept_facts(node: Node) -> None:
    """XID 109 seen by the agent's NVML watcher after the background read: the kept facts
    predate it, so they are dropped, and the next Prolog reads again and fails gpu.xid."""
    kept = FactCache(3600.0)
    nvml, _ = open_nvml(node.config, "node1")
    nvml.nvmlShutdown()
    with serving(node.config, kept=kept) as agent:
        agent.refresh_facts()
        watch = XidWatch(nvml, "node1", window_s=600, poll_ms=50, on_xid=agent.facts_changed)
        agent.xids = watch
        watch.start()
        try:
            assert watch.watching.wait(10)
            inject(node.estate, "xid", 109, gpu=5)
            deadline = time.monotonic() + 10
            while kept.fresh("kernel")[0]:
                assert time.monotonic() < deadline, "the XID did not drop the kept facts"
                time.sleep(0.02)
            reply = client.ask_agent(node.env(111))
        finally:
            watch.stop()
    assert reply.exit_status == 1
    assert ("gpu.xid", "FAIL") in [(c, s) for c, s, _ in node.verdict()]


def test_nvml_is_not_read_in_the_background_while_let_go_for_a_reset(node: Node) -> None:
    """release_nvml drops the kept NVML facts and the background read leaves NVML alone
    (an nvmlInit would make NVIDIA refuse the reset); taking NVML back drops every kept
    fact, the GPUs having been reset."""
    kept = FactCache(3600.0)
    with serving(node.config, kept=kept) as agent:
        agent.refresh_facts()
        ask = (node.socket, 0.5, 20.0)
        assert client.release_nvml(ask[0], 300, *ask[1:])[:2] == (Outcome.ANSWERED, 300)
        assert kept.fresh("nvml") == (False, None)
        inits = []
        real_init = agent.nvml.nvmlInit
        agent.nvml.nvmlInit = lambda: inits.append(1) or real_init()
        agent.refresh_facts()
        assert inits == [] and kept.fresh("nvml") == (False, None)
        assert kept.fresh("kernel")[0]
        assert client.release_nvml(ask[0], 0, *ask[1:])[:2] == (Outcome.ANSWERED, 0)
        assert not any(kept.fresh(source)[0] for source in server.prolog_sources())
        agent.refresh_facts()
        assert kept.fresh("nvml")[0] and inits


def test_the_agent_process_keeps_facts_fresh_in_the_background(node: Node) -> None:
    """`slurm-triage agent` reads the facts when it starts and every facts_refresh_s: a
    fault made after a refresh is seen by a Prolog once the next refresh has run, without
    the Prolog reading anything itself."""
    config = Node(node.root, Path(node.socket).parent, facts_refresh_s=1, facts_max_age_s=600)
    env = {**os.environ, "SLURM_TRIAGE_CONFIG": str(config.config_path)}
    agent = subprocess.Popen([str(BIN / "slurm-triage"), "agent", "--node", "node1"], env=env)
    try:
        deadline = time.monotonic() + 60
        while not node.events("agent_started"):
            assert agent.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        assert node.events("agent_started")[0]["facts_max_age_s"] == 600
        assert client.ask_agent(node.env(121)).exit_status == 0
        inject(node.estate, "xid", 79, gpu=2)
        deadline = time.monotonic() + 30
        while client.ask_agent(node.env(122)).exit_status != 1:
            assert time.monotonic() < deadline, "the background read never saw the fault"
            time.sleep(0.2)
    finally:
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30) == 0


def test_a_hung_read_is_not_started_again_beside_itself(node: Node) -> None:
    """NVML hangs: the background read of it is abandoned at health.check_timeout_s and
    kept as UNKNOWN's reason; later turns start no second reading thread beside the hung
    one (one a turn would grow the agent without bound), and read the other sources."""
    config = Node(node.root, Path(node.socket).parent).config
    config = dataclasses.replace(
        config, health=dataclasses.replace(config.health, check_timeout_s=0.2)
    )
    kept = FactCache(3600.0)
    before = {t for t in threading.enumerate() if t.name == "facts-nvml"}
    with serving(config, kept=kept) as agent:
        inject(node.estate, "nvml_hang", 6)
        agent.refresh_facts()
        fresh, value = kept.fresh("nvml")
        assert fresh and "timed out" in str(value)
        kept.forget()
        for _ in range(3):
            agent.refresh_facts()
        readers = [
            t
            for t in threading.enumerate()
            if t.name == "facts-nvml" and t.is_alive() and t not in before
        ]
        assert len(readers) == 1
        assert kept.fresh("kernel")[0] and not kept.fresh("nvml")[0]
        assert kept.still_reading("nvml")
    inject(node.estate, "clear")  # NVML answers again: the hung read ends
    for reader in readers:  # no thread left to the tests after this one (their counts)
        reader.join(15)
    assert not kept.still_reading("nvml")


def test_a_reset_waits_for_the_background_nvml_read_under_way(node: Node) -> None:
    """release_nvml while a background read holds NVML: the answer (after which the GPU
    reset runs) comes only once that read has let go, so the reset does not meet it."""
    kept = FactCache(3600.0)
    with serving(node.config, kept=kept) as agent:
        real_init = agent.nvml.nvmlInit
        reading, go_on = threading.Event(), threading.Event()

        def slow_init() -> None:
            reading.set()
            go_on.wait(10)
            real_init()

        agent.nvml.nvmlInit = slow_init
        reader = threading.Thread(target=agent.refresh_facts)
        reader.start()
        assert reading.wait(10)
        agent.nvml.nvmlInit = real_init
        answers: list[tuple[str, int | None, str]] = []
        releaser = threading.Thread(
            target=lambda: answers.append(client.release_nvml(node.socket, 300, 0.5, 20.0))
        )
        releaser.start()
        time.sleep(0.3)
        assert answers == []
        go_on.set()
        reader.join(10)
        releaser.join(10)
        assert answers[0][:2] == (Outcome.ANSWERED, 300)
        assert kept.fresh("nvml") == (False, None)


def test_the_gpus_processes_and_the_host_are_read_for_each_job_not_kept(node: Node) -> None:
    """The last job's process on GPU 2, seen by a background read, has ended by the next
    job's start: that job passes gpu.processes (a kept process list would have turned it
    away and drained the node); a stray process that appears after the background read
    fails it. The rest of NVML's facts stay kept throughout; the host's are never kept."""
    kept = FactCache(3600.0)
    env = {"SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}
    with serving(node.config, kept=kept) as agent:
        state = node.estate.load()
        state["gpus"][2]["processes"] = [4242]
        node.estate.save(state)
        agent.refresh_facts()
        state["gpus"][2]["processes"] = []
        node.estate.save(state)
        assert client.ask_agent(node.env(131, **env)).exit_status == 0
        assert ("gpu.processes", "OK") in [(c, s) for c, s, _ in node.verdict()]
        state["gpus"][5]["processes"] = [777]
        node.estate.save(state)
        assert client.ask_agent(node.env(132, **env)).exit_status == 1
        assert ("gpu.processes", "FAIL") in [(c, s) for c, s, _ in node.verdict()]
        assert kept.fresh("nvml")[0] and not kept.fresh("host")[0]


def test_a_busy_answer_sent_before_the_request_is_read_is_still_read(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent past max_concurrent answers busy without reading the request and closes; a
    Prolog that sends after that close gets EPIPE, and still reads the answer waiting for
    it: REFUSED busy, not FAILED (the CI once saw the decider's twin of this race)."""
    busy = protocol.encode_answer(error="busy")
    with answers_then_closes(node.socket, busy, client, monkeypatch):
        reply = client.ask_agent(node.env(141))
    assert (reply.outcome, reply.detail) == (Outcome.REFUSED, "agent refused: busy")
