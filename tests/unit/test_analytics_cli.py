"""`slurm-triage mttf|ettr|report|synth` as real processes: answers, files, and one-line
errors with exit 2 (bad input) or 3 (Slurm unreachable), never a traceback."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

ETTR_8 = "ettr --gpus 8 --rf 1e-3 --restart-min 5"
BIN_DIR = "SLURM_TRIAGE__SLURM__BIN_DIR"


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Never join the host's own journal (the configured default path) by accident.
    isolated = {"SLURM_TRIAGE__DECISION__JOURNAL": "/nonexistent/journal.sqlite"}
    return subprocess.run(
        [sys.executable, "-m", "slurm_triage", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **isolated, **(env or {})},
    )


def test_mttf_prints_the_papers_projection() -> None:
    """`mttf --gpus 16384 --rf 6.5e-3` answers 1.80 h, in text and in JSON."""
    text = _run("mttf", "--gpus", "16384", "131072", "--rf", "6.5e-3")
    assert text.returncode == 0, text.stderr
    assert "MTTF 1.80 h" in text.stdout
    assert "MTTF 0.23 h" in text.stdout
    data = json.loads(_run("mttf", "--gpus", "16384", "--rf", "6.5e-3", "--json").stdout)
    assert data["jobs"][0]["nodes"] == 2048
    assert data["jobs"][0]["mttf_hours"] == pytest.approx(1.8029, abs=1e-3)


def test_mttf_and_ettr_do_not_import_the_analytics_extra() -> None:
    """The closed forms answer without polars, numpy or matplotlib loaded."""
    code = (
        "import sys, contextlib, io\n"
        "from slurm_triage.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    main(['mttf', '--gpus', '8', '--rf', '1e-3'])\n"
        "    main(['ettr', '--gpus', '8', '--rf', '1e-3', '--restart-min', '5',"
        " '--ckpt-interval-min', '30'])\n"
        "print(sorted(m for m in ('polars', 'numpy', 'matplotlib') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(("interval", "expected"), [("60", 0.68), ("5", 0.93)])
def test_ettr_gives_the_papers_16k_gpu_values(interval: str, expected: float) -> None:
    """16k GPUs, r_f 6.5e-3, u0 5 min: 0.68 hourly, 0.93 every 5 minutes, flagged invalid."""
    command = "ettr --gpus 16384 --rf 6.5e-3 --restart-min 5 --json --ckpt-interval-min"
    result = _run(*command.split(), interval)
    data = json.loads(result.stdout)
    assert data["ettr"] == pytest.approx(expected, abs=0.005)
    assert data["valid_regime"] is False


def test_ettr_optimal_gives_young_daly_and_simulates_it() -> None:
    """--optimal picks sqrt(2 w / (N r_f)) and --simulate checks the ETTR there."""
    command = "ettr --gpus 8192 --rf 6.5e-3 --restart-min 5 --ckpt-write-s 30 --optimal"
    result = _run(*command.split(), "--simulate", "500", "--run-days", "10", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["ckpt_interval_min"] == pytest.approx(14.7, abs=0.1)
    assert data["simulation"]["mean"] == pytest.approx(data["ettr"], rel=0.05)


def test_ettr_text_names_the_regime_and_the_simulation() -> None:
    """The text answer states the closed form, the regime and the simulated mean."""
    command = "ettr --gpus 16384 --rf 6.5e-3 --restart-min 5 --ckpt-interval-min 60"
    result = _run(*command.split(), "--simulate", "300", "--run-days", "5")
    assert result.returncode == 0, result.stderr
    assert "E[ETTR] (closed form): 0.676" in result.stdout
    assert "outside the valid regime" in result.stdout
    assert "Monte Carlo (300 runs" in result.stdout


def test_synth_onto_a_full_disk_says_why_in_one_line() -> None:
    """polars' write error has no strerror: the message is its own text, not `None`."""
    done = _run("synth", "--jobs", "10", "--rf", "6.5e-3", "--out", "/dev/full")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "cannot write: " in done.stderr and "cannot write: None" not in done.stderr


