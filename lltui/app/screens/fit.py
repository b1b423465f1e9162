"""The fit view: a GGUF and llama-server settings in, per-GPU stacked bars (weights, KV,
compute, margin against free memory), the layer map and the quant table out."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.markup import escape
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Button, DataTable, Input, Label, Select, Static

from lltui.app.background import off_thread_reported
from lltui.app.messages import FitReady, ModelsFound, PlanReady, QuantsReady
from lltui.app.screens.base import FormScreen, field_input
from lltui.app.state.fit import (
    FIELD_FLAGS,
    LIVE,
    FitOutcome,
    FitRequest,
    compute_estimate,
    compute_plan,
    compute_quants,
    form_flags,
    plan_text,
)
from lltui.core.fit.fewer import hint_heading
from lltui.core.speed.model import speed_line
from lltui.core.text import counted
from lltui.core.units import MIB, compact_indexes, compact_names, fmt_bytes
from lltui.services.devices import sim_profile_names

if TYPE_CHECKING:
    from lltui.core.fit.quant_table import QuantFit
    from lltui.core.gguf.refs import ModelFile
    from lltui.core.memory.results import DeviceEstimate
    from lltui.core.monitor.models import RigSample

BAR_WIDTH = 40  # at most; narrower terminals get a shorter bar (bar_width)
BAR_MIN_WIDTH = 10
BAR_LINE_REST = 52  # the device name, sizes, verdict and layers around a bar


def bar_width(columns: int) -> int:
    """The stacked bar's length for a results area ``columns`` wide, so a device is one line."""
    return max(BAR_MIN_WIDTH, min(BAR_WIDTH, columns - BAR_LINE_REST))


# (key, heading, width where the table is wide, width at 80 columns)
QUANT_COLUMNS: tuple[tuple[str, str, int, int], ...] = (
    ("type", "type", 10, 9),
    ("file", "file", 11, 9),
    ("bpw", "bpw", 6, 5),
    ("fits", "fits", 5, 4),
    ("max ctx", "max ctx", 8, 7),
    ("t/s", "t/s", 6, 5),
)
FULLEST_W = 16  # "CUDA7 81234": the GPU the quant fills most, and its MiB
QUANT_WIDE_AT = 100  # table widths from here on get the wide cells
PER_GPU_CELL = 6  # "81234 " a GPU in the per-GPU column


@dataclass(frozen=True, slots=True)
class QuantLayout:
    """The quant table's columns for a width: the cells, the fullest GPU, and each GPU's
    MiB where there is room for them all."""

    wide: bool
    per_gpu: int  # width of the per-GPU column; 0: not shown
    devices: tuple[str, ...]  # the GPUs it lists, in order

    @property
    def keys(self) -> list[str]:
        keys = [key for key, _h, _w, _n in QUANT_COLUMNS] + ["fullest"]
        return keys + (["per-gpu"] if self.per_gpu else [])


def quant_layout(width: int, devices: Sequence[str]) -> QuantLayout:
    """Columns for a table ``width`` cells wide over ``devices``."""
    wide = width >= QUANT_WIDE_AT
    used = sum((w if wide else n) + 2 for _k, _h, w, n in QUANT_COLUMNS) + FULLEST_W + 2
    need = PER_GPU_CELL * len(devices)
    per_gpu = need if len(devices) > 1 and width - used - 2 >= need else 0
    return QuantLayout(wide, per_gpu, tuple(devices) if per_gpu else ())


def quant_cells(q: QuantFit, layout: QuantLayout) -> tuple[str, ...]:
    """One quant's row, in the layout's column order."""
    row = q.row
    name = row.name + ("*" if row.requires_imatrix else "")
    if q.result is None:
        cells = [name, "-", "-", "-", "-", "-", escape(q.error or "")]
        return tuple(cells + ([""] if layout.per_gpu else []))
    gpus = [d for d in q.result.devices if d.kind != "cpu"]
    cells = [
        name,
        file_cell(row.file_bytes, layout.wide),
        f"{row.bits_per_weight:.2f}",
        q.fits_word,
        str(q.max_ctx or "-"),
        f"{q.decode_tps:.0f}" if q.decode_tps and q.fits else "-",
        fullest_gpu(gpus),
    ]
    if layout.per_gpu:
        used = {d.name: d.total_bytes + d.unaccounted_bytes for d in gpus}
        cells.append(
            " ".join(f"{used[n] / MIB:.0f}" if used.get(n) else "-" for n in layout.devices)
        )
    return tuple(cells)


