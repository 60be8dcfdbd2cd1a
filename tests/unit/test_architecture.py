"""The import and call rules of docs/ARCHITECTURE.md, checked by parsing the source (ast).

Each rule is checked on every module of slurm_triage, and each checker is itself checked on
a small example that breaks the rule, so a rule that could no longer fail would show.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from slurm_triage.testing import MUTATING

PACKAGE = Path(__file__).resolve().parents[2] / "slurm_triage"


@dataclass(frozen=True)
class Module:
    name: str  # dotted: slurm_triage.health_checks.gpu
    path: Path
    tree: ast.Module


def modules() -> Iterator[Module]:
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        yield Module(".".join(parts), path, ast.parse(path.read_text(), str(path)))


# -- only the actuator changes Slurm -----------------------------------------------------

# The door itself, the actuator, and the FakeDoor that tests drive.
MAY_MUTATE = ("slurm_triage.slurm", "slurm_triage.actuator", "slurm_triage.testing")


def _is_door_class(node: ast.ClassDef) -> bool:
    """A door implementation (a subclass of SlurmDoor): it forwards its own methods."""
    return any(ast.unparse(base).endswith("SlurmDoor") for base in node.bases)


def _door_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """Names that hold a door in a function: parameters annotated with a door type, and
    names assigned from open_door(...)."""
    names = set()
    for arg in [*func.args.args, *func.args.kwonlyargs]:
        if arg.annotation is not None and "Door" in ast.unparse(arg.annotation):
            names.add(arg.arg)
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and "open_door(" in ast.unparse(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _receiver_is_a_door(receiver: ast.expr, door_names: set[str]) -> bool:
    text = ast.unparse(receiver)
    last = text.rsplit(".", 1)[-1]
    return (
        (isinstance(receiver, ast.Name) and receiver.id in door_names)
        or "door" in last.lower()
        or "open_door(" in text
    )


def mutating_calls(tree: ast.AST) -> list[str]:
    """`receiver.method(...)` calls of the door's mutating methods outside door classes."""
    found: list[str] = []

    def visit(node: ast.AST, door_names: set[str]) -> None:
        if isinstance(node, ast.ClassDef) and _is_door_class(node):
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            door_names = door_names | _door_names(node)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATING
            and _receiver_is_a_door(node.func.value, door_names)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}")
        for child in ast.iter_child_nodes(node):
            visit(child, door_names)

    visit(tree, set())
    return found


def test_the_mutating_call_checker_finds_a_call() -> None:
    """Door calls by parameter, attribute and open_door are found; a door class is not."""
    source = """
def act(door: SlurmDoor, other: Thing):
    door.drain("node1", "r")
    other.drain("node1", "r")
def act2(config):
    d = open_door(config.slurm)
    d.resume("node1")
    self.door.requeue(7)
class Recording(SlurmDoor):
    def requeue(self, job_id):
        self.inner_door.requeue(job_id)
"""
    assert mutating_calls(ast.parse(source)) == [
        "line 3: door.drain",
        "line 7: d.resume",
        "line 8: self.door.requeue",
    ]


def test_only_the_actuator_calls_the_doors_mutating_methods() -> None:
    """Every change to Slurm state goes through slurm_triage.actuator."""
    offenders = {
        m.name: calls
        for m in modules()
        if not m.name.startswith(MAY_MUTATE) and (calls := mutating_calls(m.tree))
    }
    assert offenders == {}


# -- which package may import which (docs/ARCHITECTURE.md) ----------------------------------

