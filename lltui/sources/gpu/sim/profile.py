"""What a simulated rig is: GPUs from the GPU catalog, the model its llama-server serves, and how
its GPUs connect, with the ``nvidia-smi topo -m`` text and CUDA order that follow from it."""

from __future__ import annotations

from dataclasses import dataclass, field

from lltui.core.hardware.gpus import GpuSpec, gpu
from lltui.core.monitor.cuda_order import CudaCandidate, enumeration_order
from lltui.core.monitor.models import ContainerRef

LEGEND = """\
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501


def _known(value: float | int | bool | None, name: str, what: str) -> float:
    if value is None:
        raise ValueError(f"the GPU catalog has no {what} for {name}: a simulated rig needs it")
    return float(value)


@dataclass(frozen=True, slots=True)
class SimGpu:
    """A GPU of a simulated rig: a row of the GPU catalog (its name, memory, power, clocks,
    links) and how fast it decodes beside the others."""

    spec: GpuSpec
    speed: float = 1.0  # relative decode speed: a slower GPU is busier for its share

    @classmethod
    def of(cls, name: str, speed: float = 1.0) -> SimGpu:
        """The catalog's GPU ``name``; ValueError when the catalog lacks what the rig needs."""
        g = cls(gpu(name), speed)
        for what in ("tdp_w", "power_max_w", "idle_w", "boost_sm_mhz", "idle_sm_mhz"):
            _known(getattr(g.spec, what), name, what)
        _known(g.spec.mem_clock_mhz, name, "memory clock")
        _known(g.spec.fan, name, "fan")
        return g

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def amd(self) -> bool:
        return self.spec.vendor == "amd"

    @property
    def memory_mib(self) -> int:
        return self.spec.mib

    @property
    def compute_capability(self) -> tuple[int, int]:
        return self.spec.cc

    @property
    def pcie_gen(self) -> int:
        return self.spec.pcie_gen

    @property
    def pcie_width(self) -> int:
        return self.spec.pcie_width

    @property
    def nvlinks(self) -> int:
        return self.spec.nvlink_links

    @property
    def power_limit_w(self) -> float:
        return _known(self.spec.tdp_w, self.name, "tdp_w")

    @property
    def power_max_w(self) -> float:
        return _known(self.spec.power_max_w, self.name, "power_max_w")

    @property
    def idle_w(self) -> float:
        return _known(self.spec.idle_w, self.name, "idle_w")

    @property
    def max_sm_mhz(self) -> int:
        return int(_known(self.spec.boost_sm_mhz, self.name, "boost_sm_mhz"))

    @property
    def idle_sm_mhz(self) -> int:
        return int(_known(self.spec.idle_sm_mhz, self.name, "idle_sm_mhz"))

    @property
    def max_mem_mhz(self) -> int:
        return int(_known(self.spec.mem_clock_mhz, self.name, "memory clock"))

    @property
    def has_fan(self) -> bool:
        return bool(self.spec.fan)


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The llama-server workload a profile runs."""

    gguf: str
    weights_gib: float
    n_layer: int
    kv_gib: float  # whole KV cache at the configured context
    compute_mib: int  # per-GPU compute buffer
    argv: tuple[str, ...]
    tensor_split: tuple[float, ...] | None = None  # None: even split


@dataclass(frozen=True, slots=True)
class SideJob:
    """A process that shares a rig with its llama-server: a training run, a notebook
    kernel, a desktop. It holds ``mib`` on each of its GPUs once the rig serves."""

    pid: int
    name: str
    user: str
    command: str
    gpus: tuple[int, ...]
    mib: int | None  # None: the driver does not say (graphics processes)
    kind: str = "C"
    cpu_pct: float = 0.0
    rss_mib: int = 0
    container: ContainerRef | None = None  # the container, pod or slurm job it runs in
    age_s: float = 5400.0  # how long it had run when the rig's clock started


@dataclass(frozen=True, slots=True)
class SimProfile:
    name: str
    description: str
    gpus: tuple[SimGpu, ...]
    pci_bus_ids: tuple[str, ...]
    links: dict[tuple[int, int], str]  # (i, j) with i < j -> cell as nvidia-smi prints it
    cpu_affinity: tuple[str, ...]
    numa_affinity: tuple[str, ...]
    cpu_count: int
    host_mem_gib: int
    served: ServedModel
    driver_version: str = "580.95.05"
    cuda_version: str = "13.0"
    nccl_version: str = "2.27.7"  # RCCL's on an AMD rig
    rocm_version: str | None = None  # an AMD rig's ROCm release
    nics: tuple[str, ...] = ()
    nic_links: dict[tuple[int, int], str] = field(default_factory=dict)  # (gpu, nic) -> cell
    nccl_env: dict[str, str] = field(default_factory=dict)
    hostname: str = "sim-rig"
    side_jobs: tuple[SideJob, ...] = ()  # what else runs on the GPUs

    @property
    def topo_text(self) -> str:
        """The rig's topology as its tools print it: ``amd-smi topology`` on an all-AMD
        rig, ``nvidia-smi topo -m`` otherwise."""
        if all(g.amd for g in self.gpus):
            from lltui.core.topo.amd import render_amd_topology  # (only AMD rigs need it)

            return render_amd_topology(len(self.gpus), self.pci_bus_ids, self.links)
        return render_topo(self)

    @property
    def nccl_facts(self) -> dict[str, object]:
        """What the NCCL view shows for this rig: simulated library facts and environment."""
        amd = all(g.amd for g in self.gpus)
        path = "/opt/rocm/lib/librccl.so.1" if amd else "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
        return {
            "available": True,
            "version": self.nccl_version,
            "path": f"{path} (simulated)",
            "library": "rccl" if amd else "nccl",
            "env": dict(self.nccl_env),
            "simulated": True,
        }


def render_topo(profile: SimProfile) -> str:
    """``nvidia-smi topo -m`` as a current driver prints it for this profile (tab separated)."""
    n = len(profile.gpus)
    names = [f"GPU{i}" for i in range(n)] + [f"NIC{i}" for i in range(len(profile.nics))]
    header = ["", *names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t".join(header)]

    def cell(a: int, b: int) -> str:
        if a == b:
            return " X "
        if a < n and b < n:
            return profile.links[(min(a, b), max(a, b))]
        if a < n:
            return profile.nic_links[(a, b - n)]
        if b < n:
            return profile.nic_links[(b, a - n)]
        return "NODE" if (a - n) // 2 == (b - n) // 2 else "SYS"  # NIC pairs share a socket

    for a, row_name in enumerate(names):
        cells = [cell(a, b) for b in range(len(names))]
        if a < n:
            cells += [profile.cpu_affinity[a], profile.numa_affinity[a], "N/A"]
        lines.append("\t".join([row_name, *cells]))
    text = "\n".join(lines) + "\n\n" + LEGEND
    if profile.nics:
        text += "\nNIC Legend:\n\n" + "".join(
            f"  NIC{i}: {dev}\n" for i, dev in enumerate(profile.nics)
        )
    return text


def cuda_order(profile: SimProfile) -> tuple[int, ...]:
    """CUDA's default device order (compute capability descending, then PCI bus id), by the
    same rule the NVML source uses; AMD GPUs (no compute capability) after, in bus order, as
    a backend that sees both (Vulkan) lists them."""
    candidates = [
        CudaCandidate("", bus, g.compute_capability)
        for g, bus in zip(profile.gpus, profile.pci_bus_ids, strict=True)
    ]
    return tuple(enumeration_order(candidates, None))
