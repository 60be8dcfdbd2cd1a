"""Run every `bench/bench_*.py` module's `main()` in turn, printing its figures."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    names = sorted(p.stem for p in here.glob("bench_*.py"))
    only = set(sys.argv[1:])
    for name in names:
        if only and name not in only:
            continue
        print(f"== {name} ==", flush=True)
        start = time.perf_counter()
        importlib.import_module(f"bench.{name}").main()
        print(f"== {name} done in {time.perf_counter() - start:.1f} s ==\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
