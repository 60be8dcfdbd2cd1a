"""`slurm-triage config show|check|cache`: print the effective config, validate a file,
write its parsed copy (config_cache)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from slurm_triage.config import deprecations, load_config, to_toml
from slurm_triage.errors import TriageError


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "config",
        help="show the effective configuration, check a config file or write its parsed copy",
        description="Show the effective configuration, validate a config file before "
        "deploying it to the nodes, or write the parsed copy of it that the jobs' ranks read.",
    )
    actions = parser.add_subparsers(dest="config_action", metavar="ACTION")
    actions.required = True
    show = actions.add_parser(
        "show",
        help="print the effective configuration (defaults, file, env) as TOML",
        description="Print the configuration this host would use, as TOML: built-in "
        "defaults, then the config file, then SLURM_TRIAGE__SECTION__KEY overrides. "
        "With --defaults: every key with its default, what it accepts and what it does "
        "(the file contrib/config.toml.example is this output).",
    )
    show.add_argument(
        "--defaults",
        action="store_true",
        help="print the annotated built-in defaults instead (no file or overrides read)",
    )
    show.set_defaults(handler=_show)
    check = actions.add_parser(
        "check",
        help="validate a config file; exit 0 if good, 2 with the reason if not",
        description="Validate FILE: TOML syntax, known sections and keys, value types and "
        "ranges. Prints 'FILE: ok' or one line naming the bad key and what it accepts; a "
        "deprecated setting that is still honoured is a warning on stderr (exit 0).",
    )
    check.add_argument("file", type=Path, metavar="FILE")
    check.set_defaults(handler=_check)
    cache = actions.add_parser(
        "cache",
        help="write the config file's parsed copy beside it (for a read-only /etc)",
        description="Write .NAME.parsed.json beside the config file NAME (--file, else "
        "--config, $SLURM_TRIAGE_CONFIG or /etc/slurm-triage/config.toml): its text and "
        "its parse as JSON, which every program reads instead of parsing the TOML while "
        "the file is unchanged. Any program running as the file's owner writes it when it "
        "finds it stale (root's Prolog, the node agent at each refresh); run this when the "
        "image is built if /etc is read-only at run time. Only the file's owner may write "
        "it (readers ignore another user's copy). Prints where it is; exit 0 written or "
        "already up to date, 2 with the reason if the file cannot be read or parsed, its "
        "settings are invalid (as `config check` says), or the copy cannot be written.",
    )
    cache.add_argument("--file", type=Path, metavar="FILE", help="the config file")
    cache.set_defaults(handler=_cache)


def _show(args: argparse.Namespace, context: Any) -> int:
    if args.defaults:
        from slurm_triage.config_example import example_toml

        print(example_toml(), end="")
        return 0
    print(to_toml(context.config()), end="")
    return 0


def _check(args: argparse.Namespace, context: Any) -> int:
    config = load_config(args.file, env={})
    print(f"{args.file}: ok")
    for line in deprecations(config):
        print(f"{args.file}: warning: {line}", file=sys.stderr)
    return 0


def _cache(args: argparse.Namespace, context: Any) -> int:
    from slurm_triage.config import check_settings, config_path
    from slurm_triage.config_cache import CacheOutcome, refresh_cache

    path = args.file or args.config or config_path()[0]
    result = refresh_cache(path, check_settings)
    if result.outcome == CacheOutcome.INVALID:
        raise TriageError(result.reason)
    if result.outcome == CacheOutcome.WRITTEN:
        print(f"{path}: parsed copy written: {result.reason}")
    elif result.outcome == CacheOutcome.FRESH:
        print(f"{path}: parsed copy up to date: {result.reason}")
    else:
        raise TriageError(f"{path}: no parsed copy written: {result.reason}")
    return 0