def file_cell(n: int, wide: bool) -> str:
    """The file size, whole units where the narrow column has no room for a decimal
    (``1023 MiB``, not a cut ``1023.5 MiB``)."""
    text = fmt_bytes(n)
    narrow = next(cells for key, _h, _w, cells in QUANT_COLUMNS if key == "file")
    return text if wide or len(text) <= narrow else fmt_bytes(n, precision=0)


NAME_W = 8  # a device's name before its bar ("CUDA12"); longer ones widen it, up to:
NAME_MAX_W = 16


def device_label(name: str, width: int) -> str:
    """A device's name in ``width`` columns: an RPC server's ``RPC0[192.168.100.200:50052]``
    keeps its tail, which tells two servers apart (``RPC0[…200:50052]``)."""
    if len(name) <= width:
        return name
    head, bracket, inner = name.partition("[")
    if bracket and inner.endswith("]") and len(head) + 3 < width:
        return f"{head}[…{inner[:-1][-(width - len(head) - 3) :]}]"
    return name[: width - 1] + "…"


def fullest_gpu(gpus: Sequence[DeviceEstimate]) -> str:
    """``CUDA7 2101``: the GPU this fills most (of its free memory), and its MiB."""
    holding = [d for d in gpus if d.total_bytes > 0]
    if not holding:
        return "-"
    d = max(
        holding,
        key=lambda d: (d.total_bytes + d.unaccounted_bytes) / (d.free_bytes or d.total_bytes),
    )
    mib = f"{(d.total_bytes + d.unaccounted_bytes) / MIB:.0f}"
    return f"{escape(device_label(d.name, FULLEST_W - len(mib) - 1))} {mib}"


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
    idle: list[str] = []  # GPUs that hold nothing, said together on one line
    # names past 8 columns (RPC servers) take them from the bar: a device stays one line
    name_w = min(NAME_MAX_W, max([NAME_W, *(len(d.name) for d in res.devices)]))
    width = max(BAR_MIN_WIDTH, width - (name_w - NAME_W))

    def flush_idle() -> None:
        if idle:
            verb = "hold" if len(idle) > 1 else "holds"
            lines.append(
                f"[b]{compact_names(idle)}[/b] [$text-muted]{verb} nothing of the model "
                "(only the margin each GPU keeps)[/]"
            )
            idle.clear()

    for d in res.devices:
        if d.kind == "cpu":
            continue
        if d.kind == "cuda" and not d.layers and d.total_bytes == 0 and d.fits is not False:
            idle.append(d.name)
            continue
        flush_idle()
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
            f"[b]{escape(device_label(d.name, name_w).ljust(name_w))}[/]{bar} "
            f"{(d.total_bytes + d.unaccounted_bytes) / MIB:>7.0f}"
            f"/{free} MiB {verdict}  layers {compact_indexes(layers) or '-'}{out}"
        )
        others = [(k, b) for k, b in d.parts if k != "model" and b]
        if others:
            shares = ", ".join(f"{k} {b / MIB:.0f}" for k, b in others)
            lines.append(f"[$text-muted]{'':<{name_w}}of which {shares} MiB[/]")
    flush_idle()
    h = res.host
    lines.append(
        f"[b]host[/b]    weights {fmt_bytes(h.weights_bytes)}"
        + (f" ({fmt_bytes(h.mapped_bytes)} mapped)" if h.mapped_bytes else "")
        + f", KV {fmt_bytes(h.kv_bytes)}, output {fmt_bytes(h.output_bytes)},"
        f" compute {fmt_bytes(h.compute_bytes)}"
    )
    return "\n".join(lines)


def render_found(found: FoundModels | None) -> str:
    """Where the view looked for models and what it found there, for a form with none."""
    if found is None:
        return "[$text-muted]looking for .gguf files in the usual folders…[/]"
    where = ", ".join(escape(r) for r in found.roots)
    if not found.models:
        return (
            f"[$text-muted]no .gguf file found in {where}; "
            "LLTUI_MODELS=DIR adds a folder to look in[/]"
        )
    n = len(found.models)
    return f"[$text-muted]{counted(n, 'model')} found (looked in {where})[/]"


