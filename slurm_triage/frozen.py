"""`Frozen`: the base of the frozen records that cost nothing to define (issue 20).

Python 3.11's @dataclass writes the source of every method it generates and compiles it
with exec() when the class is defined, and even with every method turned off it works out
each class's fields with its general machinery (~0.1 ms a class, and `dataclasses` itself
imports copy, weakref and inspect). The per-job programs define dozens of records at each
start (a wrapped rank 30-odd, a job end's decision 60-odd).

A class that derives from `Frozen` is a frozen dataclass without the @dataclass line:

    class StepIdentity(Frozen):
        job_id: str
        restart: int = 0
        tags: tuple[str, ...] = field(default=(), compare=False)  # frozen.field

    class Window(Frozen, kw_only=True):  # as @dataclass(frozen=True, kw_only=True)
        ...

Its fields are read here, when the class is defined, from its annotations and defaults as
@dataclass reads them (inherited fields first, a redefined one in its first place;
`field()` here or `dataclasses.field()` alike), and the methods @dataclass would have
generated are written once, here: __init__ (positional and keyword arguments as the
generated one takes them, defaults, default_factory, init=False, kw_only, __post_init__,
the same TypeErrors), __setattr__ and __delattr__ (FrozenInstanceError), __eq__ (the
compared fields as a tuple, equal only to an instance of the very same class), __hash__
(the hashed fields) and __repr__ (`Name(field=value, ...)`, recursion as `...`).

`dataclasses` is not imported for any of it. The standard helpers still work on a record:
its `__dataclass_fields__` is worked out by `dataclasses` itself on first access (so
dataclasses.fields(), replace(), asdict() and is_dataclass() are the standard ones), and
`fields()`, `replace()` and `shallow_dict()` here do the same without importing it, for
the per-job paths. A class whose annotations name ClassVar, InitVar or KW_ONLY is handed to
@dataclass at once, as before. mypy knows a record as a frozen dataclass through
`dataclass_transform` (PEP 681).

tests/unit/test_frozen.py holds every method and helper to the generated and standard
ones, and the per-job programs to defining their frozen records this way.
"""

from __future__ import annotations

import operator
import reprlib
import sys
from collections.abc import Callable

# typing's flag without importing typing (issue 20): mypy takes any name TYPE_CHECKING as true.
# At run time dataclass_transform only marks the class for type checkers.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import dataclasses
    from typing import Any, ClassVar, TypeVar, dataclass_transform

    _Getter = Callable[[Any], tuple[Any, ...]]
    _R = TypeVar("_R", bound="Frozen")
else:

    def dataclass_transform(**_kwargs: object) -> Callable[[type], type]:
        return lambda cls: cls


class _Missing:
    """No default: dataclasses.MISSING's stand-in here (translated when dataclasses reads
    the class)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
_set = object.__setattr__


class FrozenInstanceError(AttributeError):
    """Raised on assignment to a record: dataclasses.FrozenInstanceError itself once
    dataclasses is imported (see _frozen_error), this only if it never is."""


def _frozen_error(message: str) -> AttributeError:
    found = sys.modules.get("dataclasses")
    return found.FrozenInstanceError(message) if found else FrozenInstanceError(message)


class FieldSpec:
    """What `field()` says of one field, as dataclasses.field's Field does."""

    __slots__ = (
        "default",
        "default_factory",
        "init",
        "repr",
        "hash",
        "compare",
        "metadata",
        "kw_only",
    )

    def __init__(
        self,
        default: Any,
        default_factory: Any,
        init: bool,
        repr: bool,  # noqa: A002 - dataclasses.field's own parameter names
        hash: bool | None,  # noqa: A002
        compare: bool,
        metadata: Any,
        kw_only: Any,
    ) -> None:
        if default is not MISSING and default_factory is not MISSING:
            raise ValueError("cannot specify both default and default_factory")
        self.default, self.default_factory, self.init = default, default_factory, init
        self.repr, self.hash, self.compare = repr, hash, compare
        self.metadata = {} if metadata is None else dict(metadata)
        self.kw_only = kw_only


def field(
    *,
    default: Any = MISSING,
    default_factory: Callable[[], Any] | Any = MISSING,
    init: bool = True,
    repr: bool = True,  # noqa: A002
    hash: bool | None = None,  # noqa: A002
    compare: bool = True,
    metadata: Any = None,
    kw_only: bool | Any = MISSING,
) -> Any:
    """dataclasses.field() for a Frozen record, without importing dataclasses."""
    return FieldSpec(default, default_factory, init, repr, hash, compare, metadata, kw_only)


