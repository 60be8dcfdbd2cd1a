"""attribute(): each taxonomy rule, precedence between causes, and the Attribution contract."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_triage.attribution import Window, attribute, job_window
from slurm_triage.evidence import (
    CheckStatus,
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
    parse_record,
    record_to_json,
)
from slurm_triage.evidence.record import EvidenceRecord
from slurm_triage.taxonomy import Action, Cause, Domain

ROOT = Source.ROOT
FAILED = SlurmState(state=JobState.FAILED, source=ROOT)


def xid(node, number, time=None, source=ROOT):
    return KernelEvent(
        node=node,
        time=time,
        source=source,
        event=KernelEventKind.XID,
        xid=number,
        pci_bus_id="0000:3b:00",
        detail=f"NVRM: Xid (PCI:0000:3b:00): {number}, x",
    )


def hit(node, signature, cause, time=None):
    return LogHit(node=node, time=time, signature=signature, cause=cause, excerpt=signature)


def nccl_timeout(node, time=None):
    return hit(node, "torch.nccl_watchdog_timeout", Cause.NCCL_TIMEOUT, time)


def remote_error(node, time=None):
    return hit(node, "nccl.remote_error", Cause.NETWORK, time)


# Rule 1: hardware evidence beats its symptoms.
def test_rule1_ecc_xid_beats_illegal_memory_access_on_the_same_node():
    """An illegal memory access on a node with XID 48 is gpu_memory, root-backed."""
    facts = [
        FAILED,
        hit("n1", "cuda.illegal_address", Cause.CUDA_USER_ERROR),
        RootException(
            node="n1",
            exc_type="RuntimeError",
            message="CUDA error: an illegal memory access was encountered",
        ),
        xid("n1", 48),
    ]
    result = attribute(facts)
    assert (result.cause, result.nodes, result.root_backed) == (Cause.GPU_MEMORY, ("n1",), True)
    assert result.domain is Domain.HARDWARE and result.action is Action.REQUEUE_EXCLUDE
    assert result.confidence >= 0.95


@pytest.mark.parametrize(
    "symptom",
    [
        ProcessExit(node="n1", signal=11),
        hit("n1", "cuda.unknown_error", Cause.UNKNOWN),
        nccl_timeout("n1"),
    ],
)
def test_rule1_xid79_beats_segfaults_unknown_errors_and_timeouts(symptom):
    """SIGSEGV, 'CUDA error: unknown error' or a NCCL timeout with XID 79 is gpu_unavailable."""
    result = attribute([symptom, xid("n1", 79)])
    assert (result.cause, result.nodes) == (Cause.GPU_UNAVAILABLE, ("n1",))


def test_application_xids_are_not_node_faults():
    """XID 13/31 with an illegal access stay cuda_user_error; XID 45 alone means nothing."""
    facts = [hit("n1", "cuda.illegal_address", Cause.CUDA_USER_ERROR), xid("n1", 31), xid("n1", 43)]
    result = attribute(facts)
    assert (result.cause, result.root_backed) == (Cause.CUDA_USER_ERROR, False)
    assert attribute([ProcessExit(exit_code=1), xid("n1", 45)]).cause is Cause.UNKNOWN


def test_gsp_xid_beats_fallen_off_bus_and_xid79_beats_aer():
    """XID 119 before a lost GPU is gpu_driver; XID 79 with AER is still gpu_unavailable."""
    aer = KernelEvent(node="n1", source=ROOT, event=KernelEventKind.AER_UNCORRECTED)
    assert attribute([xid("n1", 79), xid("n1", 119)]).cause is Cause.GPU_DRIVER
    assert attribute([aer, xid("n1", 79)]).cause is Cause.GPU_UNAVAILABLE
    assert attribute([aer, ProcessExit(exit_code=1)]).cause is Cause.PCIE


def test_non_decisive_xid_explains_only_symptoms():
    """A warning-level XID (8) beats a NCCL timeout but not a real CUDA OOM."""
    assert attribute([nccl_timeout("n1"), xid("n2", 8)]).cause is Cause.GPU_DRIVER
    oom = hit("n1", "torch.cuda_oom", Cause.CUDA_OOM)
    assert attribute([oom, xid("n1", 8)]).cause is Cause.CUDA_OOM


# Rule 2: a root cause beats the cascade.
def test_rule2_one_nodes_xid_beats_every_nodes_nccl_timeout():
    """NCCL timeouts on all nodes and XID 79 on one: only that node is blamed."""
    facts = [nccl_timeout(n) for n in ("n1", "n2", "n3", "n4")] + [xid("n3", 79)]
    result = attribute(facts)
    assert (result.cause, result.nodes) == (Cause.GPU_UNAVAILABLE, ("n3",))
    assert "symptoms on n1 (nccl_timeout)" in result.reason


def test_rule2_oom_on_one_rank_beats_nccl_errors_elsewhere():
    """A CUDA OOM on n2 with remote errors on n1 and n3 is cuda_oom on n2 alone."""
    facts = [
        remote_error("n1"),
        hit("n2", "torch.cuda_oom", Cause.CUDA_OOM),
        remote_error("n3"),
        nccl_timeout("n3"),
    ]
    result = attribute(facts)
    assert (result.cause, result.nodes, result.action) == (Cause.CUDA_OOM, ("n2",), Action.NONE)


def test_rule2_earliest_real_error_wins_when_times_are_known():
    """Two nodes with real errors: the earlier one is the cause, the later one is not blamed."""
    late = RootException(node="n1", time=1000.0, exc_type="TypeError", message="x")
    early = RootException(node="n2", time=990.0, exc_type="IndexError", message="y")
    result = attribute([late, early])
    assert (result.cause, result.nodes) == (Cause.USER_CODE, ("n2",))


def test_rule2_simultaneous_same_error_blames_every_node():
    """The same error on every node at the same moment (no times) blames all of them."""
    facts = [RootException(node=n, exc_type="AssertionError") for n in ("n2", "n1")]
    assert attribute(facts).nodes == ("n1", "n2")


def test_only_symptoms_everywhere_is_the_symptom_with_no_node_blamed():
    """Remote errors on all nodes and nothing else: network, nobody blamed."""
    result = attribute([remote_error("n1"), remote_error("n2"), nccl_timeout("n2")])
    assert (result.cause, result.nodes, result.action) == (Cause.NETWORK, (), Action.REQUEUE)


# Rule 3: a user's own claim never drains a node.
def test_rule3_user_collected_hardware_evidence_is_not_root_backed():
    """The same XID from the user's wrapper blames the node but does not back a drain."""
    user = NvmlFact(node="n1", source=Source.USER, condition=NvmlCondition.XID_EVENT, value=48)
    result = attribute([user, ProcessExit(exit_code=1)])
    assert (result.cause, result.nodes, result.root_backed) == (Cause.GPU_MEMORY, ("n1",), False)
    root = NvmlFact(node="n1", source=ROOT, condition=NvmlCondition.XID_EVENT, value=48)
    assert attribute([root]).root_backed


