"""The job wrapper's cost: `slurm-triage wrap -- CHILD` next to CHILD alone, in one run.

1. Output throughput. The child is Python printing ~100-byte log lines as fast as it can
   until it has written BENCH_WRAPPER_MB (default 500) MB to stdout, which goes to a file
   on local disk (as slurmstepd's output file would). Two variants: Python's default
   block buffering (stdout is a pipe or file: 8 KiB writes), and PYTHONUNBUFFERED=1 (one
   write per line, the worst case for a pass-through). Median wall time of 3 runs each,
   bare and wrapped interleaved; the wrapper's own CPU time as a share of the child's and
   its peak RSS, from the wrapper's `wrapper_usage` debug log line (getrusage).
2. Signal forwarding latency: SIGUSR1 sent to the wrapper until the child's Python handler
   runs (both read CLOCK_MONOTONIC), median and p95 of 100 sends, next to SIGUSR1 sent to
   the child directly.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 3
SENDS = 100
MB = int(os.environ.get("BENCH_WRAPPER_MB", "500"))

WRITER = r"""
import sys
total = int(sys.argv[1]); written = 0; step = 0
while written < total:
    line = f"2024-12-18 09:02:19,870 - train - INFO - step {step} | loss 2.8770 | lr 3e-4 | tok/s"
    print(line)
    written += len(line) + 1; step += 1
"""

LISTENER = r"""
import os, signal, time
signal.signal(signal.SIGUSR1, lambda *a: os.write(1, b"%d\n" % time.monotonic_ns()))
os.write(1, b"ready\n")
while True:
    signal.pause()
"""


def _env(root: Path, unbuffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "PYTHONUNBUF"))}
    env["SLURM_TRIAGE_CONFIG"] = str(root / "triage.toml")
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def _config(root: Path) -> None:
    (root / "evidence").mkdir()
    (root / "triage.toml").write_text(
        f'[logging]\ndestination = "file"\nfile = "{root}/wrapper.log"\n'
        'level = "debug"\nformat = "json"\n'
        f'[paths]\nevidence_dir = "{root}/evidence"\n'
    )


def _timed(argv: list[str], env: dict[str, str], out: Path) -> float:
    with out.open("wb") as sink:
        started = time.perf_counter()
        subprocess.run(argv, stdout=sink, env=env, check=True)
        return time.perf_counter() - started


def _last_usage(log: Path) -> dict[str, float]:
    for line in reversed(log.read_text().splitlines()):
        event = json.loads(line)
        if event.get("event") == "wrapper_usage":
            return event
    raise SystemExit("no wrapper_usage line in the wrapper's log")


def _throughput(root: Path, unbuffered: bool) -> dict[str, float]:
    env = _env(root, unbuffered)
    child = [sys.executable, "-c", WRITER, str(MB << 20)]
    wrapped = [sys.executable, "-m", "slurm_triage", "wrap", "--", *child]
    bare_s, wrap_s, shares, rss = [], [], [], []
    for _ in range(RUNS):
        bare_s.append(_timed(child, env, root / "out.log"))
        wrap_s.append(_timed(wrapped, env, root / "out.log"))
        usage = _last_usage(root / "wrapper.log")
        shares.append(usage["wrapper_cpu_s"] / max(usage["child_cpu_s"], 1e-9))
        rss.append(usage["wrapper_max_rss_bytes"])
    return {
        "bare_s": statistics.median(bare_s),
        "wrapped_s": statistics.median(wrap_s),
        "cpu_share": statistics.median(shares),
        "rss_mb": max(rss) / 2**20,
    }


def _latencies(argv: list[str], env: dict[str, str], target_is_child: bool) -> list[float]:
    """Microseconds from os.kill(SIGUSR1) to the child's handler, SENDS times."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != b"ready":
        raise SystemExit("listener did not start")
    out = []
    try:
        for _ in range(SENDS):
            sent = time.monotonic_ns()
            os.kill(proc.pid, signal.SIGUSR1)
            handled = int(proc.stdout.readline())
            out.append((handled - sent) / 1000)
    finally:
        proc.send_signal(signal.SIGTERM if not target_is_child else signal.SIGKILL)
        proc.wait(timeout=30)
    return out


def _signal_rows(root: Path) -> list[tuple[str, list[float]]]:
    env = _env(root, unbuffered=False)
    child = [sys.executable, "-c", LISTENER]
    wrapped = [sys.executable, "-m", "slurm_triage", "wrap", "--", *child]
    return [
        ("SIGUSR1 to the child directly", _latencies(child, env, True)),
        ("SIGUSR1 to the wrapper, forwarded", _latencies(wrapped, env, False)),
    ]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-wrapper-", dir="/var/tmp") as tmp:
        root = Path(tmp)
        _config(root)
        print(f"{MB} MB of ~100-byte log lines from Python print(), to a file on local disk")
        print(f"{'child stdout':<30} {'bare s':>7} {'wrapped s':>9} {'ratio':>6} "
              f"{'wrapper CPU/child CPU':>22} {'wrapper peak RSS':>17}")  # fmt: skip
        for label, unbuffered in (
            ("block-buffered (default)", False),
            ("PYTHONUNBUFFERED=1", True),
        ):
            row = _throughput(root, unbuffered)
            print(
                f"{label:<30} {row['bare_s']:>7.2f} {row['wrapped_s']:>9.2f} "
                f"{row['wrapped_s'] / row['bare_s']:>6.3f} {row['cpu_share']:>21.1%} "
                f"{row['rss_mb']:>14.1f} MB",
                flush=True,
            )
        for label, values in _signal_rows(root):
            values.sort()
            p95 = values[int(len(values) * 0.95) - 1]
            print(
                f"{label:<36} median {statistics.median(values):7.0f} us  "
                f"p95 {p95:7.0f} us  (n={len(values)})",
                flush=True,
            )


if __name__ == "__main__":
    main()
