"""Advice for running llama.cpp on a rig, from its topology and its GPU models.

Split mode, main GPU, CUDA's device numbering, peer-to-peer, NUMA pinning and a rough
per-token all-reduce cost for tensor parallelism. Pure: the GPUs, the CUDA order and the
environment come in as arguments, so the same rules apply to a live rig, a pasted file or a
simulated profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lltui.core.hardware.links import NVLINK_BY_CC, NVLINK_UNKNOWN, PCIE_GBS_PER_LANE
from lltui.core.monitor.cuda_order import CudaCandidate, enumeration_order
from lltui.core.monitor.models import GpuStatic
from lltui.core.text import counted
from lltui.core.topo.amd import XGMI, is_amd_rig
from lltui.core.topo.matrix import (
    LINK_MEANINGS,
    P2P_MEANINGS,
    Topology,
    compact_labels,
    gpu_index,
    link_distance,
    link_meaning,
    nvlink_count,
)
from lltui.core.topo.p2p_levels import P2P_LEVEL_NAMES, p2p_disabled, p2p_level_allows
from lltui.core.units import GIB, fmt_bytes

INFO = "info"
WARN = "warn"

GGML_P2P_ENV = "GGML_CUDA_P2P"
NCCL_P2P_DISABLE_ENV = "NCCL_P2P_DISABLE"
CUDA_ORDER_ENV = "CUDA_DEVICE_ORDER"

# The farthest NCCL_P2P_LEVEL that keeps P2P off SYS paths (PHB), read from NCCL's table
_NO_SYS_LEVEL = next(lv for lv in reversed(P2P_LEVEL_NAMES) if p2p_level_allows(lv, "SYS") is False)

# A 70B-class dense model: what the all-reduce estimate assumes unless told the model.
DEFAULT_N_EMBD = 8192
DEFAULT_N_LAYER = 80
PROMPT_BATCH = 512
ACTIVATION_BYTES = 2  # f16


@dataclass(frozen=True, slots=True)
class Advice:
    severity: str  # info | warn
    code: str  # stable identifier: split-mode, main-gpu, cuda-device-order, p2p, ...
    message: str
    hint: str | None = None


# the link tables (NVLink per link by compute capability, PCIe per lane) live in .links
PCIE_ASSUMED = (4, 16)
# One XGMI (Infinity Fabric) link between two GPUs of a hive, GB/s a direction, by ISA:
# MI300X/MI325X 128 GB/s both ways, MI355X 153.6, MI250X 100, MI100 and MI50 92 (AMD's
# Instinct datasheets)
XGMI_GBS_BY_GFX = {"gfx950": 76.8, "gfx942": 64.0, "gfx90a": 50.0, "gfx908": 46.0, "gfx906": 46.0}
XGMI_GBS_ASSUMED = 50.0
# Across sockets, peer copies cross the CPU interconnect or are staged in host memory.
CROSS_SOCKET_FACTOR = 0.5


@dataclass(frozen=True, slots=True)
class LinkBandwidth:
    gbs: float  # nominal, per direction
    basis: str  # how it was reckoned, in words


def link_bandwidth(
    cell: str, a: GpuStatic | None = None, b: GpuStatic | None = None
) -> LinkBandwidth | None:
    """Nominal bandwidth of one topo cell between two GPUs; None for a cell with no meaning."""
    if cell == XGMI:
        gfx = {g.gfx_target for g in (a, b) if g and g.gfx_target}
        gbs = min((XGMI_GBS_BY_GFX.get(x, XGMI_GBS_ASSUMED) for x in gfx), default=XGMI_GBS_ASSUMED)
        return LinkBandwidth(gbs, f"XGMI: one Infinity Fabric link, {gbs:g} GB/s a direction")
    n = nvlink_count(cell)
    if n is not None:
        ccs = {g.compute_capability for g in (a, b) if g and g.compute_capability}
        nvl = NVLINK_BY_CC.get(min(ccs), NVLINK_UNKNOWN) if ccs else NVLINK_UNKNOWN
        return LinkBandwidth(
            n * nvl.gbs_per_link, f"{cell}: {n} x {nvl.gbs_per_link:g} GB/s, {nvl.name}"
        )
    if cell not in LINK_MEANINGS or cell == "X" or cell == "NV#":
        return None
    gens = [g.pcie_gen_max for g in (a, b) if g and g.pcie_gen_max in PCIE_GBS_PER_LANE]
    widths = [g.pcie_width_max for g in (a, b) if g and g.pcie_width_max]
    gen = min(gens) if gens else PCIE_ASSUMED[0]
    width = min(w for w in widths if w is not None) if widths else PCIE_ASSUMED[1]
    assumed = "" if gens and widths else " (assumed)"
    gbs = PCIE_GBS_PER_LANE[gen] * width
    basis = f"{cell}: PCIe {gen}.0 x{width}{assumed}, {gbs:.0f} GB/s"
    if cell in ("SYS", "SOC"):
        gbs *= CROSS_SOCKET_FACTOR
        basis += ", halved across sockets"
    return LinkBandwidth(gbs, basis)


def allreduce_seconds_per_token(
    n_gpus: int,
    gbs: float,
    n_embd: int = DEFAULT_N_EMBD,
    n_layer: int = DEFAULT_N_LAYER,
) -> float:
    """Transfer time of tensor parallelism's all-reduces for one token: two per layer
    (after attention and after the feed-forward), each moving 2(N-1)/N x bytes over the
    slowest link of the ring. Latency is not counted."""
    if n_gpus < 2 or gbs <= 0:
        return 0.0
    per_reduce = 2 * (n_gpus - 1) / n_gpus * n_embd * ACTIVATION_BYTES / (gbs * 1e9)
    return 2 * n_layer * per_reduce


def default_cuda_order(gpus: Sequence[GpuStatic]) -> tuple[int, ...] | None:
    """CUDA's default numbering (fastest first: compute capability descending, then PCI bus
    order) as NVML indexes; None when a compute capability is unknown."""
    if not gpus or any(g.compute_capability is None for g in gpus):
        return None
    candidates = [CudaCandidate(g.uuid, g.pci_bus_id, g.compute_capability) for g in gpus]
    return tuple(gpus[pos].index for pos in enumeration_order(candidates, None))


def _gpu_name(g: GpuStatic | None) -> str:
    return f" ({g.name})" if g else ""


def _nvlink_groups(topo: Topology) -> list[list[str]]:
    """Groups of GPUs where every pair is on NVLink (connected parts that are complete)."""
    adj: dict[str, set[str]] = {g: set() for g in topo.gpus}
    for a, b, cell in topo.links:
        if nvlink_count(cell):
            adj[a].add(b)
            adj[b].add(a)
    seen: set[str] = set()
    groups: list[list[str]] = []
    for g in topo.gpus:
        if g in seen or not adj[g]:
            continue
        stack, part = [g], []
        seen.add(g)
        while stack:
            x = stack.pop()
            part.append(x)
            for y in adj[x] - seen:
                seen.add(y)
                stack.append(y)
        if all(len(adj[x] & set(part)) == len(part) - 1 for x in part):
            groups.append([x for x in topo.gpus if x in part])
    return groups


def advise(
    topo: Topology,
    gpus: Sequence[GpuStatic] = (),
    *,
    cuda_order: Sequence[int] | None = None,
    env: Mapping[str, str] | None = None,
    n_embd: int = DEFAULT_N_EMBD,
    n_layer: int = DEFAULT_N_LAYER,
) -> tuple[Advice, ...]:
    """Advice for this topology. ``gpus`` gives models (matched to ``GPUn`` by NVML index);
    ``cuda_order[k]`` is the NVML index of CUDA device k; ``env`` is the environment
    llama-server would run with (None: not known, as for a pasted file)."""
    if not topo.gpus:
        return ()
    env = env or {}
    by_label = {f"GPU{g.index}": g for g in gpus}
    if is_amd_rig(gpus, topo):
        return _amd(topo, by_label, env, n_embd, n_layer)
    out: list[Advice] = []
    n = len(topo.gpus)
    pairs = list(topo.links)
    nv_pairs = [(a, b, c) for a, b, c in pairs if nvlink_count(c)]
    all_nvlink = n > 1 and len(nv_pairs) == n * (n - 1) // 2

    # a cut paste leaves pairs without a cell: what hangs on the slowest or the most links
    # is not judged from the pairs that are left
    missing = n * (n - 1) // 2 - len(pairs)
    if missing > 0:
        out.append(
            Advice(
                WARN,
                "split-mode",
                f"the links of {missing} GPU pair(s) are not in the matrix: layer or tensor "
                "split, the main GPU by its links and the all-reduce cost are not judged",
                "paste the whole `nvidia-smi topo -m` output",
            )
        )
    else:
        out += _split_mode(topo, n, pairs, all_nvlink)
    # a CUDA build sees only the NVIDIA GPUs: -mg and CUDA's numbering are theirs
    cuda_gpus = [g for g in gpus if g.vendor != "amd"]
    cuda_labels = [lb for lb in topo.gpus if lb not in by_label or by_label[lb].vendor != "amd"]
    order = _cuda_order(cuda_gpus, cuda_order, env)
    if len(cuda_labels) > 1:
        out += _main_gpu(topo, by_label, order, cuda_labels, links_known=missing <= 0)
    out += _device_order(cuda_gpus, order, env, cuda_order is not None)
    if n > 1:
        out += _p2p_access(topo, by_label, pairs, nv_pairs, all_nvlink, GGML_P2P_ENV in env)
        out += _p2p_env(env, nv_pairs, all_nvlink)
    out += _numa(topo)
    if n > 1 and missing <= 0:
        out += _allreduce(topo, by_label, n, n_embd, n_layer)
    amd = [label for label, g in by_label.items() if g.vendor == "amd"]
    if amd:
        out.append(
            Advice(
                INFO,
                "mixed-vendors",
                f"{compact_labels(amd)} {'are' if len(amd) > 1 else 'is'} AMD: a CUDA build of "
                "llama.cpp does not see them. A Vulkan build sees every GPU (-dev Vulkan0,...); "
                "or run a ROCm build on the AMD GPUs as an rpc-server beside a CUDA one",
                "cmake -DGGML_VULKAN=ON (lltui llama install --vulkan) builds one "
                "llama-server for both vendors",
            )
        )
    return tuple(out)


def _amd(
    topo: Topology,
    by_label: Mapping[str, GpuStatic],
    env: Mapping[str, str],
    n_embd: int,
    n_layer: int,
) -> tuple[Advice, ...]:
    """The same questions for a ROCm rig: split mode over XGMI, HIP's device selection,
    RCCL's peer access, partitions, NUMA and the all-reduce cost."""
    n = len(topo.gpus)
    pairs = list(topo.links)
    xgmi = [p for p in pairs if p[2] == XGMI]
    all_xgmi = n > 1 and len(xgmi) == n * (n - 1) // 2
    out: list[Advice] = []
    if n == 1:
        out.append(
            Advice(INFO, "split-mode", "one GPU: nothing to split (-sm none or the default)")
        )
    elif all_xgmi:
        out.append(
            Advice(
                INFO,
                "split-mode",
                "every GPU pair is on XGMI (Infinity Fabric): -sm layer (the default) is safe, "
                "and -sm tensor can all-reduce over XGMI (with llama.cpp's own all-reduce; "
                "RCCL only in a build made with -DGGML_HIP_RCCL=ON, off by default)",
                "-sm tensor is experimental: it needs -fa on (and before b9455 a float KV cache)",
            )
        )
    else:
        out.append(
            Advice(
                INFO,
                "split-mode",
                "-sm layer (the default) is the safe choice on this rig: GPUs joined over "
                "PCIe only, across which -sm tensor sends two all-reduces per layer",
                "whether -sm tensor is faster here depends on the model: "
                "`lltui fit MODEL --best decode` prices both on this rig",
            )
        )
    out.append(
        Advice(
            INFO,
            "hip-device-order",
            "HIP numbers the GPUs as amd-smi lists them (GPU0 is ROCm0); pick them with "
            "HIP_VISIBLE_DEVICES (or ROCR_VISIBLE_DEVICES, below HIP) or llama-server -dev",
            "HIP_VISIBLE_DEVICES=0,1 llama-server ... or llama-server -dev ROCm0,ROCm1 ...",
        )
    )
    pcie = [p for p in pairs if p[2] != XGMI]
    if pcie and "HSA_FORCE_FINE_GRAIN_PCIE" not in env:
        out.append(
            Advice(
                INFO,
                "p2p",
                f"{len(pcie)} GPU pair(s) meet over PCIe only: RCCL copies between them through "
                "host memory unless peer access over PCIe is allowed",
                "HSA_FORCE_FINE_GRAIN_PCIE=1 lets RCCL (and -sm tensor) use PCIe peer copies "
                "where the platform supports large BAR; leave it unset if a job hangs",
            )
        )
    split = sorted(
        {g.compute_partition for g in by_label.values() if g.compute_partition} - {"SPX"}
    )
    if split:
        out.append(
            Advice(
                INFO,
                "partitions",
                f"compute partition {', '.join(split)}: each partition is a GPU of its own to "
                "HIP, with a share of the memory, so a model splits across more, smaller devices",
                "amd-smi set --compute-partition SPX (as root, GPUs idle) makes each a whole GPU",
            )
        )
    out += _numa(topo)
    if n > 1:
        out += _allreduce(topo, by_label, n, n_embd, n_layer)
    return tuple(out)