def test_rule3_a_forged_root_record_is_downgraded_by_the_reader():
    """A record that claims root, read with trusted_source=USER, can no longer drain."""
    record = EvidenceRecord("1", "n1", "0", ROOT, (xid("n1", 79),))
    facts = parse_record(record_to_json(record), trusted_source=Source.USER).facts
    result = attribute(facts)
    assert (result.cause, result.root_backed) == (Cause.GPU_UNAVAILABLE, False)


def test_rule3_user_log_naming_hardware_is_not_root_backed():
    """'uncorrectable ECC error encountered' in the job's own log: excluded, not drainable."""
    result = attribute([hit("n1", "cuda.ecc_uncorrectable", Cause.GPU_MEMORY)])
    assert (result.cause, result.nodes, result.root_backed) == (Cause.GPU_MEMORY, ("n1",), False)


# Rule 4: success is success.
def test_rule4_completed_with_exit_0_whatever_the_log_says():
    """COMPLETED + exit 0 is completed even with OOM lines and an XID in the window."""
    facts = [
        SlurmState(state=JobState.COMPLETED),
        ProcessExit(exit_code=0),
        hit("n1", "torch.cuda_oom", Cause.CUDA_OOM),
        xid("n1", 79),
    ]
    result = attribute(facts)
    assert (result.cause, result.confidence, result.nodes) == (Cause.COMPLETED, 1.0, ())


