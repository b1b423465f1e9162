"""``--gpus SPEC``: the devices to estimate for when they are not the local ones.

A SPEC is one of:

- ``cpu``: no GPU, everything stays on the host;
- ``sim:PROFILE``: the GPUs of a simulated rig (resolved by the caller, which knows the
  profiles);
- a comma list of GPUs, each a memory size (``24GiB``, ``16000MiB``), a GPU model of the
  catalog (:mod:`lltui.core.hardware.gpus`: ``T4``, ``RTX 4090``, ``A100-80GB``, ``GB10``), or
  a model with the memory it has (``RTX 4070 Laptop=8GiB``: a GPU the catalog does not know
  is then estimated with the nearest row's numbers, and said so), optionally repeated
  (``2xT4``),
  and RPC servers ``rpc:HOST:PORT`` (``rpc:HOST:PORT=24GiB`` for the memory it offers;
  ``rpc:HOST:PORT:cpu`` when the server runs the CPU backend rather than CUDA; the ``rpc:``
  may be left off, as in ``rpc:A,B``), e.g. ``T4,T4`` or ``24GiB,rpc:10.0.0.2:50052``.

Devices get the names llama.cpp gives them in its logs: local GPUs ``CUDA0``, ``CUDA1``, ...
in the order given (an AMD GPU of the catalog, ``7900 XTX`` or ``MI300X``, runs on the
ROCm/HIP build of the same backend: ``ROCm0``, ``ROCm1``, numbered apart from CUDA's);
RPC servers come first in llama.cpp's device list (it puts them at the front) and their
buffers are named ``RPC0[HOST:PORT]``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lltui.core.hardware.gpus import all_gpus, find_gpu, nearest_gpus, split_mig
from lltui.core.text import is_digits
from lltui.core.units import MIB, SIZE_UNITS, fmt_bytes, parse_size

MAX_DEVICES = 64  # a sanity bound on ``NxMODEL`` and on list length
_REPEAT = re.compile(r"^(?P<n>\d+)\s*[x*]\s*(?P<what>.+)$", re.IGNORECASE)
_MIG_UUID = re.compile(r"^MIG-[0-9a-fA-F\-/]{8,}$")
_BACKEND = re.compile(r"[A-Za-z]+")
_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?$", re.IGNORECASE)
CUDA_PREFIX, ROCM_PREFIX = "CUDA", "ROCm"


def backend_prefix(name: str, vendor: str | None = None) -> str:
    """What llama.cpp calls a local GPU's devices: ``ROCm`` for an AMD GPU (its HIP build of
    the CUDA backend), ``CUDA`` otherwise. ``vendor``: what the driver said, else the
    catalog's row for ``name`` decides."""
    if vendor is None:
        hit = find_gpu(name) if name else None
        vendor = hit.vendor if hit is not None else None
    return ROCM_PREFIX if vendor == "amd" else CUDA_PREFIX


# ggml's HIP backend is its CUDA backend's code under the same symbols: linked into one
# program, one of them registers; loaded as modules (GGML_BACKEND_DL, dlopen RTLD_LOCAL),
# both do (ggml-backend-reg.cpp loads "cuda" and "hip"). Vulkan sees every vendor's GPUs.
MIXED_VENDOR_BUILD = (
    "a CUDA build of llama.cpp sees only the NVIDIA GPUs and a ROCm (HIP) build only the AMD "
    "ones; one llama-server uses both when built with -DGGML_BACKEND_DL=ON -DGGML_CUDA=ON "
    "-DGGML_HIP=ON, or with Vulkan (-DGGML_VULKAN=ON)"
)


def mixed_vendors(devices: Sequence[DeviceSpec]) -> str | None:
    """A warning where local NVIDIA and AMD GPUs are to serve in one llama-server."""
    local = [d for d in devices if d.kind == "cuda"]
    if {d.backend_name for d in local} >= {CUDA_PREFIX, ROCM_PREFIX}:
        names = ", ".join(d.name for d in local if d.backend_name in (CUDA_PREFIX, ROCM_PREFIX))
        return f"{names}: NVIDIA and AMD GPUs: {MIXED_VENDOR_BUILD}"
    return None


