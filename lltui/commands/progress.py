"""A progress line for work that takes more than a second: on a terminal only, redrawn in
place on stderr a few times a second, erased when the work ends (so what a command prints
afterwards, and its one-line errors, stay as they are). Not on a pipe or a file: scripts and
logs see nothing of it.

The worker only sets numbers (``done``, ``total``, ``phase``); a ticker thread draws them.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from lltui.core.periodic import Periodic
from lltui.core.text import printable

AFTER_S = 1.0  # no line for work shorter than this
EVERY_S = 0.25


def _terminal_stderr() -> TextIO:
    """The process's stderr itself, under any wrapper that escapes what commands print: the
    line is drawn with a carriage return and erased with an escape sequence of ours."""
    err = sys.stderr
    inner = getattr(err, "terminal", None)
    return inner if inner is not None else err


class Progress:
    """``with Progress("reading big.log", total=size) as p: ... p.done = n``."""

    def __init__(
        self,
        label: str,
        *,
        total: int | None = None,
        unit: str = "",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        after_s: float = AFTER_S,
        ticker: bool = True,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit  # "MiB": done and total are bytes, shown in MiB
        self.done = 0
        self.phase = ""
        self._stream = stream if stream is not None else _terminal_stderr()
        self._clock = clock
        self._start = clock()
        self._after = after_s
        self._shown = 0  # width of the line on screen, 0 when none is
        self._lock = threading.Lock()
        self._ticker: Periodic | None = None
        try:
            self._tty = bool(self._stream.isatty())
        except (AttributeError, ValueError, OSError):
            self._tty = False
        if ticker and self._tty:
            self._ticker = Periodic(self.tick, EVERY_S, name="lltui-progress", delay_s=EVERY_S)
            self._ticker.start()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def text(self) -> str:
        elapsed = self._clock() - self._start
        if self.unit == "MiB":
            done = f"{self.done / 2**20:.0f}"
            total = f"{self.total / 2**20:.0f}" if self.total else None
        else:
            done, total = str(self.done), (str(self.total) if self.total else None)
        unit = f" {self.unit}" if self.unit else ""
        amount = f"{done}/{total}{unit}" if total else f"{done}{unit}"
        if self.total:
            amount += f" ({min(100, 100 * self.done // max(self.total, 1))}%)"
        amount = f"{amount}, " if self.done or self.total else ""  # no count yet: time alone
        phase = f" {self.phase}" if self.phase else ""
        line = f"lltui: {self.label}{phase}: {amount}{elapsed:.0f} s"
        return printable(line, one_line=True)

    def step(self, done: int, total: int) -> None:
        """A callback for work that counts its steps (``progress=p.step``)."""
        self.done, self.total = done, total

    def tick(self) -> bool:
        """Draw the line if the work has gone on past ``after_s``; whether it drew."""
        if not self._tty or self._clock() - self._start < self._after:
            return False
        with self._lock:
            if self._ticker is not None and self._ticker.stopped:
                return False
            line = self.text()
            pad = " " * max(0, self._shown - len(line))
            try:
                self._stream.write(f"\r{line}{pad}")
                self._stream.flush()
            except (OSError, ValueError):
                return False
            self._shown = len(line)
        return True

    def close(self) -> None:
        """Stop drawing and erase the line, if one was drawn."""
        if self._ticker is not None:
            self._ticker.stop(join_s=1.0)
        with self._lock:
            if self._shown:
                try:
                    self._stream.write("\r\x1b[K")
                    self._stream.flush()
                except (OSError, ValueError):
                    pass
                self._shown = 0