def test_rule4_completed_state_with_a_failed_exit_is_not_success():
    """A non-zero exit contradicts COMPLETED: the evidence decides instead."""
    facts = [
        SlurmState(state=JobState.COMPLETED),
        ProcessExit(exit_code=1),
        hit("n1", "torch.cuda_oom", Cause.CUDA_OOM),
    ]
    assert attribute(facts).cause is Cause.CUDA_OOM


# Rule 5: the window.
def test_rule5_evidence_outside_the_window_is_ignored_and_untimed_evidence_kept():
    """An XID 20 minutes before the end is dropped; one 5 minutes before, or untimed, counts."""
    end = 10_000.0
    window = job_window(end)
    assert (window.start, window.end) == (end - 600, end + 300)
    user_error = RootException(node="n1", exc_type="ValueError")
    assert attribute([user_error, xid("n1", 79, end - 1200)], window=window).cause is (
        Cause.USER_CODE
    )
    assert attribute([user_error, xid("n1", 79, end - 300)], window=window).cause is (
        Cause.GPU_UNAVAILABLE
    )
    assert attribute([user_error, xid("n1", 79, end + 400)], window=window).cause is (
        Cause.USER_CODE
    )
    assert attribute([user_error, xid("n1", 79)], window=window).cause is Cause.GPU_UNAVAILABLE


def test_window_rejects_inverted_bounds():
    """A window that ends before it starts is a programming error."""
    with pytest.raises(ValueError):
        Window(10.0, 5.0)


# The scheduler, hang and health checks.
def test_slurm_decisions_beat_their_aftermath_but_not_root_hardware():
    """TIMEOUT beats the NCCL errors SIGTERM leaves; a failed root health check beats CANCELLED."""
    timeout = SlurmState(state=JobState.TIMEOUT, source=ROOT)
    assert attribute([timeout, remote_error("n1"), ProcessExit(signal=15)]).cause is Cause.TIMEOUT
    check = HealthCheck(node="n2", source=ROOT, check="node.sanity", status=CheckStatus.FAIL)
    cancelled = SlurmState(state=JobState.CANCELLED, by_uid=0, source=ROOT)
    result = attribute([cancelled, check])
    assert (result.cause, result.nodes, result.root_backed) == (Cause.HEALTH_CHECK, ("n2",), True)


def test_timeout_attribution_keeps_its_condition():
    """A timeout's action is requeue, conditional on the job being resumable."""
    result = attribute([SlurmState(state=JobState.TIMEOUT)])
    assert result.to_dict()["action_condition"] == "if_resumable"


def test_health_checks_that_did_not_fail_say_nothing():
    """WARN, OK and UNKNOWN checks are not failures."""
    for status in (CheckStatus.OK, CheckStatus.WARN, CheckStatus.UNKNOWN):
        check = HealthCheck(node="n1", source=ROOT, check="gpu.thermal", status=status)
        assert attribute([check, ProcessExit(exit_code=1)]).cause is Cause.UNKNOWN


def test_wrapper_stall_is_a_hang_over_the_timeouts_it_causes():
    """The wrapper's no-progress kill is a hang, not the NCCL timeouts that follow."""
    facts = [Stall(node="n1", idle_s=1800), nccl_timeout("n1"), ProcessExit(node="n1", signal=9)]
    assert attribute(facts).cause is Cause.HANG


