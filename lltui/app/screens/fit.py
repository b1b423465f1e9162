"""The fit view: a GGUF and llama-server settings in, per-GPU stacked bars (weights, KV,
compute, margin against free memory), the layer map and the quant table out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, VerticalScroll
from textual.markup import escape
from textual.timer import Timer
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from lltui.app.background import off_thread_reported
from lltui.app.messages import FitReady, ModelsFound
from lltui.app.screens.base import FormScreen
from lltui.app.state.fit import FIELD_FLAGS, LIVE, FitOutcome, FitRequest, compute, form_flags
from lltui.core.speed.model import speed_line
from lltui.core.units import MIB, compact_indexes, fmt_bytes
from lltui.sources.gpu.sim import PROFILES

if TYPE_CHECKING:
    from lltui.core.monitor.models import RigSample
    from lltui.sources.models.files import ModelFile

BAR_WIDTH = 40  # at most; narrower terminals get a shorter bar (bar_width)
BAR_MIN_WIDTH = 10
BAR_LINE_REST = 52  # the device name, sizes, verdict and layers around a bar


def bar_width(columns: int) -> int:
    """The stacked bar's length for a results area ``columns`` wide, so a device is one line."""
    return max(BAR_MIN_WIDTH, min(BAR_WIDTH, columns - BAR_LINE_REST))


QUANT_COLUMNS = (
    ("type", 10),
    ("file", 11),
    ("bpw", 6),
    ("fits", 5),
    ("max ctx", 8),
    ("t/s", 6),
)


def stacked_bar(parts: list[tuple[int, str]], capacity: int, width: int) -> str:
    """Segments (bytes, theme variable) on a bar of ``capacity`` bytes; overflow shows red."""
    if capacity <= 0:
        return ""
    out = []
    used_cells = 0
    total = sum(b for b, _ in parts)
    for nbytes, var in parts:
        cells = round(width * nbytes / capacity)
        cells = min(cells, width - used_cells)
        if cells > 0:
            out.append(f"[{var}]{'█' * cells}[/]")
            used_cells += cells
    rest = width - used_cells
    if total > capacity:
        return "".join(out) + "[b $error]▶[/]"
    return "".join(out) + f"[on $bar-empty]{' ' * rest}[/]"


def render_devices(outcome: FitOutcome, width: int = BAR_WIDTH) -> str:
    res = outcome.result
    if res is None:
        return ""
    n_all = res.model.n_layer
    lines = [
        "[$bar-vram]█[/] weights  [$bar-util]█[/] KV cache  [$bar-power]█[/] compute"
        "  [$text-muted]█[/] margin (CUDA context, pool)"
    ]
    for d in res.devices:
        if d.kind == "cpu":
            continue
        capacity = d.free_bytes or d.total_bytes + d.unaccounted_bytes
        bar = stacked_bar(
            [
                (d.weights_bytes, "$bar-vram"),
                (d.kv_bytes, "$bar-util"),
                (d.compute_bytes, "$bar-power"),
                (d.unaccounted_bytes, "$text-muted"),
            ],
            capacity,
            width,
        )
        verdict = "-" if d.fits is None else ("[$gpu-ok]fits[/]" if d.fits else "[b $error]NO[/]")
        free = "-" if d.free_bytes is None else f"{d.free_bytes / MIB:.0f}"
        layers = [il for il in d.layers if il < n_all]
        out = " +out" if d.output_layer else ""
        lines.append(
            f"[b]{escape(d.name):<8}[/]{bar} {(d.total_bytes + d.unaccounted_bytes) / MIB:>7.0f}"
            f"/{free} MiB {verdict}  layers {compact_indexes(layers) or '-'}{out}"
        )
        others = [(k, b) for k, b in d.parts if k != "model" and b]
        if others:
            shares = ", ".join(f"{k} {b / MIB:.0f}" for k, b in others)
            lines.append(f"[$text-muted]{'':<8}of which {shares} MiB[/]")
    h = res.host
    lines.append(
        f"[b]host[/b]    weights {fmt_bytes(h.weights_bytes)}"
        + (f" ({fmt_bytes(h.mapped_bytes)} mapped)" if h.mapped_bytes else "")
        + f", KV {fmt_bytes(h.kv_bytes)}, output {fmt_bytes(h.output_bytes)},"
        f" compute {fmt_bytes(h.compute_bytes)}"
    )
    return "\n".join(lines)


