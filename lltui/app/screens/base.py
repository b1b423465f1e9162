"""What every view but the monitor shares: the status line and the SIMULATED banner on top,
the footer below, and rendering from the app's model when shown."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Static

from lltui.app.model import RigModel
from lltui.app.widgets.status import StatusBar, show_header


class ViewScreen(Screen[None]):
    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Static("", id="banner")
        yield from self.compose_body()
        yield Footer()

    def compose_body(self) -> ComposeResult:
        """The view's own widgets, between the banner and the footer."""
        yield from ()

    def on_screen_resume(self) -> None:
        self.render_all()

    def render_all(self) -> None:
        render = getattr(self.app, "render_model", None)
        if render is not None:
            render()
        self.show_view()

    def show_view(self) -> None:
        """Render what the view reads once or on demand (its own state, not the samples)."""

    def show(self, model: RigModel) -> None:
        self.refresh_status(model, None)

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        if self.is_mounted:
            show_header(self, model, busy_for)
