"""Progress on long ingests: a bar on a terminal only, fed batch by batch by ingest."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from slurm_triage.analytics import ingest
from slurm_triage.analytics.progress import ProgressBar
from slurm_triage.analytics.synth import SynthSpec, write_accounting


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_draws_on_a_terminal_and_ends_its_line() -> None:
    """On a TTY the bar redraws in place with a percentage and ends with a newline."""
    stream = _Terminal()
    bar = ProgressBar("reading", stream=stream, unit=" rows")
    bar(50, 100)
    bar(100, 100)
    bar.close()
    text = stream.getvalue()
    assert text.startswith("\rreading [")
    assert "100%" in text and "100 rows" in text
    assert text.endswith("\n")


def test_bar_is_silent_off_a_terminal() -> None:
    """Piped or logged stderr gets nothing at all."""
    stream = io.StringIO()
    bar = ProgressBar("reading", stream=stream)
    bar(1, 2)
    bar.close()
    assert stream.getvalue() == ""


def test_ingest_reports_progress_and_reads_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a progress callback ingest goes batch by batch: counts grow to the row count,
    and the frame equals the one read in one go."""
    path = tmp_path / "sacct.txt"
    rows = write_accounting(SynthSpec(jobs=12_000, rf_per_node_day=1e-2), path)
    seen: list[tuple[int, int]] = []
    monkeypatch.setattr(ingest, "BATCH_ROWS", 1000)
    batched = ingest.read_sacct_file(path, progress=lambda d, t: seen.append((d, t)))
    assert len(seen) > 3
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert seen[-1][0] == rows
    assert all(total >= done for done, total in seen)
    assert batched.attempts.equals(ingest.read_sacct_file(path).attempts)


def test_bar_reaches_100_percent_when_the_row_estimate_was_high() -> None:
    """The total is an estimate from the file's first MiB; the last call reports the rows
    actually read as the total, so the bar ends at 100%."""
    import polars as pl

    seen: list[tuple[int, int]] = []
    frame = pl.LazyFrame({"a": list(range(2500))})
    ingest._collect(frame, lambda d, t: seen.append((d, t)), expected=10_000)
    assert seen[-1] == (2500, 2500)
    stream = _Terminal()
    bar = ProgressBar("reading", stream=stream)
    for done, total in seen:
        bar(done, total)
    assert stream.getvalue().rsplit("\r", 1)[-1].startswith("reading [" + "#" * 30 + "] 100%")


def test_each_later_phase_shows_a_line(tmp_path: Path) -> None:
    """After the bar, the report names each phase (join, model, figures, job runs, page)
    with its time, one line each, on a terminal; nothing off one."""
    from slurm_triage.analytics import analysis, report
    from slurm_triage.analytics.progress import Phases

    path = tmp_path / "sacct.txt"
    write_accounting(SynthSpec(jobs=3000, rf_per_node_day=1e-2), path)
    accounting = ingest.read_sacct_file(path)
    stream = _Terminal()
    options = analysis.ReportOptions(simulate_runs=0)
    report.build_report(accounting, options, None, tmp_path / "out", phase=Phases(stream))
    lines = stream.getvalue().splitlines()
    assert [line.split(" ...")[0] for line in lines] == [
        "joining attributions and node events",
        "computing failure rates and the ETTR model",
        f"drawing {len(report.SUMMARY_FIGURES)} figures",
        "measuring ETTR of the job runs",
        "drawing the ETTR figure and writing the page",
    ]
    assert all(line.endswith("s") for line in lines)
    quiet = io.StringIO()
    report.build_report(accounting, options, None, tmp_path / "out2", phase=Phases(quiet))
    assert quiet.getvalue() == ""
