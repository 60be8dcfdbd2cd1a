"""json_codec against the standard library's json: json.dumps's text for the same value and
settings, json.loads's values for the same text and hooks, and the same errors with the same
messages, on random input (the log lines and records it writes are read by json.loads, by
the Epilog and the decision, and by people; the records it reads are a user's bytes)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from enum import StrEnum
from pathlib import Path

import pytest

from slurm_triage.json_codec import dumps_with, loads_with

_ALPHABET = 'aZ09 _-.,:{}[]"\\/\n\t\x00\x1f\x7f\u00e9\u2028\ud800\U0001f600'

# The settings the per-job programs use (logs, evidence.record) and json's defaults.
SETTINGS: list[dict[str, object]] = [
    {},
    {"ensure_ascii": False, "separators": (",", ":"), "allow_nan": False},
    {"default": repr},
    {"ensure_ascii": False},
]


class Colour(StrEnum):
    RED = "red"


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(12)))


def _key(rng: random.Random) -> object:
    return rng.choice([_text(rng), rng.randrange(-5, 5), 1.5, True, None, Colour.RED])


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(10 if depth < 3 else 6)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return rng.randrange(-(2**70), 2**70)
    if kind == 2:
        return rng.choice(
            [0.0, -0.0, 1e300, 2.5e-310, rng.uniform(-1e6, 1e6), math.inf, -math.inf, math.nan]
        )
    if kind == 3:
        return rng.choice([True, False, None, Colour.RED])
    if kind == 4:
        return rng.randrange(10)
    if kind == 5:
        return rng.choice([object(), 1j, {1, 2}, b"x"])  # json cannot write these itself
    if kind in (6, 7):
        return {_key(rng): _value(rng, depth + 1) for _ in range(rng.randrange(5))}
    if kind == 8:
        return tuple(_value(rng, depth + 1) for _ in range(rng.randrange(4)))
    return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def _outcome(dumps: object, value: object) -> tuple[str, str]:
    try:
        return ("text", dumps(value))  # type: ignore[operator]
    except (TypeError, ValueError) as exc:
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("settings", SETTINGS, ids=repr)
def test_dumps_writes_what_json_codec_writes(settings: dict[str, object]) -> None:
    """5,000 random values: the same text, or the same error with the same message."""
    ours = dumps_with(**settings)  # type: ignore[arg-type]
    rng = random.Random(20)
    texts = 0
    for _ in range(5000):
        value = _value(rng)
        theirs = _outcome(lambda v: json.dumps(v, **settings), value)  # type: ignore[arg-type]
        assert _outcome(ours, value) == theirs, value
        texts += theirs[0] == "text"
    assert texts > 1000  # not only errors


def test_a_cycle_is_refused_each_time_as_json_refuses_it() -> None:
    """A value that holds itself is json's ValueError, and the next value is written."""
    dumps = dumps_with()
    cycle: list[object] = []
    cycle.append(cycle)
    for _ in range(2):
        with pytest.raises(ValueError, match="Circular reference detected"):
            dumps(cycle)
        assert dumps({"a": [1]}) == json.dumps({"a": [1]})


class Refused(Exception):
    """What the evidence record's hooks raise (EvidenceError is no ValueError either)."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise Refused(f"duplicate {key!r}")
        out[key] = value
    return out


def _no_constant(name: str) -> object:
    raise Refused(name)


# json's defaults, and the evidence record's hooks (evidence.record._loads).
HOOKS: list[dict[str, object]] = [
    {},
    {"object_pairs_hook": _no_duplicates, "parse_constant": _no_constant},
]


def _mangled(rng: random.Random, text: str) -> str:
    """`text`, or it with a piece cut, repeated, replaced or added: malformed JSON mostly."""
    cut = rng.randrange(len(text) + 1)
    noise = rng.choice(
        [
            '"',
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\\",
            "NaN",
            "\ufeff",
            "1e999",
            "x",
            " ",
            "\x00",
            "9" * 5000,
        ]
    )
    return rng.choice(
        [
            text,
            text[:cut],
            text[:cut] + noise + text[cut:],
            text[:cut] + text[cut + 1 :],
            text + text,
            rng.choice(["", " ", "\n", "\t\r "]) + text + rng.choice(["", " \n", "\f"]),
        ]
    )


def _read(loads: object, text: str) -> tuple[str, str]:
    try:
        return ("value", repr(loads(text)))  # type: ignore[operator]
    except Exception as exc:  # noqa: BLE001 (compared: type and message)
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("hooks", HOOKS, ids=["defaults", "record_hooks"])
def test_loads_reads_what_json_loads_reads(hooks: dict[str, object]) -> None:
    """8,000 random texts, most of them malformed: the same value, or the same error with
    the same message (json's own JSONDecodeError, the hook's exception)."""
    ours = loads_with(**hooks)  # type: ignore[arg-type]
    rng = random.Random(21)
    values = 0
    for _ in range(8000):
        value = _value(rng)
        text = json.dumps(value, default=repr, indent=rng.choice([None, 1]))
        text = _mangled(rng, text)
        theirs = _read(lambda t: json.loads(t, **hooks), text)  # type: ignore[arg-type]
        assert _read(ours, text) == theirs, text
        values += theirs[0] == "value"
    assert values > 2000  # not only errors


def test_loads_needs_no_json_for_good_text() -> None:
    """Text read whole imports no json; only an error does (to raise json's own)."""
    code = (
        "import sys\n"
        "from slurm_triage.json_codec import loads_with\n"
        "loads = loads_with()\n"
        "assert loads(' {\"a\": [1, 2.5, null, \"\\\\u00e9\"]} ') == {'a': [1, 2.5, None, 'é']}\n"
        "print('json' in sys.modules)\n"
        "try:\n    loads('{')\nexcept ValueError as exc:\n    print(type(exc).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert done.stdout.split() == ["False", "JSONDecodeError"], done.stderr
