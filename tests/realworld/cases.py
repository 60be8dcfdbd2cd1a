"""Load the real-world corpus: the labelled-corpus format plus `source` and `why` (see README.md).

Reuses `tests/corpus/cases.py` (its `Case` reads the files exactly as `slurm-triage classify`
does); a case here must also say where its message format comes from and why its label.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import load_by_path

REALWORLD_DIR = Path(__file__).resolve().parent
REQUIRED_KEYS = frozenset({"source", "why"})

corpus = load_by_path("corpus_cases", REALWORLD_DIR.parent / "corpus" / "cases.py")
Case = corpus.Case


def load_cases(root: Path = REALWORLD_DIR) -> list:  # type: ignore[type-arg]
    """Every case under `root`, sorted by directory name; ValueError on a malformed case."""
    return corpus.load_cases(root, REQUIRED_KEYS)  # type: ignore[no-any-return]
