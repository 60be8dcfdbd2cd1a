"""A toy trainer that behaves like a real one towards Slurm and slurm-triage.

Plain Python (no GPU, no torch): it fits y = 3x + 2 by SGD, one "step" at a time, and

- checkpoints to a JSON file every --checkpoint-every steps (temp file + rename, so a kill
  mid-write never leaves a torn checkpoint) and resumes from it when started again, as a
  requeued job is (SLURM_RESTART_COUNT says how often);
- checkpoints at the next step when SIGUSR1 arrives (`#SBATCH --signal=USR1@120`: Slurm's
  warning before the time limit, forwarded by `slurm-triage wrap`), and checkpoints and
  exits on SIGTERM (scancel, preemption, the time limit itself);
- touches $SLURM_TRIAGE_HEARTBEAT every step (the wrapper's hang detector), and records an
  uncaught exception in $SLURM_TRIAGE_ERROR_FILE via slurm_triage.wrapper.record_exceptions
  when slurm-triage is importable.

Try it: `slurm-triage wrap -- python examples/train.py --steps 50 --fail-at 30`, then run it
again without --fail-at and watch it resume from step 30.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import time
from pathlib import Path

try:
    from slurm_triage.wrapper import record_exceptions
except ImportError:  # the trainer must run without slurm-triage installed, too

    def record_exceptions(func=None):  # type: ignore[no-untyped-def]
        return func if func is not None else (lambda f: f)


_signals: list[int] = []


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--checkpoint-every", type=int, default=20)
    parser.add_argument(
        "--checkpoint",
        default="checkpoint-rank{rank}.json",
        help="checkpoint file; {rank} becomes this task's SLURM_PROCID (the batch script's "
        "own $SLURM_PROCID is always 0, so let each task fill in its rank here)",
    )
    parser.add_argument("--step-seconds", type=float, default=0.05, help="simulated work")
    parser.add_argument("--fail-at", type=int, default=-1, help="raise at this step (demo)")
    return parser.parse_args(argv)


def load(path: Path) -> dict[str, float]:
    """The last checkpoint, or a fresh model at step 0."""
    if path.exists():
        return json.loads(path.read_text())
    return {"step": 0, "w": 0.0, "b": 0.0}


def save(path: Path, state: dict[str, float]) -> None:
    """Write the checkpoint atomically: a reader sees the old one or the new one, whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as fh:
        json.dump(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    print(f"checkpoint: step {int(state['step'])} -> {path}", flush=True)


def sgd_step(state: dict[str, float], rng: random.Random, lr: float = 0.05) -> float:
    """One SGD step on a mini-batch of y = 3x + 2 + noise; returns the batch loss."""
    xs = [rng.uniform(-1, 1) for _ in range(32)]
    ys = [3 * x + 2 + rng.gauss(0, 0.1) for x in xs]
    errs = [state["w"] * x + state["b"] - y for x, y in zip(xs, ys, strict=True)]
    state["w"] -= lr * 2 * sum(e * x for e, x in zip(errs, xs, strict=True)) / len(xs)
    state["b"] -= lr * 2 * sum(errs) / len(xs)
    return sum(e * e for e in errs) / len(errs)


def heartbeat() -> None:
    path = os.environ.get("SLURM_TRIAGE_HEARTBEAT")
    if path:
        Path(path).touch()


@record_exceptions
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.checkpoint = Path(args.checkpoint.format(rank=os.environ.get("SLURM_PROCID", "0")))
    # Handlers only note the signal; the loop acts at a step boundary, never mid-update.
    for sig in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(sig, lambda signum, _frame: _signals.append(signum))
    state = load(args.checkpoint)
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
    print(f"starting at step {int(state['step'])} (restart {restarts})", flush=True)
    rng = random.Random(int(state["step"]))
    while state["step"] < args.steps:
        if state["step"] == args.fail_at:
            raise RuntimeError(f"simulated failure at step {args.fail_at}")
        loss = sgd_step(state, rng)
        state["step"] += 1
        time.sleep(args.step_seconds)
        heartbeat()
        print(f"step {int(state['step'])} loss {loss:.4f}", flush=True)
        if _signals:
            save(args.checkpoint, state)
            if signal.SIGTERM in _signals:
                return 128 + signal.SIGTERM  # what a shell reports for a TERM'd process
            _signals.clear()
        elif state["step"] % args.checkpoint_every == 0:
            save(args.checkpoint, state)
    save(args.checkpoint, state)
    print(f"done: w={state['w']:.3f} b={state['b']:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    # The decorator on main records what escapes it; `record_exceptions()` called once at
    # start-up would instead install a sys.excepthook for the whole program.
    sys.exit(main())