def _split_mode(
    topo: Topology, n: int, pairs: list[tuple[str, str, str]], all_nvlink: bool
) -> list[Advice]:
    row_refused = (
        "-sm row is deprecated and recent CUDA builds refuse it "
        "('device CUDA0 does not support split buffers')"
    )
    tensor_needs = (
        "-sm tensor is experimental: it needs -fa on (a float KV cache before b9455), no --fit, "
        "and fails for some MoE and hybrid models"
    )
    if n == 1:
        return [Advice(INFO, "split-mode", "one GPU: nothing to split (-sm none or the default)")]
    if all_nvlink:
        cells = sorted({c for _, _, c in pairs}, key=lambda c: -(nvlink_count(c) or 0))
        return [
            Advice(
                INFO,
                "split-mode",
                f"every GPU pair is on NVLink ({', '.join(cells)}): -sm layer (the default) "
                "is safe, and -sm tensor can use the links for tensor parallelism",
                f"{tensor_needs}; {row_refused}",
            )
        ]
    worst = max(pairs, key=lambda p: link_distance(p[2])) if pairs else None
    msg = "-sm layer (the default) is the safe choice on this rig"
    if worst:
        a, b, cell = worst
        msg += (
            f": {a}-{b} is {cell} ({link_meaning(cell)}), and tensor parallelism sends two "
            "all-reduces per layer across it"
        )
    # (the planner prices both for a model: tensor can still decode faster where the GPUs
    # wait on memory longer than on the link; this advice knows no model)
    out = [
        Advice(
            INFO,
            "split-mode",
            msg,
            f"{row_refused}; whether -sm tensor is faster here depends on the model: "
            "`lltui fit MODEL --best decode` prices both on this rig",
        )
    ]
    for group in _nvlink_groups(topo):
        idx = [gpu_index(g) for g in group]
        visible = ",".join(str(i) for i in idx if i is not None)
        cells = sorted({topo.link(a, b) or "?" for a in group for b in group if a < b})
        out.append(
            Advice(
                INFO,
                "nvlink-group",
                f"{', '.join(group)} are all on NVLink ({', '.join(cells)}): a model that fits "
                "them can run -sm tensor on that group alone",
                f"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES={visible} "
                "llama-server ... -sm tensor -fa on",
            )
        )
    return out


