"""A terminal driver whose input thread sleeps until there is input.

Textual's Linux driver reads keys on a thread that wakes ten times a second whether or not a
key came, for two reasons: to notice that it should stop, and to let a lone ESC through once
no sequence follows it (``ESCDELAY``). An idle monitor pays for those wake-ups all day (about
1.4 ms of CPU a second here, a third of a bare Textual app's idle cost). This driver blocks in
``select`` with no timeout instead: stopping writes a byte to a pipe the thread also waits on,
and a timeout is set only while a key read in the last ``ESCDELAY`` may still be waiting.
Everything else (modes, mouse, resize, output) is Textual's own driver, unchanged.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import threading
import time
from codecs import getincrementaldecoder
from typing import Any

from textual import constants
from textual._parser import ParseError
from textual._xterm_parser import XTermParser
from textual.app import App
from textual.driver import Driver
from textual.drivers.linux_driver import LinuxDriver

# after the ESC delay, a little more: the parser times its delay from its own clock reading
SLACK_S = 0.005


class InputWaits:
    """How long the input thread may sleep: for ever, unless a key read less than
    ``escape_delay`` ago may be a lone ESC the parser holds until its delay runs out."""

    def __init__(self, escape_delay: float) -> None:
        self.escape_delay = escape_delay
        self._until: float | None = None

    def timeout(self, now: float) -> float | None:
        """Seconds to wait in ``select``; None to wait for input or a stop."""
        return None if self._until is None else max(0.0, self._until - now)

    def after(self, got_input: bool, now: float) -> None:
        """Note one wake-up: with input (the parser may now hold an ESC) or without."""
        if got_input:
            self._until = now + self.escape_delay + SLACK_S
        elif self._until is not None and now >= self._until:
            self._until = None


class WakingEvent(threading.Event):
    """A ``threading.Event`` whose ``set`` also makes a pipe readable, so a thread asleep in
    ``select`` on :attr:`fileno` wakes at once."""

    def __init__(self) -> None:
        super().__init__()
        self.fileno, self._write = os.pipe()
        os.set_blocking(self.fileno, False)
        os.set_blocking(self._write, False)

    def set(self) -> None:
        super().set()
        if self._write >= 0:  # not after close: the number may be another file's by then
            with contextlib.suppress(OSError):  # full: already readable
                os.write(self._write, b"\0")

    def drain(self) -> None:
        """Empty the pipe, so the next ``select`` sleeps again."""
        with contextlib.suppress(OSError):
            while os.read(self.fileno, 512):
                pass

    def close(self) -> None:
        fds, self._write = (self.fileno, self._write), -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.fileno = -1


class QuietLinuxDriver(LinuxDriver):
    """Textual's Linux driver with an input thread that sleeps while no key comes."""

    def __init__(
        self,
        app: App[Any],
        *,
        debug: bool = False,
        mouse: bool = True,
        size: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(app, debug=debug, mouse=mouse, size=size)
        self.exit_event = WakingEvent()  # Textual sets it to stop the input thread
        self.input_wakes = 0  # times the input thread woke up (tests and benches read it)

    def run_input_thread(self) -> None:
        """Wait for input (or the stop) and dispatch the events read."""
        stop = self.exit_event
        assert isinstance(stop, WakingEvent)
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        selector.register(stop.fileno, selectors.EVENT_READ)
        parser = XTermParser(self._debug)
        decode = getincrementaldecoder("utf-8")().decode
        waits = InputWaits(constants.ESCAPE_DELAY)
        reading = True
        try:
            while not stop.is_set():
                events = selector.select(waits.timeout(time.monotonic()))
                self.input_wakes += 1
                got_input = False
                for key, _mask in events:
                    if key.fd == stop.fileno:
                        stop.drain()
                        continue
                    data = os.read(self.fileno, 4096)
                    if not data:  # end of a piped stdin: it would read as ready for ever
                        selector.unregister(self.fileno)
                        reading = False
                        continue
                    got_input = True
                    text = decode(data)
                    if not text:  # the first bytes of a character (the parser reads "" as
                        continue  # the end of input): the decoder keeps them for the rest
                    for event in parser.feed(text):
                        self.process_message(event)
                for event in parser.tick():
                    self.process_message(event)
                waits.after(got_input, time.monotonic())
            if reading:  # what was typed up to the stop, as Textual's driver does
                for key, _mask in selector.select(0.1):
                    if key.fd == self.fileno:
                        text = decode(os.read(self.fileno, 4096), final=True)
                        for event in parser.feed(text) if text else ():
                            self.process_message(event)
        finally:
            selector.close()
            with contextlib.suppress(EOFError, ParseError):
                for _event in parser.feed(""):
                    pass

    def close(self) -> None:
        super().close()
        stop = self.exit_event
        if isinstance(stop, WakingEvent):
            stop.close()


def quiet(driver_class: type[Driver]) -> type[Driver]:
    """The quiet driver where Textual would use its Linux driver; any other (a web driver,
    one named by ``TEXTUAL_DRIVER``, a test's headless one) as it is."""
    return QuietLinuxDriver if driver_class is LinuxDriver else driver_class
