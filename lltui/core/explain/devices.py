"""The devices a log's load used, as the estimator takes them: named as llama.cpp named their
buffers, in its order, with the free memory the log printed; and, where it printed none, the
layers each device took recovered from its weights' buffer lines."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.explain.settings import is_host_buffer
from lltui.core.gguf.model import GgufModel
from lltui.core.llamalog.memory import MAX_DEVICES
from lltui.core.llamalog.models import DeviceSeen, LogFacts, device_of_buffer, rpc_endpoint
from lltui.core.memory.common import CPU
from lltui.core.memory.devices import DeviceSpec, gpu_model
from lltui.core.memory.hparams import Hparams
from lltui.core.memory.placement import place_tensors
from lltui.core.units import MIB

_RPC_DEVICE = re.compile(r"^RPC\d+$")
PRINT_STEP = 0.01 * MIB  # a printed MiB is rounded to this


@dataclass(frozen=True, slots=True)
class LogDevices:
    """The offload devices, each with the buffer name the log printed for it (an RPC name
    may repeat when the user masked its address)."""

    devices: tuple[DeviceSpec, ...]
    printed: tuple[str, ...]
    notes: tuple[str, ...] = ()

    def printed_name(self, internal: str) -> str:
        for d, p in zip(self.devices, self.printed, strict=True):
            if d.name == internal:
                return p
        return internal


def _buffer_name(used: DeviceSeen, buffers: Sequence[str]) -> str:
    """An RPC device is ``RPC1`` with its endpoint as description; its buffers are named
    ``RPC0[endpoint]`` (the remote server's own device): joined by the endpoint."""
    if _RPC_DEVICE.match(used.name) and used.description:
        for name in buffers:
            if rpc_endpoint(name) == used.description:
                return name
    return used.name


def _order(facts: LogFacts) -> list[tuple[str, DeviceSeen | None]]:
    """Device buffer names in llama.cpp's order, one per device (a repeated RPC name counts
    once per weights line, as each is another server), with what the log said of each."""
    last = [b for b in facts.last_load() if b.part == "model"]
    buffer_names = list(dict.fromkeys(device_of_buffer(b.device) for b in last))
    out: list[tuple[str, DeviceSeen | None]] = [
        (_buffer_name(d, buffer_names), d) for d in facts.devices if d.source == "using device"
    ]
    info = {d.name: d for d in facts.devices}
    for d in facts.devices:  # RPC devices by their buffers' name
        if _RPC_DEVICE.match(d.name) and d.description:
            info.setdefault(_buffer_name(d, buffer_names), d)
    have = Counter(n for n, _ in out)
    seen: Counter[str] = Counter()
    for b in last:
        name = device_of_buffer(b.device)  # (MTL0_Mapped: MTL0's)
        if is_host_buffer(b.device) or len(out) >= MAX_DEVICES:
            continue
        seen[name] += b.kind == "model"
        # another weights line of an RPC name is another server; else one device a name
        if have[name] == 0 or (rpc_endpoint(name) is not None and have[name] < seen[name]):
            out.append((name, info.get(name)))
            have[name] += 1
    if not last and not out:
        out = [
            (d.name, d) for d in facts.devices if not is_host_buffer(d.name) and d.name != "Host"
        ]
    return [(n, d) for n, d in out if not n.endswith("_Split")]


def _spec(
    name: str,
    total: int | None,
    free: int | None,
    desc: str,
    endpoint: str | None,
    rpc_index: int,
) -> DeviceSpec:
    """A logged device as the estimator takes it: an RPC server (by its endpoint) or a GPU."""
    if endpoint is None:
        backend = "vulkan" if name.startswith("Vulkan") else ""
        return DeviceSpec(
            name, "cuda", total_bytes=total, free_bytes=free, description=desc, backend=backend
        )
    return DeviceSpec(
        name=name,
        kind="rpc",
        total_bytes=total,
        free_bytes=free,
        description=endpoint,
        endpoint=endpoint,
        dev_name=f"RPC{rpc_index}",
    )


def _meta_devices(facts: LogFacts) -> LogDevices:
    """-sm tensor: the devices inside the log's ``Meta()`` device, each with the free memory
    the log's device list printed (their buffers are logged only as the Meta device's)."""
    seen = {d.name: d for d in facts.devices}
    devices: list[DeviceSpec] = []
    for i, (name, desc) in enumerate(facts.meta_devices):
        info = seen.get(name)
        free = info.free_mib * MIB if info is not None and info.free_mib is not None else None
        total = info.total_mib * MIB if info is not None and info.total_mib is not None else None
        endpoint = desc if _RPC_DEVICE.match(name) and desc else None
        internal = f"{name}[{desc}]" if endpoint else name
        devices.append(_spec(internal, total, free, desc, endpoint, i))
    note = (
        f"-sm tensor over {len(devices)} devices: llama.cpp logs one Meta() buffer of each kind, "
        "the largest device's; each device's share is lltui's"
    )
    return LogDevices(tuple(devices), tuple(d.name for d in devices), (note,))


def log_devices(facts: LogFacts) -> LogDevices:
    """The devices of the log's last load, as DeviceSpecs the estimator places onto."""
    if facts.meta_devices:
        return _meta_devices(facts)
    devices: list[DeviceSpec] = []
    printed: list[str] = []
    notes: list[str] = []
    rpc_index = 0
    for name, info in _order(facts):
        free = info.free_mib * MIB if info is not None and info.free_mib is not None else None
        total = info.total_mib * MIB if info is not None and info.total_mib is not None else None
        desc = (info.description or "") if info is not None else ""
        if total is None and desc and (known := gpu_model(desc)) is not None:
            total = known[1]
        internal = name if name not in printed else f"{name}#{printed.count(name) + 1}"
        endpoint = rpc_endpoint(name)
        devices.append(_spec(internal, total, free, desc, endpoint, rpc_index))
        rpc_index += endpoint is not None
        printed.append(name)
    vulkan = sorted({n for n in printed if n.startswith("Vulkan")})
    if vulkan:
        notes.append(
            f"{', '.join(vulkan)}: weights and KV sized as ggml-vulkan sizes them (no row "
            "padding, 64-byte alignment assumed); compute buffers by CUDA's graph rules"
        )
    if odd := sorted({n for n in printed if not _is_modelled(n)}):
        notes.append(
            f"{', '.join(odd)}: buffers sized with CUDA's alignment (other backends' padding "
            "is not modelled)"
        )
    return LogDevices(tuple(devices), tuple(printed), tuple(notes))


def _is_modelled(name: str) -> bool:
    """A backend whose sizes lltui models: ggml-cuda (CUDA, ROCm, MUSA), Vulkan, RPC."""
    return name.startswith(("CUDA", "ROCm", "MUSA", "Vulkan", "RPC"))


def logged_weights(facts: LogFacts, devs: LogDevices) -> list[int] | None:
    """Bytes of weights the log printed for each device, in order (None if one is missing)."""
    last = [b for b in facts.last_load() if b.part == "model" and b.kind == "model"]
    out: list[int] = []
    used: dict[str, int] = {}
    for name in devs.printed:
        k = used.get(name, 0)
        lines = [b for b in last if device_of_buffer(b.device) == name]
        if k >= len(lines):
            return None
        out.append(lines[k].logged_bytes)
        used[name] = k + 1
    return out


def infer_split(
    model: GgufModel,
    hp: Hparams,
    args: LlamaArgs,
    devices: Sequence[DeviceSpec],
    logged: Sequence[int],
    ngl: int,
    repack_profile: str = "x86",
) -> tuple[int, ...] | None:
    """Layers per device (a ``-ts`` that reproduces them) whose weights add up to what the
    log printed for each device; None when no split does (within the print's rounding and
    a tensor's alignment per line)."""
    n_all = hp.n_layer_all + 1
    ngl = min(max(ngl, 0), n_all)
    if len(devices) < 2 or ngl == 0:
        return None
    start = n_all - ngl
    ldev = [-1 if il < start else 0 for il in range(n_all)]
    placements, _ = place_tensors(
        model, hp, args, devices[:1], ldev, all_devices=devices[:1], repack_profile=repack_profile
    )
    per_layer = [0] * n_all
    for p in placements:
        if p.device != CPU and p.layer is not None and not p.duplicate:
            per_layer[p.layer] += p.alloc_bytes
    counts: list[int] = []
    il = start
    for i, target in enumerate(logged):
        if i == len(logged) - 1:
            counts.append(n_all - il)
            rest = sum(per_layer[il:])
            if abs(rest - target) > _slack(target):
                return None
            break
        total, best, best_err = 0, 0, abs(target)
        k = 0
        while il + k < n_all - 1:  # the output layer goes last, with the last device
            total += per_layer[il + k]
            k += 1
            err = abs(total - target)
            if err < best_err:
                best, best_err = k, err
            if total > target + _slack(target):
                break
        if best_err > _slack(target):
            return None
        counts.append(best)
        il += best
    return tuple(counts) if sum(counts) == ngl else None


def _slack(target: int) -> int:
    """What rounding and per-device extras (a rope table, alignment) may add to a buffer."""
    return int(max(2 * PRINT_STEP, target * 0.002))
