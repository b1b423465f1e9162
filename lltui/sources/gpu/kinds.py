"""Turns a ``--source`` spec into an opened source; ``auto`` falls back to a simulated rig."""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.monitor.models import RigInfo, RigSample, SourceUnavailable
from lltui.sources.gpu.base import GpuSource
from lltui.sources.gpu.sim import DEFAULT_PROFILE, PROFILES

SOURCE_HELP = (
    "auto, nvml, smi, smi:HOST, sim, sim:PROFILE, replay:FILE, "
    "prom:URL[#host=NAME] (a Prometheus server) or scrape:URL (an exporter's /metrics)"
)


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    speed: float = 1.0  # times the recorded pace
    stepped: bool = False  # one recorded sample per poll, whatever the recorded timing
    loop: bool = False


def replay_options(args: object) -> ReplayOptions:
    """The ``--replay-*`` options of a parsed command line (defaults where absent)."""
    return ReplayOptions(
        speed=getattr(args, "replay_speed", None) or 1.0,
        stepped=bool(getattr(args, "replay_step", False)),
        loop=bool(getattr(args, "replay_loop", False)),
    )


_KINDS = ("auto", "nvml", "smi", "sim", "replay", "prom", "scrape")


@dataclass(frozen=True, slots=True)
class SourceSpec:
    kind: str  # auto | nvml | smi | sim | replay
    arg: str | None = None

    def __str__(self) -> str:
        return self.kind if self.arg is None else f"{self.kind}:{self.arg}"


def parse_source_spec(text: str | None) -> SourceSpec:
    """Parse ``--source``; raises ValueError with one line for a spec we do not know."""
    spec = (text or "auto").strip()
    kind, _, arg = spec.partition(":")
    kind = kind.lower()
    if kind in ("auto", "nvml") and not arg:
        return SourceSpec(kind)
    if kind == "smi":
        return SourceSpec("smi", arg or None)
    if kind == "sim":
        name = arg or DEFAULT_PROFILE
        if name not in PROFILES:
            raise ValueError(
                f"unknown simulated profile {name!r}; choose one of: {', '.join(PROFILES)}"
            )
        return SourceSpec("sim", name)
    if kind == "replay":
        if not arg:
            raise ValueError("replay needs a file: --source replay:FILE")
        return SourceSpec("replay", arg)
    if kind in ("prom", "scrape"):
        from lltui.sources.gpu.prom import check_url

        check_url(kind, arg)
        return SourceSpec(kind, arg)
    raise ValueError(f"unknown source {spec!r}; use {SOURCE_HELP}")


def split_sources(text: str | None) -> list[str]:
    """``smi:h1,smi:h2,nvml`` as its specs. A comma starts a new spec only where a source
    kind follows it (``kind`` or ``kind:``), so a comma inside a path or URL stays put."""
    pieces: list[str] = []
    for piece in (text or "").split(","):
        word = piece.strip().partition(":")[0].lower()
        if pieces and word not in _KINDS:
            pieces[-1] += "," + piece
        else:
            pieces.append(piece.strip())
    return [p for p in pieces if p]


def is_fleet(text: str | None) -> bool:
    """Whether ``--source`` names several sources (a fleet view rather than one rig), or
    every host of a Prometheus server (``prom:URL#host=*``)."""
    specs = split_sources(text)
    if len(specs) > 1:
        return True
    if not any("#" in s for s in specs):  # most runs: no URL fragment, nothing to import
        return False
    from lltui.sources.gpu.prom import wants_all_hosts

    return any(wants_all_hosts(s) for s in specs)


def make_source(
    spec: SourceSpec,
    *,
    sim_reason: str | None = None,
    seed: int = 0,
    replay: ReplayOptions | None = None,
) -> GpuSource:
    """Construct (but do not open) the source a spec names."""
    if spec.kind == "nvml":
        from lltui.sources.gpu.nvml import NvmlSource

        return NvmlSource()
    if spec.kind == "smi":
        from lltui.sources.gpu.smi import SmiSource
        from lltui.sources.ssh import split_host_port

        host, port = split_host_port(spec.arg) if spec.arg else (None, None)
        return SmiSource(host=host, port=port)
    if spec.kind == "sim":
        from lltui.sources.gpu.sim import SimSource

        return SimSource(spec.arg or DEFAULT_PROFILE, seed=seed, reason=sim_reason)
    if spec.kind == "replay":
        from lltui.sources.gpu.replay import ReplaySource

        opts = replay or ReplayOptions()
        return ReplaySource(spec.arg or "", speed=opts.speed, stepped=opts.stepped, loop=opts.loop)
    if spec.kind == "prom":
        from lltui.sources.gpu.prom import PromSource

        return PromSource(spec.arg or "")
    if spec.kind == "scrape":
        from lltui.sources.gpu.prom import ScrapeSource

        return ScrapeSource(spec.arg or "")
    raise ValueError(f"cannot construct source {spec}")


def open_source(
    text: str | None, *, seed: int = 0, replay: ReplayOptions | None = None
) -> tuple[GpuSource, RigInfo]:
    """Open the source ``--source`` names.

    ``auto`` is NVML when it initialises with at least one GPU; otherwise the default
    simulated rig, whose RigInfo says SIMULATED and why in plain words. Every other spec
    raises SourceUnavailable with a one-line reason when it cannot run here.
    """
    spec = parse_source_spec(text)
    if spec.kind != "auto":
        source = make_source(spec, seed=seed, replay=replay)
        return source, source.open()
    try:
        source = make_source(SourceSpec("nvml"))
        return source, source.open()
    except SourceUnavailable as exc:
        reason = f"no NVIDIA GPU here: {exc}; showing a simulated rig"
    except ImportError as exc:  # the binding is missing from this install
        reason = f"nvidia-ml-py is not importable: {exc}; showing a simulated rig"
    sim = make_source(SourceSpec("sim", DEFAULT_PROFILE), sim_reason=reason, seed=seed)
    return sim, sim.open()


def one_sample(source: str = "nvml") -> RigSample | None:
    """One sample of the rig ``source`` names, or None when that source cannot run here.

    For NVML only the fast fields are read (names, memory, power...): no process lists,
    PCIe throughput (20 ms per counter) or NVLink state, which these functions do not use."""
    try:
        if source == "nvml":
            import math

            from lltui.sources.gpu.nvml import NvmlSource

            src: GpuSource = NvmlSource(
                slow_ttl_s=math.inf, process_ttl_s=math.inf, pcie_ttl_s=math.inf
            )
            src.open()
        else:
            src, _info = open_source(source)
    except (SourceUnavailable, ImportError):
        return None
    try:
        return src.poll()
    finally:
        src.close()
