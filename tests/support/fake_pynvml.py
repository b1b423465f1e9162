"""A FAKE of nvidia-ml-py (the ``pynvml`` module), at the function level, for tests and benches.

This is not NVIDIA's binding and it talks to no driver. It stands in for it on machines
without an NVIDIA GPU. It has the function names, parameters, return shapes, constants,
``NVMLError`` subclasses (``NVMLError_NotSupported``, ... with ``.value``) and
``NVMLLibraryMismatchError`` of the real package (checked against the installed
nvidia-ml-py by a test), and models two things that vary in the field:

* the **binding** (:class:`FakeBinding`): which Python functions the installed nvidia-ml-py
  has, whether it returns ``str`` or ``bytes``, what the unsuffixed process functions do;
* the **driver** (:class:`FakeDriver`): which C symbols libnvidia-ml exports (a missing one
  raises ``NVMLError_FunctionNotFound``, as the real binding does when it resolves the symbol)
  and which field ids ``nvmlDeviceGetFieldValues`` knows.

Every device call is counted per GPU and per function in :attr:`FakeNvml.calls`; errors can be
injected per GPU and function (:meth:`FakeNvml.fail`) or per field id (:meth:`FakeNvml.fail_field`),
and a GPU can fall off the bus (:meth:`FakeNvml.lose`).

Use::

    fake = FakeNvml(make_gpus(2), driver=DRIVER_R535, binding=BINDING_13)
    fake.install(monkeypatch)          # sys.modules["pynvml"] is now the fake
"""

from __future__ import annotations

import ctypes
import string
import sys
import types
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from support.fake_nvml_events import (
    EVENT_CONSTANTS,
    EVENT_SYMBOLS,
    GEFORCE_EVENTS,
    FakeEventApi,
    c_nvmlEventData_t,
)

# -- constants: the names and values nvidia-ml-py defines (nvml.h) ----------------------------
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_PSTATE_UNKNOWN = 32
NVML_NVLINK_MAX_LINKS = 36
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_GPU_VIRTUALIZATION_MODE_NONE = 0
NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH = 1
NVML_GPU_VIRTUALIZATION_MODE_VGPU = 2
NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU = 3

NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6

NVML_VALUE_NOT_AVAILABLE_ulonglong = ctypes.c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = ctypes.c_uint(-1)
nvmlMemory_v2 = 0x02000028

NVML_FI_DEV_ECC_SBE_VOL_TOTAL = 3
NVML_FI_DEV_ECC_DBE_VOL_TOTAL = 4
NVML_FI_DEV_ECC_SBE_AGG_TOTAL = 5
NVML_FI_DEV_ECC_DBE_AGG_TOTAL = 6
NVML_FI_DEV_RETIRED_SBE = 29
NVML_FI_DEV_RETIRED_DBE = 30
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_FI_DEV_POWER_CURRENT_LIMIT = 190

_CONSTANTS = {k: v for k, v in dict(globals()).items() if k.startswith(("NVML_", "nvmlMemory_"))}

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
    NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
    NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
    NVML_ERROR_MEMORY: "Insufficient Memory",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


# -- errors, shaped like nvidia-ml-py's ---------------------------------------------------------
class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    """``NVMLError(code)`` builds the subclass for that code, as the real one does."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 (the real attribute)
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _error_class_name(constant: str) -> str:
    words = string.capwords(constant.replace("NVML_ERROR_", ""), "_").replace("_", "")
    return "NVMLError_" + words


ERROR_CLASSES: dict[str, type[NVMLError]] = {}
for _name, _code in list(_CONSTANTS.items()):
    if _name.startswith("NVML_ERROR_"):

        def _make_new(code: int) -> Any:
            def __new__(cls: type[NVMLError], *args: object) -> NVMLError:
                return NVMLError.__new__(cls, code)

            return __new__

        _cls = type(
            _error_class_name(_name),
            (NVMLError,),
            {"__new__": _make_new(_code), "__init__": lambda self, *a: Exception.__init__(self)},
        )
        NVMLError._valClassMapping[_code] = _cls
        ERROR_CLASSES[_cls.__name__] = _cls
        globals()[_cls.__name__] = _cls

# Every error an NVML call can return that tests inject (LIBRARY_NOT_FOUND and friends only
# come from init).
DEVICE_ERROR_CODES = (
    NVML_ERROR_UNINITIALIZED,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_INSUFFICIENT_SIZE,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_IRQ_ISSUE,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_CORRUPTED_INFOROM,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_RESET_REQUIRED,
    NVML_ERROR_OPERATING_SYSTEM,
    NVML_ERROR_MEMORY,
    NVML_ERROR_NO_DATA,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_UNKNOWN,
)


# field id -> (memory error type, counter type) of the ECC counts
_ECC_FIELDS = {
    NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC),
    NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC),
    NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC),
    NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC),
}


# -- nvmlFieldValue_t, laid out as in nvml.h -----------------------------------------------------
class c_nvmlValue_t(ctypes.Union):
    _fields_ = [
        ("dVal", ctypes.c_double),
        ("uiVal", ctypes.c_uint),
        ("ulVal", ctypes.c_ulong),
        ("ullVal", ctypes.c_ulonglong),
        ("sllVal", ctypes.c_longlong),
        ("siVal", ctypes.c_int),
        ("usVal", ctypes.c_ushort),
    ]


class c_nvmlFieldValue_t(ctypes.Structure):
    _fields_ = [
        ("fieldId", ctypes.c_uint32),
        ("scopeId", ctypes.c_uint32),
        ("timestamp", ctypes.c_int64),
        ("latencyUsec", ctypes.c_int64),
        ("valueType", ctypes.c_uint),
        ("nvmlReturn", ctypes.c_uint),
        ("value", c_nvmlValue_t),
    ]


class c_nvmlDevice_t:
    """A device handle; the real one is an opaque pointer."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice {self.index}>"