def _cuda_order(
    gpus: Sequence[GpuStatic], cuda_order: Sequence[int] | None, env: Mapping[str, str]
) -> tuple[int, ...] | None:
    if cuda_order is not None:
        return tuple(cuda_order)
    if env.get(CUDA_ORDER_ENV, "").upper() == "PCI_BUS_ID" and gpus:
        return tuple(g.index for g in sorted(gpus, key=lambda g: g.index))
    if gpus and all(g.cuda_index is not None for g in gpus):
        return tuple(g.index for g in sorted(gpus, key=lambda g: g.cuda_index or 0))
    return default_cuda_order(gpus)


def _main_gpu(
    topo: Topology,
    by_label: Mapping[str, GpuStatic],
    order: tuple[int, ...] | None,
    labels: Sequence[str],
    *,
    links_known: bool = True,
) -> list[Advice]:
    def score(label: str) -> tuple[int, int, tuple[int, int], int]:
        g = by_label.get(label)
        nv = sum(nvlink_count(topo.link(label, o)) or 0 for o in topo.gpus if o != label)
        nv = nv if links_known else 0
        idx = gpu_index(label)
        # Memory in whole GiB: cards of one size report a few MiB apart.
        gib = round(g.memory_total / GIB) if g and g.memory_total else 0
        cc = (g.compute_capability or (0, 0)) if g else (0, 0)
        return (gib, nv, cc, -(idx if idx is not None else 99))

    scores = {label: score(label) for label in labels}
    best = max(labels, key=lambda label: scores[label])
    hint = (
        "-mg takes a CUDA index: it is the only GPU used with -sm none and holds the "
        "intermediate results with -sm row; with -sm layer it matters little"
    )
    if len({s[:3] for s in scores.values()}) == 1:
        # (a pasted matrix names no models: nothing in it tells the GPUs apart)
        alike = "the GPUs are alike" if by_label else "nothing here tells the GPUs apart"
        return [Advice(INFO, "main-gpu", f"{alike}: the default -mg 0 is fine", hint)]
    idx = gpu_index(best)
    cuda = order.index(idx) if order is not None and idx in order else idx
    g = by_label.get(best)
    gib, nv, cc, _ = scores[best]
    why = []
    if gib > min(v[0] for v in scores.values()) and g:
        why.append(f"the most VRAM, {fmt_bytes(g.memory_total)}")
    if nv > min(v[1] for v in scores.values()):
        why.append(f"{counted(nv, 'NVLink')} to the others")
    if not why and cc > min(v[2] for v in scores.values()):
        why.append(f"the newest, compute {cc[0]}.{cc[1]}")
    name = f"{best}, {g.name}" if g else best
    because = f": {'; '.join(why)}" if why else ""
    flag = f"-mg {cuda}"
    if cuda != idx:
        flag += f" (-mg {idx} with {CUDA_ORDER_ENV}=PCI_BUS_ID)"
    return [Advice(INFO, "main-gpu", f"main GPU: {name}{because}; {flag}", hint)]


