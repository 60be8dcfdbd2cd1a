"""Root reading what a job wrote: symlinks, FIFOs, huge files, other jobs and owners refused."""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path

import pytest

from slurm_triage.evidence import (
    EvidenceRecord,
    KernelEvent,
    KernelEventKind,
    Source,
    record_to_json,
    store,
)
from tests.unit.conftest import JOB_USER

USER = JOB_USER


def record(job: str = "77", node: str = "node2", source: Source = Source.ROOT) -> bytes:
    fact = KernelEvent(
        node=node,
        time=time.time(),
        source=source,
        event=KernelEventKind.XID,
        xid=79,
        pci_bus_id="0000:5d:00",
        detail="fell off the bus",
    )
    return record_to_json(
        EvidenceRecord(job_id=job, node=node, step="0", collected_by=source, facts=(fact,))
    )


def _write(path: Path, data: bytes, owner: int = USER) -> Path:
    path.write_bytes(data)
    os.chown(path, owner, owner)
    return path


def test_valid_user_record_is_read_as_user_evidence(job_dir: Path) -> None:
    """A well-formed record of the job's user is read, every fact downgraded to USER."""
    _write(job_dir / "node2.0.json", record())
    result = store.read_user_records(str(job_dir.parent), 77, USER)
    (rec,) = result.records
    assert rec.collected_by is Source.USER and all(f.source is Source.USER for f in rec.facts)
    assert result.rejected == ()


def test_symlink_to_shadow_is_refused(job_dir: Path) -> None:
    """A record that is a symlink (to /etc/shadow) is refused without being followed."""
    (job_dir / "node2.0.json").symlink_to("/etc/shadow")
    result = store.read_user_records(str(job_dir.parent), 77, USER)
    assert result.records == () and "symlink" in result.rejected[0]


def test_fifo_does_not_hang(job_dir: Path) -> None:
    """A FIFO named like a record is refused at once (opened non-blocking)."""
    os.mkfifo(job_dir / "node2.0.json")
    os.chown(job_dir / "node2.0.json", USER, USER)
    started = time.monotonic()
    result = store.read_user_records(str(job_dir.parent), 77, USER)
    assert time.monotonic() - started < 1 and "not a regular file" in result.rejected[0]


def test_oversized_record_is_not_read_past_the_cap(job_dir: Path) -> None:
    """A 1 GB sparse record is refused from its size, without reading it."""
    path = job_dir / "node2.0.json"
    with open(path, "wb") as fh:
        fh.truncate(1 << 30)
    os.chown(path, USER, USER)
    started = time.monotonic()
    result = store.read_user_records(str(job_dir.parent), 77, USER)
    assert time.monotonic() - started < 1 and "cap" in result.rejected[0]


@pytest.mark.parametrize(
    ("name", "data", "expect"),
    [
        ("node2.0.json", record(job="78"), "names job 78"),
        ("node2.0.json", record(node="node3"), "names node node3"),
        ("node2.0.json", b"{not json", "node2.0.json"),
    ],
)
def test_records_claiming_other_jobs_or_nodes_are_ignored(
    job_dir: Path, name: str, data: bytes, expect: str
) -> None:
    """A record naming another job or node, or invalid JSON, is ignored with a reason."""
    _write(job_dir / name, data)
    result = store.read_user_records(str(job_dir.parent), 77, USER)
    assert result.records == () and expect in result.rejected[0]


def test_record_owned_by_someone_else_is_ignored(job_dir: Path) -> None:
    """A file another user planted in the job's directory is not the job's evidence."""
    _write(job_dir / "node2.0.json", record(), owner=USER + 1)
    result = store.read_user_records(str(job_dir.parent), 77, USER)
    assert result.records == () and "owned by uid" in result.rejected[0]


def test_job_dir_owned_by_another_user_is_ignored(tmp_path: Path) -> None:
    """A job directory pre-created by another user (to plant records) is not trusted."""
    d = tmp_path / "77"
    d.mkdir()
    os.chown(d, USER + 1, USER + 1)
    _write(d / "node2.0.json", record(), owner=USER + 1)
    result = store.read_user_records(str(tmp_path), 77, USER)
    assert result.records == () and "owned by uid" in result.rejected[0]


def test_root_records_round_trip_and_stay_root(tmp_path: Path) -> None:
    """Root's record is written atomically in the root area and read back as ROOT evidence."""
    path = store.write_root_record(str(tmp_path), 77, "node2", record())
    assert path.endswith("_root/77/node2.json") and os.stat(path).st_uid == 0
    (rec,) = store.read_root_records(str(tmp_path), 77, ["node2", "node3"]).records
    assert rec.collected_by is Source.ROOT
    assert store.root_record_present(str(tmp_path), 77, "node2")
    assert not [p for p in Path(path).parent.iterdir() if p.name.startswith(".")]


