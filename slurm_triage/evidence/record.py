"""The evidence record: our versioned JSON format for facts that cross processes and users.

The wrapper (as the job's user) and the epilog (as root) each write one record per node; the
decision step reads them all. Root reads files that users wrote, so the parser is strict:
a size cap before parsing, no duplicate keys, no unknown keys, exact types (a bool is not an
int), capped string lengths and fact counts, finite numbers only. Anything wrong raises
`EvidenceError` with one line naming the first problem; nothing else escapes.

    {"schema": "slurm-triage/evidence", "version": 1, "job_id": "123", "node": "node01",
     "step": "batch", "collected_by": "user", "facts": [{"kind": "process_exit", ...}]}
"""

from __future__ import annotations

import math
from enum import StrEnum

from slurm_triage.errors import TriageError
from slurm_triage.evidence.facts import (
    FACT_TYPES,
    CheckStatus,
    Fact,
    JobState,
    KernelEventKind,
    NvmlCondition,
    Source,
)
from slurm_triage.frozen import MISSING, FieldInfo, Frozen, fields, replace
from slurm_triage.json_codec import dumps_with, loads_with
from slurm_triage.taxonomy import Cause

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCHEMA = "slurm-triage/evidence"
VERSION = 1
MAX_RECORD_BYTES = 1 << 20
MAX_FACTS = 1000
MAX_NAME_CHARS = 256
MAX_TEXT_CHARS = 4096
MAX_SAFE_INTEGER = 2**53  # the largest integer every JSON reader keeps exactly
# Free-text fields get the long cap; every other string is a name or an id.
_TEXT_FIELDS = frozenset({"excerpt", "message", "detail", "reason"})
_ENUMS: dict[str, type[StrEnum]] = {
    "Source": Source,
    "JobState": JobState,
    "KernelEventKind": KernelEventKind,
    "NvmlCondition": NvmlCondition,
    "CheckStatus": CheckStatus,
    "Cause": Cause,
}
_RECORD_KEYS = ("schema", "version", "job_id", "node", "step", "collected_by", "facts")


class EvidenceError(TriageError, ValueError):
    """An evidence record is malformed; the message names the first problem in one line."""


class EvidenceRecord(Frozen):
    """One node's evidence for one job, as collected by the user's wrapper or by root."""

    job_id: str
    node: str | None
    step: str | None
    collected_by: Source
    facts: tuple[Fact, ...]


def fact_to_dict(fact: Fact) -> dict[str, Any]:
    """A fact as a JSON-ready dict: `kind` first, then its fields (enums as their values)."""
    out: dict[str, Any] = {"kind": fact.KIND}
    for field in fields(fact):
        value = getattr(fact, field.name)
        out[field.name] = value.value if isinstance(value, StrEnum) else value
    return out


def record_to_json(record: EvidenceRecord) -> bytes:
    """Serialise a record to compact UTF-8 JSON that `parse_record` reads back unchanged."""
    doc = {
        "schema": SCHEMA,
        "version": VERSION,
        "job_id": record.job_id,
        "node": record.node,
        "step": record.step,
        "collected_by": record.collected_by.value,
        "facts": [fact_to_dict(f) for f in record.facts],
    }
    return _dumps(doc).encode()


