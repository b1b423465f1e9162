"""The devices an estimate is made for (local GPUs, a --gpus spec, a simulated rig, --rpc
servers) and the model file it reads; shared by ``lltui fit``, ``lltui quant`` and the fit view."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lltui.core.gguf.reader import GgufError, GgufModel, read_gguf
from lltui.core.memory.devices import (
    DeviceSpec,
    cuda_devices,
    memory_bandwidth_gbs,
    parse_gpus_spec,
    rpc_device,
)
from lltui.core.units import MIB, fmt_bytes

if TYPE_CHECKING:  # the rig's models are imported where a rig is read (fit --gpus skips it)
    from lltui.core.llama.args import LlamaArgs
    from lltui.core.memory.parts import ExtraModels
    from lltui.core.monitor.models import RigSample


class DeviceSpecError(ValueError):
    """A --gpus spec or model file that cannot be used; ``str()`` is one line."""


class RemoteModelError(DeviceSpecError):
    """A remote model that cannot be read; ``code`` 1 (network, server) or 2 (reference)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class ModelChoice(RemoteModelError):
    """A reference to a repository that names no one model in it: ``lines`` (a table of its
    models and sizes) and ``data`` (the same for --json) to choose from; ``named``: whether
    a file or quantization was given (and matched none, or several)."""

    def __init__(self, message: str, lines: list[str], data: dict[str, Any], named: bool):
        super().__init__(message, 2)
        self.lines = lines
        self.data = data
        self.named = named


def read_model(path: str, verb: str = "fit") -> GgufModel:
    """The GGUF header; DeviceSpecError with one line for a missing or corrupt file. A remote
    reference (hf:OWNER/REPO..., an https URL) is read by ranged requests."""
    from lltui.core.gguf.refs import is_remote_ref

    if is_remote_ref(path):
        return _read_remote(path, verb)
    try:
        return read_gguf(path)
    except GgufError as exc:
        raise DeviceSpecError(str(exc)) from None
    except FileNotFoundError:
        raise DeviceSpecError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DeviceSpecError(f"{path}: is a directory, not a GGUF file") from None
    except OSError as exc:
        raise DeviceSpecError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_extra_models(settings: LlamaArgs, verb: str = "fit") -> ExtraModels | None:
    """The headers of the draft model, projector and LoRA adapters ``settings`` name, read
    like the model (local files, hf: references, https URLs); None when there are none."""
    from lltui.core.memory.parts import ExtraModels

    if not (settings.draft_model or settings.mmproj or settings.lora):
        return None

    def read(path: str, flag: str) -> GgufModel:
        try:
            return read_model(path, verb)
        except ModelChoice:
            raise
        except RemoteModelError as exc:
            raise RemoteModelError(f"{flag} {exc}", exc.code) from None
        except DeviceSpecError as exc:
            raise DeviceSpecError(f"{flag} {exc}") from None

    return ExtraModels(
        draft=read(settings.draft_model, "-md") if settings.draft_model else None,
        mmproj=read(settings.mmproj, "--mmproj") if settings.mmproj else None,
        loras=tuple(read(p, "--lora") for p in settings.lora),
    )


def _read_remote(text: str, verb: str) -> GgufModel:
    from lltui.sources.models.remote import read_remote_model
    from lltui.sources.models.remote_gguf import RemoteError

    try:
        return read_remote_model(text, verb)
    except RemoteError as exc:
        from lltui.sources.models.hf_hub import RepoChoice

        if isinstance(exc, RepoChoice):
            from lltui.core.gguf.refs import HfRef, listing_json, listing_lines

            ref = exc.listing.ref
            base = HfRef(ref.repo, None, ref.revision).text()
            raise ModelChoice(
                str(exc),
                listing_lines(base, exc.listing.models, verb),
                listing_json(base, exc.listing.commit, exc.listing.models),
                ref.selector is not None,
            ) from None
        raise RemoteModelError(str(exc), exc.code) from None


def sim_devices(profile: str) -> list[DeviceSpec]:
    """A simulated profile's GPUs, empty, in CUDA order."""
    from lltui.sources.gpu.sim import PROFILES, cuda_order

    if profile not in PROFILES:
        known = ", ".join(sorted(PROFILES))
        raise DeviceSpecError(f"--gpus sim:{profile}: no such profile ({known})")
    p = PROFILES[profile]
    return [
        DeviceSpec(
            name=f"CUDA{k}",
            kind="cuda",
            total_bytes=p.gpus[i].memory_mib * MIB,
            free_bytes=p.gpus[i].memory_mib * MIB,
            description=p.gpus[i].name,
        )
        for k, i in enumerate(cuda_order(p))
    ]


def devices_from_sample(sample: RigSample) -> list[DeviceSpec]:
    """The GPUs of a rig sample in CUDA order, with the free memory they report now."""
    gpus = [g for g in sample.gpus if not g.lost]
    ordered = sorted(
        gpus,
        key=lambda g: g.info.cuda_index if g.info.cuda_index is not None else g.info.index,
    )
    used = [
        g
        for g in ordered
        if g.info.cuda_index is not None or all(x.info.cuda_index is None for x in gpus)
    ]
    mems = [(g.info.name, g.info.memory_total, g.memory_free) for g in used]
    # the PCIe link and memory each reports, for the speed (the table's otherwise)
    return [
        replace(
            d,
            pcie_gen=g.info.pcie_gen_max,
            pcie_width=g.info.pcie_width_max,
            mem_bandwidth_gbs=memory_bandwidth_gbs(
                g.info.max_mem_clock_mhz, g.info.mem_bus_width_bits
            ),
        )
        for d, g in zip(cuda_devices(mems), used, strict=True)
    ]


