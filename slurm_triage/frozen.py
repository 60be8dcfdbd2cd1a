"""`Frozen`: the base of the frozen records that cost nothing to define (issue 20).

Python 3.11's @dataclass writes the source of every method it generates and compiles it
with exec() when the class is defined, in every process: about 1 ms for a frozen class
(__init__, __setattr__, __delattr__, and __eq__, __hash__, __repr__ unless turned off).
The per-job programs define dozens of them at each start (a wrapped rank 30-odd, a job
end's decision 60-odd): 28 ms of a wrapped `true`, 42 ms of a decision.

A class that derives from `Frozen` is a frozen dataclass without the @dataclass line:

    class StepIdentity(Frozen):
        job_id: str
        restart: int = 0

    class Window(Frozen, kw_only=True):  # as @dataclass(frozen=True, kw_only=True)
        ...

Its fields are read by `dataclasses` itself (so fields(), replace(), asdict(), field(),
__match_args__ and is_dataclass() are the standard ones) with nothing generated; the
methods it would have generated are written once, here, and read the class's fields from
a layout worked out on its first use: __init__ (positional and keyword arguments as the
generated one takes them, defaults, default_factory, init=False, kw_only, __post_init__,
the same TypeErrors), __setattr__ and __delattr__ (FrozenInstanceError), __eq__ (the
compared fields as a tuple, equal only to an instance of the very same class), __hash__
(the hashed fields) and __repr__ (`Name(field=value, ...)`, recursion as `...`). mypy
knows it as a frozen dataclass through `dataclass_transform` (PEP 681).
The price is a lookup per call and an __init__ run by the interpreter rather than
compiled for the class: about 1 µs more per construction.

tests/unit/test_frozen.py holds every method to the generated one, and the per-job
programs to defining their frozen records this way.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
# A job log's classify imports nothing else of typing (~5 ms), and a record needs none of it:
# at run time dataclass_transform only marks the class for type checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, ClassVar, dataclass_transform

    _Getter = Callable[[Any], tuple[Any, ...]]
else:

    def dataclass_transform(**_kwargs: object) -> Callable[[type], type]:
        return lambda cls: cls


_MISSING: Any = dataclasses.MISSING
_set = object.__setattr__


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
class Frozen:
    """A frozen dataclass's methods, as @dataclass(frozen=True) would generate them."""

    __slots__ = ()
    if TYPE_CHECKING:  # for dataclasses.fields() and replace() to type-check; typing.get_type_hints
        # of a record must not meet it at run time, where ClassVar is not imported here.
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __init_subclass__(cls, *, kw_only: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Else @dataclass writes one with inspect.signature: inspect loads on first use
        # (slurm_triage/__init__.py), and a record must not be that use.
        if not cls.__doc__:
            cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', ()))})"
        # Fields only: with init, repr, eq and frozen off, @dataclass generates no method.
        dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        init = _INITS.get(self.__class__) or _init_layout(self.__class__)
        if len(args) > len(init.positional):
            raise TypeError(_too_many(self.__class__, init, len(args)))
        for name, value in zip(init.positional, args, strict=False):
            if name in kwargs:
                raise TypeError(
                    f"{self.__class__.__qualname__}.__init__() got multiple values for "
                    f"argument {name!r}"
                )
            _set(self, name, value)
        missing = []
        for name, default, factory in init.rest[len(args) :]:
            if name in kwargs:
                _set(self, name, kwargs.pop(name))
            elif default is not _MISSING:
                _set(self, name, default)
            elif factory is not _MISSING:
                _set(self, name, factory())
            else:
                missing.append(name)
        if missing:
            raise TypeError(_missing(self.__class__, init, missing))
        if kwargs:
            raise TypeError(
                f"{self.__class__.__qualname__}.__init__() got an unexpected keyword "
                f"argument {next(iter(kwargs))!r}"
            )
        for name, default, factory in init.not_init:
            if default is not _MISSING:
                _set(self, name, default)
            elif factory is not _MISSING:
                _set(self, name, factory())
        if init.post_init:
            self.__post_init__()  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = _layout(self.__class__).compared
        return bool(compared(self) == compared(other))

    def __hash__(self) -> int:
        return hash(_layout(self.__class__).hashed(self))

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in _layout(self.__class__).shown)
        return f"{self.__class__.__qualname__}({shown})"


