"""Load the real-world corpus: the labelled-corpus format plus `source` and `why` (see README.md).

Reuses `tests/corpus/cases.py` (its `Case` reads the files exactly as `slurm-triage classify`
does) and only widens the keys a case may have.
"""

from __future__ import annotations

import importlib.util
import sys
import tomllib
from pathlib import Path

REALWORLD_DIR = Path(__file__).resolve().parent
_CORPUS_CASES = REALWORLD_DIR.parent / "corpus" / "cases.py"
EXTRA_KEYS = {"source", "why"}


def _corpus_module():
    name = "corpus_cases"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _CORPUS_CASES)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


corpus = _corpus_module()
Case = corpus.Case


def load_cases(root: Path = REALWORLD_DIR) -> list:
    """Every case under `root`, sorted by directory name; ValueError on a malformed case."""
    cases = []
    for case_file in sorted(root.glob("*/case.toml")):
        spec = tomllib.loads(case_file.read_text())
        unknown = set(spec) - corpus._KEYS - EXTRA_KEYS
        missing = {"description", "cause", "nodes", "source", "why"} - set(spec)
        if unknown or missing:
            raise ValueError(
                f"{case_file}: unknown keys {unknown or '-'}, missing {missing or '-'}"
            )
        cases.append(Case(case_file.parent.name, case_file.parent, spec))
    return cases
