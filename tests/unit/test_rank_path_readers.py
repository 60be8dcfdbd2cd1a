"""What a rank's path reads without `re`, `typing` or `dataclasses` (issue 20), held to what
those modules said: the identity's file-name parts and task counts, slurm.conf's
ProctrackType, each config key's declared type, each record's fields, and the wrapper
process's exit without the interpreter's teardown."""

from __future__ import annotations

import dataclasses
import random
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from slurm_triage import config as config_module
from slurm_triage import frozen
from slurm_triage.config import _SECTIONS, Choices, declared_type
from slurm_triage.wrapper.identity import MAX_PART_CHARS, expand_counts, safe_part
from slurm_triage.wrapper.stepd import DEFAULT_PROCTRACK, proctrack_type

# The regexes these readers replace, as they were; ProctrackType's with its blanks kept
# within one line (`\s*` let a value on the next line count).
_UNSAFE = re.compile(r"[^A-Za-z0-9_+-]")
_COUNT = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")
_PROCTRACK = re.compile(r"^[ \t]*ProctrackType[ \t]*=[ \t]*(\S+)", re.IGNORECASE | re.MULTILINE)


def _old_safe_part(text: str) -> str:
    return _UNSAFE.sub("_", text.strip())[:MAX_PART_CHARS] or "unknown"


def _old_expand_counts(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        match = _COUNT.match(part.strip())
        if match is None:
            return []
        repeat = int(match.group(2) or 1)
        if repeat > 100_000:
            return []
        out.extend([int(match.group(1))] * repeat)
    return out


def _old_proctrack(text: str) -> str:
    found = _PROCTRACK.findall(text)
    return found[-1].lower() if found else DEFAULT_PROCTRACK


def _random_text(rng: random.Random, alphabet: str, most: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(most)))


def test_safe_part_and_expand_counts_agree_with_the_regexes() -> None:
    """20,000 random strings over the characters that matter (digits, Unicode digits,
    parentheses, x, commas, blanks, dots, slashes, non-ASCII letters)."""
    rng = random.Random(20)
    alphabet = "0123456789(x),  \t\n.-_+/aZé٣"
    for _ in range(20_000):
        text = _random_text(rng, alphabet, 24)
        assert safe_part(text) == _old_safe_part(text), text
        assert expand_counts(text) == _old_expand_counts(text), text
    for text in ["2(x3),1", "4", "1(x2),3(x1)", "٣(x2)", " 2(x3) , 1 ", "2(x0)", "2(x100001)"]:
        assert expand_counts(text) == _old_expand_counts(text), text


def test_proctrack_type_agrees_with_the_regex_on_one_line_settings() -> None:
    """Random slurm.conf texts of ProctrackType lines (cases, blanks, comments, several
    settings): the line reader and the old regex agree, blanks within a line only (a value
    on the next line is no value, for Slurm either)."""
    rng = random.Random(21)
    keys = ["ProctrackType", "proctracktype", "PROCTRACKTYPE", "#ProctrackType", "Proctrack"]
    values = ["proctrack/pgid", "proctrack/cgroup", "Proctrack/LinuxProc", "", "x # note"]
    for _ in range(5_000):
        lines = []
        for _ in range(rng.randrange(4)):
            blank = lambda: rng.choice(["", " ", "\t", "  "])  # noqa: E731
            value = rng.choice(values)
            lines.append(f"{blank()}{rng.choice(keys)}{blank()}={blank()}{value}{blank()}")
            if rng.random() < 0.3:
                lines.append("SlurmctldPort=6817")
        text = "\n".join(lines)
        assert proctrack_type(text) == _old_proctrack(text), text
    assert proctrack_type("ProctrackType=\nproctrack/pgid") == DEFAULT_PROCTRACK


def _typing_view(tp: object) -> object:
    """typing's reading of an annotation, in declared_type's terms."""
    if typing.get_origin(tp) is typing.Literal:
        return ("choices", typing.get_args(tp))
    if typing.get_origin(tp) in (tuple, list):
        return (typing.get_origin(tp), tuple(_typing_view(a) for a in typing.get_args(tp)))
    return tp


