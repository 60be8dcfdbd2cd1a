"""What the per-job programs import (issue 20): every Prolog, Epilog, EpilogSlurmctld and
wrapped rank pays for each module at start-up, so the paths run here in a fresh interpreter
and what they imported is checked against a denylist (not an exact list: a small pure
module added to a path is fine; the analytics, asyncio or the journal on a job start is not).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_triage.simulate.estate import MOUNTS, NodeEstate

# Never on any per-job path: the analytics stack, the offline tools, the dev cluster,
# asyncio (structlog and tenacity can bring it), an HTTP server, structlog itself (its
# package imports asyncio; logs.py renders JSON without it).
NEVER = (
    "asyncio",
    "http.server",
    "structlog",
    "numpy",
    "polars",
    "matplotlib",
    "slurm_triage.analytics",
    "slurm_triage.twin",
    "slurm_triage.replay",
    "slurm_triage.devcluster",
    "slurm_triage.testing",
)
# Nor on the node's own paths (Prolog, wrapper): the journal, the door to Slurm, the
# policies and the actuator belong to a failure or to the controller. (subprocess is
# allowed: pynvml's ctypes.util imports it.)
NOT_ON_NODE = (
    "sqlite3",
    "tenacity",
    "concurrent.futures",
    "slurm_triage.journal",
    "slurm_triage.slurm",
    "slurm_triage.policies",
    "slurm_triage.actuator",
    "slurm_triage.cli.analytics_cmd",
    "slurm_triage.cli.twin_cmd",
    "slurm_triage.cli.devcluster_cmd",
    # secrets (hashlib, hmac, random) for one random name a squatted job directory needs.
    "secrets",
    "hashlib",
)
# Standard library a wrapped rank and `classify` leave out (issue 20): inspect, which
# dataclasses imports for one use (slurm_triage/__init__.py), and with it ast, dis and
# tokenize; shutil, which argparse's formatter imports for the terminal's width
# (cli.main._columns), and tempfile for the wrapper's scratch directory, and with them
# bz2, lzma and random. (Not datetime: a log line's time stamp no longer needs it, but
# parsing a config file does, tomllib's parser imports it, and so does the log scanner.)
STDLIB_LEFT_OUT = ("inspect", "ast", "dis", "tokenize", "shutil", "bz2", "lzma", "tempfile")
# `wrap -- true` on a node with no NVIDIA GPU (issue 20): a command that succeeds and prints
# nothing needs neither the log scanner nor the attribution engine nor the first-failure
# marker; NVML and its watcher are for nodes with GPUs; the host name comes from os.uname,
# not socket; traceback is the trainer's side of the error file.
NOT_IN_A_QUIET_SUCCESS = (
    "pynvml",
    "slurm_triage.wrapper.nvml_watch",
    "slurm_triage.attribution",
    "slurm_triage.wrapper.first_failure",
    "socket",
    "traceback",
)
# Nor what every rank's `wrap` needs no longer (issue 20): argparse with gettext and locale
# (cli.wrap_cmd reads wrap's plain arguments itself and leaves --help and errors to it), and
# pathlib with urllib.parse, ipaddress and fnmatch (the config, the record and the PCI bus
# are read with os.path), and json (its log lines and its record are written, and the record
# read back, on json's own C accelerator: slurm_triage.json_codec).
NOT_IN_WRAP = (
    "argparse",
    "gettext",
    "locale",
    "pathlib",
    "urllib",
    "ipaddress",
    "fnmatch",
    "json",
    # Nor dataclasses and with it copy (a record's fields are read by frozen.py), the ctypes
    # package (the subreaper's prctl is made from _ctypes), signal (its enums: the wrapper
    # uses _signal's functions and numbers) or syslog (loaded for a syslog destination).
    "dataclasses",
    "copy",
    "ctypes",
    "signal",
    "syslog",
)
# Nor, when the config file has its fresh parsed copy beside it (config_cache, issue 20),
# the TOML parser, with the string, datetime, typing and re modules it imports (the
# config reads its keys' Literals itself: config.declared_type; tomllib was the last user
# of typing and re on a rank's path).
NOT_IN_WRAP_WITH_A_CONFIG_COPY = ("tomllib", "string", "datetime", "typing", "re")
# A Prolog on a node that passes does not attribute anything.
NOT_IN_PROLOG = ("slurm_triage.attribution.engine", "slurm_triage.attribution.signatures")
# A Prolog the node agent answers: the client alone (socket, struct, json). None of the
# config, its TOML parser, dataclasses (and inspect under it), typing, logging, threads or
# the checks: they are what the agent keeps loaded so that a job start does not pay them.
NOT_IN_AGENT_CLIENT = (
    "slurm_triage.config",
    "tomllib",
    "dataclasses",
    "inspect",
    "typing",
    "threading",
    "slurm_triage.logs",
    "slurm_triage.nvml",
    "slurm_triage.evidence",
    "slurm_triage.health_checks",
    "slurm_triage.prolog_epilog.prolog",
    "pynvml",
    # Nor what socket, json and enum bring (each costs as much as Python's start: issue 20):
    # the client uses _socket and _json (slurm_triage.json_codec) and classes of constants.
    "socket",
    "selectors",
    "json",
    "re",
    "enum",
    "functools",
    "collections",
    "struct",
)
# A job end's decision acts on jobs and drains through actuator.jobs: the node side of the
# actuator, the node policy and the health checks belong to a health run.
NOT_IN_DECISION = (
    "slurm_triage.actuator.nodes",
    "slurm_triage.policies.nodes",
    "slurm_triage.health_checks",
    # The host name is os.uname's; stdlib logging is a detached decision's, for its
    # shutdown; tenacity is a Slurm command's retry (issue 20).
    "socket",
    "logging",
    "tenacity",
)

# A module that is only slurm_triage's stand-in for it (inspect, until its first use) was
# not imported: a stand-in has no __spec__.
# The list is taken before json is imported to write it.
REPORT = (
    "import atexit, os, sys\n"
    "def _report():\n"
    "    loaded = [n for n, m in sys.modules.items() if getattr(m, '__spec__', 1) is not None]\n"
    "    import json\n"
    "    with open(os.environ['MODULES_OUT'], 'w') as out:\n"
    "        json.dump(sorted(loaded), out)\n"
    "atexit.register(_report)\n"
)
ROOT = Path(__file__).resolve().parents[2]


def _imported(code: str, tmp_path: Path, env: dict[str, str], *, site: bool = True) -> set[str]:
    """The modules a fresh interpreter holds after running `code` (reported at exit).
    `site=False`: without the site module, so without the dev venv's editable install,
    whose finder imports re, enum and pathlib at every start (a node's install does not):
    for a path that must not import them, and needs nothing outside this tree."""
    out = tmp_path / "modules.json"
    flags = [] if site else ["-S"]
    extra = {} if site else {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, *flags, "-c", REPORT + code],
        env={**os.environ, **env, **extra, "MODULES_OUT": str(out)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.exists(), done.stderr
    return set(json.loads(out.read_text()))


def _present(modules: set[str], denied: tuple[str, ...]) -> list[str]:
    return sorted(d for d in denied if any(m == d or m.startswith(d + ".") for m in modules))


@pytest.fixture
def node_config(tmp_path: Path) -> Path:
    """A simulated 8-GPU, 4-HCA, 3-mount node that passes every check."""
    sim = tmp_path / "sim"
    NodeEstate(sim, "node1").ensure()
    mounts = ", ".join(f'"{sim}/{{node}}/mounts/{m}"' for m in MOUNTS)
    path = tmp_path / "config.toml"
    path.write_text(
        f'[logging]\ndestination = "file"\nfile = "{tmp_path}/triage.log"\nformat = "json"\n'
        f'[paths]\nstate_dir = "{tmp_path}/state"\nevidence_dir = "{tmp_path}/evidence"\n'
        f'[health]\nnvml = "simulated"\nsimulate_root = "{sim}"\n'
        f'kernel_log = "{sim}/{{node}}/kern.log"\nsysfs_root = "{sim}/{{node}}/sys"\n'
        f'mountinfo = "{sim}/{{node}}/mountinfo"\nmounts = [{mounts}]\n'
        'ib_ports = ["mlx5_0:1", "mlx5_1:1", "mlx5_2:1", "mlx5_3:1"]\nib_rate_gbps = 400\n'
    )
    return path


def test_prolog_on_a_passing_node(tmp_path: Path, node_config: Path) -> None:
    """The Prolog on a node that passes its screen imports no door, journal, policy or
    attribution engine, nothing of the offline tools, and no asyncio."""
    env = {
        "SLURM_TRIAGE_CONFIG": str(node_config),
        "SLURMD_NODENAME": "node1",
        # no agent there: the screen runs in this process
        "SLURM_TRIAGE__AGENT__SOCKET": str(tmp_path / "no-agent.sock"),
    }
    code = "from slurm_triage.prolog_epilog.entry import prolog_main\nprolog_main()\n"
    modules = _imported(code, tmp_path, {**env, "SLURM_JOB_ID": "1"})
    assert "health_run_done" in (tmp_path / "triage.log").read_text()
    assert _present(modules, NEVER + NOT_ON_NODE + NOT_IN_PROLOG) == []


def test_prolog_answered_by_the_node_agent(tmp_path: Path) -> None:
    """The Prolog whose verdict comes from the node agent imports the agent's client and
    the wire format only: no config, TOML, dataclasses, typing, logging or checks."""
    from slurm_triage.logs import setup_logging
    from tests.unit.test_agent import Node, serving

    node = Node(tmp_path, tmp_path / "run")
    setup_logging(node.config.logging, program="test-agent")
    env = {**node.env(5), "SLURM_TRIAGE_CONFIG": str(node.config_path)}
    code = (
        "import sys\nfrom slurm_triage.prolog_epilog.entry import prolog_main\n"
        "sys.exit(prolog_main())\n"
    )
    with serving(node.config):
        modules = _imported(code, tmp_path, env, site=False)
    assert [e["job_id"] for e in node.events("role_done") if e.get("via") == "agent"] == ["5"]
    assert "slurm_triage.agent.client" in modules
    assert _present(modules, NEVER + NOT_ON_NODE + NOT_IN_PROLOG + NOT_IN_AGENT_CLIENT) == []


def test_wrapper_start_to_finish(tmp_path: Path) -> None:
    """`slurm-triage wrap -- true` on a node without GPUs, start to finish (the record
    written), imports none of the other commands, the door, the journal or asyncio, and
    neither NVML nor the log scanner nor the attribution engine; and once the config file
    has its parsed copy, not the TOML parser either."""
    (tmp_path / "evidence").mkdir()
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    config = tmp_path / "wrap.toml"
    config.write_text(
        f'[logging]\ndestination = "file"\nfile = "{tmp_path}/wrap.log"\n'
        f'[paths]\nevidence_dir = "{tmp_path}/evidence"\n'
        f'[health]\nsysfs_root = "{tmp_path}/sys"\n'
    )
    code = (
        "from slurm_triage.cli.main import main\n"
        "try:\n    main(['wrap', '--', 'true'])\nexcept SystemExit:\n    pass\n"
    )
    env = {k: "" for k in os.environ if k.startswith("SLURM_")}
    env["SLURM_TRIAGE_CONFIG"] = str(config)
    # without site: the dev venv's editable finder imports pathlib at every start
    modules = _imported(code, tmp_path, env, site=False)
    assert "slurm_triage.wrapper.run" in modules
    assert (tmp_path / "evidence/local").is_dir()  # the record was written
    assert _present(modules, NEVER + NOT_ON_NODE + NOT_IN_A_QUIET_SUCCESS) == []
    assert _present(modules, STDLIB_LEFT_OUT + NOT_IN_WRAP) == []
    # That run parsed the file and, as its owner, wrote its parsed copy; the next reads it.
    assert "tomllib" in modules and (tmp_path / ".wrap.toml.parsed.json").is_file()
    modules = _imported(code, tmp_path, env, site=False)
    assert "slurm_triage.config_cache" in modules
    assert _present(modules, NEVER + NOT_ON_NODE + NOT_IN_A_QUIET_SUCCESS) == []
    assert _present(modules, STDLIB_LEFT_OUT + NOT_IN_WRAP + NOT_IN_WRAP_WITH_A_CONFIG_COPY) == []


@pytest.mark.parametrize(
    "module",
    ["slurm_triage.prolog_epilog.epilog", "slurm_triage.prolog_epilog.decide"],
)
def test_epilog_and_decision_imports(tmp_path: Path, module: str) -> None:
    """The node Epilog and EpilogSlurmctld import neither the offline tools nor asyncio."""
    code = f"import slurm_triage.prolog_epilog.entry, {module}\n"
    denied = NEVER + (NOT_IN_DECISION if module.endswith(".decide") else ())
    assert _present(_imported(code, tmp_path, {}), denied) == []


def test_classify_of_a_job_log_reads_no_kernel_tables(tmp_path: Path) -> None:
    """`slurm-triage classify --log ...` without a kernel log imports neither the kernel-log
    parser nor its line formats (~35 regexes compiled at import), nor the XID catalogue (job
    logs hold no XID), nor the config module and its TOML parser: classify reads no config."""
    log = tmp_path / "job.out"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    code = (
        "from slurm_triage.cli.main import main\n"
        "try:\n"
        f"    main(['classify', '--state', 'FAILED', '--exit-code', '1', '--log', 'n1={log}'])\n"
        "except SystemExit:\n    pass\n"
    )
    modules = _imported(code, tmp_path, {}, site=False)
    assert "slurm_triage.attribution.engine" in modules
    denied = (
        "slurm_triage.attribution.kernel",
        "slurm_triage.attribution.xid",
        "slurm_triage.config",
        "tomllib",
    )
    # Nor threading (the log writer's lock is _thread's), signal (its Signals enum is built
    # for a signal's name, which a job log's classify never needs) or typing (its modules
    # import it for type checkers only, and a record needs none of it: frozen.py).
    # Nor argparse (with gettext and locale: classify reads plain options itself), pathlib
    # (with urllib.parse and ipaddress) or dataclasses (records are frozen.Frozen).
    left_out = STDLIB_LEFT_OUT + (
        "threading",
        "signal",
        "typing",
        "argparse",
        "gettext",
        "locale",
        "pathlib",
        "dataclasses",
    )
    assert _present(modules, NEVER + denied + left_out) == []
