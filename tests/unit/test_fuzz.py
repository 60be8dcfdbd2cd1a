"""Property tests: every parser that takes outside bytes raises only our own clear errors,
and stays bounded on huge or pathological input."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slurm_triage.attribution import decode_tail, parse_kernel_lines, read_tail, scan_lines
from slurm_triage.config import ConfigError, config_from_mapping, read_toml
from slurm_triage.health_checks.mounts import parse_mountinfo
from slurm_triage.hostlist import HostlistError, expand
from slurm_triage.slurm.errors import JobNotFound, SlurmOutputError
from slurm_triage.slurm.parse import (
    parse_key_values,
    parse_sacct_job,
    parse_scontrol_job,
    parse_scontrol_job_json,
    parse_scontrol_nodes_json,
    parse_sinfo_json,
)
from tests.conftest import FIXTURES

FAST = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SCONTROL = (FIXTURES / "slurm" / "scontrol_show_job_running.txt").read_text()
SACCT = (FIXTURES / "slurm" / "sacct_failed_exit5.txt").read_text()
SINFO = (FIXTURES / "slurm" / "sinfo.json").read_text()
SCONTROL_25 = (FIXTURES / "slurm" / "25.11" / "scontrol_show_job_pending_user_text.txt").read_text()
JOB_JSON_25 = (
    FIXTURES / "slurm" / "25.11" / "scontrol_json_show_job_running_forged.json"
).read_text()
NODES_25 = (FIXTURES / "slurm" / "25.11" / "scontrol_show_node_draining_allocated.json").read_text()


def _mutate(text: str, data: st.DataObject) -> str:
    pos = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(max_size=40))
    cut = data.draw(st.integers(0, 30))
    return text[:pos] + junk + text[pos + cut :]


@FAST
@given(st.data())
def test_scontrol_parser_only_raises_ours(data: st.DataObject) -> None:
    """Mutated `scontrol show job` output parses or raises SlurmOutputError."""
    with contextlib.suppress(SlurmOutputError):
        parse_scontrol_job(_mutate(SCONTROL, data), 2)


@FAST
@given(st.text(max_size=500))
def test_key_values_never_raise(text: str) -> None:
    """Any text splits into key/value pairs without raising."""
    assert isinstance(parse_key_values(text), dict)


@FAST
@given(st.data())
def test_sacct_parser_only_raises_ours(data: st.DataObject) -> None:
    """Mutated sacct output parses or raises SlurmOutputError."""
    with contextlib.suppress(SlurmOutputError):
        parse_sacct_job(_mutate(SACCT, data), 3)


@FAST
@given(st.data())
def test_sinfo_parser_only_raises_ours(data: st.DataObject) -> None:
    """Mutated sinfo --json parses or raises SlurmOutputError."""
    with contextlib.suppress(SlurmOutputError):
        parse_sinfo_json(_mutate(SINFO, data))


@FAST
@given(st.data())
def test_25_11_parsers_only_raise_ours(data: st.DataObject) -> None:
    """Mutated 25.11 `scontrol --json show node`, `scontrol show job` and `scontrol --json
    show job` output parses or raises SlurmOutputError."""
    with contextlib.suppress(SlurmOutputError):
        parse_scontrol_nodes_json(_mutate(NODES_25, data))
    with contextlib.suppress(SlurmOutputError):
        parse_scontrol_job(_mutate(SCONTROL_25, data), 10)
    # JobNotFound too: a mutated job id is another job.
    with contextlib.suppress(SlurmOutputError, JobNotFound):
        parse_scontrol_job_json(_mutate(JOB_JSON_25, data), 3)


@FAST
@given(st.text(alphabet="abn0123456789[]-,.x ", max_size=60))
def test_hostlist_only_raises_ours(text: str) -> None:
    """Any hostlist expression expands or raises HostlistError."""
    with contextlib.suppress(HostlistError):
        expand(text)


@FAST
@given(st.binary(max_size=2000))
def test_config_files_only_raise_ours(data: bytes) -> None:
    """Arbitrary bytes as a config file load or raise ConfigError."""
    path = Path("/tmp/slurm-triage-fuzz.toml")
    path.write_bytes(data)
    with contextlib.suppress(ConfigError):
        config_from_mapping(read_toml(path))


@FAST
@given(
    st.dictionaries(
        st.sampled_from(["slurm", "health", "policy", "x"]),
        st.dictionaries(
            st.text(max_size=12),
            st.one_of(
                st.integers(),
                st.text(max_size=8),
                st.booleans(),
                st.floats(allow_nan=True),
                st.lists(st.text(max_size=5), max_size=3),
            ),
            max_size=4,
        ),
        max_size=3,
    )
)
def test_config_mappings_only_raise_ours(data: dict) -> None:
    """Any TOML-shaped mapping builds a Config or raises ConfigError."""
    with contextlib.suppress(ConfigError):
        config_from_mapping(data)


@FAST
@given(st.lists(st.text(max_size=200), max_size=30))
def test_kernel_and_log_lines_never_raise(lines: list[str]) -> None:
    """Arbitrary kernel-log and job-log lines are scanned without raising."""
    parse_kernel_lines(lines, node="n1")
    scan_lines(lines, node="n1")
    parse_mountinfo("\n".join(lines))


def test_huge_inputs_stay_bounded(tmp_path: Path) -> None:
    """100 MB of scontrol output, sinfo garbage and a single 100 MB log line are refused or
    read from the tail quickly."""
    huge = "JobId=1 " + "x" * (100 << 20)
    started = time.monotonic()
    with contextlib.suppress(SlurmOutputError):
        parse_scontrol_job(huge, 1)
    with contextlib.suppress(SlurmOutputError):
        parse_sinfo_json("[" * (1 << 20))
    log = tmp_path / "one-line.log"
    with open(log, "wb") as fh:
        fh.write(b"A" * (100 << 20))
    data, whole = read_tail(log, 4 << 20)
    lines = decode_tail(data, whole_file=whole)
    scan_lines(lines, node="n1")
    assert len(data) == 4 << 20 and not whole
    assert time.monotonic() - started < 30
