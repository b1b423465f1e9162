"""What lltui knows about NCCL: its enums, version numbers, NCCL_* variables and findings.

``nccl_findings`` turns the facts of one machine (library version, the NCCL_* environment,
and optionally the GPU pairs' links as ``nvidia-smi topo -m`` prints them, the GPU names and
the network interfaces) into ordered findings with a severity, a stable code, a message and a
hint. Everything here is pure: callers gather the facts.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Severities, most severe first.
ERROR = "error"
WARN = "warn"
INFO = "info"
_SEVERITY_ORDER = {ERROR: 0, WARN: 1, INFO: 2}


class NCCLDataType(enum.Enum):
    """ncclDataType_t, with the values nccl.h gives them."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def nccl_tests_name(self) -> str:
        """The name nccl-tests prints in its ``type`` column."""
        return _TESTS_NAME[self]


_ITEMSIZE = {
    NCCLDataType.INT8: 1,
    NCCLDataType.UINT8: 1,
    NCCLDataType.INT32: 4,
    NCCLDataType.UINT32: 4,
    NCCLDataType.INT64: 8,
    NCCLDataType.UINT64: 8,
    NCCLDataType.FLOAT16: 2,
    NCCLDataType.FLOAT32: 4,
    NCCLDataType.FLOAT64: 8,
    NCCLDataType.BFLOAT16: 2,
}
_TESTS_NAME = {
    NCCLDataType.INT8: "int8",
    NCCLDataType.UINT8: "uint8",
    NCCLDataType.INT32: "int32",
    NCCLDataType.UINT32: "uint32",
    NCCLDataType.INT64: "int64",
    NCCLDataType.UINT64: "uint64",
    NCCLDataType.FLOAT16: "half",
    NCCLDataType.FLOAT32: "float",
    NCCLDataType.FLOAT64: "double",
    NCCLDataType.BFLOAT16: "bfloat16",
}


class NCCLResult(enum.Enum):
    """ncclResult_t."""

    SUCCESS = 0
    UNHANDLED_CUDA = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    REMOTE_ERROR = 6
    IN_PROGRESS = 7


class NCCLRedOp(enum.IntEnum):
    """ncclRedOp_t (the seed API passes these as plain ints: 0 = sum)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4  # since NCCL 2.10


# The names NCCL logs and nccl.h use for result codes ("-> 6" in a log is a remote error).
RESULT_NAMES: dict[int, str] = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}


def decode_nccl_version(code: int) -> str:
    """The integer ncclGetVersion returns, as ``major.minor.patch``.

    NCCL 2.9 changed the encoding from ``major*1000 + minor*100 + patch`` to
    ``major*10000 + minor*100 + patch``; codes below 10000 are the old form.
    """
    if code < 0:
        raise ValueError(f"not an NCCL version code: {code}")
    if code >= 10000:
        major, rest = divmod(code, 10000)
    else:
        major, rest = divmod(code, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"2.25.1+cuda12.2"`` -> ``(2, 25, 1)``; None when it is not a version."""
    if not text:
        return None
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


@dataclass(frozen=True, slots=True)
class NcclVariable:
    name: str
    meaning: str
    values: tuple[tuple[str, str], ...] = ()  # (value, what it does)
    since: str | None = None

    def explain(self, value: str) -> str:
        """What ``value`` does, in words."""
        v = value.strip()
        for candidate, words in self.values:
            if v.upper() == candidate.upper():
                return words
        return self.meaning


_P2P_LEVELS: tuple[tuple[str, str], ...] = (
    ("LOC", "never use P2P (same as NCCL_P2P_DISABLE=1)"),
    ("NVL", "P2P only between GPUs joined by NVLink"),
    ("PIX", "P2P up to GPUs behind the same PCIe switch"),
    ("PXB", "P2P across PCIe switches, not through the CPU"),
    ("PHB", "P2P through the CPU's PCIe host bridge, within a NUMA node"),
    ("SYS", "P2P even across CPU sockets (QPI/UPI/Infinity Fabric)"),
    ("0", "never use P2P (old numeric form of LOC)"),
    ("1", "P2P behind one PCIe switch (old numeric form of PIX)"),
    ("2", "P2P across PCIe switches (old numeric form of PXB)"),
    ("3", "P2P through the PCIe root complex (old numeric form of PHB)"),
    ("4", "P2P across root complexes within a NUMA node (old numeric form)"),
    ("5", "P2P across CPU sockets (old numeric form of SYS)"),
)
_BOOL_OFF_ON = (("0", "off"), ("1", "on"))

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
            _P2P_LEVELS,
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
            _P2P_LEVELS[:6],
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

