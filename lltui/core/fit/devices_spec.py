"""``--gpus SPEC``: the devices to estimate for when they are not the local ones.

A SPEC is one of:

- ``cpu``: no GPU, everything stays on the host;
- ``sim:PROFILE``: the GPUs of a simulated rig (resolved by the caller, which knows the
  profiles);
- a comma list of GPUs, each a memory size (``24GiB``, ``16000MiB``), a GPU model from
  :data:`GPU_MODELS` (``T4``, ``RTX 4090``, ``A100-80GB``), optionally repeated (``2xT4``),
  and RPC servers ``rpc:HOST:PORT`` (``rpc:HOST:PORT=24GiB`` for the memory it offers;
  ``rpc:HOST:PORT:cpu`` when the server runs the CPU backend rather than CUDA), e.g. ``T4,T4``
  or ``24GiB,rpc:10.0.0.2:50052``.

Devices get the names llama.cpp gives them in its logs: local GPUs ``CUDA0``, ``CUDA1``, ...
in the order given; RPC servers come first in llama.cpp's device list (it puts them at the
front) and their buffers are named ``RPC0[HOST:PORT]``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lltui.core.units import MIB, parse_size

# Memory as nvidia-smi reports it (MiB) for common GPUs. Free memory at load time is a few
# hundred MiB lower (driver and CUDA context); fit shows that margin separately.
GPU_MODELS: dict[str, tuple[str, int]] = {
    # key (normalised) -> (display name, MiB)
    "t4": ("Tesla T4", 15360),
    "p4": ("Tesla P4", 7680),
    "p40": ("Tesla P40", 24576),
    "p100": ("Tesla P100-PCIE-16GB", 16280),
    "v100": ("Tesla V100-SXM2-16GB", 16384),
    "v10016gb": ("Tesla V100-SXM2-16GB", 16384),
    "v10032gb": ("Tesla V100-SXM2-32GB", 32768),
    "a10": ("NVIDIA A10", 23028),
    "a10g": ("NVIDIA A10G", 23028),
    "a16": ("NVIDIA A16", 15356),
    "a2": ("NVIDIA A2", 15356),
    "a30": ("NVIDIA A30", 24576),
    "a40": ("NVIDIA A40", 46068),
    "a100": ("NVIDIA A100-SXM4-80GB", 81920),
    "a10040gb": ("NVIDIA A100-SXM4-40GB", 40960),
    "a10080gb": ("NVIDIA A100-SXM4-80GB", 81920),
    "l4": ("NVIDIA L4", 23034),
    "l40": ("NVIDIA L40", 46068),
    "l40s": ("NVIDIA L40S", 46068),
    "h100": ("NVIDIA H100 80GB HBM3", 81559),
    "h100pcie": ("NVIDIA H100 PCIe", 81559),
    "h100nvl": ("NVIDIA H100 NVL", 95830),
    "h200": ("NVIDIA H200", 143771),
    "b200": ("NVIDIA B200", 183359),
    "gh200": ("NVIDIA GH200 480GB", 97871),
    "a4000": ("NVIDIA RTX A4000", 16376),
    "a4500": ("NVIDIA RTX A4500", 20470),
    "a5000": ("NVIDIA RTX A5000", 24564),
    "a6000": ("NVIDIA RTX A6000", 49140),
    "6000ada": ("NVIDIA RTX 6000 Ada Generation", 49140),
    "pro6000": ("NVIDIA RTX PRO 6000 Blackwell", 97887),
    "2080ti": ("NVIDIA GeForce RTX 2080 Ti", 11264),
    "3060": ("NVIDIA GeForce RTX 3060", 12288),
    "3070": ("NVIDIA GeForce RTX 3070", 8192),
    "3080": ("NVIDIA GeForce RTX 3080", 10240),
    "3080ti": ("NVIDIA GeForce RTX 3080 Ti", 12288),
    "3090": ("NVIDIA GeForce RTX 3090", 24576),
    "3090ti": ("NVIDIA GeForce RTX 3090 Ti", 24564),
    "4060": ("NVIDIA GeForce RTX 4060", 8188),
    "4060ti": ("NVIDIA GeForce RTX 4060 Ti", 16380),
    "4070": ("NVIDIA GeForce RTX 4070", 12282),
    "4070ti": ("NVIDIA GeForce RTX 4070 Ti", 12282),
    "4080": ("NVIDIA GeForce RTX 4080", 16376),
    "4090": ("NVIDIA GeForce RTX 4090", 24564),
    "5060ti": ("NVIDIA GeForce RTX 5060 Ti", 16311),
    "5070ti": ("NVIDIA GeForce RTX 5070 Ti", 16303),
    "5080": ("NVIDIA GeForce RTX 5080", 16303),
    "5090": ("NVIDIA GeForce RTX 5090", 32607),
}

MAX_DEVICES = 64  # a sanity bound on ``NxMODEL`` and on list length
_REPEAT = re.compile(r"^(?P<n>\d+)\s*[x*]\s*(?P<what>.+)$", re.IGNORECASE)
_NOISE = ("nvidia", "geforce", "tesla", "rtx", "quadro")


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One device llama.cpp would use, with the memory it offers (None: unknown)."""

    name: str  # as llama.cpp names it in its buffer lines: CUDA0, RPC0[10.0.0.2:50052]
    kind: str  # "cuda" or "rpc"
    total_bytes: int | None = None
    free_bytes: int | None = None
    description: str = ""
    endpoint: str | None = None  # HOST:PORT of an RPC server
    dev_name: str = ""  # the name -dev and -ot use (RPC1); empty: same as ``name``
    backend: str = ""  # what runs behind an RPC server: "cuda" (default) or "cpu"

    @property
    def device_name(self) -> str:
        return self.dev_name or self.name

    @property
    def label(self) -> str:
        return f"{self.name} ({self.description})" if self.description else self.name


