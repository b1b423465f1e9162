"""The app's own key bindings (views, sampling, help), each with an id so a config keymap can
remap it, and the rules for the keys that step through values. Each view's own keys are on
its screen."""

from __future__ import annotations

from textual.binding import Binding, BindingType

from lltui.app.views import VIEWS
from lltui.config import MIN_INTERVAL

INTERVAL_STEPS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)


# The views' keys: digits where no text field takes the key; F-keys from anywhere (a text
# field does not type them; they reach the app over SSH and tmux). Not alt+digit: terminals
# send it as ESC and the digit, which Textual reads as one Latin-1 character (alt+4 is "¢").
# F1 is help, as in most terminal programs, so the first view's F-key is the one after the
# last view's (F7): from a form's field, where its digit is typed, the monitor is a key away.
def view_keys(n: int) -> tuple[str, ...]:
    """The keys of the ``n``-th view of the views table (from 1): its digit and its F-key."""
    return f"{n}", f"f{n if n > 1 else len(VIEWS) + 1}"


def view_bindings(namespace: str = "") -> list[BindingType]:
    """The keys of each view of the views table (``view_keys``); ``namespace`` "app." where a
    screen above the views has them too."""
    return [
        Binding(
            ",".join(view_keys(n)),
            f"{namespace}view('{v.mode}')",
            v.label,
            id=f"view-{v.mode}",
            show=False,
        )
        for n, v in enumerate(VIEWS, start=1)
    ]


BINDINGS: list[BindingType] = [
    # ctrl+q quits from anywhere; plain q only where no text field takes the key
    Binding("ctrl+q", "quit", "Quit", id="quit", priority=True),
    Binding("q", "quit", "Quit", id="quit-q", show=False),
    *view_bindings(),
    Binding("v", "next_view", "View", id="view-next"),
    Binding("escape", "leave_field", "Leave field", id="leave-field", show=False),
    Binding("space,p", "toggle_pause", "Pause", id="pause"),
    # + samples more often, - less (a shorter interval is "more", as in most monitors)
    Binding("plus,equals_sign", "interval(-1)", "Faster", id="interval-down"),
    Binding("minus", "interval(1)", "Slower", id="interval-up"),
    Binding("question_mark,f1", "help", "Help", id="help"),
]


def step_interval(current: float, direction: int) -> float:
    """The next sampling interval up (``direction`` > 0) or down from ``current``."""
    if direction > 0:
        bigger = [s for s in INTERVAL_STEPS if s > current]
        return bigger[0] if bigger else max(current, INTERVAL_STEPS[-1])
    smaller = [s for s in INTERVAL_STEPS if s < current]
    return smaller[-1] if smaller else MIN_INTERVAL


def binding_owners() -> dict[str, frozenset[str]]:
    """Every id a config ``[keymap]`` may remap, with what holds a binding of that id (the
    app, a screen, a widget): lltui's classes (their modules imported here: the app imports
    most screens only when first shown)."""
    import importlib
    import pkgutil

    from textual.dom import DOMNode

    from lltui.app import screens, widgets

    for package in (screens, widgets):
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{package.__name__}.{module.name}")
    owners: dict[str, set[str]] = {}
    for b in BINDINGS:
        if isinstance(b, Binding) and b.id:
            owners.setdefault(b.id, set()).add("app")
    classes: list[type] = [DOMNode]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        if cls.__module__.startswith("lltui."):
            for b in cls.__dict__.get("BINDINGS", ()):
                if isinstance(b, Binding) and b.id:
                    owners.setdefault(b.id, set()).add(cls.__qualname__)
    return {name: frozenset(held) for name, held in owners.items()}


def keymap_problems(keymap: dict[str, str], owners: dict[str, frozenset[str]]) -> list[str]:
    """One line for each id of a config ``[keymap]`` that names no binding, and for each key
    it gives to two bindings that apply together (Textual lets one win, silently): of one
    screen or widget, or one of them the app's, which apply on every view. Ids of different
    screens may share a key, as lltui's own do (``w``: each view's window)."""
    import difflib
    import itertools

    problems = []
    for name in sorted(set(keymap) - set(owners)):
        near = difflib.get_close_matches(name, sorted(owners), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        problems.append(f"[keymap] {name!r} is no binding id; it was ignored{hint}")
    ids_of: dict[str, list[str]] = {}
    for name, spec in keymap.items():
        for key in {k.strip() for k in spec.split(",") if k.strip()}:
            if name in owners:
                ids_of.setdefault(key, []).append(name)
    for key, names in sorted(ids_of.items()):
        clash = sorted(
            {
                n
                for a, b in itertools.combinations(names, 2)
                if owners[a] & owners[b] or "app" in owners[a] | owners[b]
                for n in (a, b)
            }
        )
        if clash:
            problems.append(
                f"[keymap] {key} is given to {', '.join(clash[:-1])} and {clash[-1]}, which "
                "apply together: only one of them works"
            )
    return problems
