"""`slurm-triage mttf|ettr|synth` (and `report`, in analytics_report): the reliability
analytics (extra `[analytics]`).

`mttf` and `ettr` (closed form) import only the pure-Python model, so they answer fast
without numpy, polars or matplotlib; `ettr --simulate`, `report` and `synth` import the
extra when they run. Bad values are one-line TriageErrors (exit 2), never tracebacks; an
r_f above 0.1 per node-day is refused with a hint unless --force (analytics_args).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from slurm_triage.analytics import model
from slurm_triage.cli import analytics_report
from slurm_triage.cli.analytics_args import (
    FORCE_HELP,
    RF_HELP,
    number,
    positive_int,
    require_extra,
    rf_value,
)
from slurm_triage.errors import TriageError


def register(sub: Any) -> None:
    _register_mttf(sub)
    _register_ettr(sub)
    analytics_report.register(sub)
    _register_synth(sub)


def _register_mttf(sub: Any) -> None:
    parser = sub.add_parser(
        "mttf",
        help="expected mean time to failure of a job of N GPUs",
        description="MTTF = 1 / (N_nodes * r_f) (Kokolis et al. 2024), N_nodes = "
        "ceil(GPUs / GPUs per node). Example: slurm-triage mttf --gpus 16384 --rf 6.5e-3 "
        "gives 1.80 h.",
    )
    parser.add_argument("--gpus", nargs="+", required=True, metavar="N", help="job size(s)")
    parser.add_argument("--gpus-per-node", default="8", metavar="G", help="default 8")
    parser.add_argument("--rf", required=True, metavar="R", help=RF_HELP)
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_mttf)


def _register_ettr(sub: Any) -> None:
    parser = sub.add_parser(
        "ettr",
        help="expected ETTR of a job run, optimal checkpoint interval, Monte Carlo check",
        description="E[ETTR] ~= (1 - N r_f (u0 + dt/2)) / (1 + w/dt) / (1 + N r_f q), "
        "valid while the job's MTTF 1/(N r_f) >= 0.1 day (Kokolis et al. 2024; the queue "
        "term is ours and vanishes at q = 0). --optimal gives Young/Daly's interval "
        "sqrt(2 w / (N r_f)); --simulate checks either by Monte Carlo. Example: "
        "slurm-triage ettr --gpus 16384 --rf 6.5e-3 --restart-min 5 --ckpt-interval-min 60",
    )
    parser.add_argument("--gpus", required=True, metavar="N", help="job size in GPUs")
    parser.add_argument("--gpus-per-node", default="8", metavar="G", help="default 8")
    parser.add_argument("--rf", required=True, metavar="R", help=RF_HELP)
    parser.add_argument(
        "--restart-min", required=True, metavar="U", help="u0: restart overhead, minutes"
    )
    parser.add_argument("--ckpt-interval-min", metavar="D", help="dt: checkpoint interval, minutes")
    parser.add_argument(
        "--ckpt-write-s", default="0", metavar="W", help="w: checkpoint write time, s"
    )
    parser.add_argument(
        "--queue-min", default="0", metavar="Q", help="q: queue wait per (re)submission, min"
    )
    parser.add_argument("--optimal", action="store_true", help="find the best interval")
    parser.add_argument("--simulate", metavar="RUNS", help="also simulate RUNS job runs")
    parser.add_argument("--run-days", default="30", metavar="DAYS", help="simulated work")
    parser.add_argument("--seed", default="0", metavar="S", help="simulation seed")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_ettr)


def _register_synth(sub: Any) -> None:
    parser = sub.add_parser(
        "synth",
        help="write synthetic sacct accounting (and node events) with the paper's job mix",
        description="Synthetic accounting that `report --sacct` reads: most jobs one node or "
        "less, a long tail to 8192 GPUs, the paper's state mix, and node failures at rate "
        "r_f (a Poisson process over each attempt's node-days). --form triage: our columns "
        "with attributions in AdminComment; --form plain: a site's `sacct -P` dump (JobID, "
        "Elapsed, header, no JobName or AdminComment, --steps for step rows), where a failure "
        "Slurm requeued is a bare REQUEUED row and only the node events (--events-out, as "
        "`sacctmgr -P show event` prints them) tell it from a preemption. The analysis "
        "recovers r_f from it.",
    )
    parser.add_argument("--jobs", required=True, metavar="N", help="logical jobs")
    parser.add_argument("--rf", required=True, metavar="R", help=RF_HELP)
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument("--seed", default="0", metavar="S")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE")
    parser.add_argument("--events-out", type=Path, metavar="FILE", help="node events to FILE")
    parser.add_argument("--form", choices=("triage", "plain"), default="triage")
    parser.add_argument("--steps", action="store_true", help="plain form: step rows too")
    parser.add_argument(
        "--node-fail-share", default="0.35", metavar="P", help="failures shown as NODE_FAIL"
    )
    parser.add_argument(
        "--requeue-after-failure", default="0.7", metavar="P", help="failures requeued"
    )
    parser.add_argument(
        "--keep-first-submit",
        action="store_true",
        help="every attempt shows its job's first Submit",
    )
    parser.add_argument("--days", default="330", metavar="DAYS", help="period (330)")
    parser.add_argument("--gpus-per-node", default="8", metavar="G", help="default 8")
    parser.add_argument("--header", action="store_true", help="write sacct's header line")
    parser.set_defaults(handler=_synth)


def _mttf(args: argparse.Namespace, context: Any) -> int:
    rf = rf_value(args.rf, args.force)
    per_node = positive_int(args.gpus_per_node, "--gpus-per-node")
    rows = []
    for text in args.gpus:
        gpus = positive_int(text, "--gpus")
        nodes = model.nodes_for_gpus(gpus, per_node)
        hours = model.mttf_hours(nodes, rf)
        rows.append(
            {
                "gpus": gpus,
                "nodes": nodes,
                "failures_per_day": model.failures_per_day(nodes, rf),
                "mttf_hours": hours,
                "mttf_days": hours / 24,
            }
        )
    if args.json:
        out = {"rf_per_node_day": rf, "gpus_per_node": per_node, "jobs": rows}
        print(json.dumps(out, indent=2))
        return 0
    print(f"r_f = {rf:g} failures per node-day ({rf * 1000:g} per 1000), {per_node} GPUs/node")
    for row in rows:
        print(
            f"{row['gpus']:>9,} GPUs ({row['nodes']:,} node{'s' if row['nodes'] > 1 else ''}):"
            f" MTTF {row['mttf_hours']:.2f} h"
            f" ({row['mttf_days']:.3f} days), {row['failures_per_day']:.3g} failures per day"
        )
    return 0


def _ettr_job(args: argparse.Namespace, interval_min: float) -> model.JobRun:
    per_node = positive_int(args.gpus_per_node, "--gpus-per-node")
    return model.JobRun(
        n_nodes=model.nodes_for_gpus(positive_int(args.gpus, "--gpus"), per_node),
        rf_per_node_day=rf_value(args.rf, args.force),
        restart_min=number(args.restart_min, "--restart-min", strict=False),
        ckpt_interval_min=interval_min,
        ckpt_write_s=number(args.ckpt_write_s, "--ckpt-write-s", strict=False),
        queue_min=number(args.queue_min, "--queue-min", strict=False),
    )


def _ettr(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.analytics import ettr_answer

    runs = positive_int(args.simulate, "--simulate") if args.simulate is not None else 0
    run_days = number(args.run_days, "--run-days")
    seed = int(number(args.seed, "--seed", integer=True, strict=False))
    job = _ettr_job(args, _interval(args))
    if runs:
        require_extra("ettr --simulate")
    result = ettr_answer.evaluate(
        job, optimal=args.optimal, runs=runs, run_days=run_days, seed=seed
    )
    print(json.dumps(result, indent=2) if args.json else ettr_answer.render(result))
    return 0


def _interval(args: argparse.Namespace) -> float:
    """The checkpoint interval asked for, or Young/Daly's with --optimal."""
    if not args.optimal:
        if args.ckpt_interval_min is None:
            raise TriageError("--ckpt-interval-min is required (or use --optimal)")
        return float(number(args.ckpt_interval_min, "--ckpt-interval-min"))
    if number(args.ckpt_write_s, "--ckpt-write-s", strict=False) == 0:
        raise TriageError(
            "--optimal needs --ckpt-write-s > 0 (with free writes, checkpoint as often as you can)"
        )
    probe = _ettr_job(args, 1.0)
    return model.young_daly_interval_min(probe.n_nodes, probe.rf_per_node_day, probe.ckpt_write_s)


