"""`slurm-triage twin`: the cluster twin (slurm_triage.twin; docs/twin.md).

Needs the analytics extra (numpy; polars and matplotlib for --jobs-from and --out). Bad
values are one-line errors (exit 2); `--validate` exits 1 when the twin misses the model.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

from slurm_triage.cli.analytics_args import FORCE_HELP, RF_HELP, number, require_extra, rf_value
from slurm_triage.errors import TriageError

DESCRIPTION = """\
A discrete-event simulation of a GPU cluster over weeks: jobs from the paper's size mix
(or a site's sacct file) at a given load, FIFO scheduling with backfill and preemption for
requeued jobs, per-node faults with lemon nodes, attribution with its errors, health
checks, repair. It runs the same cluster, jobs and faults under each policy set:
`none` (users resubmit failed jobs), `native` (Slurm's --requeue after NODE_FAIL, no
exclusion) and `triage` (the decisions of slurm-triage's own policy and actuator code,
through a simulated Slurm door, with the [policy] of the config in force as if act = true),
and prints ETTR by job size, goodput, drains, false drains and more per set.

examples:
  slurm-triage twin --nodes 2000 --days 30 --policies none,native,triage --json
  slurm-triage twin --policies triage --variant strict=max_node_failure_requeues=2 \\
      --variant no-lemons=lemons=off --out /tmp/twin
  slurm-triage twin --validate --rf 2.34e-3      # against the closed form and Monte Carlo"""

# Scenario fields the flags below set; --set reaches every other one.
_FLAG_FIELDS = {
    "nodes",
    "gpus_per_node",
    "days",
    "seed",
    "rf_per_node_day",
    "lemon_share",
    "lemon_factor",
    "load",
    "jobs_from",
    "restart_min",
    "ckpt_interval_min",
    "ckpt_write_s",
}


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "twin",
        help="simulate a 2k-16k node GPU cluster under policy sets none, native, triage",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", default="2000", metavar="N", help="nodes (2000; up to 65536)")
    parser.add_argument("--gpus-per-node", default="8", metavar="G", help="default 8")
    parser.add_argument("--days", default="30", metavar="D", help="simulated days (30)")
    parser.add_argument("--seed", default="0", metavar="S")
    parser.add_argument("--rf", default="6.5e-3", metavar="R", help=RF_HELP + "; default 6.5e-3")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument(
        "--lemon-share", default="0.012", metavar="P", help="share of lemon nodes (0.012)"
    )
    parser.add_argument(
        "--lemon-factor", default="200", metavar="F", help="a lemon's fault rate / others' (200)"
    )
    parser.add_argument("--load", default="0.85", metavar="L", help="offered GPU load (0.85)")
    parser.add_argument(
        "--jobs-from", type=Path, metavar="SACCT", help="job sizes and run times from sacct"
    )
    parser.add_argument("--restart-min", default="5", metavar="U", help="u0, minutes (5)")
    parser.add_argument(
        "--ckpt-interval-min", default="60", metavar="D", help="checkpoint interval (60)"
    )
    parser.add_argument("--ckpt-write-s", default="0", metavar="W", help="checkpoint write (0)")
    parser.add_argument(
        "--policies",
        default="none,native,triage",
        metavar="LIST",
        help="policy sets to compare (none,native,triage and --variant names)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=KEY=VALUE[,KEY=VALUE]",
        help="a triage variant: [policy] keys, breaker_* keys, lemons/repair/prolog=on|off",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other scenario value (docs/twin.md), e.g. repair_h=48",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="instead: uniform nodes, no policy, 1k-16k GPU jobs against the model",
    )
    parser.add_argument(
        "--workers", default="1", metavar="N", help="run the policy sets in N processes"
    )
    parser.add_argument("--out", type=Path, metavar="DIR", help="write index.html and PNGs")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_twin)


