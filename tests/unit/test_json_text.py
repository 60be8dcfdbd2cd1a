"""unix_socket.json_text against the standard library's json: the same text out and the
same values in, on random messages and on malformed lines (the agent's clients and servers
on either side of one socket may use either)."""

from __future__ import annotations

import json
import math
import random

import pytest

from slurm_triage.unix_socket import json_text

_ALPHABET = 'aZ09 _-.,:{}[]"\\/\n\t\x00\x1f\x7f\u00e9\u2028\ud800\U0001f600'


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(12)))


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return _text(rng)
    if kind == 1:
        return rng.randrange(-(2**70), 2**70)
    if kind == 2:
        return rng.choice([0.0, -0.0, 1e300, 2.5e-310, rng.uniform(-1e6, 1e6), math.inf])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind in (4, 5):
        return rng.randrange(10)
    if kind in (6, 7):
        return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randrange(5))}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(5))]


def test_dumps_writes_what_json_dumps_writes() -> None:
    rng = random.Random(20)
    for _ in range(3000):
        value = _value(rng)
        assert json_text.dumps(value) == json.dumps(value)


def test_loads_reads_what_json_loads_reads() -> None:
    rng = random.Random(21)
    for _ in range(3000):
        text = json.dumps(_value(rng), indent=rng.choice([None, 1]))
        padded = rng.choice(["", " ", "\n", "\t\r "]) + text + rng.choice(["", " \n"])
        assert repr(json_text.loads(padded)) == repr(json.loads(padded))


@pytest.mark.parametrize(
    "line",
    ["", " ", "{", '{"v": 1} x', '{"v" 1}', "nul", '"\x01"', "01", "[1,]", '{"a":1,}', "\ufeff{}"],
)
def test_what_json_refuses_it_refuses(line: str) -> None:
    with pytest.raises(ValueError):
        json.loads(line)
    with pytest.raises(ValueError):
        json_text.loads(line)


def test_what_json_cannot_write_it_cannot_write() -> None:
    for value in ({1j: 1}, object(), {"a": {1, 2}}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            json_text.dumps(value)
