"""Findings about one machine's NCCL setup.

``nccl_findings`` turns the facts of one machine (library version, the NCCL_* environment,
and optionally the GPU pairs' links as ``nvidia-smi topo -m`` prints them, the GPU names and
the network interfaces) into ordered findings with a severity, a stable code, a message and a
hint. Everything here is pure: callers gather the facts.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lltui.core.jsonout import fields_of
from lltui.core.nccl.enums import parse_version
from lltui.core.nccl.variables import (
    DEBUG_LEVELS,
    INTEGER_VARIABLES,
    NCCL_FUNCTIONS,
    NCCL_LIST_NAMES,
    NCCL_LIST_STRICT_SINCE,
    OTHER_KNOWN_VARIABLES,
    P2P_LEVEL_IGNORED,
    RCCL_PREFIXES,
    TORCH_RENAMED,
    VARIABLES,
    ib_disabled,
    is_known_variable,
    nccl_int,
    nccl_list_error,
)
from lltui.core.topo.p2p_levels import (  # (the table topology's advice reads too)
    P2P_LEVEL_NAMES,
    link_kind,
    nccl_path_level,
    p2p_disabled,
    p2p_level_allows,
)

# Severities, most severe first.
ERROR = "error"
WARN = "warn"
INFO = "info"
_SEVERITY_ORDER = {ERROR: 0, WARN: 1, INFO: 2}


@dataclass(frozen=True, slots=True)
class Finding:
    severity: str  # error | warn | info
    code: str  # stable, for scripts: "p2p-disabled-nvlink"
    message: str
    hint: str = ""

    def to_json(self) -> dict[str, str]:
        return fields_of(self, "severity code message hint")


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
    """What NCCL reads of an integer variable that may be unset (None: unset, or its default)."""
    return None if not value else nccl_int(value)[0]


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
    out += _variable_findings(env, parse_version(facts.version))
    out += _p2p_findings(env, facts)
    out += _network_findings(env, facts)
    out += _debug_findings(env, facts)
    out.sort(key=severity_rank)
    return out


def severity_rank(finding: Finding) -> int:
    """Sorts findings most severe first (a stable sort keeps their order within each)."""
    return _SEVERITY_ORDER.get(finding.severity, 9)


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


def _variable_findings(env: Mapping[str, str], version: tuple[int, ...] | None) -> list[Finding]:
    known = sorted(set(VARIABLES) | OTHER_KNOWN_VARIABLES)
    out: list[Finding] = []
    for name in sorted(env):
        if name.startswith(("NCCL_", *RCCL_PREFIXES)):
            out += _name_findings(name, env[name], known)
    return out + _value_findings(env, version)


def _name_findings(name: str, value: str, known: list[str]) -> list[Finding]:
    """One NCCL_* variable: a name PyTorch renamed, a name NCCL does not know (a typo, most
    likely), or an integer variable set to something else."""
    out: list[Finding] = []
    if name in TORCH_RENAMED:
        out.append(
            Finding(
                INFO,
                "torch-renamed-variable",
                f"{name} is PyTorch's old name; PyTorch 2.2 and later read {TORCH_RENAMED[name]}",
                f"export {TORCH_RENAMED[name]}={value}",
            )
        )
        return out
    if not is_known_variable(name):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
        if close:
            out.append(
                Finding(
                    WARN,
                    "unknown-variable",
                    f"{name} is not an NCCL variable, so NCCL ignores it; did you mean {close[0]}?",
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
        return out
    if name in INTEGER_VARIABLES and value:
        number, unread = nccl_int(value)
        if number is None:
            said = "is past a 64-bit integer, so NCCL keeps its default"
        elif unread == value.strip():
            said = "holds no number: NCCL reads it as 0"
        elif unread:
            said = f"is not an integer: NCCL reads its leading number, {number}, and no more"
        else:
            return out
        out.append(Finding(WARN, "not-an-integer", f"{name}={value!r} {said}", f"{name}=N"))
    return out


def _value_findings(env: Mapping[str, str], version: tuple[int, ...] | None) -> list[Finding]:
    """Values NCCL does not accept, and settings that override its own tuning."""
    out: list[Finding] = []
    level = env.get("NCCL_P2P_LEVEL")
    if level is not None and nccl_path_level(level) is None:
        out.append(
            Finding(
                WARN,
                "p2p-level-invalid",
                f"NCCL_P2P_LEVEL={level!r} is not a level NCCL knows, so NCCL ignores it",
                f"NCCL_P2P_LEVEL={level.strip().upper()}"
                if level.strip().upper() in P2P_LEVEL_NAMES
                else f"use one of {', '.join(P2P_LEVEL_NAMES)} (upper case, as NCCL matches them)",
            )
        )
    debug = env.get("NCCL_DEBUG")
    if debug is not None and debug.strip().upper() not in DEBUG_LEVELS:
        out.append(
            Finding(
                WARN,
                "debug-invalid",
                f"NCCL_DEBUG={debug!r} is not a level NCCL knows, so it logs nothing extra",
                "use WARN, INFO or VERSION",
            )
        )
    for name in NCCL_LIST_NAMES:
        problem = nccl_list_error(name, env[name]) if env.get(name) else None
        if problem is not None:
            out.append(_list_invalid(name, env[name], problem, version))
        elif env.get(name):
            out.append(
                Finding(
                    INFO,
                    f"{name[5:].lower()}-forced",
                    f"{name}={env[name]} overrides NCCL's own tuning",
                    f"unset {name} unless you are working around a known problem",
                )
            )
    return out


def _list_invalid(name: str, value: str, problem: str, version: tuple[int, ...] | None) -> Finding:
    """NCCL_ALGO or NCCL_PROTO with a name NCCL does not know: NCCL 2.24 and later fail
    communicator init on it ("Unrecognized element token"); older ones skip it."""
    ignored = version is not None and version < NCCL_LIST_STRICT_SINCE
    return Finding(
        WARN if ignored else ERROR,
        f"{name[5:].lower()}-invalid",
        f"{name}={value!r}: {problem}; "
        + (
            "this NCCL skips names it does not know"
            if ignored
            else "NCCL (2.24 and later) fails communicator init on it (ncclInvalidUsage)"
        ),
        f"names (any case): {', '.join(NCCL_LIST_NAMES[name])}, ',' between them, '^' first "
        f"to exclude them; ';{NCCL_FUNCTIONS[-1].lower()}:NAMES' for one collective",
    )


def _pairs(links: Mapping[str, str]) -> list[tuple[str, str]]:
    """(pair, cell) for GPU pairs only, in the order given."""
    return [(p, c) for p, c in links.items() if re.fullmatch(r"GPU\d+-GPU\d+", p.strip())]


def _p2p_findings(env: Mapping[str, str], facts: NcclFacts) -> list[Finding]:
    p2p_off = p2p_disabled(env)
    shm_off = _truthy_int(env.get("NCCL_SHM_DISABLE")) not in (None, 0)
    level = env.get("NCCL_P2P_LEVEL")
    pairs = _pairs(facts.links or {})
    nv = [p for p, c in pairs if link_kind(c) == "NV"]
    not_nv = [p for p, c in pairs if link_kind(c) != "NV" and c.strip().upper() != "X"]
    consumer = [n for n in facts.gpu_names or [] if is_consumer_gpu(n)]
    out = _p2p_disable_findings(p2p_off, nv)
    if level is not None and p2p_off:
        out.append(
            Finding(
                INFO,
                "p2p-level-ignored",
                f"NCCL_P2P_LEVEL={level} is {P2P_LEVEL_IGNORED}",
                "unset one of them (NCCL_P2P_LEVEL=LOC is the same as NCCL_P2P_DISABLE=1)",
            )
        )
    elif level is not None:
        out += _p2p_level_findings(level, pairs, nv)
    out += _p2p_path_findings(p2p_off, shm_off, consumer, nv)
    xgmi = [p for p, c in pairs if link_kind(c) == "XGMI"]
    if xgmi and len(xgmi) == len(not_nv):
        out.append(
            Finding(
                INFO,
                "xgmi-all",
                f"AMD Infinity Fabric (XGMI) joins every GPU pair ({len(xgmi)}): RCCL's "
                "collectives (and llama.cpp -sm tensor on ROCm) run over it",
                "RCCL uses XGMI by itself; NCCL_P2P_DISABLE=1 would push traffic to host memory",
            )
        )
        return out
    out += _link_shape_findings(pairs, nv, not_nv)
    return out


def _p2p_disable_findings(p2p_off: bool, nv: list[str]) -> list[Finding]:
    """NCCL_P2P_DISABLE=1, worst where it idles NVLinks."""
    out: list[Finding] = []
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
    return out


def _p2p_level_findings(level: str, pairs: list[tuple[str, str]], nv: list[str]) -> list[Finding]:
    """NCCL_P2P_LEVEL against the pairs' links: which pairs it keeps off P2P."""
    out: list[Finding] = []
    if nccl_path_level(level) == "LOC":
        out.append(
            Finding(
                WARN if nv else INFO,
                "p2p-level-loc",
                f"NCCL_P2P_LEVEL={level} turns P2P off for every pair"
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
    return out


def _p2p_path_findings(
    p2p_off: bool, shm_off: bool, consumer: list[str], nv: list[str]
) -> list[Finding]:
    """The paths left when P2P and SHM are both off, and GeForce cards' P2P over PCIe."""
    out: list[Finding] = []
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
    return out


def _link_shape_findings(
    pairs: list[tuple[str, str]], nv: list[str], not_nv: list[str]
) -> list[Finding]:
    """What the links between the GPUs mean for collectives: all, some or no NVLink."""
    out: list[Finding] = []
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
    if ifname is not None and len(ifname) <= 1:  # NCCL reads it only past one character
        out.append(
            Finding(
                INFO,
                "socket-ifname-ignored",
                f"NCCL_SOCKET_IFNAME={ifname!r} is too short for NCCL to read: it picks an "
                "interface itself, as if it were unset",
                "unset it, or name an interface (eth0, ^docker)",
            )
        )
    elif ifname is not None and facts.interfaces is not None:
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
    ib_off = ib_disabled(env)
    if ib_off and env.get("NCCL_IB_HCA"):
        out.append(
            Finding(
                WARN,
                "ib-disabled-hca-set",
                f"NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']} together with NCCL_IB_HCA: the "
                "adapters listed are never used",
                "unset one of them",
            )
        )
    elif ib_off:
        out.append(
            Finding(
                INFO,
                "ib-disabled",
                f"NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']}: traffic between machines uses TCP "
                "sockets; no effect "
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