# Variables NCCL reads as integers: a value that is not one is ignored (NCCL logs
# "Invalid value ... using default" at INFO level only, so users rarely see it).
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
_DEBUG_LEVELS = ("VERSION", "WARN", "INFO", "TRACE", "ABORT")
_PATH_ORDER = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")  # nearest first, like NCCL's paths


def is_known_variable(name: str) -> bool:
    return name in VARIABLES or name in OTHER_KNOWN_VARIABLES or name in TORCH_RENAMED


def nccl_environment(environ: Mapping[str, str]) -> dict[str, str | None]:
    """The NCCL_* part of an environment: the key variables (None when unset), then the
    rest that are set, sorted."""
    env: dict[str, str | None] = {k: environ.get(k) for k in KEY_VARIABLES}
    for k in sorted(environ):
        if k.startswith("NCCL_") and k not in env:
            env[k] = environ[k]
    return env


def explain_variable(name: str, value: str) -> str:
    """One line on what ``name=value`` does."""
    var = VARIABLES.get(name)
    if var is not None:
        return var.explain(value)
    if name in TORCH_RENAMED:
        return f"read by older PyTorch; now {TORCH_RENAMED[name]}"
    if name in OTHER_KNOWN_VARIABLES:
        return "an NCCL tuning variable"
    return "not a variable lltui knows"


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # error | warn | info
    code: str  # stable, for scripts: "p2p-disabled-nvlink"
    message: str
    hint: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
        }


@dataclass(frozen=True, slots=True)
class NcclFacts:
    """What findings are made from. Only what the caller knows: the rest stays None."""

    available: bool
    version: str | None = None
    env: Mapping[str, str] | None = None  # the whole environment or its NCCL_* part
    links: Mapping[str, str] | None = None  # {"GPU0-GPU1": "NV4"}, cells as printed
    gpu_names: Sequence[str] | None = None
    interfaces: Sequence[str] | None = None  # network interface names on this host
    debugging: bool = False  # the user is chasing a problem (e.g. reading a log)


def _truthy_int(value: str | None) -> int | None:
    """NCCL's reading of an integer variable: int(value, 0), None when not an integer."""
    if value is None:
        return None
    try:
        return int(value.strip(), 0)
    except ValueError:
        return None


def link_kind(cell: str) -> str:
    """A topo -m cell reduced to its kind: ``NV4`` -> ``NV``; ``PIX``, ``SYS``, ... as is."""
    c = cell.strip().upper()
    if re.fullmatch(r"NV\d+", c):
        return "NV"
    return c


def p2p_level_allows(level: str, cell: str) -> bool | None:
    """Whether NCCL_P2P_LEVEL=``level`` lets a pair joined by ``cell`` use P2P."""
    lv = level.strip().upper()
    numeric = {"0": "LOC", "1": "PIX", "2": "PXB", "3": "PHB", "4": "PHB", "5": "SYS"}
    lv = numeric.get(lv, lv)
    kind = link_kind(cell)
    if lv not in _PATH_ORDER:
        return None
    if kind == "NV":
        return lv != "LOC"
    if kind == "NODE":
        kind = "PHB"  # host bridges within one NUMA node: NCCL's PHB level covers it
    if kind not in _PATH_ORDER:
        return None
    return _PATH_ORDER.index(kind) <= _PATH_ORDER.index(lv)


def socket_ifname_matches(spec: str, interfaces: Sequence[str]) -> list[str]:
    """The interfaces NCCL_SOCKET_IFNAME=``spec`` selects: comma-separated prefixes,
    ``=name`` for exact names, a leading ``^`` to exclude instead of include."""
    s = spec.strip()
    exclude = s.startswith("^")
    if exclude:
        s = s[1:]
    exact = s.startswith("=")
    if exact:
        s = s[1:]
    names = [p.split(":", 1)[0].strip() for p in s.split(",") if p.strip()]

    def hit(iface: str) -> bool:
        return any(iface == n if exact else iface.startswith(n) for n in names)

    if exclude:
        return [i for i in interfaces if not hit(i)]
    return [i for i in interfaces if hit(i)]