def _device_order(
    gpus: Sequence[GpuStatic],
    order: tuple[int, ...] | None,
    env: Mapping[str, str],
    measured: bool,
) -> list[Advice]:
    hint = (
        f"export {CUDA_ORDER_ENV}=PCI_BUS_ID so -mg, -ts, -dev CUDAn and "
        "CUDA_VISIBLE_DEVICES count GPUs as nvidia-smi does"
    )
    pci_order = env.get(CUDA_ORDER_ENV, "").upper() == "PCI_BUS_ID"
    by_index = {g.index: g for g in gpus}
    if order is not None and list(order) != sorted(order):
        names = ", ".join(
            f"CUDA{k} is GPU{i}{_gpu_name(by_index.get(i))}" for k, i in enumerate(order)
        )
        how = "differently from" if measured else "fastest first, unlike"
        return [
            Advice(
                WARN,
                "cuda-device-order",
                f"CUDA numbers the GPUs {how} nvidia-smi: {names}",
                hint,
            )
        ]
    if order is None and not pci_order and len({g.name for g in gpus}) > 1:
        return [
            Advice(
                INFO,
                "cuda-device-order",
                "mixed GPU models: CUDA may number them fastest first, unlike nvidia-smi",
                hint,
            )
        ]
    return []


_ANY_VALUE = "any value turns it on, even 0; unset it to turn it off"


