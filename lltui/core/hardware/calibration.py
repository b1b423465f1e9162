"""What a rig measured of itself (``lltui bench``): how much longer or shorter its GPUs and
its host took than the speed model predicted, per kind of work, and when. The speed model
scales its times by these (:mod:`lltui.core.speed.calibration`); ``lltui bench`` fits them
from llama-bench runs (and a launch from served requests, guarded) and stores them per rig
(GPU models, driver, llama.cpp build)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lltui.core.text import counted


@dataclass(frozen=True, slots=True)
class Calibration:
    """Measured over predicted time, per kind of work (1.0: as predicted; 1.25: took a
    quarter longer). ``rig``: what it was measured on; ``date``: YYYY-MM-DD."""

    rig: str
    date: str
    gpu_decode: float = 1.0
    gpu_prefill: float = 1.0
    host_decode: float = 1.0
    host_prefill: float = 1.0
    points: int = 0  # measurements behind it
    held: int = 0  # served requests kept but not counted until several agree
    copy: float = 1.0  # host memory copied across the link (host experts, -nkvo's KV)
    reduce: float = 1.0  # -sm tensor's all-reduces and graph cuts

    def with_scale(self, field: str, value: float) -> Calibration:
        """A copy with one scale (``gpu_decode`` ...) set."""
        changes: dict[str, Any] = {field: value}
        return replace(self, **changes)

    def scales(self, gpu: bool) -> tuple[float, float]:
        """(decode, prompt) scales of a GPU's own work or the host's."""
        if gpu:
            return self.gpu_decode, self.gpu_prefill
        return self.host_decode, self.host_prefill

    def note(self) -> str:
        """What a prediction that uses it says: ``calibrated on this rig from 5 points,
        2026-01-02`` (the newest point that counts)."""
        points = counted(self.points, "point")
        return f"calibrated on this rig from {points}, {self.date}"
