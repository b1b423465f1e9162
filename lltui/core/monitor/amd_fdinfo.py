"""A process's GPU memory from the kernel's DRM fdinfo (``/proc/PID/fdinfo/FD``).

For every open amdgpu render node the kernel prints the client's memory (the DRM usage
stats format, ``Documentation/gpu/drm-usage-stats.rst``)::

    drm-driver:	amdgpu
    drm-pdev:	0000:03:00.0
    drm-client-id:	34
    drm-memory-vram:	2162020 KiB         (kernels before 6.9; drm-total-vram after)
    drm-memory-gtt: 	2060 KiB

This is what AMD's own tools read for per-process VRAM, and it needs neither ROCm nor root
(a user sees their own processes). Several fds of one process may be one DRM client (same
``drm-client-id``): a client is counted once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lltui.core.monitor.amd_values import pci_bus_id, to_bytes

DRIVERS = frozenset({"amdgpu"})
# key -> what it counts, newest spelling first (a kernel prints one of each pair)
VRAM_KEYS = ("drm-total-vram", "drm-memory-vram")
GTT_KEYS = ("drm-total-gtt", "drm-memory-gtt")
MAX_FDINFO_CHARS = 64 * 1024  # one fdinfo is a few hundred bytes


@dataclass(frozen=True, slots=True)
class DrmClient:
    """One DRM client of a process on one GPU."""

    pdev: str  # the GPU's PCI address, as pci_bus_id() writes it
    client_id: str
    vram: int | None
    gtt: int | None


def parse_fdinfo(text: str) -> DrmClient | None:
    """The amdgpu client one fdinfo describes; None for any other fd (a file, a socket,
    another driver's GPU)."""
    fields: dict[str, str] = {}
    for line in text[:MAX_FDINFO_CHARS].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    if fields.get("drm-driver") not in DRIVERS or not fields.get("drm-pdev"):
        return None

    def first(keys: tuple[str, ...]) -> int | None:
        return next((to_bytes(fields[k], "b") for k in keys if k in fields), None)

    return DrmClient(
        pdev=pci_bus_id(fields["drm-pdev"]),
        client_id=fields.get("drm-client-id", ""),
        vram=first(VRAM_KEYS),
        gtt=first(GTT_KEYS),
    )


def memory_by_gpu(clients: Iterable[DrmClient]) -> dict[str, tuple[int | None, int | None]]:
    """(VRAM, GTT) bytes per GPU (PCI address) of one process's clients, each client once."""
    seen: set[tuple[str, str]] = set()
    out: dict[str, tuple[int | None, int | None]] = {}
    for c in clients:
        key = (c.pdev, c.client_id)
        if c.client_id and key in seen:
            continue
        seen.add(key)
        vram, gtt = out.get(c.pdev, (None, None))
        out[c.pdev] = (_add(vram, c.vram), _add(gtt, c.gtt))
    return out


def _add(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else a + b