def _twin(args: argparse.Namespace, context: Any) -> int:
    require_extra("twin")
    from slurm_triage.twin import policysets, report, run, validate
    from slurm_triage.twin.scenario import Scenario

    values: dict[str, Any] = {
        "nodes": int(number(args.nodes, "--nodes", integer=True)),
        "gpus_per_node": int(number(args.gpus_per_node, "--gpus-per-node", integer=True)),
        "days": float(number(args.days, "--days")),
        "seed": int(number(args.seed, "--seed", integer=True, strict=False)),
        "rf_per_node_day": rf_value(args.rf, args.force),
        "lemon_share": float(number(args.lemon_share, "--lemon-share", strict=False)),
        "lemon_factor": float(number(args.lemon_factor, "--lemon-factor")),
        "load": float(number(args.load, "--load", strict=False)),
        "jobs_from": str(args.jobs_from or ""),
        "restart_min": float(number(args.restart_min, "--restart-min", strict=False)),
        "ckpt_interval_min": float(number(args.ckpt_interval_min, "--ckpt-interval-min")),
        "ckpt_write_s": float(number(args.ckpt_write_s, "--ckpt-write-s", strict=False)),
    }
    # The cluster fills during the warm-up: 2 days, or a tenth of a shorter period.
    values["warmup_days"] = min(2.0, values["days"] / 10)
    values |= _settings(args.set)
    workers = int(number(args.workers, "--workers", integer=True))
    if args.validate:
        setup = validate.scenario(
            rf_per_node_day=values["rf_per_node_day"],
            restart_min=values["restart_min"],
            ckpt_interval_min=values["ckpt_interval_min"],
            ckpt_write_s=values["ckpt_write_s"],
            gpus_per_node=values["gpus_per_node"],
            seed=values["seed"],
        )
        checked = validate.validate(setup)
        if args.json:
            print(json.dumps(checked.to_dict(), indent=2))
        else:
            print(report.validation_summary(checked))
        return 0 if checked.passed() else 1
    scenario = Scenario(**values)
    config = context.config()
    # What the site would run with act = true: the twin is how it chooses those settings
    # (a variant may still say act=false).
    acting = dataclasses.replace(config.policy, act=True)
    sets = policysets.parse(args.policies, args.variant, acting, config.health)
    comparison = run.compare(scenario, sets, workers)
    if args.out is not None:
        try:
            path = report.write_html(comparison, None, args.out)
        except OSError as exc:
            raise TriageError(f"{args.out}: cannot write: {exc.strerror}") from None
    if args.json:
        print(report.write_json(comparison, None))
    else:
        print(report.summary(comparison))
        if args.out is not None:
            print(f"report: {path}")
    return 0


def _settings(items: list[str]) -> dict[str, Any]:
    """--set KEY=VALUE for Scenario fields, typed by the field's annotation."""
    from slurm_triage.twin.scenario import Scenario

    hints = typing.get_type_hints(Scenario)
    fields = {f.name for f in dataclasses.fields(Scenario)} - _FLAG_FIELDS
    out: dict[str, Any] = {}
    for item in items:
        key, eq, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not eq or key not in fields:
            valid = ", ".join(sorted(fields))
            raise TriageError(f"--set {item!r}: expected KEY=VALUE with KEY one of: {valid}")
        out[key] = _typed(key, hints[key], raw.strip())
    return out


def _typed(key: str, hint: Any, raw: str) -> Any:
    if hint is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise TriageError(f"--set {key}: expected on or off, not {raw!r}")
    if hint is int:
        return int(number(raw, f"--set {key}", integer=True, strict=False))
    if hint is float:
        return float(number(raw, f"--set {key}", strict=False))
    if hint is str:
        return raw
    if typing.get_origin(hint) is tuple:
        try:
            return tuple(int(part) for part in raw.split(",") if part.strip())
        except ValueError:
            raise TriageError(f"--set {key}: expected GPU counts like 1024,2048") from None
    raise TriageError(f"--set {key}: cannot be set from the command line")
