"""The NCCL view: library and version, NCCL_* environment with what each value does,
findings by severity, the last bandwidth test, and a log or nccl-tests file loaded into it."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.markup import escape
from textual.widgets import Button, Input, Static

from lltui.app.screens.base import ViewScreen
from lltui.core.nccl.findings import Finding
from lltui.core.nccl.variables import explain_variable

SEVERITY_ORDER = {"error": 0, "warn": 1, "info": 2}
SEVERITY_STYLE = {"error": "$error", "warn": "$warning", "info": "$primary"}


def render_library(info: dict[str, Any]) -> str:
    if info.get("simulated"):
        return (
            f"[b]NCCL {escape(str(info.get('version')))}[/b]  {escape(str(info.get('path')))}"
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
        f"[b]NCCL {escape(str(info.get('version')))}[/b]  {escape(str(info.get('path')))}"
        f"  [$text-muted]({escape(str(info.get('found_by')))})[/]"
    ]
    for c in info.get("cudart", [])[:1]:
        lines.append(f"CUDA runtime  {escape(str(c['path']))}")
    return "\n".join(lines)


def render_env(env: dict[str, str | None], findings: tuple[Finding, ...]) -> str:
    """Set variables first with what they do; unset ones a finding names, then the rest."""
    named = {v for f in findings for v in env if v in f.message or v in f.hint}
    width = max((len(k) for k in env), default=10)
    set_lines, suggested, unset = [], [], []
    for name, value in env.items():
        if value is not None:
            set_lines.append(
                f"[b]{name:<{width}}[/b] {escape(value)}  "
                f"[$text-muted]{escape(explain_variable(name, value))}[/]"
            )
        elif name in named:
            suggested.append(f"{name:<{width}} [$warning](unset; see findings)[/]")
        else:
            unset.append(name)
    lines = set_lines + suggested
    if unset:
        lines.append(f"[$text-muted]unset: {', '.join(unset)}[/]")
    return "\n".join(lines)


def render_findings(findings: tuple[Finding, ...]) -> str:
    if not findings:
        return "[$gpu-ok]no findings: nothing to change for this rig[/]"
    lines = []
    for f in sorted(findings, key=lambda f: SEVERITY_ORDER.get(f.severity, 3)):
        style = SEVERITY_STYLE.get(f.severity, "$text")
        lines.append(f"[{style}][b]{f.severity:<5}[/b][/] {escape(f.message)}")
        if f.hint:
            lines.append(f"      [$text-muted]{escape(f.hint)}[/]")
    return "\n".join(lines)


class NcclScreen(ViewScreen):
    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="nccl-page"):
            yield Static("[$text-muted]looking for libnccl…[/]", id="nccl-library")
            yield Static("", id="nccl-findings", classes="nccl-section")
            yield Static("", id="nccl-env", classes="nccl-section")
            with Horizontal(id="nccl-actions"):
                yield Button("Run bandwidth test", id="nccl-bench", variant="primary")
                yield Input(placeholder="path to an NCCL log or nccl-tests output", id="nccl-file")
            yield Static("", id="nccl-bench-result", classes="nccl-section")
            yield Static("", id="nccl-file-result", classes="nccl-section")

    def on_mount(self) -> None:
        load = getattr(self.app, "load_nccl", None)
        if load is not None:
            load()
        self.render_all()

    def show_view(self) -> None:
        self.show_nccl()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "nccl-bench":
            run = getattr(self.app, "run_nccl_bench", None)
            if run is not None:
                run()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "nccl-file" and event.value.strip():
            load = getattr(self.app, "load_nccl_file", None)
            if load is not None:
                load(event.value.strip())

    def show_nccl(self) -> None:
        state = getattr(self.app, "nccl_state", None)
        if state is None or not self.is_mounted:
            return
        library = self.query_one("#nccl-library", Static)
        if state.error:
            library.update(f"[b $error]NCCL facts unavailable:[/] {escape(state.error)}")
        elif state.report is not None:
            report = state.report
            library.update(render_library(report.info.to_json()))
            self.query_one("#nccl-findings", Static).update(
                "[b]findings[/b]\n" + render_findings(report.findings)
            )
            self.query_one("#nccl-env", Static).update(
                "[b]environment[/b]\n" + render_env(report.env, report.findings)
            )
        bench = self.query_one("#nccl-bench-result", Static)
        bench.display = bool(state.bench_text)
        bench.update(state.bench_text)
        button = self.query_one("#nccl-bench", Button)
        button.disabled = state.bench_running
        button.label = "Testing…" if state.bench_running else "Run bandwidth test"
        loaded = self.query_one("#nccl-file-result", Static)
        loaded.display = bool(state.file_text)
        loaded.update(state.file_text)