def local_devices() -> tuple[list[DeviceSpec], str | None]:
    """This machine's NVIDIA GPUs via NVML, or none and why."""
    from lltui.core.monitor.models import SourceUnavailable

    try:
        from lltui.sources.gpu.kinds import SourceSpec, make_source

        source = make_source(SourceSpec("nvml"))
        source.open()
        try:
            sample = source.poll()
        finally:
            source.close()
    except (SourceUnavailable, ImportError, OSError) as exc:
        return [], f"no local NVIDIA GPU ({exc}); estimated for the host only (see --gpus)"
    devices = devices_from_sample(sample)
    if not devices:
        return [], "no local NVIDIA GPU; estimated for the host only (see --gpus)"
    return devices, None


def host_available() -> int | None:
    """Host memory available now: MemAvailable from /proc/meminfo on Linux (what psutil
    reports, without importing it: a fit or quant run is a short process), else psutil."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return None


def resolve_devices(
    spec_text: str | None, rpc: Sequence[str] = (), rpc_max_age_s: float = 0.0
) -> tuple[list[DeviceSpec], list[str]]:
    """Devices for ``--gpus`` (None: the local GPUs), with llama-server's ``--rpc`` servers
    first as it lists them (an answer of theirs up to ``rpc_max_age_s`` old stands); notes
    say what was assumed. DeviceSpecError for a bad spec."""
    notes: list[str] = []
    devices: list[DeviceSpec]
    if spec_text is not None:
        try:
            spec = parse_gpus_spec(spec_text)
        except ValueError as exc:
            raise DeviceSpecError(str(exc)) from None
        devices = sim_devices(spec.sim_profile) if spec.sim_profile else list(spec.devices)
    else:
        devices, note = local_devices()
        if note:
            notes.append(note)
    devices, rpc_notes = with_rpc(devices, rpc, max_age_s=rpc_max_age_s)
    return devices, notes + rpc_notes


def with_rpc(
    devices: Sequence[DeviceSpec],
    rpc: Sequence[str],
    timeout_s: float | None = None,
    max_age_s: float = 0.0,
) -> tuple[list[DeviceSpec], list[str]]:
    """``devices`` with llama-server's ``--rpc`` servers not already among them, first as
    llama.cpp lists them. Each RPC server whose memory was not given is asked (all at once,
    within ``timeout_s``; an answer up to ``max_age_s`` old stands): one device per device
    it serves, with its free memory; a note per server says what it reported, or why its
    free memory stays unknown."""
    from lltui.sources.llama.rpc_probe import TIMEOUT_S, RpcProbeError, probe_all

    rpc_now = [d for d in devices if d.kind == "rpc"]
    known_rpc = {d.endpoint for d in rpc_now}
    extra_rpc = [ep for ep in dict.fromkeys(rpc) if ep not in known_rpc]
    rpc_all = rpc_now + [rpc_device(ep, None, 0) for ep in extra_rpc]
    ask = [d.endpoint for d in rpc_all if d.total_bytes is None and d.endpoint]
    if not ask:
        return rpc_all + [d for d in devices if d.kind != "rpc"], []
    got_all = probe_all(ask, TIMEOUT_S if timeout_s is None else timeout_s, max_age_s)
    answers = dict(zip(ask, got_all, strict=True))
    out: list[DeviceSpec] = []
    notes: list[str] = []
    for d in rpc_all:
        got = answers.get(d.endpoint or "")
        if isinstance(got, RpcProbeError):
            notes.append(
                f"{got}: its free memory is unknown (llama-server would not start); "
                "give it with --gpus rpc:HOST:PORT=SIZE"
            )
        if got is None or isinstance(got, RpcProbeError):
            out.append(replace(d, dev_name=f"RPC{len(out)}"))
            continue
        for i, mem in enumerate(got.devices):
            # llama.cpp: device RPC<n> counted over all servers, buffers RPC<i>[HOST:PORT]
            out.append(
                replace(
                    d,
                    name=f"RPC{i}[{d.endpoint}]",
                    dev_name=f"RPC{len(out)}",
                    total_bytes=mem.total_bytes,
                    free_bytes=mem.free_bytes,
                )
            )
            notes.append(
                f"RPC{len(out) - 1} {d.endpoint}: {fmt_bytes(mem.free_bytes)} free of "
                f"{fmt_bytes(mem.total_bytes)} (rpc-server {'.'.join(map(str, got.version))})"
            )
    if any(not _loopback(ep) for ep in ask):
        notes.append(RPC_WARNING)
    return out + [d for d in devices if d.kind != "rpc"], notes


RPC_WARNING = (
    "llama.cpp RPC has no authentication and no encryption: "
    "keep rpc-server ports on a private network"
)


def _loopback(endpoint: str) -> bool:
    host = endpoint.rpartition(":")[0].strip("[]").lower()
    if host == "localhost":
        return True
    try:  # "127.evil.example" is a name, not the loopback network
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def describe(devices: Sequence[Any]) -> str:
    return ", ".join(f"{d.name} {d.description}".strip() for d in devices) or "the host only"
