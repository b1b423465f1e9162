"""What a rig measured of itself (``lltui bench``): how much longer or shorter its GPUs and
its host took than the speed model predicted, per kind of work, and when. The speed model
scales its times by these (:mod:`lltui.core.speed.calibration`); ``lltui bench`` fits them
from llama-bench runs and stores them per rig (GPU models, driver, llama.cpp build)."""

from __future__ import annotations

from dataclasses import dataclass


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

    def with_scale(self, field: str, value: float) -> Calibration:
        """A copy with one scale (``gpu_decode`` ...) set."""
        return Calibration(
            rig=self.rig,
            date=self.date,
            gpu_decode=value if field == "gpu_decode" else self.gpu_decode,
            gpu_prefill=value if field == "gpu_prefill" else self.gpu_prefill,
            host_decode=value if field == "host_decode" else self.host_decode,
            host_prefill=value if field == "host_prefill" else self.host_prefill,
            points=self.points,
        )

    def note(self) -> str:
        return f"calibrated on this rig, {self.date}"
