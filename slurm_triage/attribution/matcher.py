"""Match the signature table against a log tail fast: literal needles first, regexes second.

Python's `re` has no multi-pattern automaton: one alternation of ~60 patterns over a 4 MB
tail takes a second. Each signature's regex is instead reduced to literal "needles" (the
longest plain-text run of each top-level alternative, e.g. `CUDA out of memory. Tried to
allocate`); `str.find` finds those at C speed, and only the lines holding one are given to
the regexes. The needles are derived from the regexes themselves, so the table stays the
one place to edit; a regex with an alternative too vague to yield a needle fails at import.
"""

from __future__ import annotations

import re

from slurm_triage.attribution.needles_table import NEEDLES
from slurm_triage.attribution.signatures import (
    EXCEPTION_TYPES,
    SIGNATURES,
    Signature,
)
from slurm_triage.attribution.tiers import Tier
from slurm_triage.taxonomy import Cause

MIN_NEEDLE = 4
_LITERAL_ESCAPES = set(".()[]{}*+?|^$\\/-'\"` :,=<>#")


def needles_of(regex: str) -> tuple[str, ...]:
    """One literal that any match must contain, per top-level alternative of `regex`."""
    out = []
    for alternative in _split_top(regex):
        runs = _literal_runs(alternative)
        best = max(runs, key=len, default="")
        if len(best) < MIN_NEEDLE:
            raise ValueError(f"no literal of {MIN_NEEDLE}+ characters in {alternative!r}")
        out.append(best)
    return tuple(out)


def _split_top(regex: str) -> list[str]:
    parts, depth, start, i = [], 0, 0, 0
    while i < len(regex):
        char = regex[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(regex, i)
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            parts.append(regex[start:i])
            start = i + 1
        i += 1
    parts.append(regex[start:])
    return parts


def _class_end(regex: str, i: int) -> int:
    j = i + 1
    while j < len(regex) and regex[j] != "]":
        j += 2 if regex[j] == "\\" else 1
    return j


# One piece of a regex: plain characters, an escape (two characters), a class (ending at its
# first unescaped `]`), a repetition count (or a lone brace), an operator.
_PIECE = re.compile(
    r"(?P<text>[^\\\[{().^$+*?|]+)"
    r"|\\(?P<escaped>.?)"
    r"|(?P<klass>\[(?:\\.?|[^\]\\])*\]?)"
    r"|(?P<count>\{[^}]*\}|\{)"
    r"|(?P<operator>[().^$+*?|])",
    re.DOTALL,
)


def _literal_runs(alternative: str) -> list[str]:
    """Plain-text runs outside groups and classes; an optional character ends its run.

    Read a piece at a time (a run of plain characters at once), not a character at a time:
    the needles are derived at every importer's start (issue 20)."""
    runs, run, depth, size = [], "", 0, len(alternative)
    for piece in _PIECE.finditer(alternative):
        end = piece.end()
        after = alternative[end] if end < size else ""
        optional = bool(after) and after in "?*{"
        kind = piece.lastgroup
        if kind == "text":
            if depth:  # inside a group: the match need not contain it
                runs.append(run)
                run = ""
                continue
            text = piece.group()
            # An optional last character is not in every match, and ends the run.
            run += text[:-1] if optional else text
            if optional or after == "+":
                runs.append(run)
                run = ""
            continue
        literal = ""
        if kind == "escaped":
            escaped = piece.group("escaped")
            literal = escaped if escaped in _LITERAL_ESCAPES else ""
        elif kind == "operator":
            depth += {"(": 1, ")": -1}.get(piece.group(), 0)
        if depth or optional:
            literal = ""
        if literal:
            run += literal
        if not literal or after == "+":
            runs.append(run)
            run = ""
    runs.append(run)
    return runs


def needles_table_text() -> str:
    """The text of `needles_table.py`: every signature regex with its needles."""
    rows = "".join(f"    {s.regex!r}: {needles_of(s.regex)!r},\n" for s in SIGNATURES)
    return f"{_TABLE_DOC}\n# ruff: noqa: E501\n# fmt: off\nNEEDLES = {{\n{rows}}}\n"


_TABLE_DOC = '''"""Each signature regex's needles as matcher.needles_of derives them, so that a
start does not derive them again (~2 ms of every classify and decision, issue 20). Generated:
`python -m slurm_triage.attribution.matcher > slurm_triage/attribution/needles_table.py`.
A regex not found here (the signature table edited since) has its needles derived at
import, so a stale table is slower, never wrong; tests/unit/test_logscan.py fails until it
is written again."""
'''

# A table written for these regexes, else derived (and a vague regex fails here, at import).
_NEEDLES: dict[str, tuple[str, ...]] = {
    s.name: NEEDLES.get(s.regex) or needles_of(s.regex) for s in SIGNATURES
}
_ALL_NEEDLES = tuple(sorted({n for ns in _NEEDLES.values() for n in ns}))


def match_line(line: str) -> list[tuple[Signature, re.Match[str]]]:
    """Every signature that matches `line`, in table order."""
    out = []
    for sig in SIGNATURES:
        if any(n in line for n in _NEEDLES[sig.name]):
            found = sig.pattern.search(line)
            if found is not None:
                out.append((sig, found))
    return out


def scan_text(text: str) -> list[tuple[int, Signature, re.Match[str]]]:
    """(line start offset, signature, match) for every match in `text`, in line order."""
    lines: dict[int, set[str]] = {}
    for needle in _ALL_NEEDLES:
        at = text.find(needle)
        while at >= 0:
            lines.setdefault(text.rfind("\n", 0, at) + 1, set()).add(needle)
            end = text.find("\n", at)
            at = -1 if end < 0 else text.find(needle, end)
    out = []
    for start in sorted(lines):
        end = text.find("\n", start)
        line = text[start : len(text) if end < 0 else end]
        for sig in SIGNATURES:
            if not lines[start].isdisjoint(_NEEDLES[sig.name]):
                found = sig.pattern.search(line)
                if found is not None:
                    out.append((start, sig, found))
    return out


# A program that cannot load its own code or libraries fails wherever it runs: the user's
# environment, never the node's (a requeue would fail the same way).
_ENVIRONMENT_TYPES = frozenset({"ImportError", "ModuleNotFoundError"})
_ENVIRONMENT_MESSAGES = ("cannot open shared object file", "undefined symbol: ")


def classify_exception(exc_type: str, message: str) -> tuple[Cause, Tier, str]:
    """(cause, role, why) for a root exception: its message's signature, else its type."""
    short = exc_type.rsplit(".", 1)[-1]
    if short in _ENVIRONMENT_TYPES or any(m in message for m in _ENVIRONMENT_MESSAGES):
        return Cause.USER_CODE, Tier.ERROR, "environment: cannot load code or library"
    best: Signature | None = None
    for sig, _ in match_line(f"{exc_type}: {message}"):
        if best is None or (sig.role, sig.precedence) > (best.role, best.precedence):
            best = sig
    if best is not None:
        return best.cause, best.role, best.name
    cause, role = EXCEPTION_TYPES.get(short, (Cause.USER_CODE, Tier.ERROR))
    return cause, role, f"exception {short}"


if __name__ == "__main__":
    print(needles_table_text(), end="")
