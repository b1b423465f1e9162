"""A llama-server's plan held against what its process holds on each GPU, sample after
sample: per GPU the bytes planned (its load log's buffers and lltui's prediction) beside the
bytes the GPU source says the process holds now, with a short history.

What the plan leaves out (the CUDA context, cuBLAS workspaces, the CUDA pool) is held apart:
the excess over the plan when it was first seen is the baseline, and memory that grows past
*that* by a margin for a window is drift (a late out-of-memory in the making). Memory held on
a GPU the plan gave nothing is a placement mismatch (CUDA and nvidia-smi numbering the GPUs
differently, a ``CUDA_VISIBLE_DEVICES`` that was not meant). Pure: frozen values in and out;
the alert tracker turns :func:`plan_alerts` into raised and cleared alerts."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.llamalog.models import is_host_buffer
from lltui.core.monitor.models import RigSample

HISTORY = 120  # samples kept per GPU (the monitor's interval: a few minutes)
# ggml-cuda's devices (CUDA, and ROCm/MUSA builds of the same backend)
_CUDA = re.compile(r"^(?:CUDA|ROCm|MUSA)(\d+)$")


@dataclass(frozen=True, slots=True)
class GpuPlanRow:
    """One GPU: planned bytes (None: the plan gave it nothing), what the process holds."""

    gpu_index: int  # the GPU source's (NVML) index
    device: str | None  # llama.cpp's name of it (CUDA0), where planned
    planned_bytes: int | None
    held_bytes: int | None  # None: the driver hides the process's memory
    baseline_excess: int | None = None  # held minus planned when first seen
    history: tuple[int, ...] = ()  # held bytes, the oldest first

    @property
    def growth_bytes(self) -> int | None:
        """How far past the plan (and its first excess) the process has grown."""
        if self.planned_bytes is None or self.held_bytes is None:
            return None
        return self.held_bytes - self.planned_bytes - (self.baseline_excess or 0)


@dataclass(frozen=True, slots=True)
class PlanReality:
    """One server's plan beside its process's memory at one sample."""

    server: str
    pid: int
    t: float
    rows: tuple[GpuPlanRow, ...]
    # every planned device found on a GPU the process holds memory on: where not (a device
    # lltui cannot number, CUDA_VISIBLE_DEVICES renumbering them), memory elsewhere is no
    # evidence of a misplacement
    mapped: bool = True


def gpu_of_device(name: str, sample: RigSample) -> int | None:
    """The GPU source's index of llama.cpp's ``CUDAn``: the GPU CUDA numbers n (CUDA orders
    by speed unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``), else the n-th GPU."""
    m = _CUDA.match(name)
    if m is None:
        return None
    n = int(m.group(1))
    for g in sample.gpus:
        if g.info.cuda_index == n:
            return g.info.index
    known = [g for g in sample.gpus if g.info.cuda_index is not None]
    if not known and n < len(sample.gpus):
        return sample.gpus[n].info.index
    return None


class PlanWatch:
    """One server's plan against its process, kept sample after sample."""

    def __init__(self, server: str, pid: int, planned: Mapping[str, int]) -> None:
        self.server, self.pid = server, pid
        # llama.cpp device name -> bytes, for the GPUs of this host only (a plan's CPU or
        # RPC share is no GPU memory here, and cannot be numbered as one)
        self._planned = {
            k: v for k, v in planned.items() if not (is_host_buffer(k) or k.startswith("RPC"))
        }
        self._baseline: dict[int, int] = {}
        self._history: dict[int, deque[int]] = {}

    def fold(self, sample: RigSample) -> PlanReality:
        planned: dict[int, tuple[str, int]] = {}
        unmapped = False
        for name, n in self._planned.items():
            index = gpu_of_device(name, sample)
            if index is not None:
                planned[index] = (name, n)
            else:
                unmapped = True
        rows = []
        for g in sample.gpus:
            mine = [p for p in g.processes if p.pid == self.pid]
            plan = planned.get(g.info.index)
            if not mine and plan is None:
                continue
            known = [p.used_memory for p in mine if p.used_memory is not None]
            held = sum(known) if known else (0 if not mine else None)
            hist = self._history.setdefault(g.info.index, deque(maxlen=HISTORY))
            if held is not None:
                hist.append(held)
                if plan is not None and held > 0:
                    self._baseline.setdefault(g.info.index, max(0, held - plan[1]))
            rows.append(
                GpuPlanRow(
                    gpu_index=g.info.index,
                    device=plan[0] if plan else None,
                    planned_bytes=plan[1] if plan else None,
                    held_bytes=held,
                    baseline_excess=self._baseline.get(g.info.index),
                    history=tuple(hist),
                )
            )
        empty = any(r.planned_bytes and r.held_bytes == 0 for r in rows)
        return PlanReality(self.server, self.pid, sample.t, tuple(rows), not (unmapped or empty))


@dataclass(frozen=True, slots=True)
class PlanFinding:
    """A condition of one GPU against a plan, before the tracker times it."""

    kind: str  # plan_growth, plan_placement
    gpu_index: int
    message: str


def plan_findings(reality: PlanReality, margin_bytes: int) -> list[PlanFinding]:
    """What is wrong now: a GPU grown past its plan by more than ``margin_bytes``, a GPU the
    plan gave nothing that the process holds memory on."""
    out = []
    mib = 1024 * 1024
    for row in reality.rows:
        if row.planned_bytes is None:
            if row.held_bytes and reality.mapped:
                out.append(
                    PlanFinding(
                        "plan_placement",
                        row.gpu_index,
                        f"pid {reality.pid} holds {row.held_bytes / mib:.0f} MiB here; its plan "
                        "put nothing on this GPU",
                    )
                )
            continue
        grown = row.growth_bytes
        if grown is not None and grown > margin_bytes:
            out.append(
                PlanFinding(
                    "plan_growth",
                    row.gpu_index,
                    f"pid {reality.pid} holds {(row.held_bytes or 0) / mib:.0f} MiB, planned "
                    f"{row.planned_bytes / mib:.0f} MiB: {grown / mib:.0f} MiB more than when "
                    f"first seen (margin {margin_bytes / mib:.0f} MiB)",
                )
            )
    return out


def plan_line(reality: PlanReality) -> str:
    """Per GPU: held of planned MiB, in one line (``GPU1 300/- MiB``: not planned)."""
    mib = 1024 * 1024

    def cell(r: GpuPlanRow) -> str:
        held = "?" if r.held_bytes is None else f"{r.held_bytes / mib:.0f}"
        plan = "-" if r.planned_bytes is None else f"{r.planned_bytes / mib:.0f}"
        return f"GPU{r.gpu_index} {held}/{plan} MiB"

    return "held/planned: " + ", ".join(cell(r) for r in reality.rows)


def plan_to_json(reality: PlanReality) -> dict[str, Any]:
    """A server's plan per GPU beside what its process holds there (bytes)."""
    return {
        "pid": reality.pid,
        "numbered": reality.mapped,
        "gpus": [
            {
                "gpu": r.gpu_index,
                **fields_of(r, "device planned_bytes held_bytes growth_bytes"),
            }
            for r in reality.rows
        ],
    }
