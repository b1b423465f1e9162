"""UI cost per tick: the UI-thread work of rendering one new sample on 2, 8 and 16 simulated
GPUs. Each tick is measured against an idle frame (the same wait with nothing new) taken in
the same run, so the harness's own overhead is shown and subtracted.

    .venv/bin/python bench/tick.py [--ticks N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

from lltui.app.app import create_app
from lltui.config import Settings
from lltui.sources.gpu.sim import SimSource, StepClock

PROFILES = (("kaggle-2xt4", 2), ("8xh100-sxm", 8), ("16xv100-dgx2", 16))


async def measure(profile: str, ticks: int, size: tuple[int, int]) -> tuple[float, float, float]:
    settings = Settings(interval=1.0, source=f"sim:{profile}")
    source = SimSource(profile, seed=0, clock=StepClock(), start=0.0)
    app = create_app(settings, source=source, start_polling=False)
    poll_ms, render_ms, idle_ms = [], [], []
    async with app.run_test(size=size) as pilot:
        app.poll_sync(30)
        await pilot.pause()
        for _ in range(ticks):
            t0 = time.perf_counter()
            sample = source.poll()
            t1 = time.perf_counter()
            app.model.apply(sample, 0.0)
            app.render_model()
            await pilot.pause()  # let Textual lay out and paint the frame
            t2 = time.perf_counter()
            await pilot.pause()
            t3 = time.perf_counter()
            poll_ms.append((t1 - t0) * 1000)
            render_ms.append((t2 - t1) * 1000)
            idle_ms.append((t3 - t2) * 1000)
    return (
        statistics.median(poll_ms),
        statistics.median(render_ms),
        statistics.median(idle_ms),
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ticks", type=int, default=40)
    args = parser.parse_args()
    for size in ((80, 24), (160, 50)):
        for profile, n in PROFILES:
            poll, render, idle = asyncio.run(measure(profile, args.ticks, size))
            cost = max(0.0, render - idle)
            print(
                f"{n:>2} GPUs {size[0]}x{size[1]}: UI {cost:6.2f} ms/tick"
                f" ({cost / n:.2f} ms/GPU; frame {render:.1f} ms vs idle frame {idle:.1f} ms,"
                f" ratio {render / idle:.1f}), sim poll {poll:.2f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