def test_signals_alone():
    """SIGSEGV is a segfault; SIGABRT after NCCL watchdog lines is the NCCL timeout."""
    assert attribute([ProcessExit(exit_code=139)]).cause is Cause.SEGFAULT
    assert attribute([ProcessExit(exit_code=134), nccl_timeout(None)]).cause is Cause.NCCL_TIMEOUT
    assert attribute([ProcessExit(exit_code=134)]).cause is Cause.SEGFAULT


def test_no_recognisable_evidence_is_unknown_with_low_confidence():
    """A non-zero exit and nothing else, or nothing at all, is unknown."""
    result = attribute([FAILED, ProcessExit(exit_code=1)])
    assert (result.cause, result.action, result.confidence) == (Cause.UNKNOWN, Action.REQUEUE, 0.2)
    assert "exit code 1" in result.reason
    assert attribute([]).confidence < 0.2


def test_to_dict_is_json_with_the_contract_keys():
    """to_dict has cause, domain, action, nodes, confidence, evidence and serialises to JSON."""
    out = json.loads(json.dumps(attribute([xid("n1", 74), nccl_timeout("n2")]).to_dict()))
    assert {
        "cause",
        "domain",
        "action",
        "nodes",
        "confidence",
        "evidence",
        "root_backed",
        "reason",
    } <= set(out)
    assert out["cause"] == "gpu_nvlink" and out["nodes"] == ["n1"]
    assert out["evidence"][0]["kind"] == "kernel_event"


_NODES = st.sampled_from(["n1", "n2", "n3", None])
_TIMES = st.none() | st.floats(0, 2000)
_FACTS = st.one_of(
    st.builds(
        lambda n, t, x, s: xid(n, x, t, s),
        _NODES,
        _TIMES,
        st.sampled_from([8, 13, 31, 43, 45, 48, 62, 74, 79, 94, 119, 154, 999]),
        st.sampled_from(list(Source)),
    ),
    st.builds(
        lambda n, t, c: hit(n, "x.custom", c, t), _NODES, _TIMES, st.sampled_from(list(Cause))
    ),
    st.builds(lambda n, t: nccl_timeout(n, t), _NODES, _TIMES),
    st.builds(
        lambda code, sig: ProcessExit(exit_code=code, signal=sig),
        st.none() | st.integers(-64, 255),
        st.none() | st.integers(1, 64),
    ),
    st.builds(lambda s: SlurmState(state=s), st.sampled_from(list(JobState))),
    st.builds(
        lambda n, e: RootException(node=n, exc_type=e),
        _NODES,
        st.sampled_from(["KeyError", "torch.OutOfMemoryError", "ChildFailedError", "Empty"]),
    ),
)


@settings(max_examples=200, deadline=None, database=None)
@given(st.lists(_FACTS, max_size=12), st.randoms())
def test_attribute_is_total_bounded_and_order_independent(facts, rng):
    """Any facts give one attribution with confidence in [0, 1] and sorted nodes; shuffling the
    facts does not change the cause or the nodes."""
    result = attribute(facts)
    assert 0.0 <= result.confidence <= 1.0
    assert list(result.nodes) == sorted(result.nodes)
    shuffled = list(facts)
    rng.shuffle(shuffled)
    again = attribute(shuffled)
    assert (again.cause, again.nodes) == (result.cause, result.nodes)


def test_one_tier_scale_for_signatures_and_findings() -> None:
    """A signature's tier and a finding's tier are the same scale: a user-named hardware
    fault (INFRA) sits between a job's real error and Slurm's own decision."""
    from slurm_triage.attribution.findings import findings_for
    from slurm_triage.attribution.signatures import BY_NAME
    from slurm_triage.attribution.tiers import Tier

    assert BY_NAME["slurm.time_limit"].role is Tier.SCHEDULER
    assert Tier.ERROR < Tier.INFRA < Tier.HANG < Tier.SCHEDULER < Tier.ROOT_HW
    stall = findings_for(Stall(node="n1", idle_s=900.0), 0)
    assert [f.tier for f in stall] == [Tier.HANG]
