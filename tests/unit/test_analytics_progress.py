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
