"""The Textual app and the one factory that the CLI, the tests and the screenshot script use."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen

from lltui.app.messages import (
    FitReady,
    LaunchChanged,
    LaunchPreview,
    ModelsFound,
    NcclReady,
    PollFailed,
    SampleReady,
    TopologyReady,
)
from lltui.app.model import SORT_KEYS, WINDOWS_S, RigModel
from lltui.app.palette import LltuiCommands
from lltui.app.poller import Poller
from lltui.app.screens.gpu_detail import GpuDetailScreen
from lltui.app.screens.monitor import MonitorScreen
from lltui.app.themes import (
    APP_VARIABLE_DEFAULTS,
    BUILTIN_THEMES,
    FALLBACK_THEME,
    load_user_themes,
)
from lltui.config import MAX_INTERVAL, MIN_INTERVAL, Settings, themes_dir
from lltui.core.monitor.history import RigHistory
from lltui.core.monitor.models import RigInfo, RigSample
from lltui.sources.base import GpuSource

if TYPE_CHECKING:
    from lltui.app.launch_state import LaunchController
    from lltui.app.nccl_state import NcclState
    from lltui.core.topo.advice import Advice
    from lltui.sources.registry import ReplayOptions
    from lltui.sources.topo import TopologyReport

INTERVAL_STEPS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
STATUS_REFRESH_S = 0.5

SampleListener = Callable[[RigSample], None]


@dataclass
class TopologyState:
    """The topology, read once per run off the UI thread."""

    loading: bool = False
    report: TopologyReport | None = None
    advice: tuple[Advice, ...] = ()
    error: str | None = None


# Views other than the monitor are imported when first opened, so startup stays light.
def _topology_screen() -> Screen[Any]:
    from lltui.app.screens.topology import TopologyScreen

    return TopologyScreen()


def _nccl_screen() -> Screen[Any]:
    from lltui.app.screens.nccl import NcclScreen

    return NcclScreen()


def _fit_screen() -> Screen[Any]:
    from lltui.app.screens.fit import FitScreen

    return FitScreen()


def _launch_screen() -> Screen[Any]:
    from lltui.app.screens.launch import LaunchScreen

    return LaunchScreen()


class LltuiApp(App[int]):
    """lltui. Views are modes; the monitor exists now, each other view arrives as a mode."""

    CSS_PATH = "lltui.tcss"
    TITLE = "lltui"
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {
        "monitor": MonitorScreen,
        "topology": _topology_screen,
        "nccl": _nccl_screen,
        "fit": _fit_screen,
        "launch": _launch_screen,
    }
    DEFAULT_MODE = "monitor"
    COMMANDS = App.COMMANDS | {LltuiCommands}
    BINDINGS: ClassVar[list[BindingType]] = [
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
        Binding("left_square_bracket,k", "select_gpu(-1)", "Prev GPU", id="gpu-prev", show=False),
        Binding("right_square_bracket,j", "select_gpu(1)", "Next GPU", id="gpu-next", show=False),
        Binding("enter,d", "gpu_detail", "Detail", id="gpu-detail"),
        Binding("question_mark,f1", "help", "Help", id="help"),
    ]

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
    ) -> None:
        super().__init__()
        self._initial_view = view
        self.settings = settings
        self.source = source
        self.clock = clock
        # the interval can change while running: keep the time covered, bounded at the fastest
        max_age = settings.history_minutes * 60
        history = RigHistory(max(60, int(max_age / MIN_INTERVAL)), max_age_s=max_age)
        self.model = RigModel(info=info, interval=settings.interval, history=history, clock=clock)
        self.poller = Poller(
            source,
            self.ingest,
            self.report_error,
            settings.interval,
            clock=clock,
            limit=poll_limit,
        )
        self._start_polling = start_polling
        self._on_sample = on_sample
        self.samples_applied = 0
        self.theme_failures: tuple[str, ...] = ()
        self.topology_state = TopologyState()
        self._nccl_state: NcclState | None = None
        self._launch: LaunchController | None = None
        self.launch_prefill: tuple[str, str] | None = None  # (model, flags) from the fit view
        self.fit_outcome: Any = None  # the newest FitOutcome
        self._fit_generation = 0
        self._preview_generation = 0
        for theme in BUILTIN_THEMES:
            self.register_theme(theme)
        # chosen before the first frame, so the stylesheet is not worked out twice at startup
        self._apply_theme()

    # -- setup ---------------------------------------------------------------------------
    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(APP_VARIABLE_DEFAULTS)

    def on_mount(self) -> None:
        if self.theme_failures:
            self.notify(
                "\n".join(self.theme_failures), title="Themes", severity="warning", timeout=8
            )
        if self._initial_view != self.current_mode:
            self.switch_mode(self._initial_view)
        if self.settings.keymap:
            self.set_keymap(self.settings.keymap)
        if self._start_polling:
            self.poller.start()
        self.set_interval(STATUS_REFRESH_S, self._refresh_status)

    def _apply_theme(self) -> None:
        loaded = load_user_themes(themes_dir())
        for theme in loaded.themes:
            self.register_theme(theme)
        failures = list(loaded.failures)
        wanted = self.settings.theme
        if wanted in self.available_themes:
            self.theme = wanted
        else:
            failures.append(f"theme {wanted!r} not found; using {FALLBACK_THEME}")
            self.theme = FALLBACK_THEME
        self.theme_failures = tuple(failures)

    def get_system_commands(self, screen: Screen[Any]) -> Any:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Pause / resume", "Stop or restart sampling", self.action_toggle_pause)

    async def on_unmount(self) -> None:
        if self._launch is not None:
            self._launch.close()  # no llama-server of ours outlives lltui
        self.poller.stop()
        if self.poller.in_flight_since is None:
            # closing a broken source must not hide the real exit
            with contextlib.suppress(Exception):
                self.source.close()

    # -- data ----------------------------------------------------------------------------
    def busy_for(self) -> float | None:
        return self.poller.busy_for()

    def ingest(self, sample: RigSample, poll_seconds: float = 0.0) -> None:
        """Take a sample (on the poller thread, or from a test): into the model, to the
        recorder, then a render request to the UI thread."""
        if not self.model.apply(sample, poll_seconds):
            return
        self.samples_applied += 1
        if self._on_sample is not None:
            try:
                self._on_sample(sample)
            except Exception as exc:  # a full disk must not stop the monitor
                self.report_error(f"recording stopped: {exc}")
                self._on_sample = None
        self.post_message(SampleReady(sample))

    def set_sample_listener(self, listener: SampleListener | None) -> None:
        """Called with every sample on the poller thread (a recorder); set before polling."""
        self._on_sample = listener

    def poll_sync(self, n: int = 1) -> list[RigSample]:
        """Poll the source ``n`` times on the calling thread, as the poller would; for
        screenshots and tests that need a known history without timers."""
        samples = []
        for _ in range(n):
            sample = self.source.poll()
            self.ingest(sample, 0.0)
            samples.append(sample)
        return samples

    def report_error(self, error: str) -> None:
        self.model.fail(error)
        self.post_message(PollFailed(error))

    def on_sample_ready(self, message: SampleReady) -> None:
        self.render_model()

    def on_poll_failed(self, message: PollFailed) -> None:
        self.render_model()

    def render_model(self) -> None:
        """Render the model on the current screen (and the base screen under a modal)."""
        if not self.is_running:
            return
        with self.model.lock:
            self._show_locked()

    def _show_locked(self) -> None:
        screen = self.screen
        show = getattr(screen, "show", None)
        if show is not None:
            show(self.model)
        if screen is not self.get_screen_stack_base():
            base_show = getattr(self.get_screen_stack_base(), "show", None)
            if base_show is not None:
                base_show(self.model)

    def get_screen_stack_base(self) -> Screen[Any]:
        return self.screen_stack[0] if self.screen_stack else self.screen

    def _refresh_status(self) -> None:
        if not self.is_running:  # the timer can fire while the screens are being closed
            return
        refresh = getattr(self.screen, "refresh_status", None)
        if refresh is not None:
            with self.model.lock:
                refresh(self.model, self.busy_for())

    @property
    def nccl_state(self) -> NcclState:
        if self._nccl_state is None:
            from lltui.app.nccl_state import NcclState

            self._nccl_state = NcclState()
        return self._nccl_state

    @property
    def launch(self) -> LaunchController:
        if self._launch is None:
            from lltui.app.launch_state import LaunchController

            self._launch = LaunchController(
                lambda: self.post_message(LaunchChanged()), lambda: self.model.latest
            )
        return self._launch

    def in_background(self, work: Callable[[], None], name: str) -> None:
        """Run blocking work on a daemon thread; it reports back with messages. Not a Textual
        worker: those are joined at exit, and a hung all-reduce or nvidia-smi must not keep
        lltui from quitting (our llama-server is stopped by on_unmount either way)."""

        def run() -> None:
            try:
                work()
            except Exception as exc:  # a bug in a loader: tell the user, keep the app
                with contextlib.suppress(RuntimeError):  # the app may have gone meanwhile
                    self.call_from_thread(
                        self.notify, f"{name}: {type(exc).__name__}: {exc}", severity="error"
                    )

        threading.Thread(target=run, name=f"lltui-{name}", daemon=True).start()

    def load_topology(self) -> None:
        """Read the topology once, in a thread (nvidia-smi can take seconds)."""
        state = self.topology_state
        if state.loading or state.report is not None or state.error is not None:
            return
        state.loading = True
        self.in_background(self._read_topology, "topology")

    def _read_topology(self) -> None:
        from lltui.core.monitor.models import SourceUnavailable
        from lltui.core.topo.advice import advise
        from lltui.sources.topo import topology_for_source

        state = self.topology_state
        try:
            report = topology_for_source(self.model.info.source)
            advice = advise(report.live.topology, report.live.gpus, env=report.env)
        except (SourceUnavailable, ValueError, OSError) as exc:
            state.error = str(exc)
        else:
            state.report, state.advice = report, advice
        finally:
            state.loading = False
        self.post_message(TopologyReady())

    def view_loading(self) -> bool:
        """Whether the current view still waits for data it reads once (screenshots)."""
        if self.current_mode == "topology":
            return self.topology_state.report is None and self.topology_state.error is None
        if self.current_mode == "nccl":
            return self.nccl_state.report is None and self.nccl_state.error is None
        return False

    def load_nccl(self) -> None:
        """Find libnccl and make the findings once, in a thread (ldconfig, nvidia-smi)."""
        state = self.nccl_state
        if state.loading or state.report is not None or state.error is not None:
            return
        state.loading = True

        def work() -> None:
            from lltui.app.nccl_state import read_report

            try:
                state.report, state.error = read_report(self.model.info.source)
            except Exception as exc:  # whatever went wrong, the view must not wait forever
                state.error = f"{type(exc).__name__}: {exc}"
            finally:
                state.loading = False
                self.post_message(NcclReady())

        self.in_background(work, "nccl")

    def run_nccl_bench(self) -> None:
        state = self.nccl_state
        if state.bench_running:
            return
        state.bench_running = True
        simulated = self.model.info.simulated

        def work() -> None:
            from lltui.app.nccl_state import run_bench_text

            try:
                state.bench_text = run_bench_text(simulated)
            finally:
                state.bench_running = False
                self.post_message(NcclReady())

        self.in_background(work, "nccl-bench")
        self.post_message(NcclReady())

    def load_nccl_file(self, path: str) -> None:
        state = self.nccl_state

        def work() -> None:
            from lltui.app.nccl_state import summarize_file

            state.file_text = summarize_file(path)
            self.post_message(NcclReady())

        self.in_background(work, "nccl-file")

    def launch_action(self, what: str, *args: str) -> None:
        """Start, stop, restart or follow, on a thread (starting and stopping block)."""
        actions: dict[str, Callable[..., None]] = {
            "start": self.launch.start,
            "stop": self.launch.stop,
            "restart": self.launch.restart,
            "follow": self.launch.follow,
        }
        method = actions[what]
        self.in_background(lambda: method(*args), "launch")

    def launch_preview(self, model: str, flags: str, hostport: str) -> None:
        self._preview_generation += 1
        generation = self._preview_generation

        def work() -> None:
            from lltui.app.launch_state import preview_command

            line, note = preview_command(model, flags, hostport)
            self.post_message(LaunchPreview(line, note, generation))

        self.in_background(work, "launch-preview")

    def find_models(self) -> None:
        def work() -> None:
            from lltui.sources.model_files import find_models

            self.post_message(ModelsFound(list(find_models())))

        self.in_background(work, "models")

    def on_models_found(self, message: ModelsFound) -> None:
        show = getattr(self.screen, "show_found", None)
        if show is not None:
            show(message.models)

    def run_fit(self, request: Any) -> None:
        """Estimate on a thread; only the newest request's answer is shown."""
        from dataclasses import replace

        self._fit_generation += 1
        request = replace(request, generation=self._fit_generation)
        sample = self.model.latest

        def work() -> None:
            from lltui.app.fit_state import compute

            self.post_message(FitReady(compute(request, sample)))

        self.in_background(work, "fit")

    def on_fit_ready(self, message: FitReady) -> None:
        outcome: Any = message.outcome
        if outcome.generation != self._fit_generation:
            return  # an older request finished after a newer one was made
        self.fit_outcome = outcome
        show = getattr(self.screen, "show_fit", None)
        if show is not None:
            show()

    def carry_to_launch(self) -> None:
        """Open the launch view with the fit view's model and flags."""
        import shlex

        from lltui.app.fit_state import form_flags

        screen: Any = self.screen
        request = screen.request()
        try:
            flags = form_flags(request.fields, request.extra)
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.launch_prefill = (request.model_path, shlex.join(flags))
        self.switch_mode("launch")

    def on_launch_changed(self, message: LaunchChanged) -> None:
        show = getattr(self.screen, "show_launch", None)
        if show is not None:
            show()

    def on_launch_preview(self, message: LaunchPreview) -> None:
        if message.generation != self._preview_generation:
            return  # an older form's command, finished after a newer one was asked for
        show = getattr(self.screen, "show_preview", None)
        if show is not None:
            show(message.line, message.note)

    def on_nccl_ready(self, message: NcclReady) -> None:
        show = getattr(self.screen, "show_nccl", None)
        if show is not None:
            show()

    def on_topology_ready(self, message: TopologyReady) -> None:
        show = getattr(self.screen, "show_topology", None)
        if show is not None:
            show()

    # -- actions -------------------------------------------------------------------------
    MONITOR_ACTIONS = frozenset(
        {"cycle_sort", "reverse_sort", "cycle_window", "toggle_graphs", "select_gpu", "gpu_detail"}
    )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Monitor keys are offered only where the monitor (or its detail page) is shown."""
        return action not in self.MONITOR_ACTIONS or self.current_mode == "monitor"

    def action_next_view(self) -> None:
        modes = list(self.MODES)
        current = modes.index(self.current_mode) if self.current_mode in modes else -1
        self.switch_mode(modes[(current + 1) % len(modes)])

    def action_toggle_pause(self) -> None:
        self.model.paused = not self.model.paused
        if self.model.paused:
            self.poller.pause()
        else:
            self.poller.resume()
        self.render_model()

    def action_interval(self, direction: int) -> None:
        current = self.model.interval
        if direction > 0:
            bigger = [s for s in INTERVAL_STEPS if s > current]
            new = bigger[0] if bigger else MAX_INTERVAL
        else:
            smaller = [s for s in INTERVAL_STEPS if s < current]
            new = smaller[-1] if smaller else MIN_INTERVAL
        self.model.interval = new
        self.poller.set_interval(new)
        self.render_model()

    def action_cycle_sort(self) -> None:
        self.model.sort_index = (self.model.sort_index + 1) % len(SORT_KEYS)
        self.render_model()

    def action_sort_by(self, key: str) -> None:
        self.model.sort_index = SORT_KEYS.index(key)
        self.render_model()

    def action_reverse_sort(self) -> None:
        self.model.sort_reverse = not self.model.sort_reverse
        self.render_model()

    def action_cycle_window(self) -> None:
        self.model.window_index = (self.model.window_index + 1) % len(WINDOWS_S)
        self.render_model()

    def action_set_window(self, index: int) -> None:
        self.model.window_index = index % len(WINDOWS_S)
        self.render_model()

    def action_toggle_graphs(self) -> None:
        current = self.model.graphs
        if current is None:
            screen = self.get_screen_stack_base()
            layout = getattr(screen, "_layout", None)
            n = len(self.model.latest.gpus) if self.model.latest else 1
            current = layout(n)[1] if layout else False
        self.model.graphs = not current
        self.render_model()

    def action_select_gpu(self, step: int) -> None:
        n = len(self.model.latest.gpus) if self.model.latest else 0
        if n:
            self.model.selected = (self.model.selected + step) % n
            self.render_model()

    def select_gpu_uuid(self, uuid: str) -> None:
        """Select a GPU by its card (a click); a second click on it opens its detail."""
        sample = self.model.latest
        if sample is None:
            return
        for pos, g in enumerate(sample.gpus):
            if g.info.uuid == uuid:
                if self.model.selected == pos:
                    self.action_gpu_detail()
                else:
                    self.model.selected = pos
                    self.render_model()
                return

    def action_gpu_detail(self) -> None:
        if isinstance(self.screen, GpuDetailScreen):
            self.screen.dismiss()
            return
        sample = self.model.latest
        if sample is None or not sample.gpus:
            return
        g = sample.gpus[min(self.model.selected, len(sample.gpus) - 1)]
        self.push_screen(GpuDetailScreen(g.info.uuid))

    def action_help(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()


def create_app(
    settings: Settings,
    *,
    source: GpuSource | None = None,
    info: RigInfo | None = None,
    clock: Callable[[], float] = time.monotonic,
    poll_limit: int | None = None,
    start_polling: bool = True,
    on_sample: SampleListener | None = None,
    view: str = "monitor",
    replay: ReplayOptions | None = None,
) -> LltuiApp:
    """Build the app for a source (opened here from ``settings.source`` when not given).

    Raises SourceUnavailable or ValueError with one line when the source cannot be opened.
    """
    if source is None:
        from lltui.sources.registry import open_source

        source, info = open_source(settings.source, replay=replay)
    elif info is None:
        info = source.open()
    return LltuiApp(
        source,
        info,
        settings,
        clock=clock,
        poll_limit=poll_limit,
        start_polling=start_polling,
        on_sample=on_sample,
        view=view,
    )
