"""``lltui report``: one paste for an issue thread, put together from what ``gpus``, ``topo``,
``nccl`` and ``explain`` already say (their services and renderers, not a second copy): the
rig, its topology, NCCL, the llama-server's build and flags, its load beside lltui's
prediction, measured speed beside predicted, and the alerts raised now.

Nothing else is collected, and what is shown is masked: secrets (API keys, tokens, a Hugging
Face token, credentials in URLs) by :mod:`lltui.core.monitor.redact`; the user's name and home
folder; other users' processes keep their memory but lose their names and command lines."""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lltui.core.cmdline.secrets import redact_argv, redact_command
from lltui.core.monitor.models import GpuProcess, RigSample, SourceUnavailable
from lltui.services.report.server import ReportRequest, Section, server_sections

__all__ = ["IssueReport", "ReportRequest", "Section", "build_report"]

MASKED_USER = "<user>"


@dataclass(frozen=True)
class IssueReport:
    sections: tuple[Section, ...]

    def to_markdown(self) -> str:
        out = ["# lltui report", ""]
        for s in self.sections:
            out += [f"## {s.title}", "", "```", s.text.rstrip("\n"), "```", ""]
        return mask_text("\n".join(out))

    def to_json(self) -> dict[str, Any]:
        return mask_json({s.title.lower().replace(" ", "_"): s.data for s in self.sections})


# --- masking --------------------------------------------------------------------------------


def _user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None


def mask_text(text: str) -> str:
    """Secrets, the user's name and home folder out of ``text``, line by line."""
    lines = [redact_command(line) for line in text.split("\n")]
    out = "\n".join(lines)
    home = os.path.expanduser("~")
    if home and home != "/":
        out = out.replace(home, "~")
    user = _user()
    if user and user != "root" and len(user) > 1:
        out = re.sub(rf"\b{re.escape(user)}\b", MASKED_USER, out)
    return out


def mask_json(data: Any) -> Any:
    if isinstance(data, str):
        return mask_text(data)
    if isinstance(data, Mapping):
        return {k: mask_json(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        if data and all(isinstance(v, str) for v in data):  # an argv: a flag's value is a word
            data = redact_argv(data)
        return [mask_json(v) for v in data]
    return data


def own_processes_only(sample: RigSample) -> RigSample:
    """Other users' processes keep their pid and memory, not their name, command line,
    container or model (each can tell whose job it is)."""
    me = _user()

    def shown(p: GpuProcess) -> GpuProcess:
        mine = p.user is not None and p.user == me
        if mine:
            return p
        return replace(p, name=None, user=None, command=None, container=None, model=None)

    gpus = tuple(replace(g, processes=tuple(map(shown, g.processes))) for g in sample.gpus)
    return replace(sample, gpus=gpus)


# --- the sections ---------------------------------------------------------------------------


def _rig(source: str | None) -> tuple[Section, RigSample | None]:
    from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text
    from lltui.services.rig import RigRequest, sample_once

    try:
        sample = own_processes_only(sample_once(RigRequest(source=source)))
    except (SourceUnavailable, ValueError) as exc:
        return Section("Rig", f"no GPU sample: {exc}", {"error": str(exc)}), None
    return Section("Rig", rig_to_text(sample, width=120), rig_to_json(sample)), sample


def _topology(source: str | None) -> Section:
    from lltui.core.topo.advice import advise
    from lltui.core.topo.report import topology_to_json, topology_to_text
    from lltui.services.rig import topology_in_use

    try:
        report, _ = topology_in_use(source)
    except (SourceUnavailable, ValueError) as exc:
        return Section("Topology", f"no topology: {exc}", {"error": str(exc)})
    live = report.live
    advice = advise(live.topology, live.gpus, env=report.env)
    text = topology_to_text(live.topology, advice, width=120, title=f"from {live.where}")
    return Section("Topology", text, topology_to_json(live.topology, advice))


def _nccl(source: str | None) -> Section:
    from lltui.services.nccl import nccl_report

    try:
        data = nccl_report(source).to_json()
    except ValueError as exc:
        return Section("NCCL", f"no NCCL report: {exc}", {"error": str(exc)})
    lines = [
        f"available: {'yes' if data.get('available') else 'no'}  "
        f"version: {data.get('version') or 'unknown'}",
        f"path: {data.get('path')}",
    ]
    lines += [f"{k}={v}" for k, v in (data.get("env") or {}).items() if v is not None]
    lines += [f"[{f['severity']}] {f['code']}: {f['message']}" for f in data.get("findings", [])]
    return Section("NCCL", "\n".join(lines), data)


def _alerts(sample: RigSample | None, source: str | None) -> Section:
    from lltui.core.monitor.alerts import AlertTracker, alerts_to_json

    if sample is None:
        return Section("Alerts", "no GPU sample", [])
    from lltui.services.rig import source_statuses

    tracker = AlertTracker(instant=True)
    # a simulated rig standing in for GPUs that were expected is the alert watch raises
    tracker.update(sample.wall, rigs={None: sample}, sources=source_statuses(source, sample.info))
    alerts = tracker.active
    text = "\n".join(a.line for a in alerts) or "none raised now"
    return Section("Alerts", text, alerts_to_json(alerts))


def build_report(request: ReportRequest) -> IssueReport:
    """Every section; one that cannot be read says why instead."""
    rig, sample = _rig(request.source)
    sections = [rig, _topology(request.source), _nccl(request.source)]
    sections += server_sections(request, sample)
    sections.append(_alerts(sample, request.source))
    return IssueReport(tuple(sections))
