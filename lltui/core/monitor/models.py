"""Snapshot models shared by every source, the CLI and the app.

All are frozen: a source builds a new snapshot each tick and nobody mutates one after.
Byte counts are integers in bytes; a field a GPU or driver does not report is ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from lltui.core.llama.served_model import served_model_of_command
from lltui.core.units import GIB


@dataclass(frozen=True, slots=True)
class GpuStatic:
    """Facts about one GPU that do not change while it is attached; read once."""

    index: int  # NVML index (the order nvidia-smi shows)
    uuid: str
    name: str
    pci_bus_id: str  # "00000000:3B:00.0", as NVML prints it
    memory_total: int | None  # None: the source does not say (never 0 for unknown)
    power_limit_default_w: float | None = None
    power_limit_max_w: float | None = None
    max_sm_clock_mhz: int | None = None
    max_mem_clock_mhz: int | None = None
    compute_capability: tuple[int, int] | None = None
    cuda_index: int | None = None  # index CUDA gives it under the current CUDA_DEVICE_ORDER
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    nvlink_links: int | None = None  # NVLink links present (None: unknown or not supported)
    serial: str | None = None
    vbios: str | None = None
    persistence_mode: bool | None = None
    mem_bus_width_bits: int | None = None  # the memory interface (384 on a 4090, 5120 on HBM3)
    mig_mode: bool | None = None  # MIG enabled now (None: the GPU has no MIG or will not say)
    # none, passthrough, vgpu (a vGPU seen from its VM), host-vgpu, host-vsga (None: unknown)
    virtualization: str | None = None
    vendor: str | None = None  # "nvidia" or "amd" (None: a source that does not say)
    gfx_target: str | None = None  # an AMD GPU's ISA, "gfx942" (what HIP builds for)
    # an AMD Instinct GPU's partition modes: compute SPX/DPX/QPX/CPX, memory NPS1/NPS4
    compute_partition: str | None = None
    memory_partition: str | None = None
    unified_memory: bool | None = None  # an APU: its VRAM is carved from the host's RAM


def gpu_key(uuid: str | None, index: int) -> str:
    """A GPU's key on its host: its UUID, or ``index:N`` where the source reads none (AMD
    cards without a unique ID, nvidia-smi's [N/A]). The monitor, history, alerts and the
    exporter key GPUs by it: two blank UUIDs were one GPU to them."""
    return uuid or f"index:{index}"


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """The container (or unit, or job) a process runs in, from its cgroup and, where
    readable, the runtime's own metadata. ``runtime``: docker, podman, containerd, cri-o,
    kubernetes, lxc, systemd or slurm."""

    runtime: str
    id: str | None = None  # the container's id (64 hex digits), a unit's name, a job number
    name: str | None = None  # the runtime's name for it, where its metadata was readable
    pod: str | None = None  # Kubernetes: the pod's name
    namespace: str | None = None  # Kubernetes: the pod's namespace
    pod_uid: str | None = None  # Kubernetes: the pod's uid, as its cgroup names it
    unit: str | None = None  # systemd: the service or scope
    job: str | None = None  # slurm: the job id

    @property
    def label(self) -> str:
        """One short word for a column or a metric label: ``docker:web``, ``k8s:ns/pod``,
        ``slurm:1234``, ``systemd:ollama.service``."""
        if self.runtime == "kubernetes":
            pod = self.pod or f"pod {(self.pod_uid or '?')[:8]}"
            return f"k8s:{self.namespace}/{pod}" if self.namespace else f"k8s:{pod}"
        if self.runtime == "slurm":
            return f"slurm:{self.job or self.id or '?'}" + (f" {self.name}" if self.name else "")
        if self.runtime == "systemd":
            return f"systemd:{self.unit or self.id or '?'}"
        return f"{self.runtime}:{self.name or (self.id or '?')[:12]}"


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """One process holding memory on one GPU, joined with what the host knows of it."""

    pid: int
    gpu_index: int
    used_memory: int | None  # bytes on this GPU; None where the driver hides it
    kind: str = "C"  # "C" compute, "G" graphics, "C+G" both
    name: str | None = None
    user: str | None = None
    command: str | None = None
    host_rss: int | None = None
    cpu_pct: float | None = None
    # percent of the time this process's kernels ran on this GPU's SMs over the driver's
    # last sample period(s); None where the driver or the source cannot say
    sm_util: float | None = None
    # percent of the time this process read or wrote the GPU's memory (its share of the
    # memory-bandwidth use), from the same driver samples as ``sm_util``
    mem_util: float | None = None
    started: float | None = None  # when the process started, seconds since the epoch
    container: ContainerRef | None = None
    gpu_instance_id: int | None = None  # MIG: the GPU instance it runs in
    compute_instance_id: int | None = None
    # the model a llama-server serves (its --alias or file; "router"), from its argv
    model: str | None = None
    gtt_memory: int | None = None  # AMD: bytes of host memory it has mapped for the GPU

    @property
    def served(self) -> str | None:
        """The model it serves: from its argv where the source had it, else from its
        command line as the source gave it."""
        return self.model or served_model_of_command(self.command)


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One MIG instance of a GPU in MIG mode: a device of its own to CUDA
    (``CUDA_VISIBLE_DEVICES=MIG-...``), with its share of the GPU's memory and SMs."""

    uuid: str  # "MIG-..."
    gpu_instance_id: int
    compute_instance_id: int
    profile: str  # "1g.10gb", as nvidia-smi names it
    memory_total: int
    memory_used: int | None = None
    memory_free: int | None = None
    sm_count: int | None = None
    slices: int | None = None  # GPU slices of the 7 (or 8) a GPU has
    util_gpu: float | None = None  # where the driver gives it (most do not for MIG)