class FieldInfo(FieldSpec):
    """One field of a record, as dataclasses.fields() would give it (MISSING is this
    module's): its spec with the name, the annotation and kw_only resolved."""

    __slots__ = ("name", "type")

    def __init__(self, name: str, annotation: Any, spec: FieldSpec, kw_only: bool) -> None:
        super().__init__(
            spec.default,
            spec.default_factory,
            spec.init,
            spec.repr,
            spec.hash,
            spec.compare,
            spec.metadata,
            kw_only,
        )
        self.name, self.type = name, annotation

    def __repr__(self) -> str:
        return f"FieldInfo(name={self.name!r}, default={self.default!r})"


# Annotations that @dataclass reads specially: such a class is handed to it (none of ours).
_SPECIAL = (
    "ClassVar",
    "typing.ClassVar",
    "InitVar",
    "dataclasses.InitVar",
    "KW_ONLY",
    "dataclasses.KW_ONLY",
)

# cls -> its fields in @dataclass's order; cls -> its own field specs as written.
_FIELDS: dict[type, tuple[FieldInfo, ...]] = {}
_WRITTEN: dict[type, dict[str, Any]] = {}


class _DataclassFields:
    """A record's __dataclass_fields__, worked out by dataclasses on first access: only
    code that uses dataclasses' own helpers imports it."""

    __slots__ = ()

    def __get__(self, instance: object, owner: type) -> Any:
        if owner not in _FIELDS:  # Frozen itself is no dataclass
            raise AttributeError("__dataclass_fields__")
        _as_dataclass(owner)
        return owner.__dict__["__dataclass_fields__"]


def _as_dataclass(cls: type) -> None:
    """Let dataclasses read the class as it was written (it sets __dataclass_fields__)."""
    import dataclasses

    for name, written in _WRITTEN[cls].items():
        if isinstance(written, FieldSpec):
            written = dataclasses.field(
                default=_standard(written.default, dataclasses),
                default_factory=_standard(written.default_factory, dataclasses),
                init=written.init,
                repr=written.repr,
                hash=written.hash,
                compare=written.compare,
                metadata=written.metadata,
                kw_only=_standard(written.kw_only, dataclasses),
            )
        type.__setattr__(cls, name, written)
    kw_only = cls.__dict__.get("_frozen_kw_only", False)
    dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)


