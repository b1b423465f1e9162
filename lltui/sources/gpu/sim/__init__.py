"""Simulated rigs: deterministic, seeded stand-ins for real GPUs, for demos, tests and
screenshots. See :mod:`lltui.sources.gpu.sim.source`; the rigs are in :mod:`.rigs`, what a rig is
(and its topology text) in :mod:`.profile`, the served model's phases and processes in
:mod:`.workload`, and how a GPU responds in :mod:`.physics`."""

from __future__ import annotations

from lltui.sources.gpu.sim.profile import cuda_order
from lltui.sources.gpu.sim.rigs import DEFAULT_PROFILE, PROFILES
from lltui.sources.gpu.sim.source import SimSource, StepClock
from lltui.sources.gpu.sim.workload import phase_at

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "SimSource",
    "StepClock",
    "cuda_order",
    "phase_at",
]
