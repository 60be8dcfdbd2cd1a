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