# A package is a folder or a top-level module of slurm_triage; each may import only these.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "taxonomy": set(),
    "job_state": set(),
    "hostlist": set(),
    "deadline": set(),
    "clock": set(),
    "atomic": set(),
    "gpu_ids": set(),
    "config": {"config_cache", "errors", "taxonomy"},
    "config_cache": {"atomic", "errors"},
    "config_example": {"config", "taxonomy"},
    "logs": {"config"},
    "simulate": {"atomic", "errors"},
    "nvml": {"config", "simulate"},
    "evidence": {"atomic", "deadline", "errors", "job_state", "logs", "taxonomy"},
    "attribution": {"errors", "evidence", "hostlist", "job_state", "taxonomy"},
    "health_checks": {
        "atomic",
        "attribution",
        "config",
        "deadline",
        "evidence",
        "gpu_ids",
        "logs",
        "nvml",
        "taxonomy",
    },
    "journal": {"errors"},
    "slurm": {"config", "deadline", "errors", "hostlist", "job_state", "logs"},
    "policies": {"config", "health_checks", "job_state", "journal", "slurm", "taxonomy"},
    "actuator": {"logs", "policies", "slurm"},
    "observe": {
        "actuator",
        "atomic",
        "config",
        "errors",
        "health_checks",
        "journal",
        "logs",
        "policies",
        "taxonomy",
    },
    "wrapper": {
        "atomic",
        "attribution",
        "config",
        "evidence",
        "gpu_ids",
        "logs",
        "nvml",
        "taxonomy",
    },
    "unix_socket": {"errors"},
    "agent": {
        "config",
        "config_cache",
        "errors",
        "evidence",
        "gpu_ids",
        "health_checks",
        "logs",
        "nvml",
        "unix_socket",
    },
    "decider": {"config", "errors", "logs", "unix_socket"},
    "testing": {"policies", "slurm"},
    "analytics": {"config", "errors", "hostlist", "journal", "slurm", "taxonomy"},
    "devcluster": {"actuator", "config", "errors", "logs", "simulate", "slurm"},
}
# `frozen`, the base of the frozen dataclasses that cost less to define, and `json_codec`,
# json.dumps without importing json, are leaves that every package may import.
for _allowed in ALLOWED.values():
    _allowed.update(("frozen", "json_codec"))
ALLOWED["frozen"] = set()
ALLOWED["json_codec"] = set()
# The programs and the tools on top may import what is below them, but not each other's
# tops (cli imports everything; nothing imports cli).
_TOOLS = {"cli", "devcluster", "twin", "replay", "analytics", "prolog_epilog", "wrapper"}
_BELOW = {p for p in ALLOWED if p not in _TOOLS} | {"hostlist", "config_example"}
ALLOWED["prolog_epilog"] = _BELOW - {"simulate", "testing", "config_example"}
ALLOWED["replay"] = _BELOW | {"analytics", "prolog_epilog"}
ALLOWED["twin"] = _BELOW | {"analytics", "replay", "prolog_epilog"}
ALLOWED["cli"] = set(ALLOWED) | _TOOLS | {"__main__"}
ALLOWED["__main__"] = {"cli"}

# Pure data modules policies may read; every other module of these packages does I/O.
PURE_MODULES = {
    "slurm_triage.slurm.model",
    "slurm_triage.health_checks.result",
    "slurm_triage.journal.records",
}


def imports_of(tree: ast.AST) -> list[str]:
    """Every slurm_triage module a module imports (function-level and TYPE_CHECKING ones
    too: a cycle through a type is still a cycle), as dotted names."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found += [f"{node.module}.{a.name}" for a in node.names]
    return [name for name in found if name.startswith("slurm_triage.")]


def _package(dotted: str) -> str:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else ""


def _known(dotted: str) -> bool:
    """Whether a dotted name is one of our modules or packages (not a name in one)."""
    path = PACKAGE.parent.joinpath(*dotted.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def package_edges(mods: list[Module]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for m in mods:
        source = _package(m.name)
        for target in (_package(i) for i in imports_of(m.tree) if _known(i)):
            if target != source:
                edges.setdefault(source, set()).add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Pairs (a, b) where a imports b and b reaches a again."""

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    return sorted((a, b) for a in edges for b in edges[a] if a in reach(b))


