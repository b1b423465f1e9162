"""Per-process VRAM of AMD GPUs from ``/proc/PID/fdinfo`` (see
:mod:`lltui.core.monitor.amd_fdinfo`): the processes amd-smi would list, without ROCm,
where the tool is missing, too old to list processes, or run without root."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from lltui.core.monitor.amd_fdinfo import DrmClient, memory_by_gpu, parse_fdinfo
from lltui.core.monitor.models import GpuProcess, GpuStatic

MAX_FDS_PER_PROCESS = 4096  # a server with many sockets: read no further than this
RENDER_PREFIX = "/dev/dri/"


def _clients(fd_dir: Path, info_dir: Path) -> list[DrmClient]:
    out: list[DrmClient] = []
    try:
        fds = os.listdir(fd_dir)
    except OSError:  # gone, or another user's
        return out
    for fd in fds[:MAX_FDS_PER_PROCESS]:
        try:
            if not os.readlink(fd_dir / fd).startswith(RENDER_PREFIX):
                continue
            text = (info_dir / fd).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        client = parse_fdinfo(text)
        if client is not None:
            out.append(client)
    return out


def read_drm_processes(
    statics: Iterable[GpuStatic], root: str | os.PathLike[str] = "/"
) -> dict[int, tuple[GpuProcess, ...]]:
    """The processes holding memory on each AMD GPU (by index), from every readable pid."""
    by_bus: Mapping[str, GpuStatic] = {s.pci_bus_id: s for s in statics if s.pci_bus_id}
    out: dict[int, list[GpuProcess]] = {}
    proc = Path(root, "proc")
    try:
        pids = [int(p) for p in os.listdir(proc) if p.isdigit()]
    except OSError:
        return {}
    for pid in sorted(pids):
        clients = _clients(proc / str(pid) / "fd", proc / str(pid) / "fdinfo")
        for pdev, (vram, gtt) in memory_by_gpu(clients).items():
            static = by_bus.get(pdev)
            if static is None:
                continue
            out.setdefault(static.index, []).append(
                GpuProcess(pid=pid, gpu_index=static.index, used_memory=vram, gtt_memory=gtt)
            )
    return {i: tuple(ps) for i, ps in out.items()}
