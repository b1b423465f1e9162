"""What the NVML source keeps about one GPU between polls, and the typed readings it holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lltui.core.monitor.models import GpuProcess, GpuStatic, MigDevice, VgpuInstance


@dataclass(slots=True)
class MigInstance:
    """One MIG instance: its handle and what is known of it (memory read on the slow TTL)."""

    handle: Any
    device: MigDevice


@dataclass(slots=True)
class MigState:
    """A GPU in MIG mode: its instances (enumerated at open and again on the link TTL, as
    instances are made and destroyed without a reset)."""

    instances: list[MigInstance] = field(default_factory=list)


# The readings are plain slotted dataclasses, not frozen: a frozen one costs three times as
# much to build, on every GPU every tick. Nothing outside this package sees them.
@dataclass(slots=True)
class FastReading:
    """The fields read every poll; built anew each tick and not changed after."""

    memory_used: int | None = None
    memory_free: int | None = None
    memory_reserved: int | None = None
    util_gpu: float | None = None
    util_mem: float | None = None
    energy_mj: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    # False when the limit did not come with this tick (the batch cannot carry it here, or
    # the GPU will not give it): the slow reading's limit stands.
    power_limit_read: bool = False
    temp_c: float | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None


@dataclass(slots=True)
class SlowReading:
    """The fields read on the slow, link and PCIe TTLs, updated in place: a field keeps its
    value until read again."""

    # slow-changing readings: a fan spins up over seconds, the memory clock and P-state
    # follow the load's phase, HBM warms slowly
    fan_pct: float | None = None
    mem_clock_mhz: int | None = None
    pstate: int | None = None
    mem_temp_c: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_tx_kbs: float | None = None
    pcie_rx_kbs: float | None = None
    power_limit_w: float | None = None  # only where the fast batch cannot carry it
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    ecc_agg_corrected: int | None = None
    ecc_agg_uncorrected: int | None = None
    retired_pages: int | None = None
    nvlink_active: int | None = None
    nvlink_tx_kbs: float | None = None
    nvlink_rx_kbs: float | None = None


NO_FAST = FastReading()  # shared by every GPU before its first fast reading: never changed


@dataclass(slots=True)
class GpuState:
    """One GPU's handle, what it will not answer, and its latest readings (mutable: the
    source updates it in place each poll, on the poller's one thread)."""

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
    fast: FastReading = field(default_factory=FastReading)
    slow: SlowReading = field(default_factory=SlowReading)
    nvlink_prev: tuple[float, int, int] | None = None  # (t, tx KiB, rx KiB)
    raw_procs: tuple[GpuProcess, ...] = ()
    mig: MigState | None = None  # the MIG instances, when the GPU is in MIG mode
    vgpus: tuple[VgpuInstance, ...] = ()  # the vGPUs it serves, when it is a vGPU host
    procs: tuple[GpuProcess, ...] = ()
    # NVML's CPU timestamp (microseconds) of the newest per-process utilisation sample read:
    # the next read asks only for samples after it
    util_seen_us: int = 0
    last_xid: int | None = None  # the last XID the event API reported for this GPU
    ecc_due: bool = False  # an ECC event came: read the counts this tick, not on the TTL