def _own_view(tp: object) -> object:
    if isinstance(tp, Choices):
        return ("choices", tp.values)
    origin = getattr(tp, "__origin__", None)
    if origin in (tuple, list):
        return (origin, tuple(_own_view(a) for a in tp.__args__))  # type: ignore[attr-defined]
    return tp


def test_declared_type_reads_every_key_as_typing_does() -> None:
    """Every key of every section: the same base type, the same Literal choices (the cause
    ids included), the same list item, as typing.get_type_hints reads the annotation; and
    that annotation resolves to typing's own Literal (config_module's stand-in for it)."""
    checked = 0
    for cls in _SECTIONS.values():
        hints = typing.get_type_hints(cls)
        for key in cls.__annotations__:
            assert _own_view(declared_type(cls, key)) == _typing_view(hints[key]), key
            checked += 1
    assert checked > 100
    policy = typing.get_type_hints(config_module.PolicyConfig)["drain_causes"]
    assert typing.get_origin(typing.get_args(policy)[0]) is typing.Literal
    assert "gpu_memory" in typing.get_args(typing.get_args(policy)[0])


def _records() -> list[type]:
    import slurm_triage.cli.classify_cmd
    import slurm_triage.prolog_epilog.decide
    import slurm_triage.wrapper.report
    import slurm_triage.wrapper.run  # noqa: F401

    found = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("slurm_triage"):
            continue
        for value in list(vars(module).values()):
            record = isinstance(value, type) and issubclass(value, frozen.Frozen)
            if record and value is not frozen.Frozen and value.__module__ == name:
                found.append(value)
    return found


def _standard_view(field: dataclasses.Field[object]) -> tuple[object, ...]:
    def ours(value: object) -> object:
        return frozen.MISSING if value is dataclasses.MISSING else value

    return (
        field.name,
        field.type,
        ours(field.default),
        ours(field.default_factory),
        field.init,
        field.repr,
        field.hash,
        field.compare,
        dict(field.metadata),
        bool(field.kw_only),
    )


def test_frozen_fields_are_what_dataclasses_reads() -> None:
    """Every record of the per-job programs: frozen.fields() gives what dataclasses.fields()
    gives once dataclasses reads the class (lazily, on that first access), field by field;
    the match args too, and each class attribute is the default @dataclass leaves."""
    records = _records()
    assert len(records) > 60
    for cls in records:
        ours = [
            (f.name, f.type, f.default, f.default_factory, f.init, f.repr, f.hash, f.compare)
            + (dict(f.metadata), f.kw_only)
            for f in frozen.fields(cls)
        ]
        assert ours == [_standard_view(f) for f in dataclasses.fields(cls)], cls
        matched = tuple(f.name for f in dataclasses.fields(cls) if f.init and not f.kw_only)
        assert cls.__match_args__ == matched, cls
        for f in frozen.fields(cls):
            assert getattr(cls, f.name, frozen.MISSING) == f.default, (cls, f.name)


def test_frozen_field_is_dataclasses_field() -> None:
    """A record written with frozen.field() is the one written with dataclasses.field()."""

    class Ours(frozen.Frozen):
        name: str
        tags: tuple[str, ...] = frozen.field(default=(), compare=False)
        items: list[int] = frozen.field(default_factory=list, repr=False)
        limit: float = frozen.field(default=1.0, metadata={"min": 0})
        later: int = frozen.field(default=0, kw_only=True)

    @dataclasses.dataclass(frozen=True)
    class Theirs:
        name: str
        tags: tuple[str, ...] = dataclasses.field(default=(), compare=False)
        items: list[int] = dataclasses.field(default_factory=list, repr=False)
        limit: float = dataclasses.field(default=1.0, metadata={"min": 0})
        later: int = dataclasses.field(default=0, kw_only=True)

    assert [_standard_view(f)[2:] for f in dataclasses.fields(Ours)] == [
        _standard_view(f)[2:] for f in dataclasses.fields(Theirs)
    ]
    assert Ours.tags == Theirs.tags == () and Ours.limit == 1.0  # type: ignore[attr-defined]
    assert not hasattr(Ours, "items") and not hasattr(Theirs, "items")
    made = Ours("a", ("x",), [1], later=2)
    assert repr(made) == repr(Theirs("a", ("x",), [1], later=2)).replace("Theirs", "Ours", 1)
    assert made == Ours("a", ("y",), [1], later=2)  # tags not compared
    assert frozen.replace(made, limit=2.0) == dataclasses.replace(made, limit=2.0)
    assert frozen.shallow_dict(made) == dataclasses.asdict(made)
    assert Ours.__match_args__ == Theirs.__match_args__  # type: ignore[attr-defined]