def is_consumer_gpu(name: str) -> bool:
    """GeForce and TITAN cards: no supported PCIe P2P with the standard driver."""
    n = name.upper()
    return "GEFORCE" in n or "TITAN" in n


def nccl_findings(facts: NcclFacts) -> list[Finding]:
    """Ordered findings for one machine (most severe first, then in rule order)."""
    env = {k: v for k, v in (facts.env or {}).items() if v is not None}
    out: list[Finding] = []
    out += _library_findings(facts)
    out += _variable_findings(env)
    out += _p2p_findings(env, facts)
    out += _network_findings(env, facts)
    out += _debug_findings(env, facts)
    out.sort(key=lambda f: _SEVERITY_ORDER.get(f.severity, 9))
    return out


def _library_findings(facts: NcclFacts) -> list[Finding]:
    if not facts.available:
        return [
            Finding(
                WARN,
                "nccl-missing",
                "libnccl.so.2 was not found, so NCCL collectives cannot run here",
                "pip install nvidia-nccl-cu12 (or your distribution's libnccl2); "
                "llama.cpp's -sm layer and -sm row do not need it",
            )
        ]
    out: list[Finding] = []
    v = parse_version(facts.version)
    env = facts.env or {}
    if v is None:
        return out
    if v < (2, 10, 0):
        out.append(
            Finding(
                WARN,
                "nccl-old-no-bf16",
                f"NCCL {facts.version} predates 2.10: no bfloat16 and no average reduction",
                "upgrade NCCL (pip install -U nvidia-nccl-cu12)",
            )
        )
    if (2, 19, 0) <= v < (2, 22, 3) and env.get("NCCL_CUMEM_ENABLE") is None:
        out.append(
            Finding(
                INFO,
                "nccl-cumem-memory",
                f"NCCL {facts.version} allocates with cuMem by default, which costs extra GPU "
                "memory when all-reduce is captured in CUDA graphs (NVIDIA/nccl#1234, "
                "fixed in 2.22.3)",
                "if a multi-GPU run runs out of memory, set NCCL_CUMEM_ENABLE=0 or upgrade NCCL",
            )
        )
    return out


def _variable_findings(env: Mapping[str, str]) -> list[Finding]:
    out: list[Finding] = []
    known = sorted(set(VARIABLES) | OTHER_KNOWN_VARIABLES)
    for name in sorted(env):
        if not name.startswith("NCCL_"):
            continue
        value = env[name]
        if name in TORCH_RENAMED:
            out.append(
                Finding(
                    INFO,
                    "torch-renamed-variable",
                    f"{name} is PyTorch's old name; PyTorch 2.2 and later read "
                    f"{TORCH_RENAMED[name]}",
                    f"export {TORCH_RENAMED[name]}={value}",
                )
            )
            continue
        if not is_known_variable(name):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
            if close:
                out.append(
                    Finding(
                        WARN,
                        "unknown-variable",
                        f"{name} is not an NCCL variable, so NCCL ignores it; "
                        f"did you mean {close[0]}?",
                        f"export {close[0]}={value}",
                    )
                )
            else:
                out.append(
                    Finding(
                        INFO,
                        "unknown-variable",
                        f"{name} is not a variable lltui knows (a newer NCCL or a plugin may "
                        "read it; NCCL ignores names it does not know)",
                    )
                )
            continue
        if name in INTEGER_VARIABLES and _truthy_int(value) is None:
            out.append(
                Finding(
                    WARN,
                    "not-an-integer",
                    f"{name}={value!r} is not an integer, so NCCL ignores it and uses its default",
                    f"use 0 or 1, e.g. {name}=1",
                )
            )
    level = env.get("NCCL_P2P_LEVEL")
    if level is not None and level.strip().upper() not in {v for v, _ in _P2P_LEVELS}:
        out.append(
            Finding(
                WARN,
                "p2p-level-invalid",
                f"NCCL_P2P_LEVEL={level!r} is not a level NCCL knows",
                "use one of LOC, NVL, PIX, PXB, PHB, SYS",
            )
        )
    debug = env.get("NCCL_DEBUG")
    if debug is not None and debug.strip().upper() not in _DEBUG_LEVELS:
        out.append(
            Finding(
                WARN,
                "debug-invalid",
                f"NCCL_DEBUG={debug!r} is not a level NCCL knows, so it logs nothing extra",
                "use WARN, INFO or VERSION",
            )
        )
    for name in ("NCCL_ALGO", "NCCL_PROTO"):
        if env.get(name):
            out.append(
                Finding(
                    INFO,
                    f"{name[5:].lower()}-forced",
                    f"{name}={env[name]} overrides NCCL's own tuning",
                    f"unset {name} unless you are working around a known problem",
                )
            )
    return out


