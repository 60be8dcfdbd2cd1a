"""Slurm hostlist expressions (`node[1-3,7],gpu-a[01-02]`) expanded and compressed, purely."""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_EXPANDED = 1_000_000
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
_TAIL_NUMBER = re.compile(r"^(.*?)(\d+)$")


class HostlistError(ValueError):
    """A hostlist expression is malformed or absurdly large."""


def _split_top_level(expression: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in expression:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {expression!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise HostlistError(f"unbalanced '[' in {expression!r}")
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _expand_ranges(body: str, expression: str) -> list[str]:
    values: list[str] = []
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise HostlistError(f"bad range {item!r} in {expression!r}")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        low, high = int(low_text), int(high_text)
        if high < low or len(values) + high - low + 1 > MAX_EXPANDED:
            raise HostlistError(f"bad or too large range {item!r} in {expression!r}")
        width = len(low_text) if low_text.startswith("0") else 0
        values.extend(str(n).zfill(width) for n in range(low, high + 1))
    return values


def _expand_one(pattern: str, expression: str) -> list[str]:
    start = pattern.find("[")
    if start < 0:
        return [pattern]
    end = pattern.find("]", start)
    if end < 0:
        raise HostlistError(f"unbalanced '[' in {expression!r}")
    head, body, rest = pattern[:start], pattern[start + 1 : end], pattern[end + 1 :]
    tails = _expand_one(rest, expression)
    return [f"{head}{value}{tail}" for value in _expand_ranges(body, expression) for tail in tails]


def expand(expression: str) -> list[str]:
    """All host names of a hostlist expression, in order, without duplicates."""
    expression = (expression or "").strip()
    if expression in ("", "(null)", "None"):
        return []
    names: dict[str, None] = {}
    for part in _split_top_level(expression):
        for name in _expand_one(part, expression):
            names[name] = None
            if len(names) > MAX_EXPANDED:
                raise HostlistError(f"hostlist {expression[:60]!r} expands to too many names")
    return list(names)


def contains(expression: str, name: str) -> bool:
    """Whether `name` is one of the hosts of `expression`, the same answer as
    `name in expand(expression)` without expanding a bracket of one range (node[1-1024]
    is a comparison of numbers, not 1024 strings)."""
    expression = (expression or "").strip()
    if expression in ("", "(null)", "None"):
        return False
    for part in _split_top_level(expression):
        start = part.find("[")
        if start < 0:
            if part == name:
                return True
            continue
        end = part.find("]", start)
        if end < 0:
            raise HostlistError(f"unbalanced '[' in {expression!r}")
        head, body, tail = part[:start], part[start + 1 : end], part[end + 1 :]
        if "[" in tail:
            if name in _expand_one(part, expression):
                return True
            continue
        if not (name.startswith(head) and name.endswith(tail)):
            continue
        middle = name[len(head) : len(name) - len(tail)]
        if middle.isdigit() and middle.isascii() and _in_ranges(middle, body, expression):
            return True
    return False


def _in_ranges(value: str, body: str, expression: str) -> bool:
    """Whether the digits `value` are one of the values _expand_ranges(body) gives."""
    number = int(value)
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise HostlistError(f"bad range {item!r} in {expression!r}")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        if int(high_text) < int(low_text):
            raise HostlistError(f"bad or too large range {item!r} in {expression!r}")
        width = len(low_text) if low_text.startswith("0") else 0
        if int(low_text) <= number <= int(high_text) and value == str(number).zfill(width):
            return True
    return False


def compress(names: Iterable[str]) -> str:
    """The shortest usual hostlist for names: `node[1-3,7]`; input order does not matter."""
    groups: dict[tuple[str, int], set[int]] = {}
    plain: set[str] = set()
    for name in names:
        match = _TAIL_NUMBER.match(name)
        if not match:
            plain.add(name)
            continue
        digits = match.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        groups.setdefault((match.group(1), width), set()).add(int(digits))
    parts = sorted(plain)
    for (prefix, width), numbers in sorted(groups.items()):
        ordered = sorted(numbers)
        if len(ordered) == 1:
            parts.append(f"{prefix}{str(ordered[0]).zfill(width)}")
            continue
        parts.append(f"{prefix}[{','.join(_ranges(ordered, width))}]")
    return ",".join(parts)


def _ranges(numbers: list[int], width: int) -> list[str]:
    runs: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        low, high = str(start).zfill(width), str(prev).zfill(width)
        runs.append(low if start == prev else f"{low}-{high}")
        if n is not None:
            start = prev = n
    return runs
