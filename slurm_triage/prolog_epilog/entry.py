"""The programs slurm.conf runs: Prolog=, Epilog=, EpilogSlurmctld=, HealthCheckProgram=.

slurm.conf takes a program without arguments, so each role has its own executable. Slurm
drains a node when a Prolog or Epilog exits non-zero, so our own trouble (a bad config, a
crash) is logged and turned into exit 0 here; only a real verdict may exit non-zero.
The prolog runs the fast health screen (prolog_epilog.prolog) and the health check the
full one (prolog_epilog.healthcheck), both acting on the node through node_action; the
epilog collects root-side evidence (prolog_epilog.epilog) and EpilogSlurmctld makes the
once-per-job decision (prolog_epilog.decide).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from slurm_triage.config import Config, ConfigError, LoggingConfig, deprecations, load_config
from slurm_triage.logs import get_logger, setup_logging
from slurm_triage.prolog_epilog.job_end import SLURM_ENV

# The variables slurmd/slurmctld pass to these programs (job_end.SLURM_ENV) that we log as
# context, by their log key.
_CONTEXT = {
    "job_id": "job_id",
    "node": "node",
    "user": "user",
    "partition": "partition",
    "context": "context",
    "exit_code2": "exit_code",
    "restart_count": "restart_count",
}


def _run_role(role: str, body: Callable[[Config], int]) -> int:
    """Set up config and logging for a role, run it, and never let our own error escape."""
    program = f"slurm-triage-{role}"
    try:
        config = load_config()
        setup_logging(config.logging, program=program)
    except ConfigError as exc:
        setup_logging(LoggingConfig(), program=program)
        get_logger().error("config_invalid", role=role, error=str(exc))
        return 0
    context = {
        key: os.environ[SLURM_ENV[name]]
        for name, key in _CONTEXT.items()
        if SLURM_ENV[name] in os.environ
    }
    log = get_logger(role=role, **context)
    for line in deprecations(config):
        log.warning("config_deprecated_key", detail=line)
    try:
        return body(config)
    except Exception as exc:  # our bug must not drain a node
        log.error("role_crashed", error=f"{type(exc).__name__}: {exc}")
        return 0
    finally:
        log.info("role_done")


def _prolog(config: Config) -> int:
    from slurm_triage.prolog_epilog.prolog import prolog

    return prolog(config)


def _healthcheck(config: Config) -> int:
    from slurm_triage.prolog_epilog.healthcheck import periodic

    periodic(config)
    return 0  # slurmd only logs HealthCheckProgram's status; the drain is our own call


def _epilog(config: Config) -> int:
    from slurm_triage.prolog_epilog.epilog import run_epilog

    return run_epilog(config)


def _epilog_slurmctld(config: Config) -> int:
    from slurm_triage.prolog_epilog.decide import decide_from_env

    if config.decision.run_in == "epilog_slurmctld":
        decide_from_env(config)
    return 0


def prolog_main() -> int:
    return _run_role("prolog", _prolog)


def epilog_main() -> int:
    return _run_role("epilog", _epilog)


def epilog_slurmctld_main() -> int:
    return _run_role("epilog-slurmctld", _epilog_slurmctld)


def healthcheck_main() -> int:
    return _run_role("healthcheck", _healthcheck)


if __name__ == "__main__":
    roles = {
        "prolog": prolog_main,
        "epilog": epilog_main,
        "epilog-slurmctld": epilog_slurmctld_main,
        "healthcheck": healthcheck_main,
    }
    sys.exit(roles[sys.argv[1]]())