def _standard(value: Any, dataclasses: Any) -> Any:
    return dataclasses.MISSING if value is MISSING else value


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Frozen:
    """A frozen dataclass's methods, as @dataclass(frozen=True) would generate them."""

    __slots__ = ()
    if TYPE_CHECKING:  # for dataclasses.fields() and replace() to type-check; typing.get_type_hints
        # of a record must not meet it at run time, where ClassVar is not imported here.
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]
    else:
        __dataclass_fields__ = _DataclassFields()

    def __init_subclass__(cls, *, kw_only: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__doc__:
            cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', ()))})"
        own = cls.__dict__.get("__annotations__", {})
        if any(isinstance(a, str) and a.startswith(_SPECIAL) for a in own.values()):
            import dataclasses  # as @dataclass reads them: none of the records is one

            dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=kw_only)
            _FIELDS[cls] = tuple(_info(f) for f in dataclasses.fields(cls))  # type: ignore[arg-type]
            _WRITTEN[cls] = {}
            return
        _FIELDS[cls] = _read_fields(cls, own, kw_only)
        type.__setattr__(cls, "__dataclass_fields__", _DataclassFields())
        if kw_only:
            type.__setattr__(cls, "_frozen_kw_only", True)
        if "__match_args__" not in cls.__dict__:
            matched = tuple(f.name for f in _FIELDS[cls] if f.init and not f.kw_only)
            type.__setattr__(cls, "__match_args__", matched)

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
            elif default is not MISSING:
                _set(self, name, default)
            elif factory is not MISSING:
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
            if default is not MISSING:
                _set(self, name, default)
            elif factory is not MISSING:
                _set(self, name, factory())
        if init.post_init:
            self.__post_init__()  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        raise _frozen_error(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise _frozen_error(f"cannot delete field {name!r}")

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


def _read_fields(cls: type, own: dict[str, Any], kw_only: bool) -> tuple[FieldInfo, ...]:
    """The class's fields as @dataclass reads them: each Frozen base's, in reverse MRO
    order, then its own annotations; a field's default is the class attribute it sees
    (inherited ones too), replaced or removed as @dataclass does."""
    fields: dict[str, FieldInfo] = {}
    for base in cls.__mro__[-1:0:-1]:
        for info in _FIELDS.get(base, ()):
            fields[info.name] = info
    written: dict[str, Any] = {}
    standard = sys.modules.get("dataclasses")
    for name, annotation in own.items():
        value = getattr(cls, name, MISSING)
        if isinstance(value, FieldSpec):
            spec = value
        elif standard is not None and isinstance(value, standard.Field):
            spec = _spec_of(value, standard)
        else:
            spec = FieldSpec(value, MISSING, True, True, None, True, None, MISSING)
        if name in cls.__dict__:
            written[name] = cls.__dict__[name]
        default = spec.default
        if default is not MISSING and default.__class__.__hash__ is None:
            raise ValueError(
                f"mutable default {type(default)} for field {name} is not allowed: use "
                "default_factory"
            )
        if isinstance(value, FieldSpec) or value is not spec.default:
            # A field() in the class body: the attribute becomes its default, or goes.
            if default is MISSING:
                type.__delattr__(cls, name)
            else:
                type.__setattr__(cls, name, default)
        field_kw_only = kw_only if spec.kw_only is MISSING else spec.kw_only
        fields[name] = FieldInfo(name, annotation, spec, field_kw_only)
    for name, value in cls.__dict__.items():
        if isinstance(value, FieldSpec) or (standard and isinstance(value, standard.Field)):
            raise TypeError(f"{name!r} is a field but has no type annotation")
    _WRITTEN[cls] = written
    return tuple(fields.values())


def _spec_of(standard_field: Any, dataclasses: Any) -> FieldSpec:
    def ours(value: Any) -> Any:
        return MISSING if value is dataclasses.MISSING else value

    return FieldSpec(
        ours(standard_field.default),
        ours(standard_field.default_factory),
        standard_field.init,
        standard_field.repr,
        standard_field.hash,
        standard_field.compare,
        standard_field.metadata,
        ours(standard_field.kw_only),
    )


def _info(standard_field: Any) -> FieldInfo:
    import dataclasses

    spec = _spec_of(standard_field, dataclasses)
    return FieldInfo(standard_field.name, standard_field.type, spec, bool(standard_field.kw_only))


def fields(record: Frozen | type[Frozen]) -> tuple[FieldInfo, ...]:
    """dataclasses.fields() of a record, without importing dataclasses."""
    cls = record if isinstance(record, type) else record.__class__
    try:
        return _FIELDS[cls]
    except KeyError:
        raise TypeError("must be called with a Frozen record or class") from None


def replace(record: _R, **changes: Any) -> _R:
    """dataclasses.replace() of a record, without importing dataclasses."""
    for info in fields(record):
        if not info.init:
            if info.name in changes:
                raise ValueError(
                    f"field {info.name} is declared with init=False, it cannot be specified "
                    "with replace()"
                )
            continue
        if info.name not in changes:
            changes[info.name] = getattr(record, info.name)
    return record.__class__(**changes)


def shallow_dict(record: Frozen) -> dict[str, Any]:
    """Each field's name and value, the values as they are (dataclasses.asdict copies
    them, recursively)."""
    return {info.name: getattr(record, info.name) for info in fields(record)}


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
    every = fields(cls)
    taken = [f for f in every if f.init]
    # @dataclass's own order: keyword-only fields after the others.
    ordered = [f for f in taken if not f.kw_only] + [f for f in taken if f.kw_only]
    found = _INITS[cls] = _Init(
        positional=tuple(f.name for f in ordered if not f.kw_only),
        required=sum(1 for f in ordered if not f.kw_only and _required(f)),
        rest=tuple((f.name, f.default, f.default_factory) for f in ordered),
        not_init=tuple((f.name, f.default, f.default_factory) for f in every if not f.init),
        post_init=hasattr(cls, "__post_init__"),
    )
    return found


def _required(info: FieldInfo) -> bool:
    return info.default is MISSING and info.default_factory is MISSING


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
        every = fields(cls)
        compared = [f.name for f in every if f.compare]
        # dataclasses._hash_add: a field is hashed if its hash= says so, else if compared.
        hashed = [f.name for f in every if (f.compare if f.hash is None else f.hash)]
        shown = tuple(f.name for f in every if f.repr)
        found = _LAYOUTS[cls] = _Layout(_values(compared), _values(hashed), shown)
    return found


def _values(names: list[str]) -> _Getter:
    if not names:
        return lambda _obj: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda obj: (one(obj),)
    return operator.attrgetter(*names)
