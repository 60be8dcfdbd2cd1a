"""The node agent's wire format: what a request may carry (untrusted input to root), what
an answer must be for the Prolog to take it, and the client's defaults."""

from __future__ import annotations

import json

import pytest

from slurm_triage.agent import client, protocol
from slurm_triage.config import AgentConfig


def _line(body: object) -> bytes:
    return json.dumps(body).encode()


def test_a_prolog_environment_travels_with_only_the_listed_names() -> None:
    """The request carries the listed SLURM_* variables the Prolog has, as they are, and
    nothing else of its environment; the agent reads back exactly those."""
    env = {
        "SLURM_JOB_ID": "123",
        "SLURM_JOB_UID": "4242",
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_GPUS": "0,1,2,3",
        "PATH": "/usr/bin",
        "LD_PRELOAD": "/tmp/evil.so",
    }
    line = protocol.encode_request(env)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    request = protocol.parse_request(line.rstrip(b"\n"))
    assert request.kind is protocol.RequestKind.PROLOG
    assert request.env == {
        "SLURM_JOB_ID": "123",
        "SLURM_JOB_UID": "4242",
        "SLURMD_NODENAME": "node1",
        "SLURM_JOB_GPUS": "0,1,2,3",
    }


@pytest.mark.parametrize("user", ["alice", "alice@corp.example.com", "svc_ml-01", "Bob.Smith"])
def test_a_user_name_the_name_service_gives_is_accepted(user: str) -> None:
    """SSSD's fully qualified names (use_fully_qualified_names) carry an `@`: refusing them
    sent every Prolog of such a site's users to the cold screen."""
    line = _line({"v": 1, "kind": "prolog", "env": {"SLURM_JOB_ID": "1", "SLURM_JOB_USER": user}})
    assert protocol.parse_request(line).env["SLURM_JOB_USER"] == user


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLURM_JOB_ID", "12; rm -rf /"),
        ("SLURM_JOB_ID", ""),
        ("SLURM_JOB_ID", "1" * 11),
        ("SLURM_JOB_ID", "١٢٣"),  # digits, but not ASCII ones
        ("SLURM_JOB_UID", "-1"),
        ("SLURMD_NODENAME", "../../etc"),
        ("SLURMD_NODENAME", "node1/x"),
        ("SLURMD_NODENAME", ".hidden"),
        ("SLURMD_NODENAME", "n" * 65),
        ("SLURM_JOB_GPUS", "0,,1"),
        ("SLURM_JOB_GPUS", "GPU-8f3e"),
        ("SLURM_JOB_EXCLUSIVE", "NODE\nX"),
        ("SLURM_JOB_USER", "bob smith"),
        ("SLURM_JOB_USER", "@corp.example.com"),
        ("SLURM_JOB_USER", "alice@corp@evil"),
        ("SLURM_JOB_ID", 123),
        ("SLURM_JOB_ID", None),
        ("LD_PRELOAD", "/tmp/evil.so"),
        ("SLURM_TRIAGE_CONFIG", "/tmp/mine.toml"),
    ],
)
def test_a_variable_not_listed_or_of_the_wrong_form_refuses_the_request(
    name: str, value: object
) -> None:
    """One bad variable refuses the whole request (the Prolog then screens in-process)."""
    line = _line({"v": 1, "kind": "prolog", "env": {"SLURM_JOB_ID": "1", name: value}})
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_request(line)


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'"prolog"',
        _line({"v": 1, "kind": "prolog"}),
        _line({"v": 2, "kind": "prolog", "env": {}}),
        _line({"v": 1, "kind": "epilog", "env": {}}),
        _line({"v": 1, "kind": "prolog", "env": []}),
        _line({"v": 1, "kind": "prolog", "env": {}, "exec": "/bin/sh"}),
    ],
)
def test_a_malformed_request_is_refused_with_one_line(line: bytes) -> None:
    with pytest.raises(protocol.ProtocolError) as raised:
        protocol.parse_request(line)
    assert "\n" not in str(raised.value) and len(str(raised.value)) < 200