def _synth(args: argparse.Namespace, context: Any) -> int:
    require_extra("synth")
    from slurm_triage.analytics.progress import ProgressBar
    from slurm_triage.analytics.synth import SynthSpec, write_accounting

    try:
        spec = SynthSpec(
            jobs=positive_int(args.jobs, "--jobs"),
            rf_per_node_day=rf_value(args.rf, args.force),
            seed=int(number(args.seed, "--seed", integer=True, strict=False)),
            days=number(args.days, "--days"),
            gpus_per_node=positive_int(args.gpus_per_node, "--gpus-per-node"),
            header=args.header,
            form=args.form,
            steps=args.steps,
            node_fail_share=number(args.node_fail_share, "--node-fail-share", strict=False),
            requeue_after_failure=number(
                args.requeue_after_failure, "--requeue-after-failure", strict=False
            ),
            keep_first_submit=args.keep_first_submit,
        )
    except ValueError as exc:
        raise TriageError(f"synth: {exc}") from None
    bar = ProgressBar("synth", unit=" jobs")
    try:
        rows = write_accounting(spec, args.out, progress=bar, events_out=args.events_out)
    except OSError as exc:
        raise TriageError(
            f"{exc.filename or args.out}: cannot write: {exc.strerror or exc}"
        ) from None
    finally:
        bar.close()
    print(f"wrote {rows:,} sacct job rows for {spec.jobs:,} jobs to {args.out}")
    if args.events_out is not None:
        print(f"wrote node events to {args.events_out}")
    return 0
