"""NVIDIA GPUs read through NVML with nvidia-ml-py (module ``pynvml``).

NVML is initialised once in :meth:`NvmlSource.open` and shut down in :meth:`NvmlSource.close`.
Fields are read at three rates:

* **static**, once per GPU at open: name, UUID, PCI bus id, memory total, power limits, max
  clocks, compute capability, serial, VBIOS, persistence mode, max PCIe link, NVLink links,
  and the index CUDA gives the GPU (see :mod:`lltui.core.monitor.cuda_order`).
* **fast**, every poll: memory, utilisation, power, energy counter, enforced power limit,
  temperature, clocks, fan, P-state and clock-event reasons. Energy, power and the power
  limit come from one ``nvmlDeviceGetFieldValues`` call where the driver answers it, so a fast
  poll costs 9 NVML calls per GPU (10 where it does not; the enforced limit then moves to
  the slow TTL).
* **slow**, on TTLs given to the constructor: ECC counts, retired pages, current PCIe link,
  NVLink state and throughput and the enforced limit (``slow_ttl_s``); processes
  (``process_ttl_s``); PCIe throughput (``pcie_ttl_s``). ``nvmlDeviceGetPcieThroughput``
  samples for about 20 ms per counter, so it never runs on the fast path: it runs inside
  the poll whose PCIe TTL has expired, on the poller's worker thread (two counters x 8 GPUs
  adds about 320 ms to that one poll; the UI does not wait on it).

Driver drift is handled where it bites: process info v3 -> v2 -> v1, memory info v2 -> v1,
clocks-event -> clocks-throttle reasons, field values -> one call per field. Each GPU
remembers which version answered and which fields it does not support, so a refused call is
not repeated every tick. A GPU that falls off the bus is marked lost and not asked again;
the others keep updating. A field that fails any other way is ``None`` for that tick and the
reason goes into ``GpuSample.error``.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lltui.core.monitor.cuda_order import (
    PCI_BUS_ID,
    CudaCandidate,
    cuda_indices_from_env,
    enumeration_order,
)
from lltui.core.monitor.models import (
    GpuProcess,
    GpuSample,
    GpuStatic,
    HostSample,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.monitor.throttle import reasons_from_mask
from lltui.sources.base import SequenceCounter, mono_clock, wall_clock

if TYPE_CHECKING:
    from lltui.sources.host import HostSampler

# nvmlReturn_t codes (nvml.h); fixed by the ABI, so old bindings that lack a name still match.
NVML_SUCCESS = 0
ERR_UNINITIALIZED = 1
ERR_INVALID_ARGUMENT = 2
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_DRIVER_NOT_LOADED = 9
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_LIB_RM_VERSION_MISMATCH = 18
ERR_ARGUMENT_VERSION_MISMATCH = 25

# Enum values and field ids (nvml.h).
TEMPERATURE_GPU = 0
CLOCK_SM = 1
CLOCK_MEM = 2
PSTATE_UNKNOWN = 32
MEMORY_ERROR_CORRECTED = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
RETIRED_BY_SBE = 0
RETIRED_BY_DBE = 1
PCIE_UTIL_TX_BYTES = 0
PCIE_UTIL_RX_BYTES = 1
FEATURE_ENABLED = 1
NVLINK_MAX_LINKS = 36
MEMORY_V2 = 0x02000028  # nvmlMemory_v2
VALUE_NOT_AVAILABLE_ULL = (1 << 64) - 1

FI_ECC_SBE_VOL_TOTAL = 3
FI_ECC_DBE_VOL_TOTAL = 4
FI_RETIRED_SBE = 29
FI_RETIRED_DBE = 30
FI_TOTAL_ENERGY_CONSUMPTION = 83  # mJ since the driver loaded
FI_NVLINK_LINK_COUNT = 91
FI_NVLINK_THROUGHPUT_DATA_TX = 138  # KiB, cumulative, all links
FI_NVLINK_THROUGHPUT_DATA_RX = 139
FI_POWER_AVERAGE = 185  # mW over 1 s: what nvmlDeviceGetPowerUsage returns on Ampere+
FI_POWER_CURRENT_LIMIT = 190  # mW, the limit enforced now

DEFAULT_SLOW_TTL_S = 5.0
DEFAULT_PROCESS_TTL_S = 2.0
DEFAULT_PCIE_TTL_S = 5.0

NOT_INSTALLED = "nvidia-ml-py is not installed"
NOT_THE_BINDING = "the module named pynvml here is not NVIDIA's nvidia-ml-py"
INSTALL_HINT = "pip install nvidia-ml-py (NVIDIA's binding; not the package named pynvml)"


# -- doctor probe ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class NvmlProbe:
    """What ``lltui doctor`` learns from NVML without keeping it open."""

    available: bool
    reason: str | None = None  # why not, in plain words
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_version: str | None = None  # "12.4"
    device_count: int = 0
    hint: str | None = None  # what to do next, or a warning when available


def cuda_version_text(version: int) -> str:
    """NVML's CUDA version integer as people write it: 12040 -> "12.4", 11080 -> "11.8"."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def _import_pynvml() -> Any:
    try:
        import pynvml
    except Exception:  # ImportError, or a broken install failing on import
        return None
    return pynvml


