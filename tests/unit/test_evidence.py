"""Evidence facts and the versioned record: round trips, strict parsing, property tests."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import HealthCheck as HypothesisHealthCheck
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_triage.errors import TriageError
from slurm_triage.evidence import (
    CheckStatus,
    EvidenceError,
    EvidenceRecord,
    HealthCheck,
    JobState,
    KernelEvent,
    KernelEventKind,
    LogHit,
    NvmlCondition,
    NvmlFact,
    ProcessExit,
    RootException,
    SlurmState,
    Source,
    Stall,
    parse_job_state,
    parse_record,
    parse_signal,
    record_to_json,
)
from slurm_triage.taxonomy import Cause

ALL_KINDS = (
    ProcessExit(node="n1", time=1.5, exit_code=134, signal=None, core_dumped=True, runtime_s=9.0),
    SlurmState(state=JobState.CANCELLED, by_uid=0, reason="admin"),
    KernelEvent(
        node="n2",
        source=Source.ROOT,
        event=KernelEventKind.XID,
        xid=79,
        pci_bus_id="0000:3b:00",
        detail="NVRM: Xid ...",
    ),
    NvmlFact(
        node="n2",
        source=Source.ROOT,
        condition=NvmlCondition.ROW_REMAP_PENDING,
        gpu="0000:3b:00",
        value=1,
    ),
    HealthCheck(
        node="n3",
        source=Source.ROOT,
        check="ib.port_state",
        status=CheckStatus.FAIL,
        reason="mlx5_0 down",
        cause=Cause.INFINIBAND,
    ),
    LogHit(
        node="n1", signature="torch.cuda_oom", cause=Cause.CUDA_OOM, excerpt="CUDA out", count=3
    ),
    RootException(exc_type="KeyError", message="'x'", rank=3, exit_code=1),
    Stall(node="n1", idle_s=1800.0),
)


def _record(facts=ALL_KINDS, collected_by=Source.ROOT, node="n1") -> EvidenceRecord:
    return EvidenceRecord("123", node, "batch", collected_by, tuple(facts))


def _doc(**overrides):
    doc = json.loads(record_to_json(_record()))
    doc.update(overrides)
    return json.dumps(doc).encode()


def test_every_fact_kind_round_trips():
    """Serialise then parse gives back the same record, every fact kind included."""
    record = _record()
    assert parse_record(record_to_json(record)) == record


def test_missing_node_and_source_default_to_the_records():
    """A fact without node or source takes the record's node and collector."""
    data = _doc(collected_by="user", facts=[{"kind": "stall", "idle_s": 5}])
    fact = parse_record(data).facts[0]
    assert (fact.node, fact.source, fact) == ("n1", Source.USER, Stall(node="n1", idle_s=5.0))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"schema": 1, "schema": 2}', "duplicate key"),
        (b"[" * 100_000, "nested too deeply"),
        (_doc(schema="someone-else/evidence"), "schema must be"),
        (_doc(version=2), "unsupported version"),
        (_doc(version=True), "unsupported version"),
        (_doc(collected_by="admin"), "collected_by must be one of"),
        (_doc(extra=1), "unknown key 'extra'"),
        (_doc(facts={}), "facts must be a list"),
        (_doc(facts=[{"kind": "rumour"}]), "unknown fact kind 'rumour'"),
        (_doc(facts=[{"kind": "stall"}]), "missing key 'idle_s'"),
        (_doc(facts=[{"kind": "process_exit", "exit_code": True}]), "must be an integer"),
        (_doc(facts=[{"kind": "process_exit", "exit_code": 1.5}]), "must be an integer"),
        (_doc(facts=[{"kind": "stall", "idle_s": -1}]), "finite number >= 0"),
        (_doc(facts=[{"kind": "stall", "idle_s": 1, "time": "now"}]), "finite number"),
        (_doc(facts=[{"kind": "slurm_state", "state": "DONE"}]), "must be one of"),
        (
            _doc(facts=[{"kind": "log_signature", "signature": "x" * 300, "cause": "unknown"}]),
            "over the 256 cap",
        ),
        (_doc(facts=[{"kind": "stall", "idle_s": 1, "bogus": 1}]), "unknown key 'bogus'"),
        (b'{"schema": NaN}', "NaN is not allowed"),
    ],
)
def test_bad_records_fail_with_one_clear_line(data, message):
    """Each kind of malformed record raises EvidenceError naming the problem, on one line."""
    with pytest.raises(EvidenceError, match=message) as caught:
        parse_record(data)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, TriageError)


def test_size_and_count_caps():
    """Records over the byte cap or the fact cap are refused before use."""
    data = record_to_json(_record())
    with pytest.raises(EvidenceError, match="over the 100 cap"):
        parse_record(data, max_bytes=100)
    with pytest.raises(EvidenceError, match="over the 3 cap"):
        parse_record(data, max_facts=3)


def test_user_record_cannot_claim_root_facts():
    """A record collected by the user may not contain facts that say root collected them."""
    data = record_to_json(_record(collected_by=Source.USER))
    with pytest.raises(EvidenceError, match="claims source 'root'"):
        parse_record(data)