# json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False), without
# importing json: the wrapper writes a record on every rank, and reads none (issue 20).
_dumps = dumps_with(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def parse_record(
    data: bytes,
    *,
    max_bytes: int = MAX_RECORD_BYTES,
    max_facts: int = MAX_FACTS,
    trusted_source: Source | None = None,
) -> EvidenceRecord:
    """Parse and validate one record; EvidenceError on anything wrong.

    `trusted_source=Source.USER` is for root reading a file a user could have written: every
    fact is downgraded to USER whatever the file claims, so it can never drain a node.
    """
    if not isinstance(data, bytes | bytearray):
        raise EvidenceError("evidence record must be bytes")
    if len(data) > max_bytes:
        raise EvidenceError(f"evidence record is {len(data)} bytes, over the {max_bytes} cap")
    doc = _load_json(bytes(data))
    try:
        record = _record(doc, max_facts)
    except EvidenceError:
        raise
    except (ArithmeticError, ValueError, TypeError, RecursionError) as exc:
        # Whatever else user bytes can provoke drops this record only, never the decision.
        raise EvidenceError(f"evidence record rejected: {_one_line(exc)}") from None
    if trusted_source is Source.USER:
        facts = tuple(replace(f, source=Source.USER) for f in record.facts)
        record = replace(record, collected_by=Source.USER, facts=facts)
    return record


def _load_json(data: bytes) -> Any:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EvidenceError(f"evidence record is not UTF-8 (byte {exc.start})") from None
    try:
        return _loads(text)
    except RecursionError:
        raise EvidenceError("evidence record is nested too deeply") from None
    except EvidenceError:
        raise
    except ValueError as exc:  # JSONDecodeError, and int literals over Python's digit limit
        raise EvidenceError(f"evidence record is not valid JSON: {_one_line(exc)}") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise EvidenceError(f"duplicate key {_show(key)} in evidence record")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise EvidenceError(f"{name} is not allowed in an evidence record")


# json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant), which
# imports json only to raise its error: the wrapper reads back each record it writes.
_loads = loads_with(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)


def _record(doc: Any, max_facts: int) -> EvidenceRecord:
    if not isinstance(doc, dict):
        raise EvidenceError("evidence record must be a JSON object")
    # Schema and version first: a record of another version may well have other keys.
    if doc.get("schema") != SCHEMA:
        raise EvidenceError(f"schema must be {SCHEMA!r}, got {_show(doc.get('schema'))}")
    version = doc.get("version")
    if type(version) is not int or version != VERSION:
        raise EvidenceError(f"unsupported version {_show(version)} (this reads {VERSION})")
    _check_keys(doc, _RECORD_KEYS, _RECORD_KEYS, "evidence record")
    job_id = doc["job_id"]
    if type(job_id) is int and job_id >= 0:
        job_id = str(job_id)
    job_id = _string(job_id, "job_id", MAX_NAME_CHARS)
    if not job_id:
        raise EvidenceError("job_id must not be empty")
    node = _optional(doc["node"], "node", lambda v, w: _string(v, w, MAX_NAME_CHARS))
    step = _optional(doc["step"], "step", lambda v, w: _string(v, w, MAX_NAME_CHARS))
    collected_by = _enum(doc["collected_by"], Source, "collected_by")
    facts = doc["facts"]
    if not isinstance(facts, list):
        raise EvidenceError("facts must be a list")
    if len(facts) > max_facts:
        raise EvidenceError(f"{len(facts)} facts, over the {max_facts} cap")
    parsed = tuple(_fact(item, i, node, collected_by) for i, item in enumerate(facts))
    return EvidenceRecord(job_id, node, step, collected_by, parsed)


def _fact(item: Any, index: int, node: str | None, collected_by: Source) -> Fact:
    where = f"facts[{index}]"
    if not isinstance(item, dict):
        raise EvidenceError(f"{where} must be an object")
    kind = item.get("kind")
    cls = FACT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise EvidenceError(
            f"{where}: unknown fact kind {_show(kind)} (valid: {', '.join(sorted(FACT_TYPES))})"
        )
    declared = {f.name: f for f in fields(cls)}
    required = [n for n, f in declared.items() if _is_required(f)]
    _check_keys(item, ("kind", *declared), required, where)
    values: dict[str, Any] = {}
    for name, value in item.items():
        if name != "kind":
            values[name] = _convert(value, str(declared[name].type), f"{where}.{name}")
    values.setdefault("node", node)
    values.setdefault("source", collected_by)
    if collected_by is Source.USER and values["source"] is Source.ROOT:
        raise EvidenceError(f"{where} claims source 'root' in a record collected by 'user'")
    return cls(**values)


def _is_required(field: FieldInfo) -> bool:
    return field.default is MISSING and field.default_factory is MISSING


def _convert(value: Any, annotation: str, where: str) -> Any:
    base, _, none = annotation.partition(" | ")
    if none == "None" and value is None:
        return None
    if base == "str":
        cap = MAX_TEXT_CHARS if where.rsplit(".", 1)[-1] in _TEXT_FIELDS else MAX_NAME_CHARS
        return _string(value, where, cap)
    if base == "int":
        if type(value) is not int or abs(value) > MAX_SAFE_INTEGER:
            raise EvidenceError(f"{where} must be an integer, got {_show(value)}")
        return value
    if base == "float":
        return _number(value, where)
    if base == "bool":
        if type(value) is not bool:
            raise EvidenceError(f"{where} must be true or false, got {_show(value)}")
        return value
    return _enum(value, _ENUMS[base], where)


def _number(value: Any, where: str) -> float:
    # An int is range-checked before anything converts it: math.isfinite(10**400) raises
    # OverflowError, which would escape the one error this parser promises.
    if type(value) is int and not 0 <= value <= MAX_SAFE_INTEGER:
        raise EvidenceError(f"{where} must be a finite number >= 0, got {_show(value)}")
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise EvidenceError(f"{where} must be a finite number >= 0, got {_show(value)}")
    return float(value)


def _string(value: Any, where: str, cap: int) -> str:
    if type(value) is not str:
        raise EvidenceError(f"{where} must be a string, got {_show(value)}")
    if len(value) > cap:
        raise EvidenceError(f"{where} is {len(value)} characters, over the {cap} cap")
    return value


def _enum(value: Any, enum: type[StrEnum], where: str) -> Any:
    if type(value) is str:
        try:
            return enum(value)
        except ValueError:
            pass
    valid = ", ".join(m.value for m in enum)
    raise EvidenceError(f"{where} must be one of {valid}; got {_show(value)}")


def _optional(value: Any, where: str, convert: Any) -> Any:
    return None if value is None else convert(value, where)


def _check_keys(obj: dict[str, Any], allowed: Any, required: Any, where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise EvidenceError(f"{where}: unknown key {_show(key)}")
    for key in required:
        if key not in obj:
            raise EvidenceError(f"{where}: missing key {key!r}")


def _show(value: Any) -> str:
    """A short, one-line, printable rendering of untrusted input for an error message."""
    text = ascii(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]