def _is_binding(nv: Any) -> bool:
    return all(hasattr(nv, name) for name in ("nvmlInit", "nvmlShutdown", "NVMLError"))


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return str(value).rstrip("\x00").strip()


def _error_code(exc: BaseException) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None


def _error_words(exc: BaseException) -> str:
    try:
        text = str(exc)  # the real binding may ask the library for the string
    except Exception:
        text = ""
    code = _error_code(exc)
    if not text:
        return f"NVML error {code}" if code is not None else type(exc).__name__
    return text


def init_failure(nv: Any, exc: BaseException) -> tuple[str, str]:
    """(reason, hint) in words for an ``nvmlInit`` failure."""
    code = _error_code(exc)
    if code == ERR_LIBRARY_NOT_FOUND:
        return (
            "NVIDIA driver not loaded (libnvidia-ml.so.1 not found)",
            "install the NVIDIA driver; in a container, start it with the GPUs passed in "
            "(docker run --gpus all)",
        )
    if code == ERR_DRIVER_NOT_LOADED:
        return (
            "NVIDIA driver not loaded (the nvidia kernel module is not running)",
            "load it (sudo modprobe nvidia) or reboot after installing the driver",
        )
    if code == ERR_NO_PERMISSION:
        return (
            "no permission to use the NVIDIA driver (cannot open /dev/nvidia*)",
            "add your user to the group that owns /dev/nvidia* or ask the admin",
        )
    if code == ERR_LIB_RM_VERSION_MISMATCH:
        return (
            "NVIDIA driver and libnvidia-ml.so.1 are different versions",
            "reboot (or reload the nvidia module) after a driver update",
        )
    if code is not None:
        return f"NVML did not initialise: {_error_words(exc)}", "run nvidia-smi to see why"
    return (
        f"NVML did not initialise: {type(exc).__name__}: {exc}",
        "run nvidia-smi to see why",
    )


def _system_value(nv: Any, names: Sequence[str]) -> tuple[Any, bool]:
    """First answer from the named system functions, and whether one was missing."""
    missing = False
    for name in names:
        fn = getattr(nv, name, None)
        if fn is None:
            continue
        try:
            return fn(), missing
        except getattr(nv, "NVMLLibraryMismatchError", ()):
            missing = True
        except nv.NVMLError as exc:
            if _error_code(exc) == ERR_FUNCTION_NOT_FOUND:
                missing = True
        except Exception:
            pass
    return None, missing


def _system_versions(nv: Any) -> tuple[str | None, str | None, str | None, bool]:
    """(driver, nvml, cuda) versions and whether a function was missing from the driver."""
    driver, m1 = _system_value(nv, ["nvmlSystemGetDriverVersion"])
    nvml, m2 = _system_value(nv, ["nvmlSystemGetNVMLVersion"])
    cuda, m3 = _system_value(
        nv, ["nvmlSystemGetCudaDriverVersion", "nvmlSystemGetCudaDriverVersion_v2"]
    )
    cuda_text = cuda_version_text(cuda) if isinstance(cuda, int) and cuda > 0 else None
    return (
        _text(driver) if driver is not None else None,
        _text(nvml) if nvml is not None else None,
        cuda_text,
        m1 or m2 or m3,
    )


def mismatch_hint(driver_version: str | None) -> str:
    driver = f"NVIDIA driver {driver_version}" if driver_version else "the NVIDIA driver"
    return (
        f"nvidia-ml-py and {driver} disagree (a function the binding calls is missing from "
        "the driver), so some fields show '-'; install the nvidia-ml-py release made for "
        "this driver, or use --source smi"
    )


def probe_nvml() -> NvmlProbe:
    """Initialise NVML, read versions and the GPU count, shut it down again. Never raises."""
    nv = _import_pynvml()
    if nv is None:
        return NvmlProbe(False, NOT_INSTALLED, hint=INSTALL_HINT)
    if not _is_binding(nv):
        return NvmlProbe(False, NOT_THE_BINDING, hint=INSTALL_HINT)
    try:
        nv.nvmlInit()
    except Exception as exc:
        reason, init_hint = init_failure(nv, exc)
        return NvmlProbe(False, reason, hint=init_hint)
    try:
        driver, nvml, cuda, missing = _system_versions(nv)
        count, missing_count = _system_value(nv, ["nvmlDeviceGetCount"])
        hint = mismatch_hint(driver) if missing or missing_count else None
        if not isinstance(count, int):
            return NvmlProbe(
                False,
                "NVML initialised but could not count the GPUs",
                driver,
                nvml,
                cuda,
                hint=hint or "run nvidia-smi to see why",
            )
        if count == 0:
            return NvmlProbe(
                False,
                "no NVIDIA GPU found (the driver is loaded but sees no GPU)",
                driver,
                nvml,
                cuda,
                0,
                hint="in a container, start it with the GPUs passed in (docker run --gpus all)",
            )
        return NvmlProbe(True, None, driver, nvml, cuda, count, hint)
    finally:
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()


