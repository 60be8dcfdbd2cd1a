"""`Frozen`: the methods shared by the frozen records of the per-job programs behave as the
ones @dataclass(frozen=True) would have generated, and those programs generate none (issue 20)."""

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


class Shared(Frozen):
    name: str
    count: int = 0
    tags: tuple[str, ...] = ()
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)


class OneField(Frozen):
    value: object = None


class NoField(Frozen):
    pass


class Child(Shared, kw_only=True):
    extra: float = 1.0


VALUES = [
    {"name": "a"},
    {"name": "a", "count": 2, "tags": ("x", "y")},
    {"name": "a", "note": "ignored by eq and hash"},
    {"name": "b", "secret": "not shown"},
]


@dataclass(frozen=True)
class GeneratedInit:
    first: str
    second: int
    items: list[int] = field(default_factory=list)
    derived: int = field(default=0, init=False)
    named: float = field(default=1.0, kw_only=True)
    needed: str = field(kw_only=True, default="n")

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", self.second * 2)


class SharedInit(Frozen):
    first: str
    second: int
    items: list[int] = field(default_factory=list)
    derived: int = field(default=0, init=False)
    named: float = field(default=1.0, kw_only=True)
    needed: str = field(kw_only=True, default="n")

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", self.second * 2)


@dataclass(frozen=True, kw_only=True)
class GeneratedKeywords:
    first: str
    count: int = 0


class SharedKeywords(Frozen, kw_only=True):
    first: str
    count: int = 0


INIT_CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    (("a", 1), {}),
    (("a",), {"second": 2}),
    ((), {"first": "a", "second": 3, "items": [4], "named": 2.5, "needed": "x"}),
    (("a", 1, [5]), {"needed": "y"}),
    # The TypeErrors the generated __init__ raises:
    ((), {}),  # two missing
    (("a",), {}),  # one missing
    (("a", 1, [], 2.0), {}),  # keyword-only given positionally
    (("a", 1), {"first": "b"}),  # twice
    (("a", 1), {"derived": 3}),  # init=False
    (("a", 1), {"unknown": 1}),
]


def _outcome(cls: type, args: tuple[object, ...], kwargs: dict[str, object]) -> object:
    try:
        made = cls(*args, **kwargs)
    except TypeError as exc:
        # The message names the class and the argument; the rest is the generated text.
        return ("TypeError", str(exc).replace(cls.__qualname__ + ".", ""))
    return {f.name: getattr(made, f.name) for f in dataclasses.fields(made)}


@pytest.mark.parametrize(("args", "kwargs"), INIT_CALLS)
def test_init_takes_and_refuses_what_the_generated_one_does(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    """Positional and keyword arguments, defaults, default_factory (a new value each time),
    init=False, keyword-only fields and __post_init__, and the same TypeErrors."""
    assert _outcome(SharedInit, args, kwargs) == _outcome(GeneratedInit, args, kwargs)


def test_a_keyword_only_class_takes_no_positional_argument() -> None:
    for args, kwargs in [(("a",), {}), ((), {}), ((), {"first": "a", "count": 2})]:
        made = _outcome(SharedKeywords, args, kwargs)
        assert made == _outcome(GeneratedKeywords, args, kwargs)
    assert _outcome(SharedKeywords, (), {"first": "a"}) == {"first": "a", "count": 0}
    assert SharedInit("a", 1).items is not SharedInit("a", 1).items
    assert SharedKeywords.__match_args__ == GeneratedKeywords.__match_args__ == ()
    assert SharedInit.__match_args__ == GeneratedInit.__match_args__ == ("first", "second", "items")


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


def test_the_per_job_programs_generate_no_method_for_a_frozen_record() -> None:
    """Every frozen dataclass the per-job programs define is a Frozen one and has none of
    @dataclass's methods generated: one that has costs every job start its exec() calls
    again (a mutable dataclass, which Frozen is not for, still may)."""
    code = (
        "import dataclasses, json, sys\n"
        "from slurm_triage.frozen import Frozen\n"
        f"for name in {PER_JOB!r}:\n"
        "    __import__(name)\n"
        "shared, generated = 0, []\n"
        "for name, module in list(sys.modules.items()):\n"
        "    if not name.startswith('slurm_triage'):\n"
        "        continue\n"
        "    for value in list(vars(module).values()):\n"
        "        if not (isinstance(value, type) and value.__module__ == name):\n"
        "            continue\n"
        "        if not dataclasses.is_dataclass(value):\n"
        "            continue\n"
        "        made = {'__init__', '__setattr__', '__eq__', '__repr__'} & set(vars(value))\n"
        "        if issubclass(value, Frozen) and not made:\n"
        "            shared += 1\n"
        "        elif issubclass(value, Frozen) or value.__dataclass_params__.frozen:\n"
        "            generated.append(f'{name}.{value.__qualname__}')\n"
        "print(json.dumps([shared, generated]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    shared, generated = json.loads(done.stdout or "null") or (0, [done.stderr])
    assert shared > 60
    assert generated == []


def test_inspect_loads_on_first_use_and_is_the_real_module() -> None:
    """dataclasses' inspect is a stand-in until used (slurm_triage/__init__.py): a record
    without a docstring gets one without it, a plain @dataclass without one still gets
    inspect.signature's, and then `import inspect` is the real module everywhere."""
    code = (
        "import sys, json\n"
        "from slurm_triage.frozen import Frozen\n"
        "import dataclasses as d\n"
        "class Plain(Frozen):\n    a: int\n    b: str = ''\n"
        "before = getattr(sys.modules.get('inspect'), '__spec__', None) is not None\n"
        "@d.dataclass\nclass Generated:\n    a: int\n"
        "import inspect\n"
        "print(json.dumps([before, Plain.__doc__, Generated.__doc__,\n"
        "    inspect is sys.modules['inspect'] and inspect.__spec__ is not None,\n"
        "    str(inspect.signature(Generated))]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert json.loads(done.stdout or "null") == [
        False,
        "Plain(a, b)",
        "Generated(a: int)",
        True,
        "(a: int) -> None",
    ], done.stderr


def test_every_record_s_annotations_resolve_at_run_time() -> None:
    """typing.get_type_hints works on every record of the per-job programs (the config
    example and the twin use it): their modules import for type checkers only what no field
    names, and Frozen's own __dataclass_fields__ annotation is for type checkers only."""
    import importlib
    import typing

    for name in PER_JOB:
        importlib.import_module(name)

    def subclasses(cls: type) -> list[type]:
        return [s for sub in cls.__subclasses__() for s in (sub, *subclasses(sub))]

    records = {c for c in subclasses(Frozen) if c.__module__.startswith("slurm_triage.")}
    assert len(records) > 60
    for record in records:
        typing.get_type_hints(record)
