"""Units and formatting shared by the CLI text output and the widgets."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence

KIB = 1024
MIB = 1024 * 1024
GIB = 1024 * 1024 * 1024

# the units a size may end in, lower case, each before any that ends it (gib before b)
SIZE_UNITS = {
    "tib": 1024**4,
    "gib": GIB,
    "mib": MIB,
    "kib": KIB,
    "tb": 10**12,
    "gb": 10**9,
    "mb": 10**6,
    "kb": 10**3,
    "t": 1024**4,
    "g": GIB,
    "m": MIB,
    "k": KIB,
    "b": 1,
}
NA = "-"
MAX_SIZE_BYTES = 1 << 60  # a size past any device or host memory (1 EiB): refused as input
# A value that is None, NaN or infinite (a file or a driver sent it) shows as NA.


def fmt_bytes(n: int | float | None, *, precision: int = 1) -> str:
    """Human bytes with binary prefixes: ``1.5 GiB``; ``-`` for None."""
    if n is None or not math.isfinite(n):
        return NA
    value = float(n)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if value >= size:
            return f"{sign}{value / size:.{precision}f} {unit}"
    return f"{sign}{int(value)} B"


def fmt_mib(n: int | float | None) -> str:
    """Bytes as whole MiB, the unit nvidia-smi users read: ``15360 MiB``."""
    if n is None or not math.isfinite(n):
        return NA
    return f"{round(n / MIB)} MiB"


def fmt_pct(p: float | None, *, width: int = 0) -> str:
    if p is None or not math.isfinite(p):
        return NA.rjust(width)
    return f"{p:.0f}%".rjust(width)


def fmt_watts(w: float | None) -> str:
    if w is None or not math.isfinite(w):
        return NA
    return f"{w:.0f} W"


def fmt_temp(c: float | None) -> str:
    if c is None or not math.isfinite(c):
        return NA
    return f"{c:.0f}°C"


def fmt_rate_kbs(kbs: float | None) -> str:
    """A link rate given in KB/s (NVML's unit) as B/s with binary prefixes."""
    if kbs is None or not math.isfinite(kbs):
        return NA
    return fmt_bytes(kbs * KIB, precision=1) + "/s"


def fmt_energy_mj(mj: float | None) -> str:
    """Energy in millijoules as J, kJ or kWh, whichever reads best."""
    if mj is None or not math.isfinite(mj):
        return NA
    joules = mj / 1000.0
    if joules < 10_000:
        return f"{joules:.0f} J"
    if joules < 3_600_000:
        return f"{joules / 1000:.1f} kJ"
    return f"{joules / 3_600_000:.2f} kWh"


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return NA
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def fmt_clock(seconds: float) -> str:
    """A place in a recording as a player shows it: ``00:42``, ``10:00``, ``1:02:03``."""
    s = max(0, int(seconds)) if math.isfinite(seconds) else 0
    if s >= 3600:
        return f"{s // 3600}:{(s % 3600) // 60:02d}:{s % 60:02d}"
    return f"{s // 60:02d}:{s % 60:02d}"


def fmt_time(t: float, fmt: str = "%H:%M:%S") -> str:
    """Local time of ``t`` (seconds since the epoch); "?" for a time no clock shows."""
    try:
        return time.strftime(fmt, time.localtime(t))
    except (OverflowError, OSError, ValueError):
        return "?"


def parse_size(text: str) -> int:
    """Parse ``24GiB``, ``24G``, ``16000MiB``, ``15360M`` or a plain byte count.

    Decimal suffixes (GB, MB) are taken as decimal; single letters as binary, as GPU
    vendors and nvidia-smi print them. Raises ValueError with the text on bad input.
    """
    s = text.strip().replace(" ", "")
    if not s:
        raise ValueError("empty size")
    lower = s.lower()
    suffix = next((u for u in SIZE_UNITS if lower.endswith(u)), "")
    number = lower[: len(lower) - len(suffix)]
    mult = SIZE_UNITS.get(suffix, 1)
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f"not a size: {text!r}") from None
    if not math.isfinite(value * mult):
        raise ValueError(f"not a finite size: {text!r}")
    if value < 0:
        raise ValueError(f"negative size: {text!r}")
    if value * mult > MAX_SIZE_BYTES:
        raise ValueError(
            f"{text!r} is larger than any memory (at most {MAX_SIZE_BYTES // 1024**5} PiB)"
        )
    return int(value * mult)


def bar(fraction: float | None, width: int, *, fill: str = "█", empty: str = "░") -> str:
    """A text bar of ``width`` cells, with eighth-cell resolution at its end."""
    if width <= 0:
        return ""
    if fraction is None or not math.isfinite(fraction):
        return empty * width
    f = min(max(fraction, 0.0), 1.0)
    eighths = round(f * width * 8)
    full, rest = divmod(eighths, 8)
    partial = " ▏▎▍▌▋▊▉"[rest] if rest and full < width else ""
    out = fill * full + partial
    return out + empty * (width - len(out))


SPARK_CHARS = " ▁▂▃▄▅▆▇█"


def spark(values: tuple[float, ...] | list[float], width: int, lo: float, hi: float) -> str:
    """A sparkline of ``width`` cells on a fixed axis ``lo..hi`` (not rescaled to the data,
    so 40 W on a 350 W card looks low). Older points are folded by max when there are more
    values than cells; fewer values are right-aligned."""
    if width <= 0:
        return ""
    n = len(values)
    if n > width:
        step = n / width
        cells = [
            max(values[int(i * step) : max(int((i + 1) * step), int(i * step) + 1)])
            for i in range(width)
        ]
    else:
        cells = list(values)
    span = hi - lo
    out = []
    for v in cells:
        if not math.isfinite(v):
            v = lo  # a gap in the data draws as the axis, never as a spike
        f = 0.0 if span <= 0 else (v - lo) / span
        f = min(max(f, 0.0), 1.0)
        out.append(SPARK_CHARS[round(f * 8)] if f > 0 else "▁" if v >= lo else " ")
    return " " * (width - len(out)) + "".join(out)


def compact_names(names: Sequence[str]) -> str:
    """Device names with their numbers run together: ``CUDA0 ... CUDA7`` -> ``CUDA0-7``,
    ``CUDA0, CUDA1, CUDA5`` -> ``CUDA0,1,5``; names without a number stay as they are."""
    out: list[str] = []
    runs: dict[str, list[int]] = {}
    for name in names:
        m = _NUMBERED.match(name)
        if m is None:
            out.append(name)
            continue
        prefix = m.group(1)
        if prefix not in runs:
            runs[prefix] = []
            out.append(prefix)
        runs[prefix].append(int(m.group(2)))
    return ", ".join(f"{n}{compact_indexes(runs[n])}" if n in runs else n for n in out)


_NUMBERED = re.compile(r"^([A-Za-z]+)(\d+)$")


def compact_indexes(indexes: tuple[int, ...] | list[int]) -> str:
    """``(0, 1, 2, 3, 6)`` -> ``0-3,6``."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(indexes):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
        run = [i]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
    return ",".join(out)
