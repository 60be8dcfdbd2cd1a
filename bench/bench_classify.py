"""Classify-path figures: a 2 GiB log, import cost of the attribution path, corpus throughput.

1. A 2 GiB sparse log whose last 8 MiB is real, dense training output ending in a CUDA OOM:
   time `collect()` + `attribute()` in-process (median of 7) and the whole CLI as a
   subprocess (median of 3). The tail bound is what keeps this flat in the file's size.
2. `python -X importtime -c "import slurm_triage.attribution"` (median of 5): total, heaviest, and
   the non-stdlib top-level packages imported (must be slurm_triage, at most structlog).
3. Cases per second over the labelled corpus (read + scan + attribute), and the pure engine.
4. The reviewer's hostile 1 MiB output tails (srun-shaped lines, as a job's user can print
   them for the decision to read): `scan_log` time (median of 5) and the work it counted.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from slurm_triage.attribution import DEFAULT_TAIL_BYTES, attribute, decode_tail
from slurm_triage.attribution.inputs import collect
from slurm_triage.attribution.logscan import scan_log

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
SIZE = 2 << 30
DENSE_TAIL = 8 << 20
ALLOWED_THIRD_PARTY = {"slurm_triage", "structlog"}


def _median(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _big_log(directory: Path) -> Path:
    """A sparse file of SIZE bytes: a hole, then DENSE_TAIL bytes of real log at the end."""
    sample = next(CORPUS.glob("*-xid79-nccl-timeout-cascade/node11.out")).read_bytes()
    ending = next(CORPUS.glob("*-cuda-oom-new-format/node201.out")).read_bytes()
    body = sample * (DENSE_TAIL // len(sample) + 1)
    body = body[-(DENSE_TAIL - len(ending)) :] + ending
    path = directory / "big.out"
    with path.open("wb") as handle:
        handle.truncate(SIZE - len(body))
        handle.seek(0, 2)
        handle.write(body)
    return path


def bench_big_file() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = _big_log(Path(tmp))
        size = path.stat().st_size
        on_disk = path.stat().st_blocks * 512

        def classify() -> object:
            facts = collect(state="FAILED", exit_code=1, logs=[("node201", path)])
            return attribute(facts)

        result = classify()
        seconds = _median(classify, 7)
        print(
            f"2 GiB log ({size / 2**30:.2f} GiB apparent, {on_disk / 2**20:.1f} MiB on disk), "
            f"tail {DEFAULT_TAIL_BYTES >> 20} MiB of dense log"
        )
        print(
            f"  in-process classify: {seconds * 1000:.0f} ms median of 7 "
            f"-> {result.cause.value} {list(result.nodes)}"
        )  # type: ignore[attr-defined]
        cli = [
            sys.executable,
            "-m",
            "slurm_triage",
            "classify",
            "--state",
            "FAILED",
            "--exit-code",
            "1",
            "--log",
            f"node201={path}",
            "--json",
        ]
        wall = _median(lambda: subprocess.run(cli, capture_output=True, check=True), 3)
        print(f"  CLI subprocess (interpreter start included): {wall * 1000:.0f} ms median of 3")


def _importtime(module: str) -> tuple[float, list[tuple[int, int, str]]]:
    """The run with the median total of five `-X importtime` runs (one run is noisy)."""
    runs = sorted((_importtime_once(module) for _ in range(5)), key=lambda run: run[0])
    return runs[2]


def _importtime_once(module: str) -> tuple[float, list[tuple[int, int, str]]]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = (part.strip() for part in line[12:].split("|"))
        rows.append((int(self_us), int(cumulative_us), name))
    return sum(r[0] for r in rows) / 1000, rows


_NEW_PACKAGES = (
    "import sys; before = set(sys.modules); import {modules}; "
    "print(' '.join(sorted({{m.split('.')[0] for m in set(sys.modules) - before}} "
    "- set(sys.stdlib_module_names))))"
)


def _third_party(modules: str) -> list[str]:
    """Top-level non-stdlib packages that importing `modules` adds to sys.modules."""
    code = _NEW_PACKAGES.format(modules=modules)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


def bench_imports() -> None:
    baseline_ms, _ = _importtime("os")
    paths = (
        ("wrapper/epilog path", "slurm_triage.attribution"),
        (
            "CLI path",
            "slurm_triage.cli.main, slurm_triage.cli.classify_cmd, slurm_triage.attribution",
        ),
    )
    for label, modules in paths:
        total_ms, rows = _importtime(modules)
        ours = [r for r in rows if r[2].startswith("slurm_triage")]
        print(f"{label}: python -X importtime -c 'import {modules}'")
        print(
            f"  {total_ms:.1f} ms total, {total_ms - baseline_ms:.1f} ms over 'import os' "
            f"({len(rows)} modules; slurm_triage's own: {sum(r[0] for r in ours) / 1000:.1f} ms)"
        )
        print("  heaviest (self, cumulative):")
        for self_us, cum_us, name in sorted(rows, reverse=True)[:6]:
            print(f"    {self_us / 1000:6.2f} ms {cum_us / 1000:7.2f} ms  {name}")
        third = _third_party(modules)
        verdict = "ok" if set(third) <= ALLOWED_THIRD_PARTY else "TOO HEAVY"
        print(f"  non-stdlib top-level packages imported: {third or ['none']} -> {verdict}")
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import slurm_triage.attribution"], check=True)
        runs.append(time.perf_counter() - start)
    print(
        f"  interpreter + import slurm_triage.attribution: "
        f"{statistics.median(runs) * 1000:.0f} ms wall, median of 5"
    )


def _load_corpus():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("corpus_cases", CORPUS / "cases.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_cases"] = module
    spec.loader.exec_module(module)
    return module.load_cases(CORPUS)


def bench_corpus() -> None:
    cases = _load_corpus()

    def read_and_attribute() -> None:
        for case in cases:
            attribute(case.facts(), window=case.window())

    seconds = _median(read_and_attribute, 3)
    print(
        f"corpus: {len(cases)} cases, {len(cases) / seconds:.0f} cases/s "
        f"(read files + scan + attribute), median of 3"
    )
    facts = [(case.facts(), case.window()) for case in cases]

    def engine_only() -> None:
        for case_facts, window in facts:
            attribute(case_facts, window=window)

    seconds = _median(engine_only, 5)
    print(f"  attribute() alone: {len(cases) / seconds:.0f} cases/s, median of 5")


# Before the per-scan bounds: 214 s and about 22 min (30 s for the first 500 lines).
HOSTILE_TAILS = {
    "tasks 0-65534 on every line": ["srun: error: n1: tasks 0-65534: Exited with exit code 1"],
    "Node failure on n[00001-16384] on every line": ["srun: error: Node failure on n[00001-16384]"],
    "a different 16,384-node list on every line": [
        f"srun: error: Node failure on n[{i:06d}-{i + 16383:06d}]" for i in range(1, 24001)
    ],
    # A rank's line placed through srun's tasks reads NCCL's world size from `nranks`: a
    # regex retried at each `NCCL INFO ` of such lines took 6 s (quadratic).
    "a rank's error, then 810 `NCCL INFO ` per `nranks` line": [
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        *["[rank0]: nranks x " + "NCCL INFO " * 810] * 100,
    ],
}


def bench_hostile_tails() -> None:
    """The decision's scan of a user's 1 MiB output tail stays far under decision.deadline_s."""
    print("hostile 1 MiB output tails, scan_log (median of 5):")
    for label, lines in HOSTILE_TAILS.items():
        block = "".join(f"{line}\n" for line in lines)
        data = (block * ((1 << 20) // len(block) or 1)).encode()[: 1 << 20]
        tail = decode_tail(data, whole_file=False)
        scan = scan_log(tail, node=None)
        seconds = _median(lambda tail=tail: scan_log(tail, node=None), 5)
        print(
            f"  {label}: {seconds * 1000:.0f} ms, {len(tail)} lines, "
            f"{scan.names_expanded} names expanded, {scan.lists_cut} lists cut"
        )


def main() -> None:
    bench_big_file()
    bench_imports()
    bench_corpus()
    bench_hostile_tails()


if __name__ == "__main__":
    main()
