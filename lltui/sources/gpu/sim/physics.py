"""How a simulated GPU behaves under the workload: utilisation and power from the phase and
its share of the layers, then temperature, clocks, limits, link traffic and memory.

Every random draw comes from the ``rng`` passed in, in a fixed order, so the same seed and
time give the same sample.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import NamedTuple

from lltui.core.monitor.models import GpuSample, GpuStatic, HostSample
from lltui.core.units import GIB, MIB
from lltui.sources.gpu.sim.profile import SimGpu, SimProfile
from lltui.sources.gpu.sim.workload import (
    CUDA_CONTEXT,
    DISPLAY_BYTES,
    LOAD_SECONDS,
    LOAD_START,
    PHASE_DECODE,
    PHASE_LOADING,
    PHASE_PREFILL,
    gpu_processes,
    resident_bytes,
    side_bytes,
)


# Small NamedTuples rather than frozen dataclasses: three per GPU per tick, and a frozen
# dataclass costs several times as much to build.
class Load(NamedTuple):
    """How hard one GPU works this tick."""

    util: float  # percent
    power_w: float
    busy: float  # share of a stream's time this GPU computes (0..1)


class Clocks(NamedTuple):
    temp_c: float
    sm_mhz: int
    mem_mhz: int
    reasons: tuple[str, ...]
    pstate: int


class Links(NamedTuple):
    pcie_rx_kbs: float
    pcie_tx_kbs: float
    nvlink_active: int | None
    nvlink_rx_kbs: float | None
    nvlink_tx_kbs: float | None


def gpu_load(
    g: SimGpu, n: int, share: float, phase: str, *, serving: bool, rng: random.Random
) -> Load:
    """Utilisation and power (two draws)."""
    # A layer split is a pipeline: for one stream each GPU is busy for its share of the
    # layers, longer if it is the slower card.
    busy = min(1.0, share * n / g.speed) if n > 1 else 1.0
    if phase == PHASE_PREFILL:
        util = min(100.0, 97.0 * busy + rng.gauss(0, 2))
        power_frac = 0.95
    elif phase == PHASE_DECODE:
        util = min(100.0, (88.0 / max(n, 1) ** 0.5) * busy + rng.gauss(0, 3))
        power_frac = 0.35 + 0.3 * busy / max(n, 1) ** 0.5
    elif phase == PHASE_LOADING:
        util = max(0.0, rng.gauss(3, 2))
        power_frac = 0.2
    else:
        util = 0.0
        power_frac = 0.0
    util = max(0.0, util)
    idle_w = g.idle_w + (8.0 if serving else 0.0)
    power = idle_w + (g.power_limit_w - idle_w) * power_frac + rng.gauss(0, g.power_limit_w / 80)
    power = max(g.idle_w * 0.8, min(g.power_limit_w * 1.02, power))
    return Load(util, power, busy)


def gpu_clocks(g: SimGpu, phase: str, load: Load, *, loaded: bool, rng: random.Random) -> Clocks:
    """Temperature (one draw), clocks, P-state and why the clocks are held back."""
    temp = 34.0 + 45.0 * (load.power_w / g.power_limit_w) + rng.gauss(0, 0.5)
    busy_now = load.util > 5
    sm_clock = (
        int(g.max_sm_mhz * (0.9 if phase == PHASE_PREFILL else 0.97))
        if busy_now
        else (g.idle_sm_mhz)
    )
    mem_clock = g.max_mem_mhz if (busy_now or loaded) else g.max_mem_mhz // 10
    reasons: tuple[str, ...]
    if not busy_now:
        reasons = ("idle",)
    elif phase == PHASE_PREFILL and g.power_limit_w <= 75:
        reasons = ("power cap",)  # T4 and L4 hit their 70-72 W cap in prompt processing
    elif phase == PHASE_PREFILL and g.has_fan and temp > 76:
        reasons = ("sw thermal",)
    else:
        reasons = ()
    pstate = 0 if busy_now or loaded else 8
    return Clocks(temp, sm_clock, mem_clock, reasons, pstate)


def gpu_links(
    profile: SimProfile,
    g: SimGpu,
    phase: str,
    share: float,
    load: Load,
    *,
    serving: bool,
    rng: random.Random,
) -> Links:
    """PCIe traffic (two draws) and NVLink traffic (two more while busy on NVLink)."""
    pcie_rx = (
        rng.uniform(2.5e6, 3.2e6) if phase == PHASE_LOADING else rng.uniform(200, 3000) * share
    )
    pcie_tx = rng.uniform(100, 2000) * share if serving else rng.uniform(0, 50)
    # NVLink, or XGMI on AMD Instinct: the same draws, reported under its own names
    xgmi = g.amd and any(cell == "XGMI" for cell in profile.links.values())
    nvl = (g.nvlinks and any("NV" in cell for cell in profile.links.values())) or xgmi
    busy_now = load.util > 5
    nvlink_rx = nvlink_tx = 0.0 if nvl else None
    if nvl and busy_now:
        nvlink_rx = round(rng.uniform(1e4, 8e4) * load.busy, 1)
        nvlink_tx = round(rng.uniform(1e4, 8e4) * load.busy, 1)
    return Links(
        round(pcie_rx, 1), round(pcie_tx, 1), g.nvlinks if nvl else None, nvlink_rx, nvlink_tx
    )


def gpu_sample(
    profile: SimProfile,
    st: GpuStatic,
    share: float,
    load: Load,
    energy_mj: float,
    *,
    t: float,
    phase: str,
    progress: float,
    rng: random.Random,
    wall0: float = 0.0,
) -> GpuSample:
    """One GPU's sample at ``t`` (``progress`` into ``phase``), after :func:`gpu_load` drew
    from ``rng``."""
    i = st.index
    g = profile.gpus[i]
    serving = t >= LOAD_START
    loaded = t >= LOAD_START + LOAD_SECONDS
    used = resident_bytes(profile, i, share, phase, progress) if serving else 0
    base_used = DISPLAY_BYTES if g.has_fan else 0
    base_used += side_bytes(profile, i) if loaded else 0
    total = st.memory_total or 0  # a simulated GPU always has its catalog's memory
    reserved = 390 * MIB if total > 16 * GIB else 252 * MIB
    # what the driver reserves is neither used nor free (NVML: total = used + free + reserved)
    memory_used = min(total - reserved, base_used + used)
    clocks = gpu_clocks(g, phase, load, loaded=loaded, rng=rng)
    links = gpu_links(profile, g, phase, share, load, serving=serving, rng=rng)
    server_bytes = max(0, memory_used - base_used - CUDA_CONTEXT)
    busy_now = load.util > 5
    sample = GpuSample(
        info=st,
        memory_used=memory_used,
        memory_free=max(0, total - memory_used - reserved),
        memory_reserved=reserved,
        util_gpu=round(load.util),
        util_mem=round(load.util * (0.35 if phase == PHASE_PREFILL else 0.8)),
        power_w=round(load.power_w, 1),
        power_limit_w=g.power_limit_w,
        energy_mj=int(energy_mj),
        temp_c=round(clocks.temp_c),
        # HBM sits beside the die and runs a few degrees warmer under load
        mem_temp_c=round(clocks.temp_c + 2 + load.util * 0.06) if "HBM" in g.spec.memory else None,
        sm_clock_mhz=clocks.sm_mhz,
        mem_clock_mhz=clocks.mem_mhz,
        fan_pct=(30.0 + max(0.0, clocks.temp_c - 40) * 1.2) if g.has_fan else None,
        pstate=clocks.pstate,
        throttle_reasons=clocks.reasons,
        pcie_gen=g.pcie_gen if busy_now or loaded else 1,
        pcie_width=g.pcie_width,
        pcie_rx_kbs=links.pcie_rx_kbs,
        pcie_tx_kbs=links.pcie_tx_kbs,
        nvlink_active=links.nvlink_active,
        nvlink_rx_kbs=links.nvlink_rx_kbs,
        nvlink_tx_kbs=links.nvlink_tx_kbs,
        ecc_uncorrected=0 if not g.has_fan else None,
        ecc_corrected=0 if not g.has_fan else None,
        retired_pages=0 if not g.has_fan else None,
        processes=gpu_processes(
            profile,
            i,
            phase,
            serving=serving,
            server_bytes=server_bytes,
            util=load.util,
            wall0=wall0,
        ),
    )
    return amd_reading(profile, g, sample, clocks.temp_c, load) if g.amd else sample


def amd_reading(
    profile: SimProfile, g: SimGpu, s: GpuSample, temp_c: float, load: Load
) -> GpuSample:
    """What amd-smi reports of an AMD GPU beside what NVML would: the junction (hotspot)
    above the edge (an MI300 has no edge sensor: its temperature is the junction), GTT,
    XGMI links in place of NVLink, deferred ECC, and PCIe traffic as one sum on Instinct
    (a Radeon reports none). No P-state: amd-smi has none."""
    instinct = g.spec.segment == "Instinct"
    hotspot = round(temp_c + 6 + load.util * 0.08)
    xgmi = sum(1 for (a, b), cell in profile.links.items() if cell == "XGMI" and s.index in (a, b))
    rates = (s.nvlink_rx_kbs, s.nvlink_tx_kbs) if xgmi else (None, None)
    traffic = (s.pcie_rx_kbs or 0.0) + (s.pcie_tx_kbs or 0.0)
    return replace(
        s,
        temp_c=hotspot if instinct else s.temp_c,
        hotspot_temp_c=hotspot,
        pstate=None,
        gtt_used=int(48 * MIB + load.util * MIB),
        gtt_total=profile.host_mem_gib * GIB // 2,  # the kernel's default: half the RAM
        pcie_rx_kbs=None,
        pcie_tx_kbs=None,
        pcie_bw_kbs=round(traffic, 1) if instinct else None,
        nvlink_active=None,
        nvlink_rx_kbs=None,
        nvlink_tx_kbs=None,
        xgmi_active=xgmi or None,
        xgmi_rx_kbs=rates[0],
        xgmi_tx_kbs=rates[1],
        ecc_deferred=0 if instinct else None,
        ecc_corrected=0 if instinct else None,
        ecc_uncorrected=0 if instinct else None,
        retired_pages=None,
    )


def host_sample(profile: SimProfile, seed: int, t: float, phase: str) -> HostSample:
    """The host's CPU and memory: busier while the server computes."""
    rng = random.Random(f"{seed}-host-{round(t * 10)}")
    busy = phase in (PHASE_PREFILL, PHASE_DECODE)
    cpu = (100.0 / profile.cpu_count) * (1 if busy else 0.1) + rng.uniform(1, 4)
    mem_total = profile.host_mem_gib * GIB
    return HostSample(
        cpu_pct=round(min(100.0, cpu), 1),
        mem_total=mem_total,
        mem_used=int(mem_total * 0.18 + (2 * GIB if busy else 0)),
        cpu_count=profile.cpu_count,
        load_1m=round(1.0 + (1.0 if busy else 0.0) + rng.uniform(0, 0.3), 2),
        hostname=profile.hostname,
    )
