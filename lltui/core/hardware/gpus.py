"""The one catalog of NVIDIA GPU models: what fit, the speed model, topology advice and the
simulated rigs know of each GPU, read from ``gpus.csv`` beside this module.

One row per model, Pascal on (GeForce 10 to 50, GTX 16, TITAN, Quadro and RTX workstation,
datacenter, CMP, GB10 and Jetson), from NVIDIA's datasheets and architecture whitepapers,
cross-checked against the TechPowerUp GPU database (the ``source`` column names the
documents of each row). Rates are dense (no sparsity): ``fp16_tflops`` is the FP16
tensor-core rate with FP16 accumulation where it differs (GeForce; without tensor cores, the
FP32 rate llama.cpp then runs F16 matmuls at on Pascal GP10x, the FP16x2 rate on GP100 and
GTX 16), ``int8_tops`` the INT8 tensor-core rate (DP4A on Pascal, Volta and GTX 16) that
quantized matmuls (MMQ) run on. ``mib`` is the memory nvidia-smi reports (nominal where no
report was found; a unified-memory device's whole memory). ``unified``: one memory shared
with the host CPU (GB10, Jetson), no PCIe between them. Power, clocks and the fan are known
for the models the simulated rigs use (``None`` elsewhere).

Names are looked up as NVML reports them (``NVIDIA GeForce RTX 4090``, ``NVIDIA
A100-SXM4-80GB``) or short (``4090``, ``a100-80g``, ``h100``, ``gb10``): :func:`find_gpu`.
Where one NVML name covers several products (``NVIDIA GeForce RTX 3060`` 12 GB and 8 GB,
``Orin (nvgpu)``), the others are rows of their own naming it in ``nvml_name``, and the
memory size tells them apart. :func:`nearest_gpus` names the rows closest to a name the
catalog does not know.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from pathlib import Path

CATALOG_FILE = "gpus.csv"
# words NVML and AMD's tools put in names that do not tell models apart ("rx" after "rtx")
_NOISE = ("nvidia", "geforce", "tesla", "rtx", "quadro", "gtx", "amd", "radeon", "instinct", "rx")
# "NVIDIA A100-SXM4-80GB" is the a100-80gb; "H100 80GB HBM3" the h100
_VARIANT_NOISE = re.compile(
    r"sxm\d?|hbm\d?e?|generation|workstationedition|serveredition|maxq|edition"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    """One NVIDIA GPU model as its spec sheet gives it."""

    name: str  # as NVML (or AMD's amd-smi) reports it
    # normalised short names besides the NVML name's; an AMD board's PCI vendor and device
    # ID (pci1002740f), for tools that print only those
    aliases: tuple[str, ...] = ()
    cc: tuple[int, int]  # CUDA compute capability; (0, 0) for an AMD GPU
    mib: int  # memory as nvidia-smi reports it
    bandwidth_gbs: float  # memory bandwidth, GB/s
    fp16_tflops: float
    int8_tops: float
    pcie_gen: int
    pcie_width: int = 16  # lanes of its PCIe link
    nvlink_links: int = 0  # links per GPU on the SXM/HGX board or bridge; 0: none
    tdp_w: float | None = None  # default power limit
    power_max_w: float | None = None  # the most the limit can be raised to
    idle_w: float | None = None  # power drawn idle, clocks down
    boost_sm_mhz: int | None = None  # the maximum SM clock NVML reports
    idle_sm_mhz: int | None = None
    mem_clock_mhz: int | None = None  # the maximum memory clock NVML reports
    fan: bool | None = None  # None: not known; datacenter cards are cooled by the chassis
    unified: bool = False  # one memory shared with the host CPU (GB10, Jetson)
    nvml_name: str = ""  # the NVML name of a variant row that NVML does not tell apart
    fp32_tflops: float | None = None
    sm_count: int | None = None
    segment: str = ""  # GeForce, Workstation, Datacenter, Embedded, Instinct, Radeon, APU
    source: str = ""  # the documents its numbers come from
    gfx: str = ""  # an AMD GPU's ISA ("gfx942"; the catalog's cc column holds it): HIP's target

    @property
    def vendor(self) -> str:
        return "amd" if self.gfx else "nvidia"

    @property
    def memory(self) -> str:
        """HBM or GDDR (or the host's LPDDR, unified), by bandwidth and generation: every
        discrete AMD gfx9 GPU (Vega 20, CDNA) has HBM."""
        if self.gfx:
            return "HBM" if self.gfx.startswith("gfx9") and not self.unified else "GDDR"
        return "HBM" if self.bandwidth_gbs >= 1500 or self.cc in ((6, 0), (7, 0)) else "GDDR"


NAME_PREFIXES = ("NVIDIA GeForce ", "NVIDIA ", "Tesla ", "AMD ")  # what a short name leaves off


def short_gpu_name(name: str) -> str:
    """The name without the vendor's words: ``NVIDIA H100 80GB HBM3`` -> ``H100 80GB HBM3``,
    ``Tesla V100-SXM3-32GB`` -> ``V100-SXM3-32GB``."""
    return next((name[len(p) :] for p in NAME_PREFIXES if name.startswith(p)), name)


def normalise_name(name: str) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``4090``; ``A100-80GB`` -> ``a10080gb``."""
    s = name.lower()
    for word in _NOISE:
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


def _opt_float(text: str) -> float | None:
    return float(text) if text else None


def _opt_int(text: str) -> int | None:
    return int(text) if text else None


def _row(r: dict[str, str]) -> GpuSpec:
    gfx = r["cc"] if r["cc"].startswith("gfx") else ""  # an AMD row: its ISA, no CUDA cc
    major, _, minor = ("0.0" if gfx else r["cc"]).partition(".")
    return GpuSpec(
        name=r["name"],
        aliases=tuple(r["aliases"].split()),
        cc=(int(major), int(minor)),
        gfx=gfx,
        mib=int(r["mib"]),
        bandwidth_gbs=float(r["bandwidth_gbs"]),
        fp16_tflops=float(r["fp16_tflops"]),
        int8_tops=float(r["int8_tops"]),
        pcie_gen=int(r["pcie_gen"] or 0),
        pcie_width=int(r["pcie_width"] or 0),
        nvlink_links=int(r["nvlink_links"] or 0),
        tdp_w=_opt_float(r["tdp_w"]),
        power_max_w=_opt_float(r["power_max_w"]),
        idle_w=_opt_float(r["idle_w"]),
        boost_sm_mhz=_opt_int(r["boost_sm_mhz"]),
        idle_sm_mhz=_opt_int(r["idle_sm_mhz"]),
        mem_clock_mhz=_opt_int(r["mem_clock_mhz"]),
        fan={"yes": True, "no": False}.get(r["fan"]),
        unified=r.get("unified", "") == "yes",
        nvml_name=r.get("nvml_name", ""),
        fp32_tflops=_opt_float(r.get("fp32_tflops", "")),
        sm_count=_opt_int(r.get("sm_count", "")),
        segment=r.get("segment", ""),
        source=r.get("source", ""),
    )


@cache
def all_gpus() -> tuple[GpuSpec, ...]:
    """Every GPU of the catalog, in its order (by generation)."""
    # beside this module (not importlib.resources: its readers cost a plain fit 2.5 ms)
    text = Path(__file__).with_name(CATALOG_FILE).read_text(encoding="utf-8")
    return tuple(_row(r) for r in csv.DictReader(text.splitlines()))


@cache
def _by_key() -> dict[str, GpuSpec]:
    out: dict[str, GpuSpec] = {}
    for g in all_gpus():
        for key in (normalise_name(g.name), *g.aliases):
            out.setdefault(key, g)
    return out


@cache
def _variants() -> dict[str, tuple[GpuSpec, ...]]:
    """NVML name key -> every row NVML reports under it (the named row first)."""
    out: dict[str, list[GpuSpec]] = {}
    for g in all_gpus():
        out.setdefault(normalise_name(g.nvml_name or g.name), []).append(g)
    return {k: tuple(sorted(v, key=lambda g: bool(g.nvml_name))) for k, v in out.items()}


# The MIG profiles of each card that has them (NVIDIA's MIG user guide, its supported
# profiles; the +me ones, a slice with the media engines, are the same size), the whole card
# last. A slice Ng.Mgb has N of the card's compute slices and M of its GB of memory, and that
# share of its memory bandwidth (each memory slice is its share of the controllers and L2).
_MIG_A100_40GB = ("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
_MIG_80GB = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_MIG_H100_NVL = ("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")
_MIG_GH200 = ("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")
_MIG_H200 = ("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
_MIG_B200 = ("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")
_MIG_RTX_PRO_6000 = ("1g.24gb", "2g.48gb", "4g.96gb")
MIG_PROFILES: dict[str, tuple[str, ...]] = {
    "NVIDIA A30": ("1g.6gb", "2g.12gb", "4g.24gb"),
    "NVIDIA A100-PCIE-40GB": _MIG_A100_40GB,
    "NVIDIA A100-SXM4-40GB": _MIG_A100_40GB,
    "NVIDIA A800 40GB Active": _MIG_A100_40GB,
    "NVIDIA A100 80GB PCIe": _MIG_80GB,
    "NVIDIA A100-SXM4-80GB": _MIG_80GB,
    "NVIDIA A800-SXM4-80GB": _MIG_80GB,
    "NVIDIA A800 80GB PCIe": _MIG_80GB,
    "NVIDIA H100 PCIe": _MIG_80GB,
    "NVIDIA H100 80GB HBM3": _MIG_80GB,
    "NVIDIA H800": _MIG_80GB,
    "NVIDIA H800 PCIe": _MIG_80GB,
    "NVIDIA H100 NVL": _MIG_H100_NVL,
    "NVIDIA GH200 480GB": _MIG_GH200,
    "NVIDIA H200": _MIG_H200,
    "NVIDIA H200 NVL": _MIG_H200,
    "NVIDIA B200": _MIG_B200,
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": _MIG_RTX_PRO_6000,
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": _MIG_RTX_PRO_6000,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": _MIG_RTX_PRO_6000,
}
# a MIG slice as NVML names it ("NVIDIA A100-SXM4-80GB MIG 3g.40gb") or short ("h100 3g.40gb",
# "MIG 1g.10gb", "3g.40gb": no card); "+me" (with the media engines) is the same size
_MIG_NAME = re.compile(
    r"^(?P<card>.*?)[\s:/\-]*(?:\bmig[\s:\-]*)?(?P<g>[1-8])g\.(?P<gb>\d{1,3})gb(?:\+me)?$",
    re.IGNORECASE,
)


def split_mig(name: str) -> tuple[str, str] | None:
    """(the card's name, "" where none is given; the profile, ``3g.40gb``) of a MIG slice's
    name; None for a name that is no slice's."""
    m = _MIG_NAME.match(name.strip())
    if m is None:
        return None
    return m["card"].strip(), f"{m['g']}g.{m['gb']}gb"


def mig_slice(card: GpuSpec, profile: str) -> GpuSpec | None:
    """The slice ``profile`` of ``card``: its share of the card's compute and memory; None
    where the card has no such profile."""
    profiles = MIG_PROFILES.get(card.name, ())
    if profile not in profiles:
        return None

    def size(p: str) -> tuple[int, int]:
        g, gb = p.split(".")
        return int(g[:-1]), int(gb[:-2])

    (g, gb), (whole_g, whole_gb) = size(profile), size(profiles[-1])
    compute, memory = g / whole_g, gb / whole_gb
    return replace(
        card,
        name=f"{card.name} MIG {profile}",
        aliases=(),
        nvml_name="",
        mib=gb * 10**9 // 2**20,
        bandwidth_gbs=card.bandwidth_gbs * memory,
        fp16_tflops=card.fp16_tflops * compute,
        int8_tops=card.int8_tops * compute,
        fp32_tflops=None if card.fp32_tflops is None else card.fp32_tflops * compute,
        sm_count=None if card.sm_count is None else round(card.sm_count * compute),
        nvlink_links=0,  # a MIG slice has no peer access to another GPU
    )


def mig_cards(profile: str) -> tuple[GpuSpec, ...]:
    """The catalog's cards with the MIG profile ``profile`` (``3g.40gb``)."""
    return tuple(g for g in all_gpus() if profile in MIG_PROFILES.get(g.name, ()))


@lru_cache(maxsize=256)  # asked per device of every estimate (is it integrated?)
def find_gpu(name: str, mib: int | None = None) -> GpuSpec | None:
    """The catalog's row for a GPU named as NVML names it or by a short name (a MIG slice
    of a card: its share of the card, :func:`mig_slice`); None when it knows no such GPU.
    ``mib``: the memory the device reports, which picks among products sharing one NVML
    name (RTX 3060 12 GB or 8 GB)."""
    mig = split_mig(name)
    if mig is not None and mig[0]:
        card = find_gpu(mig[0])
        return None if card is None else mig_slice(card, mig[1])
    hit = _find(name)
    if hit is None or mib is None:
        return hit
    rows = _variants().get(normalise_name(hit.nvml_name or hit.name), (hit,))
    if len(rows) < 2:
        return hit
    return min(rows, key=lambda g: abs(g.mib - mib))


_LAPTOP_NOISE = re.compile(r"with|maxq|design|laptop|mobile|notebook|gpu|generation|edition")


def nearest_gpus(name: str, n: int = 3, cutoff: float = 0.5) -> list[str]:
    """The catalog rows most like ``name`` (a GPU it does not know): the same model number
    first (a laptop 4070 is near the 4070s), then the names at least ``cutoff`` similar."""
    import difflib  # (a name the catalog does not know: not every lookup's import)

    key = _LAPTOP_NOISE.sub("", normalise_name(name))
    if not key:
        return []
    found = re.search(r"\d{3,5}", key)
    number = found.group(0) if found else ""
    scored = []
    for g in all_gpus():
        names = (_LAPTOP_NOISE.sub("", normalise_name(g.name)), *g.aliases)
        sim = max(difflib.SequenceMatcher(None, key, k).ratio() for k in names)
        same = bool(number) and any(number in k for k in names)
        scored.append((same, sim, g.name))
    scored.sort(reverse=True)
    return [name for same, sim, name in scored[:n] if same or sim >= cutoff]


def _find(name: str) -> GpuSpec | None:
    key = normalise_name(name)
    if not key:
        return None
    table = _by_key()
    hit = table.get(key)
    if hit is None:
        # "a100sxm480gb" -> "a10080gb"; "h10080gbhbm3" -> "h10080gb" -> "h100"
        bare = _VARIANT_NOISE.sub("", key)
        hit = table.get(bare)
        if hit is None:
            hit = table.get(re.sub(r"(\d+)g(b)?$", r"\1gb", bare))
        if hit is None:
            hit = table.get(re.sub(r"\d+gb$", "", bare))
    return hit


def gpu(name: str) -> GpuSpec:
    """The catalog's row for a GPU this code names itself; KeyError when it is missing."""
    hit = find_gpu(name)
    if hit is None or hit.name != name:
        raise KeyError(f"no GPU named {name!r} in the catalog")
    return hit