def render_verdict(outcome: FitOutcome, found: FoundModels | None = None) -> str:
    if outcome.no_model:
        return (
            "[b]choose a model:[/b] type the path of a .gguf file (or hf:OWNER/REPO[:QUANT]) "
            "above, or pick one of those found\n" + render_found(found)
        )
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
    for s in res.hints:
        lines.append(f"  {hint_heading(s)}: [b]{escape(' '.join(s.flags))}[/b]: {escape(s.reason)}")
    if res.speed is not None:
        lines.append(escape(speed_line(res.speed, fits=res.fits)))
    for seen in outcome.measured:
        lines.append(f"[$text-muted]{escape(seen)}[/]")
    for w in (*res.warnings, *outcome.notes):
        lines.append(f"[$warning]note:[/] {escape(w)}")
    return "\n".join(lines)


class QuantTable(DataTable[str]):
    """The quant table: its columns are laid out for its own width (quant_layout), which
    changes without the screen's (the page's scroll bar comes once the results are long)."""

    class Resized(Message):
        """The table's width changed: its columns are laid out again."""

    def on_resize(self) -> None:
        self.post_message(self.Resized())


class FitScreen(FormScreen):
    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="fit-page", classes="form-page"):
            with Grid(id="fit-source", classes="form-grid"):
                yield Label("model", classes="form-label")
                yield field_input("path to a .gguf file, or hf:OWNER/REPO[:QUANT]", "fit-model")
                yield Label("found", classes="form-label")
                yield Select[str](
                    [], prompt="looking…", id="fit-found", allow_blank=True, compact=True
                )
            with Grid(id="fit-fields", classes="form-grid"):
                for ident, flag, label in FIELD_FLAGS:
                    yield Label(f"{label} ({flag})", classes="form-label")
                    yield field_input("default", f"fit-{ident}")
            with Grid(id="fit-more", classes="form-grid"):
                yield Label("more flags", classes="form-label")
                yield field_input("more flags (-ot, --cpu-moe, --rpc HOST:PORT ...)", "fit-extra")
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
                yield Label("or --gpus", classes="form-label")
                yield field_input(
                    "24GiB,24GiB  4090,3090  sim:4xl4  cpu  (over the choice above)", "fit-gpus"
                )
            yield Static("", id="fit-state")
            with Vertical(id="fit-results"):
                yield Static("", id="fit-verdict")
                plan = Static("", id="fit-plan")
                plan.display = False  # shown once there is a plan to show
                yield plan
                yield Static("", id="fit-bars")
                yield QuantTable(id="fit-quants", cursor_type="row")

    def _device_options(self) -> list[tuple[str, str]]:
        opts = [("this rig, free memory now", LIVE)]
        opts += [(f"{name} (empty)", f"sim:{name}") for name in sim_profile_names()]
        return opts

    def __init__(self) -> None:
        super().__init__()
        self.outcome: FitOutcome | None = None  # the newest answered request's estimate
        self.found: FoundModels | None = None  # the models found, and where
        self._debounce: Timer | None = None
        self._model_asked = ""  # the model field's text the newest request read
        self._quant_keys: list[str] = []
        self._quant_layout: QuantLayout | None = None

    def on_mount(self) -> None:
        self._size_against_the_rig()
        self._find_models()
        self.render_all()

    def rig_changed(self) -> None:
        self._size_against_the_rig()
        self._changed()  # ("free memory now" is another rig's now)

    def _size_against_the_rig(self) -> None:
        """A simulated rig is sized empty (it is busy with a server of its own); another
        rig by its free memory now."""
        from lltui.services.rig import profile_in_use

        profile = profile_in_use(self.lltui.model.info)
        self.query_one("#fit-devices", Select).value = profile if profile is not None else LIVE

    def on_resize(self) -> None:
        self.show_view()  # the bars' length and the quant table's columns follow the width

    @on(QuantTable.Resized)
    def _quants_resized(self) -> None:
        self.show_view()

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
            gpus=self.query_one("#fit-gpus", Input).value,
        )

    @property
    def current(self) -> bool:
        """The estimate shown answers the newest request (no edit waits on its debounce) and
        the model the field names (a path typed is estimated when submitted)."""
        return (
            self._debounce is None
            and self.outcome is not None
            and self.outcome.generation == self.generation
            and not self._model_unasked
        )

    @property
    def _model_unasked(self) -> bool:
        """The model field was edited since the newest request read it (and no request
        waits on its debounce to read it again)."""
        asked = self._model_asked
        return self._debounce is None and self.query_one("#fit-model", Input).value != asked

    @property
    def settled(self) -> bool:
        """The estimate shown, its quant table and the fastest command answer the newest
        request."""
        outcome = self.outcome
        if not self.current or outcome is None or not outcome.quants_done:
            return False
        return outcome.plan_done or outcome.result is None or outcome.setup is None

    FIT_DEBOUNCE_S = 0.3  # typing "16384" asks for one estimate, not five

    def _changed(self) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        self._debounce = self.set_timer(self.FIT_DEBOUNCE_S, self._run_fit)
        self.show_state()  # what is shown is now the answer to an older request

    def _run_fit(self) -> None:
        """Estimate the form as it is now; only the newest request's answer is shown."""
        self._debounce = None
        request = replace(self.request(), generation=self.next_generation())
        self._model_asked = request.model_path
        self._estimate(request, self.lltui.model.latest)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._changed()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "fit-model":  # a path is estimated when submitted or picked
            self._changed()
        else:
            self.show_state()  # what is shown is not for the path typed

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "fit-found" and isinstance(event.value, str):
            self.query_one("#fit-model", Input).value = event.value
        self._changed()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "fit-launch":
            self.carry_to_launch()

    def carry_to_launch(self) -> None:
        """Open the launch view with this form's model and flags."""
        from lltui.core.cmdline.args import parse_llama_args

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
        from lltui.services.fit import find_local_models, model_roots

        roots = model_roots()
        models = await off_thread_reported(self, lambda: find_local_models(roots), "models")
        self.post_message(ModelsFound(tuple(models or ()), tuple(map(home_path, roots))))

    @work(group="fit", exclusive=True, exit_on_error=False)
    async def _estimate(self, request: FitRequest, sample: RigSample | None) -> None:
        """The estimate, then its quant table (which takes longer), each in a message; a
        newer request cancels this one, and its answers, if they still come, are dropped."""
        outcome = await off_thread_reported(self, lambda: compute_estimate(request, sample), "fit")
        if outcome is None:  # a bug, already reported: the view must not say "computing"
            outcome = FitOutcome(request.generation, "the estimate failed", quants_done=True)
        self.post_message(FitReady(outcome))
        if outcome.quants_done:
            return
        found = await off_thread_reported(self, lambda: compute_quants(outcome), "quant table")
        quants, error = found if found is not None else ([], "quant table: failed")
        self.post_message(QuantsReady(request.generation, quants, error))
        planned = await off_thread_reported(self, lambda: compute_plan(outcome), "planner")
        plan, why = planned if planned is not None else (None, "fastest command: failed")
        self.post_message(PlanReady(request.generation, plan, why))

    @on(ModelsFound)
    def _models_found(self, message: ModelsFound) -> None:
        self.found = FoundModels(message.models, message.roots)
        self.show_found()

    @on(FitReady)
    def _fit_ready(self, message: FitReady) -> None:
        if message.outcome.generation != self.generation:
            return  # an older request finished after a newer one was made
        self.outcome = message.outcome
        self.show_view()

    @on(PlanReady)
    def _plan_ready(self, message: PlanReady) -> None:
        outcome = self.outcome
        if outcome is None or outcome.generation != message.generation:
            return  # the plan of an estimate no longer shown
        outcome.plan, outcome.plan_done = message.plan, True
        if message.error:
            outcome.notes.append(message.error)
        self.show_plan()

    @on(QuantsReady)
    def _quants_ready(self, message: QuantsReady) -> None:
        outcome = self.outcome
        if outcome is None or outcome.generation != message.generation:
            return  # the table of an estimate no longer shown
        outcome.quants = message.quants
        if message.error:
            outcome.notes.append(message.error)
        outcome.quants_done = True
        self.show_view()

    # -- results -------------------------------------------------------------------------
    def show_found(self) -> None:
        found = self.found
        if not self.is_mounted or found is None:
            return
        options = [(f"{fmt_bytes(m.size):>9}  {home_path(m.path)}", m.path) for m in found.models]
        select = self.query_one("#fit-found", Select)
        select.set_options(options)
        n = len(options)
        select.prompt = f"{counted(n, 'model')}: pick one" if n else "none in the usual folders"
        if self.outcome is not None and self.outcome.no_model:
            self.show_view()  # the message under the form says where it looked

    def show_state(self) -> None:
        """Whether what is shown answers the form as it is now: a mark while it does not."""
        if not self.is_mounted:
            return
        outcome = self.outcome
        state = self.query_one("#fit-state", Static)
        results = self.query_one("#fit-results")
        stale = outcome is not None and not self.current
        if stale and self._model_unasked:
            state.update(
                "[b $warning]Enter estimates the model typed[/] [$text-muted]what is shown "
                "below is for the model before your last edit[/]"
            )
        elif stale:
            state.update(
                "[b $warning]computing…[/] [$text-muted]what is shown below is for the "
                "settings before your last edit[/]"
            )
        elif outcome is None:
            state.update("[b $warning]computing…[/]")
        elif not outcome.quants_done:
            state.update("[$text-muted]the quant table is being worked out…[/]")
        else:
            state.update("")
        results.set_class(stale, "-stale")

    def show_view(self) -> None:
        self.show_state()
        outcome = self.outcome
        if outcome is None or not self.is_mounted:
            return
        self.query_one("#fit-verdict", Static).update(render_verdict(outcome, self.found))
        self.show_plan()
        bars = self.query_one("#fit-bars", Static)
        bars.update(render_devices(outcome, bar_width(bars.size.width or self.size.width)))
        self._show_quants(outcome)

    def show_plan(self) -> None:
        """The planner's fastest command under the verdict, once it is known."""
        outcome = self.outcome
        if outcome is None or not self.is_mounted:
            return
        text = ""
        if outcome.plan is not None:
            text = escape("\n".join(plan_text(outcome.plan)))
        elif outcome.result is not None and not outcome.plan_done:
            text = "[$text-muted]the fastest command is being worked out…[/]"
        shown = self.query_one("#fit-plan", Static)
        shown.update(text)
        shown.display = bool(text)

    def _show_quants(self, outcome: FitOutcome) -> None:
        table = self.query_one("#fit-quants", QuantTable)
        devices = [] if outcome.result is None else outcome.result.devices
        names = [d.name for d in devices if d.kind != "cpu"]
        # the cells of the rows' scroll bar kept free: it comes with the rows, after this
        width = (table.size.width or self.size.width - 3) - table.styles.scrollbar_size_vertical
        layout = quant_layout(width, names)
        if layout != self._quant_layout:
            table.clear(columns=True)
            self._quant_keys = []
            for key, heading, wide, narrow in QUANT_COLUMNS:
                table.add_column(heading, key=key, width=wide if layout.wide else narrow)
            table.add_column("fullest (MiB)", key="fullest", width=FULLEST_W)
            if layout.per_gpu:
                heading = f"per GPU (MiB): {compact_names(layout.devices)}"
                table.add_column(heading, key="per-gpu", width=layout.per_gpu)
            self._quant_layout = layout
        rows = [quant_cells(q, layout) for q in outcome.quants]
        keys = [r[0] for r in rows]
        if keys != self._quant_keys:
            table.clear()
            for r in rows:
                table.add_row(*r, key=r[0])
            self._quant_keys = keys
        else:
            for r in rows:
                for col, value in zip(layout.keys, r, strict=True):
                    table.update_cell(r[0], col, value)


@dataclass(frozen=True, slots=True)
class FoundModels:
    models: tuple[ModelFile, ...]
    roots: tuple[str, ...]  # where the view looked, ~ for the home folder


def home_path(path: object) -> str:
    """A path with the home folder as ``~``."""
    text = str(path)
    home = os.path.expanduser("~")
    if home not in ("", "/") and (text == home or text.startswith(home + os.sep)):
        return "~" + text[len(home) :]
    return text