class FakeMigHandle(c_nvmlDevice_t):
    """A MIG device's handle: calls on it are counted under its parent GPU's index."""

    def __init__(self, index: int, slot: int) -> None:
        super().__init__(index)
        self.slot = slot

    def __repr__(self) -> str:
        return f"<fake MIG device {self.index}/{self.slot}>"


# nvidia-ml-py's c_nvmlDeviceAttributes, field for field (what nvmlDeviceGetAttributes returns)
class c_nvmlDeviceAttributes(ctypes.Structure):
    _fields_ = [
        ("multiprocessorCount", ctypes.c_uint),
        ("sharedCopyEngineCount", ctypes.c_uint),
        ("sharedDecoderCount", ctypes.c_uint),
        ("sharedEncoderCount", ctypes.c_uint),
        ("sharedJpegCount", ctypes.c_uint),
        ("sharedOfaCount", ctypes.c_uint),
        ("gpuInstanceSliceCount", ctypes.c_uint),
        ("computeInstanceSliceCount", ctypes.c_uint),
        ("memorySizeMB", ctypes.c_ulonglong),
    ]


# -- the fake hardware ----------------------------------------------------------------------
MIB = 1024 * 1024


@dataclass
class FakeVgpu:
    """One vGPU a fake host GPU serves to a VM (an id of nvmlDeviceGetActiveVgpus)."""

    instance: int
    type_id: int
    type_name: str  # "GRID A100-4C"
    vm_id: str
    framebuffer_mib: int
    fb_used: int = 0  # bytes


@dataclass
class FakeMig:
    """One MIG instance of a fake GPU (a slot of nvmlDeviceGetMigDeviceHandleByIndex)."""

    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    name: str  # as the driver names a MIG device: "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    memory_mib: int
    memory_used: int = 0
    slices: int = 1
    sm_count: int = 14


@dataclass
class FakeGpu:
    """One fake GPU's state. ``None`` for a capability means the GPU reports NOT_SUPPORTED."""

    uuid: str
    pci_bus_id: str
    name: str = "NVIDIA GeForce RTX 3090"
    memory_total: int = 24576 * MIB
    memory_used: int = 8000 * MIB  # allocations (what v2 reports as used)
    memory_reserved: int = 300 * MIB  # driver/firmware reservation (v1 counts it as used)
    util_gpu: int = 57
    util_mem: int = 31
    power_mw: int = 215_000
    power_average_supported: bool = True  # NVML_FI_DEV_POWER_AVERAGE: Ampere and newer
    enforced_limit_mw: int = 350_000
    default_limit_mw: int = 350_000
    max_limit_mw: int = 400_000
    energy_mj: int | None = 4_000_000_000
    temp_c: int = 61
    sm_clock: int = 1740
    mem_clock: int = 9751
    max_sm_clock: int = 2100
    max_mem_clock: int = 9751
    fan_pct: int | None = 45
    pstate: int = 2
    clock_reasons: int = 0x4  # power cap
    compute_capability: tuple[int, int] = (8, 6)
    serial: str | None = None  # GeForce cards have none
    vbios: str = "94.02.42.00.0B"
    persistence: int = NVML_FEATURE_ENABLED
    pcie_gen_max: int = 4
    pcie_width_max: int = 16
    mem_bus_width: int | None = 384  # None: the driver does not say (NOT_SUPPORTED)
    pcie_gen: int = 4
    pcie_width: int = 16
    pcie_tx_kbs: int = 12_000
    pcie_rx_kbs: int = 34_000
    nvlink_states: list[int] = field(default_factory=list)  # one entry per link: 1 up, 0 down
    nvlink_tx_kib: int = 0  # cumulative counters
    nvlink_rx_kib: int = 0
    ecc_corrected: int | None = None  # volatile counts; None: ECC not supported (GeForce)
    ecc_uncorrected: int | None = None
    ecc_aggregate_corrected: int | None = None  # lifetime counts; None: the volatile ones
    ecc_aggregate_uncorrected: int | None = None
    # nvmlDeviceGetSupportedEventTypes (ECC event types are added where the GPU has ECC);
    # None: NOT_SUPPORTED
    supported_events: int | None = GEFORCE_EVENTS
    retired_sbe: list[int] | None = None  # page addresses; None: not supported
    retired_dbe: list[int] | None = None
    compute_procs: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    graphics_procs: list[tuple[int, int | None]] = field(default_factory=list)
    # per-process utilisation samples in the driver's buffer: (pid, CPU timestamp in us, SM %);
    # None: the GPU will not say (NOT_SUPPORTED, as on MIG)
    util_samples: list[tuple[int, int, int]] | None = field(default_factory=list)
    lost: bool = False
    mem_temp_c: int | None = None  # HBM's sensor; None: NOT_SUPPORTED (GDDR)
    # MIG: None for a GPU without it (NOT_SUPPORTED), else the current mode; the instances
    # fill the slots of nvmlDeviceGetMigDeviceHandleByIndex in order, None an empty slot
    mig_mode: int | None = None
    mig_slots: list[FakeMig | None] = field(default_factory=list)
    # processes' MIG instance: pid -> (gpu instance id, compute instance id)
    proc_instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    virtualization_mode: int = NVML_GPU_VIRTUALIZATION_MODE_NONE
    vgpus: list[FakeVgpu] = field(default_factory=list)  # served, in host-vgpu mode


