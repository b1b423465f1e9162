"""Deterministic app construction for Pilot and snapshot tests."""

from __future__ import annotations

import threading

from lltui.app.app import LltuiApp, create_app
from lltui.config import Settings
from lltui.core.monitor.models import RigInfo, RigSample
from lltui.sources.gpu.sim import SimSource, StepClock


def sim_app(
    profile: str = "kaggle-2xt4",
    *,
    theme: str = "dark",
    interval: float = 1.0,
    start_polling: bool = False,
    source: object | None = None,
    clock: StepClock | None = None,
    readonly: bool = False,
) -> LltuiApp:
    settings = Settings(interval=interval, theme=theme, source=f"sim:{profile}", readonly=readonly)
    src = source or SimSource(profile, seed=0, clock=StepClock(step=1.0), start=0.0)
    return create_app(
        settings,
        source=src,  # type: ignore[arg-type]
        clock=clock or StepClock(1000.0, step=0.0),
        start_polling=start_polling,
    )


def sim_fleet_app(specs: list[str], view: str = "fleet") -> LltuiApp:
    """An app watching a fleet of simulated hosts (``sim:PROFILE`` each), polled fast."""
    from lltui.sources.gpu.fleet import Fleet, FleetFocus

    fleet = Fleet(specs, interval=0.05, make=lambda spec, i: SimSource(spec[4:], seed=i))
    source = FleetFocus(fleet)
    settings = Settings(interval=0.05, source=",".join(specs))
    return create_app(settings, source=source, info=source.open(), view=view, fleet=fleet)


def feed(app: LltuiApp, n: int) -> list[RigSample]:
    """Poll the app's source n times on this thread, as the poller would."""
    return app.poll_sync(n)


class HangingSource:
    """A source whose second poll blocks until released: a hung driver or dead remote."""

    name = "hanging"

    def __init__(self) -> None:
        self.inner = SimSource("kaggle-2xt4", seed=0, clock=StepClock(step=1.0), start=20.0)
        self.release = threading.Event()
        self.hanging = threading.Event()
        self.calls = 0

    def open(self) -> RigInfo:
        return self.inner.open()

    def poll(self) -> RigSample:
        self.calls += 1
        if self.calls >= 2:
            self.hanging.set()
            self.release.wait(30)
        return self.inner.poll()

    def close(self) -> None:
        self.release.set()


class RaisingSource:
    """A source whose polls raise after the first: a remote that went away."""

    name = "raising"

    def __init__(self) -> None:
        self.inner = SimSource("kaggle-2xt4", seed=0, clock=StepClock(step=1.0), start=20.0)
        self.calls = 0

    def open(self) -> RigInfo:
        return self.inner.open()

    def poll(self) -> RigSample:
        self.calls += 1
        if self.calls >= 2:
            raise ConnectionError("ssh: connect to host gpu-box port 22: Connection refused")
        return self.inner.poll()

    def close(self) -> None:
        pass


async def wait_for(predicate, timeout: float = 10.0, step: float = 0.02) -> None:
    """Let the app run until ``predicate()`` holds; fail the test after ``timeout`` seconds."""
    import asyncio

    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(step)
