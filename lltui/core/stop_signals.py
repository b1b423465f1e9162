"""SIGTERM and SIGHUP (a dropped SSH session) as an exception while a block runs: what the
block started is then stopped on the way out (their default ends lltui at once and leaves
it running). The one place lltui turns them into an exception."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


def _interrupt(_signum: int) -> BaseException:
    return KeyboardInterrupt()


@contextlib.contextmanager
def raised_on_stop(make: Callable[[int], BaseException] = _interrupt) -> Iterator[None]:
    """While the block runs, SIGTERM and SIGHUP raise ``make(signum)`` (Ctrl-C's
    KeyboardInterrupt unless told otherwise); the handlers before are put back after. Only
    the main thread can set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise make(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, before in previous.items():  # a caller in the same process keeps its own
            signal.signal(s, before)


@contextlib.contextmanager
def loop_stops_on_signal(stop: Callable[[], object]) -> Iterator[None]:
    """While the block runs an asyncio loop (the app's), SIGTERM and SIGHUP call ``stop`` on
    it, to end it the way it ends when asked; before the loop runs (or after), ``stop`` is
    called at once, from the handler: it must then only mark that a stop was asked."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: object) -> None:
        import asyncio  # (loaded by then: the loop runs on it)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop running (yet, or any more)
            stop()
            return
        loop.call_soon_threadsafe(stop)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, before in previous.items():
            signal.signal(s, before)
