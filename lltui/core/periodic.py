"""A step run again and again on a thread until stopped: the one periodic loop.

Pollers, the exporter's samplers, a progress line, ``lltui watch``'s rounds: each is a step
run every so often. :class:`Periodic` runs one: the next run starts an interval after the
previous one *started* (at once after one that overran), never while it still runs; a
``pace`` may say how long instead (a retry's backoff, ``math.inf`` to park until woken);
:meth:`Periodic.wake` starts the next run now; :meth:`Periodic.stop` ends the loop after the
run in progress.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class Periodic:
    """``step`` every ``interval_s`` seconds (first after ``delay_s``; ``pace()``, when
    given, says each time how long), on a daemon thread (:meth:`start`) or on the caller's
    (:meth:`run`)."""

    def __init__(
        self,
        step: Callable[[], object],
        interval_s: float,
        *,
        name: str = "lltui-periodic",
        delay_s: float = 0.0,
        pace: Callable[[], float] | None = None,
    ) -> None:
        self.step = step
        self.interval_s = interval_s
        self.pace = pace
        self.name = name
        self._delay = delay_s
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def start(self) -> None:
        """Run the loop on a daemon thread of its own (a step that hangs cannot keep lltui
        from exiting)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
            self._thread.start()

    def run(self) -> None:
        """Run the loop on this thread until :meth:`stop` (which a step may call)."""
        if self._delay > 0:
            self._wait(self._delay)
        while not self._stopped.is_set():
            started = time.monotonic()
            self.step()
            if self._stopped.is_set():
                return
            rest = self.interval_s if self.pace is None else self.pace()
            self._wait(rest - (time.monotonic() - started) if math.isfinite(rest) else None)

    def _wait(self, seconds: float | None) -> None:
        if seconds is None or seconds > 0:
            self._wake.wait(seconds)
        self._wake.clear()

    def wake(self) -> None:
        """Start the next run now (or as soon as the one in progress ends)."""
        self._wake.set()

    def stop(self, join_s: float | None = None) -> None:
        """End the loop after the run in progress; with ``join_s``, wait that long for it."""
        self._stopped.set()
        self._wake.set()
        thread = self._thread
        if join_s is not None and thread is not None and thread is not threading.current_thread():
            thread.join(join_s)