def test_a_bad_record_fails_where_dataclass_fails() -> None:
    """A mutable default, and a field() without an annotation, fail at the class statement
    with @dataclass's errors; replace() of an init=False field with its error."""
    with pytest.raises(ValueError, match="mutable default <class 'list'> for field items"):

        class Mutable(frozen.Frozen):
            items: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="'loose' is a field but has no type annotation"):

        class Loose(frozen.Frozen):
            loose = frozen.field(default=1)

    class Derived(frozen.Frozen):
        base: int
        double: int = frozen.field(default=0, init=False)

    with pytest.raises(ValueError, match="init=False, it cannot be specified with replace"):
        frozen.replace(Derived(1), double=3)
    with pytest.raises(TypeError, match="Frozen record"):
        frozen.fields(object())  # type: ignore[arg-type]


def test_the_wrapper_process_ends_without_the_interpreter_s_teardown(tmp_path: Path) -> None:
    """`slurm-triage wrap` as a process ends with the child's code at once (no atexit, no
    teardown), its own output flushed; main() called in-process returns the code."""
    config = tmp_path / "wrap.toml"
    config.write_text(
        f'[logging]\ndestination = "file"\nfile = "{tmp_path}/wrap.log"\n'
        f'[paths]\nevidence_dir = "{tmp_path}/evidence"\n'
    )
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('TEARDOWN', file=sys.stderr))\n"
        "print('buffered before the wrap', end='')\n"
        "sys.argv = ['slurm-triage', 'wrap', '--', 'sh', '-c', 'exit 3']\n"
        "from slurm_triage.cli.main import main\n"
        "code = main(sys.argv[1:] if len(sys.argv) > 9 else None)\n"
        "print('NOT REACHED', file=sys.stderr)\n"
    )
    env = {"SLURM_TRIAGE_CONFIG": str(config), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered before the wrap"
    assert "TEARDOWN" not in done.stderr and "NOT REACHED" not in done.stderr
    # In a process of its own too: a wrap in pytest's process would make pytest a subreaper
    # and kill its descendants at the end (the test cluster's daemons among them).
    in_process = (
        "import sys\n"
        "from slurm_triage.cli.main import main\n"
        f"code = main(['--config', {str(config)!r}, 'wrap', '--', 'sh', '-c', 'exit 4'])\n"
        "print('RETURNED', code)\n"
    )
    returned = subprocess.run(
        [sys.executable, "-c", in_process], env=env, capture_output=True, text=True
    )
    assert returned.stdout == "RETURNED 4\n", returned.stderr


def test_become_subreaper_sets_it_as_ctypes_would() -> None:
    """reap.become_subreaper calls prctl through _ctypes alone: in a fresh process the flag
    is off before and on after (read back with the ctypes package), and ctypes itself was
    not imported to set it."""
    code = (
        "import sys\n"
        "from slurm_triage.wrapper.reap import become_subreaper\n"
        "def subreaper():\n"
        "    import ctypes\n"
        "    value = ctypes.c_int(-1)\n"
        "    ctypes.CDLL(None).prctl(37, ctypes.byref(value), 0, 0, 0)\n"  # GET_CHILD_SUBREAPER
        "    return value.value\n"
        "done = become_subreaper()\n"
        "without_ctypes = 'ctypes' not in sys.modules\n"
        "print(done, without_ctypes, subreaper())\n"
    )
    before = code.replace("done = become_subreaper()", "done = True")
    unset = subprocess.run([sys.executable, "-c", before], capture_output=True, text=True)
    assert unset.stdout == "True True 0\n", unset.stderr
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout == "True True 1\n", done.stderr
