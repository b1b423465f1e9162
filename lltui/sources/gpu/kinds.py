"""The GPU source kinds, in one table: how ``--source`` spells each, what its argument is,
how it is made, and the help text the command line shows for them. ``auto`` falls back to a
simulated rig. A new GPU backend is one module and one row here."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # every CLI run reads the table (--source's help): keep it light
    from lltui.core.monitor.models import GpuSource, GpuStatic, RigInfo, RigSample


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    speed: float = 1.0  # times the recorded pace
    stepped: bool = False  # one recorded sample per poll, whatever the recorded timing
    loop: bool = False


@dataclass(frozen=True, slots=True)
class SourceSpec:
    kind: str  # a name of SOURCE_KINDS
    arg: str | None = None

    def __str__(self) -> str:
        return self.kind if self.arg is None else f"{self.kind}:{self.arg}"


@dataclass(frozen=True, slots=True)
class MakeOptions:
    """What a source is made with besides its spec."""

    sim_reason: str | None = None  # why a simulated rig stands in (auto without a GPU)
    seed: int = 0
    replay: ReplayOptions | None = None
    # one look at what the GPUs are and hold (fit): no process lists or PCIe throughput,
    # which NVML takes 20 ms a counter a GPU to give
    facts_only: bool = False
    # another host's (smi:HOST, amd:HOST) open's and poll's commands, shared (--host-timeout;
    # None: the source's own)
    host_timeout: float | None = None


@dataclass(frozen=True)
class SourceKind:
    """One kind of GPU source. ``forms``: how ``--source`` spells it (for the help);
    ``check``: the argument as given -> as kept (ValueError with one line); ``make``:
    constructs the source, unopened (None: ``auto``, which chooses among the others)."""

    name: str
    forms: tuple[str, ...]
    check: Callable[[str], str | None]
    make: Callable[[SourceSpec, MakeOptions], GpuSource] | None
    note: str = ""  # a word on what it is, in the help
    # what a kind can tell besides its samples: callers ask these, not the kind's name
    simulated: bool = False  # a made-up rig: its topology and NCCL facts are a profile's
    recorded: bool = False  # a recording: samples keep the times they were taken at
    no_topology: str = ""  # why no topology can be read for it (empty: one can)
    host_arg: bool = False  # its argument is another machine (over ssh), not this one
    url_arg: bool = False  # its argument is a URL (whose password must not name a host)
    local_pids: bool = False  # without an argument, its processes are this machine's
    xids: bool = False  # it reports the driver's XID errors (NVML's events): none is 0


def pids_here(source: str | None) -> bool:
    """Whether the processes a source of this name reports are this machine's (their pids
    can be looked up in /proc): a local driver's, not a remote host's or a made-up rig's."""
    kind = kind_of(source)
    return kind.local_pids and not (source or "").partition(":")[2]


def _no_arg(name: str) -> Callable[[str], str | None]:
    def check(arg: str) -> str | None:
        if arg:
            raise ValueError(f"--source {name} takes no argument, got {name}:{arg}")
        return None

    return check


def _ssh_host(arg: str) -> str | None:
    """``[user@]host[:port]`` as ssh will be given it (None: this machine). A fleet's host
    that ssh cannot be given is bad input, not a host down and retried for ever."""
    if not arg:
        return None
    from lltui.sources.ssh import check_host, split_host_port

    check_host(split_host_port(arg)[0])
    return arg


def _sim_profile(arg: str) -> str:
    from lltui.sources.gpu.sim import DEFAULT_PROFILE, PROFILES

    name = arg or DEFAULT_PROFILE
    if name not in PROFILES:
        raise ValueError(
            f"unknown simulated profile {name!r}; choose one of: {', '.join(PROFILES)}"
        )
    return name


def _replay_file(arg: str) -> str:
    if not arg:
        raise ValueError("replay needs a file: --source replay:FILE")
    return arg


def _url(kind: str) -> Callable[[str], str]:
    def check(arg: str) -> str:
        from lltui.sources.gpu.prom import check_url

        check_url(kind, arg)
        return arg

    return check


# where the NVIDIA driver runs it shows one of these (in a container too: the runtime mounts
# them; WSL's GPU is /dev/dxg); where none is, NVML cannot start, and nvidia-ml-py is not
# loaded (tens of ms of every command on a machine without a GPU) to learn so
NVIDIA_DRIVER_PATHS = ("/dev/nvidiactl", "/proc/driver/nvidia", "/dev/dxg")
NO_NVIDIA_DRIVER = "NVIDIA driver not loaded (no /dev/nvidiactl or /proc/driver/nvidia here)"


def nvidia_driver_seen() -> bool:
    """Whether this machine shows the NVIDIA driver, or a binding is already loaded (a
    test's stand-in among them)."""
    import os
    import sys

    return "pynvml" in sys.modules or any(os.path.exists(p) for p in NVIDIA_DRIVER_PATHS)


