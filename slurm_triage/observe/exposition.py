"""Metric families as plain data, and their two text formats (pure).

`openmetrics()` renders OpenMetrics 1.0 text (what `slurm-triage metrics` prints and
`metrics serve` answers to a scraper that asks for it); `prometheus_text()` renders the
Prometheus text format 0.0.4, which is what node_exporter's textfile collector parses
(expfmt.TextParser: a counter's TYPE line names the `_total` sample, no `# EOF`, no
timestamps). Both come from the same families, so the textfiles and the command agree.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

PREFIX = "slurm_triage_"


class Kind(enum.StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class Spec:
    """What a family is: its name (without `_total` for counters), type, help and labels.
    `unit` is set only where the name ends with it (OpenMetrics requires that)."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    unit: str = ""

    def __post_init__(self) -> None:
        if not self.name.startswith(PREFIX) or self.name.endswith("_total"):
            raise ValueError(f"bad metric family name {self.name!r}")
        if self.unit and not self.name.endswith("_" + self.unit):
            raise ValueError(f"{self.name}: the unit {self.unit!r} must end the name")

    def sample_names(self) -> tuple[str, ...]:
        """The names its samples carry, as a query writes them."""
        if self.kind is Kind.COUNTER:
            return (self.name + "_total",)
        if self.kind is Kind.HISTOGRAM:
            return tuple(self.name + s for s in ("_bucket", "_count", "_sum"))
        return (self.name,)


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (the last bound is +Inf), count and sum."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    total: float

    @classmethod
    def of(cls, values: Iterable[float], bounds: Sequence[float]) -> Histogram:
        observed = sorted(values)
        edges = (*sorted(bounds), math.inf)
        cumulative = tuple((b, sum(1 for v in observed if v <= b)) for b in edges)
        return cls(cumulative, len(observed), math.fsum(observed))


Value = float | int | Histogram


@dataclass(frozen=True)
class Family:
    """One family and its samples: label values (in `spec.labels` order) -> value."""

    spec: Spec
    samples: Mapping[tuple[str, ...], Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for labels, value in self.samples.items():
            if len(labels) != len(self.spec.labels):
                raise ValueError(f"{self.spec.name}: labels {labels} do not match")
            if isinstance(value, Histogram) is not (self.spec.kind is Kind.HISTOGRAM):
                raise ValueError(f"{self.spec.name}: a {self.spec.kind} value is expected")


def _number(value: float | int) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return repr(float(value))  # "3.0": a float stays a float in both parsers
    return repr(value)


def _bound(value: float) -> str:
    """`le` values in OpenMetrics' canonical form ("1.0", "0.25", "+Inf")."""
    return "+Inf" if math.isinf(value) else repr(float(value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    pairs = [f'{n}="{_escape_label(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        pairs.append(extra)
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _sample_lines(family: Family) -> list[str]:
    spec = family.spec
    lines = []
    for values, value in sorted(family.samples.items()):
        if isinstance(value, Histogram):
            for bound, count in value.buckets:
                le = _labels(spec.labels, values, f'le="{_bound(bound)}"')
                lines.append(f"{spec.name}_bucket{le} {count}")
            labels = _labels(spec.labels, values)
            lines.append(f"{spec.name}_count{labels} {value.count}")
            lines.append(f"{spec.name}_sum{labels} {_number(value.total)}")
        else:
            name = spec.sample_names()[0]
            lines.append(f"{name}{_labels(spec.labels, values)} {_number(value)}")
    return lines


def openmetrics(families: Iterable[Family]) -> str:
    """OpenMetrics 1.0 text, ending with `# EOF`."""
    lines: list[str] = []
    for family in families:
        spec = family.spec
        text = spec.help.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
        lines.append(f"# TYPE {spec.name} {spec.kind.value}")
        if spec.unit:
            lines.append(f"# UNIT {spec.name} {spec.unit}")
        lines.append(f"# HELP {spec.name} {text}")
        lines += _sample_lines(family)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def prometheus_text(families: Iterable[Family]) -> str:
    """The Prometheus text format 0.0.4, as node_exporter's textfile collector reads it."""
    lines: list[str] = []
    for family in families:
        spec = family.spec
        name = spec.sample_names()[0] if spec.kind is Kind.COUNTER else spec.name
        text = spec.help.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"# HELP {name} {text}")
        lines.append(f"# TYPE {name} {spec.kind.value}")
        lines += _sample_lines(family)
    return "\n".join(lines) + "\n"
