"""What the screens and widgets use of the app, as a protocol: they depend on this module,
the app implements it (mypy checks that in app.py), so no screen imports the app module and
no import cycle forms between them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from textual.app import App
    from textual.binding import Binding

    from lltui.app.rig_model import RigModel
    from lltui.app.state.launch import FormFlags
    from lltui.app.state.monitor import MonitorPrefs
    from lltui.core.cmdline.args import LlamaArgs
    from lltui.services.launch.controller import LaunchController
    from lltui.services.rig import Fleet


class AppHost(Protocol):
    """The lltui app as its views see it."""

    # settings carried from the fit view to the launch view: (model path, flags), taken once
    launch_prefill: tuple[str, LlamaArgs] | None

    @property
    def model(self) -> RigModel:
        """The rig: latest sample, history, poll health (the poller thread writes it under
        its lock)."""
        ...

    @property
    def readonly(self) -> bool:
        """No signalling from this app (shared screens, the browser view)."""
        ...

    @property
    def monitor_prefs(self) -> MonitorPrefs:
        """How the monitor shows the rig: its window, order, selection and layout."""
        ...

    @property
    def launch(self) -> LaunchController:
        """The one llama-server the app starts or follows."""
        ...

    @property
    def fleet(self) -> Fleet | None:
        """The hosts watched side by side (``--source a,b``, ``--hosts FILE``), or None."""
        ...

    def focus_host(self, index: int) -> None:
        """Show one host of the fleet in the monitor."""
        ...

    def render_model(self) -> None:
        """Render the model on the current screen (and the one under a modal)."""
        ...

    def busy_for(self) -> float | None:
        """Seconds the running poll has taken, None when idle."""
        ...

    def key_description(self, binding: Binding) -> str:
        """What a key does now (the pause key reads Resume while paused)."""
        ...

    def launch_action(self, what: str, *args: FormFlags) -> None:
        """Start, stop, restart or follow a server, off the UI thread."""
        ...

    # the actions the command palette offers
    def action_toggle_pause(self) -> None: ...
    def action_interval(self, direction: int) -> None: ...
    def action_view(self, mode: str) -> None: ...
    def action_help(self) -> None: ...


class InApp(Protocol):
    """Anything Textual runs inside an app: a screen, a widget, a command provider."""

    @property
    def app(self) -> App[Any]: ...


def host_of(node: InApp) -> AppHost:
    """The app of a screen, widget or command provider, typed: lltui's run only in it."""
    return cast("AppHost", node.app)
