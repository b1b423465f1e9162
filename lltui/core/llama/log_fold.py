"""A log shown to a person: a run of lines that say the same thing (timestamps aside), such
as an idle server's "all slots are idle" every second, is shown once, then how often it came."""

from __future__ import annotations

from lltui.core.llama.log_patterns import split_line
from lltui.core.llama.router_log import CHILD_LINE


class RepeatFolder:
    """Feed raw lines; get back the lines to show."""

    def __init__(self) -> None:
        self._last: str | None = None
        self._repeats = 0

    def feed(self, line: str) -> list[str]:
        child = CHILD_LINE.match(line)  # a router's model server: its port, then its line
        if child is not None:
            message = f"[{child.group('port')}] {split_line(child.group('rest')).message}"
        else:
            message = split_line(line).message
        if message == self._last:
            self._repeats += 1
            return []
        shown = self.flush()
        self._last = message
        return [*shown, line]

    def flush(self) -> list[str]:
        """The count of a run still open (at the end of a log, or before a pause)."""
        if not self._repeats:
            return []
        n, self._repeats = self._repeats, 0
        return [f"    (the line above {n} more time{'s' if n != 1 else ''})"]