def _p2p_access(
    topo: Topology,
    by_label: Mapping[str, GpuStatic],
    pairs: list[tuple[str, str, str]],
    nv_pairs: list[tuple[str, str, str]],
    all_nvlink: bool,
    ggml_set: bool,
) -> list[Advice]:
    """Whether to turn peer access on, from the links, the P2P table and the GPU models."""
    out: list[Advice] = []
    not_ok = [(a, b, s) for a, b, s in topo.p2p if s != "OK"]
    geforce = [g for g in by_label.values() if "geforce" in g.name.lower()]
    if all_nvlink:
        if not ggml_set:
            out.append(
                Advice(
                    INFO,
                    "p2p",
                    "NVLink joins every GPU pair: turn on peer access for llama.cpp",
                    f"{GGML_P2P_ENV}=1 llama-server ... ({_ANY_VALUE}); NCCL uses NVLink by "
                    f"itself, so leave {NCCL_P2P_DISABLE_ENV} unset",
                )
            )
    elif not_ok:
        shown = ", ".join(f"{a}-{b} {s} ({P2P_MEANINGS.get(s, s)})" for a, b, s in not_ok[:4])
        out.append(
            Advice(
                WARN,
                "p2p",
                f"peer-to-peer is not available between {shown}"
                + (" ..." if len(not_ok) > 4 else ""),
                f"leave {GGML_P2P_ENV} unset; if NCCL hangs or gives wrong results, "
                f"{NCCL_P2P_DISABLE_ENV}=1",
            )
        )
    elif geforce and not nv_pairs:
        out.append(
            Advice(
                INFO,
                "p2p",
                "GeForce cards: NVIDIA's driver usually allows them no peer-to-peer over "
                "PCIe, so copies between GPUs go through host memory",
                f"leave {GGML_P2P_ENV} unset; NCCL falls back to host memory by itself "
                f"({NCCL_P2P_DISABLE_ENV}=1 if a job hangs)",
            )
        )
    else:
        out += _pcie_p2p([(a, b, c) for a, b, c in pairs if not nvlink_count(c)])
    return out


