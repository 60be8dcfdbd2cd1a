"""Argument values of the analytics commands: numbers, r_f with its units guard, dates.

Every refusal is a one-line TriageError (exit 2), never a traceback.
"""

from __future__ import annotations

import argparse
import math
from datetime import datetime
from typing import Any

from slurm_triage.errors import TriageError

RF_HELP = (
    "failure rate r_f in failures per node-day (Kokolis et al.: RSC-1 6.5e-3, i.e. 6.50 per "
    "1000 node-days; RSC-2 2.34e-3)"
)
# Above this many failures per node-day (a node failing every 10 days), a value is almost
# surely the paper's per-1000 figure typed as is: 6.5 instead of 6.5e-3.
RF_PLAUSIBLE_MAX = 0.1
FORCE_HELP = f"accept an --rf above {RF_PLAUSIBLE_MAX:g} per node-day"


def number(
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


def positive_int(text: str, flag: str) -> int:
    return int(number(text, flag, integer=True))


def rf_value(text: str, force: bool = False) -> float:
    """--rf in failures per node-day. A value above RF_PLAUSIBLE_MAX is refused with the
    per-node-day reading of it and a hint, unless `force`: `--rf 6.5` would otherwise give
    an MTTF of minutes for any large job ("MTTF 0.00 h") without a word."""
    value = float(number(text, "--rf"))
    if value > RF_PLAUSIBLE_MAX and not force:
        raise TriageError(
            f"--rf {text} means {value:g} failures per node-day (each node failing every "
            f"{24 / value:.3g} h); r_f is per node-day: did you mean {value:g}e-3 "
            f"({value:g} per 1000 node-days)? Add --force to use {text} as given"
        )
    return value


def parse_date(text: str, flag: str) -> datetime:
    """A date for sacct: YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]; one-line error otherwise."""
    try:
        return datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise TriageError(f"{flag}: not a date {text!r} (use YYYY-MM-DD[THH:MM[:SS]])") from None


def require_extra(what: str) -> None:
    """The analytics extra is installed, or a one-line error saying how to get it."""
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
        import polars  # noqa: F401
    except ImportError as exc:
        raise TriageError(
            f"{what} needs the analytics extra ({exc.name} is missing): "
            "pip install 'slurm-triage[analytics]'"
        ) from None


def node_events_from_args(args: argparse.Namespace, context: Any) -> Any:
    """Node events: the saved file, else (with --since) through the Slurm door."""
    from slurm_triage.analytics import node_events

    if args.events is not None:
        return node_events.read_events_file(args.events)
    if args.since is None or args.no_events:
        return None
    from slurm_triage.analytics.fetch import fetch_node_events

    since = parse_date(args.since, "--since")
    until = parse_date(args.until, "--until") if args.until else None
    return fetch_node_events(context.config().slurm, since, until)
