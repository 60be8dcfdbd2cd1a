"""Hostlist expressions: Slurm's compressed node lists, expanded and compressed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slurm_triage.hostlist import HostlistError, compress, contains, expand


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ("node[1-3]", ["node1", "node2", "node3"]),
        ("node[1-2,7],login", ["node1", "node2", "node7", "login"]),
        ("gpu-a[01-03]", ["gpu-a01", "gpu-a02", "gpu-a03"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("(null)", []),
        ("", []),
        ("node1,node1", ["node1"]),
    ],
)
def test_expand(expression: str, names: list[str]) -> None:
    """Expressions expand to names in order, ranges zero-padded as written."""
    assert expand(expression) == names


@pytest.mark.parametrize("bad", ["node[1-", "node]1[", "node[a-b]", "node[5-1]", "n[0-99999999]"])
def test_bad_expressions_raise(bad: str) -> None:
    """Malformed or absurdly large expressions raise HostlistError."""
    with pytest.raises(HostlistError):
        expand(bad)


def test_compress_groups_ranges() -> None:
    """Names compress to the usual bracket form, keeping zero padding apart."""
    assert compress(["node3", "node1", "node2", "node7"]) == "node[1-3,7]"
    assert compress(["gpu01", "gpu02", "login"]) == "login,gpu[01-02]"
    assert compress(["node2"]) == "node2"
    assert compress([]) == ""


@given(
    st.sets(st.integers(min_value=0, max_value=500), max_size=60),
    st.sampled_from(["node", "gpu-a", "r1n"]),
)
def test_compress_then_expand_is_identity(numbers: set[int], prefix: str) -> None:
    """Any set of names survives compress followed by expand."""
    names = {f"{prefix}{n}" for n in numbers}
    assert set(expand(compress(names))) == names


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["node", "gpu-a", "r1n", "x"]),
            st.integers(min_value=0, max_value=120),
            st.integers(min_value=0, max_value=40),
            st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
    st.sampled_from(["node", "gpu-a", "r1n", "x", "nodex"]),
    st.integers(min_value=0, max_value=200),
    st.booleans(),
)
def test_contains_agrees_with_expand(
    parts: list[tuple[str, int, int, bool]], prefix: str, number: int, padded: bool
) -> None:
    """contains(expr, name) is `name in expand(expr)` for bracketed, padded and plain
    parts, without expanding them."""
    texts = []
    for head, low, span, pad in parts:
        width = 3 if pad else 0
        low_text, high_text = str(low).zfill(width), str(low + span).zfill(width)
        texts.append(f"{head}[{low_text}-{high_text}]" if span else f"{head}{low_text}")
    expression = ",".join(texts)
    name = f"{prefix}{str(number).zfill(3) if padded else number}"
    assert contains(expression, name) == (name in expand(expression))


def test_contains_of_nested_and_empty_lists() -> None:
    """Two brackets in one part fall back to expansion; empty lists contain nothing."""
    assert contains("r[1-2]n[1-2]", "r2n1") and not contains("r[1-2]n[1-2]", "r3n1")
    assert not contains("None assigned", "node1") and not contains("", "node1")
    assert contains("node[1-1024]", "node1000") and not contains("node[1-1024]", "node01")
