"""The Textual app and the one factory that the CLI, the tests and the screenshot script use."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from textual import on
from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Input

from lltui.app import keys, patches, views
from lltui.app.background import off_thread_reported
from lltui.app.messages import FleetChanged, LaunchChanged, PollFailed, SampleReady
from lltui.app.palette import LltuiCommands
from lltui.app.patches.key_names import key_display
from lltui.app.poller import Poller
from lltui.app.rig_model import RigModel
from lltui.app.screens.base import ModelView, ViewScreen
from lltui.app.state.monitor import MonitorPrefs
from lltui.app.themes import (
    APP_VARIABLE_DEFAULTS,
    BUILTIN_THEMES,
    FALLBACK_THEME,
    load_user_themes,
)
from lltui.config import MIN_INTERVAL, Settings
from lltui.core.monitor.alerts import AlertTracker, HostStatus
from lltui.core.monitor.history import RigHistory
from lltui.core.monitor.models import GpuSource, RigInfo, RigSample
from lltui.core.text import error_text
from lltui.paths import open_private, themes_dir
from lltui.services.follow import FoundServers

if TYPE_CHECKING:
    from textual.driver import Driver

    from lltui.app.app_protocol import AppHost
    from lltui.app.state.launch import FormFlags
    from lltui.core.cmdline.args import LlamaArgs
    from lltui.core.cmdline.launch_spec import LaunchPolicy
    from lltui.services.alerts import HookRunner
    from lltui.services.launch.controller import LaunchController
    from lltui.services.rig import Fleet, ReplayOptions, Rig

# the status line between samples (STALE, a poll's age): once a second is as often as it
# changes in words, and an idle monitor wakes no more than it must
STATUS_REFRESH_S = 1.0

SampleListener = Callable[[RigSample], None]


class LltuiApp(App[int]):
    """lltui. Views are modes (views.py), keys are in keys.py; the app owns the model, the
    poller and the launched server, and its screens see it as an ``AppHost`` (host.py)."""

    CSS_PATH = "lltui.tcss"
    TITLE = "lltui"
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = views.MODES
    DEFAULT_MODE = "monitor"
    COMMANDS = App.COMMANDS | {LltuiCommands}
    BINDINGS: ClassVar[list[BindingType]] = keys.BINDINGS

    def __init__(
        self,
        source: GpuSource,
        info: RigInfo,
        settings: Settings,
        *,
        clock: Callable[[], float] = time.monotonic,
        poll_limit: int | None = None,
        start_polling: bool = True,
        on_sample: SampleListener | None = None,
        view: str = "monitor",
        fleet: Fleet | None = None,
    ) -> None:
        super().__init__()
        patches.apply()  # Textual's internals lltui replaces (lltui/app/patches)
        self._fleet = fleet
        self._focus_lock = threading.Lock()
        self._initial_view = view
        self.settings = settings
        self.source = source
        self.clock = clock
        # the interval can change while running: keep the time covered, bounded at the fastest
        max_age = settings.history_minutes * 60
        history = RigHistory(max(60, int(max_age / MIN_INTERVAL)), max_age_s=max_age)
        self._hooks = self._make_hooks()
        self.model = self._new_model(info, settings.interval, history)
        # a fleet's hosts once opened, by index: each keeps its history and energy while
        # another is in view (the one in view is self.model)
        self._host_models: dict[int, RigModel] = {}
        focus = getattr(source, "focus", None)
        if fleet is not None and isinstance(focus, int):
            self._host_models[focus] = self.model
        # how the monitor shows it, whichever host of a fleet is in view
        self.monitor_prefs = MonitorPrefs()
        # a source whose poll is arithmetic (a simulated rig) gives its first sample before
        # the first screen is composed, so the monitor lays out its cards once, with their
        # lines; any other (a driver, ssh, HTTP) is polled on the poller thread only
        self._poll_first = start_polling and polls_instantly(source)
        first = 1 if self._poll_first else 0
        self.poller = Poller(
            source,
            self.ingest,
            self.report_error,
            settings.interval,
            clock=clock,
            limit=None if poll_limit is None else max(0, poll_limit - first),
        )
        self._start_polling = start_polling
        self._on_sample = on_sample
        self.samples_applied = 0
        self.heap_released = False  # the start's free heap handed back (lltui/app/heap.py)
        self.theme_failures: tuple[str, ...] = ()
        self._launch: LaunchController | None = None
        # (model, settings) from the fit view, taken once by the launch view
        self.launch_prefill: tuple[str, LlamaArgs] | None = None
        self._composing = True  # until mounted: the first screen is composed then
        self._is_ready = False  # the first frame is up (on_ready)
        self._exit_on_ready = False  # a stop signal came before it
        self._status_due: asyncio.TimerHandle | None = None  # the status line's next redraw
        for theme in BUILTIN_THEMES:
            self.register_theme(theme)
        # chosen before the first frame, so the stylesheet is not worked out twice at startup
        self._apply_theme()

    # -- setup ---------------------------------------------------------------------------
    def get_driver_class(self) -> type[Driver]:
        """Textual's choice, with the Linux driver's input thread made to sleep while no key
        comes (lltui/app/patches/driver.py)."""
        driver_class = super().get_driver_class()
        if sys.platform == "win32":
            return driver_class
        from lltui.app.patches.driver import quiet

        return quiet(driver_class)

    def _new_model(self, info: RigInfo, interval: float, history: RigHistory) -> RigModel:
        """A model of the rig, its alerts on the config's thresholds (with the fleet's
        hosts, and the hooks run on each change)."""
        settings = self.settings
        return RigModel(
            info=info,
            interval=interval,
            history=history,
            clock=self.clock,
            alerts=AlertTracker(settings.alerts.thresholds),
            hosts=self._host_statuses if self._fleet is not None else None,
            source=settings.source if self._fleet is None else None,
            on_alerts=self._hooks.fire if self._hooks is not None else None,
            energy_price=settings.energy_price,
            currency=settings.currency,
            found=FoundServers(background=True) if self._fleet is None else None,
        )

    def _make_hooks(self) -> HookRunner | None:
        if not self.settings.alerts.hooks:
            return None
        from lltui.services.alerts import HookRunner

        return HookRunner(self.settings.alerts, lambda result: self._note(result.line))

    def _note(self, line: str) -> None:
        """A line from another thread (a hook that failed), as a notification."""
        if not self.is_running:
            return
        with contextlib.suppress(RuntimeError):  # the app is closing
            self.call_from_thread(self.notify, line, severity="warning")

    def _host_statuses(self) -> list[HostStatus]:
        from lltui.core.monitor.fleet import alert_inputs

        if self._fleet is None:
            return []
        return alert_inputs(self._fleet.snapshot(), self.model.interval)[1]

    @property
    def readonly(self) -> bool:
        """No signal, launch, stop or file written from this app (``--readonly``, the
        config's ``readonly``): each such action refuses where it runs."""
        return self.settings.readonly

    @property
    def launch_policy(self) -> LaunchPolicy:
        """What the launch view may start: nothing read-only; from a browser, no flag that
        names a file unless the config allows it."""
        from lltui.core.cmdline.launch_spec import LaunchPolicy

        settings = self.settings
        return LaunchPolicy(
            allowed=not settings.readonly,
            served=settings.served,
            file_flags_allowed=frozenset(settings.serve_allow_flags),
        )

    def deliver_binary(self, path_or_file: Any, **options: Any) -> str | None:
        """Textual's file delivery (the palette's Screenshot, saved to the Downloads folder
        or sent to the browser): none read-only or from a browser (lltui serve has no
        download route)."""
        if self.settings.readonly or self.settings.served:
            self.notify("no file is written or sent from this app", severity="warning")
            return None
        return super().deliver_binary(path_or_file, **options)

    def deliver_text(self, path_or_file: Any, **options: Any) -> str | None:
        if self.settings.readonly or self.settings.served:
            self.notify("no file is written or sent from this app", severity="warning")
            return None
        return super().deliver_text(path_or_file, **options)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLE_DEFAULTS)

    def on_load(self) -> None:
        if self._poll_first:
            try:
                sample = self.source.poll()
            except Exception as exc:  # as the poller reports it
                self.report_error(error_text(exc))
            else:
                # no SampleReady: the screen about to be composed renders the model anyway
                self._take(sample)

    def exit_when_ready(self) -> None:
        """Exit as Ctrl-Q does, now or once the first frame is up: a stop signal at startup
        (an exit while the first screen composes left it half-mounted, with a traceback)."""
        if self._is_ready:
            self.exit()
        else:
            self._exit_on_ready = True

    def on_ready(self) -> None:
        self._is_ready = True
        if self._exit_on_ready:
            self.call_after_refresh(self.exit)  # (once the first frame's work is done)

    def on_mount(self) -> None:
        self._composing = False
        if self.theme_failures:
            self.notify(
                "\n".join(self.theme_failures), title="Themes", severity="warning", timeout=8
            )
        if self._initial_view != self.current_mode:
            self.switch_mode(self._initial_view)
        if self.settings.keymap:
            self.set_keymap(self.settings.keymap)
            problems = keys.keymap_problems(self.settings.keymap, keys.binding_owners())
            if problems:
                self.notify("\n".join(problems), title="Keymap", severity="warning", timeout=8)
        if self._poll_first:
            # the first sample was taken in on_load: the next one an interval later
            self.set_timer(self.model.interval, self.poller.start)
        elif self._start_polling:
            self.poller.start()
        if self._fleet is not None:
            self._fleet.on_update = self._host_updated
            if self._start_polling:
                self._fleet.start()
        self._arm_status(STATUS_REFRESH_S)

    def _apply_theme(self) -> None:
        loaded = load_user_themes(themes_dir())
        for theme in loaded.themes:
            self.register_theme(theme)
        failures = list(loaded.failures)
        wanted = self.settings.theme
        if wanted not in self.available_themes:
            failures.append(f"theme {wanted!r} not found; using {FALLBACK_THEME}")
            wanted = FALLBACK_THEME
        self._set_first_theme(wanted)
        self.theme_failures = tuple(failures)

    def _set_first_theme(self, name: str) -> None:
        """The theme before the first frame, without the stylesheet pass Textual queues when
        the theme changes: the first view's own pass (it always has one) builds it with this
        theme. What else Textual does on a change is done here: the theme's classes, and the
        ANSI palette of a light theme."""
        self.set_reactive(App.theme, name)
        theme = self.current_theme
        for cls in [c for c in self.classes if c.startswith("-theme-")]:
            self.remove_class(cls, update=False)
        self.add_class(f"-theme-{name}", update=False)
        self.set_class(theme.dark, "-dark-mode", update=False)
        self.set_class(not theme.dark, "-light-mode", update=False)
        self._refresh_truecolor_filter(self.ansi_theme)
        # the stylesheet is first parsed with these (see refresh_css)
        self.stylesheet.set_variables(self.get_css_variables())

    def refresh_css(self, animate: bool = True) -> None:
        """Textual parses the whole stylesheet again for each mode's new screen, and for the
        first one too, composed before the app is mounted: that one is parsed once, with the
        theme's variables set above, and its styles are applied as it is registered."""
        if self._composing:
            return
        super().refresh_css(animate)

    def save_screenshot(
        self,
        filename: str | None = None,
        path: str | None = None,
        time_format: str | None = None,
    ) -> str:
        """Textual's screenshot (the palette's "Screenshot" command), written to a private
        file: the monitor shows every process on the GPUs, other users' included."""
        import os

        from textual.app import generate_datetime_filename

        name = filename or generate_datetime_filename(self.title, ".svg", time_format)
        svg_path = os.path.expanduser(os.path.join(path or "./", name))
        svg = self.export_screenshot()
        with open_private(svg_path) as f:
            f.write(svg)
        return svg_path

    async def on_unmount(self) -> None:
        if self._status_due is not None:
            self._status_due.cancel()
        if self._launch is not None:
            self._launch.close()  # no llama-server of ours outlives lltui
        self.poller.stop()
        if self._hooks is not None:
            self._hooks.close()  # no alert hook of ours outlives lltui either
        if self._fleet is not None:
            self._fleet.close()  # every host's thread and ssh connection
        if self.poller.in_flight_since is None:
            # closing a broken source must not hide the real exit
            with contextlib.suppress(Exception):
                self.source.close()

    # -- data ----------------------------------------------------------------------------
    def busy_for(self) -> float | None:
        return self.poller.busy_for()

    def ingest(self, sample: RigSample) -> None:
        """Take a sample (on the poller thread, or from a test): into the model, to the
        recorder, then a render request to the UI thread."""
        if self._take(sample):
            self.post_message(SampleReady(sample))

    def _take(self, sample: RigSample) -> bool:
        """Into the model and to the recorder; whether the sample was taken."""
        with self._focus_lock:  # a fleet's host in view cannot change in between
            if self._fleet is not None and not self._fleet_focus_has(sample):
                return False  # taken from the host in view a moment ago, before the change
            if not self.model.apply(sample):
                return False
        self.samples_applied += 1
        if self._on_sample is not None:
            try:
                self._on_sample(sample)
            except Exception as exc:  # a full disk must not stop the monitor
                self.report_error(f"recording stopped: {exc}", polled=False)
                self._on_sample = None
        return True

    def set_sample_listener(self, listener: SampleListener | None) -> None:
        """Called with every sample on the poller thread (a recorder); set before polling."""
        self._on_sample = listener

    def poll_sync(self, n: int = 1) -> list[RigSample]:
        """Poll the source ``n`` times on the calling thread, as the poller would; for
        screenshots and tests that need a known history without timers."""
        samples = []
        for _ in range(n):
            sample = self.source.poll()
            self.ingest(sample)
            samples.append(sample)
        return samples

    def report_error(self, error: str, *, polled: bool = True) -> None:
        """An error for the status line; ``polled``: the source's poll failed (an alert)."""
        self.model.fail(error, polled=polled)
        self.post_message(PollFailed(error))

    def on_sample_ready(self, message: SampleReady) -> None:
        self.render_model()
        # the sample's status line stands until the data would be stale
        self._arm_status(self.model.stale_after())
        if not self.heap_released:  # once the first sample is drawn: the start's garbage
            self.heap_released = True
            self.call_after_refresh(self._release_heap)

    def _release_heap(self) -> None:
        from lltui.app.heap import release_free_heap

        release_free_heap()

    def on_poll_failed(self, message: PollFailed) -> None:
        self.render_model()

    def render_model(self) -> None:
        """Render the model on the current screen (and the base screen under a modal)."""
        if not self.is_running:
            return
        with self.model.lock:
            self._show_locked()

    def _show_locked(self) -> None:
        # A screen pushed a moment ago (keys and a sample in one burst over a slow link) has
        # no widgets yet: it is skipped here and renders itself once mounted.
        screen = self.screen
        if isinstance(screen, ModelView) and screen.is_mounted:
            screen.show(self.model)
        base = self.screen_stack[0] if self.screen_stack else screen
        if base is not screen and isinstance(base, ModelView) and base.is_mounted:
            base.show(self.model)

    def _arm_status(self, delay: float) -> None:
        """Redraw the status line ``delay`` seconds from now, then every second, unless a
        sample comes first (it arms this again). A handle on the loop, not a Textual timer:
        a timer would wake the app every second to find a sample came (an idle tick's
        cost), where this wakes it only when the data goes stale or no sample comes."""
        if self._status_due is not None:
            self._status_due.cancel()
        self._status_due = asyncio.get_running_loop().call_later(delay, self._status_timeout)

    def _status_timeout(self) -> None:
        self._status_due = None
        if not self.is_running:
            return
        self._refresh_status()
        if not self.model.paused:  # paused: the pause key redraws it, and arms this again
            self._arm_status(STATUS_REFRESH_S)

    def _refresh_status(self) -> None:
        busy_for = self.busy_for()
        age = self.model.age()
        if busy_for is None and age is not None and age < self.model.interval:
            return  # a sample came within the interval: its status line is the one drawn
        screen = self.screen
        if isinstance(screen, ModelView) and screen.is_mounted:
            with self.model.lock:
                screen.refresh_status(self.model, busy_for)

    @property
    def fleet(self) -> Fleet | None:
        return self._fleet

    def focus_host(self, index: int) -> None:
        """Show host ``index`` of the fleet in the monitor: with the history and energy it
        has had since it was first opened, or a history of its own from now."""
        from lltui.services.rig import fleet_focus

        focus = fleet_focus(self.source)
        if self._fleet is None or focus is None:
            return
        with self._focus_lock:
            info = focus.set_focus(index)
            old = self.model
            model = self._host_models.get(index)
            if model is None:
                history = RigHistory(old.history.maxlen, max_age_s=old.history.max_age_s)
                model = self._new_model(info, old.interval, history)
                self._host_models[index] = model
            model.interval, model.paused = old.interval, old.paused
            self.model = model
        if not model.paused:
            self.poller.resume()  # the new host's samples now, not an interval later
        if self.is_running:
            self.switch_mode("monitor")
            self.render_model()

    def host_model(self, index: int) -> RigModel | None:
        """The model of a fleet's host that has been opened (None: never opened)."""
        return self._host_models.get(index)

    def _host_updated(self, index: int) -> None:
        """On a host's thread: a host opened before but not in view takes its new sample
        into its own history (the one in view is fed by the poller); the fleet view is told."""
        fleet = self._fleet
        with self._focus_lock:
            model = self._host_models.get(index)
            keep = model is not None and model is not self.model
        if keep and fleet is not None and model is not None:
            sample = fleet.state(index).sample
            if sample is not None:
                model.apply(sample)
        self.post_message(FleetChanged(index))

    def _fleet_focus_has(self, sample: RigSample) -> bool:
        from lltui.services.rig import fleet_focus

        focus = fleet_focus(self.source)
        return focus is None or focus.is_current(sample)

    @on(FleetChanged)
    def _fleet_changed(self, message: FleetChanged) -> None:
        from lltui.app.screens.fleet import FleetScreen

        # a host's thread can report while the screens are being closed
        if not self.is_running or not self.screen_stack:
            return
        if isinstance(self.screen, FleetScreen):
            self.screen.show_fleet()

    @property
    def launch(self) -> LaunchController:
        if self._launch is None:
            from lltui.services.launch.controller import LaunchController

            self._launch = LaunchController(
                lambda: self.post_message(LaunchChanged()),
                lambda: self.model.latest,
                policy=self.launch_policy,
            )
        return self._launch

    def view_loading(self) -> bool:
        """Whether the current view still waits for data it reads once (screenshots)."""
        screen = self.screen
        return isinstance(screen, ViewScreen) and screen.awaiting_data

    def launch_action(self, what: str, *args: FormFlags) -> None:
        """Start (from the form: model, flags, host:port), stop, force or follow, off the
        UI thread (starting and stopping block; the controller runs them one at a time)."""
        actions: dict[str, Callable[..., None]] = {
            "start": self._start_launch,
            "stop": self.launch.stop,
            "force": self.launch.force,
            "follow": self.launch.follow,
            "router": self.launch.router_action,  # (load|unload|keep|unkeep, model name)
        }
        method = actions[what]
        work = off_thread_reported(self, lambda: method(*args), "launch")
        self.run_worker(work, group="launch", exit_on_error=False)

    def _start_launch(self, model: str, flags: FormFlags, hostport: str) -> None:
        from lltui.app.state.launch import form_request
        from lltui.core.cmdline.launch_spec import LaunchError

        try:
            request = form_request(model, flags, hostport)
        except LaunchError as exc:
            self.launch.fail(str(exc))
            return
        self.launch.start(request)

    @on(LaunchChanged)
    def _launch_changed(self, message: LaunchChanged) -> None:
        from lltui.app.screens.launch import LaunchScreen

        self._llama_alerts()
        if isinstance(self.screen, LaunchScreen):
            self.screen.show_view()

    def _llama_alerts(self) -> None:
        """The launched (or followed) llama-server's health, into the alerts."""
        from lltui.services.launch.state import llama_status

        if self._launch is None:
            return
        st = self._launch.state
        status = llama_status(st)
        with self.model.lock:
            changes = self.model.alerts.update(time.time(), llama=[status] if status else [])
            changes += self.model.plan_alerts(st.plan if st.running else None)
        if changes and self.model.on_alerts is not None:
            self.model.on_alerts(changes)
        if changes:
            self.render_model()

    # -- actions -------------------------------------------------------------------------
    async def action_quit(self) -> None:
        """Quit; with a llama-server of lltui's running, ask first (quitting stops it)."""
        running = self._launch_running()
        if running is None:
            self.exit()
            return
        from lltui.app.screens.quit_dialog import QuitDialog

        if isinstance(self.screen, QuitDialog):
            return  # asked already

        def answered(quit_now: bool | None) -> None:
            if quit_now:
                self.exit()

        self.push_screen(QuitDialog(running), answered)

    def _launch_running(self) -> str | None:
        """The llama-server lltui started and still runs, in words; None when there is none."""
        st = self._launch.state if self._launch is not None else None
        return f"llama-server (pid {st.pid})" if st is not None and st.running else None

    def action_next_view(self) -> None:
        self.action_view(views.next_view(list(self.MODES), self.current_mode))

    def action_view(self, mode: str) -> None:
        """Show a view, from any focus; the key help, if open, closes first."""
        from lltui.app.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss()
        if mode != self.current_mode:
            self.switch_mode(mode)

    def action_leave_field(self) -> None:
        """Escape out of a text field: focus goes to the page around it (which scrolls), so
        the app's one-letter keys work again."""
        focused = self.focused
        if not isinstance(focused, Input):
            return
        for node in focused.ancestors:
            if isinstance(node, Widget) and node.focusable:
                node.focus()
                return
        self.screen.set_focus(None)

    def action_toggle_pause(self) -> None:
        self.model.paused = not self.model.paused
        fleet = self._fleet  # every host of one too, as a single source: none polled
        if self.model.paused:
            self.poller.pause()
            if fleet is not None:
                fleet.pause()
        else:
            self.poller.resume()
            if fleet is not None:
                fleet.resume()
        self.refresh_bindings()  # the footer's key says Resume now, or Pause again
        self.render_model()
        if not self.model.paused:
            self._arm_status(self.model.stale_after())

    def get_key_display(self, binding: Binding) -> str:
        """Textual's display of a key, worked out without its Unicode name lookups
        (patches/key_names.py)."""
        return key_display(binding)

    def key_description(self, binding: Binding) -> str:
        """What a key does now, as the footer and the key help say it: the pause key
        resumes while sampling is paused."""
        if binding.id == "pause" and self.model.paused:
            return "Resume"
        return binding.description

    def action_interval(self, direction: int) -> None:
        new = keys.step_interval(self.model.interval, direction)
        self.model.interval = new
        self.poller.set_interval(new)
        if self._fleet is not None:
            self._fleet.set_interval(new)
        self.render_model()

    def action_help(self) -> None:
        from lltui.app.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss()
        else:
            self.push_screen(HelpScreen(self.screen))