def render_verdict(outcome: FitOutcome) -> str:
    if outcome.error:
        return f"[b $error]{escape(outcome.error)}[/]"
    res = outcome.result
    if res is None:
        return ""
    r = res.resolved
    m = res.model
    head = (
        f"[b]{escape(m.name or m.path)}[/b] {escape(m.architecture)}"
        f" {escape(m.file_type or '')}, {m.n_layer} layers, context {r.n_ctx}"
        f" ({r.n_seq_max} slot(s)), KV {r.type_k}/{r.type_v}, on {escape(outcome.device_label)}"
    )
    verdict = "[b $gpu-ok]fits[/]" if res.fits else "[b $error]does not fit[/]"
    lines = [
        head,
        f"{verdict}" + (f"; largest context that fits: {res.max_ctx}" if res.max_ctx else ""),
    ]
    for s in res.suggestions:
        lines.append(f"  try [b]{escape(' '.join(s.flags))}[/b]: {escape(s.reason)}")
    if res.speed is not None:
        lines.append(escape(speed_line(res.speed)))
    for seen in outcome.measured:
        lines.append(f"[$text-muted]{escape(seen)}[/]")
    for w in (*res.warnings, *outcome.notes):
        lines.append(f"[$warning]note:[/] {escape(w)}")
    return "\n".join(lines)