def test_synth_then_report_writes_the_report(tmp_path: Path) -> None:
    """synth writes accounting, report reads it and writes HTML, PNGs and a summary."""
    sacct = tmp_path / "sacct.txt"
    made = _run("synth", "--jobs", "20000", "--rf", "6.5e-3", "--seed", "4", "--out", str(sacct))
    assert made.returncode == 0, made.stderr
    assert "wrote" in made.stdout
    out = tmp_path / "report"
    result = _run("report", "--sacct", str(sacct), "--out", str(out), "--simulate", "20")
    assert result.returncode == 0, result.stderr
    assert "r_f (jobs > 128 GPUs)" in result.stdout
    assert result.stderr == ""  # no progress bar off a terminal
    for name in ("index.html", "summary.json", "mttf.png", "ettr.png", "taxonomy.png"):
        assert (out / name).stat().st_size > 0
    summary = json.loads(_run("report", "--sacct", str(sacct), "--out", str(out), "--json").stdout)
    assert summary["rows"] > 20000


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("mttf --gpus -5 --rf 6.5e-3", "--gpus must be an integer > 0"),
        ("mttf --gpus 8 --rf 0", "--rf must be a number > 0"),
        ("mttf --gpus 8 --rf abc", "--rf must be a number > 0"),
        (f"{ETTR_8} --ckpt-interval-min 0", "--ckpt-interval-min must be"),
        (f"{ETTR_8} --ckpt-interval-min 5 --simulate ten", "--simulate must be an integer"),
        (f"{ETTR_8} --ckpt-interval-min 5 --simulate 0", "--simulate must be an integer > 0"),
        ("ettr --gpus 8 --rf 1e-3 --restart-min -1 --ckpt-interval-min 5", "--restart-min"),
        (ETTR_8, "--ckpt-interval-min is required"),
        (f"{ETTR_8} --optimal", "--optimal needs --ckpt-write-s"),
        ("report --sacct /nonexistent/sacct.txt", "no such file"),
        ("report --since yesterday", "--since: not a date"),
        ("synth --jobs 0 --rf 1e-3 --out /tmp/x", "--jobs must be"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(command: str, message: str) -> None:
    """Bad values: `slurm-triage: error: ...` on one line, exit 2, no traceback."""
    result = _run(*command.split())
    assert result.returncode == 2
    assert result.stderr.startswith("slurm-triage: error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_garbage_file_is_exit_2(tmp_path: Path) -> None:
    """A file that is not sacct output is rejected in one line."""
    junk = tmp_path / "junk.bin"
    junk.write_bytes(random.Random(0).randbytes(4096).replace(b"|", b"-"))
    result = _run("report", "--sacct", str(junk), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "not sacct output" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_report_since_without_sacct_is_exit_3(tmp_path: Path) -> None:
    """--since runs sacct through the Slurm door; when sacct is missing: exit 3, one line."""
    env = {BIN_DIR: str(tmp_path / "no-slurm-here"), "SLURM_TRIAGE__SLURM__ATTEMPTS": "1"}
    result = _run("report", "--since", "2026-01-01", "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 3
    assert "sacct" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _fake_slurm_bin(tmp_path: Path, sacct_rows: str, events: str) -> Path:
    """sacct and sacctmgr that log their argv and print the given text."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("sacct", sacct_rows), ("sacctmgr", events)):
        (tmp_path / f"{name}.out").write_text(text)
        fake = bindir / name
        fake.write_text(
            "#!/bin/sh\n"
            f'echo "$@" > {tmp_path / (name + ".argv")}\n'
            f"cat {tmp_path / (name + '.out')}\n"
        )
        fake.chmod(0o755)
    return bindir


# A 256-GPU attempt Slurm requeued (REQUEUED, no AdminComment) while node7 stopped
# answering: only the node event says it was a node failure.
REQUEUED_256 = (
    "1|1|REQUEUED|0:0|2026-01-02T00:00:00|2026-01-02T00:00:00|2026-01-02T01:00:00|3600|32|"
    "billing=256,gres/gpu=256,node=32|node[1-32]|p|u|\n"
)
EVENTS_DOOR = (
    "NodeName|TimeStart|TimeEnd|State|User|Reason\n"
    "node7|2026-01-02T01:00:30|2026-01-02T05:00:00|DOWN*||Not responding\n"
)


def test_report_since_runs_the_expected_sacct_and_sacctmgr(tmp_path: Path) -> None:
    """--since DATE asks sacct for every user's allocations, each requeue a row, since DATE,
    and sacctmgr (through the Slurm door) for the node events of the same period; the
    event makes the REQUEUED attempt a node failure."""
    bindir = _fake_slurm_bin(tmp_path, REQUEUED_256, EVENTS_DOOR)
    out = str(tmp_path / "out")
    env = {BIN_DIR: str(bindir), "SLURM_TRIAGE__SLURM__BACKEND": "cli"}
    result = _run("report", "--since", "2026-01-01", "--out", out, "--json", env=env)
    assert result.returncode == 0, result.stderr
    argv = (tmp_path / "sacct.argv").read_text().split()
    for flag in ("-a", "-D", "-X", "-n", "-P", "--delimiter=|"):
        assert flag in argv
    assert argv[argv.index("-S") + 1] == "2026-01-01T00:00:00"
    assert argv[argv.index("-o") + 1].endswith(",AdminComment")
    events_argv = (tmp_path / "sacctmgr.argv").read_text().split()
    assert events_argv[:5] == ["-P", "show", "event", "Events=Node", "Start=2026-01-01T00:00:00"]
    summary = json.loads(result.stdout)
    assert summary["rows"] == 1
    assert summary["rf_failures"] == 1
    assert summary["failure_sources"]["node_event"] == {"failures": 1, "rf_failures": 1}
    assert summary["unattributed_requeued"] == 0
    text = _run("report", "--since", "2026-01-01", "--out", out, "--no-events", env=env)
    assert text.returncode == 0, text.stderr
    assert "1 job rows" in text.stdout
    assert "REQUEUED attempts unattributed: 1 (256 GPU-hours)" in text.stdout


def test_report_since_when_sacctmgr_fails_names_the_way_out(tmp_path: Path) -> None:
    """sacctmgr refusing (PrivateData=events, slurmdbd down) is exit 3 in one line that
    says --no-events reports without node events."""
    bindir = _fake_slurm_bin(tmp_path, REQUEUED_256, "")
    (bindir / "sacctmgr").write_text(
        "#!/bin/sh\necho ' Error with request: Access denied' >&2\nexit 1\n"
    )
    env = {BIN_DIR: str(bindir), "SLURM_TRIAGE__SLURM__BACKEND": "cli"}
    result = _run("report", "--since", "2026-01-01", "--out", str(tmp_path / "out"), env=env)
    assert result.returncode == 3
    assert "Access denied" in result.stderr and "--no-events" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_report_with_events_file_counts_each_source(tmp_path: Path) -> None:
    """--events FILE (sacctmgr's default format) joins like the door's events; without it
    the same REQUEUED attempt is not a failure and the summary says so plainly."""
    sacct = tmp_path / "sacct.txt"
    sacct.write_text(REQUEUED_256)
    events = tmp_path / "events.txt"
    events.write_text(
        "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User\n"
        "c|node7|2026-01-02T00:59:00|Unknown|DRAIN|triage: gpu_memory job=1: XID 48|slurm(64030)\n"
    )
    base = ["report", "--sacct", str(sacct), "--out", str(tmp_path / "out"), "--json"]
    joined = json.loads(_run(*base, "--events", str(events)).stdout)
    assert joined["rf_failures"] == 1
    assert joined["node_events"]["explained_failures"] == 1
    causes = {row["cause"]: row["failures"] for row in joined["rf_by_cause"]}
    assert causes == {"gpu_memory": 1}
    alone = json.loads(_run(*base).stdout)
    assert alone["rf_failures"] == 0
    assert alone["unattributed_requeued"] == 1
    assert alone["unattributed_requeued_gpu_hours"] == 256.0


@pytest.mark.parametrize(
    "command",
    [
        "mttf --gpus 16384 --rf 6.5",
        f"{ETTR_8} --ckpt-interval-min 60".replace("1e-3", "6.5"),
        "synth --jobs 10 --rf 6.5 --out /nonexistent/x",
        "report --sacct /nonexistent/x --rf 6.5",
    ],
)
def test_an_rf_per_1000_node_days_is_refused_with_a_hint(command: str) -> None:
    """--rf 6.5 (the paper's per-1000 figure typed as is) would silently give MTTF 0.00 h:
    every command refuses it in one line, exit 2, suggesting 6.5e-3."""
    result = _run(*command.split())
    assert result.returncode == 2
    assert "did you mean 6.5e-3" in result.stderr
    assert "--force" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_force_takes_a_large_rf_as_given() -> None:
    """--force accepts a value above 0.1 per node-day; 0.1 itself needs no --force."""
    forced = _run("mttf", "--gpus", "8", "--rf", "6.5", "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["rf_per_node_day"] == 6.5
    assert _run("mttf", "--gpus", "8", "--rf", "0.1").returncode == 0


def test_report_joins_the_decisions_journal(tmp_path: Path) -> None:
    """A FAILED 256-GPU job with no AdminComment counts towards r_f once the journal says
    its first attempt (restart 0) was a GPU memory error; --no-journal ignores it."""
    from slurm_triage.journal.store import Journal

    sacct = tmp_path / "sacct.txt"
    sacct.write_text(
        "41|41|FAILED|1:0|2026-01-01T00:00:00|2026-01-01T00:00:00|2026-01-02T00:00:00|86400|32|"
        "billing=256,gres/gpu=256,node=32|node[1-32]|p|u|\n"
    )
    journal = Journal(tmp_path / "journal.sqlite")
    assert journal.claim(41, 0, "test")
    root_xid = {"kind": "kernel_event", "source": "root", "event": "xid", "xid": 48}
    journal.record(41, 0, {"cause": "gpu_memory", "state": "FAILED", "evidence": [root_xid]})
    journal.close()
    base = ["report", "--sacct", str(sacct), "--out", str(tmp_path / "out"), "--json"]
    joined = _run(*base, "--journal", str(tmp_path / "journal.sqlite"))
    assert joined.returncode == 0, joined.stderr
    assert json.loads(joined.stdout)["rf_failures"] == 1
    assert json.loads(_run(*base, "--no-journal").stdout)["rf_failures"] == 0
