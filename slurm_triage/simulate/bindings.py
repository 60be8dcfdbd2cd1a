"""Which names each supported nvidia-ml-py (`pynvml`) release has, for the names we use.

Nodes run whatever nvidia-ml-py their image has, anywhere in pyproject's range. A name our
code reads from the module that an older release lacks is an AttributeError on every node
with that release (nvidia-ml-py 12.560 has no NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: reading it
unguarded failed `gpu.count` and drained every such node). The stand-in takes one of these
surfaces and lacks the same names, so the checks are tested against each release's module.

Derived by importing the released wheels of nvidia-ml-py 12.535.77, 12.560.30, 12.570.86 and
13.615.71 (PyPI) and listing which of the names in `nvml_abi.py` and the stand-in's functions
each one has. `make test-nvml-oldest` runs the binding tests with the real oldest release on
the import path, which checks this table against it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BindingSurface:
    """One nvidia-ml-py release as our code sees it: the names it lacks, its link maximum."""

    version: str
    absent: frozenset[str]
    nvlink_max_links: int


# Added in nvidia-ml-py 12.570.86 (with driver R570's nvml.h).
_ADDED_IN_570 = frozenset(
    {
        "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "NVML_GPU_RECOVERY_ACTION_NONE",
        "nvmlEventTypeGpuUnavailableError",
    }
)
# Error codes of newer drivers; NVML never returns them through an older binding's calls.
_ADDED_IN_13 = frozenset({"NVML_ERROR_RESET_TYPE_NOT_SUPPORTED"})
_ADDED_AFTER_535 = frozenset({"NVML_ERROR_GPU_NOT_FOUND", "NVML_ERROR_INVALID_STATE"})
# The oldest release pyproject allows; also the floor of `make test-nvml-oldest`.
OLDEST = BindingSurface(
    "12.535.77", _ADDED_IN_570 | _ADDED_AFTER_535 | _ADDED_IN_13, nvlink_max_links=18
)
# The release issue 14 was reported with: still without the R570 names.
R560 = BindingSurface("12.560.30", _ADDED_IN_570 | _ADDED_IN_13, nvlink_max_links=18)
# The newest release tested; 13.x raised NVML_NVLINK_MAX_LINKS to 36 for Blackwell.
NEWEST = BindingSurface("13.615.71", frozenset(), nvlink_max_links=36)
SUPPORTED = (OLDEST, R560, NEWEST)
BY_VERSION = {surface.version: surface for surface in SUPPORTED}