def _pairs(links: Mapping[str, str]) -> list[tuple[str, str]]:
    """(pair, cell) for GPU pairs only, in the order given."""
    return [(p, c) for p, c in links.items() if re.fullmatch(r"GPU\d+-GPU\d+", p.strip())]


def _p2p_findings(env: Mapping[str, str], facts: NcclFacts) -> list[Finding]:
    out: list[Finding] = []
    p2p_off = _truthy_int(env.get("NCCL_P2P_DISABLE")) not in (None, 0)
    shm_off = _truthy_int(env.get("NCCL_SHM_DISABLE")) not in (None, 0)
    level = env.get("NCCL_P2P_LEVEL")
    pairs = _pairs(facts.links or {})
    nv = [p for p, c in pairs if link_kind(c) == "NV"]
    not_nv = [p for p, c in pairs if link_kind(c) != "NV" and c.strip().upper() != "X"]
    names = list(facts.gpu_names or [])
    consumer = [n for n in names if is_consumer_gpu(n)]

    if p2p_off and nv:
        out.append(
            Finding(
                WARN,
                "p2p-disabled-nvlink",
                f"NCCL_P2P_DISABLE=1 on a rig with NVLink ({', '.join(nv[:4])}"
                f"{', ...' if len(nv) > 4 else ''}): NCCL will not use the NVLinks and "
                "copies through host memory instead",
                "unset NCCL_P2P_DISABLE",
            )
        )
    elif p2p_off:
        out.append(
            Finding(
                INFO,
                "p2p-disabled",
                "NCCL_P2P_DISABLE=1: GPU-to-GPU traffic goes through host memory; right for "
                "GeForce cards whose P2P hangs, slower everywhere else",
                "unset it on NVLink rigs and on data-centre cards",
            )
        )
    if level is not None and not p2p_off:
        lv = level.strip().upper()
        if lv in ("LOC", "0"):
            out.append(
                Finding(
                    WARN if nv else INFO,
                    "p2p-level-loc",
                    "NCCL_P2P_LEVEL=LOC turns P2P off for every pair"
                    + (" including the NVLinked ones" if nv else ""),
                    "unset NCCL_P2P_LEVEL, or NVL to keep P2P on NVLink only",
                )
            )
        elif pairs:
            blocked = [p for p, c in pairs if p2p_level_allows(level, c) is False]
            if blocked and nv and all(p in nv for p in blocked):
                out.append(
                    Finding(
                        WARN,
                        "p2p-level-excludes-nvlink",
                        f"NCCL_P2P_LEVEL={level} keeps P2P off the NVLinked pairs "
                        f"{', '.join(blocked[:4])}",
                        "unset NCCL_P2P_LEVEL",
                    )
                )
            elif blocked:
                out.append(
                    Finding(
                        INFO,
                        "p2p-level-limits",
                        f"NCCL_P2P_LEVEL={level}: {len(blocked)} of {len(pairs)} GPU pairs "
                        "go through host memory instead of P2P",
                        "fine if those paths are slow or broken; unset it otherwise",
                    )
                )
    if p2p_off and shm_off:
        out.append(
            Finding(
                WARN,
                "p2p-and-shm-disabled",
                "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1: GPUs in one machine talk through "
                "the network stack, the slowest path there is",
                "unset NCCL_SHM_DISABLE",
            )
        )
    if consumer and not p2p_off and not nv:
        out.append(
            Finding(
                INFO,
                "p2p-consumer-pcie",
                f"{consumer[0]} over PCIe: GeForce cards have no supported P2P with the "
                "standard driver, so NCCL goes through host memory; some drivers reported P2P "
                "as available on RTX 40-series cards and all-reduce hung or returned wrong "
                "results (NVIDIA/nccl-tests#117)",
                "if all-reduce hangs or `lltui nccl bench` fails validation, set "
                "NCCL_P2P_DISABLE=1 or update the driver",
            )
        )
    if nv and not_nv and len(pairs) > 1:
        out.append(
            Finding(
                INFO,
                "nvlink-partial",
                f"NVLink joins {len(nv)} of {len(pairs)} GPU pairs; collectives over all the "
                "GPUs run at the speed of the PCIe pairs",
                "for llama.cpp -sm row, keep the split within NVLinked GPUs "
                "(CUDA_VISIBLE_DEVICES); -sm layer moves little data and does not care",
            )
        )
    elif pairs and not nv:
        sys_pairs = [p for p, c in pairs if link_kind(c) == "SYS"]
        msg = "no NVLink: GPU-to-GPU traffic crosses PCIe"
        if sys_pairs:
            msg += f", and {len(sys_pairs)} pair(s) cross the CPU socket link (SYS)"
        out.append(
            Finding(
                INFO,
                "pcie-only",
                msg,
                "llama.cpp -sm layer moves only activations between GPUs and suits PCIe; "
                "-sm row and tensor parallelism pay for every PCIe hop",
            )
        )
    elif nv and not not_nv:
        out.append(
            Finding(
                INFO,
                "nvlink-all",
                f"NVLink joins every GPU pair ({len(nv)})",
                "",
            )
        )
    return out


