"""The devices an estimate is made for: the local GPUs (NVML), a ``--gpus`` spec, a
simulated rig, the GPUs of a rig being watched, and llama-server's ``--rpc`` servers (asked for
their free memory); shared by ``lltui fit``, ``lltui quant``, the fit and launch views and the
API."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lltui.core.cmdline.address import endpoint_is_loopback
from lltui.core.hardware.gpus import short_gpu_name
from lltui.core.memory.devices import (
    DeviceSpec,
    cuda_devices,
    is_mig_uuid,
    memory_bandwidth_gbs,
    mixed_vendors,
    parse_gpus_spec,
    rpc_device,
)
from lltui.core.units import MIB, compact_names, fmt_bytes

if TYPE_CHECKING:  # the rig's models are imported where a rig is read (fit --gpus skips it)
    from lltui.core.monitor.models import GpuSample, RigSample


class DeviceSpecError(ValueError):
    """A --gpus spec that cannot be used; ``str()`` is one line."""


def sim_profile_names() -> list[str]:
    """The simulated rigs an estimate can be made for, by name."""
    from lltui.sources.gpu.sim import PROFILES

    return list(PROFILES)


def sim_devices(profile: str) -> list[DeviceSpec]:
    """A simulated profile's GPUs, empty, in CUDA order."""
    from lltui.sources.gpu.sim import PROFILES, cuda_order

    if profile not in PROFILES:
        known = ", ".join(sorted(PROFILES))
        raise DeviceSpecError(f"--gpus sim:{profile}: no such profile ({known})")
    p = PROFILES[profile]
    order = cuda_order(p)
    gpus = [p.gpus[i] for i in order]
    mems = [(g.name, g.memory_mib * MIB, g.memory_mib * MIB) for g in gpus]
    devs = cuda_devices(mems, [g.spec.vendor for g in gpus])
    # NVLink as the profile's topology has it (a present GPU reports its links up): a
    # tensor split's all-reduces on sim:2x3090-nvlink were priced over PCIe
    nv = {i for pair, cell in p.links.items() if cell.startswith("NV") for i in pair}
    return [
        replace(d, nvlink_active=max(1, p.gpus[i].nvlinks)) if i in nv else d
        for d, i in zip(devs, order, strict=True)
    ]


def mig_devices(sample: RigSample, wanted: Sequence[str]) -> list[DeviceSpec]:
    """The MIG slices ``wanted`` names (their UUIDs, as CUDA_VISIBLE_DEVICES gives them),
    each a CUDA device of its own. DeviceSpecError for a UUID no GPU here has."""
    slices = {m.uuid: (g, m) for g in sample.gpus for m in g.mig}
    out: list[DeviceSpec] = []
    for uuid in wanted:
        found = slices.get(uuid.strip())
        if found is None:
            known = ", ".join(slices) or "none"
            raise DeviceSpecError(f"--gpus {uuid}: no such MIG slice here (slices: {known})")
        g, m = found
        out.append(
            DeviceSpec(
                name=f"CUDA{len(out)}",
                kind="cuda",
                total_bytes=m.memory_total,
                free_bytes=m.memory_free,
                description=f"{g.info.name} MIG {m.profile}",
            )
        )
    return out


def _cuda_visible_migs() -> list[str]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [v.strip() for v in visible.split(",") if v.strip().startswith("MIG-")]


def _hip_memory(g: GpuSample) -> tuple[int | None, int | None]:
    """(total, free) bytes of a GPU as its runtime offers them. An APU whose GTT pool is
    larger than its BIOS carve-out (Strix Halo's 512 MiB) has ROCm allocate from both, and
    hipMemGetInfo, which llama.cpp's HIP build asks, counts both; elsewhere its memory."""
    total, free, gtt = g.info.memory_total, g.free_bytes, g.gtt_total
    if not g.info.unified_memory or total is None or gtt is None or gtt <= total:
        return total, free
    gtt_free = max(gtt - (g.gtt_used or 0), 0)
    return total + gtt, None if free is None else free + gtt_free