def test_user_squatted_root_area_is_refused(tmp_path: Path) -> None:
    """If a user created `_root` first, root neither writes there nor trusts it."""
    area = tmp_path / "_root"
    area.mkdir()
    os.chown(area, USER, USER)
    with pytest.raises(store.UnsafeEvidence, match="owned by uid"):
        store.write_root_record(str(tmp_path), 77, "node2", record())
    (area / "77").mkdir()
    _write(area / "77" / "node2.json", record(), owner=0)
    result = store.read_root_records(str(tmp_path), 77, ["node2"])
    assert result.records == () and "owned by uid" in result.rejected[0]


def test_user_record_claiming_root_in_root_area_name_is_still_user(job_dir: Path) -> None:
    """A user's record that says collected_by root is read as USER evidence all the same."""
    _write(job_dir / "node2.0.json", record(source=Source.ROOT))
    (rec,) = store.read_user_records(str(job_dir.parent), 77, USER).records
    assert all(f.source is Source.USER for f in rec.facts)


def test_output_tail_is_read_safely(tmp_path: Path) -> None:
    """The job's output file is read from its tail, refusing symlinks and foreign owners."""
    out = _write(tmp_path / "slurm-77.out", b"x" * 5000 + b"\nKeyError: 'lr'\n")
    assert store.read_user_tail(str(out), USER, 100).endswith(b"KeyError: 'lr'\n")
    (tmp_path / "link.out").symlink_to(out)
    with pytest.raises(store.UnsafeEvidence, match="symlink"):
        store.read_user_tail(str(tmp_path / "link.out"), USER, 100)
    with pytest.raises(store.UnsafeEvidence, match="owned by uid"):
        store.read_user_tail(str(out), USER + 1, 100)


def test_records_of_earlier_runs_and_other_nodes_are_skipped(job_dir: Path) -> None:
    """A requeued job reuses its directory: records older than this run's start, or of nodes
    not in this run, are not this run's evidence."""
    old = _write(job_dir / "node2.0.json", record())
    os.utime(old, (time.time() - 600, time.time() - 600))
    _write(job_dir / "node3.0.json", record(node="node3"))
    result = store.read_user_records(
        str(job_dir.parent), 77, USER, nodes=("node1", "node2"), newer_than=time.time() - 60
    )
    assert result.records == () and result.rejected == ()
    assert len(store.read_user_records(str(job_dir.parent), 77, USER).records) == 2


def test_device_node_and_records_blaming_every_node_drain_nothing(job_dir: Path) -> None:
    """A device node posing as a record is refused; a user record claiming XIDs on every
    node of the cluster is read as the user's evidence only (it can never drain)."""
    os.mknod(job_dir / "node1.0.json", 0o644 | stat.S_IFCHR, os.makedev(1, 3))
    os.chown(job_dir / "node1.0.json", USER, USER)
    facts = tuple(
        KernelEvent(
            node=f"node{i}",
            time=time.time(),
            source=Source.ROOT,
            event=KernelEventKind.XID,
            xid=79,
            pci_bus_id="0000:5d:00",
        )
        for i in range(1, 2001)
    )
    data = record_to_json(
        EvidenceRecord(
            job_id="77", node="node2", step="0", collected_by=Source.ROOT, facts=facts[:900]
        )
    )
    _write(job_dir / "node2.0.json", data)
    result = store.read_user_records(str(job_dir.parent), 77, USER)
    assert any("not a regular file" in r for r in result.rejected)
    (rec,) = result.records
    from slurm_triage.attribution import attribute

    verdict = attribute(rec.facts)
    assert not verdict.root_backed


def test_a_record_with_a_huge_number_is_dropped_alone(job_dir: Path, tmp_path: Path) -> None:
    """A user record with `"time": 10**400` is rejected on its own; the root record of the
    same job (XID 79) is still read, so the real fault is acted on."""
    huge = re.sub(rb'"time":[0-9.e+]+', b'"time":1' + b"0" * 400, record(source=Source.USER))
    assert b"0" * 400 in huge
    _write(job_dir / "node2.0.json", huge)
    users = store.read_user_records(str(tmp_path), 77, USER)
    assert users.records == () and len(users.rejected) == 1
    root_dir = tmp_path / store.ROOT_AREA / "77"
    root_dir.mkdir(parents=True)
    (root_dir / "node2.json").write_bytes(record())
    roots = store.read_root_records(str(tmp_path), 77, ("node2",))
    assert [f.xid for r in roots.records for f in r.facts] == [79]
