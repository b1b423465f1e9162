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


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One NVIDIA GPU model: what fit needs for memory and what the speed model needs.

    ``mib`` is the memory nvidia-smi reports; free memory at load time is a few hundred MiB
    lower (driver and CUDA context), which fit shows as a separate margin. Throughputs are
    dense (no sparsity), from NVIDIA's datasheets and whitepapers: ``fp16_tflops`` is the FP16
    tensor-core rate with FP16 accumulation where it differs (GeForce; without tensor cores,
    the FP32 rate llama.cpp then runs F16 matmuls at), ``int8_tops`` the INT8 tensor-core rate
    (DP4A on Pascal and Volta) that quantized matmuls (MMQ) run on.
    """

    name: str  # as NVML reports it
    mib: int
    bandwidth_gbs: float  # memory bandwidth, GB/s
    fp16_tflops: float
    int8_tops: float
    cc: tuple[int, int]  # compute capability
    pcie_gen: int
    nvlink_links: int = 0  # links per GPU on the SXM/HGX board or bridge; 0: none
    aliases: tuple[str, ...] = ()  # normalised short names besides the NVML name's
    pcie_width: int = 16  # lanes of its PCIe link

    @property
    def memory(self) -> str:
        return "HBM" if self.bandwidth_gbs >= 1500 or self.cc in ((6, 0), (7, 0)) else "GDDR"


_M = GpuModel
# One row per GPU model, Pascal on. Keys are the NVML name normalised (see normalise_model)
# plus the aliases; "4090", "a100-80gb", "h100" all work. Sources: NVIDIA's datasheets and
# architecture whitepapers (Ada: "NVIDIA Ada GPU Architecture" appendix; Blackwell: "NVIDIA
# RTX Blackwell GPU Architecture" and the RTX PRO datasheets). Where NVIDIA quotes only
# sparse "AI TOPS", dense INT8 is half of a sparse FP8/INT8 figure (Ada) or a quarter of a
# sparse FP4 one (Blackwell), and FP16 half of dense INT8: e.g. RTX 5070, 988 AI TOPS ->
# 247 INT8, 123.5 FP16; RTX PRO 4000 Blackwell, 1247 -> 312, 156; RTX 4080 SUPER, 836
# FP8 sparse -> 418, 209.
GPU_TABLE: tuple[GpuModel, ...] = (
    # Pascal
    _M("Tesla P4", 7680, 192, 5.5, 22, (6, 1), 3, 0, ("p4",)),
    _M("Tesla P40", 24576, 347, 11.8, 47, (6, 1), 3, 0, ("p40",)),
    _M("Tesla P100-PCIE-16GB", 16280, 732, 18.7, 18.7, (6, 0), 3, 0, ("p100", "p100pcie")),
    _M("Tesla P100-SXM2-16GB", 16280, 732, 21.2, 21.2, (6, 0), 3, 4, ("p100sxm2",)),
    _M("NVIDIA GeForce GTX 1080 Ti", 11264, 484, 11.3, 45, (6, 1), 3, 0, ("1080ti",)),
    _M("NVIDIA GeForce GTX 1080", 8192, 320, 8.9, 35, (6, 1), 3, 0, ("1080",)),
    # Volta
    _M("Tesla V100-SXM2-16GB", 16384, 900, 125, 62, (7, 0), 3, 6, ("v100", "v10016gb")),
    _M("Tesla V100-SXM2-32GB", 32768, 900, 125, 62, (7, 0), 3, 6, ("v10032gb",)),
    _M("Tesla V100-PCIE-16GB", 16384, 900, 112, 56, (7, 0), 3, 0, ("v100pcie",)),
    _M("Tesla V100-PCIE-32GB", 32768, 900, 112, 56, (7, 0), 3, 0, ()),
    _M("Tesla V100S-PCIE-32GB", 32768, 1134, 130, 65, (7, 0), 3, 0, ("v100s",)),
    # Turing
    _M("Tesla T4", 15360, 320, 65, 130, (7, 5), 3, 0, ("t4",)),
    _M("NVIDIA GeForce RTX 2080 Ti", 11264, 616, 107.6, 215, (7, 5), 3, 2, ("2080ti",)),
    _M("Quadro RTX 6000", 24576, 672, 130.5, 261, (7, 5), 3, 2, ("6000", "quadro6000")),
    _M("Quadro RTX 8000", 49152, 672, 130.5, 261, (7, 5), 3, 2, ("8000",)),
    _M("NVIDIA GeForce RTX 2080 SUPER", 8192, 496, 89.2, 178, (7, 5), 3, 2, ("2080super",)),
    # Ampere
    _M("NVIDIA A100-SXM4-40GB", 40960, 1555, 312, 624, (8, 0), 4, 12, ("a10040gb", "a10040g")),
    _M("NVIDIA A100-SXM4-80GB", 81920, 2039, 312, 624, (8, 0), 4, 12, ("a100", "a10080gb")),
    _M("NVIDIA A100-PCIE-40GB", 40960, 1555, 312, 624, (8, 0), 4, 0, ("a100pcie",)),
    _M("NVIDIA A100 80GB PCIe", 81920, 1935, 312, 624, (8, 0), 4, 0, ("a100pcie80gb",)),
    _M("NVIDIA A30", 24576, 933, 165, 330, (8, 0), 4, 4, ("a30",)),
    _M("NVIDIA A10", 23028, 600, 125, 250, (8, 6), 4, 0, ("a10",)),
    _M("NVIDIA A10G", 23028, 600, 70, 140, (8, 6), 4, 0, ("a10g",)),
    _M("NVIDIA A16", 15356, 200, 18, 36, (8, 6), 4, 0, ("a16",)),
    _M("NVIDIA A2", 15356, 200, 18, 36, (8, 6), 4, 0, ("a2",), 8),
    _M("NVIDIA A40", 46068, 696, 149.7, 299, (8, 6), 4, 4, ("a40",)),
    _M("NVIDIA RTX A4000", 16376, 448, 76.7, 153, (8, 6), 4, 0, ("a4000",)),
    _M("NVIDIA RTX A4500", 20470, 640, 94.6, 189, (8, 6), 4, 4, ("a4500",)),
    _M("NVIDIA RTX A5000", 24564, 768, 111, 222, (8, 6), 4, 4, ("a5000",)),
    _M("NVIDIA RTX A6000", 49140, 768, 154.8, 310, (8, 6), 4, 4, ("a6000",)),
    _M("NVIDIA GeForce RTX 3060", 12288, 360, 51, 102, (8, 6), 4, 0, ("3060",)),
    _M("NVIDIA GeForce RTX 3070", 8192, 448, 81, 163, (8, 6), 4, 0, ("3070",)),
    _M("NVIDIA GeForce RTX 3060 Ti", 8192, 448, 64.8, 129.6, (8, 6), 4, 0, ("3060ti",)),
    _M("NVIDIA GeForce RTX 3070 Ti", 8192, 608, 87, 174, (8, 6), 4, 0, ("3070ti",)),
    _M("NVIDIA GeForce RTX 3080", 10240, 760, 119, 238, (8, 6), 4, 0, ("3080",)),
    _M("NVIDIA GeForce RTX 3080 Ti", 12288, 912, 136, 273, (8, 6), 4, 0, ("3080ti",)),
    _M("NVIDIA GeForce RTX 3090", 24576, 936, 142, 284, (8, 6), 4, 4, ("3090",)),
    _M("NVIDIA GeForce RTX 3090 Ti", 24564, 1008, 160, 320, (8, 6), 4, 4, ("3090ti",)),
    # Ada Lovelace
    _M("NVIDIA L4", 23034, 300, 121, 242, (8, 9), 4, 0, ("l4",)),
    _M("NVIDIA L40", 46068, 864, 181, 362, (8, 9), 4, 0, ("l40",)),
    _M("NVIDIA L40S", 46068, 864, 362, 733, (8, 9), 4, 0, ("l40s",)),
    _M("NVIDIA RTX 6000 Ada Generation", 49140, 960, 364, 728, (8, 9), 4, 0, ("6000ada",)),
    _M("NVIDIA RTX 4000 Ada Generation", 20475, 360, 107, 214, (8, 9), 4, 0, ("4000ada",)),
    _M("NVIDIA GeForce RTX 4060", 8188, 272, 60, 121, (8, 9), 4, 0, ("4060",), 8),
    _M("NVIDIA GeForce RTX 4060 Ti", 16380, 288, 88, 177, (8, 9), 4, 0, ("4060ti",), 8),
    _M("NVIDIA GeForce RTX 4070", 12282, 504, 117, 233, (8, 9), 4, 0, ("4070",)),
    _M("NVIDIA GeForce RTX 4070 Ti", 12282, 504, 160, 321, (8, 9), 4, 0, ("4070ti",)),
    _M("NVIDIA GeForce RTX 4070 SUPER", 12282, 504, 142, 284, (8, 9), 4, 0, ("4070super",)),
    _M("NVIDIA GeForce RTX 4070 Ti SUPER", 16376, 672, 176, 353, (8, 9), 4, 0, ("4070tisuper",)),
    _M("NVIDIA GeForce RTX 4080", 16376, 717, 195, 390, (8, 9), 4, 0, ("4080",)),
    _M("NVIDIA GeForce RTX 4080 SUPER", 16376, 736, 209, 418, (8, 9), 4, 0, ("4080super",)),
    _M("NVIDIA GeForce RTX 4090", 24564, 1008, 330, 661, (8, 9), 4, 0, ("4090",)),
    _M("NVIDIA GeForce RTX 4090 D", 24564, 1008, 294, 588, (8, 9), 4, 0, ("4090d",)),
    # Hopper
    _M("NVIDIA H100 80GB HBM3", 81559, 3350, 989, 1979, (9, 0), 5, 18, ("h100", "h100sxm")),
    _M("NVIDIA H100 PCIe", 81559, 2000, 756, 1513, (9, 0), 5, 0, ("h100pcie",)),
    _M("NVIDIA H100 NVL", 95830, 3900, 835, 1671, (9, 0), 5, 0, ("h100nvl",)),
    _M("NVIDIA H200", 143771, 4800, 989, 1979, (9, 0), 5, 18, ("h200",)),
    _M("NVIDIA H200 NVL", 143771, 4800, 835, 1671, (9, 0), 5, 0, ("h200nvl",)),
    _M("NVIDIA GH200 480GB", 97871, 4000, 989, 1979, (9, 0), 5, 18, ("gh200",)),
    # Blackwell
    _M("NVIDIA B200", 183359, 8000, 2250, 4500, (10, 0), 6, 18, ("b200",)),
    _M(
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        97887,
        1792,
        504,
        1008,
        (12, 0),
        5,
        0,
        ("pro6000", "pro6000blackwell", "rtxpro6000"),
    ),
    _M(
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        97887,
        1792,
        439,
        878,
        (12, 0),
        5,
        0,
        ("pro6000maxq", "rtxpro6000maxq"),
    ),
    _M("NVIDIA RTX PRO 4000 Blackwell", 24467, 672, 156, 312, (12, 0), 5, 0, ("pro4000",)),
    _M("NVIDIA GeForce RTX 5060 Ti", 16311, 448, 95, 190, (12, 0), 5, 0, ("5060ti",), 8),
    _M("NVIDIA GeForce RTX 5070", 12227, 672, 123.5, 247, (12, 0), 5, 0, ("5070",)),
    _M("NVIDIA GeForce RTX 5070 Ti", 16303, 896, 176, 351, (12, 0), 5, 0, ("5070ti",)),
    _M("NVIDIA GeForce RTX 5080", 16303, 960, 225, 450, (12, 0), 5, 0, ("5080",)),
    _M("NVIDIA GeForce RTX 5090", 32607, 1792, 419, 838, (12, 0), 5, 0, ("5090",)),
)

MAX_DEVICES = 64  # a sanity bound on ``NxMODEL`` and on list length
_REPEAT = re.compile(r"^(?P<n>\d+)\s*[x*]\s*(?P<what>.+)$", re.IGNORECASE)
_NOISE = ("nvidia", "geforce", "tesla", "rtx", "quadro", "gtx")
# words NVML adds that do not tell models apart: "NVIDIA A100-SXM4-80GB" is the a100-80gb
_VARIANT_NOISE = re.compile(
    r"sxm\d?|hbm\d?e?|generation|workstationedition|serveredition|maxq|edition"
)


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
    pcie_gen: int | None = None  # the PCIe link a present GPU reports (None: the table's)
    pcie_width: int | None = None
    # a present GPU's memory bandwidth from its clocks and bus (None: the table's)
    mem_bandwidth_gbs: float | None = None

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


def memory_bandwidth_gbs(max_mem_clock_mhz: int | None, bus_width_bits: int | None) -> float | None:
    """Peak memory bandwidth in GB/s from what NVML reports: the maximum memory clock moves
    two transfers per cycle over every bit of the bus (10501 MHz x 384 bits: a 4090's
    1008 GB/s; 2619 MHz x 5120 bits: an H100 SXM's 3352). None when either is unknown."""
    if not max_mem_clock_mhz or not bus_width_bits:
        return None
    return max_mem_clock_mhz * 1e6 * 2 * bus_width_bits / 8 / 1e9


def normalise_model(name: str) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``4090``; ``A100-80GB`` -> ``a10080gb``."""
    s = name.lower()
    for word in _NOISE:
        s = s.replace(word, "")
    return re.sub(r"[^a-z0-9]", "", s)


def _index() -> dict[str, GpuModel]:
    out: dict[str, GpuModel] = {}
    for m in GPU_TABLE:
        for key in (normalise_model(m.name), *m.aliases):
            out.setdefault(key, m)
    return out


_BY_KEY = _index()


def gpu_specs(name: str) -> GpuModel | None:
    """The table's row for a GPU named as NVML names it (``NVIDIA GeForce RTX 4090``,
    ``NVIDIA A100-SXM4-80GB``) or by a short name (``4090``, ``a100-80g``, ``h100``)."""
    key = normalise_model(name)
    if not key:
        return None
    hit = _BY_KEY.get(key)
    if hit is None:
        # "a100sxm480gb" -> "a10080gb"; "h10080gbhbm3" -> "h10080gb" -> "h100"
        bare = _VARIANT_NOISE.sub("", key)
        hit = _BY_KEY.get(bare)
        if hit is None:
            hit = _BY_KEY.get(re.sub(r"(\d+)g(b)?$", r"\1gb", bare))
        if hit is None:
            hit = _BY_KEY.get(re.sub(r"\d+gb$", "", bare))
    return hit


def gpu_model(name: str) -> tuple[str, int] | None:
    """(display name, bytes) of a known GPU model, or None."""
    hit = gpu_specs(name)
    if hit is None:
        return None
    return hit.name, hit.mib * MIB


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
