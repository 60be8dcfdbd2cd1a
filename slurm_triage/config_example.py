"""The annotated example config (`contrib/config.toml.example`, `config show --defaults`),
generated from the config schema itself so it cannot drift: every section and key, its
default, what it accepts, and the comments written above it in config.py."""

from __future__ import annotations

import inspect
import re
from typing import Any

from slurm_triage.config import (
    _SECTIONS,
    Choices,
    Config,
    _args,
    _describe,
    _origin,
    _toml_value,
    declared_type,
)
from slurm_triage.frozen import fields
from slurm_triage.taxonomy import Cause

HEADER = """\
# /etc/slurm-triage/config.toml: every key, with its default. Unknown keys are an error.
# Generated from the schema (slurm-triage config show --defaults); keep only what you change.
# Check a file before deploying it:  slurm-triage config check /etc/slurm-triage/config.toml
# Override a single key for one run:  SLURM_TRIAGE__SLURM__TIMEOUT_S=5 slurm-triage ...
"""
_FIELD_LINE = re.compile(r"    (\w+): ")
_INLINE_COMMENT = re.compile(r"\s#\s?(.*)$")
_CAUSES = {c.value for c in Cause}


def _comments(cls: type) -> dict[str, tuple[list[str], str]]:
    """Each field's comment: the block of lines right above it, and its line's own comment.
    Read from config.py's source; without the source (a frozen build) there are none."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    found: dict[str, tuple[list[str], str]] = {}
    pending: list[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD_LINE.match(line)
        if match:
            inline = _INLINE_COMMENT.search(line.split("=", 1)[-1])
            found[match.group(1)] = (pending, inline.group(1) if inline else "")
        if not line.startswith("        "):  # a continuation keeps nothing pending either
            pending = []
    return found


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _accepts(tp: Any, meta: Any) -> str:
    """What a key accepts, in words, e.g. 'a number, 0.1 to 600'."""
    if _origin(tp) in (tuple, list):
        (item,) = _args(tp)[:1]
        if isinstance(item, Choices) and set(item.values) == _CAUSES:
            return "a list of cause ids (docs/attribution.md)"
        return "a list of " + ("strings" if item is str else _describe(item))
    text = _describe(tp)
    low, high = meta.get("min"), meta.get("max")
    if low is not None and high is not None:
        text += f", {_number(low)} to {_number(high)}"
    elif low is not None:
        text += f", at least {_number(low)}"
    return text


def example_toml(config: Config | None = None) -> str:
    """The annotated TOML for `config` (the defaults when None); `load_config` reads it
    back to an equal object."""
    config = config or Config()
    parts = [HEADER]
    for section, cls in _SECTIONS.items():
        doc = (inspect.getdoc(cls) or "").split("\n\n")[0].replace("\n", " ")
        parts.append(f"\n# {doc}\n[{section}]\n")
        comments = _comments(cls)
        for item in fields(cls):
            above, inline = comments.get(item.name, ([], ""))
            parts.extend(f"# {line}\n" if line else "#\n" for line in above)
            value = _toml_value(getattr(getattr(config, section), item.name))
            accepts = _accepts(declared_type(cls, item.name), item.metadata)
            parts.append(f"{item.name} = {value}  # {accepts}{'; ' + inline if inline else ''}\n")
    return "".join(parts)
