"""A launched server's buffers beside lltui's prediction, once it has loaded: the same
comparison as ``lltui explain`` (:mod:`lltui.services.explain`) made on the supervisor's own
scan of the log, grouped per device as the launch's placement names them, for the ready
event, the launch state and the launch view."""

from __future__ import annotations

from dataclasses import dataclass, fields

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.explain.models import LogSource
from lltui.core.explain.settings import is_host_buffer
from lltui.core.llama.builds import PINNED_BUILD
from lltui.core.llamalog.models import LogFacts
from lltui.core.memory.kv_fill import KvLayout, kv_layout
from lltui.core.units import MIB
from lltui.services.explain import explain_facts


@dataclass(frozen=True)
class DeviceCheck:
    """One device of a launched server: bytes by kind as its log printed them and as lltui
    predicts them. ``name`` as the launch's placement names it (CUDA0, RPC1, CPU)."""

    name: str
    logged: tuple[tuple[str, int], ...]
    predicted: tuple[tuple[str, int], ...]

    @property
    def logged_bytes(self) -> int:
        return sum(n for _, n in self.logged)

    @property
    def predicted_bytes(self) -> int:
        return sum(n for _, n in self.predicted)


@dataclass(frozen=True)
class LaunchCheck:
    """The comparison a launch keeps once its server has loaded."""

    devices: tuple[DeviceCheck, ...]
    build: int | None
    rules: str  # the label of the rules followed
    compared: int
    exact: int
    within_1pct: int
    note: str | None = None
    kv: KvLayout | None = None  # what a token takes on each device, for the KV fill

    def device(self, name: str) -> DeviceCheck | None:
        return next((d for d in self.devices if d.name == name), None)

    @property
    def summary(self) -> str:
        if self.note is not None and not self.compared:
            return self.note
        return (
            f"lltui's prediction ({self.rules}): {self.exact} of {self.compared} buffer lines "
            f"exact, {self.within_1pct} within 1%"
        )


def build_of_binary(path: str | None) -> int | None:
    """The llama.cpp build of a llama-server binary (lltui's own build: the pinned one)."""
    if path is None:
        return None
    from lltui.sources.llama import build_cache
    from lltui.sources.llama.binary import LlamaBinaryError, probe

    for cuda in (False, True):
        built = build_cache.installed(cuda=cuda)
        if built is not None and str(built.binaries.get("llama-server")) == str(path):
            return PINNED_BUILD
    try:
        version = probe(path).version
    except (LlamaBinaryError, OSError):
        return None
    return version.build if version is not None and version.build else None


def check_launch(
    facts: LogFacts,
    buffer_devices: dict[str, str],
    args: LlamaArgs,
    model: str,
    build: int | None,
) -> LaunchCheck:
    """A launched server's buffer lines beside lltui's prediction for its settings;
    ``buffer_devices``: the device of each buffer name, as the launch's placement groups
    them (host buffers under CPU)."""
    source = LogSource("<launch>", 0, 0, facts.lines)
    report = explain_facts(facts, source, model=model, build=build, ask_binary=False, args=args)
    rows: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
    for c in report.checks:
        b = c.line
        if b.load != facts.loads or b.part != "model" or b.superseded:
            continue
        name = buffer_devices.get(b.device, "CPU" if is_host_buffer(b.device) else b.device)
        logged, predicted = rows.setdefault(name, ({}, {}))
        logged[b.kind] = logged.get(b.kind, 0) + b.logged_bytes
        if c.predicted_bytes is not None:
            predicted[b.kind] = predicted.get(b.kind, 0) + c.predicted_bytes
    compared = report.compared()
    note = report.model_note
    layout = None
    if report.result is not None:
        names = {
            b: buffer_devices.get(b, "CPU" if is_host_buffer(b) else b)
            for b, _, _ in report.result.buffers
        }
        layout = kv_layout(report.result, names)
    return LaunchCheck(
        devices=tuple(
            DeviceCheck(name, tuple(lg.items()), tuple(pr.items()))
            for name, (lg, pr) in rows.items()
        ),
        build=report.build,
        rules=report.rules.label,
        compared=len(compared),
        exact=sum(c.exact for c in compared),
        within_1pct=sum(c.within(0.01) for c in compared),
        note=note,
        kv=layout,
    )


def unlogged_check(model: str, args: LlamaArgs, log_verbosity: int) -> LaunchCheck | None:
    """A loaded server whose log printed no buffer line: None where its log level shows
    them (nothing to say), else lltui's own prediction for this machine's devices (the
    launch's plan: its KV fill) with a note that the level hides the lines it reads."""
    from lltui.core.cmdline.launch_spec import PLACEMENT_LOG_VERBOSITY
    from lltui.core.explain.compare import predicted_lines
    from lltui.services.fit import FitFailed, FitRequest, estimate_setup, prepare

    if log_verbosity >= PLACEMENT_LOG_VERBOSITY:
        return None
    note = (
        f"-lv {log_verbosity} hides the buffer lines lltui reads (llama-server prints them "
        f"at -lv {PLACEMENT_LOG_VERBOSITY})"
    )
    try:
        setup = prepare(FitRequest(model=model, args=args, verb="launch"))
        result = estimate_setup(setup, verb="launch")
    except FitFailed as exc:
        return LaunchCheck((), None, "-", 0, 0, 0, note=f"{note}; no prediction: {exc}")
    rows: dict[str, dict[str, int]] = {}
    for (owner, kind, cache), nbytes in predicted_lines(result).items():
        if cache is None and nbytes:
            name = "CPU" if owner in ("host", "pinned") or is_host_buffer(owner) else owner
            row = rows.setdefault(name, {})
            row[kind] = row.get(kind, 0) + nbytes
    names = {b: "CPU" if is_host_buffer(b) else b for b, _, _ in result.buffers}
    return LaunchCheck(
        devices=tuple(DeviceCheck(name, (), tuple(kinds.items())) for name, kinds in rows.items()),
        build=None,
        rules="lltui's plan",
        compared=0,
        exact=0,
        within_1pct=0,
        note=f"{note}: lltui's own prediction stands alone",
        kv=kv_layout(result, names),
    )


def predicted_mib(d: DeviceCheck) -> dict[str, float] | None:
    """A device's prediction as the ready event's devices give MiB (model, kv, compute)."""
    if not d.predicted:
        return None
    p = dict(d.predicted)
    return {
        "model_mib": round(p.get("model", 0) / MIB, 2),
        "kv_mib": round((p.get("kv", 0) + p.get("rs", 0)) / MIB, 2),
        "compute_mib": round(p.get("compute", 0) / MIB, 2),
        "output_mib": round(p.get("output", 0) / MIB, 2),
    }


def check_summary(c: LaunchCheck) -> dict[str, object]:
    """The comparison's numbers as the ready event gives them (its devices apart)."""
    return {f.name: getattr(c, f.name) for f in fields(c) if f.name not in ("devices", "kv")}
