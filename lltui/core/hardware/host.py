"""The host CPU and its memory as the speed model needs them: how many cores run llama.cpp's
threads, which vector instructions its CPU kernels use, the clock, and the memory bandwidth.

A :class:`HostSpec` comes from this machine (:mod:`lltui.sources.gpu.cpu` reads
``/proc/cpuinfo``, the CPU affinity and, where Linux exposes them, the DIMMs' SMBIOS
records), from ``--host`` (:func:`parse_host_spec`), or from :func:`default_host` when
nothing is known. Each figure says where it came from, so a prediction can say what it
assumed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from lltui.core.text import counted, is_digits

# The vector paths llama.cpp's CPU backend takes, best first, with the multiply-accumulate
# work one core issues per cycle on each (nominal: two FMA pipes; one 512-bit VNNI or AMX
# tile op): (name, f32 flops per cycle, int8 ops per cycle). The int8 rate is what the
# quantized dot products (q8 activations times 4- to 8-bit weights) run at.
ISA_RATES: dict[str, tuple[float, float]] = {
    "amx": (64.0, 1024.0),  # Sapphire Rapids and later: AMX int8 tiles (-ub batches)
    "avx512vnni": (64.0, 256.0),
    "avx512": (64.0, 128.0),
    "avx2": (32.0, 64.0),
    "avx": (16.0, 16.0),
    "sse": (8.0, 8.0),
    "i8mm": (32.0, 128.0),  # Armv8.6+ SMMLA (Graviton 3/4, Neoverse V, Cortex-X/A7xx)
    "dotprod": (32.0, 64.0),  # Armv8.2 SDOT
    "neon": (16.0, 16.0),
}
# /proc/cpuinfo flags that give each path (all must be there), best first
ISA_FLAGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("amx", ("amx_int8", "avx512f")),
    ("avx512vnni", ("avx512_vnni", "avx512f")),
    ("avx512", ("avx512f", "avx512bw")),
    ("avx2", ("avx2", "fma")),
    ("avx", ("avx",)),
    ("i8mm", ("i8mm",)),
    ("dotprod", ("asimddp",)),
    ("neon", ("asimd",)),
    ("sse", ("sse4_2",)),
)
DEFAULT_GHZ = 3.0
# what a machine nobody described is taken to have: a desktop with dual-channel DDR5-5600
DEFAULT_MEM_GBS = 89.6
DEFAULT_CORES = 8
DEFAULT_ISA = "avx2"
# DDR transfers 8 bytes per channel and transfer (a 64-bit channel)
CHANNEL_BYTES = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSpec:
    """The CPU side of a rig. ``cores``: physical cores llama.cpp's threads run on (its
    default thread count); ``threads``: ``-t`` when the command gives it."""

    name: str = "CPU"
    cores: int = DEFAULT_CORES
    threads: int | None = None
    hw_threads: int | None = None  # logical CPUs a -t can use (None: two per core)
    isa: str = DEFAULT_ISA
    ghz: float = DEFAULT_GHZ
    mem_gbs: float = DEFAULT_MEM_GBS  # peak: channels x transfers/s x 8 bytes
    unified: bool = False  # the GPU shares this memory (GB10, Jetson)
    # LPDDR (SoCs, laptops): its many narrow channels' peak is shared with the GPU and NPU,
    # and at its longer latency the CPU cores' outstanding reads fill less of it
    lpddr: bool = False
    source: str = "assumed"  # where cores, ISA and clock came from
    mem_source: str = "assumed"  # where the bandwidth came from

    @property
    def workers(self) -> int:
        """Threads doing the work: ``-t`` when given, else the physical cores."""
        return max(1, min(self.threads or self.cores, self.hw_threads or self.cores * 2))

    @property
    def rates(self) -> tuple[float, float]:
        """(f32 flops, int8 ops) per cycle and core of its best vector path."""
        return ISA_RATES.get(self.isa, ISA_RATES[DEFAULT_ISA])

    @property
    def assumed(self) -> bool:
        return self.mem_source == "assumed"

    def describe(self) -> str:
        bw = f"{self.mem_gbs:g} GB/s ({self.mem_source})"
        threads = counted(self.workers, "thread")
        return f"{self.name}: {threads}, {self.isa}, {self.ghz:g} GHz, memory {bw}"

    def with_threads(self, threads: int | None) -> HostSpec:
        return self if not threads or threads < 1 else replace(self, threads=threads)


def default_host() -> HostSpec:
    """The host assumed when nothing is known of it."""
    return HostSpec(name="a desktop CPU", source="assumed", mem_source="assumed")


def isa_of_flags(flags: set[str]) -> str:
    """The best vector path a set of /proc/cpuinfo flags gives."""
    for name, needed in ISA_FLAGS:
        if all(f in flags for f in needed):
            return name
    return "sse" if "sse2" in flags else "neon"


_MEM = re.compile(
    r"^(?:(?P<n>\d+)\s*[x*]\s*)?(?P<kind>(?:lp)?ddr\d+x?)[- ]?(?P<mts>\d{3,5})$", re.IGNORECASE
)
_BW = re.compile(r"^(?P<v>\d+(?:\.\d+)?)\s*(?:gb/?s)?$", re.IGNORECASE)


def channel_gbs(channels: int, mts: int) -> float:
    """Peak bandwidth of ``channels`` 64-bit channels at ``mts`` million transfers/s."""
    return round(channels * mts * CHANNEL_BYTES / 1000.0, 1)


def is_lpddr(kind: str) -> bool:
    """Whether a memory type (``LPDDR5X``, ``DDR5``) is low-power DRAM."""
    return kind.upper().startswith("LP")


def parse_memory(text: str) -> tuple[float, str, bool | None]:
    """``90`` or ``90GB/s`` (GB/s), or ``2xDDR5-5600`` (channels x type-speed): (GB/s, how
    it was given, whether it is LPDDR: None where a bandwidth alone does not say). ValueError
    with one line otherwise."""
    s = text.strip()
    m = _BW.match(s)
    if m:
        value = float(m.group("v"))
        if not 0 < value < 100_000:
            raise ValueError(f"--host: memory bandwidth {s!r} is out of range")
        return value, f"{value:g} GB/s (--host)", None
    m = _MEM.match(s.replace(" ", ""))
    if m:
        n = int(m.group("n") or 1)
        mts = int(m.group("mts"))
        if not 1 <= n <= 64 or not 100 <= mts <= 20_000:
            raise ValueError(f"--host: memory {s!r} is out of range")
        kind = m.group("kind").upper()
        return channel_gbs(n, mts), f"{n} x {kind}-{mts} (--host)", is_lpddr(kind)
    raise ValueError(f"--host: memory {s!r}: expected GB/s (90) or channels (2xDDR5-5600)")


def parse_host_spec(text: str, base: HostSpec | None = None) -> HostSpec:
    """``--host`` as comma-separated ``key=value`` pairs over ``base`` (this machine's, or
    the default): ``cores=16``, ``isa=avx512``, ``ghz=3.5``, ``mem=2xDDR5-5600`` or
    ``mem=90`` (GB/s), ``unified``. ValueError with one line on anything else."""
    host = base or default_host()
    told = False
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        value = value.strip()
        if key == "unified" and not sep:
            host = replace(host, unified=True)
        elif not sep or not value:
            raise ValueError(f"--host: expected key=value, got {item!r} (cores, isa, ghz, mem)")
        else:
            host = _host_item(host, key, value)
        told = True
    if not told:
        raise ValueError("--host: empty; e.g. cores=16,mem=2xDDR5-5600,isa=avx512")
    return host


def _host_item(host: HostSpec, key: str, value: str) -> HostSpec:
    if key in ("cores", "c"):
        if not is_digits(value) or not 1 <= int(value) <= 4096:
            raise ValueError(f"--host: cores={value!r} is not a core count")
        return replace(host, cores=int(value), hw_threads=None, source="--host")
    if key == "isa":
        isa = value.lower().replace("-", "").replace("_", "")
        if isa not in ISA_RATES:
            raise ValueError(f"--host: isa={value!r}; one of {', '.join(ISA_RATES)}")
        return replace(host, isa=isa, source="--host")
    if key == "ghz":
        try:
            ghz = float(value)
        except ValueError:
            ghz = 0.0
        if not 0.3 <= ghz <= 8.0:
            raise ValueError(f"--host: ghz={value!r} is not a clock in GHz")
        return replace(host, ghz=ghz, source="--host")
    if key in ("mem", "bw", "memory"):
        gbs, said, lpddr = parse_memory(value)
        if lpddr is None:  # a bandwidth alone keeps the kind known
            lpddr = host.lpddr
        return replace(host, mem_gbs=gbs, mem_source=said, lpddr=lpddr)
    raise ValueError(f"--host: unknown key {key!r}; use cores, isa, ghz, mem")