def test_the_cycle_finder_finds_a_cycle() -> None:
    """a -> b -> c -> a is found; a tree is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [("a", "b"), ("b", "c"), ("c", "a")]
    assert cycles({"a": {"b", "c"}, "b": {"c"}}) == []


def test_no_import_cycle_between_packages() -> None:
    assert cycles(package_edges(list(modules()))) == []


def test_each_package_imports_only_what_the_map_allows() -> None:
    """docs/ARCHITECTURE.md lists, for each package, the packages it may import."""
    edges = package_edges(list(modules()))
    assert set(edges) <= set(ALLOWED), "a new package: add it to the map and to ALLOWED"
    wrong = {p: sorted(t - ALLOWED[p]) for p, t in edges.items() if t - ALLOWED[p]}
    assert wrong == {}


def test_policies_import_no_io() -> None:
    """Policies read only data types of the other packages: no door, no journal store, no
    check runner, no subprocess, socket, sqlite3 or file module."""
    io_stdlib = {"subprocess", "socket", "sqlite3", "os", "pathlib", "shutil", "urllib", "http"}
    found = {}
    for m in modules():
        if not m.name.startswith("slurm_triage.policies"):
            continue
        ours = {
            i
            for i in imports_of(m.tree)
            if _known(i) and _package(i) != "policies" and i.count(".") > 1
        }
        stdlib = {
            a.name.split(".")[0]
            for n in ast.walk(m.tree)
            if isinstance(n, ast.Import)
            for a in n.names
        } | {
            n.module.split(".")[0]
            for n in ast.walk(m.tree)
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0
        }
        bad = sorted(i for i in ours if i not in PURE_MODULES and not _leaf(i))
        bad += sorted(stdlib & io_stdlib)
        if bad:
            found[m.name] = bad
    assert found == {}


def _leaf(dotted: str) -> bool:
    """A top-level module without I/O of its own (config, taxonomy, job_state, ...)."""
    return dotted.count(".") == 1 and _package(dotted) in {
        "config",
        "taxonomy",
        "job_state",
        "errors",
        "hostlist",
    }


# -- only slurm/ runs Slurm's commands -------------------------------------------------------

SLURM_COMMANDS = {"scontrol", "sacct", "sacctmgr", "sinfo", "squeue", "scancel", "sbatch", "srun"}
# devcluster runs a local cluster.
MAY_RUN_SLURM = ("slurm_triage.slurm", "slurm_triage.devcluster")


def slurm_commands(tree: ast.AST) -> list[str]:
    """Argument lists that start with a Slurm command: `["sacct", ...]`, and a command line
    starting with one given to a call that starts a process (`subprocess.run("scontrol
    ...")`); a message that names a command (`print("sacct")`) is no command."""
    found = []
    for node in ast.walk(tree):
        first: ast.expr | None = None
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
        elif isinstance(node, ast.Call) and node.args and _launches(node):
            first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            word = first.value.split(" ")[0].rsplit("/", 1)[-1]
            if word in SLURM_COMMANDS:
                found.append(f"line {node.lineno}: {first.value}")
    return found


def _launches(call: ast.Call) -> bool:
    """A call that starts a process (subprocess's, os.exec*, a Runner's run)."""
    name = ast.unparse(call.func).rsplit(".", 1)[-1]
    return name in {"run", "Popen", "check_output", "check_call", "call"} or name.startswith(
        ("exec", "spawn")
    )


def test_the_slurm_command_finder_finds_a_command() -> None:
    source = 'run(["sacct", "-X"]); subprocess.run("scontrol show job 1"); print("sacct")'
    assert sorted(slurm_commands(ast.parse(source))) == [
        "line 1: sacct",
        "line 1: scontrol show job 1",
    ]


def test_only_the_door_runs_slurm_commands() -> None:
    offenders = {
        m.name: found
        for m in modules()
        if not m.name.startswith(MAY_RUN_SLURM) and (found := slurm_commands(m.tree))
    }
    assert offenders == {}


# -- only journal/ opens SQLite --------------------------------------------------------------


def stdlib_imports(tree: ast.AST) -> set[str]:
    """The top-level names of every module a module imports (`import a.b`, `from a import`)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_the_import_finder_finds_sqlite3() -> None:
    source = "def f():\n    import sqlite3\nfrom sqlite3 import connect\nimport os.path\n"
    assert stdlib_imports(ast.parse(source)) == {"sqlite3", "os"}


def test_only_the_journal_opens_sqlite() -> None:
    """The journal's file is read and written through slurm_triage.journal alone (the
    analytics and the replay read it with journal.reader)."""
    offenders = sorted(
        m.name
        for m in modules()
        if not m.name.startswith("slurm_triage.journal") and "sqlite3" in stdlib_imports(m.tree)
    )
    assert offenders == []


