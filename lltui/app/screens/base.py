"""What the screens share: the typed way to the app, how the app hands them its model, and
for every view but the monitor the status line and the SIMULATED banner on top, the footer
below, and rendering from the app's model when shown."""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, Static

from lltui.app.app_protocol import AppHost, host_of
from lltui.app.rig_model import RigModel
from lltui.app.widgets.footer import LltuiFooter
from lltui.app.widgets.status import Banner, StatusBar, show_header

# the forms (fit, launch) put their fields in more columns on wide terminals: these classes
# are set on their screens by width, and forms.tcss lays the fields out by them
FORM_BREAKPOINTS: list[tuple[int, str]] = [(0, "-narrow"), (120, "-wide")]


class ModelView:
    """A screen the app renders its model on (on the UI thread, holding the model's lock):
    ``show`` for each new sample, ``refresh_status`` between samples."""

    def show(self, model: RigModel) -> None:
        """Render a new sample (or the model after a key changed it)."""

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        """Refresh what ages between samples (the status line)."""


Answer = TypeVar("Answer")


class WarningDialog(ModalScreen[Answer]):
    """A question in a box with a warning border, centred over the screen: a subclass
    composes a ``.dialog-box`` holding its ``.dialog-text`` and a ``.dialog-buttons`` row
    (and sets the box's width in its own CSS where 64 columns do not suit it)."""

    DEFAULT_CSS = """
    WarningDialog {
        align: center middle;
    }
    WarningDialog > .dialog-box {
        width: 64;
        max-width: 95%;
        height: auto;
        background: $surface;
        border: round $warning;
        padding: 0 1;
    }
    WarningDialog .dialog-text {
        height: auto;
        margin-bottom: 1;
    }
    WarningDialog .dialog-buttons {
        height: auto;
        align-horizontal: right;
    }
    WarningDialog .dialog-buttons Button {
        margin-left: 1;
    }
    """


class HistoryModal(ModelView, ModalScreen[None]):
    """A modal over the monitor that shows one thing's history (a GPU, a process) in one
    scrolling text; ``w`` steps through the monitor's history windows."""

    # a modal screen has none of the app's keys: it has the monitor's sampling keys and the
    # key help, with the app's ids so a keymap moves them here too, and shows them in a
    # footer (Resume while paused); each page's q closes it, as q leaves nvitop's process page
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space,p", "toggle_pause", "Pause", id="pause"),
        Binding("plus,equals_sign", "interval(-1)", "Faster", id="interval-down"),
        Binding("minus", "interval(1)", "Slower", id="interval-up"),
        Binding("question_mark,f1", "app.help", "Help", id="help"),
    ]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="detail-box"):
            yield Static("", id="detail")
        yield LltuiFooter()

    def on_mount(self) -> None:
        # the app renders only screens it sees mounted; this one draws its first frame itself
        self._show_now()

    def on_resize(self) -> None:
        # drawn again at its box's width once laid out (the first frame guessed the screen's;
        # while paused no sample draws it again)
        self.call_after_refresh(self._show_now)

    def _show_now(self) -> None:
        model = host_of(self).model
        with model.lock:
            self.show(model)

    def text_width(self) -> int:
        return self.query_one("#detail-box").size.width or self.size.width

    def set_text(self, text: str) -> None:
        self.query_one("#detail", Static).update(text)

    def action_cycle_window(self) -> None:
        host = host_of(self)
        host.monitor_prefs.cycle_window()
        host.render_model()

    def action_toggle_pause(self) -> None:
        host_of(self).action_toggle_pause()

    def action_interval(self, direction: int) -> None:
        host_of(self).action_interval(direction)


class LltuiScreen(ModelView, Screen[None]):
    """A screen of the lltui app."""

    @property
    def lltui(self) -> AppHost:
        """The app, typed."""
        return host_of(self)


class ViewScreen(LltuiScreen):
    def compose(self) -> ComposeResult:
        yield StatusBar(id="status")
        yield Banner(id="banner")
        yield from self.compose_body()
        yield LltuiFooter()

    def compose_body(self) -> ComposeResult:
        """The view's own widgets, between the banner and the footer."""
        yield from ()

    @property
    def awaiting_data(self) -> bool:
        """Whether the view still waits for data it reads once (screenshots wait on it)."""
        return False

    _shown_source: str | None = None  # the rig this view was last shown with

    def on_screen_resume(self) -> None:
        source = self.lltui.model.info.source
        if self._shown_source is not None and source != self._shown_source:
            self.rig_changed()
        self._shown_source = source
        self.render_all()

    def on_resize(self) -> None:
        # the status line's wording is fitted to the width: fitted again once laid out at
        # the new one (not at the next sample, which never comes while paused)
        self.call_after_refresh(self.lltui.render_model)

    def rig_changed(self) -> None:
        """The rig in view is another since this view was last shown (a fleet's host
        opened): what the view read of the last one is read again."""

    def render_all(self) -> None:
        self.lltui.render_model()
        self.show_view()

    def show_view(self) -> None:
        """Render what the view reads once or on demand (its own state, not the samples)."""

    def show(self, model: RigModel) -> None:
        self.refresh_status(model, None)

    def refresh_status(self, model: RigModel, busy_for: float | None) -> None:
        if self.is_mounted:
            show_header(self, model, busy_for, self.lltui.monitor_prefs.window_s)


def field_input(placeholder: str, ident: str, value: str = "") -> Input:
    """A form field: focus leaves its text as it is (Tab into a field, then type, edits it
    rather than replacing it). Its cursor does not blink: a form open on an idle screen
    would redraw twice a second (over SSH, and in snapshots taken at either phase)."""
    field = Input(
        value=value, placeholder=placeholder, id=ident, compact=True, select_on_focus=False
    )
    field.cursor_blink = False
    return field


class FormScreen(ViewScreen):
    """A view with a form whose every edit asks for an answer worked out off the UI thread
    (fit's estimate, launch's command): the fields are laid out by width, each request gets
    a generation, and only the newest request's answer is shown."""

    CSS_PATH = "forms.tcss"  # read when a form is first shown, not at startup
    HORIZONTAL_BREAKPOINTS = FORM_BREAKPOINTS
    # the first field takes typing at once: a model path typed into a form with nothing
    # focused fired the app's keys instead (pause, interval, filter)
    AUTO_FOCUS = "Input"

    def __init__(self) -> None:
        super().__init__()
        self.generation = 0  # of the newest request

    def next_generation(self) -> int:
        """A new request: its generation (answers to older ones are left unshown)."""
        self.generation += 1
        return self.generation


class LoadOnceScreen(ViewScreen):
    """A view that reads its data once, in a worker of its own, when first shown (the
    topology from nvidia-smi, NCCL's library and findings): it starts the read on mount and
    says it is waiting until the answer's message arrives."""

    def on_mount(self) -> None:
        self.start_loading(self.lltui.model.info.source)
        self.render_all()

    def start_loading(self, source: str) -> None:
        """Start the read of the rig ``source`` names (a worker posting its result)."""
        raise NotImplementedError

    def rig_changed(self) -> None:
        self.start_loading(self.lltui.model.info.source)
