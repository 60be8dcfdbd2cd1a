"""`slurm-triage report`: the reliability report from Slurm accounting, our attributions
and Slurm's node events (extra `[analytics]`).

Inputs: a saved sacct file (`--sacct`) or sacct run now (`--since`); node events from a
saved `sacctmgr -P show event` (`--events`) or, with `--since`, through the Slurm door
(`--no-events` skips them); the decisions journal. Bad input is one line and exit 2, a
Slurm command failing is exit 3.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import threading
from pathlib import Path
from typing import Any

from slurm_triage.cli.analytics_args import (
    FORCE_HELP,
    node_events_from_args,
    number,
    parse_date,
    positive_int,
    require_extra,
    rf_value,
)
from slurm_triage.errors import TriageError

PLOTS_MODULE = "slurm_triage.analytics.plots"
OWN_COLUMNS = (
    "JobID,JobIDRaw,State,ExitCode,Submit,Start,End,ElapsedRaw,NNodes,AllocTRES,NodeList,"
    "Partition,User,AdminComment"
)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "report",
        help="reliability report (HTML + PNG) from Slurm accounting and node events",
        description="Read sacct output (a saved file, or sacct run now through the Slurm "
        "door), join our attributions (AdminComment, the journal) and Slurm's node events "
        "(sacctmgr show event: a REQUEUED or FAILED attempt that ended while one of its "
        "nodes went down or was drained is a node failure), and write index.html, PNG "
        "figures and summary.json to --out, with a summary on the terminal. Any sacct -P "
        "column set with JobIDRaw or JobID, State, Submit, End, ElapsedRaw or Elapsed, "
        "NNodes (AllocTRES for GPUs, NodeList for events, AdminComment optional), with its "
        "header line or named by --sacct-columns; without either, slurm-triage's own "
        f"order: {OWN_COLUMNS.replace(',', ', ')}. Step rows (sacct without -X) are skipped "
        "and counted.",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--sacct", type=Path, metavar="FILE", help="saved sacct -P output")
    source.add_argument("--since", metavar="DATE", help="run sacct (and sacctmgr) since DATE")
    parser.add_argument("--until", metavar="DATE", help="with --since: up to DATE (now)")
    parser.add_argument(
        "--sacct-columns",
        metavar="LIST",
        help="the -o list the --sacct file was made with, for a file without its header",
    )
    events = parser.add_mutually_exclusive_group()
    events.add_argument(
        "--events",
        type=Path,
        metavar="FILE",
        help="saved `sacctmgr -P show event` output (default or any Format=, with header)",
    )
    events.add_argument(
        "--no-events",
        action="store_true",
        help="with --since: do not read node events (REQUEUED attempts stay unattributed)",
    )
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
    parser.add_argument(
        "--gpus-from-nodes",
        action="store_true",
        help="count a job whose AllocTRES has no gres/gpu (AccountingStorageTRES without "
        "gres/gpu, Slurm's default) as NNodes x --gpus-per-node GPUs: for clusters of whole "
        "GPU nodes only",
    )
    parser.add_argument("--ckpt-interval-min", default="60", metavar="D", help="assumed dt")
    parser.add_argument("--restart-min", default="5", metavar="U", help="assumed u0")
    parser.add_argument(
        "--ckpt-write-s", default="0", metavar="W", help="w for ETTR curves and the optimum"
    )
    parser.add_argument("--queue-min", default="0", metavar="Q", help="q for ETTR curves")
    parser.add_argument("--rf", metavar="R", help="r_f per node-day for model curves")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument("--simulate", default="200", metavar="RUNS", help="0: no markers")
    parser.add_argument("--json", action="store_true", help="print summary JSON")
    parser.set_defaults(handler=_report)


def _options(args: argparse.Namespace) -> Any:
    from slurm_triage.analytics.analysis import ReportOptions
    from slurm_triage.analytics.runs import RunAssumptions

    return ReportOptions(
        min_gpus=int(number(args.min_gpus, "--min-gpus", integer=True, strict=False)),
        gpus_per_node=positive_int(args.gpus_per_node, "--gpus-per-node"),
        gpus_from_nodes=args.gpus_from_nodes,
        assume=RunAssumptions(
            ckpt_interval_min=number(args.ckpt_interval_min, "--ckpt-interval-min"),
            restart_min=number(args.restart_min, "--restart-min", strict=False),
        ),
        ckpt_write_s=number(args.ckpt_write_s, "--ckpt-write-s", strict=False),
        queue_min=number(args.queue_min, "--queue-min", strict=False),
        rf_per_node_day=rf_value(args.rf, args.force) if args.rf is not None else None,
        simulate_runs=int(number(args.simulate, "--simulate", integer=True, strict=False)),
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


def _events_wanted(args: argparse.Namespace) -> bool:
    return args.events is not None or (args.since is not None and not args.no_events)


def _accounting(args: argparse.Namespace, context: Any) -> Any:
    from slurm_triage.analytics import ingest
    from slurm_triage.analytics.progress import ProgressBar

    if args.sacct is not None:
        bar = ProgressBar(f"reading {args.sacct}", unit=" rows")
        try:
            return ingest.read_sacct_file(
                args.sacct,
                progress=bar,
                columns=args.sacct_columns,
                node_lists=_events_wanted(args),
            )
        finally:
            bar.close()
    from slurm_triage.analytics.fetch import fetch_report_sacct

    if args.sacct_columns is not None:
        raise TriageError("--sacct-columns names the columns of a --sacct file")
    since = parse_date(args.since, "--since")
    until = parse_date(args.until, "--until") if args.until else None
    text, fields = fetch_report_sacct(context.config().slurm, since, until)
    accounting = ingest.read_sacct_text(
        text,
        source=f"sacct since {args.since}",
        columns=",".join(fields),
        node_lists=_events_wanted(args),
    )
    # sacct -S leaves out the attempts that ended before `since` (attribution_join).
    return dataclasses.replace(accounting, window_start=since)


def _report(args: argparse.Namespace, context: Any) -> int:
    require_extra("report")
    from slurm_triage.analytics import report
    from slurm_triage.analytics.progress import Phases

    if args.until is not None and args.since is None:
        raise TriageError("--until needs --since")
    if args.no_events and args.since is None:
        raise TriageError("--no-events goes with --since (a --sacct report reads no events)")
    options = _options(args)
    # matplotlib takes a while to import; polars releases the GIL while it parses, so the
    # import overlaps the ingest instead of following it.
    warm = threading.Thread(target=importlib.import_module, args=(PLOTS_MODULE,), daemon=True)
    warm.start()
    accounting = _accounting(args, context)
    phases = Phases()
    with phases("reading node events and the journal"):
        events = node_events_from_args(args, context)
        journal = _attributions(args, context)
    warm.join()
    try:
        analysis, files = report.build_report(
            accounting,
            options,
            journal.lazy() if journal is not None else None,
            args.out,
            events=events,
            phase=phases,
        )
    except OSError as exc:
        raise TriageError(f"{args.out}: cannot write the report: {exc.strerror or exc}") from None
    if args.json:
        print(json.dumps(report.summary(analysis), indent=2, default=str))
    else:
        print(report.summary_text(analysis, files))
        if journal is not None:
            print(f"joined {journal.height:,} decisions from the journal")
    return 0