# -- the node programs stay light ------------------------------------------------------------

HEAVY = ("slurm_triage.analytics", "polars", "numpy", "matplotlib", "pandas")
LIGHT_PROGRAMS = (
    "slurm_triage.wrapper",
    "slurm_triage.cli.wrap_cmd",
    "slurm_triage.prolog_epilog.entry",
    "slurm_triage.prolog_epilog.prolog",
    "slurm_triage.prolog_epilog.epilog",
    "slurm_triage.prolog_epilog.healthcheck",
    "slurm_triage.prolog_epilog.decide",
)


def module_level_imports(tree: ast.Module) -> list[str]:
    """What a module imports when it is imported (not inside functions, not for types)."""
    found = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node) if not isinstance(node, ast.FunctionDef | ast.ClassDef) else ():
            if isinstance(inner, ast.Import):
                found += [a.name for a in inner.names]
            elif isinstance(inner, ast.ImportFrom) and inner.module and inner.level == 0:
                found.append(inner.module)
                found += [f"{inner.module}.{a.name}" for a in inner.names]
    return found


def test_module_level_imports_leave_out_functions_and_types() -> None:
    source = """
import polars
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    import numpy
def later():
    import matplotlib
"""
    assert module_level_imports(ast.parse(source)) == ["polars", "typing", "typing.TYPE_CHECKING"]


def test_the_node_programs_never_load_the_analytics() -> None:
    """The wrapper and the slurm.conf programs import neither the analytics nor numpy,
    polars, pandas or matplotlib when they start (shared/DESIGN.md's rule)."""
    by_name = {m.name: m for m in modules()}
    offenders = {}
    for program in LIGHT_PROGRAMS:
        seen, todo = set(), [program]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            parts = name.split(".")
            # importing a.b.c runs a/__init__ and a.b/__init__ first
            todo += [
                ".".join(parts[:i]) for i in range(2, len(parts)) if ".".join(parts[:i]) in by_name
            ]
            if name in by_name:
                todo += module_level_imports(by_name[name].tree)
        heavy = sorted(n for n in seen if n.startswith(HEAVY))
        if heavy:
            offenders[program] = heavy
    assert offenders == {}


# -- one definition per concept (issue 15) ---------------------------------------------------


def module_constants(tree: ast.Module, value: object) -> list[str]:
    """Module-level names assigned the literal `value`."""
    found = []
    for node in tree.body:
        value_node: ast.expr | None
        if isinstance(node, ast.Assign):
            value_node, targets = node.value, node.targets
        elif isinstance(node, ast.AnnAssign):
            value_node, targets = node.value, [node.target]
        else:
            continue
        if isinstance(value_node, ast.Constant) and value_node.value == value:
            found += [ast.unparse(t) for t in targets]
    return found


def test_the_constant_finder_finds_a_constant() -> None:
    source = 'A = "triage: "\nB: str = "triage: "\nC = "other"\ndef f():\n    D = "triage: "\n'
    assert module_constants(ast.parse(source), "triage: ") == ["A", "B"]


def test_our_drain_prefix_is_defined_once() -> None:
    """The prefix of our drain reasons lives in taxonomy; the policies, the analytics and the
    replay read it from there instead of spelling it again."""
    defined = {m.name: names for m in modules() if (names := module_constants(m.tree, "triage: "))}
    assert defined == {"slurm_triage.taxonomy": ["DRAIN_PREFIX"]}


def class_definitions(name: str) -> list[str]:
    """The modules that define a class called `name`."""
    return [
        m.name
        for m in modules()
        if any(isinstance(n, ast.ClassDef) and n.name == name for n in ast.walk(m.tree))
    ]


def test_a_job_end_is_defined_once() -> None:
    """One JobEnd: the replay and the twin wrap the slurm.conf programs' JobEnd with the
    attribution (AttributedEnd) instead of defining a job end of their own."""
    assert class_definitions("JobEnd") == ["slurm_triage.prolog_epilog.job_end"]