def test_an_answer_is_taken_only_as_exit_status_0_or_1() -> None:
    """The Prolog exits with what the agent says only for the screen's own verdicts: 0 and
    1; an error answer, another status or garbage makes it screen in-process."""
    assert protocol.parse_answer(protocol.encode_answer(exit_status=0).rstrip()) == 0
    assert protocol.parse_answer(protocol.encode_answer(exit_status=1).rstrip()) == 1
    with pytest.raises(protocol.Refused, match="busy"):
        protocol.parse_answer(protocol.encode_answer(error="busy").rstrip())
    for bad in (
        _line({"v": 1, "exit_status": 2}),
        _line({"v": 1, "exit_status": True}),
        _line({"v": 1, "exit_status": "0"}),
        _line({"v": 1, "exit_status": 0, "extra": 1}),
        _line({"exit_status": 0}),
        _line({"v": 1}),
        b"0",
        b"\x00garbage",
    ):
        with pytest.raises(protocol.ProtocolError) as raised:
            protocol.parse_answer(bad)
        assert not isinstance(raised.value, protocol.Refused)


def test_a_release_asks_for_whole_seconds_within_bounds() -> None:
    """release_nvml (the GPU reset's): 0 to MAX_RELEASE_S whole seconds, nothing else; its
    answer says the seconds let go."""
    request = protocol.parse_request(protocol.encode_release(300).rstrip())
    assert (request.kind, request.seconds, request.env) == (
        protocol.RequestKind.RELEASE_NVML,
        300,
        {},
    )
    for seconds in (-1, protocol.MAX_RELEASE_S + 1, 1.5, "300", True, None):
        line = _line({"v": 1, "kind": "release_nvml", "seconds": seconds})
        with pytest.raises(protocol.ProtocolError):
            protocol.parse_request(line)
    extra = _line({"v": 1, "kind": "release_nvml", "seconds": 1, "env": {}})
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_request(extra)
    assert protocol.parse_release_answer(protocol.encode_answer(released_s=300).rstrip()) == 300
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_release_answer(protocol.encode_answer(exit_status=0).rstrip())
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_answer(protocol.encode_answer(released_s=0).rstrip())


def test_an_error_answer_is_one_bounded_line() -> None:
    answer = protocol.encode_answer(error="a\nb\r\n" + "x" * 5000)
    assert answer.count(b"\n") == 1 and len(answer) < protocol.MAX_ANSWER_BYTES


def test_the_clients_defaults_are_the_configs() -> None:
    """The Prolog reads no config file, so its own copies of the [agent] defaults must be
    the config's."""
    defaults = AgentConfig()
    assert defaults.socket == protocol.DEFAULT_SOCKET
    assert defaults.connect_timeout_s == protocol.DEFAULT_CONNECT_TIMEOUT_S
    assert defaults.answer_timeout_s == protocol.DEFAULT_ANSWER_TIMEOUT_S


def test_the_client_takes_the_configs_override_variables() -> None:
    """The names the client reads are the config's own overrides of those keys, so one
    environment gives the agent and the Prolog the same values."""
    from slurm_triage.config import config_from_mapping

    env = {
        protocol.SOCKET_ENV: "/run/other/agent.sock",
        protocol.CONNECT_TIMEOUT_ENV: "0.25",
        protocol.ANSWER_TIMEOUT_ENV: "7",
    }
    agent = config_from_mapping({}, env).agent
    assert client.settings(env) == (agent.socket, agent.connect_timeout_s, agent.answer_timeout_s)
    assert client.settings({}) == ("/run/slurm-triage/agent.sock", 0.5, 20.0)
    for bad in ("soon", "0", "-1", "nan", "inf"):
        with pytest.raises(ValueError):
            client.settings({protocol.ANSWER_TIMEOUT_ENV: bad})
