"""The NCCL view: library and version, NCCL_* environment with what each value does,
findings by severity, the last bandwidth test, and a log or nccl-tests file loaded into it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.markup import escape
from textual.widgets import Button, Input, Static

from lltui.app.background import off_thread_reported
from lltui.app.messages import NcclBenchDone, NcclFileLoaded, NcclReady
from lltui.app.screens.base import LoadOnceScreen
from lltui.app.state.nccl import NcclState, read_report, run_bench_text, summarize_file
from lltui.app.widgets.hanging import Entry, HangingList
from lltui.core.nccl.conf import CONF_ORDER, ENVIRONMENT, conf_file_line
from lltui.core.nccl.findings import Finding
from lltui.core.nccl.variables import explain_variable

LOADING = "[$text-muted]looking for libnccl…[/]"
SEVERITY_ORDER = {"error": 0, "warn": 1, "info": 2}
SEVERITY_STYLE = {"error": "$error", "warn": "$warning", "info": "$primary"}


def render_library(info: dict[str, Any]) -> str:
    lib = "RCCL" if info.get("library") == "rccl" else "NCCL"  # ROCm's, the same API
    if info.get("simulated"):
        return (
            f"[b]{lib} {escape(str(info.get('version')))}[/b]  {escape(str(info.get('path')))}"
            f"  [$warning]SIMULATED ({escape(str(info.get('source')))})[/]"
        )
    if not info.get("available"):
        reason = info.get("reason") or "libnccl.so.2 not found"
        return (
            f"[b $error]NCCL not available[/]: {escape(str(reason))}\n"
            "[$text-muted]pip install nvidia-nccl-cu12 (or -cu13) gives llama.cpp and "
            "`lltui nccl bench` a libnccl[/]"
        )
    lines = [
        f"[b]{lib} {escape(str(info.get('version')))}[/b]  {escape(str(info.get('path')))}"
        f"  [$text-muted]({escape(str(info.get('found_by')))})[/]"
    ]
    for c in info.get("cudart", [])[:1]:
        lines.append(f"CUDA runtime  {escape(str(c['path']))}")
    return "\n".join(lines)


def env_entries(
    env: dict[str, str | None],
    findings: tuple[Finding, ...],
    env_from: dict[str, str] | None = None,
) -> tuple[list[Entry], str]:
    """Set variables first with their value, what it does and the config file line that set
    it (where one did), then unset ones a finding names; and the line of the other unset
    ones."""
    named = {v for f in findings for v in env if v in f.message or v in f.hint}
    set_entries, suggested, unset = [], [], []
    for name, value in env.items():
        if value is not None:
            said = escape(explain_variable(name, value, env))
            where = (env_from or {}).get(name, ENVIRONMENT)
            if where != ENVIRONMENT:
                said += " " + escape(f"[{where}]")
            set_entries.append((f"[b]{name}[/b]", f"{escape(value)}  [$text-muted]{said}[/]"))
        elif name in named:
            suggested.append((name, "[$warning](unset; see findings)[/]"))
        else:
            unset.append(name)
    rest = f"[$text-muted]unset: {', '.join(unset)}[/]" if unset else ""
    return set_entries + suggested, rest


def finding_entries(findings: tuple[Finding, ...]) -> list[Entry]:
    """Each finding, most severe first: its severity, then the message and its hint, which
    wrap under the message."""
    if not findings:
        return [("", "[$gpu-ok]no findings: nothing to change for this rig[/]")]
    entries = []
    for f in sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 3)):
        style = SEVERITY_STYLE.get(f.severity, "$text")
        text = escape(f.message)
        if f.hint:
            text += f"\n[$text-muted]{escape(f.hint)}[/]"
        entries.append((f"[b {style}]{f.severity}[/]", text))
    return entries


WIDE_TABLE = 100  # nccl-tests' nine columns take 89 and a margin: narrower shows five


class NcclScreen(LoadOnceScreen):
    CSS_PATH = "nccl.tcss"  # read when the view is first shown, not at startup

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="nccl-page"):
            yield Static(LOADING, id="nccl-library")
            yield Static("[b]findings[/b]", classes="nccl-section nccl-title")
            yield HangingList(id="nccl-findings")
            yield Static("[b]environment[/b]", classes="nccl-section nccl-title")
            yield HangingList(id="nccl-env")
            yield Static("", id="nccl-env-unset")
            with Horizontal(id="nccl-actions"):
                yield Button("Run bandwidth test", id="nccl-bench", variant="primary")
                yield Input(
                    placeholder="path to an NCCL log or nccl-tests output",
                    id="nccl-file",
                    select_on_focus=False,
                )
            yield Static("", id="nccl-bench-result", classes="nccl-section")
            yield Static("", id="nccl-file-result", classes="nccl-section")

    def __init__(self) -> None:
        super().__init__()
        self.state = NcclState()

    @property
    def awaiting_data(self) -> bool:
        return self.state.loading

    def start_loading(self, source: str) -> None:
        if self.lltui.model.info.stand_in:  # auto found no GPU: the library is still real
            source = "auto"  # (as `lltui nccl` reads it; a profile's NCCL is made up)
        # what was read and tested with another host is not this one's (a file loaded from
        # this machine is the same file still)
        self.workers.cancel_group(self, "nccl-bench")
        self.state = NcclState(file_text=self.state.file_text)
        self._load(source)

    # -- loaders: each a worker of this screen, each result a message to it ------------------
    @work(group="nccl", exclusive=True, exit_on_error=False)
    async def _load(self, source: str) -> None:
        """Find libnccl and make the findings once (ldconfig, nvidia-smi)."""
        found = await off_thread_reported(self, lambda: read_report(source), "nccl")
        report, error = found if found is not None else (None, "reading NCCL facts failed")
        self.post_message(NcclReady(report, error))

    @work(group="nccl-bench", exclusive=True, exit_on_error=False)
    async def _bench(self, simulated: bool, source: str) -> None:
        text = await off_thread_reported(
            self, lambda: run_bench_text(simulated, source), "nccl-bench"
        )
        self.post_message(NcclBenchDone(text))

    @work(group="nccl-file", exclusive=True, exit_on_error=False)
    async def _load_file(self, path: str) -> None:
        narrow = self.size.width < WIDE_TABLE
        text = await off_thread_reported(
            self, lambda: summarize_file(path, narrow=narrow), "nccl-file"
        )
        if text is not None:
            self.post_message(NcclFileLoaded(text))

    @on(NcclReady)
    def _nccl_ready(self, message: NcclReady) -> None:
        self.state = replace(self.state, report=message.report, error=message.error)
        self.show_view()

    @on(NcclBenchDone)
    def _bench_done(self, message: NcclBenchDone) -> None:
        text = self.state.bench_text if message.text is None else message.text
        self.state = replace(self.state, bench_running=False, bench_text=text)
        self.show_view()
        self._bring_into_view("#nccl-bench-result")

    @on(NcclFileLoaded)
    def _file_loaded(self, message: NcclFileLoaded) -> None:
        self.state = replace(self.state, file_text=message.text)
        self.show_view()
        self._bring_into_view("#nccl-file-result")

    def _bring_into_view(self, selector: str) -> None:
        """A result that arrived below the fold is scrolled to (once it is laid out)."""
        widget = self.query_one(selector)
        self.call_after_refresh(widget.scroll_visible, animate=False, top=True)

    # -- the form ------------------------------------------------------------------------
    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "nccl-bench" and not self.state.bench_running:
            self.state = replace(self.state, bench_running=True)
            info = self.lltui.model.info
            self._bench(info.simulated, info.source)
            self.show_view()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "nccl-file" and event.value.strip():
            self._load_file(event.value.strip())

    def show_view(self) -> None:
        state = self.state
        if not self.is_mounted:
            return
        library = self.query_one("#nccl-library", Static)
        findings: list[Entry] = []
        env: list[Entry] = []
        unset = ""
        if state.error:
            library.update(f"[b $error]NCCL facts unavailable:[/] {escape(state.error)}")
        elif state.report is None:
            library.update(LOADING)
        else:
            report = state.report
            library.update(render_library(report.info.to_json()))
            findings = finding_entries(report.findings)
            env, unset = env_entries(report.env, report.findings, report.env_from)
            files = [escape(conf_file_line(f)) for f in report.conf_files]
            if files:
                unset += f"\n[$text-muted]config files {escape(CONF_ORDER)}[/]\n"
                unset += "\n".join(files)
        # none of another host's findings under this one's error or while it loads
        self.query_one("#nccl-findings", HangingList).set_entries(findings)
        self.query_one("#nccl-env", HangingList).set_entries(env)
        self.query_one("#nccl-env-unset", Static).update(unset.lstrip("\n"))
        bench = self.query_one("#nccl-bench-result", Static)
        bench.display = bool(state.bench_text)
        bench.update(state.bench_text)
        button = self.query_one("#nccl-bench", Button)
        button.disabled = state.bench_running
        button.label = "Testing…" if state.bench_running else "Run bandwidth test"
        loaded = self.query_one("#nccl-file-result", Static)
        loaded.display = bool(state.file_text)
        loaded.update(state.file_text)
