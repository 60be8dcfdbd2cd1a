"""The synthetic accounting generator: the paper's shape, reproducibility, and the
analysis recovering the r_f it was given."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from slurm_triage.analytics import attribution_join, ingest, metrics
from slurm_triage.analytics.synth import SynthSpec, write_accounting


def _analyse(path: Path) -> pl.DataFrame:
    return metrics.ended(attribution_join.attribute(ingest.read_sacct_file(path).attempts))


@pytest.mark.parametrize("rf", [6.5e-3, 2.34e-3])
def test_analysis_recovers_the_rf_it_was_given(tmp_path: Path, rf: float) -> None:
    """150k jobs at the paper's two rates: the measured r_f (jobs > 128 GPUs) is within 15%
    of the true one, and the true one is inside the exact 95% interval."""
    path = tmp_path / "synth.txt"
    write_accounting(SynthSpec(jobs=150_000, rf_per_node_day=rf, seed=42), path)
    measured = metrics.failure_rate(metrics.cube(_analyse(path)))
    assert measured.events > 100
    assert measured.rate == pytest.approx(rf, rel=0.15)
    assert measured.low <= rf <= measured.high


def test_shape_follows_the_paper(tmp_path: Path) -> None:
    """Most jobs use a node or less, jobs of 256+ GPUs hold most GPU time, and the state
    mix is near the paper's (60% COMPLETED, 24% FAILED, 10% PREEMPTED)."""
    path = tmp_path / "synth.txt"
    write_accounting(SynthSpec(jobs=60_000, rf_per_node_day=6.5e-3, seed=3), path)
    done = _analyse(path)
    runs_first = done.unique("job_raw", keep="first")
    assert (runs_first["gpus"] <= 8).mean() > 0.85
    assert runs_first["gpus"].max() >= 4096
    hours = done["gpus"] * done["elapsed_s"]
    assert (hours.filter(done["gpus"] >= 256).sum() / hours.sum()) > 0.5
    mix = {
        r["state"]: r["count_share"]
        for r in metrics.state_mix(metrics.cube(done)).iter_rows(named=True)
    }
    assert mix["COMPLETED"] == pytest.approx(0.60, abs=0.03)
    assert mix["FAILED"] == pytest.approx(0.24, abs=0.03)
    assert mix["PREEMPTED"] == pytest.approx(0.10, abs=0.02)
    assert 0 < mix["NODE_FAIL"] < 0.01


def test_requeued_jobs_repeat_their_job_id(tmp_path: Path) -> None:
    """Like sacct -D, a requeued job has several rows with one JobIDRaw."""
    path = tmp_path / "synth.txt"
    rows = write_accounting(SynthSpec(jobs=20_000, rf_per_node_day=6.5e-3, seed=1), path)
    done = _analyse(path)
    assert rows == done.height > 20_000
    assert done["job_raw"].n_unique() == 20_000


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    """A seed fixes the output exactly; another seed changes it."""
    spec = SynthSpec(jobs=3000, rf_per_node_day=6.5e-3, seed=9)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    write_accounting(spec, a)
    write_accounting(spec, b)
    write_accounting(SynthSpec(jobs=3000, rf_per_node_day=6.5e-3, seed=10), c)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()


def test_header_option_writes_saccts_header(tmp_path: Path) -> None:
    """--header output starts with sacct's header and reads back the same."""
    plain, headed = tmp_path / "plain", tmp_path / "headed"
    write_accounting(SynthSpec(jobs=500, rf_per_node_day=1e-2, seed=2), plain)
    write_accounting(SynthSpec(jobs=500, rf_per_node_day=1e-2, seed=2, header=True), headed)
    assert headed.read_text().startswith("JobID|JobIDRaw|State|")
    assert _analyse(plain).equals(_analyse(headed))


@pytest.mark.parametrize(
    "kwargs", [{"jobs": 0}, {"rf_per_node_day": 0.0}, {"rf_per_node_day": float("inf")}]
)
def test_bad_specs_are_refused(kwargs: dict[str, float]) -> None:
    """No jobs, or a non-positive or infinite r_f, is a ValueError."""
    with pytest.raises(ValueError):
        SynthSpec(**{"jobs": 10, "rf_per_node_day": 1e-3, **kwargs})  # type: ignore[arg-type]