class FitScreen(FormScreen):
    CSS_PATH = "forms.tcss"  # read when a form is first shown, not at startup
    # the form lays out its fields by the terminal's width (classes on the screen, forms.tcss)

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="fit-page", classes="form-page"):
            with Grid(id="fit-source", classes="form-grid"):
                yield Label("model", classes="form-label")
                yield Input(placeholder="path to a .gguf file", id="fit-model", compact=True)
                yield Label("found", classes="form-label")
                yield Select[str](
                    [], prompt="models found", id="fit-found", allow_blank=True, compact=True
                )
            with Grid(id="fit-fields", classes="form-grid"):
                for ident, flag, label in FIELD_FLAGS:
                    yield Label(f"{label} ({flag})", classes="form-label")
                    yield Input(placeholder="default", id=f"fit-{ident}", compact=True)
            with Grid(id="fit-more", classes="form-grid"):
                yield Label("more flags", classes="form-label")
                yield Input(
                    placeholder="more flags (-ot, --cpu-moe, --rpc HOST:PORT ...)",
                    id="fit-extra",
                    compact=True,
                )
                yield Label("GPUs", classes="form-label")
                with Horizontal(id="fit-target"):
                    yield Select[str](
                        self._device_options(),
                        value=LIVE,
                        id="fit-devices",
                        allow_blank=False,
                        compact=True,
                    )
                    yield Button("Launch with these", id="fit-launch", compact=True)
            yield Static("", id="fit-verdict")
            yield Static("", id="fit-bars")
            yield DataTable(id="fit-quants", cursor_type="row")

    def _device_options(self) -> list[tuple[str, str]]:
        opts = [("this rig, free memory now", LIVE)]
        opts += [(f"{name} (empty)", f"sim:{name}") for name in PROFILES]
        return opts

    def __init__(self) -> None:
        super().__init__()
        self.outcome: FitOutcome | None = None  # the newest request's estimate
        self._debounce: Timer | None = None
        self._quant_keys: list[str] = []

    def on_mount(self) -> None:
        table = self.query_one("#fit-quants", DataTable)
        for label, width in QUANT_COLUMNS:
            table.add_column(label, key=label, width=width)
        table.add_column("per GPU (MiB)", key="devices")
        info = self.lltui.model.info
        if info.simulated and info.source.startswith("sim:"):
            # a simulated rig is busy with its own server: size against it empty
            self.query_one("#fit-devices", Select).value = info.source
        self._find_models()
        self.render_all()

    def show_view(self) -> None:
        self.show_fit()

    def on_resize(self) -> None:
        self.show_fit()  # the bars' length follows the width

    # -- the form ------------------------------------------------------------------------
    def request(self) -> FitRequest:
        fields = {
            ident: self.query_one(f"#fit-{ident}", Input).value for ident, _f, _l in FIELD_FLAGS
        }
        devices = self.query_one("#fit-devices", Select).value
        return FitRequest(
            generation=0,
            model_path=self.query_one("#fit-model", Input).value,
            fields=fields,
            extra=self.query_one("#fit-extra", Input).value,
            devices=devices if isinstance(devices, str) else LIVE,
        )

    @property
    def settled(self) -> bool:
        """No estimate is waiting on its debounce and the newest request has its answer."""
        return (
            self._debounce is None
            and self.outcome is not None
            and self.outcome.generation == self.generation
        )

    FIT_DEBOUNCE_S = 0.3  # typing "16384" asks for one estimate, not five

    def _changed(self) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(self.FIT_DEBOUNCE_S, self._run_fit)

    def _run_fit(self) -> None:
        """Estimate the form as it is now; only the newest request's answer is shown."""
        self._debounce = None
        request = replace(self.request(), generation=self.next_generation())
        self._estimate(request, self.lltui.model.latest)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._changed()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "fit-model":  # a path is estimated when submitted or picked
            self._changed()

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "fit-found" and isinstance(event.value, str):
            self.query_one("#fit-model", Input).value = event.value
        self._changed()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "fit-launch":
            self.carry_to_launch()

    def carry_to_launch(self) -> None:
        """Open the launch view with this form's model and flags."""
        from lltui.core.llama.args import parse_llama_args

        request = self.request()
        try:
            args = parse_llama_args(form_flags(request.fields, request.extra))
        except ValueError as exc:
            self.notify(str(exc), severity="error")
            return
        self.lltui.launch_prefill = (request.model_path, args)
        self.app.switch_mode("launch")

    # -- workers: each result comes back as a message to this screen -----------------------
    @work(group="fit-models", exclusive=True, exit_on_error=False)
    async def _find_models(self) -> None:
        from lltui.sources.models.files import find_models

        models = await off_thread_reported(self, find_models, "models")
        if models is not None:
            self.post_message(ModelsFound(tuple(models)))

    @work(group="fit", exclusive=True, exit_on_error=False)
    async def _estimate(self, request: FitRequest, sample: RigSample | None) -> None:
        """A newer request cancels this one; its answer, if it still comes, is dropped."""
        outcome = await off_thread_reported(self, lambda: compute(request, sample), "fit")
        if outcome is not None:
            self.post_message(FitReady(outcome))

    @on(ModelsFound)
    def _models_found(self, message: ModelsFound) -> None:
        self.show_found(message.models)

    @on(FitReady)
    def _fit_ready(self, message: FitReady) -> None:
        if not self.is_newest(message.outcome.generation):
            return  # an older request finished after a newer one was made
        self.outcome = message.outcome
        self.show_fit()

    # -- results -------------------------------------------------------------------------
    def show_found(self, models: Sequence[ModelFile]) -> None:
        if not self.is_mounted:
            return
        options = [(f"{fmt_bytes(m.size):>9}  {m.path}", m.path) for m in models]
        self.query_one("#fit-found", Select).set_options(options)

    def show_fit(self) -> None:
        outcome = self.outcome
        if outcome is None or not self.is_mounted:
            return
        self.query_one("#fit-verdict", Static).update(render_verdict(outcome))
        bars = self.query_one("#fit-bars", Static)
        bars.update(render_devices(outcome, bar_width(bars.size.width or self.size.width)))
        table = self.query_one("#fit-quants", DataTable)
        rows = []
        for q in outcome.quants:
            row = q.row
            if q.result is None:
                rows.append((row.name, "-", "-", "-", "-", "-", escape(q.error or "")))
                continue
            per_dev = " ".join(
                f"{d.name}:{(d.total_bytes + d.unaccounted_bytes) / MIB:.0f}"
                for d in q.result.devices
                if d.kind != "cpu"
            )
            rows.append(
                (
                    row.name + ("*" if row.requires_imatrix else ""),
                    fmt_bytes(row.file_bytes),
                    f"{row.bits_per_weight:.2f}",
                    "yes" if q.fits else "no",
                    str(q.max_ctx or "-"),
                    f"{q.decode_tps:.0f}" if q.decode_tps and q.fits else "-",
                    per_dev,
                )
            )
        keys = [r[0] for r in rows]
        if keys != self._quant_keys:
            for key in self._quant_keys:
                table.remove_row(key)
            for r in rows:
                table.add_row(*r, key=r[0])
            self._quant_keys = keys
        else:
            columns = [label for label, _w in QUANT_COLUMNS] + ["devices"]
            for r in rows:
                for col, value in zip(columns, r, strict=True):
                    table.update_cell(r[0], col, value)