def test_trusted_source_user_downgrades_every_fact():
    """Root reading a user-writable file forces every fact to USER, whatever the file says."""
    record = parse_record(record_to_json(_record()), trusted_source=Source.USER)
    assert record.collected_by is Source.USER
    assert {f.source for f in record.facts} == {Source.USER}


def test_parse_job_state_accepts_long_names_codes_and_cancelled_by():
    """Long names, squeue codes, and 'CANCELLED by UID' parse; nonsense is a ValueError."""
    assert parse_job_state("node_fail") == (JobState.NODE_FAIL, None)
    assert parse_job_state("CA") == (JobState.CANCELLED, None)
    assert parse_job_state("CANCELLED by 1000") == (JobState.CANCELLED, 1000)
    for bad in ("DONE", "", "CANCELLED by root", "UNKNOWN"):
        with pytest.raises(ValueError, match="unknown Slurm job state"):
            parse_job_state(bad)


def test_parse_signal_names_and_numbers():
    """SIGSEGV, SEGV, segv and 11 are the same; unknown names and 0 are errors."""
    assert {parse_signal(s) for s in ("SIGSEGV", "SEGV", "segv", "11")} == {11}
    for bad in ("SIGFOO", "0", "65", "-1"):
        with pytest.raises(ValueError):
            parse_signal(bad)


def test_death_signal_reads_all_three_conventions():
    """An explicit signal, a shell's 128+N and subprocess's -N all give the signal."""
    assert ProcessExit(signal=9).death_signal() == 9
    assert ProcessExit(exit_code=139).death_signal() == 11
    assert ProcessExit(exit_code=-6).death_signal() == 6
    assert ProcessExit(exit_code=1).death_signal() is None
    assert not ProcessExit(exit_code=0).failed()


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=2048))
def test_arbitrary_bytes_raise_only_evidence_error(data):
    """Whatever the bytes, the parser returns a record or raises EvidenceError, nothing else."""
    try:
        parse_record(data)
    except EvidenceError as exc:
        assert "\n" not in str(exc)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=20,
)
_VALID = json.loads(record_to_json(_record()))


@settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HypothesisHealthCheck.too_slow],
)
@given(st.data())
def test_mutated_valid_records_raise_only_evidence_error(data):
    """Replacing any one value of a valid record with arbitrary JSON never escapes the parser."""
    doc = json.loads(json.dumps(_VALID))
    fact_index = data.draw(st.integers(0, len(doc["facts"]) - 1))
    target = data.draw(st.sampled_from(["record", "fact"]))
    holder = doc if target == "record" else doc["facts"][fact_index]
    key = data.draw(st.sampled_from(sorted(holder)))
    holder[key] = data.draw(_JSON)
    try:
        record = parse_record(json.dumps(doc).encode())
    except EvidenceError:
        return
    assert record.job_id and isinstance(record.facts, tuple)


@settings(max_examples=200, deadline=None, database=None)
@given(st.data())
def test_byte_flipped_valid_records_raise_only_evidence_error(data):
    """Corrupting bytes of a valid record (flip, cut, insert) is a clean EvidenceError at worst."""
    raw = bytearray(record_to_json(_record()))
    for _ in range(data.draw(st.integers(1, 5))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            raw[pos] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del raw[pos : pos + data.draw(st.integers(1, 40))]
        else:
            raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        if not raw:
            raw = bytearray(b"{")
    with contextlib.suppress(EvidenceError):
        parse_record(bytes(raw))


@pytest.mark.parametrize("field", ["time", "exit_code", "signal", "runtime_s"])
@pytest.mark.parametrize("number", ["1" + "0" * 400, "-" + "1" + "0" * 400, "1e400"])
def test_huge_numbers_in_any_field_are_an_evidence_error(field, number):
    """`10**400` overflowed float() outside the parser's error path (OverflowError): one
    number in a user's record could kill the decision that had claimed the job."""
    data = (
        '{"schema": "slurm-triage/evidence", "version": 1, "job_id": "1", "node": "n1", '
        '"step": "0", "collected_by": "user", "facts": [{"kind": "process_exit", '
        f'"exit_code": 1, "{field}": {number}}}]}}'
    ).encode()
    with pytest.raises(EvidenceError):
        parse_record(data)


def test_an_empty_job_id_is_refused():
    """A record must say which job it is about (found by the mutation fuzz test)."""
    doc = json.loads(json.dumps(_VALID))
    doc["job_id"] = ""
    with pytest.raises(EvidenceError, match="job_id must not be empty"):
        parse_record(json.dumps(doc).encode())


def test_the_door_and_the_evidence_share_one_job_state() -> None:
    """One JobState: what the door reads is what a SlurmState fact holds, so the decision
    passes Slurm's state through without turning it into text and back."""
    from slurm_triage import slurm

    assert JobState is slurm.JobState
    assert parse_job_state("CG") == (JobState.COMPLETING, None)
    assert JobState.parse("CANCELLED by 0") is JobState.CANCELLED
    assert JobState.LAUNCH_FAILED.shown_base is JobState.LAUNCH_FAILED
