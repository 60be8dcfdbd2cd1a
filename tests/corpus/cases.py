"""Load the labelled corpus: one directory per case with a case.toml (see README.md).

Used by tests/unit/test_corpus.py and bench/bench_classify.py; it reads the files through
the same `slurm_triage.attribution.inputs.collect` as `slurm-triage classify`.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from slurm_triage.attribution import Window, job_window
from slurm_triage.attribution.inputs import collect
from slurm_triage.evidence import Fact

CORPUS_DIR = Path(__file__).resolve().parent
_KEYS = {
    "description",
    "cause",
    "nodes",
    "tags",
    "state",
    "exit_code",
    "signal",
    "end_time",
    "evidence",
    "logs",
    "kernel_logs",
}
# Cases without an end time are dated by their logs: read glog-style month-day times in 2024.
DEFAULT_YEAR = 2024


@dataclass(frozen=True)
class Case:
    """One labelled case: what happened (inputs) and what attribution must say (expected)."""

    name: str
    path: Path
    spec: dict[str, Any]

    @property
    def cause(self) -> str:
        return str(self.spec["cause"])

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(self.spec["nodes"]))

    @property
    def end_time(self) -> float | None:
        value = self.spec.get("end_time")
        if value is None:
            return None
        if isinstance(value, int | float):
            return float(value)
        return datetime.fromisoformat(value).timestamp()

    def window(self) -> Window | None:
        end = self.end_time
        return job_window(end) if end is not None else None

    def facts(self) -> list[Fact]:
        """Every fact of this case, read from its files like `classify` reads them."""
        end = self.end_time
        year = datetime.fromtimestamp(end, UTC).year if end else DEFAULT_YEAR
        return collect(
            state=self.spec.get("state"),
            exit_code=self.spec.get("exit_code"),
            signal=self.spec.get("signal"),
            logs=[(_node(n), self.path / f) for n, f in self.spec.get("logs", {}).items()],
            kernel_logs=[
                (_node(n), self.path / f) for n, f in self.spec.get("kernel_logs", {}).items()
            ],
            evidence=[self.path / f for f in self.spec.get("evidence", [])],
            year=year,
            tz=UTC,
        )


def _node(name: str) -> str | None:
    """`_` in a case file means a log not tied to any node (one combined batch log)."""
    return None if name == "_" else name


def load_cases(root: Path = CORPUS_DIR, required: frozenset[str] = frozenset()) -> list[Case]:
    """Every case under `root`, sorted by directory name; ValueError on a malformed case.
    `required` are keys a corpus adds to this format (the real-world corpus' `source`)."""
    cases = []
    for case_file in sorted(root.glob("*/case.toml")):
        spec = tomllib.loads(case_file.read_text())
        unknown = set(spec) - _KEYS - required
        missing = {"description", "cause", "nodes", *required} - set(spec)
        if unknown or missing:
            raise ValueError(
                f"{case_file}: unknown keys {unknown or '-'}, missing {missing or '-'}"
            )
        cases.append(Case(case_file.parent.name, case_file.parent, spec))
    return cases
