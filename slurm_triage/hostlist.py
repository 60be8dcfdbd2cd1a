"""Slurm hostlist expressions (`node[1-3,7],gpu-a[01-02]`) expanded and compressed, purely."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

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


# No Slurm node or DNS name is longer: `iter_names` takes longer ones for malformed text.
MAX_NAME_CHARS = 255


def iter_names(expression: str) -> Iterator[str]:
    """The host names of `expression` one at a time, in `expand`'s order but with its
    duplicates, for text a user wrote (a job's log), where the caller stops when its budget
    is spent: `n[1-999999]` then costs what `n[1-16]` does, since ranges are only checked
    and counted here, never expanded. The whole text is checked first, so malformed text
    raises HostlistError as `expand` would (before any name), and so does text whose names
    could be longer than MAX_NAME_CHARS (`a[1]a[1]...`: each bracket adds to every name's
    cost). Unlike `expand` it has no MAX_EXPANDED on the number of names."""
    expression = (expression or "").strip()
    if expression in ("", "(null)", "None"):
        return iter(())
    patterns = [_parse_pattern(part, expression) for part in _split_top_level(expression)]
    return (name for pattern in patterns for name in _odometer(*pattern))


_Ranges = list[tuple[int, int, int]]  # (low, high, zero-padded width) of one bracket


def _parse_pattern(pattern: str, expression: str) -> tuple[list[str], list[_Ranges]]:
    """`a[1-2]b[3]c` -> (["a", "b", "c"], [ranges of 1-2, ranges of 3]), checked as
    `_expand_one` and `_expand_ranges` check it, without making a name."""
    texts: list[str] = []
    brackets: list[_Ranges] = []
    longest = 0
    while (start := pattern.find("[")) >= 0:
        end = pattern.find("]", start)
        if end < 0:
            raise HostlistError(f"unbalanced '[' in {expression!r}")
        ranges = _parse_ranges(pattern[start + 1 : end], expression)
        texts.append(pattern[:start])
        brackets.append(ranges)
        longest += start + max(max(len(str(high)), width) for _, high, width in ranges)
        pattern = pattern[end + 1 :]
    texts.append(pattern)
    if longest + len(pattern) > MAX_NAME_CHARS:
        raise HostlistError(f"names longer than {MAX_NAME_CHARS} characters in {expression!r}")
    return texts, brackets


def _parse_ranges(body: str, expression: str) -> _Ranges:
    ranges: _Ranges = []
    count = 0
    for item in body.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise HostlistError(f"bad range {item!r} in {expression!r}")
        low_text, high_text = match.group(1), match.group(2) or match.group(1)
        if max(len(low_text), len(high_text)) > MAX_NAME_CHARS:  # int() refuses 4300 digits
            raise HostlistError(f"names longer than {MAX_NAME_CHARS} characters in {expression!r}")
        low, high = int(low_text), int(high_text)
        if high < low or count + high - low + 1 > MAX_EXPANDED:
            raise HostlistError(f"bad or too large range {item!r} in {expression!r}")
        count += high - low + 1
        ranges.append((low, high, len(low_text) if low_text.startswith("0") else 0))
    return ranges


def _values(ranges: _Ranges) -> Iterator[str]:
    return (str(n).zfill(width) for low, high, width in ranges for n in range(low, high + 1))


def _odometer(texts: list[str], brackets: list[_Ranges]) -> Iterator[str]:
    """Every name of one parsed pattern, the last bracket turning fastest (`_expand_one`'s
    order), made one at a time."""
    turning = [_values(ranges) for ranges in brackets]
    parts = [texts[0]]
    for text, values in zip(texts[1:], turning, strict=True):
        parts += (next(values), text)
    while True:
        yield "".join(parts)
        k = len(brackets) - 1
        while k >= 0:
            value = next(turning[k], None)
            if value is not None:
                parts[2 * k + 1] = value
                break
            turning[k] = _values(brackets[k])  # starts over, and the bracket before it turns
            parts[2 * k + 1] = next(turning[k])
            k -= 1
        else:
            return


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
