"""Simulated rigs: deterministic, seeded stand-ins for real GPUs, for demos, tests and screenshots.

A profile describes real hardware (names, VRAM, power limits, clocks, links as their vendors
publish them) and a llama-server that serves one model split across the GPUs. Each view reads
the same profile, so the monitor, topology text and NCCL facts of one profile agree.

Everything a sample holds is a function of the seed and of the time the injected clock gives,
so two sources with the same seed and clock produce equal samples.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from lltui.core.monitor.cuda_order import CudaCandidate, enumeration_order
from lltui.core.monitor.models import (
    GpuProcess,
    GpuSample,
    GpuStatic,
    HostSample,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.units import GIB, MIB
from lltui.sources.base import SequenceCounter

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


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Published specs of one GPU model."""

    name: str
    memory_mib: int
    power_limit_w: float
    power_max_w: float
    idle_w: float
    max_sm_mhz: int
    max_mem_mhz: int
    idle_sm_mhz: int
    compute_capability: tuple[int, int]
    pcie_gen: int
    pcie_width: int
    has_fan: bool
    nvlinks: int = 0
    speed: float = 1.0  # relative decode speed: a slower GPU is busier for its share


T4 = GpuModel("Tesla T4", 15360, 70.0, 70.0, 9.0, 1590, 5001, 300, (7, 5), 3, 16, False)
L4 = GpuModel("NVIDIA L4", 23034, 72.0, 72.0, 16.0, 2040, 6251, 210, (8, 9), 4, 16, False)
RTX3090 = GpuModel(
    "NVIDIA GeForce RTX 3090",
    24576,
    350.0,
    400.0,
    22.0,
    2100,
    9751,
    210,
    (8, 6),
    4,
    16,
    True,
    4,
    speed=0.75,
)
RTX4090 = GpuModel(
    "NVIDIA GeForce RTX 4090", 24564, 450.0, 600.0, 18.0, 3105, 10501, 210, (8, 9), 4, 16, True
)
V100_SXM3 = GpuModel(
    "Tesla V100-SXM3-32GB", 32768, 350.0, 350.0, 52.0, 1597, 958, 135, (7, 0), 3, 16, False, 6
)
H100_SXM = GpuModel(
    "NVIDIA H100 80GB HBM3", 81559, 700.0, 700.0, 70.0, 1980, 2619, 345, (9, 0), 5, 16, False, 18
)


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
class SimProfile:
    name: str
    description: str
    gpus: tuple[GpuModel, ...]
    pci_bus_ids: tuple[str, ...]
    links: dict[tuple[int, int], str]  # (i, j) with i < j -> cell as nvidia-smi prints it
    cpu_affinity: tuple[str, ...]
    numa_affinity: tuple[str, ...]
    cpu_count: int
    host_mem_gib: int
    served: ServedModel
    driver_version: str = "580.95.05"
    cuda_version: str = "13.0"
    nccl_version: str = "2.27.7"
    nics: tuple[str, ...] = ()
    nic_links: dict[tuple[int, int], str] = field(default_factory=dict)  # (gpu, nic) -> cell
    nccl_env: dict[str, str] = field(default_factory=dict)
    hostname: str = "sim-rig"

    @property
    def topo_text(self) -> str:
        return render_topo(self)

    @property
    def nccl_facts(self) -> dict[str, object]:
        """What the NCCL view shows for this rig: simulated library facts and environment."""
        return {
            "available": True,
            "version": self.nccl_version,
            "path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2 (simulated)",
            "env": dict(self.nccl_env),
            "simulated": True,
        }


def _even_links(n: int, cell: str) -> dict[tuple[int, int], str]:
    return {(i, j): cell for i in range(n) for j in range(i + 1, n)}


def _socket_links(n: int, per_socket: int, same: str, cross: str) -> dict[tuple[int, int], str]:
    return {
        (i, j): same if i // per_socket == j // per_socket else cross
        for i in range(n)
        for j in range(i + 1, n)
    }


