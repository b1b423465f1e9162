"""The app's key bindings, each with an id so a config keymap can remap it, and the rules
for the keys that step through values."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from lltui.config import MAX_INTERVAL, MIN_INTERVAL

INTERVAL_STEPS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

BINDINGS: list[BindingType] = [
    # ctrl+q quits from anywhere; plain q only where no text field takes the key
    Binding("ctrl+q", "quit", "Quit", id="quit", priority=True),
    Binding("q", "quit", "Quit", id="quit-q", show=False),
    Binding("1", "switch_mode('monitor')", "Monitor", id="view-monitor", show=False),
    Binding("2", "switch_mode('topology')", "Topology", id="view-topology", show=False),
    Binding("3", "switch_mode('nccl')", "NCCL", id="view-nccl", show=False),
    Binding("4", "switch_mode('fit')", "Fit", id="view-fit", show=False),
    Binding("5", "switch_mode('launch')", "Launch", id="view-launch", show=False),
    Binding("v", "next_view", "View", id="view-next"),
    Binding("space,p", "toggle_pause", "Pause", id="pause"),
    Binding("minus", "interval(-1)", "Faster", id="interval-down"),
    Binding("plus,equals", "interval(1)", "Slower", id="interval-up"),
    Binding("s", "cycle_sort", "Sort", id="sort"),
    Binding("r", "reverse_sort", "Reverse", id="sort-reverse", show=False),
    Binding("w", "cycle_window", "Window", id="window"),
    Binding("g", "toggle_graphs", "Graphs", id="graphs"),
    Binding("l", "cycle_layout", "Layout", id="layout"),
    Binding("left_square_bracket,k", "select_gpu(-1)", "Prev GPU", id="gpu-prev", show=False),
    Binding("right_square_bracket,j", "select_gpu(1)", "Next GPU", id="gpu-next", show=False),
    Binding("enter,d", "gpu_detail", "Detail", id="gpu-detail"),
    Binding("question_mark,f1", "help", "Help", id="help"),
]

# offered only where the monitor (or its detail page) is shown
MONITOR_ACTIONS = frozenset(
    {
        "cycle_sort",
        "reverse_sort",
        "cycle_window",
        "toggle_graphs",
        "cycle_layout",
        "select_gpu",
        "gpu_detail",
    }
)


def step_interval(current: float, direction: int) -> float:
    """The next sampling interval up (``direction`` > 0) or down from ``current``."""
    if direction > 0:
        bigger = [s for s in INTERVAL_STEPS if s > current]
        return bigger[0] if bigger else MAX_INTERVAL
    smaller = [s for s in INTERVAL_STEPS if s < current]
    return smaller[-1] if smaller else MIN_INTERVAL


# the fleet view (``--source a,b``, ``--hosts FILE``): one row per host
FLEET_BINDINGS: list[BindingType] = [
    Binding("6", "switch_mode('fleet')", "Fleet", id="view-fleet", show=False),
]
