"""The launch view: a settings form, the exact command, start / stop / restart, the server's
state and per-device placement, tokens/s and J/token, the balance of the GPUs, its log."""

from __future__ import annotations

import shlex
import time

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Container, Grid, Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.widgets import Button, Input, Label, RichLog, Static

from lltui.app.background import off_thread_reported
from lltui.app.messages import LaunchPreview
from lltui.app.rig_model import RigModel
from lltui.app.screens.base import FormScreen, field_input
from lltui.app.state.launch import DEFAULT_HOSTPORT, FormFlags, preview_command
from lltui.app.widgets.fitted_table import FittedTable, columns_that_fit
from lltui.app.widgets.router_table import RouterTable
from lltui.core.cmdline.args import LlamaArgs
from lltui.core.memory.kv_fill import fill_line
from lltui.core.monitor.balance import imbalances
from lltui.core.monitor.plan_reality import plan_line
from lltui.core.text import printable
from lltui.core.units import MIB, compact_indexes, fmt_bytes, fmt_duration, fmt_pct, spark
from lltui.services.launch.state import LaunchState

PHASE_STYLE = {
    "ready": "$gpu-ok",
    "loading": "$gpu-warn",
    "starting": "$gpu-warn",
    "following": "$primary",
    "stopping": "$gpu-warn",
    "exited": "$text-muted",
    "error": "$error",
    "idle": "$text-muted",
}
# (label, width) in their order on screen
PLACEMENT_COLUMNS = (("device", 16), ("model MiB", 10), ("KV MiB", 8), ("compute MiB", 11),
                     ("out MiB", 8), ("layers", 12), ("predicted MiB", 16))  # fmt: skip
# kept in this order while the table has room for them, so the last goes first: the output
# buffer (a MiB or two of the host's, none on a GPU), then lltui's prediction (the check's
# line under the rates says how it compares), then the layers (only a -v log names them)
PLACEMENT_KEPT = ("device", "model MiB", "KV MiB", "compute MiB", "layers", "predicted MiB",
                  "out MiB")  # fmt: skip


def placement_columns(width: int, padding: int = 1) -> tuple[str, ...]:
    """The most useful columns a table ``width`` cells wide shows whole (each cell with
    ``padding`` either side), in their order on screen; the device's is always there."""
    return columns_that_fit(dict(PLACEMENT_COLUMNS), PLACEMENT_KEPT, width, padding)


class PlacementTable(FittedTable[str]):
    """The server's placement, one row a device: the columns are chosen by the table's own
    width (placement_columns), again whenever it changes, so it never scrolls sideways."""

    COLUMNS = tuple((label, label, width) for label, width in PLACEMENT_COLUMNS)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(cursor_type="none", id=id)

    def columns_for(self, width: int) -> tuple[str, ...]:
        return placement_columns(width, self.cell_padding)


def predicted_cell(st: LaunchState, name: str, logged_mib: float) -> str:
    """lltui's prediction for a device beside what its log printed: total and difference."""
    found = st.check.device(name) if st.check is not None else None
    if found is None or not found.predicted:
        return "-"
    pred = found.predicted_bytes / MIB
    return f"{pred:.2f} ({pred - logged_mib:+.2f})"


def render_server(st: LaunchState) -> str:
    style = PHASE_STYLE.get(st.phase, "$text")
    head = f"[b {style}]{st.phase.upper()}[/]"
    if st.pid:
        head += f"  pid {st.pid}"
    proxy = st.router.on_demand_url if st.router is not None else None
    if st.url and proxy:  # clients connect to the proxy: the router behind it is private
        head += f"  on demand at {escape(proxy)} (the router at {escape(st.url)})"
    elif st.url:
        head += f"  {escape(st.url)}"
    if st.health:
        head += f"  /health: {escape(st.health)}"
    if st.offload:
        head += f"  {escape(st.offload)}"
    if st.rates.slots_busy is not None:
        head += f"  slots busy {st.rates.slots_busy}"
    lines = [head]
    if st.message:
        lines.append(escape(st.message))
    if st.phase == "exited" and st.exit is not None and st.exit.log_tail:
        lines.append("[$text-muted]last log lines:[/]")
        lines += [f"  [$text-muted]{escape(line)}[/]" for line in st.exit.log_tail[-6:]]
    return "\n".join(lines)


