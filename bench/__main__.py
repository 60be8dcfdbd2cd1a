"""`python -m bench [NAME ...]`: run every bench/bench_*.py (or the named ones) in turn.

Figures are printed, not asserted: these machines are noisy, so each benchmark compares
side by side in one run (ratios) rather than against fixed thresholds.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    here = Path(__file__).resolve().parent
    names = sorted(p.stem for p in here.glob("bench_*.py"))
    wanted = [n if n.startswith("bench_") else f"bench_{n}" for n in argv]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        print(f"bench: unknown benchmark {unknown[0]}; have: {', '.join(names)}", file=sys.stderr)
        return 2
    for name in wanted or names:
        print(f"\n=== {name} ===", flush=True)
        started = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"--- {name}: {time.perf_counter() - started:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
