"""The llama-server sections of ``lltui report``: its build and flags (its own command line,
read only where the process is this user's), its load beside lltui's prediction (``explain``
on its log), and its measured speed beside the predicted one."""

from __future__ import annotations

import contextlib
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lltui.core.cmdline.secrets import redact_argv
from lltui.core.text import is_digits
from lltui.services.follow import launched_log, listening_server, own_argv, url_of_argv

if TYPE_CHECKING:
    from lltui.core.explain.models import ExplainReport
    from lltui.core.monitor.models import RigSample
    from lltui.sources.llama.http import ServerPoll


@dataclass(frozen=True)
class ReportRequest:
    source: str | None = None  # --source (auto: NVML, else the simulated rig, said so)
    server: str | None = None  # a llama-server's URL or pid
    log: str | None = None  # its log (else the one lltui launch --keep-running left)
    api_key: str | None = None


@dataclass(frozen=True)
class Section:
    title: str
    text: str  # shown as it is, in a code block
    data: Any  # the same for --json


def log_of(request: ReportRequest, url: str | None) -> Path | None:
    if request.log is not None:
        return Path(request.log)
    if url is None:
        return None
    return launched_log(url)


def _poll(url: str, api_key: str | None) -> ServerPoll | None:
    from lltui.sources.llama.http import LlamaServerClient

    try:
        with LlamaServerClient(url, api_key=api_key) as client:
            return client.poll()
    except Exception:  # the client bounds every call; a last guard for the report
        return None


def _build(
    argv: tuple[str, ...] | None, poll: ServerPoll | None, url: str | None, pid: int | None
) -> Section:
    props = poll.props if poll is not None else None
    data: dict[str, Any] = {
        "url": url,
        "state": poll.state if poll is not None else None,
        "build": props.build_info if props else None,
        "model": props.model_path if props else None,
        "n_ctx_per_slot": props.n_ctx if props else None,
        "slots": props.total_slots if props else None,
        "argv": shlex.join(redact_argv(argv)) if argv else None,
    }
    text = "\n".join(f"{k}: {v}" for k, v in data.items() if v is not None)
    if pid is not None and argv is None:
        text = f"pid {pid}: no such process here, or its command line cannot be read"
    return Section("llama.cpp build and flags", text or "no server given", data)


def _load(
    request: ReportRequest, url: str | None, pid: int | None, argv: tuple[str, ...] | None
) -> tuple[Section, ExplainReport | None]:
    """A server with a ``pid`` runs here: predicted with this machine's CPU and this rig's
    calibration and, where its command line (``argv``) can be read, its own flags, as launch
    predicts it."""
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.core.explain.report import report_to_json, report_to_text
    from lltui.services.bench import local_calibration
    from lltui.services.devices import local_devices
    from lltui.services.explain import ExplainFailed, ExplainRequest, explain
    from lltui.sources.gpu.cpu import local_host

    log = log_of(request, url)
    if log is None or not log.exists():
        why = "no log of the server (give --log FILE)"
        return Section("Load and prediction", why, {"error": why}), None
    try:
        args = None
        with contextlib.suppress(ValueError):
            args = parse_llama_args(argv[1:], keep_unknown=True) if argv else None
        host = local_host() if pid is not None else None
        cal = local_calibration(local_devices()[0], host) if host is not None else None
        explained = ExplainRequest(
            str(log), ask_binary=False, model_from_log=True, args=args, host=host, calibration=cal
        )
        report = explain(explained)
    except ExplainFailed as exc:
        return Section("Load and prediction", str(exc), {"error": str(exc)}), None
    return Section("Load and prediction", report_to_text(report), report_to_json(report)), report


def _rate(tokens: float | None, seconds: float | None) -> float | None:
    return tokens / seconds if tokens and seconds else None


def _speed(poll: ServerPoll | None, report: ExplainReport | None) -> Section:
    from lltui.sources.llama.http import STATE_UNAUTHORIZED

    m = poll.metrics if poll is not None else None
    speed = report.result.speed if report is not None and report.result is not None else None
    data = {
        "measured_decode_tps": _rate(m.tokens_predicted_total, m.tokens_predicted_seconds_total)
        if m
        else None,
        "measured_prefill_tps": _rate(m.prompt_tokens_total, m.prompt_seconds_total) if m else None,
        "predicted_decode_tps": speed.decode_tps if speed else None,
        "predicted_prefill_tps": speed.prefill_tps if speed else None,
        "predicted_bound": speed.bound if speed else None,
        # "calibrated on this rig from N points, DATE" (None: the speed model as it is)
        "predicted_calibrated": speed.calibrated if speed else None,
    }

    def fmt(v: object) -> str:
        return f"{v:.1f}" if isinstance(v, float) else "-" if v is None else str(v)

    text = "\n".join(f"{k}: {fmt(v)}" for k, v in data.items() if k != "predicted_calibrated")
    if speed is not None:
        said = speed.calibrated or "uncalibrated (the speed model as it is)"
        text += f"\npredicted: {said}"
    if m is None and poll is not None and poll.state == STATE_UNAUTHORIZED:
        text += "\n(no /metrics: the server asks for an API key; export LLAMA_API_KEY)"
    elif poll is None:  # (no address: none given, or none found for the pid)
        text += "\n(no /metrics: no server address to ask; --server URL names one)"
    elif m is None:
        text += "\n(no /metrics: the server was not started with --metrics, or is not reachable)"
    return Section("Speed", text, data)


def server_sections(request: ReportRequest, sample: RigSample | None) -> list[Section]:
    server = request.server
    argv: tuple[str, ...] | None = None
    url: str | None = None
    pid = int(server) if server is not None and is_digits(server) else None
    if pid is not None:
        argv = own_argv(pid)
        url = url_of_argv(argv) if argv else None
    elif server is not None:
        url = server.rstrip("/")
        pid = listening_server(url)  # its command line too, where it is this user's here
        argv = own_argv(pid) if pid is not None else None
    poll = _poll(url, request.api_key) if url is not None else None
    load, report = _load(request, url, pid, argv)
    sections = [_build(argv, poll, url, pid), load, _speed(poll, report)]
    return [*sections, _held(request, url, pid, sample, poll)]


def _held(
    request: ReportRequest,
    url: str | None,
    pid: int | None,
    sample: RigSample | None,
    poll: ServerPoll | None,
) -> Section:
    """What the server's process holds on each GPU now beside its plan, and its KV fill."""
    from lltui.core.memory.kv_fill import fill_line
    from lltui.core.monitor.plan_reality import plan_line, plan_to_json
    from lltui.services.follow import ServerFollow

    title = "Memory now against the plan"
    if url is None and pid is None:
        return Section(title, "no server given", None)
    log = Path(request.log) if request.log is not None else None
    follow = ServerFollow(url, pid, log)
    state = follow.fold(sample, poll.slots if poll is not None else None, time.monotonic())
    lines = []
    if state.plan is not None:
        lines.append(plan_line(state.plan) + f" (plan: {state.plan_source})")
    else:
        lines.append("no GPU memory of its process can be read here beside a plan")
    if state.kv is not None:
        lines.append(fill_line(state.kv))
    kv = state.kv
    data = {
        "plan_source": state.plan_source,
        "plan": plan_to_json(state.plan) if state.plan is not None else None,
        "kv_tokens": kv.used_tokens if kv is not None else None,
        "kv_capacity_tokens": kv.capacity_tokens if kv is not None else None,
    }
    return Section(title, "\n".join(lines), data)
