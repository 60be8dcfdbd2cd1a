"""`slurm-triage mttf|ettr|report|synth`: the reliability analytics (extra `[analytics]`).

`mttf` and `ettr` (closed form) import only the pure-Python model, so they answer fast
without numpy, polars or matplotlib; `ettr --simulate`, `report` and `synth` import the
extra when they run. Bad values are one-line TriageErrors (exit 2), never tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from slurm_triage.analytics import model
from slurm_triage.errors import TriageError

PLOTS_MODULE = "slurm_triage.analytics.plots"
RF_HELP = (
    "failure rate r_f in failures per node-day (Kokolis et al.: RSC-1 6.5e-3, i.e. 6.50 per "
    "1000 node-days; RSC-2 2.34e-3)"
)


def register(sub: Any) -> None:
    _register_mttf(sub)
    _register_ettr(sub)
    _register_report(sub)
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
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_ettr)


def _register_report(sub: Any) -> None:
    parser = sub.add_parser(
        "report",
        help="reliability report (HTML + PNG) from Slurm accounting",
        description="Read sacct output (a saved file, or sacct run now through the Slurm "
        "door), join our attributions (AdminComment), and write index.html, PNG plots and "
        "summary.json to --out, with a summary on the terminal. The file format is what "
        "`sacct -a -D -X -n -P --delimiter='|' -o JobID,JobIDRaw,State,ExitCode,Submit,"
        "Start,End,ElapsedRaw,NNodes,AllocTRES,NodeList,Partition,User,AdminComment` "
        "prints, with or without its header line.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sacct", type=Path, metavar="FILE", help="saved sacct output")
    source.add_argument("--since", metavar="DATE", help="run sacct for jobs since DATE")
    parser.add_argument("--until", metavar="DATE", help="with --since: up to DATE (now)")
    parser.add_argument("--out", type=Path, default=Path("slurm-triage-report"), metavar="DIR")
    journal = parser.add_mutually_exclusive_group()
    journal.add_argument(
        "--journal",
        type=Path,
        metavar="FILE",
        help="our decisions journal to join (default: decision.journal from the config, "
        "when that file exists)",
    )
    journal.add_argument("--no-journal", action="store_true", help="AdminComment only")
    parser.add_argument("--min-gpus", default="128", metavar="G", help="r_f population: > G")
    parser.add_argument("--gpus-per-node", default="8", metavar="G", help="default 8")
    parser.add_argument("--ckpt-interval-min", default="60", metavar="D", help="assumed dt")
    parser.add_argument("--restart-min", default="5", metavar="U", help="assumed u0")
    parser.add_argument("--ckpt-write-s", default="0", metavar="W", help="w for ETTR curves")
    parser.add_argument("--queue-min", default="0", metavar="Q", help="q for ETTR curves")
    parser.add_argument("--rf", metavar="R", help="r_f for model curves, else measured")
    parser.add_argument("--simulate", default="200", metavar="RUNS", help="0: no markers")
    parser.add_argument("--json", action="store_true", help="print summary JSON")
    parser.set_defaults(handler=_report)


def _register_synth(sub: Any) -> None:
    parser = sub.add_parser(
        "synth",
        help="write synthetic sacct accounting with the paper's job mix",
        description="Synthetic accounting in the format `report --sacct` reads: most jobs "
        "one node or less, a long tail to 8192 GPUs, the paper's state mix, and node "
        "failures at rate r_f (a Poisson process over each attempt's node-days), with "
        "attributions in AdminComment. The analysis recovers r_f from it.",
    )
    parser.add_argument("--jobs", required=True, metavar="N", help="logical jobs")
    parser.add_argument("--rf", required=True, metavar="R", help=RF_HELP)
    parser.add_argument("--seed", default="0", metavar="S")
    parser.add_argument("--out", required=True, type=Path, metavar="FILE")
    parser.add_argument("--days", default="330", metavar="DAYS", help="period (330)")
    parser.add_argument("--gpus-per-node", default="8", metavar="G", help="default 8")
    parser.add_argument("--header", action="store_true", help="write sacct's header line")
    parser.set_defaults(handler=_synth)


def _number(
    text: str, flag: str, *, integer: bool = False, minimum: float = 0.0, strict: bool = True
) -> Any:
    """Parse a flag's value; one-line TriageError unless it is a finite number above (or
    at, when not strict) `minimum`."""
    kind = "an integer" if integer else "a number"
    bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
    try:
        value = int(text) if integer else float(text)
    except (TypeError, ValueError):
        raise TriageError(f"{flag} must be {kind} {bound}, not {text!r}") from None
    if not math.isfinite(value) or value < minimum or (strict and value == minimum):
        raise TriageError(f"{flag} must be {kind} {bound}, not {text!r}")
    return value


def _positive_int(text: str, flag: str) -> int:
    return int(_number(text, flag, integer=True))


def _mttf(args: argparse.Namespace, context: Any) -> int:
    rf = _number(args.rf, "--rf")
    per_node = _positive_int(args.gpus_per_node, "--gpus-per-node")
    rows = []
    for text in args.gpus:
        gpus = _positive_int(text, "--gpus")
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
    per_node = _positive_int(args.gpus_per_node, "--gpus-per-node")
    return model.JobRun(
        n_nodes=model.nodes_for_gpus(_positive_int(args.gpus, "--gpus"), per_node),
        rf_per_node_day=_number(args.rf, "--rf"),
        restart_min=_number(args.restart_min, "--restart-min", strict=False),
        ckpt_interval_min=interval_min,
        ckpt_write_s=_number(args.ckpt_write_s, "--ckpt-write-s", strict=False),
        queue_min=_number(args.queue_min, "--queue-min", strict=False),
    )


def _ettr(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.analytics import ettr_answer

    runs = _positive_int(args.simulate, "--simulate") if args.simulate is not None else 0
    run_days = _number(args.run_days, "--run-days")
    seed = int(_number(args.seed, "--seed", integer=True, strict=False))
    job = _ettr_job(args, _interval(args))
    if runs:
        _require_extra("ettr --simulate")
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
        return float(_number(args.ckpt_interval_min, "--ckpt-interval-min"))
    if _number(args.ckpt_write_s, "--ckpt-write-s", strict=False) == 0:
        raise TriageError(
            "--optimal needs --ckpt-write-s > 0 (with free writes, checkpoint as often as you can)"
        )
    probe = _ettr_job(args, 1.0)
    return model.young_daly_interval_min(probe.n_nodes, probe.rf_per_node_day, probe.ckpt_write_s)


def _require_extra(what: str) -> None:
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
        import polars  # noqa: F401
    except ImportError as exc:
        raise TriageError(
            f"{what} needs the analytics extra ({exc.name} is missing): "
            "pip install 'slurm-triage[analytics]'"
        ) from None


def _report_options(args: argparse.Namespace) -> Any:
    from slurm_triage.analytics.analysis import ReportOptions
    from slurm_triage.analytics.runs import RunAssumptions

    return ReportOptions(
        min_gpus=int(_number(args.min_gpus, "--min-gpus", integer=True, strict=False)),
        gpus_per_node=_positive_int(args.gpus_per_node, "--gpus-per-node"),
        assume=RunAssumptions(
            ckpt_interval_min=_number(args.ckpt_interval_min, "--ckpt-interval-min"),
            restart_min=_number(args.restart_min, "--restart-min", strict=False),
        ),
        ckpt_write_s=_number(args.ckpt_write_s, "--ckpt-write-s", strict=False),
        queue_min=_number(args.queue_min, "--queue-min", strict=False),
        rf_per_node_day=_number(args.rf, "--rf") if args.rf is not None else None,
        simulate_runs=int(_number(args.simulate, "--simulate", integer=True, strict=False)),
    )


def _attributions(args: argparse.Namespace, context: Any) -> Any:
    """The journal's decisions to join, if one is named or configured and present."""
    from slurm_triage.analytics.fetch import journal_attributions

    if args.no_journal:
        return None
    if args.journal is not None:
        if not args.journal.is_file():
            raise TriageError(f"{args.journal}: no such journal file")
        return journal_attributions(args.journal)
    configured = Path(context.config().decision.journal)
    return journal_attributions(configured) if configured.is_file() else None


