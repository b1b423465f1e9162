"""How one value of AMD's tools reads, whatever the tool's version printed.

``amd-smi --json`` has printed the same quantity three ways across ROCm releases: a bare
number (6.0), a ``{"value": 42, "unit": "W"}`` object (6.1 on), and ``"N/A"`` or an
object whose value is ``"N/A"`` where the GPU does not say. ``rocm-smi --json`` prints
strings: ``"42.0"``, ``"(800Mhz)"``, ``"42%"``. Every reader here takes any of these and
gives a number in the unit asked for, or None; none raises on a value it cannot read. A
value no 64-bit counter of the driver could hold (``1e308``) is one it cannot read.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from lltui.core.units import GIB, KIB, MIB

# what AMD's tools print where a value is missing
NA_WORDS = frozenset({"n/a", "na", "", "none", "unknown", "not supported", "unsupported"})
# amd-smi prints MB but means MiB: a 192 GiB MI300X shows 196592 "MB", an 8 GiB card 8176
BYTE_UNITS: dict[str, int] = {
    "b": 1,
    "kb": KIB,
    "kib": KIB,
    "mb": MIB,
    "mib": MIB,
    "gb": GIB,
    "gib": GIB,
}
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_UNIT = re.compile(r"[-+]?\d+(?:\.\d+)?\s*([A-Za-z/%]+)")
# more than any reading of these tools: the driver keeps its counters in 64 bits
LARGEST = 2.0**64
# the most a JSON document from one of these tools holds (a 64-GPU host prints ~2 MB)
MAX_JSON_CHARS = 32 * MIB


class AmdJsonError(ValueError):
    """Output that holds no JSON document of the shape asked for; the text is one line."""


def is_na(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, dict):
        return "value" in value and is_na(value["value"])
    return isinstance(value, str) and value.strip().lower() in NA_WORDS


def _finite(number: float) -> float | None:
    return number if math.isfinite(number) and abs(number) < LARGEST else None


def _split(value: Any) -> tuple[float | None, str | None]:
    """(number, unit) of one value, either None where it does not read."""
    unit: str | None = None
    if isinstance(value, dict):
        unit = value.get("unit") if isinstance(value.get("unit"), str) else None
        value = value.get("value")
    if isinstance(value, bool) or value is None:
        return None, unit
    if isinstance(value, int | float):
        return _finite(float(value)), unit
    if not isinstance(value, str) or is_na(value):
        return None, unit
    found = _NUMBER.search(value)
    if found is None:
        return None, unit
    if unit is None:
        named = _UNIT.search(value)
        unit = named.group(1) if named else None
    return _finite(float(found.group(0))), unit


def number(value: Any) -> float | None:
    """The number in a value (``42``, ``"42.0"``, ``"42 W"``, ``{"value": 42}``)."""
    return _split(value)[0]


def integer(value: Any) -> int | None:
    """A whole reading that cannot be negative (an index, a width, a clock, a count)."""
    n = number(value)
    return None if n is None or n < 0 else round(n)


def nonneg(value: Any) -> float | None:
    """A reading that cannot be negative (a percentage, watts, a temperature)."""
    n = number(value)
    return None if n is None or n < 0 else n


def to_bytes(value: Any, default_unit: str = "b") -> int | None:
    """Bytes of a value, by its own unit where it names one (MB is MiB, as amd-smi means it)."""
    n, unit = _split(value)
    if n is None or n < 0:
        return None
    scale = BYTE_UNITS.get((unit or default_unit).strip().lower())
    if scale is None or n * scale >= LARGEST:
        return None
    return round(n * scale)


def text(value: Any) -> str | None:
    """A string value, None for N/A and for what is not a string."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or is_na(value):
        return None
    return value.strip()


def dig(entry: Any, *path: str) -> Any:
    """``entry[path[0]][path[1]]...``; None where any step is missing or not an object."""
    for key in path:
        if not isinstance(entry, dict):
            return None
        entry = entry.get(key)
    return entry


def first(entry: Any, *paths: tuple[str, ...]) -> Any:
    """The first of several paths that holds a value (not N/A): fields renamed by releases."""
    for path in paths:
        value = dig(entry, *path)
        if not is_na(value):
            return value
    return None


def pci_bus_id(value: Any) -> str:
    """``0000:05:00.0`` -> ``00000000:05:00.0``, the 8-digit domain NVML prints, so one
    rig's GPUs of both vendors sort and match alike."""
    s = (text(value) or "").upper()
    domain, sep, rest = s.partition(":")
    if sep and rest.count(":") == 1 and len(domain) == 4:
        return f"0000{domain}:{rest}"
    return s


PCIE_GEN_BY_GTS: tuple[tuple[float, int], ...] = (
    (2.5, 1), (5.0, 2), (8.0, 3), (16.0, 4), (32.0, 5), (64.0, 6),
)  # fmt: skip


def pcie_gen(value: Any) -> int | None:
    """The PCIe generation of a link speed: GT/s (``16``), MT/s (``16000``), or the
    ``Gen 4`` / tenths of GT/s (``160``) some versions print."""
    if isinstance(value, str) and value.strip().lower().startswith("gen"):
        return integer(value)
    n, unit = _split(value)
    if n is None or n <= 0:
        return None
    if (unit and unit.lower().startswith("mt")) or n > 1000:  # MT/s, named or not
        n /= 1000.0
    elif n > 64:  # tenths of GT/s (gpu_metrics' pcie_link_speed)
        n /= 10.0
    return min(PCIE_GEN_BY_GTS, key=lambda row: abs(row[0] - n))[1]


def load_json(output: str, what: str) -> Any:
    """The JSON document in a tool's output: the tools print warnings (``WARNING: ...``,
    a watch banner) before it, so parsing starts at the first ``[`` or ``{`` that begins a
    line. ``what`` names the command in the one-line error."""
    if len(output) > MAX_JSON_CHARS:
        raise AmdJsonError(f"{what}: output of {len(output)} characters is too long")
    starts = [m.start() for m in re.finditer(r"(?m)^\s*[\[{]", output)]
    if not starts:
        line = next((ln.strip() for ln in output.splitlines() if ln.strip()), "")
        raise AmdJsonError(f"{what} printed no JSON" + (f": {line[:160]}" if line else ""))
    decoder = json.JSONDecoder()
    error = ""
    for start in starts:
        try:
            doc, _ = decoder.raw_decode(output[start:].lstrip())
        except (json.JSONDecodeError, RecursionError) as exc:
            error = str(exc)
            continue
        return doc
    raise AmdJsonError(f"{what} printed JSON that does not parse: {error}")
