"""The decider's wire format: what a request may carry (every byte may come from a hostile
job), what the answers must be for EpilogSlurmctld to take them, and the client's
defaults (the config's own)."""

from __future__ import annotations

import json

import pytest

from slurm_triage.config import DeciderConfig
from slurm_triage.decider import client, protocol
from slurm_triage.decider.protocol import DecidedHow, ProtocolError, Refused

ENDING = {
    "SLURM_JOB_ID": "123",
    "SLURM_JOB_UID": "4242",
    "SLURM_JOB_NODELIST": "gpu[001-128],login-7",
    "SLURM_JOB_EXIT_CODE2": "1:0",
    "SLURM_JOB_RESTART_COUNT": "2",
    "SLURM_JOB_START_TIME": "1767225600",
}


def _line(body: object) -> bytes:
    return json.dumps(body).encode()


def test_a_job_end_travels_with_only_the_variables_the_decision_reads() -> None:
    """What slurmctld gives EpilogSlurmctld beyond the decision's variables (the job's
    name, comment, work directory, anything the user set) is never sent."""
    env = {
        **ENDING,
        "SLURM_JOB_NAME": "$(reboot)",
        "SLURM_JOB_COMMENT": "x" * 5000,
        "SLURM_JOB_WORK_DIR": "/home/eve",
        "SLURM_JOB_USER": "eve",
        "PATH": "/usr/bin",
    }
    line = protocol.encode_request(env)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.parse_request(line.rstrip(b"\n")) == ENDING


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SLURM_JOB_ID", "12; rm -rf /"),
        ("SLURM_JOB_ID", ""),
        ("SLURM_JOB_ID", "1" * 11),
        ("SLURM_JOB_ID", "١٢٣"),  # digits, but not ASCII ones
        ("SLURM_JOB_ID", 123),
        ("SLURM_JOB_UID", "-1"),
        ("SLURM_JOB_NODELIST", "node1 node2"),
        ("SLURM_JOB_NODELIST", "../etc/passwd"),
        ("SLURM_JOB_NODELIST", "n[1-2]\n"),
        ("SLURM_JOB_NODELIST", "n" * (protocol.MAX_NODELIST_CHARS + 1)),
        ("SLURM_JOB_EXIT_CODE2", "1"),
        ("SLURM_JOB_EXIT_CODE2", "1:0:0"),
        ("SLURM_JOB_EXIT_CODE2", "-1:0"),
        ("SLURM_JOB_RESTART_COUNT", "9" * 6),
        ("SLURM_JOB_START_TIME", "1.5"),
        ("SLURM_TRIAGE_REQUEUE", "1"),  # never EpilogSlurmctld's: no submit environment
        ("SLURM_JOB_NAME", "train"),
        ("SLURM_JOB_COMMENT", "triage:requeue"),
        ("LD_PRELOAD", "/tmp/evil.so"),
        ("SLURM_TRIAGE_CONFIG", "/tmp/mine.toml"),
    ],
)
def test_a_variable_not_listed_or_of_the_wrong_form_refuses_the_request(
    name: str, value: object
) -> None:
    line = _line({"v": 1, "env": {**ENDING, name: value}})
    with pytest.raises(ProtocolError) as refused:
        protocol.parse_request(line)
    said = str(refused.value)
    assert "\n" not in said and (not str(value) or str(value)[:40] not in said)


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        b"\xff\xfe",
        b"[]",
        b'{"v": 2, "env": {"SLURM_JOB_ID": "1"}}',
        b'{"v": 1}',
        b'{"v": 1, "env": []}',
        b'{"v": 1, "env": {}}',  # no job
        b'{"v": 1, "env": {"SLURM_JOB_ID": "1"}, "kind": "prolog"}',
        b'{"v": 1, "env": {"SLURM_JOB_ID": "1", "SLURM_JOB_ID": "2; x"}}',
    ],
)
def test_what_is_not_a_request_of_this_protocol_is_refused(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        protocol.parse_request(line)


def test_the_answers_read_back_as_sent() -> None:
    """accepted carries the decider's wait; decided its outcome, cause, action and the
    thread's CPU seconds; detached nothing more; an error answer is Refused."""
    assert protocol.parse_accepted(protocol.encode_accepted(110.0).rstrip()) == 110.0
    final = protocol.parse_final(
        protocol.encode_decided(DecidedHow.DECIDED, "gpu_unavailable", "requeue", 0.0123)
    )
    assert (final.detached, final.how, final.cause, final.action, final.cpu_s) == (
        False,
        DecidedHow.DECIDED,
        "gpu_unavailable",
        "requeue",
        0.0123,
    )
    assert protocol.parse_final(protocol.encode_detached()).detached
    with pytest.raises(Refused, match="busy"):
        protocol.parse_accepted(protocol.encode_error("busy"))
    assert protocol.encode_error("two\nlines") == b'{"v": 1, "error": "two lines"}\n'


@pytest.mark.parametrize(
    "line",
    [
        b'{"v": 1, "accepted": {"wait_s": 0}}',
        b'{"v": 1, "accepted": {"wait_s": -5}}',
        b'{"v": 1, "accepted": {"wait_s": 1e9}}',
        b'{"v": 1, "accepted": {"wait_s": NaN}}',
        b'{"v": 1, "accepted": {"wait_s": true}}',
        b'{"v": 1, "accepted": true}',
        b'{"v": 1, "decided": {}}',  # a decision is no acceptance
        b'{"v": 1, "exit_status": 0}',  # the agent's answer
        b"garbage",
    ],
)
def test_only_an_acceptance_is_one(line: bytes) -> None:
    with pytest.raises(ProtocolError):
        protocol.parse_accepted(line)


def test_the_clients_defaults_are_the_configs() -> None:
    """EpilogSlurmctld reads no config file: its defaults must be DeciderConfig's, and its
    overrides the config's own SLURM_TRIAGE__DECIDER__* names."""
    defaults = DeciderConfig()
    assert (defaults.socket, defaults.connect_timeout_s, defaults.accept_timeout_s) == (
        protocol.DEFAULT_SOCKET,
        protocol.DEFAULT_CONNECT_TIMEOUT_S,
        protocol.DEFAULT_ACCEPT_TIMEOUT_S,
    )
    assert client.settings({}) == (protocol.DEFAULT_SOCKET, 0.5, 5.0)
    from slurm_triage.config import load_config

    env = {
        protocol.SOCKET_ENV: "/tmp/d.sock",
        protocol.CONNECT_TIMEOUT_ENV: "0.2",
        protocol.ACCEPT_TIMEOUT_ENV: "3",
    }
    config = load_config(None, env=env).decider
    assert client.settings(env) == (
        config.socket,
        config.connect_timeout_s,
        config.accept_timeout_s,
    )
    for bad in ("0", "-1", "nan", "inf", "soon"):
        with pytest.raises(ValueError):
            client.settings({protocol.ACCEPT_TIMEOUT_ENV: bad})
