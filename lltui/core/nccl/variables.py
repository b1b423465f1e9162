"""What lltui knows about the NCCL_* variables: what each means and what its values do,
which names are documented, which PyTorch renamed, which NCCL reads as integers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lltui.core.topo.p2p_levels import (  # (the table topology's advice reads too)
    P2P_LEVELS,
    nccl_int,
    nccl_path_level,
    p2p_disabled,
)


@dataclass(frozen=True, slots=True)
class NcclVariable:
    name: str
    meaning: str
    values: tuple[tuple[str, str], ...] = ()  # (value, what it does)
    since: str | None = None

    def explain(self, value: str) -> str:
        """What ``value`` does, in words (an integer variable's: of the number NCCL reads)."""
        v = value.strip()
        if self.name in INTEGER_VARIABLES:
            number = nccl_int(value)[0]
            v = str(number) if number is not None else v
        for candidate, words in self.values:
            if v.upper() == candidate.upper():
                return words
        return self.meaning


_BOOL_OFF_ON = (("0", "off"), ("1", "on"))

# The names NCCL_ALGO and NCCL_PROTO choose from, and the collectives an entry may be for
# (src/init.cc ncclAlgoStr, ncclProtoStr, ncclFuncStr; the same since 2.24)
NCCL_LIST_NAMES = {
    "NCCL_ALGO": ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"),
    "NCCL_PROTO": ("LL", "LL128", "Simple"),
}
NCCL_FUNCTIONS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce")
# The first NCCL that fails on a name it does not know instead of ignoring it
NCCL_LIST_STRICT_SINCE = (2, 24, 3)


def nccl_list_error(name: str, value: str) -> str | None:
    """What NCCL (2.24 and later, src/graph/tuning.cc parseList) rejects in NCCL_ALGO or
    NCCL_PROTO, None where it accepts it all: ';'-separated entries, each an optional
    'collective:' (all but the first need one) then ','-separated names, '^' to exclude them;
    names and collectives in any case."""
    elems = {e.lower() for e in NCCL_LIST_NAMES[name]}
    functions = {f.lower() for f in NCCL_FUNCTIONS}
    for i, entry in enumerate(t for t in value.split(";") if t):
        parts = [t for t in entry.split(":") if t]
        # (strtok skips a leading ';': the first entry then is not the string's start, and
        # NCCL asks it for a collective too)
        if len(parts) < 2 and (i > 0 or value.startswith(";")):
            return f"all entries but the first must name a collective ('allreduce:...'): {entry!r}"
        if not parts:
            return f"an empty entry: {entry!r}"
        prefix, elem_list = (None, parts[0]) if len(parts) < 2 else parts[:2]
        if prefix is not None and prefix.lower() not in functions:
            return f"{prefix!r} is not a collective"
        bad = [e for e in elem_list.removeprefix("^").split(",") if e and e.lower() not in elems]
        if bad:
            return f"{bad[0]!r} is not a name NCCL knows"
    return None


# RCCL, ROCm's NCCL (same API, same NCCL_* variables), reads these besides; the HSA ones
# are ROCm runtime variables RCCL's documentation tells multi-GPU users to set.
RCCL_VARIABLES: tuple[NcclVariable, ...] = (
    NcclVariable(
        "RCCL_MSCCL_ENABLE",
        "RCCL: MSCCL's hand-written collective algorithms for MI300-class hives (on by default "
        "where RCCL has them)",
        (("0", "MSCCL off: RCCL's ring and tree algorithms only"), ("1", "MSCCL on")),
    ),
    NcclVariable(
        "RCCL_MSCCL_FORCE_ENABLE",
        "RCCL: use MSCCL algorithms even on GPUs RCCL does not enable them for",
        _BOOL_OFF_ON,
    ),
    NcclVariable(
        "RCCL_MSCCLPP_ENABLE",
        "RCCL: MSCCL++ kernels for small all-reduces on MI300 (below RCCL_MSCCLPP_THRESHOLD)",
        (("0", "MSCCL++ off"), ("1", "MSCCL++ on for small messages")),
    ),
    NcclVariable(
        "RCCL_MSCCLPP_THRESHOLD", "RCCL: the message size in bytes below which MSCCL++ is used"
    ),
    NcclVariable(
        "RCCL_LL128_FORCE_ENABLE",
        "RCCL: the LL128 protocol even on GPUs where RCCL turns it off by default",
        _BOOL_OFF_ON,
    ),
    NcclVariable(
        "RCCL_KERNEL_COLL_TRACE_ENABLE",
        "RCCL: trace every collective kernel to the log (debugging; slows collectives)",
        _BOOL_OFF_ON,
    ),
    NcclVariable(
        "HSA_FORCE_FINE_GRAIN_PCIE",
        "ROCm: fine-grained host memory over PCIe, which RCCL needs for GPU peer copies "
        "over PCIe (without XGMI)",
        (("1", "RCCL may copy GPU to GPU over PCIe"), ("0", "peer copies go through host")),
    ),
    NcclVariable(
        "HSA_NO_SCRATCH_RECLAIM",
        "ROCm: keep kernels' scratch memory instead of reclaiming it after each dispatch; "
        "AMD recommends 1 for RCCL collectives on MI300",
        (("1", "scratch kept: no reclaim stalls between kernels"), ("0", "scratch reclaimed")),
    ),
)
RCCL_PREFIXES = ("RCCL_", "HSA_FORCE_FINE_GRAIN_PCIE", "HSA_NO_SCRATCH_RECLAIM")
# Shown beside them where set, not NCCL's own (so not checked for typos as its are): which
# GPUs a process, so its communicator, sees (HIP reads CUDA_VISIBLE_DEVICES too), and the
# ROCm runtime's HSA_* variables
DEVICE_VARIABLES: tuple[NcclVariable, ...] = (
    NcclVariable(
        "CUDA_VISIBLE_DEVICES",
        "which GPUs a process sees (indices or UUIDs, numbered from 0 in this order), so the "
        "GPUs its NCCL communicator can use; ROCm's HIP reads it too",
        (("", "no GPU visible"),),
    ),
    NcclVariable(
        "HIP_VISIBLE_DEVICES",
        "ROCm: which GPUs a HIP process (and its RCCL) sees, numbered from 0 in this order",
        (("", "no GPU visible"),),
    ),
    NcclVariable(
        "ROCR_VISIBLE_DEVICES",
        "ROCm: which GPUs the ROCm runtime exposes at all (indices or UUIDs), before "
        "HIP_VISIBLE_DEVICES picks among them",
        (("", "no GPU visible"),),
    ),
    NcclVariable(
        "HSA_OVERRIDE_GFX_VERSION",
        "ROCm: the GFX version the runtime reports for every GPU (10.3.0, 11.0.0), to run "
        "kernels built for another GPU of the family",
    ),
    NcclVariable(
        "HSA_ENABLE_SDMA",
        "ROCm: whether copies use the GPUs' DMA engines (the default) or copy kernels",
        (("0", "copies by kernels, not the DMA engines"), ("1", "copies by the DMA engines")),
    ),
)
SHOWN_PREFIXES = ("NCCL_", *RCCL_PREFIXES, "HSA_", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                  "ROCR_VISIBLE_DEVICES")  # fmt: skip

VARIABLES: dict[str, NcclVariable] = {
    v.name: v
    for v in (
        NcclVariable(
            "NCCL_P2P_DISABLE",
            "turns off direct GPU-to-GPU transfers (NVLink or PCIe P2P); traffic goes "
            "through host memory instead",
            (("1", "P2P off: GPU-to-GPU traffic goes through host memory"), ("0", "P2P allowed")),
        ),
        NcclVariable(
            "NCCL_P2P_LEVEL",
            "the farthest GPU pair (by topology path) that still uses P2P",
            (),
            "2.3.4",
        ),
        NcclVariable(
            "NCCL_SHM_DISABLE",
            "turns off the shared-memory transport used when P2P is not possible",
            (("1", "SHM off: without P2P, traffic goes over the network transport"),),
        ),
        NcclVariable(
            "NCCL_IB_DISABLE",
            "turns off InfiniBand/RoCE; NCCL uses TCP sockets between nodes",
            (("1", "IB/RoCE off: sockets between nodes"), ("0", "IB/RoCE allowed")),
        ),
        NcclVariable(
            "NCCL_SOCKET_IFNAME",
            "which network interfaces NCCL uses for sockets and bootstrap: prefixes, "
            "'=' for exact names, '^' to exclude, comma-separated",
        ),
        NcclVariable(
            "NCCL_DEBUG",
            "how much NCCL logs",
            (
                ("VERSION", "prints the NCCL version at start"),
                ("WARN", "prints warnings and errors"),
                ("INFO", "prints setup: topology, transports, channels"),
                ("TRACE", "prints every call (only in NCCL builds with tracing)"),
            ),
        ),
        NcclVariable("NCCL_DEBUG_SUBSYS", "which subsystems NCCL_DEBUG=INFO covers"),
        NcclVariable("NCCL_DEBUG_FILE", "writes NCCL's log to this file (%h host, %p pid)"),
        NcclVariable(
            "NCCL_ALGO",
            "forces the collective algorithms (Ring, Tree, CollNet, NVLS, ...)",
        ),
        NcclVariable("NCCL_PROTO", "forces the protocols (LL, LL128, Simple)"),
        NcclVariable(
            "NCCL_NET_GDR_LEVEL",
            "the farthest NIC-to-GPU path that still uses GPUDirect RDMA",
        ),
        NcclVariable("NCCL_NET_GDR_READ", "GPUDirect RDMA for sends", _BOOL_OFF_ON),
        NcclVariable("NCCL_IB_HCA", "which InfiniBand/RoCE adapters and ports NCCL uses"),
        NcclVariable("NCCL_IB_GID_INDEX", "the RoCE GID index"),
        NcclVariable("NCCL_IB_TIMEOUT", "InfiniBand verbs timeout exponent"),
        NcclVariable("NCCL_IB_RETRY_CNT", "InfiniBand verbs retry count"),
        NcclVariable("NCCL_NET", "forces the network plugin by name (IB, Socket, ...)"),
        NcclVariable("NCCL_NET_PLUGIN", "which network plugin library to load"),
        NcclVariable("NCCL_TOPO_FILE", "an XML topology file to use instead of detection"),
        NcclVariable("NCCL_TOPO_DUMP_FILE", "writes the detected topology as XML here"),
        NcclVariable("NCCL_MIN_NCHANNELS", "lower bound on channels (parallel rings/trees)"),
        NcclVariable("NCCL_MAX_NCHANNELS", "upper bound on channels (parallel rings/trees)"),
        NcclVariable("NCCL_BUFFSIZE", "bytes of buffer per channel and peer"),
        NcclVariable("NCCL_NTHREADS", "CUDA threads per block in NCCL kernels"),
        NcclVariable(
            "NCCL_CUMEM_ENABLE",
            "allocate NCCL's buffers with cuMem (on by default since 2.19)",
            _BOOL_OFF_ON,
            "2.18",
        ),
        NcclVariable("NCCL_NVLS_ENABLE", "NVLink SHARP on NVSwitch systems", _BOOL_OFF_ON),
        NcclVariable("NCCL_COLLNET_ENABLE", "in-network reductions (SHARP)", _BOOL_OFF_ON),
        NcclVariable("NCCL_CROSS_NIC", "whether rings may use different NICs on each node"),
        NcclVariable("NCCL_IGNORE_CPU_AFFINITY", "ignore the job's CPU affinity", _BOOL_OFF_ON),
        NcclVariable("NCCL_LAUNCH_MODE", "PARALLEL or GROUP kernel launches"),
        NcclVariable("NCCL_COMM_BLOCKING", "blocking or non-blocking communicators"),
        NcclVariable("NCCL_PXN_DISABLE", "turns off sending through a NIC via NVLink"),
        NcclVariable("NCCL_NVB_DISABLE", "turns off NVLink-bridged paths through a GPU"),
        NcclVariable("NCCL_P2P_DIRECT_DISABLE", "turns off direct P2P inside one process"),
        NcclVariable("NCCL_P2P_USE_CUDA_MEMCPY", "P2P through copy engines", _BOOL_OFF_ON),
        NcclVariable("NCCL_SOCKET_FAMILY", "AF_INET or AF_INET6 for sockets"),
        NcclVariable("NCCL_SOCKET_NTHREADS", "CPU threads per socket connection"),
        NcclVariable("NCCL_NSOCKS_PERTHREAD", "sockets per thread"),
        *RCCL_VARIABLES,
        *DEVICE_VARIABLES,
    )
}

# Documented NCCL variables without an entry above: known, so not reported as typos.
OTHER_KNOWN_VARIABLES = frozenset(
    [
        "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
        "NCCL_CGA_CLUSTER_SIZE",
        "NCCL_CHECKS_DISABLE",
        "NCCL_CHECK_POINTERS",
        "NCCL_COLLNET_NODE_THRESHOLD",
        "NCCL_COMM_ID",
        "NCCL_COMM_SPLIT_SHARE_RESOURCES",
        "NCCL_CONF_FILE",
        "NCCL_CREATE_THREAD_CONTEXT",
        "NCCL_CTA_POLICY",
        "NCCL_CUMEM_HOST_ENABLE",
        "NCCL_DEBUG_TIMESTAMP_FORMAT",
        "NCCL_DEBUG_TIMESTAMP_LEVELS",
        "NCCL_DMABUF_ENABLE",
        "NCCL_ENV_PLUGIN",
        "NCCL_GDRCOPY_ENABLE",
        "NCCL_GDRCOPY_FIFO_ENABLE",
        "NCCL_GDRCOPY_FLUSH_ENABLE",
        "NCCL_GDRCOPY_SYNC_ENABLE",
        "NCCL_GRAPH_MIXING_SUPPORT",
        "NCCL_GRAPH_REGISTER",
        "NCCL_HOSTID",
        "NCCL_IB_ADAPTIVE_ROUTING",
        "NCCL_IB_ADDR_FAMILY",
        "NCCL_IB_ADDR_RANGE",
        "NCCL_IB_AR_THRESHOLD",
        "NCCL_IB_CUDA_SUPPORT",
        "NCCL_IB_ECE_ENABLE",
        "NCCL_IB_FIFO_TC",
        "NCCL_IB_GDR_LEVEL",
        "NCCL_IB_MERGE_NICS",
        "NCCL_IB_MERGE_VFS",
        "NCCL_IB_PCI_RELAXED_ORDERING",
        "NCCL_IB_PKEY",
        "NCCL_IB_QPS_PER_CONNECTION",
        "NCCL_IB_RETURN_ASYNC_EVENTS",
        "NCCL_IB_ROCE_VERSION_NUM",
        "NCCL_IB_SL",
        "NCCL_IB_SPLIT_DATA_ON_QPS",
        "NCCL_IB_TC",
        "NCCL_IB_USE_INLINE",
        "NCCL_LEGACY_CUDA_REGISTER",
        "NCCL_LL128_BUFFSIZE",
        "NCCL_LL_BUFFSIZE",
        "NCCL_LL_THRESHOLD",
        "NCCL_LOCAL_REGISTER",
        "NCCL_MAX_CTAS",
        "NCCL_MAX_NRINGS",
        "NCCL_MIN_CTAS",
        "NCCL_MIN_NRINGS",
        "NCCL_MNNVL_CLIQUE_ID",
        "NCCL_MNNVL_ENABLE",
        "NCCL_MNNVL_UUID",
        "NCCL_NCHANNELS_PER_NET_PEER",
        "NCCL_NET_DISABLE_INTRA",
        "NCCL_NET_FORCE_FLUSH",
        "NCCL_NET_GDR_C2C",
        "NCCL_NET_MERGE_LEVEL",
        "NCCL_NET_OVERHEAD",
        "NCCL_NET_SHARED_BUFFERS",
        "NCCL_NET_SHARED_COMMS",
        "NCCL_NVLSTREE_MAX_CHUNKSIZE",
        "NCCL_NVLS_CHUNKSIZE",
        "NCCL_NVLS_NCHANNELS",
        "NCCL_NVB_PRECONNECT",
        "NCCL_NVTX_DISABLE",
        "NCCL_OOB_NET_ENABLE",
        "NCCL_OOB_NET_IFNAME",
        "NCCL_P2P_LL_THRESHOLD",
        "NCCL_P2P_NET_CHUNKSIZE",
        "NCCL_P2P_NVL_CHUNKSIZE",
        "NCCL_P2P_PCI_CHUNKSIZE",
        "NCCL_P2P_PXN_LEVEL",
        "NCCL_P2P_READ_ENABLE",
        "NCCL_PROFILER_PLUGIN",
        "NCCL_PROXY_APPEND_BATCH_SIZE",
        "NCCL_PXN_C2C",
        "NCCL_RAS_ADDR",
        "NCCL_RAS_ENABLE",
        "NCCL_RAS_TIMEOUT_FACTOR",
        "NCCL_RINGS",
        "NCCL_RUNTIME_CONNECT",
        "NCCL_SET_STACK_SIZE",
        "NCCL_SET_THREAD_NAME",
        "NCCL_SHM_LOCALITY",
        "NCCL_SHM_MEMCPY_MODE",
        "NCCL_SHM_USE_CUDA_MEMCPY",
        "NCCL_SINGLE_RING_THRESHOLD",
        "NCCL_SOCKET_RETRY_CNT",
        "NCCL_SOCKET_RETRY_SLEEP_MSEC",
        "NCCL_TOPO_DUMP_FILE_RANK",
        "NCCL_TREE_THRESHOLD",
        "NCCL_TUNER_PLUGIN",
        "NCCL_UID_STAGGER_RATE",
        "NCCL_UID_STAGGER_THRESHOLD",
        "NCCL_WORK_FIFO_BYTES",
        "NCCL_WORK_FIFO_DEPTH",
        "NCCL_WIN_ENABLE",
        "NCCL_SYM_KERNEL",
        "NCCL_NVLS_TREE",
    ]
)

# NCCL_* names that PyTorch read before it renamed them to TORCH_NCCL_*.
TORCH_RENAMED = {
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}

# Variables NCCL reads as integers, with strtoll: a value that is not one is read as its
# leading number, or 0 where there is none (nccl_int, above); only an overflow keeps the
# default (NCCL logs "Invalid value ... using default" at INFO level).
INTEGER_VARIABLES = frozenset(
    {
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_IB_DISABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_NVLS_ENABLE",
        "NCCL_COLLNET_ENABLE",
        "NCCL_NET_GDR_READ",
        "NCCL_IGNORE_CPU_AFFINITY",
        "NCCL_MIN_NCHANNELS",
        "NCCL_MAX_NCHANNELS",
        "NCCL_BUFFSIZE",
        "NCCL_NTHREADS",
        "NCCL_IB_GID_INDEX",
        "NCCL_IB_TIMEOUT",
        "NCCL_IB_RETRY_CNT",
        "NCCL_PXN_DISABLE",
        "NCCL_NVB_DISABLE",
        "NCCL_P2P_DIRECT_DISABLE",
        "NCCL_P2P_USE_CUDA_MEMCPY",
        "NCCL_SOCKET_NTHREADS",
        "NCCL_NSOCKS_PERTHREAD",
        "NCCL_COMM_BLOCKING",
        "NCCL_CHECKS_DISABLE",
        "NCCL_DMABUF_ENABLE",
        "NCCL_CUMEM_HOST_ENABLE",
    }
)

# The variables `lltui nccl` always lists, set or not.
KEY_VARIABLES = (
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "NCCL_DEBUG",
)
DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE", "ABORT")


def is_known_variable(name: str) -> bool:
    return name in VARIABLES or name in OTHER_KNOWN_VARIABLES or name in TORCH_RENAMED


def nccl_environment(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The NCCL_* part of an environment (and RCCL's, the ROCm runtime's and which GPUs are
    visible: SHOWN_PREFIXES): the key variables (None when unset), then the rest that are
    set, sorted."""
    env: dict[str, str | None] = {k: environ.get(k) for k in KEY_VARIABLES}
    for k in sorted(environ):
        if k.startswith(SHOWN_PREFIXES) and k not in env:
            env[k] = environ[k]
    return env


def ib_disabled(env: Mapping[str, str | None]) -> bool:
    """Whether NCCL_IB_DISABLE turns InfiniBand/RoCE off: NCCL reads it as an integer
    (ncclParamIbDisable) and any number but 0 does."""
    value = env.get("NCCL_IB_DISABLE")
    return bool(value) and nccl_int(value or "")[0] not in (None, 0)


P2P_LEVEL_IGNORED = (
    "ignored: NCCL_P2P_DISABLE=1 turns P2P off, and NCCL then does not read NCCL_P2P_LEVEL"
)


def explain_variable(name: str, value: str, env: Mapping[str, str | None] | None = None) -> str:
    """One line on what ``name=value`` does (``env``: the rest of the environment, where a
    variable's effect depends on another's)."""
    if name == "NCCL_P2P_DISABLE" and nccl_int(value)[0] not in (0, 1):
        return "P2P allowed: NCCL turns P2P off for 1 only"
    if name == "NCCL_P2P_LEVEL" and env is not None and p2p_disabled(env):
        return P2P_LEVEL_IGNORED
    if name in ("NCCL_P2P_LEVEL", "NCCL_NET_GDR_LEVEL"):
        return _explain_level(name, value)
    var = VARIABLES.get(name)
    if var is not None:
        return var.explain(value)
    if name in TORCH_RENAMED:
        return f"read by older PyTorch; now {TORCH_RENAMED[name]}"
    if name in OTHER_KNOWN_VARIABLES:
        return "an NCCL tuning variable"
    return "not a variable lltui knows"


def _explain_level(name: str, value: str) -> str:
    level = nccl_path_level(value)
    if level is None:
        return "ignored: NCCL reads only upper-case path names (LOC ... SYS) or a number"
    read_as = "" if level == value else f" (NCCL reads {value} as {level})"
    if name == "NCCL_NET_GDR_LEVEL":
        return f"GPUDirect RDMA for NICs up to {level} paths from the GPU{read_as}"
    return dict(P2P_LEVELS)[level] + read_as