def make_gpus(
    n: int,
    *,
    name: str = "NVIDIA GeForce RTX 3090",
    compute_capability: tuple[int, int] = (8, 6),
    nvlinks: int = 0,
) -> list[FakeGpu]:
    """``n`` alike GPUs with distinct UUIDs, bus ids, loads and counters."""
    gpus = []
    for i in range(n):
        gpus.append(
            FakeGpu(
                uuid=f"GPU-{i:08x}-1111-2222-3333-{i:012x}",
                pci_bus_id=f"00000000:{0x17 + 0x20 * i:02X}:00.0",
                name=name,
                compute_capability=compute_capability,
                memory_used=(4000 + 1000 * i) * MIB,
                util_gpu=50 + i,
                power_mw=200_000 + 1000 * i,
                energy_mj=4_000_000_000 + 1_000_000 * i,
                temp_c=60 + i,
                nvlink_states=[1] * nvlinks,
            )
        )
    return gpus


@dataclass(frozen=True)
class FakeDriver:
    """What one driver release's libnvidia-ml exports."""

    version: str
    cuda_version: int  # as nvmlSystemGetCudaDriverVersion returns it: 12020 for 12.2
    missing_symbols: frozenset[str] = frozenset()
    field_id_limit: int = 200  # ids at or above are unknown to this driver

    @property
    def nvml_version(self) -> str:
        return f"{self.cuda_version // 1000}.{self.version}"


