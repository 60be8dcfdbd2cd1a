"""Every exit code 0..255 passes through the wrapper exactly, and each rank records its own.

256 interpreter start-ups would take most of a minute on two cores, so each wrapper here is
a fork of the test process running the CLI's `main()` (the same code path as
`slurm-triage wrap`, minus the interpreter start), 16 at a time, each around a real
`sh -c 'exit N'`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurm_triage.evidence import ProcessExit, parse_record

BATCH = 16


def _fork_wrap(argv: list[str], rank: int, stderr: int | None = None) -> int:
    pid = os.fork()
    if pid:
        return pid
    code = 99
    try:
        os.environ["SLURM_PROCID"] = str(rank)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull if stderr is None else stderr, 2)
        from slurm_triage.cli.main import main

        code = main(["wrap", "--", *argv])
    finally:
        os._exit(code)


def test_every_exit_code_passes_through_and_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For each code 0..255 the wrapper exits with that code and its record says so."""
    import slurm_triage.cli.main  # noqa: F401  imported once here, not in each fork
    import slurm_triage.wrapper.report  # noqa: F401

    evidence = tmp_path / "evidence"
    evidence.mkdir()
    for var in [v for v in os.environ if v.startswith(("SLURM", "CUDA_VISIBLE"))]:
        monkeypatch.delenv(var)
    (tmp_path / "triage.toml").write_text("[wrapper]\nwatch_nvml = false\n")
    monkeypatch.setenv("SLURM_TRIAGE_CONFIG", str(tmp_path / "triage.toml"))
    monkeypatch.setenv("SLURM_TRIAGE__PATHS__EVIDENCE_DIR", str(evidence))
    for var, value in (("SLURM_JOB_ID", "9"), ("SLURMD_NODENAME", "n1"), ("SLURM_STEP_ID", "0")):
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "256")  # one record per rank
    seen: dict[int, int] = {}
    codes = list(range(256))
    for start in range(0, len(codes), BATCH):
        pids = {_fork_wrap(["sh", "-c", f"exit {c}"], c): c for c in codes[start : start + BATCH]}
        for pid, code in pids.items():
            _, status = os.waitpid(pid, 0)
            seen[code] = os.waitstatus_to_exitcode(status)
    assert seen == {c: c for c in codes}
    for code in codes:
        record = parse_record((evidence / "9" / f"n1.0.{code}.json").read_bytes())
        (exit_fact,) = [f for f in record.facts if isinstance(f, ProcessExit)]
        assert (exit_fact.exit_code, exit_fact.signal) == (code, None)


def test_a_wrapper_bug_before_the_start_runs_the_command_unwrapped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If our own set-up fails before the command starts, the command still runs (directly)
    and its exit status is the wrapper's; one line says what happened."""
    from slurm_triage.wrapper import run

    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(run._Streams, "__init__", broken)
    monkeypatch.setenv("SLURM_TRIAGE__PATHS__EVIDENCE_DIR", str(tmp_path))
    err = tmp_path / "err"
    with err.open("wb") as sink:
        pid = _fork_wrap(["sh", "-c", "echo ran >&2; exit 4"], 0, stderr=sink.fileno())
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 4
    lines = err.read_text().splitlines()
    assert lines == [
        "slurm-triage: wrapper failed (RuntimeError: simulated bug); running the command unwrapped",
        "ran",
    ]