def polls_instantly(source: GpuSource) -> bool:
    """Whether the source says its poll takes no time worth a thread (``POLLS_INSTANTLY``:
    it reads no device, file or network)."""
    return getattr(source, "POLLS_INSTANTLY", False) is True


if TYPE_CHECKING:

    def _implements_host(app: LltuiApp) -> AppHost:
        return app  # mypy checks here that the app is what its screens take it for


def create_app(
    settings: Settings,
    *,
    rig: Rig | None = None,
    source: GpuSource | None = None,
    info: RigInfo | None = None,
    clock: Callable[[], float] = time.monotonic,
    poll_limit: int | None = None,
    start_polling: bool = True,
    on_sample: SampleListener | None = None,
    view: str = "monitor",
    replay: ReplayOptions | None = None,
    hosts_file: str | None = None,
    host_timeout: float | None = None,
    fleet: Fleet | None = None,
) -> LltuiApp:
    """Build the app for a rig: ``rig`` as opened by :func:`lltui.services.rig.open_rig`, a
    ``source`` (with its ``fleet`` when it is a fleet's focus), or, with neither, the rig
    ``settings.source`` (and ``hosts_file``) name, opened here by the rig service; a fleet
    opened here opens on its own view.

    Raises SourceUnavailable or ValueError with one line when the source cannot be opened.
    """
    opened_here = rig is None and source is None
    if opened_here:
        from lltui.services.rig import RigRequest, open_rig

        rig = open_rig(
            RigRequest(
                source=settings.source,
                hosts_file=hosts_file,
                host_timeout_s=host_timeout,
                interval_s=settings.interval,
                replay=replay,
            )
        )
    if rig is not None:
        source, info, fleet = rig.source, rig.info, rig.fleet
    assert source is not None
    if info is None:
        info = source.open()
    if opened_here and fleet is not None and view == "monitor":
        view = "fleet"
    return LltuiApp(
        source,
        info,
        settings,
        clock=clock,
        poll_limit=poll_limit,
        start_polling=start_polling,
        on_sample=on_sample,
        view=view,
        fleet=fleet,
    )
