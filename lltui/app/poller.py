"""Polls a source on its own thread, paced by itself, never overlapping a previous poll."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from lltui.core.monitor.models import GpuSource, RigSample
from lltui.core.text import error_text

SampleHook = Callable[[RigSample, float], object]
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
        self.interval = interval
        self._clock = clock
        self._limit = limit
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._paused = False
        self._thread: threading.Thread | None = None
        self.polls = 0
        self.parks = 0  # times the thread stopped to wait while paused (or at its limit)
        self.in_flight_since: float | None = None  # clock() when the running poll began

    @property
    def paused(self) -> bool:
        return self._paused

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lltui-poller", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            if self._paused or (self._limit is not None and self.polls >= self._limit):
                self.parks += 1
                self._wake.wait()
                self._wake.clear()
                continue
            started = time.monotonic()
            self.in_flight_since = self._clock()
            try:
                sample = self.source.poll()
                # done before the sample is handed over: the view it is drawn in must not
                # see this poll as still running (a hang just ended would read as stale)
                self.in_flight_since = None
                if not self._stopped.is_set():
                    self._on_sample(sample, time.monotonic() - started)
            except Exception as exc:  # a source bug or a dead remote: report, keep polling
                self.in_flight_since = None
                if not self._stopped.is_set():
                    self._on_error(error_text(exc))
            finally:
                self.in_flight_since = None
                self.polls += 1
            rest = self.interval - (time.monotonic() - started)
            if rest > 0:
                self._wake.wait(rest)
            self._wake.clear()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False
        self._wake.set()

    def set_interval(self, seconds: float) -> None:
        self.interval = seconds
        self._wake.set()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()

    def busy_for(self) -> float | None:
        """Seconds the current poll has run, None when idle."""
        since = self.in_flight_since
        return None if since is None else self._clock() - since