def on_host_memory(
    devices: Sequence[DeviceSpec],
    host_free: int | None,
    whose: str = "this machine's",
    host_total: int | None = None,
) -> tuple[list[DeviceSpec], list[str]]:
    """Integrated GPUs given by name (an APU, GB10, Jetson), their memory the host's: free
    is at most what the host has available, as llama.cpp's CUDA backend reads it for an
    integrated GPU (/proc/meminfo's MemAvailable, ggml_backend_cuda_device_get_memory);
    its HIP build reads ROCm's hipMemGetInfo instead (the BIOS carve-out and the GTT pool,
    both of the same memory), which the note says. ``whose``: where ``host_free`` came
    from, for the note that says what was taken. ``host_total``: this machine's memory
    where ``host_free`` is its own; one smaller than the device's is not the machine
    described, whose memory is then taken as free."""
    out, notes = [], []
    # (beside a discrete GPU an integrated one is left out unless -dev names it: no note)
    alone = not any(d.kind == "cuda" and not d.integrated for d in devices)
    for d in devices:
        if host_free is None or not d.integrated or (d.free_bytes or 0) <= host_free:
            out.append(d)
            continue
        if host_total is not None and host_total < 0.9 * (d.total_bytes or 0):
            notes.append(
                f"{d.label}: its memory is the host's: taken as all free (this machine, with "
                f"{fmt_bytes(host_total)}, is not the one described; --host-free SIZE says "
                "what that one has available)"
            )
            out.append(d)
            continue
        # (the CUDA build reads MemAvailable for an integrated GPU; the HIP build does not)
        how = (
            "; llama.cpp's ROCm build asks ROCm instead (hipMemGetInfo: the BIOS carve-out "
            "and the GTT pool, both of this memory), which may offer another amount"
            if d.backend_name == ROCM_PREFIX
            else ", as llama.cpp's CUDA build reads it for an integrated GPU"
        )
        notes.append(
            f"{d.label}: its memory is the host's: free taken as the host's available "
            f"{fmt_bytes(host_free)} ({whose}){how}; the host's own buffers come out of it "
            "too (the host has what the GPU leaves)"
        )
        out.append(replace(d, free_bytes=host_free))
    return out, notes if alone else []


def host_buffer(devices: Sequence[DeviceSpec], index: int = 0) -> str | None:
    """The pinned host buffer of the local GPU at ``index`` (``CUDA_Host``, ``ROCm_Host``);
    None where that device is not a local GPU (the plain CPU buffer is used)."""
    if not 0 <= index < len(devices) or devices[index].kind != "cuda":
        return None
    return f"{devices[index].backend_name}_Host"


def mig_profile(text: str) -> tuple[str, int] | None:
    """(description, bytes) of a MIG slice named by its profile, with its card (``H100 MIG
    3g.40gb``) or alone where only one card the catalog knows has that profile (``1g.6gb``:
    an A30's); None for text that names no slice (or a card the catalog does not know).
    ValueError (one line) for a profile its card does not have, or one of several cards
    (``3g.40gb``: the A100 80GB's and the H100's, whose speeds differ). Its size is the
    nominal one, in decimal GB: under what NVML reports for the slice by 3-6 % (an A100
    80GB's 1g.10gb has 9856 MiB against 9537 here, its 3g.40gb about 40192 against 38147),
    so an estimate on it errs on the safe side; a slice's real size is NVML's on the rig
    itself, or given (``'H100 MIG 3g.40gb=40192MiB'``)."""
    from lltui.core.hardware.gpus import MIG_PROFILES, mig_cards, mig_slice, short_gpu_name

    got = split_mig(text)
    if got is None:
        return None
    card_name, profile = got
    size = int(profile.split(".")[1][:-2]) * 10**9
    if not card_name:
        cards = mig_cards(profile)
        if not cards:
            raise ValueError(f"--gpus {text!r}: no GPU this knows has the MIG profile {profile}")
        if len(cards) > 1:
            names = ", ".join(short_gpu_name(g.name) for g in cards)
            raise ValueError(
                f"--gpus {text!r}: {profile} is a MIG profile of {len(cards)} GPUs ({names}), "
                f"whose speeds differ: name the card, e.g. "
                f"'{short_gpu_name(cards[0].name)} MIG {profile}'"
            )
        card_name = cards[0].name
    card = find_gpu(card_name)
    if card is None:
        return None
    found = mig_slice(card, profile)
    if found is None:
        has = MIG_PROFILES.get(card.name)
        them = f"its profiles: {', '.join(has)}" if has else "it has no MIG profile this knows"
        raise ValueError(f"--gpus {text!r}: the {card.name} has no MIG profile {profile} ({them})")
    return found.name, size