def devices_from_sample(sample: RigSample) -> list[DeviceSpec]:
    """The GPUs of a rig sample in CUDA order, with the free memory they report now. Where
    CUDA_VISIBLE_DEVICES names MIG slices, those slices; a GPU in MIG mode is its first
    slice (a CUDA process sees one MIG slice of a GPU)."""
    wanted = _cuda_visible_migs()
    if wanted:
        return mig_devices(sample, wanted)
    firsts = [g.mig[0].uuid for g in sample.gpus if g.mig and not g.lost]
    gpus = [g for g in sample.gpus if not g.lost and not g.info.mig_mode]
    if firsts:  # the whole GPUs first, then a slice of each GPU in MIG mode
        whole = devices_from_sample(replace(sample, gpus=tuple(gpus))) if gpus else []
        slices = mig_devices(sample, firsts)
        return [replace(d, name=f"CUDA{i}") for i, d in enumerate([*whole, *slices])]
    # AMD GPUs (no CUDA index: ROCm numbers them apart) after the NVIDIA ones, as a backend
    # that sees both lists them; an NVIDIA GPU CUDA_VISIBLE_DEVICES hides has no CUDA index
    ordered = sorted(
        gpus,
        key=lambda g: (
            g.info.vendor == "amd",
            g.info.cuda_index if g.info.cuda_index is not None else g.info.index,
        ),
    )
    cuda_known = any(g.info.cuda_index is not None for g in gpus)
    used = [
        g
        for g in ordered
        if g.info.cuda_index is not None or g.info.vendor == "amd" or not cuda_known
    ]
    mems = [(g.info.name, *_hip_memory(g)) for g in used]
    # the PCIe link, memory, power limit, clock and NVLink each reports, for the speed (the
    # table's otherwise)
    return [
        replace(
            d,
            pcie_gen=g.info.pcie_gen_max,
            pcie_width=g.info.pcie_width_max,
            mem_bandwidth_gbs=memory_bandwidth_gbs(
                g.info.max_mem_clock_mhz, g.info.mem_bus_width_bits
            ),
            power_limit_w=g.power_limit_w,
            power_default_w=g.info.power_limit_default_w,
            max_sm_clock_mhz=g.info.max_sm_clock_mhz,
            nvlink_active=g.nvlink_active,
        )
        for d, g in zip(cuda_devices(mems, [g.info.vendor for g in used]), used, strict=True)
    ]


def split_devices(sample: RigSample) -> tuple[list[DeviceSpec], list[str]]:
    """The GPUs of a rig llama-server splits a model over, as fit resolves them (llama.cpp's
    names and order; an integrated GPU beside a discrete one left out, as llama.cpp leaves
    it), and fit's warnings about them (NVIDIA and AMD GPUs in one server, ...)."""
    from lltui.core.cmdline.args import LlamaArgs
    from lltui.core.memory.allocate import integrated_left_out
    from lltui.core.memory.context import select_devices

    devices = devices_from_sample(sample)
    used = list(select_devices(devices, LlamaArgs()))
    said = (integrated_left_out(used, devices), mixed_vendors(used))
    return used, [w for w in said if w]


def _sample(kind: str) -> RigSample:
    """One sample of this machine's GPUs from source ``kind`` (nvml, amd); SourceUnavailable,
    ImportError or OSError without."""
    from lltui.services.rig import RigRequest, sample_once

    return sample_once(RigRequest(kind), settle_s=0)


def _local_samples() -> Iterator[tuple[str, RigSample | Exception]]:
    """One sample of this machine's GPUs from each local source in turn, NVML first, then
    AMD's tools, with its vendor (or why that source cannot be read)."""
    from lltui.core.monitor.models import SourceUnavailable

    for kind, vendor in (("nvml", "NVIDIA"), ("amd", "AMD")):
        try:
            yield vendor, _sample(kind)
        except (SourceUnavailable, ImportError, OSError) as exc:
            yield vendor, exc


def local_devices() -> tuple[list[DeviceSpec], str | None]:
    """This machine's NVIDIA GPUs via NVML, else its AMD GPUs (ROCm0, ...), or none and
    why."""
    reasons = []
    for vendor, got in _local_samples():
        if isinstance(got, Exception):
            reasons.append(f"no local {vendor} GPU ({got})")
            continue
        devices = devices_from_sample(got)
        if devices:
            return devices, None
        reasons.append(f"no local {vendor} GPU")
    return [], "; ".join(reasons) + "; estimated for the host only (see --gpus)"


def busiest_local_gpu() -> float | None:
    """How busy (% of the last moment's time a kernel ran) this machine's busiest GPU is
    now, by one look through NVML, else through AMD's tools; None: no GPU, or none says."""
    for _vendor, got in _local_samples():
        if not isinstance(got, Exception) and got.gpus:
            return max((g.util_gpu for g in got.gpus if g.util_gpu is not None), default=None)
    return None


