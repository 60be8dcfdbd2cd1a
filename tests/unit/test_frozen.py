"""`Frozen`: eq, hash and repr shared by the frozen dataclasses of the per-job programs are
the ones @dataclass(frozen=True) would have generated, and those programs use it (issue 20)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

from slurm_triage.frozen import Frozen


@dataclass(frozen=True)
class Generated:
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class Shared(Frozen):
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)


@dataclass(frozen=True, eq=False, repr=False)
class OneField(Frozen):
    value: object = None


@dataclass(frozen=True, eq=False, repr=False)
class NoField(Frozen):
    pass


@dataclass(frozen=True, kw_only=True, eq=False, repr=False)
class Child(Shared):
    extra: float = 1.0


VALUES = [
    {"name": "a"},
    {"name": "a", "count": 2, "tags": ("x", "y")},
    {"name": "a", "note": "ignored by eq and hash"},
    {"name": "b", "secret": "not shown"},
]


@pytest.mark.parametrize("left", VALUES)
@pytest.mark.parametrize("right", VALUES)
def test_eq_and_hash_are_the_generated_ones(left: dict, right: dict) -> None:
    """Equal exactly when the generated dataclass says so, with the same hash."""
    assert (Shared(**left) == Shared(**right)) is (Generated(**left) == Generated(**right))
    assert (Shared(**left) != Shared(**right)) is (Generated(**left) != Generated(**right))
    assert hash(Shared(**left)) == hash(Generated(**left))


@pytest.mark.parametrize("values", VALUES)
def test_repr_is_the_generated_one(values: dict) -> None:
    assert repr(Shared(**values)) == repr(Generated(**values)).replace("Generated", "Shared", 1)


def test_only_the_very_same_class_compares_equal() -> None:
    """As generated: another class, a subclass or a tuple of the same values is not equal."""
    assert Shared("a") != Child(name="a")
    assert Child(name="a") == Child(name="a") and Child(name="a") != Child(name="a", extra=2)
    assert Shared("a") != ("a", 0, (), "", "")
    assert Shared("a").__eq__(Generated("a")) is NotImplemented
    assert OneField(3) == OneField(3) and OneField(3) != OneField(4)
    assert hash(OneField(3)) == hash((3,)) and hash(NoField()) == hash(())
    assert NoField() == NoField() and repr(NoField()) == "NoField()"
    assert repr(Child(name="a")) == "Child(name='a', count=0, tags=(), note='', extra=1.0)"


def test_still_a_frozen_dataclass() -> None:
    """Frozen, and replace, asdict and fields work as on any dataclass."""
    item = Shared("a", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.count = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del item.name  # type: ignore[misc]
    assert dataclasses.replace(item, count=2) == Shared("a", 2)
    assert dataclasses.asdict(item)["count"] == 1
    assert [f.name for f in dataclasses.fields(Child)][-1] == "extra"
    assert {Shared("a"), Shared("a", note="x")} == {Shared("a")}


def test_a_recursive_value_is_shown_as_dots() -> None:
    holder: list[object] = []
    item = OneField(holder)
    holder.append(item)
    assert repr(item) == "OneField(value=[...])"


# What the per-job programs import: a wrapped rank (success and failure), a job end's
# decision with the command-line door, `classify`.
PER_JOB = (
    "slurm_triage.wrapper.run",
    "slurm_triage.wrapper.report",
    "slurm_triage.wrapper.first_failure",
    "slurm_triage.prolog_epilog.decide",
    "slurm_triage.slurm.cli_backend",
    "slurm_triage.observe.hooks",
    "slurm_triage.cli.classify_cmd",
    "slurm_triage.attribution.engine",
    "slurm_triage.attribution.inputs",
)


def test_every_frozen_dataclass_of_the_per_job_programs_shares_them() -> None:
    """No frozen dataclass that the per-job programs define has its eq or repr generated:
    one that does costs every job start its exec() calls again."""
    code = (
        "import dataclasses, json, sys\n"
        f"for name in {PER_JOB!r}:\n"
        "    __import__(name)\n"
        "found, generated = 0, []\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if not name.startswith('slurm_triage'):\n"
        "        continue\n"
        "    for value in list(vars(module).values()):\n"
        "        if not (isinstance(value, type) and value.__module__ == name):\n"
        "            continue\n"
        "        if dataclasses.is_dataclass(value) and value.__dataclass_params__.frozen:\n"
        "            found += 1\n"
        "            if '__eq__' in vars(value) or '__repr__' in vars(value):\n"
        "                generated.append(f'{name}.{value.__qualname__}')\n"
        "print(json.dumps([found, generated]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    found, generated = json.loads(done.stdout or "null") or (0, [done.stderr])
    assert found > 50
    assert generated == []