@dataclass(frozen=True, slots=True)
class GpusSpec:
    """A parsed ``--gpus`` value. ``sim_profile`` is set for ``sim:PROFILE`` (devices
    then come from the profile, resolved by the caller)."""

    devices: tuple[DeviceSpec, ...] = ()
    cpu_only: bool = False
    sim_profile: str | None = None


def normalise_model(name: str) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``4090``; ``A100-80GB`` -> ``a10080gb``."""
    s = name.lower()
    for word in _NOISE:
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


def gpu_model(name: str) -> tuple[str, int] | None:
    """(display name, bytes) of a known GPU model, or None."""
    hit = GPU_MODELS.get(normalise_model(name))
    if hit is None:
        return None
    return hit[0], hit[1] * MIB


def _size(text: str) -> int | None:
    try:
        n = parse_size(text)
    except ValueError:
        return None
    return n if n > 0 else None


def rpc_device(endpoint: str, memory: int | None, index: int, backend: str = "cuda") -> DeviceSpec:
    """An RPC server as llama.cpp names it: device RPC<index>, buffers RPC0[HOST:PORT]."""
    return DeviceSpec(
        name=f"RPC0[{endpoint}]",
        kind="rpc",
        total_bytes=memory,
        free_bytes=memory,
        description=endpoint,
        endpoint=endpoint,
        dev_name=f"RPC{index}",
        backend=backend,
    )


def _parse_rpc(item: str) -> tuple[str, int | None, str]:
    body = item[len("rpc:") :]
    endpoint, _, mem = body.partition("=")
    backend = "cuda"
    head, sep0, tail = endpoint.rpartition(":")
    if sep0 and tail.lower() in ("cpu", "cuda"):
        endpoint, backend = head, tail.lower()
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--gpus: expected rpc:HOST:PORT, got {item!r}")
    memory = None
    if mem:
        memory = _size(mem)
        if memory is None:
            raise ValueError(f"--gpus: {mem!r} is not a memory size (e.g. 24GiB)")
    return endpoint, memory, backend


def parse_gpus_spec(text: str) -> GpusSpec:
    """Parse a ``--gpus`` value; ValueError with one line on anything it cannot read."""
    spec = text.strip()
    if not spec:
        raise ValueError("--gpus: empty; use e.g. 24GiB,24GiB or T4,T4 or cpu or sim:kaggle-2xt4")
    low = spec.lower()
    if low in ("cpu", "none"):
        return GpusSpec(cpu_only=True)
    if low.startswith("sim:"):
        name = spec[4:].strip()
        if not name:
            raise ValueError("--gpus: sim: needs a profile name, e.g. sim:kaggle-2xt4")
        return GpusSpec(sim_profile=name)

    gpus: list[tuple[str, int]] = []  # (description, bytes)
    rpcs: list[tuple[str, int | None, str]] = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            raise ValueError(f"--gpus: empty item in {text!r}")
        if item.lower().startswith("rpc:"):
            rpcs.append(_parse_rpc(item))
            continue
        count = 1
        m = _REPEAT.match(item)
        if m and (gpu_model(m.group("what")) or _size(m.group("what"))):
            count = int(m.group("n"))
            item = m.group("what").strip()
        if not 1 <= count <= MAX_DEVICES:
            raise ValueError(f"--gpus: {count} devices in one item; at most {MAX_DEVICES}")
        known = gpu_model(item)
        if known is not None:
            gpus.extend([known] * count)
            continue
        size = _size(item)
        if size is None:
            raise ValueError(
                f"--gpus: {item!r} is neither a memory size (24GiB) nor a GPU model "
                "this knows (T4, L4, A100-80GB, 4090, ...)"
            )
        gpus.extend([("", size)] * count)
        if len(gpus) + len(rpcs) > MAX_DEVICES:
            break
    if len(gpus) + len(rpcs) > MAX_DEVICES:
        raise ValueError(f"--gpus: more than {MAX_DEVICES} devices")
    devices = [rpc_device(ep, mem, i, be) for i, (ep, mem, be) in enumerate(rpcs)]
    devices += [
        DeviceSpec(
            name=f"CUDA{i}", kind="cuda", total_bytes=size, free_bytes=size, description=desc
        )
        for i, (desc, size) in enumerate(gpus)
    ]
    return GpusSpec(devices=tuple(devices))


def cuda_devices(memories: list[tuple[str, int, int | None]]) -> tuple[DeviceSpec, ...]:
    """Local GPUs as CUDA devices, from (description, total bytes, free bytes) in CUDA order."""
    return tuple(
        DeviceSpec(
            name=f"CUDA{i}", kind="cuda", total_bytes=total, free_bytes=free, description=desc
        )
        for i, (desc, total, free) in enumerate(memories)
    )