def render_rates(st: LaunchState, width: int, now: float | None = None) -> str:
    """Tokens/s and J/token with their history. Between requests the rates from the
    server's counters fall to 0: the last request's own figures (its timing lines) are
    shown then, said to be the last request's."""
    spark_w = max(10, width - 34)
    lines = []
    rates, speed = st.rates, st.speed
    idle = not rates.slots_busy
    last_request = speed.last_request
    for label, values, unit, from_log in (
        ("generation", rates.gen_tps, "tok/s", last_request.gen_tps if last_request else None),
        ("prompt", rates.prompt_tps, "tok/s", last_request.prompt_tps if last_request else None),
        ("energy", rates.jpt, "J/tok", None),
    ):
        value = values[-1] if values else None
        if from_log is not None and (value is None or (idle and value <= 0)):
            value = from_log  # what the last request got, not a rate decayed to 0
        last = f"{value:8.2f} {unit}" if value is not None else f"{'-':>8} {unit}"
        hi = max(values) if values else 1.0
        lines.append(f"{label:<11}{last}  [$spark]{spark(values, spark_w, 0.0, hi or 1.0)}[/]")
    if last_request is not None:
        ago = ""
        if now is not None and speed.last_request_at is not None:
            ago = f" ({fmt_duration(now - speed.last_request_at)} ago)"
        lines.append(f"[$text-muted]last request{ago}: {escape(last_request.line())}[/]")
    if not rates.jpt and rates.jpt_note:
        lines.append(f"[$text-muted]J/token: {escape(rates.jpt_note)}[/]")
    if speed.predicted_decode_tps is not None and speed.predicted_prefill_tps is not None:
        # fit's prediction for this command, to hold the measured rates against
        lines.append(
            f"[$text-muted]predicted: generation ~{speed.predicted_decode_tps:.0f} tok/s, "
            f"prompt ~{speed.predicted_prefill_tps:.0f} tok/s"
            + (f"; {escape(speed.calibrated)}" if speed.calibrated else "")
            + "[/]"
        )
    for check in (speed.latest(prompt=False), speed.latest(prompt=True)):
        if check is not None:
            # the server's own timing of its last request against the prediction at its size
            tone = "$warning" if check.large_miss else "$text-muted"
            said = f"; {check.calibration}" if check.calibration else ""
            lines.append(f"[{tone}]served {escape(check.line() + said)}[/]")
    if speed.kept:
        lines.append(f"[$text-muted]{escape(speed.kept)}[/]")
    if rates.tokens_total is not None:
        lines.append(f"[$text-muted]generated so far: {rates.tokens_total:.0f} tokens[/]")
    if st.kv is not None:
        lines.append(escape(fill_line(st.kv)))
    elif st.kv_note is not None:
        lines.append(f"[$text-muted]{escape(st.kv_note)}[/]")
    cache = st.log_summary.prompt_cache if st.log_summary is not None else None
    if cache is not None and st.phase in ("ready", "following"):
        lines.append(f"[$text-muted]{escape(cache.line)}[/]")
    if st.plan is not None and st.plan.rows:
        lines.append(escape(plan_line(st.plan)))
    for v in st.verdicts:
        lines.append(
            f"[$warning]{escape(v.kind)}[/]: {escape(v.evidence)}; try: {escape(v.suggestion)}"
        )
    if st.check is not None:
        lines.append(f"[$text-muted]{escape(st.check.summary)}[/]")
    return "\n".join(lines)


def render_balance(model: RigModel, pid: int | None) -> str:
    sample = model.latest
    if sample is None:
        return ""
    found = imbalances(sample)
    # the server's own; with none running, the rig's first (another process's: named by pid)
    ours = [im for im in found if im.pid == pid] if pid is not None else found
    if not ours:
        if pid is not None:
            return (
                f"[$text-muted]balance: the server (pid {pid}) is not spread over several GPUs[/]"
            )
        return "[$text-muted]balance: no process spans several GPUs[/]"
    im = ours[0]
    parts = [
        f"[b]balance[/b] {escape(im.name)} (pid {im.pid}) on GPU "
        f"{compact_indexes(im.gpu_indexes)}: {im.level} (its memory ±{fmt_pct(im.vram_spread)})"
    ]
    gpu_w = max(len(f"GPU{idx}") for idx in im.gpu_indexes)  # GPU10 under GPU9 in columns
    for idx, own, vram, util, power in zip(
        im.gpu_indexes, im.own_bytes, im.vram_pct, im.util_pct, im.power_pct, strict=True
    ):
        held = fmt_bytes(own) if own is not None else "?"
        parts.append(
            f"  {f'GPU{idx}':<{gpu_w}}  its {held:>9}  VRAM {fmt_pct(vram):>4}  "
            f"util {fmt_pct(util):>4}  power {fmt_pct(power):>4}"
        )
    for nb in im.neighbours[:3]:
        held = fmt_bytes(nb.used_bytes) if nb.used_bytes is not None else "?"
        parts.append(
            f"  [$text-muted]beside it: {escape(nb.name)} (pid {nb.pid}) {held} on GPU "
            f"{compact_indexes(nb.gpu_indexes)}[/]"
        )
    return "\n".join(parts)