def _make_nvml(spec: SourceSpec, opts: MakeOptions) -> GpuSource:
    if not nvidia_driver_seen():
        from lltui.core.monitor.models import SourceUnavailable

        raise SourceUnavailable(NO_NVIDIA_DRIVER)
    from lltui.sources.gpu.nvml import NvmlSource

    if opts.facts_only:
        return NvmlSource(process_ttl_s=math.inf, pcie_ttl_s=math.inf)
    return NvmlSource()


def _make_smi(spec: SourceSpec, opts: MakeOptions) -> GpuSource:
    from lltui.sources.gpu.smi import SmiSource
    from lltui.sources.ssh import split_host_port

    host, port = split_host_port(spec.arg) if spec.arg else (None, None)
    return SmiSource(host=host, port=port, timeout=opts.host_timeout if host else None)


def _make_amd(spec: SourceSpec, opts: MakeOptions) -> GpuSource:
    from lltui.sources.gpu.amd.source import AmdSource

    if not spec.arg:  # this machine's (auto's on every machine): no ssh
        return AmdSource()
    from lltui.sources.ssh import split_host_port

    host, port = split_host_port(spec.arg)
    return AmdSource(host, port=port, timeout=opts.host_timeout)


def _make_sim(spec: SourceSpec, opts: MakeOptions) -> GpuSource:
    from lltui.sources.gpu.sim import DEFAULT_PROFILE, SimSource

    return SimSource(spec.arg or DEFAULT_PROFILE, seed=opts.seed, reason=opts.sim_reason)


def _make_replay(spec: SourceSpec, opts: MakeOptions) -> GpuSource:
    from lltui.sources.gpu.replay import ReplaySource

    r = opts.replay or ReplayOptions()
    return ReplaySource(spec.arg or "", speed=r.speed, stepped=r.stepped, loop=r.loop)


def _make_prom(spec: SourceSpec, opts: MakeOptions) -> GpuSource:
    from lltui.sources.gpu.prom import PromSource

    return PromSource(spec.arg or "")


def _make_scrape(spec: SourceSpec, opts: MakeOptions) -> GpuSource:
    from lltui.sources.gpu.prom import ScrapeSource

    return ScrapeSource(spec.arg or "")


_REMOTE_TOPOLOGY = "holds no topology lltui can read: pass a saved nvidia-smi topo -m with --file"
SOURCE_KINDS: tuple[SourceKind, ...] = (
    SourceKind("auto", ("auto",), _no_arg("auto"), None, "default"),
    SourceKind("nvml", ("nvml",), _no_arg("nvml"), _make_nvml, local_pids=True, xids=True),
    SourceKind("smi", ("smi", "smi:HOST"), _ssh_host, _make_smi, host_arg=True, local_pids=True),
    SourceKind(
        "amd",
        ("amd", "amd:HOST"),
        _ssh_host,
        _make_amd,
        "AMD: amdsmi, amd-smi, rocm-smi",
        host_arg=True,
        local_pids=True,
    ),
    SourceKind("sim", ("sim", "sim:PROFILE"), _sim_profile, _make_sim, simulated=True),
    SourceKind(
        "replay",
        ("replay:FILE",),
        _replay_file,
        _make_replay,
        recorded=True,
        no_topology="a replay holds no topology: pass a saved nvidia-smi topo -m with --file",
    ),
    SourceKind(
        "prom",
        ("prom:URL[#host=NAME]",),
        _url("prom"),
        _make_prom,
        "a Prometheus server",
        no_topology=f"a Prometheus server {_REMOTE_TOPOLOGY}",
        url_arg=True,
    ),
    SourceKind(
        "scrape",
        ("scrape:URL",),
        _url("scrape"),
        _make_scrape,
        "an exporter's /metrics",
        no_topology=f"an exporter's /metrics {_REMOTE_TOPOLOGY}",
        url_arg=True,
    ),
)
KINDS: dict[str, SourceKind] = {k.name: k for k in SOURCE_KINDS}


def kind_of(source: str | None) -> SourceKind:
    """The kind of a ``--source`` spec or a source's name (RigInfo.source: ``sim:4xl4``,
    ``replay:FILE``); a name no kind spells (a combined rig's) is taken as auto's."""
    return KINDS.get((source or "auto").partition(":")[0].strip().lower(), KINDS["auto"])


def watches_xids(source: str | None, gpu: GpuStatic) -> bool:
    """Whether a source of this name (a combined rig's parts too) reports this GPU's XID
    errors: NVML's events do, for its NVIDIA GPUs; nothing else sees them."""
    return gpu.vendor != "amd" and any(kind_of(part).xids for part in (source or "").split("+"))