PROFILES: dict[str, SimProfile] = {
    p.name: p
    for p in (
        SimProfile(
            name="kaggle-2xt4",
            description="Kaggle notebook, 2x Tesla T4 on PCIe",
            gpus=(T4, T4),
            pci_bus_ids=("00000000:00:04.0", "00000000:00:05.0"),
            links={(0, 1): "PHB"},
            cpu_affinity=("0-3", "0-3"),
            numa_affinity=("N/A", "N/A"),
            cpu_count=4,
            host_mem_gib=31,
            driver_version="560.35.03",
            cuda_version="12.6",
            nccl_version="2.23.4",
            served=ServedModel(
                gguf="Qwen2.5-14B-Instruct-Q4_K_M.gguf",
                weights_gib=8.37,
                n_layer=48,
                kv_gib=1.5,
                compute_mib=616,
                argv=("-ngl", "99", "-sm", "layer", "-c", "8192", "-np", "1", "-fa", "on"),
            ),
            hostname="kaggle-sim",
        ),
        SimProfile(
            name="colab-t4",
            description="Colab notebook, one Tesla T4",
            gpus=(T4,),
            pci_bus_ids=("00000000:00:04.0",),
            links={},
            cpu_affinity=("0-1",),
            numa_affinity=("N/A",),
            cpu_count=2,
            host_mem_gib=12,
            driver_version="550.54.15",
            cuda_version="12.4",
            nccl_version="2.21.5",
            served=ServedModel(
                gguf="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
                weights_gib=4.58,
                n_layer=32,
                kv_gib=1.0,
                compute_mib=520,
                argv=("-ngl", "99", "-c", "8192"),
            ),
            hostname="colab-sim",
        ),
        SimProfile(
            name="4xl4",
            description="4x NVIDIA L4 on PCIe, two sockets",
            gpus=(L4, L4, L4, L4),
            pci_bus_ids=(
                "00000000:17:00.0",
                "00000000:31:00.0",
                "00000000:B1:00.0",
                "00000000:CA:00.0",
            ),
            links=_socket_links(4, 2, "NODE", "SYS"),
            cpu_affinity=("0-23,48-71", "0-23,48-71", "24-47,72-95", "24-47,72-95"),
            numa_affinity=("0", "0", "1", "1"),
            cpu_count=96,
            host_mem_gib=376,
            served=ServedModel(
                gguf="Llama-3.3-70B-Instruct-Q4_K_M.gguf",
                weights_gib=39.6,
                n_layer=80,
                kv_gib=5.0,
                compute_mib=1184,
                argv=("-ngl", "99", "-sm", "layer", "-c", "16384", "-np", "2", "-fa", "on"),
            ),
        ),
        SimProfile(
            name="2x3090-nvlink",
            description="2x RTX 3090 with an NVLink bridge (NV4)",
            gpus=(RTX3090, RTX3090),
            pci_bus_ids=("00000000:01:00.0", "00000000:21:00.0"),
            links={(0, 1): "NV4"},
            cpu_affinity=("0-31", "0-31"),
            numa_affinity=("0", "0"),
            cpu_count=32,
            host_mem_gib=128,
            served=ServedModel(
                gguf="Llama-3.3-70B-Instruct-IQ3_XS.gguf",
                weights_gib=27.3,
                n_layer=80,
                kv_gib=5.0,
                compute_mib=1184,
                argv=("-ngl", "99", "-sm", "layer", "-c", "16384", "-fa", "on"),
            ),
            nccl_env={"NCCL_P2P_LEVEL": "NVL"},
        ),
        SimProfile(
            name="8xh100-sxm",
            description="8x H100 SXM on NVSwitch (NV18), two sockets, 4 NICs",
            gpus=(H100_SXM,) * 8,
            pci_bus_ids=tuple(
                f"00000000:{b}:00.0" for b in ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
            ),
            links=_even_links(8, "NV18"),
            cpu_affinity=("0-55,112-167",) * 4 + ("56-111,168-223",) * 4,
            numa_affinity=("0",) * 4 + ("1",) * 4,
            cpu_count=224,
            host_mem_gib=2015,
            driver_version="580.95.05",
            cuda_version="13.0",
            nccl_version="2.27.7",
            nics=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"),
            nic_links={
                (g, n): ("PIX" if g // 2 == n else ("NODE" if g // 4 == n // 2 else "SYS"))
                for g in range(8)
                for n in range(4)
            },
            served=ServedModel(
                gguf="Llama-3.1-405B-Instruct-Q4_K_M-00001-of-00006.gguf",
                weights_gib=227.0,
                n_layer=126,
                kv_gib=63.0,
                compute_mib=2400,
                argv=("-ngl", "999", "-sm", "layer", "-c", "131072", "-np", "4", "-fa", "on"),
            ),
            nccl_env={"NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3"},
            hostname="dgx-sim",
        ),
        SimProfile(
            name="16xv100-dgx2",
            description="16x V100 SXM3 on NVSwitch (NV6), two sockets",
            gpus=(V100_SXM3,) * 16,
            pci_bus_ids=tuple(
                f"00000000:{b:02X}:00.0"
                for b in (
                    *(0x34, 0x36, 0x39, 0x3B, 0x57, 0x59, 0x5C, 0x5E),
                    *(0xB7, 0xB9, 0xBC, 0xBE, 0xE0, 0xE2, 0xE5, 0xE7),
                )
            ),
            links=_even_links(16, "NV6"),
            cpu_affinity=("0-23,48-71",) * 8 + ("24-47,72-95",) * 8,
            numa_affinity=("0",) * 8 + ("1",) * 8,
            cpu_count=96,
            host_mem_gib=1510,
            driver_version="535.247.01",
            cuda_version="12.2",
            nccl_version="2.18.5",
            served=ServedModel(
                gguf="Llama-3.1-405B-Instruct-Q4_K_M-00001-of-00006.gguf",
                weights_gib=227.0,
                n_layer=126,
                kv_gib=31.5,
                compute_mib=1400,
                argv=("-ngl", "999", "-sm", "layer", "-c", "32768", "-np", "2"),
            ),
            hostname="dgx2-sim",
        ),
        SimProfile(
            name="mixed-4090-3090",
            description="RTX 4090 + RTX 3090 on PCIe (CUDA and NVML order differ)",
            # NVML order is PCI bus order; CUDA puts the 4090 (compute 8.9) first.
            gpus=(RTX3090, RTX4090),
            pci_bus_ids=("00000000:01:00.0", "00000000:4C:00.0"),
            links={(0, 1): "PHB"},
            cpu_affinity=("0-23", "0-23"),
            numa_affinity=("N/A", "N/A"),
            cpu_count=24,
            host_mem_gib=64,
            served=ServedModel(
                gguf="Qwen3-32B-Q5_K_M.gguf",
                weights_gib=21.7,
                n_layer=64,
                kv_gib=4.0,
                compute_mib=900,
                argv=("-ngl", "99", "-sm", "layer", "-ts", "3,2", "-c", "16384", "-fa", "on"),
                tensor_split=(0.6, 0.4),
            ),
        ),
    )
}

DEFAULT_PROFILE = "kaggle-2xt4"


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
    same rule the NVML source uses."""
    candidates = [
        CudaCandidate("", bus, g.compute_capability)
        for g, bus in zip(profile.gpus, profile.pci_bus_ids, strict=True)
    ]
    return tuple(enumeration_order(candidates, None))


# The llama-server the simulated rig runs: loading, then prompt processing and generation
# bursts with idle gaps, on a loop.
PHASE_IDLE = "idle"
PHASE_LOADING = "loading"
PHASE_PREFILL = "prefill"
PHASE_DECODE = "decode"

LOAD_START = 2.0
LOAD_SECONDS = 10.0
CYCLE = ((PHASE_PREFILL, 2.0), (PHASE_DECODE, 10.0), (PHASE_IDLE, 3.0))
CYCLE_SECONDS = sum(d for _, d in CYCLE)


def phase_at(t: float) -> tuple[str, float]:
    """The workload phase at ``t`` seconds into the timeline and how far into it (0..1)."""
    if t < LOAD_START:
        return PHASE_IDLE, t / LOAD_START
    if t < LOAD_START + LOAD_SECONDS:
        return PHASE_LOADING, (t - LOAD_START) / LOAD_SECONDS
    into = (t - LOAD_START - LOAD_SECONDS) % CYCLE_SECONDS
    for name, dur in CYCLE:
        if into < dur:
            return name, into / dur
        into -= dur
    return PHASE_IDLE, 1.0  # pragma: no cover - float edge


SERVER_PID = 41234


class StepClock:
    """A clock for reproducible runs of a simulated rig: it moves by ``step`` on each read
    (0: only when told by ``advance``)."""

    def __init__(self, start: float = 0.0, step: float = 1.0) -> None:
        self.now = start
        self.step = step

    def __call__(self) -> float:
        value = self.now
        self.now += self.step
        return value

    def advance(self, seconds: float) -> None:
        self.now += seconds


class SimSource:
    """A simulated rig. ``clock`` returns seconds; ``start`` is where on the timeline the rig
    is when opened (the default lands in a served model's generation phase)."""

    def __init__(
        self,
        profile: str = DEFAULT_PROFILE,
        *,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        start: float = 16.0,
        reason: str | None = None,
        wall_start: float = 1_767_225_600.0,  # fixed so recordings of the sim are reproducible
    ) -> None:
        if profile not in PROFILES:
            known = ", ".join(PROFILES)
            raise SourceUnavailable(f"unknown simulated profile {profile!r} (known: {known})")
        self.profile = PROFILES[profile]
        self.name = f"sim:{profile}"
        self.seed = seed
        self._clock = clock or time.monotonic
        self._start = start
        self._reason = reason or f"the simulated rig {profile} was asked for"
        self._wall_start = wall_start
        self._t0: float | None = None
        self._seq = SequenceCounter()
        self._info: RigInfo | None = None
        self._last_t: float | None = None
        self._energy_mj: list[float] = []
        self._static = self._make_static()

    def _make_static(self) -> tuple[GpuStatic, ...]:
        p = self.profile
        rng = random.Random(f"{self.seed}-static-{p.name}")
        order = cuda_order(p)
        out = []
        for i, (g, bus) in enumerate(zip(p.gpus, p.pci_bus_ids, strict=True)):
            uuid = "GPU-" + "-".join(
                "".join(rng.choice("0123456789abcdef") for _ in range(k)) for k in (8, 4, 4, 4, 12)
            )
            out.append(
                GpuStatic(
                    index=i,
                    uuid=uuid,
                    name=g.name,
                    pci_bus_id=bus,
                    memory_total=g.memory_mib * MIB,
                    power_limit_default_w=g.power_limit_w,
                    power_limit_max_w=g.power_max_w,
                    max_sm_clock_mhz=g.max_sm_mhz,
                    max_mem_clock_mhz=g.max_mem_mhz,
                    compute_capability=g.compute_capability,
                    cuda_index=order.index(i),
                    pcie_gen_max=g.pcie_gen,
                    pcie_width_max=g.pcie_width,
                    nvlink_links=g.nvlinks or None,
                    serial=str(rng.randrange(10**12, 10**13)),
                    vbios="96.00.89.00.01" if g.nvlinks == 18 else "94.02.42.00.0B",
                    persistence_mode=True,
                )
            )
        return tuple(out)

    # -- GpuSource -----------------------------------------------------------------------
    def open(self) -> RigInfo:
        self._t0 = self._clock()
        self._last_t = None
        self._energy_mj = [
            random.Random(f"{self.seed}-energy-{i}").uniform(5e8, 5e9)
            for i in range(len(self.profile.gpus))
        ]
        p = self.profile
        self._info = RigInfo(
            source=self.name,
            simulated=True,
            simulated_reason=self._reason,
            driver_version=p.driver_version,
            cuda_version=p.cuda_version,
            nvml_version=f"13.{p.driver_version}",
            nccl_version=p.nccl_version,
            hostname=p.hostname,
            gpus=self._static,
        )
        return self._info

    def close(self) -> None:
        self._info = None

    def poll(self) -> RigSample:
        if self._info is None or self._t0 is None:
            self.open()
        assert self._info is not None and self._t0 is not None
        now = self._clock()
        elapsed = now - self._t0
        t = self._start + elapsed
        dt = 0.0 if self._last_t is None else max(0.0, now - self._last_t)
        self._last_t = now
        phase, progress = phase_at(t)
        gpus = tuple(self._gpu_sample(i, t, dt, phase, progress) for i in range(len(self._static)))
        return RigSample(
            seq=self._seq.next(),
            t=now,
            wall=self._wall_start + elapsed,
            info=self._info,
            gpus=gpus,
            host=self._host_sample(t, phase),
        )

    # -- the workload --------------------------------------------------------------------
    def shares(self) -> tuple[float, ...]:
        """Fraction of the model's layers each GPU holds."""
        served = self.profile.served
        n = len(self.profile.gpus)
        if served.tensor_split:
            # -ts is in CUDA order, which differs from NVML order on mixed rigs
            total = sum(served.tensor_split)
            order = cuda_order(self.profile)
            return tuple(served.tensor_split[order.index(i)] / total for i in range(n))
        return tuple(1.0 / n for _ in range(n))

    def _resident_bytes(self, i: int, phase: str, progress: float) -> int:
        """Bytes the llama-server holds on GPU i: its layers, their KV, compute buffer, and
        the output head on the last GPU (what makes the last card the fullest)."""
        served = self.profile.served
        n = len(self.profile.gpus)
        share = self.shares()[i]
        weights = served.weights_gib * GIB * share
        if i == n - 1:
            weights += served.weights_gib * GIB * 0.02  # output head
        kv = served.kv_gib * GIB * share
        total = weights + kv + served.compute_mib * MIB + 300 * MIB  # CUDA context
        if phase == PHASE_LOADING:
            return int(300 * MIB + (total - 300 * MIB) * progress)
        return int(total)

    def _gpu_sample(self, i: int, t: float, dt: float, phase: str, progress: float) -> GpuSample:
        p = self.profile
        g = p.gpus[i]
        st = self._static[i]
        rng = random.Random(f"{self.seed}-{i}-{round(t * 10)}")
        n = len(p.gpus)
        share = self.shares()[i]
        serving = t >= LOAD_START
        loaded = t >= LOAD_START + LOAD_SECONDS

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
        power = (
            idle_w + (g.power_limit_w - idle_w) * power_frac + rng.gauss(0, g.power_limit_w / 80)
        )
        power = max(g.idle_w * 0.8, min(g.power_limit_w * 1.02, power))

        self._energy_mj[i] += power * dt * 1000.0

        used = self._resident_bytes(i, phase, progress) if serving else 0
        base_used = 3 * MIB if g.has_fan else 0
        memory_used = min(st.memory_total, base_used + used)
        reserved = 390 * MIB if st.memory_total > 16 * GIB else 252 * MIB

        temp = 34.0 + 45.0 * (power / g.power_limit_w) + rng.gauss(0, 0.5)
        busy_now = util > 5
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
        pcie_rx = (
            rng.uniform(2.5e6, 3.2e6) if phase == PHASE_LOADING else rng.uniform(200, 3000) * share
        )
        pcie_tx = rng.uniform(100, 2000) * share if serving else rng.uniform(0, 50)
        nvl = g.nvlinks and any("NV" in cell for cell in p.links.values())
        proc: tuple[GpuProcess, ...] = ()
        if serving:
            proc = (
                GpuProcess(
                    pid=SERVER_PID,
                    gpu_index=i,
                    used_memory=max(0, memory_used - base_used - 300 * MIB),
                    kind="C",
                    name="llama-server",
                    user="llama",
                    command="llama-server -m /models/"
                    + p.served.gguf
                    + " "
                    + " ".join(p.served.argv),
                    host_rss=int((1.2 + 0.3 * n) * GIB),
                    cpu_pct=100.0 if phase in (PHASE_PREFILL, PHASE_DECODE) else 3.0,
                ),
            )
        if g.has_fan and i == 0:
            proc = (
                GpuProcess(
                    pid=1873,
                    gpu_index=i,
                    used_memory=None,
                    kind="G",
                    name="Xorg",
                    user="root",
                    command="/usr/lib/xorg/Xorg vt1 -displayfd 3",
                    host_rss=96 * MIB,
                    cpu_pct=0.0,
                ),
                *proc,
            )
        return GpuSample(
            info=st,
            memory_used=memory_used,
            memory_free=st.memory_total - memory_used - reserved,
            memory_reserved=reserved,
            util_gpu=round(util),
            util_mem=round(util * (0.35 if phase == PHASE_PREFILL else 0.8)),
            power_w=round(power, 1),
            power_limit_w=g.power_limit_w,
            energy_mj=int(self._energy_mj[i]),
            temp_c=round(temp),
            sm_clock_mhz=sm_clock,
            mem_clock_mhz=mem_clock,
            fan_pct=(30.0 + max(0.0, temp - 40) * 1.2) if g.has_fan else None,
            pstate=pstate,
            throttle_reasons=reasons,
            pcie_gen=g.pcie_gen if busy_now or loaded else 1,
            pcie_width=g.pcie_width,
            pcie_rx_kbs=round(pcie_rx, 1),
            pcie_tx_kbs=round(pcie_tx, 1),
            nvlink_active=g.nvlinks if nvl else None,
            nvlink_rx_kbs=round(rng.uniform(1e4, 8e4) * busy, 1)
            if nvl and busy_now
            else (0.0 if nvl else None),
            nvlink_tx_kbs=round(rng.uniform(1e4, 8e4) * busy, 1)
            if nvl and busy_now
            else (0.0 if nvl else None),
            ecc_uncorrected=0 if not g.has_fan else None,
            ecc_corrected=0 if not g.has_fan else None,
            retired_pages=0 if not g.has_fan else None,
            processes=proc,
        )

    def _host_sample(self, t: float, phase: str) -> HostSample:
        p = self.profile
        rng = random.Random(f"{self.seed}-host-{round(t * 10)}")
        busy = phase in (PHASE_PREFILL, PHASE_DECODE)
        cpu = (100.0 / p.cpu_count) * (1 if busy else 0.1) + rng.uniform(1, 4)
        mem_total = p.host_mem_gib * GIB
        return HostSample(
            cpu_pct=round(min(100.0, cpu), 1),
            mem_total=mem_total,
            mem_used=int(mem_total * 0.18 + (2 * GIB if busy else 0)),
            cpu_count=p.cpu_count,
            load_1m=round(1.0 + (1.0 if busy else 0.0) + rng.uniform(0, 0.3), 2),
            hostname=p.hostname,
        )