def is_mig_uuid(text: str) -> bool:
    """Whether ``text`` names a MIG slice by its UUID (``MIG-...``), as CUDA_VISIBLE_DEVICES
    does."""
    return bool(_MIG_UUID.match(text.strip()))


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
    # what a present GPU reports of its limits (None: the catalog's defaults): the power
    # limit enforced now and its default, the highest SM clock; NVLink links up
    power_limit_w: float | None = None
    power_default_w: float | None = None
    max_sm_clock_mhz: int | None = None
    nvlink_active: int | None = None

    @property
    def device_name(self) -> str:
        return self.dev_name or self.name

    @property
    def backend_name(self) -> str:
        """The backend llama.cpp names the device after: CUDA, ROCm (HIP), Vulkan, RPC."""
        m = _BACKEND.match(self.name)
        return m.group(0) if m else self.name

    @property
    def label(self) -> str:
        return f"{self.name} ({self.description})" if self.description else self.name

    @property
    def integrated(self) -> bool:
        """A GPU that shares the host's memory (an APU, GB10, Jetson): llama.cpp's backend
        says so (CUDA's and HIP's ``integrated``), and uses it only where no other GPU is."""
        if self.kind == "rpc" or not self.description:
            return False
        known = find_gpu(self.description, (self.total_bytes or 0) // MIB or None)
        return known is not None and known.unified


@dataclass(frozen=True, slots=True)
class GpusSpec:
    """A parsed ``--gpus`` value. ``sim_profile`` is set for ``sim:PROFILE`` (devices
    then come from the profile, resolved by the caller)."""

    devices: tuple[DeviceSpec, ...] = ()
    sim_profile: str | None = None


def memory_bandwidth_gbs(max_mem_clock_mhz: int | None, bus_width_bits: int | None) -> float | None:
    """Peak memory bandwidth in GB/s from what NVML reports: the maximum memory clock moves
    two transfers per cycle over every bit of the bus (10501 MHz x 384 bits: a 4090's
    1008 GB/s; 2619 MHz x 5120 bits: an H100 SXM's 3352). None when either is unknown."""
    if not max_mem_clock_mhz or not bus_width_bits:
        return None
    return max_mem_clock_mhz * 1e6 * 2 * bus_width_bits / 8 / 1e9


def gpu_model(name: str) -> tuple[str, int] | None:
    """(display name, bytes) of a known GPU model, or None."""
    hit = find_gpu(name)
    if hit is None:
        return None
    return hit.name, hit.mib * MIB


def _size(text: str) -> int | None:
    """A memory size, or None for text that is none (a number with no unit, ``4091``: a GPU
    model mistyped, not 4091 bytes; ``24e9``); a size of nothing, or less, is refused."""
    if not text.strip().lower().endswith(tuple(SIZE_UNITS)):
        return None
    body = text.strip()
    try:
        n = parse_size(body.removeprefix("-"))
    except ValueError:
        return None
    if n <= 0 or body.startswith("-"):
        raise ValueError(f"--gpus: {text!r}: a device's memory must be more than 0")
    return n


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


def _unknown(item: str) -> str:
    m = _REPEAT.match(item)
    count, what = (f"{m['n']}x", m["what"].strip()) if m else ("", item)
    if _NUMBER.match(what):  # a size without its unit, or a GPU model mistyped (4091)
        # only a model number's digits are near a model's (24 is not near a T4, 80 an H800)
        model_like = what.isdigit() and len(what) in (3, 4)
        near = nearest_gpus(what, cutoff=0.6) if model_like else []
        hint = f" (nearest known: {', '.join(near)})" if near else ""
        size = what if what.isdigit() and int(what) else "24"  # (the number given, as a size)
        # more GiB than any GPU has (4091) is MiB, as nvidia-smi counts; else GiB (24, 80)
        unit = "MiB" if int(size) * 1024 > max(g.mib for g in all_gpus()) else "GiB"
        return (
            f"--gpus: {item!r}: a memory size needs its unit (e.g. {count}{size}{unit}); no GPU "
            f"model is named {what}{hint}"
        )
    if item.lower().startswith("mig-"):  # a UUID (of no slice) is known only on its machine
        return (
            f"--gpus: {item!r} is neither a MIG profile (3g.40gb) nor a MIG slice's UUID (MIG- "
            "and the hex nvidia-smi -L shows, of a slice of this machine's GPUs)"
        )
    near = nearest_gpus(item)
    hint = f"nearest known: {', '.join(near)}; " if near else ""
    return (
        f"--gpus: {item!r} is neither a memory size (24GiB), a GPU model this knows nor a "
        f"MIG profile (3g.40gb) ({hint}give its memory to estimate it anyway: '{item}=24GiB')"
    )


# a size in a single-letter unit whose number is also a GPU model's: 3080M, a laptop's 3080
_MODEL_SIZE = re.compile(r"^(?P<n>\d{4})\s*(?P<unit>[mg])$", re.IGNORECASE)


def _refuse_model_number_size(item: str) -> None:
    """``3080M`` is 3080 MiB or a laptop RTX 3080 (its M for mobile), ``4090G`` 4090 GiB
    or an RTX 4090: refused, both readings named."""
    m = _MODEL_SIZE.match(item)
    hit = find_gpu(m["n"]) if m else None
    if m is None or hit is None:
        return
    unit = f"{m['unit'].upper()}iB"
    model = re.sub(r"^(?:NVIDIA |AMD )?(?:GeForce |Radeon )?", "", hit.name)
    gpu = (f"a laptop {model}", f"'{model} Laptop=8GiB' (with its memory)")
    if unit == "GiB":
        gpu = (f"the {model}", f"'{model}'")
    raise ValueError(
        f"--gpus: {item!r}: {m['n']} {unit} or {gpu[0]}? write {m['n']}{unit}, or {gpu[1]}"
    )


def _named_size(name: str, mem: str) -> tuple[str, int]:
    """``MODEL=SIZE``: a GPU with the memory it has; a model the catalog does not know keeps
    its name (the speed model says which known one it assumed)."""
    size = _size(mem)
    if size is None:
        raise ValueError(f"--gpus: {mem!r} is not a memory size (e.g. {name}=24GiB)")
    known = find_gpu(name, size // MIB)
    return (known.name if known else name), size


# an RPC server's address as --gpus gives it: HOST:PORT[:cpu|:cuda][=SIZE], HOST a name, an
# IPv4 address or a bracketed IPv6 one
_ENDPOINT = re.compile(
    r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d+(?::(?:cpu|cuda))?(?:=.*)?$", re.I
)


def _parse_rpc(item: str) -> tuple[str, int | None, str]:
    body = item[len("rpc:") :]
    endpoint, _, mem = body.partition("=")
    backend = ""  # unsaid: the probe tells from the server, else CUDA
    head, sep0, tail = endpoint.rpartition(":")
    if sep0 and tail.lower() in ("cpu", "cuda"):
        endpoint, backend = head, tail.lower()
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not is_digits(port) or not 0 < int(port) < 65536:
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
        return GpusSpec()  # the host only: no devices
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
        if item.lower() in ("cpu", "none"):
            raise ValueError(
                f"--gpus: {item!r} means no GPU: give it alone (--gpus {item.lower()}); the "
                "host is always counted beside the GPUs"
            )
        host, _, rest = item.partition(":")
        if _ENDPOINT.match(item) and is_digits(host) and gpu_model(host) is not None:
            # no host is named by digits alone: a GPU and a count, written as a port
            n = re.split("[:=]", rest)[0]
            raise ValueError(
                f"--gpus: {item!r}: for {n} of the {host}, write {n}x{host} "
                "(an RPC server is rpc:HOST:PORT)"
            )
        if item.lower().startswith("rpc:") or _ENDPOINT.match(item):
            # HOST:PORT is no GPU: an RPC server, as the items after "rpc:A" in --rpc's own
            # comma list (rpc:A,B), which were read as GPUs named "B"
            rpc = _parse_rpc(item if item.lower().startswith("rpc:") else f"rpc:{item}")
            if any(rpc[0] == other[0] for other in rpcs):  # one server's memory counted twice
                raise ValueError(f"--gpus: rpc:{rpc[0]} is given twice; give each server once")
            rpcs.append(rpc)
            continue
        count = 1
        m = _REPEAT.match(item)
        what = m.group("what") if m else ""
        if m and (gpu_model(what) or _size(what) or mig_profile(what) or "=" in what):
            count = int(m.group("n"))
            item = m.group("what").strip()
        if not 1 <= count <= MAX_DEVICES:
            raise ValueError(f"--gpus: {count} devices in one item; at most {MAX_DEVICES}")
        named, sep, mem = item.rpartition("=")
        if sep and named.strip():
            gpus.extend([_named_size(named.strip(), mem.strip())] * count)
            continue
        known = mig_profile(item) or gpu_model(item)
        if known is not None:
            gpus.extend([known] * count)
            continue
        if is_mig_uuid(item):
            raise ValueError(
                f"--gpus: {item!r} is a MIG slice of this machine: give it alone "
                "(--gpus MIG-...), or its profile (3g.40gb)"
            )
        _refuse_model_number_size(item)
        size = _size(item)
        if size is None:
            raise ValueError(_unknown(item))
        gpus.extend([("", size)] * count)
        if len(gpus) + len(rpcs) > MAX_DEVICES:
            break
    if len(gpus) + len(rpcs) > MAX_DEVICES:
        raise ValueError(f"--gpus: more than {MAX_DEVICES} devices")
    devices = [rpc_device(ep, mem, i, be) for i, (ep, mem, be) in enumerate(rpcs)]
    # AMD GPUs after the NVIDIA ones, as ggml loads its backends (cuda, then hip): the
    # order llama.cpp uses them in without -dev, and so where -ts's shares go
    gpus.sort(key=lambda g: backend_prefix(g[0]) == ROCM_PREFIX)
    devices += cuda_devices([(desc, size, size) for desc, size in gpus])
    return GpusSpec(devices=tuple(devices))


def cuda_devices(
    memories: Sequence[tuple[str, int | None, int | None]],
    vendors: Sequence[str | None] | None = None,
) -> tuple[DeviceSpec, ...]:
    """Local GPUs as devices of llama.cpp's CUDA backend (its HIP build on AMD), from
    (description, total bytes, free bytes) in the runtime's order, each backend numbered
    from 0 (``CUDA0``, ``ROCm0``). ``vendors``: what each GPU's driver said, where known."""
    counts: dict[str, int] = {}
    out = []
    for i, (desc, total, free) in enumerate(memories):
        prefix = backend_prefix(desc, vendors[i] if vendors else None)
        k = counts.get(prefix, 0)
        counts[prefix] = k + 1
        out.append(
            DeviceSpec(
                name=f"{prefix}{k}",
                kind="cuda",
                total_bytes=total,
                free_bytes=free,
                description=desc,
            )
        )
    return tuple(out)