# -- the source -----------------------------------------------------------------------------
class _GpuLost(Exception):
    """Raised inside one GPU's read when NVML says the GPU is lost."""


# Outcomes of one NVML call.
_OK = "ok"
_UNSUPPORTED = "unsupported"  # NOT_SUPPORTED / NO_PERMISSION: ask no more
_MISSING = "missing"  # the binding or the driver lacks the function (or this version of it)
_FAILED = "failed"  # anything else: None this tick, try again next tick

# A batched field answered per field with one of these will not come from the batch.
_NOT_BATCHABLE = frozenset(
    {ERR_NOT_SUPPORTED, ERR_NO_PERMISSION, ERR_INVALID_ARGUMENT, ERR_FUNCTION_NOT_FOUND}
)


def _mw_to_w(mw: Any) -> float:
    return float(mw) / 1000.0


@dataclass(frozen=True, slots=True)
class _Field:
    """One value that can come from ``nvmlDeviceGetFieldValues`` or from its own function."""

    key: str
    field_id: int
    convert: Callable[[Any], Any]
    fallback: str | None = None  # function to call when the batch cannot answer
    fallback_args: tuple[Any, ...] = ()
    fallback_convert: Callable[[Any], Any] | None = None
    fallback_on_slow_ttl: bool = False  # read on the slow TTL when not batched


FAST_FIELDS = (
    _Field("energy", FI_TOTAL_ENERGY_CONSUMPTION, int, "nvmlDeviceGetTotalEnergyConsumption"),
    _Field("power", FI_POWER_AVERAGE, _mw_to_w, "nvmlDeviceGetPowerUsage"),
    _Field(
        "power_limit",
        FI_POWER_CURRENT_LIMIT,
        _mw_to_w,
        "nvmlDeviceGetEnforcedPowerLimit",
        fallback_on_slow_ttl=True,
    ),
)
SLOW_FIELDS = (
    _Field(
        "ecc_corrected",
        FI_ECC_SBE_VOL_TOTAL,
        int,
        "nvmlDeviceGetTotalEccErrors",
        (MEMORY_ERROR_CORRECTED, VOLATILE_ECC),
    ),
    _Field(
        "ecc_uncorrected",
        FI_ECC_DBE_VOL_TOTAL,
        int,
        "nvmlDeviceGetTotalEccErrors",
        (MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC),
    ),
    _Field("retired_sbe", FI_RETIRED_SBE, int, "nvmlDeviceGetRetiredPages", (RETIRED_BY_SBE,), len),
    _Field("retired_dbe", FI_RETIRED_DBE, int, "nvmlDeviceGetRetiredPages", (RETIRED_BY_DBE,), len),
)
NVLINK_FIELDS = (
    _Field("nvlink_tx", FI_NVLINK_THROUGHPUT_DATA_TX, int),
    _Field("nvlink_rx", FI_NVLINK_THROUGHPUT_DATA_RX, int),
)
LINK_COUNT_FIELD = _Field("nvlink_count", FI_NVLINK_LINK_COUNT, int)

