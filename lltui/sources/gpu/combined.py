"""One rig from several sources on the same machine: a host with NVIDIA and AMD GPUs shows
them all in one monitor, one ``gpus --json`` and one exporter.

GPUs are numbered in order, each source's after the one before (NVIDIA first, as ``auto``
opens them); a GPU keeps its vendor's own facts (its CUDA index, its gfx target). A part
that fails on a poll shows its GPUs lost with the one-line reason and the rig's error says
which part; the other parts keep updating.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from lltui.core.monitor.models import (
    GpuSample,
    GpuSource,
    GpuStatic,
    HostSample,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.text import error_text
from lltui.sources.gpu.base import SequenceCounter, mono_clock, wall_clock


def _renumber(statics: Sequence[GpuStatic], offset: int) -> tuple[GpuStatic, ...]:
    return tuple(replace(s, index=offset + n) for n, s in enumerate(statics))


class CombinedSource:
    """Several opened-together sources as one rig (``nvml+amd``)."""

    def __init__(self, parts: Sequence[GpuSource], opened: Sequence[RigInfo] = ()) -> None:
        """``opened``: the RigInfo each part already answered (parts opened by ``auto``
        are not opened twice)."""
        if not parts:
            raise ValueError("a combined source needs at least one part")
        self.parts = list(parts)
        self.name = "+".join(p.name for p in self.parts)
        self._infos: list[RigInfo] = list(opened)
        self._offsets: list[int] = []
        self._info: RigInfo | None = None
        self._seq = SequenceCounter()

    def _merge_info(self, infos: Sequence[RigInfo]) -> RigInfo:
        statics: list[GpuStatic] = []
        self._offsets = []
        for info in infos:
            self._offsets.append(len(statics))
            statics += _renumber(info.gpus, len(statics))
        first = infos[0]
        drivers = [i.driver_version for i in infos if i.driver_version]
        return RigInfo(
            source=self.name,
            driver_version=" / ".join(dict.fromkeys(drivers)) or None,
            cuda_version=next((i.cuda_version for i in infos if i.cuda_version), None),
            nvml_version=first.nvml_version,
            rocm_version=next((i.rocm_version for i in infos if i.rocm_version), None),
            hostname=first.hostname,
            gpus=tuple(statics),
            hints=tuple(h for i in infos for h in i.hints),
        )

    def open(self) -> RigInfo:
        """Opens every part not opened yet; SourceUnavailable when any part cannot run:
        ``auto`` only combines parts that opened."""
        if len(self._infos) != len(self.parts):
            self._infos = [p.open() for p in self.parts]
        self._info = self._merge_info(self._infos)
        return self._info

    def _part(self, n: int) -> tuple[list[GpuSample], HostSample | None, str | None]:
        part, offset = self.parts[n], self._offsets[n]
        try:
            sample = part.poll()
        except Exception as exc:  # one part failing must not stop the others
            why = error_text(exc) if not isinstance(exc, SourceUnavailable) else str(exc)
            lost = [
                GpuSample(info=s, lost=True, error=why)
                for s in _renumber(self._infos[n].gpus, offset)
            ]
            return lost, None, f"{part.name}: {why}"
        if sample.info.gpus != self._infos[n].gpus:  # a part learnt a GPU: renumber all
            self._infos[n] = sample.info
            self._info = self._merge_info(self._infos)
            offset = self._offsets[n]
        gpus = []
        for k, g in enumerate(sample.gpus):
            static = replace(g.info, index=offset + k)
            procs = tuple(replace(p, gpu_index=static.index) for p in g.processes)
            gpus.append(replace(g, info=static, processes=procs))
        return gpus, sample.host, (f"{part.name}: {sample.error}" if sample.error else None)

    def poll(self) -> RigSample:
        if self._info is None:
            self.open()
        gpus: list[GpuSample] = []
        host: HostSample | None = None
        errors = []
        for n in range(len(self.parts)):
            part_gpus, part_host, error = self._part(n)
            gpus += part_gpus
            host = host or part_host
            if error:
                errors.append(error)
        assert self._info is not None
        return RigSample(
            seq=self._seq.next(),
            t=mono_clock(),
            wall=wall_clock(),
            info=self._info,
            gpus=tuple(gpus),
            host=host or HostSample(),
            error="; ".join(errors) or None,
        )

    def close(self) -> None:
        for part in self.parts:
            part.close()
