"""The question before quitting with a llama-server of lltui's running: quitting stops it."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from lltui.app.screens.base import WarningDialog


class QuitDialog(WarningDialog[bool]):
    """``y``: stop the server and quit; ``n`` or escape: stay; enter presses the button with
    the focus, Stay at first (enter alone never quits). Answers True to quit."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("y", "answer(True)", "Stop it and quit", id="quit-yes"),
        Binding("n,escape", "answer(False)", "Stay", id="quit-no"),
    ]

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box", classes="dialog-box"):
            yield Static(
                f"{self.what} is running. Quitting lltui stops it.",
                id="quit-text",
                classes="dialog-text",
            )
            with Horizontal(id="quit-buttons", classes="dialog-buttons"):
                yield Button("Stay", id="quit-no", compact=True)
                yield Button("Stop it and quit", id="quit-yes", variant="error", compact=True)

    def action_answer(self, quit_now: bool) -> None:
        self.dismiss(quit_now)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "quit-yes")
