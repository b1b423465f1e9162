"""``rocm-smi --json`` read into core models: the tool ROCm shipped before ``amd-smi``
(deprecated, still the only one on many MI50/MI100 and Radeon hosts).

Its JSON is one object per card, ``{"card0": {"GPU use (%)": "0", ...}, "system": {...}}``,
every value a string and every key a sentence whose wording changed between releases
(``Card series`` / ``Card Series``; ``GPU memory use (%)`` was memory activity, 6.x added
``GPU Memory Allocated (VRAM%)``, which is not). Which keys appear depends on the
``--show*`` flags it ran with; a key that is absent or ``N/A`` is None here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lltui.core.hardware.gpus import find_gpu
from lltui.core.monitor.amd_smi_json import with_catalog
from lltui.core.monitor.amd_values import (
    AmdJsonError,
    integer,
    is_na,
    load_json,
    nonneg,
    pci_bus_id,
    pcie_gen,
    text,
    to_bytes,
)
from lltui.core.monitor.models import GpuSample, GpuStatic, gpu_key
from lltui.core.monitor.plausible import plausible, within

_CARD = re.compile(r"^card(\d+)$")
# (key spellings, in the order tried) for each fact, one table
KEYS: dict[str, tuple[str, ...]] = {
    "name": ("Card Series", "Card series", "Device Name"),
    "sku": ("Card SKU", "Card model"),  # a board's part number: a name of last resort
    "device_id": ("GPU ID", "Device ID"),  # the PCI device ID, 0x740f
    "gfx": ("GFX Version", "Target Graphics Version", "gfx_version"),
    "bus": ("PCI Bus",),
    "uuid": ("Unique ID", "GUID"),
    "serial": ("Serial Number",),
    "vbios": ("VBIOS version",),
    "edge": ("Temperature (Sensor edge) (C)",),
    "junction": ("Temperature (Sensor junction) (C)",),
    "memtemp": ("Temperature (Sensor memory) (C)",),
    "power": (
        "Average Graphics Package Power (W)",
        "Current Socket Graphics Package Power (W)",
    ),
    "cap": ("Max Graphics Package Power (W)",),
    "util": ("GPU use (%)",),
    "memutil": ("GPU memory use (%)", "GPU Memory Read/Write Activity (%)"),
    "vram_total": ("VRAM Total Memory (B)",),
    "vram_used": ("VRAM Total Used Memory (B)",),
    "gtt_total": ("GTT Total Memory (B)",),
    "gtt_used": ("GTT Total Used Memory (B)",),
    "sclk": ("sclk clock speed:",),
    "mclk": ("mclk clock speed:",),
    "fan": ("Fan speed (%)",),
    "energy_uj": ("Accumulated Energy (uJ)",),
    "pcie_bw": ("PCIe Bandwidth (MB/s)",),
    "compute_partition": ("Current Compute Partition", "Compute Partition"),
    "memory_partition": ("Current Memory Partition", "Memory Partition"),
    "pcie_speed": ("PCIe Link Speed", "pcie_link_speed"),
    "pcie_width": ("PCIe Link Width",),
}


def _get(card: Mapping[str, Any], fact: str) -> Any:
    for key in KEYS[fact]:
        value = card.get(key)
        if not is_na(value):
            return value
    return None


@dataclass(frozen=True, slots=True)
class RocmSmiCard:
    index: int
    static: GpuStatic
    sample: GpuSample


def cards(output: str, what: str = "rocm-smi") -> tuple[dict[int, dict[str, Any]], str | None]:
    """The card objects by index, and the driver version from ``"system"``."""
    doc = load_json(output, what)
    if not isinstance(doc, dict):
        raise AmdJsonError(f"{what} printed JSON that is not an object of cards")
    out: dict[int, dict[str, Any]] = {}
    for key, value in doc.items():
        m = _CARD.match(str(key))
        if m and isinstance(value, dict):
            out[int(m.group(1))] = value
    system = doc.get("system") if isinstance(doc.get("system"), dict) else {}
    assert isinstance(system, dict)
    if not out and not system:
        raise AmdJsonError(f"{what} printed JSON without a card")
    return out, text(system.get("Driver version"))


# what rocm-smi prints as the series of Instinct boards whose firmware names none
PLACEHOLDER_NAMES = frozenset({"GENERIC RM IMAGE"})


def _name(index: int, card: Mapping[str, Any]) -> str:
    """The card's name: its series, else the catalog's name for its PCI device ID (an MI210
    says "GENERIC RM IMAGE" and 0x740f), else its part number."""
    for key in KEYS["name"]:
        name = text(card.get(key)) if not is_na(card.get(key)) else None
        if name and name.upper() not in PLACEHOLDER_NAMES:
            return name
    device = text(_get(card, "device_id"))
    spec = find_gpu(f"pci 1002 {device.lower().removeprefix('0x')}") if device else None
    return spec.name if spec else text(_get(card, "sku")) or f"AMD GPU {index}"


def static_of(index: int, card: Mapping[str, Any]) -> GpuStatic:
    name = _name(index, card)
    return GpuStatic(
        index=index,
        uuid=gpu_key(text(_get(card, "uuid")), index),
        name=name,
        pci_bus_id=pci_bus_id(_get(card, "bus")),
        memory_total=to_bytes(_get(card, "vram_total")),
        power_limit_default_w=nonneg(_get(card, "cap")),
        serial=text(_get(card, "serial")),
        vbios=text(_get(card, "vbios")),
        vendor="amd",
        gfx_target=text(_get(card, "gfx")),
        compute_partition=text(_get(card, "compute_partition")),
        memory_partition=text(_get(card, "memory_partition")),
    )


def sample_of(card: Mapping[str, Any], static: GpuStatic) -> GpuSample:
    edge = within("temp_c", nonneg(_get(card, "edge")))
    junction = nonneg(_get(card, "junction"))
    used = to_bytes(_get(card, "vram_used"))
    total = to_bytes(_get(card, "vram_total")) or static.memory_total
    energy_uj = nonneg(_get(card, "energy_uj"))
    bw = nonneg(_get(card, "pcie_bw"))
    width = integer(_get(card, "pcie_width"))
    return GpuSample(
        info=static,
        memory_used=used,
        memory_free=None if used is None or total is None else max(total - used, 0),
        util_gpu=nonneg(_get(card, "util")),
        util_mem=nonneg(_get(card, "memutil")),
        power_w=nonneg(_get(card, "power")),
        power_limit_w=nonneg(_get(card, "cap")),
        energy_mj=None if not energy_uj else int(energy_uj / 1000),
        temp_c=edge if edge is not None else junction,
        hotspot_temp_c=junction,
        mem_temp_c=nonneg(_get(card, "memtemp")),
        sm_clock_mhz=integer(_get(card, "sclk")),
        mem_clock_mhz=integer(_get(card, "mclk")),
        fan_pct=nonneg(_get(card, "fan")),
        gtt_used=to_bytes(_get(card, "gtt_used")),
        gtt_total=to_bytes(_get(card, "gtt_total")),
        pcie_bw_kbs=None if bw is None else bw * 1e6 / 1024,
        pcie_gen=pcie_gen(_get(card, "pcie_speed")),
        pcie_width=width if width else None,
    )


def read_cards(output: str, what: str = "rocm-smi") -> tuple[tuple[RocmSmiCard, ...], str | None]:
    """Every card of one ``rocm-smi ... --json`` output, and the driver version."""
    found, driver = cards(output, what)
    rows = []
    for index, card in sorted(found.items()):
        static = with_catalog(static_of(index, card))
        rows.append(RocmSmiCard(index, static, plausible(sample_of(card, static))))
    return tuple(rows), driver


__all__ = ["RocmSmiCard", "cards", "read_cards", "sample_of", "static_of"]
