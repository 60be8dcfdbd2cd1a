"""Policy settings to try: the site's own config, and variants of it named on the command
line as `NAME=KEY=VALUE[,KEY=VALUE...]`.

KEY is any key of the config's [policy] table (max_node_failure_requeues,
lemon_failed_jobs, backoff_base_s, cant_fit, ...), a circuit-breaker key of [health]
(breaker_max_share, breaker_min_nodes, breaker_window_s), or a switch: `lemons` (off sets
the lemon thresholds out of reach), `repair` (off: nodes we drain stay out) and, in the
twin, `prolog`. Values are read exactly as the config reads SLURM_TRIAGE__SECTION__KEY
overrides, so a bad key or value is the config's own one-line error. A list value
(requeue_causes, ...) cannot hold commas here: they separate the keys.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from slurm_triage.config import ConfigError, HealthConfig, PolicyConfig, config_from_mapping
from slurm_triage.errors import TriageError

POLICY_KEYS = tuple(f.name for f in dataclasses.fields(PolicyConfig))
BREAKER_KEYS = tuple(f.name for f in dataclasses.fields(HealthConfig) if "breaker" in f.name)
SWITCHES = ("lemons", "repair", "prolog")
# Thresholds no node's history reaches: lemon detection off.
NO_LEMONS = {
    "lemon_failed_jobs": 100000,
    "lemon_distinct_xids": 1000,
    "lemon_times_drained": 100000,
}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,39}$")


class SettingError(TriageError):
    """A policy variant is malformed; the message names the variant and the key."""


@dataclass(frozen=True)
class Variant:
    """A named change of the site's [policy] and breaker, with the switches."""

    name: str
    policy: PolicyConfig
    health: HealthConfig
    repair: bool = True
    prolog: bool = True


def variant(
    text: str,
    base: PolicyConfig | None = None,
    health: HealthConfig | None = None,
    reserved: tuple[str, ...] = (),
) -> Variant:
    """Parse `NAME=KEY=VALUE[,KEY=VALUE...]` on top of `base` and `health`."""
    name, sep, rest = text.partition("=")
    name = name.strip()
    if not sep or not _NAME.match(name) or name in reserved:
        raise SettingError(
            f"bad variant {text!r}; expected NAME=KEY=VALUE[,KEY=VALUE...] with a new NAME"
        )
    env: dict[str, str] = {}
    switches = {"repair": True, "prolog": True}
    for item in (part.strip() for part in rest.split(",")):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key:
            raise SettingError(f"variant {name}: {item!r} is not KEY=VALUE")
        if key in SWITCHES:
            on = _switch(name, key, value)
            if key == "lemons" and not on:
                env |= {f"SLURM_TRIAGE__POLICY__{k.upper()}": str(v) for k, v in NO_LEMONS.items()}
            elif key != "lemons":
                switches[key] = on
        elif key in POLICY_KEYS:
            env[f"SLURM_TRIAGE__POLICY__{key.upper()}"] = value
        elif key in BREAKER_KEYS:
            env[f"SLURM_TRIAGE__HEALTH__{key.upper()}"] = value
        else:
            valid = ", ".join((*SWITCHES, *POLICY_KEYS, *BREAKER_KEYS))
            raise SettingError(f"variant {name}: unknown key {key!r}; valid keys: {valid}")
    tables = {
        "policy": dataclasses.asdict(base or PolicyConfig()),
        "health": dataclasses.asdict(health or HealthConfig()),
    }
    try:
        config = config_from_mapping(tables, env, source=f"variant {name}")
    except ConfigError as exc:
        raise SettingError(f"variant {name}: {exc}") from None
    return Variant(name, config.policy, config.health, switches["repair"], switches["prolog"])


def _switch(name: str, key: str, value: str) -> bool:
    lowered = value.lower()
    if lowered in ("on", "true", "yes", "1"):
        return True
    if lowered in ("off", "false", "no", "0"):
        return False
    raise SettingError(f"variant {name}: {key} must be on or off, not {value!r}")


def changes(
    policy: PolicyConfig,
    health: HealthConfig,
    *,
    repair: bool,
    prolog: bool,
    against: tuple[PolicyConfig, HealthConfig] | None = None,
) -> list[str]:
    """What differs from `against` (the built-in defaults when None), in words."""
    out = []
    default_policy, default_health = against or (PolicyConfig(), HealthConfig())
    lemons_off = all(getattr(policy, k) == v for k, v in NO_LEMONS.items())
    if lemons_off and not all(getattr(default_policy, k) == v for k, v in NO_LEMONS.items()):
        out.append("lemons off")
    for key in POLICY_KEYS:
        value = getattr(policy, key)
        if value != getattr(default_policy, key) and not (lemons_off and key in NO_LEMONS):
            out.append(f"{key}={value}")
    out += [
        f"{k}={getattr(health, k)}"
        for k in BREAKER_KEYS
        if getattr(health, k) != getattr(default_health, k)
    ]
    out += [f"{k} off" for k, on in (("repair", repair), ("prolog", prolog)) if not on]
    return out


@dataclass(frozen=True)
class Setting:
    """One policy setting a replay tries, with the assumptions its figures use."""

    name: str
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    health: HealthConfig = field(default_factory=HealthConfig)
    repair: bool = True
    repair_h: float = 24.0  # a node we drain is back this long after (repair on)
    crash_loop_requeues: int = 5  # a job requeued after this many failures is a crash loop
    # The cluster's size (breaker, must-fit); 0: the nodes history names.
    cluster_nodes: int = 0
    restart_min: float = 5.0  # u0, for the loss a failure costs
    ckpt_interval_min: float = 60.0  # dt: a failure loses half of it on average
    # What this setting is a variant of (the config's); None for the config itself.
    base: tuple[PolicyConfig, HealthConfig] | None = None

    def describe(self) -> str:
        if self.base is None:
            changed = changes(self.policy, self.health, repair=True, prolog=True)
            where = f" (differs from the defaults: {', '.join(changed)})" if changed else ""
            return f"the config in force{where}"
        changed = changes(
            self.policy, self.health, repair=self.repair, prolog=True, against=self.base
        )
        return "the config" + (f" with {', '.join(changed)}" if changed else ", unchanged")

    def lost_per_failure_h(self, elapsed_s: int) -> float:
        """GPU-hours per GPU a failure costs (the paper's estimate): the work since the
        last checkpoint, min(run, dt/2), plus the restart."""
        return min(elapsed_s / 3600.0, self.ckpt_interval_min / 120.0) + self.restart_min / 60.0


def settings(
    base: PolicyConfig,
    health: HealthConfig,
    tries: list[str],
    **assumptions: float | int,
) -> list[Setting]:
    """The site's config (`config`) and each `--try`, with the same assumptions."""
    out = [Setting("config", base, health, **assumptions)]  # type: ignore[arg-type]
    for text in tries:
        v = variant(text, base, health, reserved=tuple(s.name for s in out))
        if not v.prolog:
            raise SettingError(f"variant {v.name}: prolog has no meaning in a replay")
        out.append(
            Setting(v.name, v.policy, v.health, v.repair, base=(base, health), **assumptions)  # type: ignore[arg-type]
        )
    return out
