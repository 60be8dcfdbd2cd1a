"""slurm-triage: the reliability layer for Slurm GPU clusters.

Kept import-light on purpose: the prolog, epilog and wrapper import this package on every
job start, so nothing here pulls in more than the standard library.
"""

import sys
from types import ModuleType

__version__ = "0.1.0"


def _inspect_on_first_use(name: str) -> object:
    if sys.modules.get("inspect") is _INSPECT_STAND_IN:
        del sys.modules["inspect"]
    import inspect

    return getattr(inspect, name)


# dataclasses imports inspect (and with it ast, dis, tokenize, linecache: ~10 ms of every
# per-job process, as much as all the records it defines) for one use: the docstring of a
# class that has none, which our records (slurm_triage.frozen) write themselves (issue 20).
# Until something imports it for real, `inspect` is this stand-in, whose attributes are the
# real module's: the first lookup imports the real one, and from then on every `import
# inspect` gets it (the stand-in leaves sys.modules). A process that had inspect before
# importing us (pytest, a program that uses it) is left alone.
_INSPECT_STAND_IN = ModuleType("inspect", "inspect, imported on its first use")
_INSPECT_STAND_IN.__getattr__ = _inspect_on_first_use  # type: ignore[method-assign]
if "inspect" not in sys.modules and "dataclasses" not in sys.modules:
    sys.modules["inspect"] = _INSPECT_STAND_IN