_PROC_V2 = frozenset(
    {"nvmlDeviceGetComputeRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses_v2"}
)
_PROC_V3 = frozenset(
    {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v3"}
)
_NEWER_THAN_R470 = frozenset(
    {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetCurrentClocksEventReasons"}
)
_NEWER_THAN_R535 = frozenset({"nvmlDeviceGetProcessesUtilizationInfo"})

# R450: process info v1 only, memory v1 only, no clocks-event name, fewer field ids.
DRIVER_R450 = FakeDriver(
    "450.80.02",
    11000,
    _PROC_V2 | _PROC_V3 | _NEWER_THAN_R470 | _NEWER_THAN_R535,
    field_id_limit=138,
)
# R470: process info v2, memory v1.
DRIVER_R470 = FakeDriver(
    "470.182.03", 11040, _PROC_V3 | _NEWER_THAN_R470 | _NEWER_THAN_R535, field_id_limit=170
)
# R535: process info v3, memory v2, clocks-event reasons, power field ids; per-process
# utilisation only through nvmlDeviceGetProcessUtilization.
DRIVER_R535 = FakeDriver("535.104.05", 12020, _NEWER_THAN_R535)
# R550: nvmlDeviceGetProcessesUtilizationInfo as well.
DRIVER_R550 = FakeDriver("550.54.15", 12040)
# A driver without the event API (no XID or ECC events).
DRIVER_NO_EVENTS = replace(DRIVER_R535, missing_symbols=EVENT_SYMBOLS)
# A driver without nvmlDeviceGetFieldValues (every batched field must fall back).
DRIVER_NO_FIELD_VALUES = replace(
    DRIVER_R535, missing_symbols=frozenset({"nvmlDeviceGetFieldValues"})
)


@dataclass(frozen=True)
class FakeBinding:
    """What one nvidia-ml-py release offers in Python."""

    version: str
    absent: frozenset[str] = frozenset()  # function or constant names it does not have
    unsuffixed_processes: str = "v3"  # "v3": calls _v3, mismatch error; "v1": the v1 symbol
    memory_version_kwarg: bool = True
    returns_bytes: bool = False  # before convertStrBytes, strings came back as bytes


BINDING_13 = FakeBinding("13.615.71")
BINDING_11 = FakeBinding(
    "11.450.51",
    absent=_PROC_V2
    | _PROC_V3
    | _NEWER_THAN_R535
    | frozenset(
        {
            "nvmlDeviceGetCurrentClocksEventReasons",
            "nvmlSystemGetCudaDriverVersion_v2",
            "nvmlMemory_v2",
        }
    ),
    unsuffixed_processes="v1",
    memory_version_kwarg=False,
    returns_bytes=True,
)


# -- the fake library -------------------------------------------------------------------------
class FakeNvml(FakeEventApi):
    """The fake driver + binding. :attr:`module` is what ``import pynvml`` returns (its event
    API is in :mod:`fake_nvml_events`)."""

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        driver: FakeDriver = DRIVER_R535,
        binding: FakeBinding = BINDING_13,
    ) -> None:
        self.gpus = gpus
        self.driver = driver
        self.binding = binding
        self.calls: Counter[tuple[int | None, str]] = Counter()
        self.init_error: int | None = None  # the code nvmlInit fails with
        self.initialised = 0
        self.shutdowns = 0
        self._failures: dict[tuple[int, str], tuple[BaseException, int | None]] = {}
        self._field_failures: dict[tuple[int, int], int] = {}
        self._init_events(NVMLError)
        self.module = self._build_module()

    # -- test controls ------------------------------------------------------------------
    def install(self, monkeypatch: Any) -> FakeNvml:
        monkeypatch.setitem(sys.modules, "pynvml", self.module)
        return self

    def fail(
        self,
        gpu: int,
        function: str,
        error: int | BaseException,
        *,
        times: int | None = None,
    ) -> None:
        """Make ``function`` raise for ``gpu``: an NVML error code or any exception."""
        exc = NVMLError(error) if isinstance(error, int) else error
        self._failures[(gpu, function)] = (exc, times)

    def heal(self, gpu: int, function: str) -> None:
        self._failures.pop((gpu, function), None)

    def fail_field(self, gpu: int, field_id: int, code: int) -> None:
        """Make one field id come back from nvmlDeviceGetFieldValues with ``code``."""
        self._field_failures[(gpu, field_id)] = code

    def lose(self, gpu: int) -> None:
        """The GPU falls off the bus: every call on it raises GPU_IS_LOST from now on."""
        self.gpus[gpu].lost = True

    def count(self, gpu: int | None = None, function: str | None = None) -> int:
        return sum(
            n
            for (g, fn), n in self.calls.items()
            if (gpu is None or g == gpu) and (function is None or fn == function)
        )

    def functions_called(self, gpu: int) -> Counter[str]:
        return Counter({fn: n for (g, fn), n in self.calls.items() if g == gpu})

    def reset_counts(self) -> None:
        self.calls.clear()

    # -- plumbing -------------------------------------------------------------------------
    def _text(self, value: str) -> str | bytes:
        return value.encode() if self.binding.returns_bytes else value

    def _system(self, function: str, symbol: str | None = None) -> None:
        self.calls[(None, function)] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if (symbol or function) in self.driver.missing_symbols:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)

    def _device(self, function: str, handle: c_nvmlDevice_t, symbol: str | None = None) -> FakeGpu:
        index = handle.index
        self.calls[(index, function)] += 1
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if (symbol or function) in self.driver.missing_symbols:
            raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
        gpu = self.gpus[index]
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        failure = self._failures.get((index, function))
        if failure is not None:
            exc, times = failure
            if times is not None:
                if times <= 1:
                    del self._failures[(index, function)]
                else:
                    self._failures[(index, function)] = (exc, times - 1)
            raise exc
        return gpu

    def _build_module(self) -> types.ModuleType:
        mod = types.ModuleType("pynvml", "FAKE nvidia-ml-py for tests (support/fake_pynvml.py)")
        absent = self.binding.absent
        for name, value in _CONSTANTS.items():
            if name not in absent:
                setattr(mod, name, value)
        mod.NVMLError = NVMLError  # type: ignore[attr-defined]
        mod.NVMLLibraryMismatchError = NVMLLibraryMismatchError  # type: ignore[attr-defined]
        for name, cls in ERROR_CLASSES.items():
            setattr(mod, name, cls)
        mod.c_nvmlFieldValue_t = c_nvmlFieldValue_t  # type: ignore[attr-defined]
        mod.c_nvmlEventData_t = c_nvmlEventData_t  # type: ignore[attr-defined]
        mod.c_nvmlDeviceAttributes = c_nvmlDeviceAttributes  # type: ignore[attr-defined]
        for name, value in EVENT_CONSTANTS.items():
            if name not in absent:
                setattr(mod, name, value)
        mod.FAKE = self  # type: ignore[attr-defined]
        for name in dir(self):
            if name.startswith("nvml") and name not in absent:
                setattr(mod, name, getattr(self, name))
        if not self.binding.memory_version_kwarg:
            mod.nvmlDeviceGetMemoryInfo = self._memory_info_v1_only  # type: ignore[attr-defined]
        if self.binding.unsuffixed_processes == "v1":
            mod.nvmlDeviceGetComputeRunningProcesses = self._compute_v1  # type: ignore[attr-defined]
            mod.nvmlDeviceGetGraphicsRunningProcesses = self._graphics_v1  # type: ignore[attr-defined]
        return mod

    # -- system -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        self.calls[(None, "nvmlInit")] += 1
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._system("nvmlShutdown")
        self.initialised -= 1
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._system("nvmlSystemGetDriverVersion")
        return self._text(self.driver.version)

    def nvmlSystemGetNVMLVersion(self) -> str | bytes:
        self._system("nvmlSystemGetNVMLVersion")
        return self._text(self.driver.nvml_version)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._system("nvmlSystemGetCudaDriverVersion")
        return self.driver.cuda_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._system("nvmlSystemGetCudaDriverVersion_v2")
        return self.driver.cuda_version

    def nvmlDeviceGetCount(self) -> int:
        self._system("nvmlDeviceGetCount", "nvmlDeviceGetCount_v2")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> c_nvmlDevice_t:
        if index >= len(self.gpus):
            self._system("nvmlDeviceGetHandleByIndex")
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        handle = c_nvmlDevice_t(index)
        self._device("nvmlDeviceGetHandleByIndex", handle, "nvmlDeviceGetHandleByIndex_v2")
        return handle

    # -- static facts ---------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: c_nvmlDevice_t) -> str | bytes:
        gpu = self._device("nvmlDeviceGetName", handle)
        if isinstance(handle, FakeMigHandle):
            return self._text(self._mig(gpu, handle).name)
        return self._text(gpu.name)

    def nvmlDeviceGetUUID(self, handle: c_nvmlDevice_t) -> str | bytes:
        gpu = self._device("nvmlDeviceGetUUID", handle)
        if isinstance(handle, FakeMigHandle):
            return self._text(self._mig(gpu, handle).uuid)
        return self._text(gpu.uuid)

    # -- vGPU (nvidia-ml-py's names and shapes) ------------------------------------------
    def nvmlDeviceGetVirtualizationMode(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetVirtualizationMode", handle).virtualization_mode

    def nvmlDeviceGetActiveVgpus(self, handle: c_nvmlDevice_t) -> list[int]:
        gpu = self._device("nvmlDeviceGetActiveVgpus", handle)
        if gpu.virtualization_mode != NVML_GPU_VIRTUALIZATION_MODE_HOST_VGPU:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [v.instance for v in gpu.vgpus]

    def _vgpu(self, function: str, instance: int) -> FakeVgpu:
        """The vGPU with this instance id; the call counted under its GPU."""
        for index, gpu in enumerate(self.gpus):
            for v in gpu.vgpus:
                if v.instance == instance:
                    self._device(function, c_nvmlDevice_t(index))
                    return v
        self.calls[(None, function)] += 1
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def _vgpu_type(self, function: str, type_id: int) -> FakeVgpu:
        for gpu in self.gpus:
            for v in gpu.vgpus:
                if v.type_id == type_id:
                    self.calls[(None, function)] += 1
                    return v
        self.calls[(None, function)] += 1
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlVgpuInstanceGetType(self, vgpuInstance: int) -> int:
        return self._vgpu("nvmlVgpuInstanceGetType", vgpuInstance).type_id

    def nvmlVgpuInstanceGetFbUsage(self, vgpuInstance: int) -> int:
        return self._vgpu("nvmlVgpuInstanceGetFbUsage", vgpuInstance).fb_used

    def nvmlVgpuInstanceGetVmID(self, vgpuInstance: int) -> tuple[str | bytes, int]:
        v = self._vgpu("nvmlVgpuInstanceGetVmID", vgpuInstance)
        return self._text(v.vm_id), 0  # (id, NVML_VGPU_VM_ID_DOMAIN_ID)

    def nvmlVgpuTypeGetName(self, vgpuTypeId: int) -> str | bytes:
        return self._text(self._vgpu_type("nvmlVgpuTypeGetName", vgpuTypeId).type_name)

    def nvmlVgpuTypeGetFramebufferSize(self, vgpuTypeId: int) -> int:
        v = self._vgpu_type("nvmlVgpuTypeGetFramebufferSize", vgpuTypeId)
        return v.framebuffer_mib * MIB

    # -- MIG (the calls of nvidia-ml-py's MIG section, with its names and shapes) ----------
    @staticmethod
    def _mig(gpu: FakeGpu, handle: FakeMigHandle) -> FakeMig:
        mig = gpu.mig_slots[handle.slot] if handle.slot < len(gpu.mig_slots) else None
        if mig is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return mig

    def nvmlDeviceGetMigMode(self, device: c_nvmlDevice_t) -> list[int]:
        gpu = self._device("nvmlDeviceGetMigMode", device)
        if gpu.mig_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_mode, gpu.mig_mode]  # [current, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: c_nvmlDevice_t) -> int:
        gpu = self._device("nvmlDeviceGetMaxMigDeviceCount", device)
        if gpu.mig_mode is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(
        self, device: c_nvmlDevice_t, index: int
    ) -> c_nvmlDevice_t:
        gpu = self._device("nvmlDeviceGetMigDeviceHandleByIndex", device)
        if gpu.mig_mode != NVML_DEVICE_MIG_ENABLE:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if index >= 7:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig_slots) or gpu.mig_slots[index] is None:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return FakeMigHandle(device.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, device: c_nvmlDevice_t) -> ctypes.c_uint:
        self._device("nvmlDeviceIsMigDeviceHandle", device)
        # the real binding returns the c_uint itself, not its value
        return ctypes.c_uint(1 if isinstance(device, FakeMigHandle) else 0)

    def nvmlDeviceGetGpuInstanceId(self, device: c_nvmlDevice_t) -> int:
        gpu = self._device("nvmlDeviceGetGpuInstanceId", device)
        if not isinstance(device, FakeMigHandle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._mig(gpu, device).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: c_nvmlDevice_t) -> int:
        gpu = self._device("nvmlDeviceGetComputeInstanceId", device)
        if not isinstance(device, FakeMigHandle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self._mig(gpu, device).compute_instance_id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
        self, migDevice: c_nvmlDevice_t
    ) -> c_nvmlDevice_t:
        self._device("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice)
        if not isinstance(migDevice, FakeMigHandle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return c_nvmlDevice_t(migDevice.index)

    def nvmlDeviceGetAttributes(self, device: c_nvmlDevice_t) -> c_nvmlDeviceAttributes:
        gpu = self._device("nvmlDeviceGetAttributes", device, "nvmlDeviceGetAttributes_v2")
        attrs = c_nvmlDeviceAttributes()
        if isinstance(device, FakeMigHandle):
            mig = self._mig(gpu, device)
            attrs.multiprocessorCount = mig.sm_count
            attrs.gpuInstanceSliceCount = mig.slices
            attrs.computeInstanceSliceCount = mig.slices
            attrs.memorySizeMB = mig.memory_mib
        else:
            attrs.multiprocessorCount = 108
            attrs.gpuInstanceSliceCount = 7
            attrs.computeInstanceSliceCount = 7
            attrs.memorySizeMB = gpu.memory_total // MIB
        return attrs

    def nvmlDeviceGetPciInfo(self, handle: c_nvmlDevice_t) -> types.SimpleNamespace:
        gpu = self._device("nvmlDeviceGetPciInfo", handle, "nvmlDeviceGetPciInfo_v3")
        bus = int(gpu.pci_bus_id.split(":")[1], 16)
        # busId is a char array in the real struct: it reads back as bytes.
        return types.SimpleNamespace(
            busId=gpu.pci_bus_id.encode(),
            busIdLegacy=gpu.pci_bus_id[4:].encode(),
            domain=0,
            bus=bus,
            device=0,
            pciDeviceId=0x220410DE,
            pciSubSystemId=0,
        )

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetPowerManagementDefaultLimit", handle).default_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: c_nvmlDevice_t) -> list[int]:
        gpu = self._device("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return [100_000, gpu.max_limit_mw]

    def nvmlDeviceGetMaxClockInfo(self, handle: c_nvmlDevice_t, type: int) -> int:
        gpu = self._device("nvmlDeviceGetMaxClockInfo", handle)
        if type == NVML_CLOCK_SM:
            return gpu.max_sm_clock
        if type == NVML_CLOCK_MEM:
            return gpu.max_mem_clock
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCudaComputeCapability(self, handle: c_nvmlDevice_t) -> tuple[int, int]:
        return self._device("nvmlDeviceGetCudaComputeCapability", handle).compute_capability

    def nvmlDeviceGetSerial(self, handle: c_nvmlDevice_t) -> str | bytes:
        gpu = self._device("nvmlDeviceGetSerial", handle)
        if gpu.serial is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return self._text(gpu.serial)

    def nvmlDeviceGetVbiosVersion(self, handle: c_nvmlDevice_t) -> str | bytes:
        return self._text(self._device("nvmlDeviceGetVbiosVersion", handle).vbios)

    def nvmlDeviceGetPersistenceMode(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetPersistenceMode", handle).persistence

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max

    def nvmlDeviceGetMemoryBusWidth(self, device: c_nvmlDevice_t) -> int:
        gpu = self._device("nvmlDeviceGetMemoryBusWidth", device)
        if gpu.mem_bus_width is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.mem_bus_width

    # -- fast fields ----------------------------------------------------------------------
    def _memory(self, gpu: FakeGpu, v2: bool) -> types.SimpleNamespace:
        free = gpu.memory_total - gpu.memory_used - gpu.memory_reserved
        if v2:
            return types.SimpleNamespace(
                version=nvmlMemory_v2,
                total=gpu.memory_total,
                reserved=gpu.memory_reserved,
                free=free,
                used=gpu.memory_used,
            )
        return types.SimpleNamespace(
            total=gpu.memory_total, free=free, used=gpu.memory_used + gpu.memory_reserved
        )

    def nvmlDeviceGetMemoryInfo(
        self, handle: c_nvmlDevice_t, version: int | None = None
    ) -> types.SimpleNamespace:
        if isinstance(handle, FakeMigHandle):
            mig = self._mig(self._device("nvmlDeviceGetMemoryInfo", handle), handle)
            total = mig.memory_mib * MIB
            return types.SimpleNamespace(
                total=total, free=total - mig.memory_used, used=mig.memory_used
            )
        if not version:
            return self._memory(self._device("nvmlDeviceGetMemoryInfo", handle), v2=False)
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle, "nvmlDeviceGetMemoryInfo_v2")
        if version != nvmlMemory_v2:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return self._memory(gpu, v2=True)

    def _memory_info_v1_only(self, handle: c_nvmlDevice_t) -> types.SimpleNamespace:
        return self._memory(self._device("nvmlDeviceGetMemoryInfo", handle), v2=False)

    def nvmlDeviceGetUtilizationRates(self, handle: c_nvmlDevice_t) -> types.SimpleNamespace:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        if isinstance(handle, FakeMigHandle):  # NVML gives no utilisation per MIG instance
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetPowerUsage(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetEnforcedPowerLimit", handle).enforced_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: c_nvmlDevice_t) -> int:
        gpu = self._device("nvmlDeviceGetTotalEnergyConsumption", handle)
        if gpu.energy_mj is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.energy_mj

    def nvmlDeviceGetTemperature(self, handle: c_nvmlDevice_t, sensor: int) -> int:
        gpu = self._device("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temp_c

    def nvmlDeviceGetClockInfo(self, handle: c_nvmlDevice_t, type: int) -> int:
        gpu = self._device("nvmlDeviceGetClockInfo", handle)
        if type == NVML_CLOCK_SM:
            return gpu.sm_clock
        if type == NVML_CLOCK_MEM:
            return gpu.mem_clock
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetFanSpeed(self, handle: c_nvmlDevice_t) -> int:
        gpu = self._device("nvmlDeviceGetFanSpeed", handle)
        if gpu.fan_pct is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.fan_pct

    def nvmlDeviceGetPerformanceState(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetPerformanceState", handle).pstate

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_reasons

    # -- field values -------------------------------------------------------------------
    def _field(self, gpu: FakeGpu, index: int, field_id: int) -> tuple[int, int, float | int]:
        """(nvmlReturn, valueType, value) for one field id."""
        injected = self._field_failures.get((index, field_id))
        if injected is not None:
            return injected, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 0
        if field_id >= self.driver.field_id_limit:
            return NVML_ERROR_INVALID_ARGUMENT, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 0
        ull, uint, unsupported = (
            NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
            NVML_VALUE_TYPE_UNSIGNED_INT,
            (NVML_ERROR_NOT_SUPPORTED, NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, 0),
        )
        if field_id == NVML_FI_DEV_MEMORY_TEMP:
            return unsupported if gpu.mem_temp_c is None else (NVML_SUCCESS, uint, gpu.mem_temp_c)
        if field_id == NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return unsupported if gpu.energy_mj is None else (NVML_SUCCESS, ull, gpu.energy_mj)
        if field_id == NVML_FI_DEV_POWER_AVERAGE:
            if not gpu.power_average_supported:
                return unsupported
            return NVML_SUCCESS, uint, gpu.power_mw
        if field_id == NVML_FI_DEV_POWER_INSTANT:
            return NVML_SUCCESS, uint, gpu.power_mw
        if field_id == NVML_FI_DEV_POWER_CURRENT_LIMIT:
            return NVML_SUCCESS, uint, gpu.enforced_limit_mw
        if field_id in _ECC_FIELDS:
            count = self._ecc(gpu, *_ECC_FIELDS[field_id])
            return unsupported if count is None else (NVML_SUCCESS, ull, count)
        if field_id in (NVML_FI_DEV_RETIRED_SBE, NVML_FI_DEV_RETIRED_DBE):
            pages = gpu.retired_sbe if field_id == NVML_FI_DEV_RETIRED_SBE else gpu.retired_dbe
            return unsupported if pages is None else (NVML_SUCCESS, ull, len(pages))
        if field_id == NVML_FI_DEV_NVLINK_LINK_COUNT:
            return NVML_SUCCESS, uint, len(gpu.nvlink_states)
        if field_id in (
            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ):
            if not gpu.nvlink_states:
                return unsupported
            tx = field_id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
            return NVML_SUCCESS, ull, gpu.nvlink_tx_kib if tx else gpu.nvlink_rx_kib
        return unsupported

    def nvmlDeviceGetFieldValues(
        self, handle: c_nvmlDevice_t, fieldIds: list[int | tuple[int, int]]
    ) -> ctypes.Array[c_nvmlFieldValue_t]:
        gpu = self._device("nvmlDeviceGetFieldValues", handle)
        values = (c_nvmlFieldValue_t * len(fieldIds))()
        for i, entry in enumerate(fieldIds):
            field_id, scope = entry if isinstance(entry, tuple) else (entry, 0)
            rc, value_type, value = self._field(gpu, handle.index, field_id)
            fv = values[i]
            fv.fieldId, fv.scopeId, fv.nvmlReturn, fv.valueType = field_id, scope, rc, value_type
            if rc == NVML_SUCCESS:
                if value_type == NVML_VALUE_TYPE_UNSIGNED_INT:
                    fv.value.uiVal = int(value)
                else:
                    fv.value.ullVal = int(value)
        return values

    # -- slow fields ----------------------------------------------------------------------
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: c_nvmlDevice_t) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetPcieThroughput(self, device: c_nvmlDevice_t, counter: int) -> int:
        gpu = self._device("nvmlDeviceGetPcieThroughput", device)
        if counter == NVML_PCIE_UTIL_TX_BYTES:
            return gpu.pcie_tx_kbs
        if counter == NVML_PCIE_UTIL_RX_BYTES:
            return gpu.pcie_rx_kbs
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetNvLinkState(self, device: c_nvmlDevice_t, link: int) -> int:
        gpu = self._device("nvmlDeviceGetNvLinkState", device)
        if not gpu.nvlink_states:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if link >= len(gpu.nvlink_states):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlink_states[link]

    def nvmlDeviceGetTotalEccErrors(
        self, handle: c_nvmlDevice_t, errorType: int, counterType: int
    ) -> int:
        gpu = self._device("nvmlDeviceGetTotalEccErrors", handle)
        count = self._ecc(gpu, errorType, counterType)
        if count is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return count

    @staticmethod
    def _ecc(gpu: FakeGpu, error_type: int, counter_type: int) -> int | None:
        corrected = error_type == NVML_MEMORY_ERROR_TYPE_CORRECTED
        volatile = gpu.ecc_corrected if corrected else gpu.ecc_uncorrected
        if volatile is None or counter_type == NVML_VOLATILE_ECC:
            return volatile
        lifetime = gpu.ecc_aggregate_corrected if corrected else gpu.ecc_aggregate_uncorrected
        return volatile if lifetime is None else lifetime

    def nvmlDeviceGetRetiredPages(self, device: c_nvmlDevice_t, sourceFilter: int) -> list[int]:
        gpu = self._device("nvmlDeviceGetRetiredPages", device)
        pages = gpu.retired_sbe if sourceFilter == 0 else gpu.retired_dbe
        if pages is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return list(pages)

    # -- processes -----------------------------------------------------------------------
    @staticmethod
    def _procs_v2(
        procs: list[tuple[int, int | None]], instances: dict[int, tuple[int, int]] | None = None
    ) -> list[types.SimpleNamespace]:
        # The real v2/v3 wrappers turn NVML_VALUE_NOT_AVAILABLE into None themselves.
        none = (0xFFFFFFFF, 0xFFFFFFFF)
        return [
            types.SimpleNamespace(
                pid=pid,
                usedGpuMemory=used,
                gpuInstanceId=(instances or {}).get(pid, none)[0],
                computeInstanceId=(instances or {}).get(pid, none)[1],
            )
            for pid, used in procs
        ]

    @staticmethod
    def _procs_v1(procs: list[tuple[int, int | None]]) -> list[types.SimpleNamespace]:
        # Old bindings hand back the raw NVML_VALUE_NOT_AVAILABLE sentinel.
        na = NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        return [
            types.SimpleNamespace(pid=pid, usedGpuMemory=na if used is None else used)
            for pid, used in procs
        ]

    def nvmlDeviceGetComputeRunningProcesses_v3(
        self, handle: c_nvmlDevice_t
    ) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetComputeRunningProcesses_v3", handle)
        return self._procs_v2(gpu.compute_procs, gpu.proc_instances)

    def nvmlDeviceGetComputeRunningProcesses_v2(
        self, handle: c_nvmlDevice_t
    ) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetComputeRunningProcesses_v2", handle)
        return self._procs_v2(gpu.compute_procs, gpu.proc_instances)

    def nvmlDeviceGetComputeRunningProcesses(
        self, handle: c_nvmlDevice_t
    ) -> list[types.SimpleNamespace]:
        # nvidia-ml-py 12+: the unsuffixed name calls _v3 and turns FunctionNotFound into
        # NVMLLibraryMismatchError (its throwOnVersionMismatch decorator).
        try:
            gpu = self._device(
                "nvmlDeviceGetComputeRunningProcesses",
                handle,
                "nvmlDeviceGetComputeRunningProcesses_v3",
            )
        except NVMLError as exc:
            if exc.value == NVML_ERROR_FUNCTION_NOT_FOUND:
                raise NVMLLibraryMismatchError("Unversioned function called ...") from None
            raise
        return self._procs_v2(gpu.compute_procs)

    def nvmlDeviceGetGraphicsRunningProcesses_v3(
        self, handle: c_nvmlDevice_t
    ) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetGraphicsRunningProcesses_v3", handle)
        return self._procs_v2(gpu.graphics_procs)

    def nvmlDeviceGetGraphicsRunningProcesses_v2(
        self, handle: c_nvmlDevice_t
    ) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetGraphicsRunningProcesses_v2", handle)
        return self._procs_v2(gpu.graphics_procs)

    def nvmlDeviceGetGraphicsRunningProcesses(
        self, handle: c_nvmlDevice_t
    ) -> list[types.SimpleNamespace]:
        try:
            gpu = self._device(
                "nvmlDeviceGetGraphicsRunningProcesses",
                handle,
                "nvmlDeviceGetGraphicsRunningProcesses_v3",
            )
        except NVMLError as exc:
            if exc.value == NVML_ERROR_FUNCTION_NOT_FOUND:
                raise NVMLLibraryMismatchError("Unversioned function called ...") from None
            raise
        return self._procs_v2(gpu.graphics_procs)

    # -- per-process utilisation ----------------------------------------------------------
    def _util_since(self, gpu: FakeGpu, since: int) -> list[tuple[int, int, int]]:
        if gpu.util_samples is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        newer = [s for s in gpu.util_samples if s[1] > since]
        if not newer:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return newer

    def nvmlDeviceGetProcessUtilization(
        self, handle: c_nvmlDevice_t, timeStamp: int
    ) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetProcessUtilization", handle)
        return [
            types.SimpleNamespace(
                pid=pid, timeStamp=stamp, smUtil=sm, memUtil=sm // 2, encUtil=0, decUtil=0
            )
            for pid, stamp, sm in self._util_since(gpu, timeStamp)
        ]

    def nvmlDeviceGetProcessesUtilizationInfo(
        self, handle: c_nvmlDevice_t, timeStamp: int
    ) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetProcessesUtilizationInfo", handle)
        return [
            types.SimpleNamespace(
                timeStamp=stamp,
                pid=pid,
                smUtil=sm,
                memUtil=sm // 2,
                encUtil=0,
                decUtil=0,
                jpgUtil=0,
                ofaUtil=0,
            )
            for pid, stamp, sm in self._util_since(gpu, timeStamp)
        ]

    # nvidia-ml-py 11.x: the unsuffixed names are the v1 C functions.
    def _compute_v1(self, handle: c_nvmlDevice_t) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetComputeRunningProcesses", handle)
        return self._procs_v1(gpu.compute_procs)

    def _graphics_v1(self, handle: c_nvmlDevice_t) -> list[types.SimpleNamespace]:
        gpu = self._device("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return self._procs_v1(gpu.graphics_procs)


# Every function of the fake's module that takes a device handle, with the arguments a
# test can call it with (used by the signature check and the error matrix).
def device_functions() -> list[str]:
    return sorted(
        name
        for name in dir(FakeNvml)
        if name.startswith("nvmlDevice") and name not in ("nvmlDeviceGetCount",)
    )


# -- peers: what other NVML monitors need of the module (bench/idle_cpu.py runs one) ----------
# A separate block: the fake above is lltui's test double; this adds, on request, the extra
# names another tool's NVML layer reads at import or per tick, so both run on one fake.
PEER_CONSTANTS = {
    "NVML_DRIVER_WDDM": 0,
    "NVML_DRIVER_WDM": 1,
    "NVML_COMPUTEMODE_DEFAULT": 0,
    "NVML_COMPUTEMODE_EXCLUSIVE_THREAD": 1,
    "NVML_COMPUTEMODE_PROHIBITED": 2,
    "NVML_COMPUTEMODE_EXCLUSIVE_PROCESS": 3,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX": 140,
    "NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX": 141,
}


def add_peer_symbols(fake: FakeNvml) -> types.ModuleType:
    """``fake.module`` with what a peer monitor also reads: error-class lookup, the handle
    type, a few constants, plain functions (not bound methods) for every ``nvml*`` name, and
    the per-tick queries the fake lacks, answered from the same GPUs."""
    mod = fake.module
    NVMLError._errcode_to_string = dict(_ERROR_STRINGS)  # type: ignore[attr-defined]

    def exception_class(code: int) -> type[NVMLError]:
        return type(NVMLError(code))

    mod.nvmlExceptionClass = exception_class  # type: ignore[attr-defined]
    mod.c_nvmlDevice_t = c_nvmlDevice_t  # type: ignore[attr-defined]
    # no _nvmlGetFunctionPointer: a peer takes this binding as is, without ctypes patches
    mod._PrintableStructure = ctypes.Structure  # type: ignore[attr-defined]
    for name, value in PEER_CONSTANTS.items():
        setattr(mod, name, value)

    def not_supported(i: int, g: FakeGpu) -> Any:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def per_gpu(function: str, answer: Any) -> Any:
        def query(handle: c_nvmlDevice_t, *args: Any) -> Any:
            gpu = fake._device(function, handle)
            return answer(handle.index, gpu, *args)

        query.__name__ = function
        return query

    extra = {
        "nvmlDeviceGetIndex": lambda i, g: i,
        "nvmlDeviceGetComputeMode": lambda i, g: 0,
        "nvmlDeviceGetDisplayActive": lambda i, g: 0,
        "nvmlDeviceGetDisplayMode": lambda i, g: 0,
        "nvmlDeviceGetEncoderUtilization": lambda i, g: [0, 167000],
        "nvmlDeviceGetDecoderUtilization": lambda i, g: [0, 167000],
        "nvmlDeviceGetBAR1MemoryInfo": lambda i, g: types.SimpleNamespace(
            bar1Total=256 * MIB, bar1Used=4 * MIB, bar1Free=252 * MIB
        ),
        "nvmlDeviceGetTemperatureV": lambda i, g, *a: g.temp_c,
        "nvmlDeviceGetMPSComputeRunningProcesses": lambda i, g: [],
        "nvmlDeviceGetMPSComputeRunningProcesses_v3": lambda i, g: [],
        "nvmlDeviceGetMPSComputeRunningProcesses_v2": lambda i, g: [],
        "nvmlDeviceGetCurrentClocksEventReasons": lambda i, g: g.clock_reasons,
        "nvmlDeviceGetPowerManagementLimit": lambda i, g: g.enforced_limit_mw,
        "nvmlDeviceGetCurrentDriverModel": not_supported,  # Windows only
    }
    for name, answer in extra.items():
        if not hasattr(mod, name):
            setattr(mod, name, per_gpu(name, answer))
    for name in dir(mod):
        value = getattr(mod, name)
        if name.startswith("nvml") and isinstance(value, types.MethodType):
            method = value

            def plain(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
                return _method(*args, **kwargs)

            plain.__name__ = name
            setattr(mod, name, plain)
    return mod
