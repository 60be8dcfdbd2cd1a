"""The programs slurm.conf runs: Prolog=, Epilog=, EpilogSlurmctld=, HealthCheckProgram=.

slurm.conf takes a program without arguments, so each role has its own executable. Slurm
drains a node when a Prolog or Epilog exits non-zero, so our own trouble (a bad config, a
crash) is logged and turned into exit 0 here; only a real verdict may exit non-zero.
The prolog runs the fast health screen (prolog_epilog.prolog) and the health check the
full one (prolog_epilog.healthcheck), both acting on the node through node_action; the
epilog collects root-side evidence (prolog_epilog.epilog) and EpilogSlurmctld makes the
once-per-job decision (prolog_epilog.decide).

The prolog asks the node agent first (agent.client: a Unix socket, no config read), and
only without its verdict loads the config and runs the screen here; EpilogSlurmctld asks
the decider the same way (decider.client) and decides here only when the decider did not
accept the job end. So this module imports nothing of ours at the top, and the config,
logging and the role's code are imported when a role runs in this process.
"""

from __future__ import annotations

import os
import sys

# typing's flag without importing typing (milliseconds on every job start): mypy takes any
# name TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from slurm_triage.agent.client import Reply
    from slurm_triage.config import Config
    from slurm_triage.decider.client import Reply as DeciderReply

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
    """Set up config and logging for a role, run it, and never let our own error escape:
    not a config that cannot be loaded, however it fails, nor a log line that cannot be
    written (logs.py never raises; the lines here are guarded all the same, since a
    failure in them would turn a finished role into a drain)."""
    from contextlib import suppress

    from slurm_triage.config import ConfigError, LoggingConfig, deprecations, load_config
    from slurm_triage.logs import get_logger, setup_logging, write_failures
    from slurm_triage.prolog_epilog.job_end import SLURM_ENV

    program = f"slurm-triage-{role}"
    try:
        config = load_config()
    except Exception as exc:  # a ConfigError, or whatever else a broken file provokes
        error = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
        setup_logging(LoggingConfig(), program=program)
        with suppress(Exception):
            get_logger().error("config_invalid", role=role, error=error)
        return 0
    setup_logging(config.logging, program=program)
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
        with suppress(Exception):
            log.error("role_crashed", error=f"{type(exc).__name__}: {exc}")
        return 0
    finally:
        lost = write_failures()
        with suppress(Exception):
            log.info("role_done", **({"log_write_failures": lost} if lost else {}))


def _prolog_here(reply: Reply) -> Callable[[Config], int]:
    """The screen in this process, after saying why the agent gave no verdict."""

    def body(config: Config) -> int:
        from slurm_triage.agent.client import Outcome
        from slurm_triage.logs import get_logger
        from slurm_triage.prolog_epilog.prolog import prolog

        log = get_logger(role="prolog")
        # No agent installed is a supported set-up (info); an agent that fails is not.
        level = log.info if reply.outcome == Outcome.NOT_RUNNING else log.warning
        level(
            "prolog_agent_fallback",
            outcome=str(reply.outcome),
            detail=reply.detail,
            socket=reply.socket,
        )
        _warn_settings_not_read(config, reply)
        return prolog(config)

    return body


def _warn_settings_not_read(config: Config, reply: Reply) -> None:
    """The client reads the agent's socket and waits from its environment only: say so
    when the config file sets them otherwise (the agent listens where the file says)."""
    from slurm_triage.logs import get_logger

    used = {
        "socket": reply.socket,
        "connect_timeout_s": reply.waits_s[0],
        "answer_timeout_s": reply.waits_s[1],
    }
    differ = sorted(k for k, v in used.items() if reply.socket and getattr(config.agent, k) != v)
    if differ:
        get_logger(role="prolog").warning(
            "prolog_agent_settings_not_read",
            keys=[f"agent.{k}" for k in differ],
            hint="the Prolog reads these from SLURM_TRIAGE__AGENT__* in its environment only",
        )


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


def _epilog_slurmctld_here(reply: DeciderReply) -> Callable[[Config], int]:
    """The decision in this process, after saying why the decider did not take it."""

    def body(config: Config) -> int:
        from slurm_triage.decider.client import Outcome
        from slurm_triage.logs import get_logger

        # The job it is about, as _run_role's own lines name it.
        log = get_logger(role="epilog-slurmctld", job_id=os.environ.get("SLURM_JOB_ID"))
        # No decider installed is a supported set-up (info); a decider that fails is not.
        level = log.info if reply.outcome is Outcome.NOT_RUNNING else log.warning
        level(
            "epilog_slurmctld_decider_fallback",
            outcome=str(reply.outcome),
            detail=reply.detail,
            socket=reply.socket,
        )
        return _epilog_slurmctld(config)

    return body


def _decider_lost(reply: DeciderReply) -> Callable[[Config], int]:
    """The decider accepted the job end and then gave no decision in time: it is still the
    decider's (deciding here too could act twice), so only say so."""

    def body(config: Config) -> int:
        from slurm_triage.logs import get_logger

        get_logger(role="epilog-slurmctld").warning(
            "epilog_slurmctld_decider_lost",
            detail=reply.detail,
            socket=reply.socket,
            hint="the decider's own log and journal row carry the decision",
        )
        return 0

    return body


def prolog_main() -> int:
    """Prolog=: the node agent's verdict when it gives one, else the screen run here."""
    from slurm_triage.agent.client import ask_agent

    reply = ask_agent(os.environ)
    if reply.exit_status is not None:
        return reply.exit_status
    return _run_role("prolog", _prolog_here(reply))


def epilog_main() -> int:
    return _run_role("epilog", _epilog)


def epilog_slurmctld_main() -> int:
    """EpilogSlurmctld=: the decider decides when it accepts the job end (its own log line
    and journal row say what it decided; this process loads nothing more), else the
    decision is made here. Always exit 0."""
    from slurm_triage.decider.client import Outcome, ask_decider

    reply = ask_decider(os.environ)
    if reply.outcome in (Outcome.DECIDED, Outcome.DETACHED):
        return 0
    if reply.accepted:
        return _run_role("epilog-slurmctld", _decider_lost(reply))
    return _run_role("epilog-slurmctld", _epilog_slurmctld_here(reply))


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
