"""Prolog cold start: `slurm-triage-prolog` on a simulated 8-GPU node with 4 HCA ports and
3 mounts, as slurmd runs it (a fresh process each time), next to `python -c pass`, both from
a plain install of this tree (bench.plain_install: the dev venv's editable install slows
every interpreter start, and would flatter the ratio)."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.plain_install import plain_install
from slurm_triage.simulate.estate import MOUNTS, NodeEstate

RUNS = 30


def _config(root: Path) -> Path:
    sim = root / "sim"
    NodeEstate(sim, "bench1").ensure()
    mounts = ", ".join(f'"{sim}/{{node}}/mounts/{m}"' for m in MOUNTS)
    path = root / "config.toml"
    path.write_text(f"""
[logging]
destination = "file"
file = "{root}/triage.log"
[paths]
state_dir = "{root}/state"
evidence_dir = "{root}/evidence"
[health]
nvml = "simulated"
simulate_root = "{sim}"
kernel_log = "{sim}/{{node}}/kern.log"
sysfs_root = "{sim}/{{node}}/sys"
mountinfo = "{sim}/{{node}}/mountinfo"
mounts = [{mounts}]
ib_ports = ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]
ib_rate_gbps = 400
""")
    return path


def _median_wall(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        result = subprocess.run(argv, env=env, capture_output=True)
        times.append(time.perf_counter() - started)
        if result.returncode != 0:
            raise SystemExit(f"{argv[0]} failed: {result.stderr.decode()[-300:]}")
    return statistics.median(times), max(times)


def _import_ms(python: str, module: str) -> tuple[float, list[tuple[int, str]]]:
    out = subprocess.run(
        [python, "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
    ).stderr
    rows = []
    for line in out.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|", 2)
            if cumulative.strip().isdigit():
                rows.append((int(cumulative.strip()), name.strip()))
    top = max((r for r in rows if r[1].strip() == module), default=(0, module))
    heavy = sorted((r for r in rows if not r[1].startswith(" ")), reverse=True)[:6]
    return top[0] / 1000, heavy


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain = plain_install(root)
        env = dict(
            os.environ,
            SLURM_TRIAGE_CONFIG=str(_config(root)),
            SLURMD_NODENAME="bench1",
            SLURM_JOB_ID="1",
        )
        prolog = plain.script("slurm-triage-prolog")
        floor, floor_max = _median_wall([plain.python, "-c", "pass"], env)
        wall, wall_max = _median_wall([prolog], env)
        log = (root / "triage.log").read_text()
        assert "health_run_done" in log, "the prolog did not run its checks"
        total, heavy = _import_ms(plain.python, "slurm_triage.prolog_epilog.prolog")
    print(
        f"prolog cold start, median of {RUNS}: {wall * 1000:.0f} ms (max {wall_max * 1000:.0f})"
        f"  | python -c pass: {floor * 1000:.0f} ms (max {floor_max * 1000:.0f})"
        f"  | ratio {wall / floor:.1f}x"
    )
    print(f"import slurm_triage.prolog_epilog.prolog: {total:.0f} ms cumulative")
    for micros, name in heavy:
        print(f"  {micros / 1000:7.1f} ms  {name}")


if __name__ == "__main__":
    main()