@dataclass(frozen=True, slots=True)
class VgpuInstance:
    """A vGPU a host GPU serves to a virtual machine (the GPU in host-vgpu mode)."""

    instance: int  # NVML's vGPU instance id
    type_name: str  # "GRID A100-4C"
    vm: str | None = None  # the VM's id (its name or UUID, as the hypervisor gives it)
    memory_total: int | None = None  # the vGPU type's framebuffer
    memory_used: int | None = None


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID error the driver reported for a GPU (see :mod:`lltui.core.monitor.xid`)."""

    xid: int
    t: float  # when it was seen, seconds since the epoch
    meaning: str  # in words, "GPU has fallen off the bus"


@dataclass(frozen=True, slots=True)
class GpuSample:
    """What one GPU reported on one tick."""

    info: GpuStatic
    lost: bool = False
    memory_used: int | None = None
    memory_free: int | None = None
    memory_reserved: int | None = None
    util_gpu: float | None = None  # percent of time a kernel ran
    util_mem: float | None = None  # percent of time memory was read or written
    power_w: float | None = None
    power_limit_w: float | None = None  # the enforced limit now
    energy_mj: int | None = None  # counter since the driver loaded
    temp_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    fan_pct: float | None = None
    pstate: int | None = None
    throttle_reasons: tuple[str, ...] | None = None  # words, see core.throttle
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_rx_kbs: float | None = None
    pcie_tx_kbs: float | None = None
    nvlink_active: int | None = None  # links up
    nvlink_rx_kbs: float | None = None
    nvlink_tx_kbs: float | None = None
    ecc_uncorrected: int | None = None  # volatile: since the driver loaded
    ecc_corrected: int | None = None
    ecc_aggregate_uncorrected: int | None = None  # over the GPU's life (kept in its infoROM)
    ecc_aggregate_corrected: int | None = None
    retired_pages: int | None = None
    xid: int | None = None  # last XID error seen
    xid_events: tuple[XidEvent, ...] = ()  # XID errors seen since the source's last sample
    xid_dropped: int = 0  # XID errors past what one sample keeps (counted, not kept)
    processes: tuple[GpuProcess, ...] = ()
    error: str | None = None  # why this GPU's tick is partial (lost, ...)
    mem_temp_c: float | None = None  # the memory's (HBM) temperature
    mig: tuple[MigDevice, ...] = ()  # MIG instances, when the GPU is in MIG mode
    vgpus: tuple[VgpuInstance, ...] = ()  # vGPUs it serves, when it is a vGPU host
    # AMD: GTT, host memory the GPU maps (on an APU, where a model's weights mostly live)
    gtt_used: int | None = None
    gtt_total: int | None = None
    hotspot_temp_c: float | None = None  # the die's hottest sensor (AMD's junction)
    pcie_bw_kbs: float | None = None  # PCIe traffic both ways, where only the sum is known
    xgmi_active: int | None = None  # AMD Infinity Fabric (XGMI) links up
    xgmi_rx_kbs: float | None = None
    xgmi_tx_kbs: float | None = None
    ecc_deferred: int | None = None  # AMD RAS: errors deferred (poisoned) rather than fixed

    @property
    def index(self) -> int:
        return self.info.index

    @property
    def memory_total(self) -> int | None:
        return self.info.memory_total

    @property
    def memory_pct(self) -> float | None:
        total = self.info.memory_total
        if self.memory_used is None or total is None or total <= 0:
            return None
        return 100.0 * self.memory_used / total

    @property
    def gtt_shown(self) -> bool:
        """Whether its GTT (host memory the GPU maps) is worth a line: an APU's, where its
        model lives, or a GiB or more spilled from a discrete card."""
        if self.gtt_used is None:
            return False
        return bool(self.info.unified_memory) or self.gtt_used >= GIB

    @property
    def memory_full_pct(self) -> float | None:
        """How full the memory is for an allocation: what it cannot get, the driver's
        reserved memory too (NVML's used leaves that out: a card with nothing free would
        stay under 99 % used)."""
        total, used = self.info.memory_total, self.memory_used
        if used is None or total is None or total <= 0:
            return None
        free = self.memory_free
        taken = total - free if free is not None else used + (self.memory_reserved or 0)
        return 100.0 * min(taken, total) / total

    @property
    def free_bytes(self) -> int | None:
        """Free memory as reported, or its total less what is used (all-smi sends no free)."""
        if self.memory_free is not None:
            return self.memory_free
        total = self.info.memory_total
        return (
            None if total is None or self.memory_used is None else max(0, total - self.memory_used)
        )

    @property
    def power_pct(self) -> float | None:
        if self.power_w is None or not self.power_limit_w:
            return None
        return 100.0 * self.power_w / self.power_limit_w


@dataclass(frozen=True, slots=True)
class HostSample:
    cpu_pct: float | None = None
    mem_total: int | None = None
    mem_used: int | None = None
    cpu_count: int | None = None
    load_1m: float | None = None
    hostname: str | None = None


@dataclass(frozen=True, slots=True)
class RigInfo:
    """What a source knows of the rig as a whole; the header of a recording."""

    source: str  # "nvml", "smi", "smi:HOST", "sim:PROFILE", "replay:FILE"
    simulated: bool = False
    simulated_reason: str | None = None  # why we fell back to a simulated rig, in words
    stand_in: bool = False  # simulated because auto found no GPU here (not asked for)
    driver_version: str | None = None
    cuda_version: str | None = None  # the driver's CUDA version, "12.4"
    nvml_version: str | None = None
    nccl_version: str | None = None
    hostname: str | None = None
    rocm_version: str | None = None  # AMD's ROCm release, "7.2.0" (from amd-smi version)
    gpus: tuple[GpuStatic, ...] = ()
    hints: tuple[str, ...] = ()  # one-line advice the source wants shown once


@dataclass(frozen=True, slots=True)
class Playback:
    """Where a replayed sample is in its recording: seconds from the recording's first
    sample, of ``length_s`` in all; ``loop`` counts the times it started over."""

    position_s: float
    length_s: float
    loop: int = 0


@dataclass(frozen=True, slots=True)
class RigSample:
    """Everything one poll of a source saw. ``seq`` increases by one per poll of a source."""

    seq: int
    t: float  # monotonic seconds
    wall: float  # seconds since the epoch, for recordings
    info: RigInfo
    gpus: tuple[GpuSample, ...]
    host: HostSample = field(default_factory=HostSample)
    error: str | None = None  # a per-source problem this tick, in words
    ended: bool = False  # the source has nothing newer (a recording played to its end)
    playback: Playback | None = None  # a replayed sample: where it is in its recording

    @property
    def simulated(self) -> bool:
        return self.info.simulated


class SourceUnavailable(Exception):
    """A source cannot run here. ``str()`` is one line a user can act on; ``exit_code``
    the command line's (1: a source that failed)."""

    exit_code: ClassVar[int] = 1


class RecordingUnreadable(SourceUnavailable):
    """The file is not a recording lltui can play: bad input rather than a failure."""

    exit_code: ClassVar[int] = 2


@runtime_checkable
class GpuSource(Protocol):
    """A source of :class:`RigSample` snapshots.

    ``open`` raises :class:`lltui.core.monitor.models.SourceUnavailable` with a one-line reason when
    the source cannot run here; ``poll`` never raises for a field or a GPU that fails (those
    become ``None`` or a lost GPU), only for the whole source failing, and callers catch that.
    ``poll`` is called from one worker thread at a time.
    """

    name: str

    def open(self) -> RigInfo: ...

    def poll(self) -> RigSample: ...

    def close(self) -> None: ...