# (function, args, kwargs) from newest to oldest.
Variant = tuple[str, tuple[Any, ...], dict[str, Any]]
PROCESS_FAMILIES = (
    ("C", "procs_compute", "nvmlDeviceGetComputeRunningProcesses"),
    ("G", "procs_graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
)
REASON_VARIANTS: tuple[Variant, ...] = (
    ("nvmlDeviceGetCurrentClocksEventReasons", (), {}),
    ("nvmlDeviceGetCurrentClocksThrottleReasons", (), {}),
)


def _field_number(fv: Any) -> float | int:
    """The value of one nvmlFieldValue_t, read by its valueType."""
    member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
    value_type = int(fv.valueType)
    if not 0 <= value_type < len(member):
        raise ValueError(f"unknown field value type {value_type}")
    return getattr(fv.value, member[value_type])


def _used_memory(value: Any) -> int | None:
    if value is None:
        return None
    used = int(value)
    return None if used in (VALUE_NOT_AVAILABLE_ULL, -1) else used


@dataclass
class _Gpu:
    """What the source keeps about one GPU between polls."""

    index: int
    handle: Any
    static: GpuStatic | None = None
    lost_reason: str | None = None
    skip: set[str] = field(default_factory=set)  # fields this GPU will not answer
    unbatched: set[str] = field(default_factory=set)  # fields the batch will not answer
    batch_ok: bool = True  # nvmlDeviceGetFieldValues works for this GPU
    api: dict[str, int] = field(default_factory=dict)  # which variant answered, per family
    errors: list[str] = field(default_factory=list)  # this tick's field errors
    static_errors: list[str] = field(default_factory=list)  # shown with the first tick
    nvlink_links: int | None = None
    fast: dict[str, Any] = field(default_factory=dict)
    slow: dict[str, Any] = field(default_factory=dict)
    nvlink_prev: tuple[float, int, int] | None = None  # (t, tx KiB, rx KiB)
    raw_procs: tuple[GpuProcess, ...] = ()
    procs: tuple[GpuProcess, ...] = ()


class NvmlSource:
    """The GpuSource for local NVIDIA GPUs. See the module docstring for what is read when."""

    name = "nvml"

    def __init__(
        self,
        *,
        slow_ttl_s: float = DEFAULT_SLOW_TTL_S,
        process_ttl_s: float = DEFAULT_PROCESS_TTL_S,
        pcie_ttl_s: float = DEFAULT_PCIE_TTL_S,
        clock: Callable[[], float] = mono_clock,
        wall: Callable[[], float] = wall_clock,
        host: HostSampler | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.slow_ttl_s = slow_ttl_s
        self.process_ttl_s = process_ttl_s
        self.pcie_ttl_s = pcie_ttl_s
        self._clock = clock
        self._wall = wall
        self._host = host
        self._env = env
        self._nv: Any = None
        self._nvml_error: type[BaseException] = Exception
        self._mismatch_error: tuple[type[BaseException], ...] = ()
        self._gpus: list[_Gpu] = []
        self._info: RigInfo | None = None
        self._hints: list[str] = []
        self._mismatch_noted = False
        self._last: dict[str, float] = {}
        self._seq = SequenceCounter()
        self._memory_variants: tuple[Variant, ...] = ()
        self._driver_version: str | None = None

    # -- GpuSource ----------------------------------------------------------------------
    def open(self) -> RigInfo:
        if self._info is not None:
            return self._info
        nv = _import_pynvml()
        if nv is None:
            raise SourceUnavailable(NOT_INSTALLED)
        if not _is_binding(nv):
            raise SourceUnavailable(NOT_THE_BINDING)
        try:
            nv.nvmlInit()
        except Exception as exc:
            raise SourceUnavailable(init_failure(nv, exc)[0]) from None
        self._nv = nv
        self._nvml_error = nv.NVMLError
        mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
        self._mismatch_error = (mismatch,) if isinstance(mismatch, type) else ()
        try:
            return self._open_devices()
        except BaseException:
            self.close()
            raise

    def poll(self) -> RigSample:
        if self._info is None or self._nv is None:
            raise SourceUnavailable("the NVML source is not open")
        now = self._clock()
        slow = self._due("slow", self.slow_ttl_s, now)
        procs = self._due("procs", self.process_ttl_s, now)
        pcie = self._due("pcie", self.pcie_ttl_s, now)
        for g in self._gpus:
            self._read_gpu(g, now, slow=slow, procs=procs, pcie=pcie)
        if procs:
            self._enrich_processes()
        samples = tuple(self._sample(g) for g in self._gpus)
        host, host_error = self._sample_host()
        error = host_error
        if samples and all(s.lost for s in samples):
            error = "every GPU is lost; restart the driver or reboot"
        return RigSample(
            seq=self._seq.next(),
            t=now,
            wall=self._wall(),
            info=self._info,
            gpus=samples,
            host=host,
            error=error,
        )

    def close(self) -> None:
        nv, self._nv = self._nv, None
        self._info = None
        self._gpus = []
        self._last = {}
        self._hints = []
        self._mismatch_noted = False
        if nv is not None:
            # Closing must not fail; the process is leaving NVML either way.
            with contextlib.suppress(Exception):
                nv.nvmlShutdown()

    # -- open -----------------------------------------------------------------------------
    def _open_devices(self) -> RigInfo:
        nv = self._nv
        driver, nvml, cuda, missing = _system_versions(nv)
        self._driver_version = driver
        if missing:
            self._note_mismatch()
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            code = _error_code(exc)
            if code == ERR_NO_PERMISSION:
                raise SourceUnavailable(
                    "no permission to use the NVIDIA driver (cannot open /dev/nvidia*)"
                ) from None
            raise SourceUnavailable(f"NVML could not count the GPUs: {_error_words(exc)}") from None
        if count <= 0:
            raise SourceUnavailable("no NVIDIA GPU found (the driver is loaded but sees no GPU)")
        self._memory_variants = (
            (("nvmlDeviceGetMemoryInfo", (), {"version": nv.nvmlMemory_v2}),)
            if hasattr(nv, "nvmlMemory_v2")
            else ()
        ) + (("nvmlDeviceGetMemoryInfo", (), {}),)

        gpus: list[_Gpu] = []
        refused: list[str] = []
        for index in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                code = _error_code(exc)
                if code == ERR_GPU_IS_LOST:
                    lost = _Gpu(index, None, lost_reason=self._lost_words())
                    lost.static = GpuStatic(index, "", f"GPU {index}", "", 0)
                    gpus.append(lost)
                elif code == ERR_NO_PERMISSION:
                    refused.append(f"GPU {index}: no permission")
                else:
                    refused.append(f"GPU {index}: {_error_words(exc)}")
                continue
            gpus.append(self._read_static(_Gpu(index, handle)))
        if not gpus:
            raise SourceUnavailable(
                f"none of the {count} NVIDIA GPU(s) could be opened ({'; '.join(refused)})"
            )
        if refused:
            self._hints.append(
                "left out GPUs NVML would not open (" + "; ".join(refused) + "); "
                "in a container or cgroup only some GPUs may be yours"
            )
        self._gpus = gpus
        self._assign_cuda_indices()
        self._info = RigInfo(
            source=self.name,
            driver_version=driver,
            cuda_version=cuda,
            nvml_version=nvml,
            hostname=socket.gethostname(),
            gpus=tuple(g.static for g in gpus if g.static is not None),
            hints=tuple(self._hints),
        )
        if self._host is None:
            from lltui.sources.host import HostSampler

            self._host = HostSampler()
        return self._info

    def _read_static(self, g: _Gpu) -> _Gpu:
        i = g.index
        try:
            name = self._call(g, "name", "nvmlDeviceGetName", convert=_text)
            uuid = self._call(g, "uuid", "nvmlDeviceGetUUID", convert=_text)
            pci = self._call(g, "pci", "nvmlDeviceGetPciInfo", convert=lambda p: _text(p.busId))
            memory = self._versioned(g, "memory", self._memory_variants)
            total = int(memory.total) if memory is not None else 0
            default_limit = self._call(
                g, "power_default", "nvmlDeviceGetPowerManagementDefaultLimit", convert=_mw_to_w
            )
            max_limit = self._call(
                g,
                "power_max",
                "nvmlDeviceGetPowerManagementLimitConstraints",
                convert=lambda c: _mw_to_w(c[1]),
            )
            max_sm = self._call(g, "max_sm", "nvmlDeviceGetMaxClockInfo", CLOCK_SM, convert=int)
            max_mem = self._call(g, "max_mem", "nvmlDeviceGetMaxClockInfo", CLOCK_MEM, convert=int)
            cc = self._call(
                g,
                "cc",
                "nvmlDeviceGetCudaComputeCapability",
                convert=lambda c: (int(c[0]), int(c[1])),
            )
            serial = self._call(g, "serial", "nvmlDeviceGetSerial", convert=_text)
            vbios = self._call(g, "vbios", "nvmlDeviceGetVbiosVersion", convert=_text)
            persistence = self._call(
                g,
                "persistence",
                "nvmlDeviceGetPersistenceMode",
                convert=lambda m: int(m) == FEATURE_ENABLED,
            )
            gen_max = self._call(g, "gen_max", "nvmlDeviceGetMaxPcieLinkGeneration", convert=int)
            width_max = self._call(g, "width_max", "nvmlDeviceGetMaxPcieLinkWidth", convert=int)
            g.nvlink_links = self._count_nvlinks(g)
        except _GpuLost:
            g.lost_reason = self._lost_words()
            g.static = GpuStatic(i, "", f"GPU {i}", "", 0)
            return g
        g.static_errors, g.errors = g.errors, []
        g.static = GpuStatic(
            index=i,
            uuid=uuid or "",
            name=name or f"GPU {i}",
            pci_bus_id=pci or "",
            memory_total=total,
            power_limit_default_w=default_limit,
            power_limit_max_w=max_limit,
            max_sm_clock_mhz=max_sm,
            max_mem_clock_mhz=max_mem,
            compute_capability=cc,
            pcie_gen_max=gen_max,
            pcie_width_max=width_max,
            nvlink_links=g.nvlink_links,
            serial=serial or None,
            vbios=vbios or None,
            persistence_mode=persistence,
        )
        return g

    def _count_nvlinks(self, g: _Gpu) -> int | None:
        """Links present: the link-count field, else the links whose state NVML answers."""
        values, _ = self._read_fields(g, (LINK_COUNT_FIELD,))
        count = values.get(LINK_COUNT_FIELD.key)
        if count is None:
            count = 0
            for link in range(NVLINK_MAX_LINKS):
                outcome, _ = self._attempt(g, "nvmlDeviceGetNvLinkState", (link,), {})
                if outcome != _OK:
                    break
                count += 1
        return int(count) or None

    def _assign_cuda_indices(self) -> None:
        env = os.environ if self._env is None else self._env
        statics = [g.static for g in self._gpus if g.static is not None]
        candidates = [CudaCandidate(s.uuid, s.pci_bus_id, s.compute_capability) for s in statics]
        indices = cuda_indices_from_env(candidates, env)
        for g, cuda_index in zip(self._gpus, indices, strict=True):
            if g.static is not None:
                g.static = replace(g.static, cuda_index=cuda_index)
        order = (env.get("CUDA_DEVICE_ORDER") or "").strip().upper()
        if order != PCI_BUS_ID and enumeration_order(candidates, order) != list(
            range(len(candidates))
        ):
            self._hints.append(
                "CUDA numbers these GPUs differently from nvidia-smi (by compute capability); "
                "set CUDA_DEVICE_ORDER=PCI_BUS_ID so --main-gpu and --tensor-split follow "
                "nvidia-smi's order"
            )

    # -- one NVML call ------------------------------------------------------------------
    def _attempt(
        self, g: _Gpu, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[str, Any]:
        """Call ``name(handle, *args, **kwargs)``; (outcome, value or error words)."""
        fn = getattr(self._nv, name, None)
        if fn is None:
            return _MISSING, None
        try:
            return _OK, fn(g.handle, *args, **kwargs)
        except self._nvml_error as exc:
            code = _error_code(exc)
            if code == ERR_GPU_IS_LOST:
                raise _GpuLost() from None
            if code in (ERR_NOT_SUPPORTED, ERR_NO_PERMISSION):
                return _UNSUPPORTED, None
            if code in (ERR_FUNCTION_NOT_FOUND, ERR_ARGUMENT_VERSION_MISMATCH):
                return _MISSING, None
            return _FAILED, _error_words(exc)
        except self._mismatch_error:
            return _MISSING, None
        except TypeError as exc:
            # An old binding without the keyword we pass (memory info's ``version``).
            if kwargs:
                return _MISSING, None
            return _FAILED, f"TypeError: {exc}"
        except Exception as exc:
            return _FAILED, f"{type(exc).__name__}: {exc}"

    def _settle(self, g: _Gpu, key: str, name: str, outcome: str, value: Any, convert: Any) -> Any:
        """Turn an outcome into the field's value, remembering what not to ask again."""
        if outcome == _OK:
            if convert is None:
                return value
            try:
                return convert(value)
            except Exception as exc:
                g.errors.append(f"{key}: unreadable answer ({type(exc).__name__}: {exc})")
                return None
        if outcome == _FAILED:
            g.errors.append(f"{key}: {value}")
            return None
        g.skip.add(key)
        if outcome == _MISSING:
            self._note_mismatch()
        return None

    def _call(
        self,
        g: _Gpu,
        key: str,
        name: str,
        *args: Any,
        convert: Callable[[Any], Any] | None = None,
    ) -> Any:
        if key in g.skip:
            return None
        outcome, value = self._attempt(g, name, args, {})
        return self._settle(g, key, name, outcome, value, convert)

    def _versioned(
        self,
        g: _Gpu,
        key: str,
        variants: Sequence[Variant],
        *,
        older_on: frozenset[str] = frozenset({_MISSING, _UNSUPPORTED}),
        convert: Callable[[Any], Any] | None = None,
    ) -> Any:
        """Call the newest variant that works here, moving to an older one (for good) when
        the newer is missing from the binding or the driver."""
        if key in g.skip:
            return None
        start = g.api.get(key, 0)
        for i in range(start, len(variants)):
            name, args, kwargs = variants[i]
            outcome, value = self._attempt(g, name, args, kwargs)
            if outcome in older_on and i + 1 < len(variants):
                g.api[key] = i + 1
                continue
            return self._settle(g, key, name, outcome, value, convert)
        return None

    def _note_mismatch(self) -> None:
        if not self._mismatch_noted:
            self._mismatch_noted = True
            self._add_hint(mismatch_hint(self._driver_version))

    def _add_hint(self, hint: str) -> None:
        if hint in self._hints:
            return
        self._hints.append(hint)
        if self._info is not None:
            self._info = replace(self._info, hints=tuple(self._hints))

    @staticmethod
    def _lost_words() -> str:
        return "GPU is lost (fell off the bus or stopped answering); it needs a reset or reboot"

    # -- field values -------------------------------------------------------------------
    def _read_fields(
        self, g: _Gpu, fields: Iterable[_Field]
    ) -> tuple[dict[str, Any], list[_Field]]:
        """Values the batch gave, and the fields it could not give (to read another way)."""
        wanted = [f for f in fields if f.key not in g.skip]
        batched = [f for f in wanted if f.key not in g.unbatched] if g.batch_ok else []
        out: dict[str, Any] = {}
        if batched:
            outcome, raw = self._attempt(
                g, "nvmlDeviceGetFieldValues", ([f.field_id for f in batched],), {}
            )
            if outcome == _OK:
                try:
                    self._take_fields(g, batched, raw, out)
                except _GpuLost:
                    raise
                except Exception as exc:
                    g.errors.append(f"field values: unreadable ({type(exc).__name__}: {exc})")
                    out.update(dict.fromkeys((f.key for f in batched), None))
            elif outcome == _FAILED:
                g.errors.append(f"field values: {raw}")
                out.update(dict.fromkeys((f.key for f in batched), None))
            else:
                g.batch_ok = False  # this driver or GPU does not batch: one call per field
        pending = [f for f in wanted if f.key not in out]
        return out, pending

    @staticmethod
    def _take_fields(g: _Gpu, batched: list[_Field], raw: Any, out: dict[str, Any]) -> None:
        answers = list(raw)
        if len(answers) != len(batched):
            raise ValueError(f"{len(answers)} answers for {len(batched)} fields")
        for f, fv in zip(batched, answers, strict=True):
            rc = int(fv.nvmlReturn)
            if rc == NVML_SUCCESS:
                try:
                    out[f.key] = f.convert(_field_number(fv))
                except Exception as exc:
                    g.errors.append(f"{f.key}: unreadable answer ({exc})")
                    out[f.key] = None
            elif rc == ERR_GPU_IS_LOST:
                raise _GpuLost()
            elif rc in _NOT_BATCHABLE:
                g.unbatched.add(f.key)
            else:
                g.errors.append(f"{f.key}: NVML error {rc}")
                out[f.key] = None

    def _fallback(self, g: _Gpu, f: _Field) -> Any:
        if f.fallback is None:
            g.skip.add(f.key)
            return None
        convert = f.fallback_convert or f.convert
        return self._call(g, f.key, f.fallback, *f.fallback_args, convert=convert)

    # -- a tick ---------------------------------------------------------------------------
    def _due(self, group: str, ttl: float, now: float) -> bool:
        if ttl == math.inf:  # a group the caller does not want (one-shot API reads)
            return False
        last = self._last.get(group)
        if last is not None and now - last < ttl:
            return False
        self._last[group] = now
        return True

    def _read_gpu(self, g: _Gpu, now: float, *, slow: bool, procs: bool, pcie: bool) -> None:
        if g.lost_reason is not None:
            return
        g.errors, g.static_errors = g.static_errors, []
        g.fast = {}
        try:
            self._read_fast(g)
            if slow:
                self._read_slow(g, now)
            if pcie:
                g.slow["pcie_tx"] = self._call(
                    g, "pcie_tx", "nvmlDeviceGetPcieThroughput", PCIE_UTIL_TX_BYTES, convert=float
                )
                g.slow["pcie_rx"] = self._call(
                    g, "pcie_rx", "nvmlDeviceGetPcieThroughput", PCIE_UTIL_RX_BYTES, convert=float
                )
            if procs:
                g.raw_procs = self._read_processes(g)
        except _GpuLost:
            g.lost_reason = self._lost_words()
        except Exception as exc:  # a bug here must cost one GPU's tick, not the poll
            g.errors.append(f"internal error: {type(exc).__name__}: {exc}")

    def _read_fast(self, g: _Gpu) -> None:
        fast: dict[str, Any] = {}
        memory = self._versioned(g, "memory", self._memory_variants)
        if memory is not None:
            try:
                fast["memory_used"] = int(memory.used)
                fast["memory_free"] = int(memory.free)
                reserved = getattr(memory, "reserved", None)  # memory info v2 only
                fast["memory_reserved"] = int(reserved) if reserved is not None else None
                if g.static is not None and g.static.memory_total <= 0 < int(memory.total):
                    self._late_memory_total(g, int(memory.total))
            except Exception as exc:
                g.errors.append(f"memory: unreadable answer ({type(exc).__name__}: {exc})")
        util = self._call(
            g,
            "util",
            "nvmlDeviceGetUtilizationRates",
            convert=lambda u: (float(u.gpu), float(u.memory)),
        )
        if util is not None:
            fast["util_gpu"], fast["util_mem"] = util
        values, pending = self._read_fields(g, FAST_FIELDS)
        for f in pending:
            if not f.fallback_on_slow_ttl:
                values[f.key] = self._fallback(g, f)
        fast.update(values)
        fast["temp"] = self._call(
            g, "temp", "nvmlDeviceGetTemperature", TEMPERATURE_GPU, convert=float
        )
        fast["sm_clock"] = self._call(
            g, "sm_clock", "nvmlDeviceGetClockInfo", CLOCK_SM, convert=int
        )
        fast["mem_clock"] = self._call(
            g, "mem_clock", "nvmlDeviceGetClockInfo", CLOCK_MEM, convert=int
        )
        fast["fan"] = self._call(g, "fan", "nvmlDeviceGetFanSpeed", convert=float)
        fast["pstate"] = self._call(
            g,
            "pstate",
            "nvmlDeviceGetPerformanceState",
            convert=lambda p: None if int(p) == PSTATE_UNKNOWN else int(p),
        )
        fast["throttle"] = self._versioned(
            g,
            "throttle",
            REASON_VARIANTS,
            older_on=frozenset({_MISSING}),
            convert=lambda mask: reasons_from_mask(int(mask)),
        )
        g.fast = fast

    def _late_memory_total(self, g: _Gpu, total: int) -> None:
        """The total NVML could not give at open arrived with a later reading."""
        if g.static is None:
            return
        g.static = replace(g.static, memory_total=total)
        if self._info is not None:
            statics = tuple(x.static for x in self._gpus if x.static is not None)
            self._info = replace(self._info, gpus=statics)

    def _read_slow(self, g: _Gpu, now: float) -> None:
        slow = g.slow
        slow["pcie_gen"] = self._call(
            g, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration", convert=int
        )
        slow["pcie_width"] = self._call(
            g, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", convert=int
        )
        # The enforced limit, when the fast batch cannot carry it.
        for f in FAST_FIELDS:
            if f.fallback_on_slow_ttl and (not g.batch_ok or f.key in g.unbatched):
                slow[f.key] = self._fallback(g, f)
        fields = SLOW_FIELDS + (NVLINK_FIELDS if g.nvlink_links else ())
        values, pending = self._read_fields(g, fields)
        for f in pending:
            values[f.key] = self._fallback(g, f)
        for f in SLOW_FIELDS:
            slow[f.key] = values.get(f.key)
        retired = [
            v for v in (values.get("retired_sbe"), values.get("retired_dbe")) if v is not None
        ]
        slow["retired_pages"] = sum(retired) if retired else None
        if g.nvlink_links:
            self._read_nvlink(g, now, values)

    def _read_nvlink(self, g: _Gpu, now: float, values: dict[str, Any]) -> None:
        slow = g.slow
        states = []
        for link in range(g.nvlink_links or 0):
            state = self._call(g, "nvlink_state", "nvmlDeviceGetNvLinkState", link, convert=int)
            if "nvlink_state" in g.skip:
                break
            states.append(state)
        known = [s for s in states if s is not None]
        slow["nvlink_active"] = sum(1 for s in known if s == FEATURE_ENABLED) if known else None
        tx, rx = values.get("nvlink_tx"), values.get("nvlink_rx")
        slow["nvlink_tx_kbs"] = slow["nvlink_rx_kbs"] = None
        if tx is None or rx is None:
            g.nvlink_prev = None
            return
        prev, g.nvlink_prev = g.nvlink_prev, (now, int(tx), int(rx))
        if prev is None or now <= prev[0]:
            return
        dt = now - prev[0]
        d_tx, d_rx = int(tx) - prev[1], int(rx) - prev[2]
        if d_tx >= 0 and d_rx >= 0:  # a counter that went back was reset: skip one reading
            slow["nvlink_tx_kbs"] = d_tx / dt
            slow["nvlink_rx_kbs"] = d_rx / dt

    def _read_processes(self, g: _Gpu) -> tuple[GpuProcess, ...]:
        merged: dict[int, tuple[str, int | None]] = {}
        for kind, key, base in PROCESS_FAMILIES:
            variants: list[Variant] = [
                (f"{base}_v3", (), {}),
                (f"{base}_v2", (), {}),
                (base, (), {}),
            ]
            listed = self._versioned(g, key, variants, older_on=frozenset({_MISSING}))
            if listed is None:
                continue
            try:
                entries = [(int(p.pid), _used_memory(p.usedGpuMemory)) for p in listed]
            except Exception as exc:
                g.errors.append(f"{key}: unreadable answer ({type(exc).__name__}: {exc})")
                continue
            for pid, used in entries:
                if pid not in merged:
                    merged[pid] = (kind, used)
                    continue
                kinds, known = merged[pid]
                # Both lists report the process's memory on this GPU, not a share of it.
                both = max((v for v in (known, used) if v is not None), default=None)
                merged[pid] = (kinds if kind in kinds else f"{kinds}+{kind}", both)
        out = [
            GpuProcess(pid=pid, gpu_index=g.index, used_memory=used, kind=kind)
            for pid, (kind, used) in merged.items()
        ]
        out.sort(key=lambda p: (-(p.used_memory or 0), p.pid))
        return tuple(out)

    def _enrich_processes(self) -> None:
        live = [g for g in self._gpus if g.lost_reason is None]
        everyone = [p for g in live for p in g.raw_procs]
        if self._host is None or not everyone:
            for g in live:
                g.procs = g.raw_procs
            return
        try:
            enriched = self._host.enrich(everyone)
        except Exception:
            enriched = tuple(everyone)  # host facts are extras; the GPU list still stands
        by_gpu: dict[int, list[GpuProcess]] = {}
        for p in enriched:
            by_gpu.setdefault(p.gpu_index, []).append(p)
        for g in live:
            g.procs = tuple(by_gpu.get(g.index, ()))

    def _sample(self, g: _Gpu) -> GpuSample:
        static = g.static or GpuStatic(g.index, "", f"GPU {g.index}", "", 0)
        if g.lost_reason is not None:
            return GpuSample(info=static, lost=True, error=g.lost_reason)
        f, s = g.fast, g.slow
        power_limit = f.get("power_limit", s.get("power_limit"))
        return GpuSample(
            info=static,
            memory_used=f.get("memory_used"),
            memory_free=f.get("memory_free"),
            memory_reserved=f.get("memory_reserved"),
            util_gpu=f.get("util_gpu"),
            util_mem=f.get("util_mem"),
            power_w=f.get("power"),
            power_limit_w=power_limit,
            energy_mj=f.get("energy"),
            temp_c=f.get("temp"),
            sm_clock_mhz=f.get("sm_clock"),
            mem_clock_mhz=f.get("mem_clock"),
            fan_pct=f.get("fan"),
            pstate=f.get("pstate"),
            throttle_reasons=f.get("throttle"),
            pcie_gen=s.get("pcie_gen"),
            pcie_width=s.get("pcie_width"),
            pcie_rx_kbs=s.get("pcie_rx"),
            pcie_tx_kbs=s.get("pcie_tx"),
            nvlink_active=s.get("nvlink_active"),
            nvlink_rx_kbs=s.get("nvlink_rx_kbs"),
            nvlink_tx_kbs=s.get("nvlink_tx_kbs"),
            ecc_uncorrected=s.get("ecc_uncorrected"),
            ecc_corrected=s.get("ecc_corrected"),
            retired_pages=s.get("retired_pages"),
            processes=g.procs,
            error="; ".join(dict.fromkeys(g.errors)) or None,
        )

    def _sample_host(self) -> tuple[HostSample, str | None]:
        if self._host is None:
            return HostSample(), None
        try:
            return self._host.sample(), None
        except Exception as exc:
            return HostSample(), f"host CPU/RAM could not be read: {type(exc).__name__}: {exc}"