def resolve_devices(
    spec_text: str | None, rpc: Sequence[str] = (), rpc_max_age_s: float = 0.0
) -> tuple[list[DeviceSpec], list[str]]:
    """Devices for ``--gpus`` (None: the local GPUs), with llama-server's ``--rpc`` servers
    first as it lists them (an answer of theirs up to ``rpc_max_age_s`` old stands); notes
    say what was assumed. DeviceSpecError for a bad spec."""
    notes: list[str] = []
    devices: list[DeviceSpec]
    if spec_text is not None and is_mig_uuid(spec_text.split(",")[0]):
        devices = _local_migs([v for v in spec_text.split(",") if v.strip()])
    elif spec_text is not None:
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


def _local_migs(uuids: Sequence[str]) -> list[DeviceSpec]:
    """MIG slices of this machine by UUID (``--gpus MIG-...``), read through NVML."""
    from lltui.core.monitor.models import SourceUnavailable

    try:
        sample = _sample("nvml")
    except (SourceUnavailable, ImportError, OSError) as exc:
        raise DeviceSpecError(
            f"--gpus {uuids[0]}: a MIG slice needs this machine's GPUs ({exc})"
        ) from None
    return mig_devices(sample, uuids)


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
    rpc_now = [d for d in devices if d.kind == "rpc"]
    known_rpc = {d.endpoint for d in rpc_now}
    extra_rpc = [ep for ep in dict.fromkeys(rpc) if ep not in known_rpc]
    rpc_all = rpc_now + [rpc_device(ep, None, 0, backend="") for ep in extra_rpc]
    ask = [d.endpoint for d in rpc_all if d.total_bytes is None and d.endpoint]
    # every server beyond loopback, asked or given with its memory (--gpus rpc:HOST:PORT=SIZE)
    far = [RPC_WARNING] if any(not endpoint_is_loopback(d.endpoint or "") for d in rpc_all) else []
    # given with its memory and not asked: its backend is what the spec says, else a guess
    guessed = [
        f"{d.device_name} {d.endpoint}: {CUDA_GUESS}: its backend is not given "
        "(rpc:HOST:PORT:cpu=SIZE for the CPU backend)"
        for d in rpc_all
        if not d.backend and d.total_bytes is not None
    ]
    if not ask:
        return rpc_all + [d for d in devices if d.kind != "rpc"], guessed + far
    from lltui.sources.llama.rpc_probe import TIMEOUT_S, RpcProbeError, probe_all

    got_all = probe_all(ask, TIMEOUT_S if timeout_s is None else timeout_s, max_age_s)
    answers = dict(zip(ask, got_all, strict=True))
    out: list[DeviceSpec] = []
    notes: list[str] = []
    for d in rpc_all:
        got = answers.get(d.endpoint or "")
        if isinstance(got, RpcProbeError):
            notes.append(
                f"{got}: its free memory is unknown (llama-server would not start) and so is "
                f"its backend: {CUDA_GUESS}; give them with --gpus rpc:HOST:PORT=SIZE "
                "(rpc:HOST:PORT:cpu=SIZE for the CPU backend)"
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
                    # what the server runs, from its buffer alignment, unless the spec said
                    backend=d.backend or mem.backend,
                )
            )
            notes.append(
                f"RPC{len(out) - 1} {d.endpoint}: {fmt_bytes(mem.free_bytes)} free of "
                f"{fmt_bytes(mem.total_bytes)} (rpc-server {'.'.join(map(str, got.version))})"
            )
    return out + [d for d in devices if d.kind != "rpc"], guessed + notes + far


# an RPC server whose backend neither the spec nor the server said (llama.cpp's own default)
CUDA_GUESS = "estimated as a CUDA GPU"


RPC_WARNING = (
    "llama.cpp RPC has no authentication and no encryption: "
    "keep rpc-server ports on a private network"
)


def describe(devices: Sequence[Any]) -> str:
    """The devices in a few words, identical GPUs together: ``8x H100 80GB HBM3 (CUDA0-7)``,
    ``CUDA0 RTX 4090, CUDA1 RTX 3090``, ``2x 24 GiB (CUDA0,1)``."""
    groups: dict[str, list[str]] = {}
    for d in devices:
        # an RPC server's name already says where it is: each is its own
        groups.setdefault(d.name if d.kind == "rpc" else _what(d), []).append(d.name)
    said = []
    for what, names in groups.items():
        if names == [what]:
            said.append(what)
        elif len(names) > 1:
            said.append(f"{len(names)}x {what} ({compact_names(names)})".replace("  ", " "))
        else:
            said.append(f"{names[0]} {what}".strip())
    return ", ".join(said) or "the host only"


def _what(device: Any) -> str:
    """What a GPU is: its short name, or its size where no name is known."""
    if device.description:
        return short_gpu_name(device.description)
    return fmt_bytes(device.total_bytes) if device.total_bytes else ""