class _Init:
    """What a class's __init__ reads, worked out on its first construction."""

    __slots__ = ("positional", "required", "rest", "not_init", "post_init")

    def __init__(
        self,
        positional: tuple[str, ...],  # the init fields that are not keyword-only, in order
        required: int,  # how many of them have no default
        rest: tuple[tuple[str, Any, Any], ...],  # every init field: name, default, factory
        not_init: tuple[tuple[str, Any, Any], ...],  # init=False fields with a default
        post_init: bool,
    ) -> None:
        self.positional, self.required, self.rest = positional, required, rest
        self.not_init, self.post_init = not_init, post_init


_INITS: dict[type, _Init] = {}


def _init_layout(cls: type) -> _Init:
    fields = dataclasses.fields(cls)
    taken = [f for f in fields if f.init]
    # @dataclass's own order: keyword-only fields after the others.
    ordered = [f for f in taken if not f.kw_only] + [f for f in taken if f.kw_only]
    found = _INITS[cls] = _Init(
        positional=tuple(f.name for f in ordered if not f.kw_only),
        required=sum(1 for f in ordered if not f.kw_only and _required(f)),
        rest=tuple((f.name, f.default, f.default_factory) for f in ordered),
        not_init=tuple((f.name, f.default, f.default_factory) for f in fields if not f.init),
        post_init=hasattr(cls, "__post_init__"),
    )
    return found


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.default is _MISSING and field.default_factory is _MISSING


# CPython's own words for a call that does not fit a signature (Python/ceval.c), which the
# generated __init__ would have said.
def _too_many(cls: type, init: _Init, given: int) -> str:
    most = len(init.positional) + 1  # self counts, as in the generated __init__'s message
    takes = f"from {init.required + 1} to {most}" if init.required + 1 < most else f"{most}"
    noun = "argument" if most == 1 and init.required + 1 == most else "arguments"
    were = "was" if given + 1 == 1 else "were"
    return (
        f"{cls.__qualname__}.__init__() takes {takes} positional {noun} but {given + 1} {were}"
        " given"
    )


def _missing(cls: type, init: _Init, missing: list[str]) -> str:
    positional = [name for name in missing if name in init.positional]
    names = positional or missing
    kind = "positional" if positional else "keyword-only"
    quoted = [repr(name) for name in names]
    listed = (
        quoted[0]
        if len(quoted) == 1
        else f"{quoted[0]} and {quoted[1]}"
        if len(quoted) == 2
        else ", ".join(quoted[:-1]) + f", and {quoted[-1]}"
    )
    plural = "s" if len(names) > 1 else ""
    return (
        f"{cls.__qualname__}.__init__() missing {len(names)} required {kind} "
        f"argument{plural}: {listed}"
    )


class _Layout:
    """What a class's eq, hash and repr read, worked out on its first use."""

    __slots__ = ("compared", "hashed", "shown")

    def __init__(self, compared: _Getter, hashed: _Getter, shown: tuple[str, ...]) -> None:
        self.compared = compared  # the values of the fields with compare=True, as a tuple
        self.hashed = hashed
        self.shown = shown  # the fields with repr=True


_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    found = _LAYOUTS.get(cls)
    if found is None:
        fields = dataclasses.fields(cls)
        compared = [f.name for f in fields if f.compare]
        # dataclasses._hash_add: a field is hashed if its hash= says so, else if compared.
        hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
        shown = tuple(f.name for f in fields if f.repr)
        found = _LAYOUTS[cls] = _Layout(_values(compared), _values(hashed), shown)
    return found


def _values(names: list[str]) -> _Getter:
    if not names:
        return lambda _obj: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)
