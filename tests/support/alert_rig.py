"""A replayed rig that raises every GPU alert kind and clears each again: a simulated rig's
samples, changed tick by tick where an alert is wanted, written as a real recording."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from lltui.core.monitor.models import GpuSample, RigInfo, RigSample
from lltui.core.monitor.xid import xid_event
from lltui.sources.gpu.replay import Recorder
from lltui.sources.gpu.sim import SimSource, StepClock

# thresholds short enough for a recording of a few ticks (1 s apart)
CONFIG = """\
[alerts]
power_cap_for_s = 2
throttle_for_s = 2
event_hold_s = 3
llama_not_ready_for_s = 0
"""

# kind -> (GPU index, first tick it is raised at, tick it is cleared at)
EXPECTED = {
    "gpu_temp": (0, 1, 4),
    "mem_temp": (1, 1, 4),
    "vram_full": (0, 5, 7),
    "power_cap": (1, 7, 10),  # over the limit from tick 5; raised once it held 2 s
    "throttle": (0, 10, 12),  # from tick 8, held 2 s
    "xid": (1, 12, 15),  # one event at 12, held 3 s
    "ecc": (0, 13, 16),  # new errors at 13, held 3 s
    "gpu_lost": (1, 18, 20),
}
TICKS = 22


def _gpu(g: GpuSample, tick: int) -> GpuSample:
    i = g.info.index
    changes: dict[str, object] = {"ecc_uncorrected": 0, "ecc_corrected": 0}
    if i == 0 and 1 <= tick <= 3:
        changes["temp_c"] = 92.0
    if i == 1 and 1 <= tick <= 3:
        changes["mem_temp_c"] = 96.0
    if i == 0 and 5 <= tick <= 6:
        total = g.info.memory_total
        changes |= {"memory_used": int(total * 0.995), "memory_free": int(total * 0.003)}
    if i == 1 and 5 <= tick <= 9:
        changes["power_w"] = g.power_limit_w
    if i == 0 and 8 <= tick <= 11:
        changes["throttle_reasons"] = ("hw thermal",)
    if i == 1 and tick == 12:
        changes |= {"xid_events": (xid_event(13, 1_767_225_612.0),), "xid": 13}
    if i == 0 and tick >= 13:
        changes["ecc_uncorrected"] = 2
    if i == 1 and 18 <= tick <= 19:
        return GpuSample(info=g.info, lost=True, error="GPU is lost (fell off the bus)")
    return replace(g, **changes)  # type: ignore[arg-type]


def alert_samples() -> tuple[RigInfo, list[RigSample]]:
    src = SimSource("kaggle-2xt4", seed=0, clock=StepClock(step=1.0), start=40.0)
    info = src.open()
    out = []
    for tick in range(TICKS):
        s = src.poll()
        out.append(replace(s, gpus=tuple(_gpu(g, tick) for g in s.gpus)))
    return info, out


def write_alert_recording(path: Path) -> list[RigSample]:
    info, samples = alert_samples()
    with Recorder(path, wall=lambda: 1_767_225_600.0) as rec:
        rec.start(info)
        for s in samples:
            rec.write(s)
    return samples
