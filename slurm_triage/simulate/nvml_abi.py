"""NVML's constants and error classes as the simulated estate serves them, owned here.

The values are NVML's C ABI (nvml.h, as mirrored by nvidia-ml-py and NVIDIA/go-nvml's
const.go); they never change between driver releases, which is why they can be written
down once. They are deliberately not read from whatever `pynvml` happens to be installed:
the stand-in must behave the same whichever nvidia-ml-py a node has, and must be able to
*lack* a name the way an older nvidia-ml-py does (see `bindings.py`).
`tests/unit/test_nvml_bindings.py` checks every value here against the installed
nvidia-ml-py.

The error hierarchy copies nvidia-ml-py's: `NVMLError(code)` builds the subclass named
after the code (`NVMLError(15)` is an `NVMLError_GpuIsLost`), each with `.value` = code.
"""

from __future__ import annotations

import string
from typing import Any

CONSTANTS: dict[str, int] = {
    "NVML_SUCCESS": 0,
    "NVML_FEATURE_DISABLED": 0,
    "NVML_FEATURE_ENABLED": 1,
    "NVML_MEMORY_ERROR_TYPE_CORRECTED": 0,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "NVML_AGGREGATE_ECC": 1,
    "NVML_NVLINK_ERROR_DL_REPLAY": 0,
    "NVML_NVLINK_ERROR_DL_RECOVERY": 1,
    "NVML_NVLINK_ERROR_DL_CRC_FLIT": 2,
    "NVML_NVLINK_ERROR_DL_CRC_DATA": 3,
    "NVML_TEMPERATURE_GPU": 0,
    "NVML_TEMPERATURE_THRESHOLD_SLOWDOWN": 1,
    "NVML_VALUE_TYPE_UNSIGNED_INT": 1,
    # nvmlDeviceGetFieldValues field ids
    "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION": 230,
    "NVML_GPU_RECOVERY_ACTION_NONE": 0,
    # nvmlEventType* bit masks
    "nvmlEventTypeSingleBitEccError": 0x1,
    "nvmlEventTypeDoubleBitEccError": 0x2,
    "nvmlEventTypeXidCriticalError": 0x8,
    "nvmlEventTypeGpuUnavailableError": 0x4000,
}
# NVML_NVLINK_MAX_LINKS is not ABI-stable: 18 up to nvidia-ml-py 12.x (Hopper), 36 from
# 13.x (Blackwell). The binding surface in bindings.py says which one a module has.

ERROR_CODES: dict[str, int] = {
    "NVML_ERROR_UNINITIALIZED": 1,
    "NVML_ERROR_INVALID_ARGUMENT": 2,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_ALREADY_INITIALIZED": 5,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_INSUFFICIENT_SIZE": 7,
    "NVML_ERROR_INSUFFICIENT_POWER": 8,
    "NVML_ERROR_DRIVER_NOT_LOADED": 9,
    "NVML_ERROR_TIMEOUT": 10,
    "NVML_ERROR_IRQ_ISSUE": 11,
    "NVML_ERROR_LIBRARY_NOT_FOUND": 12,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_ERROR_CORRUPTED_INFOROM": 14,
    "NVML_ERROR_GPU_IS_LOST": 15,
    "NVML_ERROR_RESET_REQUIRED": 16,
    "NVML_ERROR_OPERATING_SYSTEM": 17,
    "NVML_ERROR_LIB_RM_VERSION_MISMATCH": 18,
    "NVML_ERROR_IN_USE": 19,
    "NVML_ERROR_MEMORY": 20,
    "NVML_ERROR_NO_DATA": 21,
    "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED": 22,
    "NVML_ERROR_INSUFFICIENT_RESOURCES": 23,
    "NVML_ERROR_FREQ_NOT_SUPPORTED": 24,
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH": 25,
    "NVML_ERROR_DEPRECATED": 26,
    "NVML_ERROR_NOT_READY": 27,
    "NVML_ERROR_GPU_NOT_FOUND": 28,
    "NVML_ERROR_INVALID_STATE": 29,
    "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED": 30,
    "NVML_ERROR_UNKNOWN": 999,
}
_MESSAGES = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory",
    999: "Unknown Error",
}


class NVMLError(Exception):
    """Base of the stand-in's NVML errors; `NVMLError(code)` gives the code's subclass."""

    value: int
    _by_code: dict[int, type[NVMLError]] = {}

    def __new__(cls, value: int = 999, *_args: Any) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, NVMLError)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int = 999, *_args: Any) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _error_class(constant: str, code: int) -> type[NVMLError]:
    # nvidia-ml-py's naming: NVML_ERROR_GPU_IS_LOST -> NVMLError_GpuIsLost
    name = "NVMLError_" + string.capwords(constant.removeprefix("NVML_ERROR_"), "_").replace(
        "_", ""
    )

    def new(cls: type[NVMLError], *_args: Any) -> NVMLError:
        obj = Exception.__new__(cls)
        obj.value = code
        return obj

    def init(self: NVMLError, *_args: Any) -> None:
        Exception.__init__(self, code)

    return type(name, (NVMLError,), {"__new__": new, "__init__": init})


ERROR_CLASSES: dict[str, type[NVMLError]] = {}
for _constant, _code in ERROR_CODES.items():
    _cls = _error_class(_constant, _code)
    NVMLError._by_code[_code] = _cls
    ERROR_CLASSES[_cls.__name__] = _cls


def error(constant: str) -> NVMLError:
    """The error NVML returns as `constant`, e.g. error("NVML_ERROR_GPU_IS_LOST")."""
    return NVMLError(ERROR_CODES[constant])
