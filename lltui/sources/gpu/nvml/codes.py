"""NVML's numbers (return codes, enum values, field ids) and how its errors read in words.

The numbers are fixed by nvml.h's ABI, so they are written out here: an old binding that lacks
a name still gets the right value.
"""

from __future__ import annotations

from typing import Any

from lltui.core.text import error_text

# nvmlReturn_t codes.
NVML_SUCCESS = 0
ERR_UNINITIALIZED = 1
ERR_INVALID_ARGUMENT = 2
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_NOT_FOUND = 6
ERR_DRIVER_NOT_LOADED = 9
ERR_TIMEOUT = 10
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_LIB_RM_VERSION_MISMATCH = 18
ERR_ARGUMENT_VERSION_MISMATCH = 25

# Enum values.
TEMPERATURE_GPU = 0
CLOCK_SM = 1
CLOCK_MEM = 2
PSTATE_UNKNOWN = 32
MEMORY_ERROR_CORRECTED = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
AGGREGATE_ECC = 1
RETIRED_BY_SBE = 0
RETIRED_BY_DBE = 1
PCIE_UTIL_TX_BYTES = 0
PCIE_UTIL_RX_BYTES = 1
FEATURE_ENABLED = 1
NVLINK_MAX_LINKS = 36
VALUE_NOT_AVAILABLE_ULL = (1 << 64) - 1

# Field ids for nvmlDeviceGetFieldValues.
FI_ECC_SBE_VOL_TOTAL = 3
FI_ECC_DBE_VOL_TOTAL = 4
FI_ECC_SBE_AGG_TOTAL = 5
FI_ECC_DBE_AGG_TOTAL = 6
FI_RETIRED_SBE = 29
FI_RETIRED_DBE = 30
FI_MEMORY_TEMP = 82  # °C, the memory's (HBM) own sensor
FI_TOTAL_ENERGY_CONSUMPTION = 83  # mJ since the driver loaded
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, cumulative, all links
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_POWER_AVERAGE = 185  # mW over 1 s: what nvmlDeviceGetPowerUsage returns on Ampere+
FI_POWER_CURRENT_LIMIT = 190  # mW, the limit enforced now

# nvmlEventType bits (nvmlDeviceRegisterEvents).
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8

NOT_INSTALLED = "nvidia-ml-py is not installed"
NOT_THE_BINDING = "the module named pynvml here is not NVIDIA's nvidia-ml-py"
INSTALL_HINT = "pip install nvidia-ml-py (NVIDIA's binding; not the package named pynvml)"
LOST_WORDS = "GPU is lost (fell off the bus or stopped answering); it needs a reset or reboot"


def import_pynvml() -> Any:
    """The ``pynvml`` module, imported when called (tests put a fake in sys.modules), or None."""
    try:
        import pynvml
    except Exception:  # ImportError, or a broken install failing on import
        return None
    return pynvml


def is_binding(nv: Any) -> bool:
    """Whether ``nv`` is NVIDIA's binding rather than another module named pynvml."""
    return all(hasattr(nv, name) for name in ("nvmlInit", "nvmlShutdown", "NVMLError"))


def text(value: Any) -> str:
    """A string NVML gave, as bytes or str, without its NUL padding."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00").strip()


def error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None


def error_words(exc: BaseException) -> str:
    try:
        words = str(exc)  # the real binding may ask the library for the string
    except Exception:
        words = ""
    code = error_code(exc)
    if not words:
        return f"NVML error {code}" if code is not None else error_text(exc)
    return words


def mw_to_w(mw: Any) -> float:
    return float(mw) / 1000.0
