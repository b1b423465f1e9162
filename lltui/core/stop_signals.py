"""SIGTERM and SIGHUP (a dropped SSH session) as an exception while a block runs, or as the
app's own way out while its loop runs: what the block started is then stopped on the way out
(their default ends lltui at once and leaves it running). The one place lltui handles them."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator

# The same signal again within this many seconds of the first is one ask, not a second (GNU
# timeout signals its child, then the child's whole group: two SIGTERMs at once).
SIGNAL_BURST_S = 0.5


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP raised as Ctrl-C is (what stops on Ctrl-C stops on them too), with
    the exit the shell gives a process that signal ended (128 + its number: 143 for SIGTERM,
    where Ctrl-C's is 130)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.exit_code = signal_exit_code(signum)


def signal_exit_code(signum: int) -> int:
    """The exit the shell gives a process ``signum`` ended (130 for SIGINT, 143 for SIGTERM)."""
    return 128 + signum


@contextlib.contextmanager
def _handled(handler: Callable[[int, object], None]) -> Iterator[None]:
    """SIGTERM and SIGHUP go to ``handler`` while the block runs; the handlers before are put
    back after. Only the main thread can set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, before in previous.items():  # a caller in the same process keeps its own
            signal.signal(s, before)


def raised_on_stop(
    make: Callable[[int], BaseException] = StopSignal,
) -> contextlib.AbstractContextManager[None]:
    """While the block runs, SIGTERM and SIGHUP raise ``make(signum)`` (Ctrl-C's
    KeyboardInterrupt unless told otherwise)."""

    def handler(signum: int, _frame: object) -> None:
        raise make(signum)

    return _handled(handler)


def loop_stops_on_signal(stop: Callable[[], object]) -> contextlib.AbstractContextManager[None]:
    """While the block runs an asyncio loop (the app's), SIGTERM and SIGHUP call ``stop`` on
    it, to end it the way it ends when asked; before the loop runs (or after), ``stop`` is
    called at once, from the handler: it must then only mark that a stop was asked."""

    def handler(_signum: int, _frame: object) -> None:
        import asyncio  # (loaded by then: the loop runs on it)

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop running (yet, or any more)
            stop()
            return
        loop.call_soon_threadsafe(stop)

    return _handled(handler)
