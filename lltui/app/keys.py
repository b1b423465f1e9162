"""The app's key bindings, each with an id so a config keymap can remap it, and the rules
for the keys that step through values."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from lltui.config import MAX_INTERVAL, MIN_INTERVAL

INTERVAL_STEPS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

# the views in order: digits where no text field takes the key; F-keys from anywhere (a text
# field does not type them; they reach the app over SSH and tmux). Not alt+digit: terminals
# send it as ESC and the digit, which Textual reads as one Latin-1 character (alt+4 is "¢").
VIEW_KEYS: tuple[tuple[str, str], ...] = (
    ("monitor", "Monitor"),
    ("topology", "Topology"),
    ("nccl", "NCCL"),
    ("fit", "Fit"),
    ("launch", "Launch"),
)


def _view_binding(n: int, mode: str, label: str, namespace: str) -> Binding:
    """``n`` and F``n`` switch to ``mode``."""
    return Binding(f"{n},f{n}", f"{namespace}view('{mode}')", label, id=f"view-{mode}", show=False)


def view_bindings(namespace: str = "") -> list[BindingType]:
    """The view keys; ``namespace`` "app." where a screen above the views has them too."""
    return [
        _view_binding(n, mode, label, namespace)
        for n, (mode, label) in enumerate(VIEW_KEYS, start=1)
    ]


BINDINGS: list[BindingType] = [
    # ctrl+q quits from anywhere; plain q only where no text field takes the key
    Binding("ctrl+q", "quit", "Quit", id="quit", priority=True),
    Binding("q", "quit", "Quit", id="quit-q", show=False),
    *view_bindings(),
    Binding("v", "next_view", "View", id="view-next"),
    Binding("escape", "leave_field", "Leave field", id="leave-field", show=False),
    Binding("space,p", "toggle_pause", "Pause", id="pause"),
    Binding("minus", "interval(-1)", "Faster", id="interval-down"),
    Binding("plus,equals_sign", "interval(1)", "Slower", id="interval-up"),
    Binding("s", "cycle_sort", "Sort", id="sort"),
    Binding("r", "reverse_sort", "Reverse", id="sort-reverse", show=False),
    Binding("w", "cycle_window", "Window", id="window"),
    Binding("g", "toggle_graphs", "Graphs", id="graphs"),
    Binding("l", "cycle_layout", "Layout", id="layout"),
    Binding("left_square_bracket,k", "select_gpu(-1)", "Prev GPU", id="gpu-prev", show=False),
    Binding("right_square_bracket,j", "select_gpu(1)", "Next GPU", id="gpu-next", show=False),
    Binding("enter,d", "gpu_detail", "Detail", id="gpu-detail"),
    Binding("question_mark", "help", "Help", id="help"),
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


# the fleet view (``--source a,b``, ``--hosts FILE``): one row per host; its keys work as the
# other views' do (6, F6)
FLEET_VIEW: tuple[str, str] = ("fleet", "Fleet")


def fleet_bindings(namespace: str = "") -> list[BindingType]:
    mode, label = FLEET_VIEW
    return [_view_binding(len(VIEW_KEYS) + 1, mode, label, namespace)]


FLEET_BINDINGS: list[BindingType] = fleet_bindings()


def all_views() -> tuple[tuple[str, str], ...]:
    """(mode, label) of every view, in the order of their number keys."""
    return (*VIEW_KEYS, FLEET_VIEW)
