"""The monitor's view preferences: the history window of its graphs, the process table's
order, the selected GPU, the layout. They outlive the screen (a fleet's host changes the
data, not how the user likes to see it); only the monitor's own actions change them."""

from __future__ import annotations

from dataclasses import dataclass

from lltui.app.monitor_layout import LAYOUT_MODES

WINDOWS_S: tuple[float, ...] = (60.0, 300.0, 900.0, 3600.0)
SORT_KEYS: tuple[str, ...] = ("gpu_mem", "sm", "cpu", "rss", "pid", "gpu", "time")


@dataclass
class MonitorPrefs:
    window_index: int = 0
    sort_index: int = 0
    sort_reverse: bool = False
    selected: int = 0  # position of the selected GPU in the latest sample's GPUs
    graphs: bool | None = None  # None: decided by the terminal size
    layout_index: int = 0  # in LAYOUT_MODES: auto, compact or cards

    @property
    def window_s(self) -> float:
        return WINDOWS_S[self.window_index]

    @property
    def layout_mode(self) -> str:
        return LAYOUT_MODES[self.layout_index]

    @property
    def sort_key(self) -> str:
        return SORT_KEYS[self.sort_index]

    def cycle_sort(self, keys: tuple[str, ...] = SORT_KEYS) -> None:
        """The next of ``keys`` (the columns the table shows) after the current one."""
        at = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_by(keys[(at + 1) % len(keys)])

    def fit_sort(self, keys: tuple[str, ...]) -> None:
        """Sorted by a column no longer shown (a narrower terminal): by the first of ``keys``."""
        if self.sort_key not in keys:
            self.sort_by(keys[0])

    def sort_by(self, key: str) -> None:
        self.sort_index = SORT_KEYS.index(key)

    def reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse

    def cycle_window(self) -> None:
        self.window_index = (self.window_index + 1) % len(WINDOWS_S)

    def set_window(self, index: int) -> None:
        self.window_index = index % len(WINDOWS_S)

    def cycle_layout(self) -> None:
        self.layout_index = (self.layout_index + 1) % len(LAYOUT_MODES)

    def step_selection(self, step: int, n: int) -> None:
        if n:
            self.selected = (self.selected + step) % n