def _report(args: argparse.Namespace, context: Any) -> int:
    _require_extra("report")
    from slurm_triage.analytics import ingest, report
    from slurm_triage.analytics.progress import ProgressBar

    options = _report_options(args)
    # matplotlib takes a while to import; polars releases the GIL while it parses, so the
    # import overlaps the ingest instead of following it.
    warm = threading.Thread(target=importlib.import_module, args=(PLOTS_MODULE,), daemon=True)
    warm.start()
    if args.until is not None and args.since is None:
        raise TriageError("--until needs --since")
    if args.sacct is not None:
        bar = ProgressBar(f"reading {args.sacct}", unit=" rows")
        try:
            accounting = ingest.read_sacct_file(args.sacct, progress=bar)
        finally:
            bar.close()
    else:
        from slurm_triage.analytics.fetch import fetch_sacct

        since = parse_date(args.since, "--since")
        until = parse_date(args.until, "--until") if args.until else None
        text = fetch_sacct(context.config().slurm, since, until)
        accounting = ingest.read_sacct_text(text, source=f"sacct since {args.since}")
    journal = _attributions(args, context)
    warm.join()
    try:
        analysis, files = report.build_report(
            accounting, options, journal.lazy() if journal is not None else None, args.out
        )
    except OSError as exc:
        raise TriageError(f"{args.out}: cannot write the report: {exc.strerror}") from None
    if args.json:
        print(json.dumps(report.summary(analysis), indent=2, default=str))
    else:
        print(report.summary_text(analysis, files))
        if journal is not None:
            print(f"joined {journal.height:,} decisions from the journal")
    return 0


def _synth(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.analytics.progress import ProgressBar
    from slurm_triage.analytics.synth import SynthSpec, write_accounting

    spec = SynthSpec(
        jobs=_positive_int(args.jobs, "--jobs"),
        rf_per_node_day=_number(args.rf, "--rf"),
        seed=int(_number(args.seed, "--seed", integer=True, strict=False)),
        days=_number(args.days, "--days"),
        gpus_per_node=_positive_int(args.gpus_per_node, "--gpus-per-node"),
        header=args.header,
    )
    bar = ProgressBar("synth", unit=" jobs")
    try:
        rows = write_accounting(spec, args.out, progress=bar)
    except OSError as exc:
        raise TriageError(f"{args.out}: cannot write: {exc.strerror}") from None
    finally:
        bar.close()
    print(f"wrote {rows:,} sacct rows for {spec.jobs:,} jobs to {args.out}")
    return 0


def parse_date(text: str, flag: str) -> datetime:
    """A date for sacct: YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]; one-line error otherwise."""
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise TriageError(f"{flag}: not a date {text!r} (use YYYY-MM-DD[THH:MM[:SS]])") from None