def _pcie_p2p(pcie_pairs: list[tuple[str, str, str]]) -> list[Advice]:
    """Peer access over PCIe: doubtful across CPU sockets, worth a test otherwise."""
    out: list[Advice] = []
    cross = [f"{a}-{b}" for a, b, c in pcie_pairs if c in ("SYS", "SOC")]
    if cross:
        shown = ", ".join(cross[:4]) + (" ..." if len(cross) > 4 else "")
        out.append(
            Advice(
                INFO,
                "p2p",
                f"{shown} cross CPU sockets (SYS): peer-to-peer there is often unsupported or slow",
                f"leave {GGML_P2P_ENV} unset for GPUs on different sockets; for NCCL, "
                f"NCCL_P2P_LEVEL={_NO_SYS_LEVEL} keeps P2P off the SYS pairs, "
                f"{NCCL_P2P_DISABLE_ENV}=1 if jobs hang",
            )
        )
    elif pcie_pairs:
        worst = max(pcie_pairs, key=lambda p: link_distance(p[2]))[2]
        out.append(
            Advice(
                INFO,
                "p2p",
                f"the GPUs share PCIe (farthest pair: {worst}): peer access may work; "
                "test it before relying on it",
                f"{GGML_P2P_ENV}=1 turns it on in llama.cpp ({_ANY_VALUE}); turn it off "
                "again if output is garbled (seen with the IOMMU on and on some boards)",
            )
        )
    return out


