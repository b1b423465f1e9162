"""This machine's CPU and memory as the speed model needs them (a :class:`HostSpec`), from
what Linux tells: ``/proc/cpuinfo`` (model, vector flags, clock), the CPU topology under
``/sys`` (physical cores, as llama.cpp counts them for its default thread count), cpufreq's
maximum clock, and the SMBIOS memory-device records (type 17: populated DIMMs and their
configured speed), readable by root where the firmware tables are exposed. What it cannot
read stays the default and says so."""

from __future__ import annotations

import glob
import os
import struct
from dataclasses import replace
from functools import cache
from pathlib import Path

from lltui.core.hardware.host import (
    DEFAULT_GHZ,
    HostSpec,
    channel_gbs,
    default_host,
    is_lpddr,
    isa_of_flags,
)

_DMI = "/sys/firmware/dmi/entries"
MAX_CPUS = 1 << 16  # a CPU list naming more is no machine's
# SMBIOS memory device (type 17) memory types that are DRAM a CPU streams from
_DDR_TYPES = {
    0x18: "DDR3",
    0x1A: "DDR4",
    0x1D: "LPDDR3",
    0x1E: "LPDDR4",
    0x22: "DDR5",
    0x23: "LPDDR5",
}


@cache
def local_host() -> HostSpec:
    """This machine's host spec (read once per process)."""
    return read_host()


def read_host(root: str = "/") -> HostSpec:
    """The host spec from the files under ``root`` (``/`` here; a copied tree in tests)."""
    base = default_host()
    info = _cpuinfo(Path(root, "proc/cpuinfo"))
    if not info:
        return base
    name = info.get("model name") or info.get("Hardware") or info.get("CPU part") or "CPU"
    flags = set((info.get("flags") or info.get("Features") or "").split())
    cpu_dir = Path(root, "sys/devices/system/cpu")
    online = len(glob.glob(str(cpu_dir / "cpu[0-9]*"))) or os.cpu_count() or 1
    cores = _physical_cores(cpu_dir) or os.cpu_count() or 1
    allowed = _affinity() if root == "/" else None  # this process may run on fewer CPUs
    performance = _performance_cpus(Path(root, "sys/devices/cpu_core/cpus"))
    # llama.cpp's default on an Intel hybrid pins itself to each CPU in turn to find them (a
    # narrower affinity fails that: all physical cores then)
    if performance and not (allowed and allowed < online):
        cores = _math_cpus(performance, online) or cores
    if allowed:
        cores = min(cores, allowed)
    ghz = _max_ghz(cpu_dir) or _mhz(info) or DEFAULT_GHZ
    host = HostSpec(
        name=" ".join(name.split()),
        cores=cores,
        hw_threads=allowed or online,
        isa=isa_of_flags(flags),
        ghz=round(ghz, 2),
        mem_gbs=base.mem_gbs,
        source="this machine",
        mem_source=base.mem_source,
    )
    mem = _dimms(Path(root, _DMI.lstrip("/")))
    if mem is not None:
        host = replace(host, mem_gbs=mem[0], mem_source=mem[1], lpddr=mem[2])
    return host


def _cpuinfo(path: Path) -> dict[str, str]:
    """The first processor's fields (Arm puts some after the processor blocks)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def _physical_cores(cpu_dir: Path) -> int | None:
    """Distinct thread-sibling sets: llama.cpp's count of physical cores."""
    seen = set()
    for sib in glob.glob(str(cpu_dir / "cpu[0-9]*" / "topology" / "thread_siblings")):
        try:
            seen.add(Path(sib).read_text().strip())
        except OSError:
            continue
    return len(seen) or None


def _math_cpus(performance: set[int], online: int) -> int:
    """llama.cpp's default threads on an Intel hybrid (common_cpu_get_num_math): each CPU in
    turn, the efficiency cores skipped, each performance core counted and the CPU after it
    skipped as its hyper-thread (so without SMT, half of them)."""
    count = cpu = 0
    while cpu < online:
        if cpu in performance:
            count += 1
            cpu += 1
        cpu += 1
    return count


def _performance_cpus(path: Path) -> set[int] | None:
    """The CPUs of an Intel hybrid's performance cores (``/sys/devices/cpu_core/cpus``, a
    list like ``0-15``); None where there is no such split. llama.cpp's default threads on
    x86 Linux leave the efficiency cores out: its threads wait for each other at every op."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    cpus: set[int] = set()
    try:
        for part in filter(None, text.split(",")):
            lo, _sep, hi = part.partition("-")
            first, last = int(lo), int(hi or lo)
            if not 0 <= first <= last < MAX_CPUS:
                return None
            cpus.update(range(first, last + 1))
    except ValueError:
        return None
    return cpus or None


def _affinity() -> int | None:
    try:
        return len(os.sched_getaffinity(0)) or None
    except (AttributeError, OSError):
        return None


def _max_ghz(cpu_dir: Path) -> float | None:
    try:
        khz = int((cpu_dir / "cpu0" / "cpufreq" / "cpuinfo_max_freq").read_text().strip())
    except (OSError, ValueError):
        return None
    return khz / 1e6 if khz > 0 else None


def _mhz(info: dict[str, str]) -> float | None:
    try:
        mhz = float(info.get("cpu MHz", ""))
    except ValueError:
        return None
    return mhz / 1000.0 if mhz > 0 else None


def _dimms(dmi: Path) -> tuple[float, str, bool] | None:
    """(GB/s, description, LPDDR) from the populated DIMMs: one 64-bit channel per DIMM at its
    configured speed (two DIMMs on one channel overstate it; the records do not say)."""
    speeds: list[tuple[str, int]] = []
    for raw_path in sorted(glob.glob(str(dmi / "17-*" / "raw"))):
        try:
            raw = Path(raw_path).read_bytes()
        except OSError:
            continue
        got = _dimm(raw)
        if got is not None:
            speeds.append(got)
    if not speeds:
        return None
    kind = speeds[0][0]
    mts = min(s for _k, s in speeds)
    return channel_gbs(len(speeds), mts), f"{len(speeds)} x {kind}-{mts} (SMBIOS)", is_lpddr(kind)


def _dimm(raw: bytes) -> tuple[str, int] | None:
    """(type, MT/s) of one populated SMBIOS type-17 record, else None."""
    if len(raw) < 0x17 or raw[0] != 17:
        return None
    size = struct.unpack_from("<H", raw, 0x0C)[0]
    if size in (0, 0xFFFF):
        return None  # an empty slot
    kind = _DDR_TYPES.get(raw[0x12])
    if kind is None:
        return None
    speed = struct.unpack_from("<H", raw, 0x15)[0]
    if len(raw) >= 0x22:
        configured = struct.unpack_from("<H", raw, 0x20)[0]
        if configured not in (0, 0xFFFF):
            speed = configured
    return (kind, speed) if 0 < speed < 0xFFFF else None
