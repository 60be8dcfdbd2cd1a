"""`Frozen`: the base of frozen dataclasses that cost less to define (issue 20).

Python 3.11's @dataclass compiles every method it generates with exec() when the class is
defined, in every process: about 1 ms for a frozen class, six methods. The per-job programs
define dozens of them at each start (a wrapped rank 30-odd, a job end's decision 60-odd).
A frozen dataclass that derives from `Frozen` and passes `eq=False, repr=False` still has
its __init__, __setattr__ and __delattr__ generated (so it is constructed as fast, checked
by mypy and frozen as before) and takes __eq__, __hash__ and __repr__ from here, written
once: what @dataclass(frozen=True) would generate (the compared fields as a tuple, equal
only to an instance of the very same class; the hash of the hashed fields;
`Name(field=value, ...)` of the fields with repr=True), at the price of a lookup per call.

    @dataclass(frozen=True, eq=False, repr=False)
    class StepIdentity(Frozen):
        ...

tests/unit/test_frozen.py holds them to the generated ones, and every frozen dataclass the
per-job programs define to this form.
"""

from __future__ import annotations

import dataclasses
import operator
import reprlib
from collections.abc import Callable
from typing import Any, NamedTuple

_Getter = Callable[[Any], tuple[Any, ...]]


class Frozen:
    """Equality, hash and repr of a frozen dataclass, as @dataclass would generate them."""

    __slots__ = ()

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


class _Layout(NamedTuple):
    """What a class's eq, hash and repr read, worked out on its first use."""

    compared: _Getter  # the values of the fields with compare=True, as a tuple
    hashed: _Getter
    shown: tuple[str, ...]  # the fields with repr=True


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
