"""FAKE ``pynvml`` (nvidia-ml-py) for the topology calls, for machines without an NVIDIA GPU.

It is not the real binding: it answers the calls ``lltui.sources.gpu.topo`` makes from a rig
description (GPUs, their NVLinks, pairwise PCIe ancestors, P2P status, CPU and NUMA
affinity), raising the binding's error classes where a real driver would. Constants and
function names mirror nvidia-ml-py's; a test checks them against the real module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Constants, same names and values as nvidia-ml-py (NVML_P2P_CAPS_INDEX_READ is a 1-tuple
# there too).
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_P2P_CAPS_INDEX_READ = (0,)
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3
NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_P2P_STATUS_UNKNOWN = 6
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 255
NVML_AFFINITY_SCOPE_NODE = 0
NVML_AFFINITY_SCOPE_SOCKET = 1

CONSTANT_NAMES = tuple(name for name in list(globals()) if name.startswith("NVML_"))

NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_GPU_IS_LOST = 15

_MESSAGES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
}


class NVMLError(Exception):
    value = 999

    def __init__(self, value: int | None = None) -> None:
        if value is not None:
            self.value = value
        super().__init__(self.value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"Unknown Error {self.value}")


class NVMLError_InvalidArgument(NVMLError):
    value = NVML_ERROR_INVALID_ARGUMENT


class NVMLError_NotSupported(NVMLError):
    value = NVML_ERROR_NOT_SUPPORTED


class NVMLError_DriverNotLoaded(NVMLError):
    value = NVML_ERROR_DRIVER_NOT_LOADED


class NVMLError_LibraryNotFound(NVMLError):
    value = NVML_ERROR_LIBRARY_NOT_FOUND


class NVMLError_GpuIsLost(NVMLError):
    value = NVML_ERROR_GPU_IS_LOST


SWITCH = "switch"  # an NVLink whose far end is an NVSwitch
NPU = "npu"  # an NVLink to an IBM POWER9 CPU


@dataclass
class FakeGpu:
    name: str
    bus_id: str  # as NVML prints it: "00000000:18:00.0"
    memory_mib: int
    compute_capability: tuple[int, int]
    nvlinks: list[str] = field(default_factory=list)  # per link: peer bus id, SWITCH, NPU, ""
    cpus: Iterable[int] = ()
    numa_node: int | None = None  # the CPU node nearest the GPU
    gpu_numa_id: int | None = None  # the GPU's own memory node (coherent systems only)
    pcie: tuple[int, int] = (4, 16)
    uuid: str = ""


@dataclass
class _PciInfo:
    busId: bytes
    busIdLegacy: bytes


@dataclass
class _Memory:
    total: int
    free: int
    used: int


class FakeTopoNvml:
    """Stands in for the ``pynvml`` module: pass it where the module would go.

    ``ancestors[(i, j)]`` is the NVML topology level of a GPU pair (i < j), ``p2p[(i, j)]`` its
    P2P read status (default OK); ``fail`` maps a function name to the error class it raises
    (for every GPU) or to ``{gpu_index: error class}``; ``missing`` names functions this
    binding lacks; ``legacy_bus_ids`` prints bus ids with a 4-digit domain, as old drivers do.
    """

    def __init__(
        self,
        gpus: list[FakeGpu],
        ancestors: dict[tuple[int, int], int] | None = None,
        *,
        p2p: dict[tuple[int, int], int] | None = None,
        fail: dict[str, Any] | None = None,
        init_error: type[NVMLError] | None = None,
        missing: Iterable[str] = (),
        legacy_bus_ids: bool = False,
    ) -> None:
        self.gpus = gpus
        self.ancestors = ancestors or {}
        self.p2p = p2p or {}
        self.fail = fail or {}
        self.init_error = init_error
        self.missing = set(missing)
        self.legacy_bus_ids = legacy_bus_ids
        self.initialised = False
        self.calls: list[str] = []
        for name in CONSTANT_NAMES:
            setattr(self, name, globals()[name])
        for cls in (
            NVMLError,
            NVMLError_InvalidArgument,
            NVMLError_NotSupported,
            NVMLError_DriverNotLoaded,
            NVMLError_LibraryNotFound,
            NVMLError_GpuIsLost,
        ):
            setattr(self, cls.__name__, cls)

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # --- helpers -------------------------------------------------------------------------

    def _enter(self, name: str, gpu: int | None = None) -> None:
        self.calls.append(name)
        if not self.initialised and name not in ("nvmlInit", "nvmlShutdown"):
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        how = self.fail.get(name)
        if isinstance(how, dict):
            how = how.get(gpu)
        if how is not None:
            raise how()

    def _bus(self, bus_id: str) -> bytes:
        if self.legacy_bus_ids and bus_id.count(":") == 2:
            domain, rest = bus_id.split(":", 1)
            bus_id = f"{int(domain, 16):04x}:{rest.lower()}"
        return bus_id.encode()

    def _gpu(self, handle: Any) -> FakeGpu:
        if not isinstance(handle, int) or not 0 <= handle < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[handle]

    # --- the binding's functions ---------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        self._gpu(index)
        return index

    def nvmlDeviceGetPciInfo(self, handle: int) -> _PciInfo:
        self._enter("nvmlDeviceGetPciInfo", handle)
        bus = self._gpu(handle).bus_id
        return _PciInfo(self._bus(bus), self._bus(bus)[-12:])

    def nvmlDeviceGetName(self, handle: int) -> str:
        self._enter("nvmlDeviceGetName", handle)
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        return self._gpu(handle).uuid or f"GPU-fake-{handle:04d}"

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> _Memory:
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        total = self._gpu(handle).memory_mib * 1024 * 1024
        return _Memory(total=total, free=total, used=0)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability", handle)
        return self._gpu(handle).compute_capability

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        return self._gpu(handle).pcie[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle)
        return self._gpu(handle).pcie[1]

    def _link(self, handle: int, link: int) -> str:
        gpu = self._gpu(handle)
        if not gpu.nvlinks:
            raise NVMLError_NotSupported()
        if not 0 <= link < len(gpu.nvlinks):
            raise NVMLError_InvalidArgument()
        return gpu.nvlinks[link]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", handle)
        return NVML_FEATURE_ENABLED if self._link(handle, link) else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType", handle)
        far = self._link(handle, link)
        if far == SWITCH:
            return NVML_NVLINK_DEVICE_TYPE_SWITCH
        if far == NPU:
            return NVML_NVLINK_DEVICE_TYPE_IBMNPU
        return NVML_NVLINK_DEVICE_TYPE_GPU

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> _PciInfo:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo", handle)
        far = self._link(handle, link)
        if not far:
            raise NVMLError_NotSupported()
        if far == SWITCH:
            far = f"00000000:{0xC0 + link:02X}:00.0"  # each link lands on a switch port
        elif far == NPU:
            far = "00000000:00:01.0"
        return _PciInfo(self._bus(far), self._bus(far)[-12:])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor", a)
        self._gpu(a), self._gpu(b)
        key = (min(a, b), max(a, b))
        if key not in self.ancestors:
            raise NVMLError_NotSupported()
        return self.ancestors[key]

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, index: int) -> int:
        self._enter("nvmlDeviceGetP2PStatus", a)
        self._gpu(a), self._gpu(b)
        if not isinstance(index, int):
            # The real call hands the index to ctypes, which refuses a tuple.
            raise TypeError(f"p2pIndex must be an int, not {type(index).__name__}")
        return self.p2p.get((min(a, b), max(a, b)), NVML_P2P_STATUS_OK)

    def nvmlDeviceGetCpuAffinity(self, handle: int, cpu_set_size: int) -> list[int]:
        self._enter("nvmlDeviceGetCpuAffinity", handle)
        words = [0] * cpu_set_size
        for cpu in self._gpu(handle).cpus:
            if cpu // 64 < cpu_set_size:
                words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetMemoryAffinity(self, handle: int, node_set_size: int, scope: int) -> list[int]:
        self._enter("nvmlDeviceGetMemoryAffinity", handle)
        node = self._gpu(handle).numa_node
        if node is None:
            raise NVMLError_NotSupported()
        words = [0] * node_set_size
        words[node // 64] |= 1 << (node % 64)
        return words

    def nvmlDeviceGetNumaNodeId(self, handle: int) -> int:
        self._enter("nvmlDeviceGetNumaNodeId", handle)
        node = self._gpu(handle).gpu_numa_id
        if node is None:
            raise NVMLError_NotSupported()
        return node


FUNCTION_NAMES = tuple(
    name
    for name in vars(FakeTopoNvml)
    if name.startswith("nvml") and callable(vars(FakeTopoNvml)[name])
)