def source_help() -> str:
    """Every form ``--source`` takes, for the command line's help and its errors."""
    words = []
    for kind in SOURCE_KINDS:
        forms = list(kind.forms)
        if kind.note:
            forms[-1] += f" ({kind.note})"
        words += forms
    return ", ".join(words[:-1]) + f" or {words[-1]}"


def parse_source_spec(text: str | None) -> SourceSpec:
    """Parse ``--source``; raises ValueError with one line for a spec we do not know."""
    spec = (text or "auto").strip()
    name, _, arg = spec.partition(":")
    kind = KINDS.get(name.lower())
    if kind is None:
        raise ValueError(f"unknown source {spec!r}; use {source_help()}")
    return SourceSpec(kind.name, kind.check(arg))


def split_sources(text: str | None) -> list[str]:
    """``smi:h1,smi:h2,nvml`` as its specs. A comma starts a new spec only where a source
    kind follows it (``kind`` or ``kind:``), so a comma inside a path or URL stays put."""
    pieces: list[str] = []
    for piece in (text or "").split(","):
        word = piece.strip().partition(":")[0].lower()
        if pieces and word not in KINDS:
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
    facts_only: bool = False,
    host_timeout: float | None = None,
) -> GpuSource:
    """Construct (but do not open) the source a spec names."""
    kind = KINDS.get(spec.kind)
    if kind is None or kind.make is None:
        raise ValueError(f"cannot construct source {spec}")
    return kind.make(spec, MakeOptions(sim_reason, seed, replay, facts_only, host_timeout))


# what ``auto`` tries, in order; every one that opens is shown (a host with NVIDIA and AMD
# GPUs is one rig of both), and none opening falls back to a simulated rig
AUTO_ORDER: tuple[str, ...] = ("nvml", "amd")
AUTO_FALLBACK = SourceSpec("sim")
_AUTO_WORDS = {"nvml": "no NVIDIA GPU here", "amd": "no AMD GPU here"}


def _opened(source: GpuSource) -> RigInfo:
    """``source.open()``; a source that fails to open is closed (an ssh source's master
    would otherwise live on for ControlPersist after lltui)."""
    try:
        return source.open()
    except BaseException:
        with contextlib.suppress(Exception):
            source.close()
        raise


def open_source(
    text: str | None,
    *,
    seed: int = 0,
    replay: ReplayOptions | None = None,
    facts_only: bool = False,
    host_timeout: float | None = None,
) -> tuple[GpuSource, RigInfo]:
    """Open the source ``--source`` names (``facts_only``, ``host_timeout``: see
    MakeOptions).

    ``auto`` is every vendor's source that opens with at least one GPU (NVML, then AMD;
    both: one combined rig); none: the default simulated rig, whose RigInfo says SIMULATED
    and why in plain words. Every other spec raises SourceUnavailable with a one-line
    reason when it cannot run here.
    """
    from lltui.core.monitor.models import SourceUnavailable

    spec = parse_source_spec(text)
    if spec.kind != "auto":
        source = make_source(
            spec, seed=seed, replay=replay, facts_only=facts_only, host_timeout=host_timeout
        )
        return source, _opened(source)
    opened: list[tuple[GpuSource, RigInfo]] = []
    reasons = []
    for name in AUTO_ORDER:
        try:
            source = make_source(SourceSpec(name), facts_only=facts_only)
            opened.append((source, _opened(source)))
        except SourceUnavailable as exc:
            reasons.append(f"{_AUTO_WORDS[name]}: {exc}")
        except ImportError as exc:  # the binding is missing from this install
            reasons.append(f"{_AUTO_WORDS[name]}: nvidia-ml-py is not importable: {exc}")
    if len(opened) == 1:
        return opened[0]
    if opened:
        from lltui.sources.gpu.combined import CombinedSource

        combined = CombinedSource([s for s, _ in opened], [i for _, i in opened])
        return combined, combined.open()
    reason = "; ".join(reasons) + "; showing a simulated rig"
    sim = make_source(parse_source_spec(str(AUTO_FALLBACK)), sim_reason=reason, seed=seed)
    return sim, sim.open()


def one_sample(source: str = "nvml") -> RigSample | None:
    """One sample of the rig ``source`` names, or None where a source of this machine finds
    no GPU, driver or binding here; SourceUnavailable for another host, a file or a server
    that cannot be read (not a rig without GPUs).

    For NVML only the fast fields are read (names, memory, power...): no process lists,
    PCIe throughput (20 ms per counter) or NVLink state, which these functions do not use."""
    from lltui.core.monitor.models import SourceUnavailable

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
        if pids_here(source):
            return None
        raise
    try:
        sample = src.poll()
    finally:
        src.close()
    # auto's simulated rig stands in for GPUs that are not here: none to these functions
    return None if sample.info.stand_in else sample
