"""Polls a source on its own thread, paced by itself, never overlapping a previous poll."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from lltui.core.monitor.models import GpuSource, RigSample
from lltui.core.periodic import Periodic
from lltui.core.text import error_text

SampleHook = Callable[[RigSample], object]
ErrorHook = Callable[[str], object]


class Poller:
    """One daemon thread: poll, hand the sample over, wait out the rest of the interval.

    A poll that hangs blocks only this thread; the UI sees its age grow and marks the data
    stale. The thread is a daemon so a hung driver call cannot keep lltui from exiting.
    ``limit`` stops after that many samples (screenshots and snapshot tests).
    """

    def __init__(
        self,
        source: GpuSource,
        on_sample: SampleHook,
        on_error: ErrorHook,
        interval: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        limit: int | None = None,
    ) -> None:
        self.source = source
        self._on_sample = on_sample
        self._on_error = on_error
        self._clock = clock
        self._limit = limit
        self._paused = False
        self._loop = Periodic(self._poll, interval, name="lltui-poller", pace=self._pace)
        self.polls = 0
        self.parks = 0  # times the thread stopped to wait while paused (or at its limit)
        self.in_flight_since: float | None = None  # clock() when the running poll began

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def interval(self) -> float:
        return self._loop.interval_s

    def start(self) -> None:
        self._loop.start()

    def _parked(self) -> bool:
        return self._paused or (self._limit is not None and self.polls >= self._limit)

    def _pace(self) -> float:
        if self._parked():
            self.parks += 1
            return math.inf  # until resumed or stopped
        return self._loop.interval_s

    def _poll(self) -> None:
        if self._parked():  # woken while paused (a new interval): nothing to do
            return
        self.in_flight_since = self._clock()
        try:
            sample = self.source.poll()
            # done before the sample is handed over: the view it is drawn in must not
            # see this poll as still running (a hang just ended would read as stale)
            self.in_flight_since = None
            if not self._loop.stopped:
                self._on_sample(sample)
        except Exception as exc:  # a source bug or a dead remote: report, keep polling
            self.in_flight_since = None
            if not self._loop.stopped:
                self._on_error(error_text(exc))
        finally:
            self.in_flight_since = None
            self.polls += 1

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._loop.wake()

    def set_interval(self, seconds: float) -> None:
        self._loop.interval_s = seconds
        self._loop.wake()

    def stop(self) -> None:
        self._loop.stop()

    def busy_for(self) -> float | None:
        """Seconds the current poll has run, None when idle."""
        since = self.in_flight_since
        return None if since is None else self._clock() - since