class LaunchScreen(FormScreen):
    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="launch-page", classes="form-page"):
            with Grid(id="launch-form", classes="form-grid"):
                yield Label("model", classes="form-label")
                yield field_input(
                    "model.gguf, or a models folder or preset.ini (a router)", "launch-model"
                )
                yield Label("listen", classes="form-label")
                yield field_input("", "launch-hostport", DEFAULT_HOSTPORT)
                yield Label("flags", classes="form-label")
                yield field_input(
                    "llama-server flags: -c 8192 -ngl all -sm layer -ts 3,1 -np 2", "launch-flags"
                )
            with Horizontal(id="launch-actions"):
                yield Button("Start", id="launch-start", variant="success", compact=True)
                yield Button("Stop", id="launch-stop", variant="error", compact=True)
                yield Button("Restart", id="launch-restart", compact=True)
                force = Button("Start anyway", id="launch-force", variant="warning", compact=True)
                force.display = False  # shown once fit has refused a start
                yield force
                yield field_input("or follow a running server: URL", "launch-url")
                yield Button("Follow", id="launch-follow", compact=True)
            yield Static("", id="launch-argv")
            yield Static("[$text-muted]no server[/]", id="launch-server")
            yield RouterTable(id="launch-models")
            yield Static("", id="launch-model-detail")
            yield Static("", id="launch-router-note")
            with Container(id="launch-middle"):
                yield PlacementTable(id="launch-placement")
                with Vertical(id="launch-side"):
                    yield Static("", id="launch-rates")
                    yield Static("", id="launch-balance")
            # wrapped, not cut: llama-server's timing lines are read whole at 80 columns
            yield RichLog(max_lines=2000, wrap=True, min_width=20, id="launch-log")

    def __init__(self) -> None:
        super().__init__()
        self._lines_shown = 0
        self._carried: tuple[str, LlamaArgs] | None = None  # (flags text, the fit settings)

    def on_mount(self) -> None:
        self._take_prefill()
        self.render_all()

    def _take_prefill(self) -> None:
        """Settings carried from the fit view, taken once."""
        prefill = self.lltui.launch_prefill
        if prefill:
            self.prefill(*prefill)
            self.lltui.launch_prefill = None

    def prefill(self, model: str, args: LlamaArgs) -> None:
        """The fit view's model and settings: the flags show as text (to read and edit), and
        the settings themselves are launched while that text is left as it is."""
        text = shlex.join(args.to_argv())
        self._carried = (text, args)
        self.query_one("#launch-model", Input).value = model
        self.query_one("#launch-flags", Input).value = text
        self.update_preview()

    def on_screen_resume(self) -> None:
        self._take_prefill()  # (ViewScreen.on_screen_resume then renders it all)

    # -- the form ------------------------------------------------------------------------
    @property
    def carried(self) -> LlamaArgs | None:
        """The settings carried from the fit view while their flags are left unedited."""
        if self._carried is None or not self.is_mounted:
            return None
        text, args = self._carried
        return args if self.query_one("#launch-flags", Input).value == text else None

    def _form(self) -> tuple[str, FormFlags, str]:
        typed = self.query_one("#launch-flags", Input).value
        # unedited: the fit view's settings themselves, not their text read again
        flags: FormFlags = self.carried or typed
        return (
            self.query_one("#launch-model", Input).value,
            flags,
            self.query_one("#launch-hostport", Input).value,
        )

    def update_preview(self) -> None:
        latest = self.lltui.model.latest
        n_gpus = None if latest is None else sum(1 for g in latest.gpus if not g.lost)
        self._preview(*self._form(), n_gpus, self.next_generation())

    @work(group="launch-preview", exclusive=True, exit_on_error=False)
    async def _preview(
        self, model: str, flags: FormFlags, hostport: str, n_gpus: int | None, generation: int
    ) -> None:
        found = await off_thread_reported(
            self, lambda: preview_command(model, flags, hostport, n_gpus), "launch-preview"
        )
        if found is not None:
            self.post_message(LaunchPreview(*found, generation))

    @on(LaunchPreview)
    def _preview_ready(self, message: LaunchPreview) -> None:
        if message.generation != self.generation:
            return  # an older form's command, finished after a newer one was asked for
        self.show_preview(message.line, message.note)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id in ("launch-model", "launch-flags", "launch-hostport"):
            self.update_preview()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "launch-url":
            self.lltui.launch_action("follow", event.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        ident = event.button.id or ""
        # restart starts what the form shows now (it ran the last one's)
        if ident in ("launch-start", "launch-restart"):
            self.lltui.launch_action("start", *self._form())
        elif ident == "launch-stop":
            self.lltui.launch_action("stop")
        elif ident == "launch-force":
            self.lltui.launch_action("force")
        elif ident == "launch-follow":
            self.lltui.launch_action("follow", self.query_one("#launch-url", Input).value)

    @on(RouterTable.DetailChanged)
    def _model_detail(self, message: RouterTable.DetailChanged) -> None:
        self.query_one("#launch-model-detail", Static).update(Text(message.text))

    @on(RouterTable.ActionWanted)
    def _router_action(self, message: RouterTable.ActionWanted) -> None:
        self.lltui.launch_action("router", message.what, message.name)

    # -- rendering -----------------------------------------------------------------------
    def show(self, model: RigModel) -> None:
        self.refresh_status(model, None)
        if self.is_mounted:
            st = self.lltui.launch.state
            pid = st.pid or (st.plan.pid if st.plan is not None else None)  # or followed
            self.query_one("#launch-balance", Static).update(render_balance(model, pid))

    def show_preview(self, line: str, note: str | None) -> None:
        if not self.is_mounted:
            return
        argv = self.query_one("#launch-argv", Static)
        if line:
            text = f"[b]command[/b] {escape(line)}"
            if note:
                text += f"\n[$text-muted]{escape(note)}[/]"
        else:
            text = f"[$warning]{escape(note or '')}[/]"
        argv.update(text)

    def show_view(self) -> None:
        # (a server's last change can come while the app closes and its widgets are gone)
        if not self.is_mounted or not self.query("#launch-server"):
            return
        st = self.lltui.launch.state
        self.query_one("#launch-server", Static).update(render_server(st))
        width = self.query_one("#launch-rates", Static).size.width or 60
        rates = render_rates(st, width, time.monotonic())
        self.query_one("#launch-rates", Static).update(rates)
        self._show_placement(st)
        self._show_router(st)
        log = self.query_one("#launch-log", RichLog)
        if st.log.total < self._lines_shown:  # a new server: start the pane over
            log.clear()
            self._lines_shown = 0
        for line in st.log.since(self._lines_shown):
            log.write(Text(printable(line, one_line=True)))
        self._lines_shown = st.log.total
        busy = st.phase in ("starting", "loading", "ready", "stopping", "following")
        self.query_one("#launch-start", Button).disabled = st.phase in ("starting", "stopping")
        self.query_one("#launch-force", Button).display = st.refused_plan
        self.query_one("#launch-stop", Button).disabled = not busy

    def _show_router(self, st: LaunchState) -> None:
        """A router's models in place of one server's placement."""
        view = st.router
        table = self.query_one("#launch-models", RouterTable)
        table.display = view is not None
        self.query_one("#launch-placement", PlacementTable).display = view is None
        note = self.query_one("#launch-router-note", Static)
        note.display = view is not None
        self.query_one("#launch-model-detail", Static).display = view is not None
        if view is not None:
            table.show_rows(view.rows, time.monotonic())
            keys = "l load, u unload, k keep (on the selected model)"
            if view.on_demand_url:
                keys = f"models load on demand at {view.on_demand_url}; {keys}"
            note.update(Text(f"{view.note}\n{keys}" if view.note else keys))

    def _show_placement(self, st: LaunchState) -> None:
        rows = {}
        for dev in st.placement:
            cells = (
                escape(dev.name),  # "RPC0[127.0.0.1:50052]": brackets are not markup here
                f"{dev.model_mib:.2f}",
                f"{dev.kv_mib:.2f}",
                f"{dev.compute_mib:.2f}",
                f"{dev.output_mib:.2f}",
                compact_indexes(dev.layers) if dev.layers else "-",
                predicted_cell(st, dev.name, dev.total_mib),
            )
            rows[dev.name] = dict(zip((c for c, _w in PLACEMENT_COLUMNS), cells, strict=True))
        self.query_one("#launch-placement", PlacementTable).show_cells(rows)
