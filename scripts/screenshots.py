"""Regenerate the README screenshots in screenshots/ from simulated rigs.

    .venv/bin/python scripts/screenshots.py

Each shot runs the app headless over a seeded simulated rig with a stepping clock, takes
60 samples so the sparklines have history, and saves an SVG.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from lltui.app.app import create_app
from lltui.config import Settings
from lltui.core.monitor.models import GpuSource
from lltui.sources.gpu.sim import SimSource, StepClock

OUT = Path(__file__).resolve().parents[1] / "screenshots"
SAMPLES = 60

SHOTS: tuple[tuple[str, str, tuple[int, int], str, str], ...] = (
    # (file stem, profile, size, theme, view)
    ("monitor-kaggle-2xt4-80x24", "kaggle-2xt4", (80, 24), "dark", "monitor"),
    ("monitor-kaggle-2xt4-160x50", "kaggle-2xt4", (160, 50), "dark", "monitor"),
    ("monitor-8xh100-sxm-80x24", "8xh100-sxm", (80, 24), "dark", "monitor"),
    ("monitor-8xh100-sxm-160x50", "8xh100-sxm", (160, 50), "dark", "monitor"),
    ("monitor-16xv100-dgx2-80x24", "16xv100-dgx2", (80, 24), "dark", "monitor"),
    ("monitor-2x3090-nvlink-light", "2x3090-nvlink", (120, 40), "light", "monitor"),
    (
        "monitor-mixed-4090-3090-high-contrast",
        "mixed-4090-3090",
        (120, 40),
        "high-contrast",
        "monitor",
    ),
    ("topology-8xh100-sxm", "8xh100-sxm", (120, 45), "dark", "topology"),
    ("nccl-2x3090-nvlink", "2x3090-nvlink", (120, 30), "dark", "nccl"),
)


async def shoot(stem: str, profile: str, size: tuple[int, int], theme: str, view: str) -> Path:
    settings = Settings(interval=1.0, theme=theme, source=f"sim:{profile}")
    source = SimSource(profile, seed=0, clock=StepClock(), start=0.0)
    app = create_app(settings, source=source, start_polling=False, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        app.poll_sync(SAMPLES)
        await pilot.pause()
        if view != "monitor":
            await app.switch_mode(view)
            for _ in range(1000):  # what the view reads once, off the UI thread
                if not app.view_loading():
                    break
                await asyncio.sleep(0.01)
            await settled(pilot)
        app.save_screenshot(filename=f"{stem}.svg", path=str(OUT))
    return OUT / f"{stem}.svg"


async def settled(pilot: Any) -> None:
    """Wait until two frames in a row are the same: a view that has just loaded may lay out
    again (a scroll bar that comes or goes wraps its text at another width)."""
    app = pilot.app
    before = app.export_screenshot()
    for _ in range(50):
        await pilot.pause()
        now = app.export_screenshot()
        if now == before:
            return
        before = now


# the fleet view: simulated hosts side by side, and one ssh host whose name does not resolve
FLEET_SHOTS: tuple[tuple[str, tuple[str, ...], tuple[int, int]], ...] = (
    (
        "fleet-120x30",
        (
            "sim:8xh100-sxm",
            "sim:16xv100-dgx2",
            "sim:kaggle-2xt4",
            "sim:4xl4",
            "sim:mixed-4090-3090",
            "smi:gpu9.invalid",
        ),
        (120, 30),
    ),
    (
        "fleet-80x24",
        ("sim:8xh100-sxm", "sim:kaggle-2xt4", "sim:4xl4", "smi:gpu9.invalid"),
        (80, 24),
    ),
)


async def shoot_fleet(stem: str, specs: tuple[str, ...], size: tuple[int, int]) -> Path:
    from lltui.app.app import LltuiApp
    from lltui.sources.gpu.fleet import Fleet, FleetFocus, make_host_source

    def make(spec: str, index: int) -> GpuSource:
        if spec.startswith("sim:"):
            return SimSource(spec[4:], seed=index, clock=StepClock(), start=0.0)
        return make_host_source(spec, timeout=5.0)

    fleet = Fleet(list(specs), interval=1.0, make=make, clock=lambda: 0.0)
    settings = Settings(interval=1.0, theme="dark", source=",".join(specs))
    source = FleetFocus(fleet)
    app = LltuiApp(source, source.open(), settings, start_polling=False, view="fleet", fleet=fleet)
    for _ in range(SAMPLES // 6):
        fleet.poll_once(deadline_s=10.0)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.save_screenshot(filename=f"{stem}.svg", path=str(OUT))
    fleet.close()
    return OUT / f"{stem}.svg"


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for shot in SHOTS:
        print(asyncio.run(shoot(*shot)))
    for stem, specs, size in FLEET_SHOTS:
        print(asyncio.run(shoot_fleet(stem, specs, size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