def _p2p_env(
    env: Mapping[str, str], nv_pairs: list[tuple[str, str, str]], all_nvlink: bool
) -> list[Advice]:
    """GGML_CUDA_P2P and NCCL_P2P_DISABLE set where they do harm."""
    out: list[Advice] = []
    ggml_set = GGML_P2P_ENV in env
    if ggml_set and not all_nvlink:
        out.append(
            Advice(
                WARN,
                "ggml-cuda-p2p-set",
                f"{GGML_P2P_ENV} is set (to {env[GGML_P2P_ENV]!r}), which turns peer access on "
                "whatever its value, and not every GPU pair is on NVLink",
                f"unset {GGML_P2P_ENV} unless peer copies are tested on this board "
                "(lltui launch passes it on as it is)",
            )
        )
    if p2p_disabled(env) and nv_pairs:
        out.append(
            Advice(
                WARN,
                "nccl-p2p-disabled",
                f"{NCCL_P2P_DISABLE_ENV}={env[NCCL_P2P_DISABLE_ENV]} stops NCCL from using NVLink",
                f"unset {NCCL_P2P_DISABLE_ENV} unless it works around a hang on this rig",
            )
        )
    return out


def _numa(topo: Topology) -> list[Advice]:
    numa = {
        g: v
        for g, v in (topo.affinity("numa_affinity") or {}).items()
        if v not in ("N/A", "") and "numa_affinity" not in topo.unreliable
    }
    cpus_ok = "cpu_affinity" not in topo.unreliable
    printed = (topo.affinity("cpu_affinity") or {}) if cpus_ok else {}
    cpus = {g: v for g, v in printed.items() if v != "N/A"}
    groups: dict[str, list[str]] = {}
    if len(set(numa.values())) > 1:
        for g, node in numa.items():
            groups.setdefault(node, []).append(g)
        kind = "NUMA node"
    elif len(set(cpus.values())) > 1:
        for g, cpu_set in cpus.items():
            groups.setdefault(cpu_set, []).append(g)
        kind = "CPU set"
    else:
        return []
    parts = "; ".join(f"{kind} {key}: {compact_labels(labels)}" for key, labels in groups.items())
    first_key, first_gpus = next(iter(groups.items()))
    first_cpus = cpus.get(first_gpus[0])
    if kind == "NUMA node":
        cmd = f"numactl --cpunodebind={first_key} --membind={first_key} llama-server --numa numactl"
        if first_cpus:
            cmd += f" ... or taskset -c {first_cpus} llama-server"
    else:
        cmd = f"taskset -c {first_key} llama-server"
    hint = (
        f"for {compact_labels(first_gpus)}: {cmd} ...; "
        "a model spread over several nodes: --numa distribute"
    )
    if not cpus_ok:
        hint += " (this paste's CPU Affinity looks cut: read it on the machine)"
    return [
        Advice(
            INFO,
            "numa-pinning",
            f"the GPUs are attached to {len(groups)} {kind}s ({parts}): keep "
            "llama-server's threads and memory on the node of the GPUs it uses",
            hint,
        )
    ]


def _allreduce(
    topo: Topology, by_label: Mapping[str, GpuStatic], n: int, n_embd: int, n_layer: int
) -> list[Advice]:
    slowest: LinkBandwidth | None = None
    for a, b, cell in topo.links:
        bw = link_bandwidth(cell, by_label.get(a), by_label.get(b))
        if bw is not None and (slowest is None or bw.gbs < slowest.gbs):
            slowest = bw
    if slowest is None:
        return []
    per_token = allreduce_seconds_per_token(n, slowest.gbs, n_embd, n_layer)
    return [
        Advice(
            INFO,
            "allreduce-cost",
            f"tensor parallelism over {n} GPUs: about {per_token * 1e6:.0f} µs of all-reduce "
            f"transfer per token, {per_token * PROMPT_BATCH * 1e3:.1f} ms per "
            f"{PROMPT_BATCH}-token prompt batch, at {slowest.gbs:.0f} GB/s ({slowest.basis}) "
            f"for a {n_embd}-wide, {n_layer}-layer model",
            f"2(N-1)/N x {n_embd * ACTIVATION_BYTES} bytes / bandwidth, twice per layer, f16 "
            f"activations, nominal bandwidth; each of the {2 * n_layer} all-reduces per token "
            "also waits a few µs of latency (more over PCIe), which for one-token decode "
            "usually outweighs the transfer",
        )
    ]
