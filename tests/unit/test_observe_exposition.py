"""The two text formats, read back by the reference parsers (prometheus_client): OpenMetrics
for `slurm-triage metrics`, the Prometheus text format for node_exporter's textfiles."""

from __future__ import annotations

import math

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as text_parse

from slurm_triage.observe.exposition import (
    Family,
    Histogram,
    Kind,
    Spec,
    openmetrics,
    prometheus_text,
)

COUNTER = Spec("slurm_triage_things", Kind.COUNTER, "Things, by kind", ("kind",))
GAUGE = Spec("slurm_triage_took_seconds", Kind.GAUGE, "How long it took", ("node",), unit="seconds")
HIST = Spec("slurm_triage_wait_seconds", Kind.HISTOGRAM, "Waits", unit="seconds")


def _families() -> list[Family]:
    return [
        Family(COUNTER, {("a",): 3, ('we"ird\\ \n',): 1}),
        Family(GAUGE, {("node1",): 0.25, ("node2",): 2.0}),
        Family(HIST, {(): Histogram.of([0.1, 0.7, 0.7, 40.0], (0.5, 1.0, 30.0))}),
        Family(Spec("slurm_triage_empty", Kind.COUNTER, "No samples yet")),
    ]


def test_openmetrics_parses_with_the_reference_parser() -> None:
    """Counters as `_total` samples, a histogram with cumulative buckets, +Inf, count and
    sum, escaped label values, `# EOF` last: the OpenMetrics parser takes it all."""
    text = openmetrics(_families())
    assert text.endswith("# EOF\n")
    parsed = {f.name: f for f in om_parse(text)}
    assert set(parsed) == {
        "slurm_triage_things",
        "slurm_triage_took_seconds",
        "slurm_triage_wait_seconds",
        "slurm_triage_empty",
    }
    things = {s.labels["kind"]: s.value for s in parsed["slurm_triage_things"].samples}
    assert things == {"a": 3, 'we"ird\\ \n': 1}
    assert parsed["slurm_triage_took_seconds"].unit == "seconds"
    hist = {
        (s.name, s.labels.get("le")): s.value for s in parsed["slurm_triage_wait_seconds"].samples
    }
    assert hist[("slurm_triage_wait_seconds_bucket", "0.5")] == 1
    assert hist[("slurm_triage_wait_seconds_bucket", "1.0")] == 3
    assert hist[("slurm_triage_wait_seconds_bucket", "30.0")] == 3
    assert hist[("slurm_triage_wait_seconds_bucket", "+Inf")] == 4
    assert hist[("slurm_triage_wait_seconds_count", None)] == 4
    assert math.isclose(hist[("slurm_triage_wait_seconds_sum", None)], 41.5)


def test_textfile_format_parses_as_node_exporter_reads_it() -> None:
    """The Prometheus text format: TYPE names the `_total` sample of a counter (expfmt's
    TextParser would otherwise see an untyped family), no `# EOF`."""
    text = prometheus_text(_families())
    assert "# EOF" not in text
    assert "# TYPE slurm_triage_things_total counter\n" in text
    parsed = {f.name: f for f in text_parse(text)}
    assert parsed["slurm_triage_things"].type == "counter"
    assert parsed["slurm_triage_wait_seconds"].type == "histogram"
    assert {s.labels["node"]: s.value for s in parsed["slurm_triage_took_seconds"].samples} == {
        "node1": 0.25,
        "node2": 2.0,
    }


def test_specs_refuse_names_against_the_conventions() -> None:
    """Our prefix, no `_total` in a family name, a unit that ends the name."""
    with pytest.raises(ValueError):
        Spec("other_things", Kind.GAUGE, "x")
    with pytest.raises(ValueError):
        Spec("slurm_triage_things_total", Kind.COUNTER, "x")
    with pytest.raises(ValueError):
        Spec("slurm_triage_wait", Kind.GAUGE, "x", unit="seconds")


def test_families_refuse_samples_that_do_not_fit() -> None:
    """A sample's labels must match the spec's, and only histograms take histograms."""
    with pytest.raises(ValueError):
        Family(COUNTER, {("a", "b"): 1})
    with pytest.raises(ValueError):
        Family(COUNTER, {("a",): Histogram.of([1.0], (1.0,))})
    with pytest.raises(ValueError):
        Family(HIST, {(): 3})