def _network_findings(env: Mapping[str, str], facts: NcclFacts) -> list[Finding]:
    out: list[Finding] = []
    ifname = env.get("NCCL_SOCKET_IFNAME")
    if ifname is not None and facts.interfaces is not None:
        chosen = socket_ifname_matches(ifname, facts.interfaces)
        if not chosen:
            have = ", ".join(facts.interfaces) or "none"
            out.append(
                Finding(
                    ERROR,
                    "socket-ifname-missing",
                    f"NCCL_SOCKET_IFNAME={ifname} matches no network interface here "
                    f"(have: {have}); NCCL fails to start with 'no socket interface found'",
                    "set it to an interface that exists, or unset it",
                )
            )
        elif chosen == ["lo"] or all(c.startswith("lo") for c in chosen):
            out.append(
                Finding(
                    INFO,
                    "socket-ifname-loopback",
                    f"NCCL_SOCKET_IFNAME={ifname} selects only loopback: fine on one machine, "
                    "cannot reach other nodes",
                )
            )
    ib_off = _truthy_int(env.get("NCCL_IB_DISABLE")) not in (None, 0)
    if ib_off and env.get("NCCL_IB_HCA"):
        out.append(
            Finding(
                WARN,
                "ib-disabled-hca-set",
                "NCCL_IB_DISABLE=1 together with NCCL_IB_HCA: the adapters listed are never used",
                "unset one of them",
            )
        )
    elif ib_off:
        out.append(
            Finding(
                INFO,
                "ib-disabled",
                "NCCL_IB_DISABLE=1: traffic between machines uses TCP sockets; no effect "
                "inside one machine",
                "unset it on clusters with InfiniBand or RoCE",
            )
        )
    return out


def _debug_findings(env: Mapping[str, str], facts: NcclFacts) -> list[Finding]:
    debug = env.get("NCCL_DEBUG")
    if debug is None:
        return [
            Finding(
                WARN if facts.debugging else INFO,
                "debug-unset",
                "NCCL_DEBUG is not set, so NCCL stays silent about its transports and errors",
                "NCCL_DEBUG=INFO shows transports and channels (read the log with "
                "`lltui nccl log FILE`); NCCL_DEBUG=WARN for day-to-day runs",
            )
        ]
    lv = debug.strip().upper()
    if lv == "TRACE":
        return [
            Finding(
                INFO,
                "debug-trace",
                "NCCL_DEBUG=TRACE logs every call in builds with tracing and is very verbose",
                "NCCL_DEBUG=INFO is enough for setup problems",
            )
        ]
    if lv == "INFO" and not facts.debugging:
        return [
            Finding(
                INFO,
                "debug-info",
                "NCCL_DEBUG=INFO is set: every process logs its setup at start",
                "NCCL_DEBUG=WARN when you are done debugging",
            )
        ]
    return []


def findings_to_json(findings: Sequence[Finding]) -> list[dict[str, Any]]:
    return [f.to_json() for f in findings]
