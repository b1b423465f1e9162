"""The live topology: ``nvidia-smi topo -m`` (here or on a host over ssh), or NVML when there
is no nvidia-smi.

nvidia-smi runs from an argv list, never through a shell, and under a timeout; on a host,
through the ssh the smi source uses (:func:`smi_argv`: its ssh_config, one connection). The
NVML path builds the same :class:`Topology` from the pairwise common PCIe ancestor, the
NVLink remote ends of each link and the P2P status; ``pynvml`` (nvidia-ml-py) is imported
only when used.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

from lltui.core.monitor.models import GpuStatic, SourceUnavailable
from lltui.core.topo.matrix import LiveTopology, Topology, TopologyReport
from lltui.core.topo.parse import parse_p2p_matrix, parse_topology
from lltui.core.units import MIB
from lltui.sources.gpu.smi import silent, smi_argv
from lltui.sources.ssh import SshTarget, split_host_port

SMI_TIMEOUT_S = 15.0
QUERY_FIELDS = (
    "index",
    "name",
    "pci.bus_id",
    "memory.total",
    "compute_cap",
    "pcie.link.gen.max",
    "pcie.link.width.max",
)

Runner = Callable[..., "subprocess.CompletedProcess[str]"]
Which = Callable[[str], str | None]


class SmiMissing(SourceUnavailable):
    """nvidia-smi is not installed here."""


def run_smi(
    args: Sequence[str],
    *,
    ssh: SshTarget | None = None,
    run: Runner = subprocess.run,
    which: Which = shutil.which,
    timeout: float = SMI_TIMEOUT_S,
) -> str:
    """nvidia-smi's stdout, here or on ``ssh``'s host; raises SourceUnavailable (SmiMissing
    when absent) with one line."""
    if ssh is None:
        path = which("nvidia-smi")
        if path is None:
            raise SmiMissing("nvidia-smi is not on PATH")
        argv = [path, *args]
    else:
        client = which("ssh")
        if client is None:
            raise SourceUnavailable("ssh is not on PATH (needed for smi:HOST)")
        # the smi source's argv: host checked (no leading '-'), '--' before it, safe words
        argv = [client, *smi_argv(args, ssh, timeout=timeout)[1:]]
    shown = "nvidia-smi " + " ".join(args) + (f" on {ssh.label}" if ssh else "")
    try:
        proc = run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:  # (the tool or, on a host, ssh: said which)
        tool = "nvidia-smi " + " ".join(args)
        raise SourceUnavailable(silent(ssh, tool, timeout, timeout)) from None
    except OSError as exc:
        raise SourceUnavailable(f"could not run {shown}: {exc}") from None
    if proc.returncode != 0:
        said = [ln.strip() for ln in ((proc.stdout or "") + (proc.stderr or "")).splitlines()]
        first = next((ln for ln in said if ln), f"exit code {proc.returncode}")
        raise SourceUnavailable(f"{shown} failed: {first}")
    return proc.stdout or ""


def _none_if_na(value: str) -> str | None:
    value = value.strip()
    return None if not value or value.startswith("[") or value in ("N/A", "Unknown") else value


def parse_gpu_query(text: str, fields: Sequence[str] = QUERY_FIELDS) -> tuple[GpuStatic, ...]:
    """``--query-gpu=<fields> --format=csv,noheader,nounits`` lines as GpuStatic."""
    out: list[GpuStatic] = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < len(fields):
            continue
        row = dict(zip(fields, cells, strict=False))
        try:
            index = int(row["index"])
        except ValueError:
            continue
        mem = _none_if_na(row.get("memory.total", ""))
        cap = _none_if_na(row.get("compute_cap", ""))
        gen = _none_if_na(row.get("pcie.link.gen.max", ""))
        width = _none_if_na(row.get("pcie.link.width.max", ""))
        cc: tuple[int, int] | None = None
        if cap and re.fullmatch(r"\d+\.\d+", cap):
            major, minor = cap.split(".")
            cc = (int(major), int(minor))
        out.append(
            GpuStatic(
                index=index,
                uuid="",
                name=row.get("name", ""),
                pci_bus_id=normalize_bus_id(row.get("pci.bus_id", "")) or "",
                memory_total=int(float(mem)) * MIB if mem and _is_number(mem) else None,
                compute_capability=cc,
                pcie_gen_max=int(gen) if gen and gen.isdigit() else None,
                pcie_width_max=int(width) if width and width.isdigit() else None,
            )
        )
    return tuple(out)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_smi_gpus(
    *,
    ssh: SshTarget | None = None,
    run: Runner = subprocess.run,
    which: Which = shutil.which,
    timeout: float = SMI_TIMEOUT_S,
) -> tuple[GpuStatic, ...]:
    """The GPU models as nvidia-smi names them; () when it cannot tell. Old drivers lack
    ``compute_cap``, so the query is retried without it."""
    for fields in (QUERY_FIELDS, tuple(f for f in QUERY_FIELDS if f != "compute_cap")):
        try:
            text = run_smi(
                [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                ssh=ssh,
                run=run,
                which=which,
                timeout=timeout,
            )
        except SourceUnavailable:
            continue
        gpus = parse_gpu_query(text, fields)
        if gpus:
            return gpus
    return ()


def read_smi_topology(
    *,
    host: str | None = None,
    run: Runner = subprocess.run,
    which: Which = shutil.which,
    timeout: float = SMI_TIMEOUT_S,
) -> LiveTopology:
    """``nvidia-smi topo -m`` parsed, with the P2P read status and the GPU models where
    nvidia-smi gives them; on ``host`` (``[user@]HOST[:PORT]``) over one ssh connection,
    each command within ``timeout`` seconds."""
    ssh = SshTarget(*split_host_port(host)) if host is not None else None
    smi = functools.partial(run_smi, ssh=ssh, run=run, which=which, timeout=timeout)
    try:
        text = smi(["topo", "-m"])
        topo = parse_topology(text)
        if not topo.found:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "nothing")
            raise SourceUnavailable(
                f"nvidia-smi topo -m printed no matrix (it said: {first[:120]})"
            )
        try:
            p2p = parse_p2p_matrix(smi(["topo", "-p2p", "r"]))
        except SourceUnavailable:
            p2p = ()
        gpus = read_smi_gpus(ssh=ssh, run=run, which=which, timeout=timeout)
    finally:
        if ssh is not None:
            ssh.close()  # the host's connection ends with the read
    where = "nvidia-smi topo -m" + (f" on {host}" if host else "")
    topo = dataclasses.replace(topo, p2p=p2p, source="nvidia-smi" + (f":{host}" if host else ""))
    return LiveTopology(topo, gpus, where)


# --- NVML -------------------------------------------------------------------------------


def normalize_bus_id(value: Any) -> str | None:
    """``0000:3b:00.0`` or ``00000000:3B:00.0`` (bytes or str) -> ``00000000:3B:00.0``."""
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    text = str(value or "").strip().strip("\x00")
    m = re.fullmatch(
        r"(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])", text
    )
    if not m:
        return text.upper() or None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:08X}:{int(m.group(2), 16):02X}:{int(m.group(3), 16):02X}.{m.group(4)}"


def cpu_list(indexes: Sequence[int]) -> str:
    """CPU numbers as nvidia-smi prints them: ``0-23,48-71``."""
    out: list[str] = []
    start = prev = None
    for i in sorted(set(indexes)):
        if prev is not None and i == prev + 1:
            prev = i
            continue
        if start is not None:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def _mask_bits(words: Any, bits_per_word: int = 64) -> list[int]:
    return [
        w * bits_per_word + b
        for w, value in enumerate(map(int, words))
        for b in range(bits_per_word)
        if value >> b & 1
    ]


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip("\x00")
    return str(value)


def read_nvml_topology(nvml: Any = None, *, cpu_count: int | None = None) -> LiveTopology:
    """The topology as NVML tells it, shaped like ``nvidia-smi topo -m``. Raises
    SourceUnavailable when NVML cannot start; any single call that fails leaves its value
    out instead of failing the whole read."""
    if nvml is None:
        from lltui.sources.gpu.kinds import NO_NVIDIA_DRIVER, nvidia_driver_seen

        # no driver here: said as the monitor says it, and no binding loaded (one loaded
        # would count as a driver to the source opened next)
        if not nvidia_driver_seen():
            raise SourceUnavailable(NO_NVIDIA_DRIVER)
        try:
            import pynvml as nvml_module
        except ImportError as exc:
            raise SourceUnavailable(f"nvidia-ml-py is not importable: {exc}") from None
        nvml = nvml_module
    error_type: type[BaseException] = getattr(nvml, "NVMLError", Exception)

    def call(name: str, *args: Any) -> Any:
        """One NVML call; None where the binding lacks it or the driver refuses it."""
        fn = getattr(nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except (error_type, OSError):
            return None

    try:
        nvml.nvmlInit()
    except (error_type, OSError) as exc:
        raise SourceUnavailable(f"NVML did not initialise: {exc}") from None
    try:
        count = call("nvmlDeviceGetCount") or 0
        if count < 1:
            raise SourceUnavailable("NVML sees no GPU")
        handles = [call("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
        return _nvml_topology(nvml, call, handles, error_type, cpu_count)
    finally:
        with contextlib.suppress(error_type, OSError):
            nvml.nvmlShutdown()


def _const(nvml: Any, name: str, default: int) -> int:
    value = getattr(nvml, name, default)
    if isinstance(value, tuple):  # some nvidia-ml-py releases define this one as a 1-tuple
        value = value[0] if value else default
    return int(value)


_P2P_CODES = (
    ("NVML_P2P_STATUS_OK", 0, "OK"),
    ("NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED", 1, "CNS"),
    ("NVML_P2P_STATUS_GPU_NOT_SUPPORTED", 2, "GNS"),
    ("NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED", 3, "TNS"),
    ("NVML_P2P_STATUS_DISABLED_BY_REGKEY", 4, "DBR"),
    ("NVML_P2P_STATUS_NOT_SUPPORTED", 5, "NS"),
    ("NVML_P2P_STATUS_UNKNOWN", 6, "U"),
)
_ANCESTOR_CELLS = (
    ("NVML_TOPOLOGY_INTERNAL", 0, "PIX"),  # two GPUs on one board
    ("NVML_TOPOLOGY_SINGLE", 10, "PIX"),
    ("NVML_TOPOLOGY_MULTIPLE", 20, "PXB"),
    ("NVML_TOPOLOGY_HOSTBRIDGE", 30, "PHB"),
    ("NVML_TOPOLOGY_NODE", 40, "NODE"),
    ("NVML_TOPOLOGY_SYSTEM", 50, "SYS"),
)


def _nvml_statics(
    call: Callable[..., Any], handles: list[Any]
) -> tuple[list[str | None], list[GpuStatic]]:
    """Each GPU's PCI bus id and static facts (name, memory, compute capability, PCIe)."""
    bus_ids: list[str | None] = []
    statics: list[GpuStatic] = []
    for i, h in enumerate(handles):
        pci = call("nvmlDeviceGetPciInfo", h) if h is not None else None
        bus = normalize_bus_id(getattr(pci, "busId", None)) if pci is not None else None
        bus_ids.append(bus)
        name = call("nvmlDeviceGetName", h) if h is not None else None
        mem = call("nvmlDeviceGetMemoryInfo", h) if h is not None else None
        cc = call("nvmlDeviceGetCudaComputeCapability", h) if h is not None else None
        uuid = call("nvmlDeviceGetUUID", h) if h is not None else None
        gen = call("nvmlDeviceGetMaxPcieLinkGeneration", h) if h is not None else None
        width = call("nvmlDeviceGetMaxPcieLinkWidth", h) if h is not None else None
        statics.append(
            GpuStatic(
                index=i,
                uuid=_text(uuid) if uuid is not None else "",
                name=_text(name) if name is not None else "",
                pci_bus_id=bus or "",
                memory_total=int(getattr(mem, "total", 0) or 0) or None,
                compute_capability=(int(cc[0]), int(cc[1])) if cc else None,
                pcie_gen_max=int(gen) if gen else None,
                pcie_width_max=int(width) if width else None,
            )
        )
    return bus_ids, statics


def _nvlink_counts(
    nvml: Any,
    call: Callable[..., Any],
    handles: list[Any],
    bus_ids: list[str | None],
    error_type: type[BaseException],
) -> tuple[dict[tuple[int, int], int], list[int]]:
    """Active NVLinks between each GPU pair (i < j), and each GPU's links to an NVSwitch."""
    n = len(handles)
    max_links = _const(nvml, "NVML_NVLINK_MAX_LINKS", 18)
    enabled = _const(nvml, "NVML_FEATURE_ENABLED", 1)
    switch_type = _const(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    not_switch = (
        _const(nvml, "NVML_NVLINK_DEVICE_TYPE_GPU", 0),
        _const(nvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1),  # a link to a POWER9 CPU
    )
    index_of_bus = {b: i for i, b in enumerate(bus_ids) if b}
    directed: dict[tuple[int, int], int] = {}
    switch_links = [0] * n
    for i, h in enumerate(handles):
        if h is None:
            continue
        for link in range(max_links):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(h, link)
            except (error_type, OSError):  # not supported, or no such link on this GPU
                continue
            if state != enabled:
                continue
            kind = None
            if hasattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType"):
                kind = call("nvmlDeviceGetNvLinkRemoteDeviceType", h, link)
            remote = call("nvmlDeviceGetNvLinkRemotePciInfo", h, link)
            remote_bus = normalize_bus_id(getattr(remote, "busId", None)) if remote else None
            j = index_of_bus.get(remote_bus or "")
            if kind == switch_type:
                switch_links[i] += 1
            elif j is not None and j != i:
                directed[(i, j)] = directed.get((i, j), 0) + 1
            elif j is None and remote_bus and kind not in not_switch:
                switch_links[i] += 1  # the far end is no GPU of ours: an NVSwitch
    peer_links = {
        (i, j): max(directed.get((i, j), 0), directed.get((j, i), 0))
        for i in range(n)
        for j in range(i + 1, n)
    }
    return peer_links, switch_links


def _nvml_pairs(
    nvml: Any,
    call: Callable[..., Any],
    handles: list[Any],
    labels: list[str],
    nvlinks: tuple[dict[tuple[int, int], int], list[int]],
) -> tuple[list[tuple[str, str, str]], list[tuple[str, str, str]]]:
    """Each GPU pair's cell (NVLink, else the common PCIe ancestor) and P2P read status."""
    peer_links, switch_links = nvlinks
    ancestor = {_const(nvml, name, default): cell for name, default, cell in _ANCESTOR_CELLS}
    p2p_codes = {_const(nvml, name, default): code for name, default, code in _P2P_CODES}
    p2p_read = _const(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
    links: list[tuple[str, str, str]] = []
    p2p: list[tuple[str, str, str]] = []
    n = len(handles)
    for i in range(n):
        for j in range(i + 1, n):
            if handles[i] is None or handles[j] is None:
                continue
            cell: str | None = None
            if peer_links.get((i, j)):
                cell = f"NV{peer_links[(i, j)]}"
            elif switch_links[i] and switch_links[j]:
                cell = f"NV{min(switch_links[i], switch_links[j])}"
            else:
                level = call("nvmlDeviceGetTopologyCommonAncestor", handles[i], handles[j])
                if level is not None:
                    cell = ancestor.get(int(level))
            if cell is not None:
                links.append((labels[i], labels[j], cell))
            status = call("nvmlDeviceGetP2PStatus", handles[i], handles[j], p2p_read)
            if status is not None:
                p2p.append((labels[i], labels[j], p2p_codes.get(int(status), "U")))
    return links, p2p


def _nvml_affinities(
    nvml: Any,
    call: Callable[..., Any],
    handles: list[Any],
    labels: list[str],
    cpu_count: int | None,
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """CPU affinity, NUMA affinity and NUMA node of each GPU, as topo -m prints them."""
    cpu_aff: list[tuple[str, str]] = []
    numa_aff: list[tuple[str, str]] = []
    gpu_numa: list[tuple[str, str]] = []
    cpus = cpu_count or os.cpu_count() or 64
    cpu_words = max(1, -(-cpus // 64))
    node_scope = _const(nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
    for i, h in enumerate(handles):
        if h is None:
            continue
        mask = call("nvmlDeviceGetCpuAffinity", h, cpu_words)
        if mask is not None:
            cpu_aff.append((labels[i], cpu_list(_mask_bits(mask)) or "N/A"))
        nodes = call("nvmlDeviceGetMemoryAffinity", h, 1, node_scope)
        if nodes is not None:
            numa_aff.append((labels[i], cpu_list(_mask_bits(nodes)) or "N/A"))
        node = call("nvmlDeviceGetNumaNodeId", h)
        gpu_numa.append((labels[i], str(node) if node is not None and int(node) >= 0 else "N/A"))
    return cpu_aff, numa_aff, gpu_numa


def _nvml_warnings(
    handles: list[Any], labels: list[str], links: list[tuple[str, str, str]]
) -> list[str]:
    """GPUs NVML gave no handle for, and pairs whose link it could not tell."""
    n = len(handles)
    warnings = []
    lost = [labels[i] for i, h in enumerate(handles) if h is None]
    if lost:
        warnings.append(f"NVML gave no handle for {', '.join(lost)}")
    missing = [
        f"{labels[i]}-{labels[j]}"
        for i in range(n)
        for j in range(i + 1, n)
        if handles[i] is not None
        and handles[j] is not None
        and not any(a == labels[i] and b == labels[j] for a, b, _ in links)
    ]
    if missing:
        warnings.append(f"NVML could not tell the link between {', '.join(missing[:6])}")
    return warnings


def _nvml_topology(
    nvml: Any,
    call: Callable[..., Any],
    handles: list[Any],
    error_type: type[BaseException],
    cpu_count: int | None,
) -> LiveTopology:
    n = len(handles)
    labels = [f"GPU{i}" for i in range(n)]
    bus_ids, statics = _nvml_statics(call, handles)
    # NVLink: count active links from each GPU to each peer GPU, or to an NVSwitch.
    nvlinks = _nvlink_counts(nvml, call, handles, bus_ids, error_type)
    links, p2p = _nvml_pairs(nvml, call, handles, labels, nvlinks)
    cpu_aff, numa_aff, gpu_numa = _nvml_affinities(nvml, call, handles, labels, cpu_count)
    topo = Topology(
        gpus=tuple(labels),
        links=tuple(links),
        cpu_affinity=tuple(cpu_aff) if len(cpu_aff) == n else None,
        numa_affinity=tuple(numa_aff) if len(numa_aff) == n else None,
        gpu_numa_id=tuple(gpu_numa) if gpu_numa else None,
        p2p=tuple(p2p),
        warnings=tuple(_nvml_warnings(handles, labels, links)),
        source="nvml",
    )
    return LiveTopology(topo, tuple(statics), "NVML (nvidia-smi is not installed)")


def read_live_topology(
    *,
    host: str | None = None,
    run: Runner = subprocess.run,
    which: Which = shutil.which,
    nvml: Any = None,
    timeout: float = SMI_TIMEOUT_S,
) -> LiveTopology:
    """nvidia-smi topo -m (each command within ``timeout`` seconds), or NVML where
    nvidia-smi is not installed. Raises SourceUnavailable with one line when neither can
    tell."""
    try:
        return read_smi_topology(host=host, run=run, which=which, timeout=timeout)
    except SmiMissing as smi_missing:
        if host is not None:
            raise
        try:
            return read_nvml_topology(nvml)
        except SourceUnavailable as exc:
            raise SourceUnavailable(f"{smi_missing}, and {exc}") from None


def nvidia_missing(which: Which = shutil.which) -> bool:
    """Neither nvidia-smi nor NVML's library here, and an AMD tool is (auto's topology)."""
    import ctypes.util

    if which("nvidia-smi") or ctypes.util.find_library("nvidia-ml"):
        return False
    return bool(which("amd-smi") or which("rocm-smi"))


def topology_for_source(spec_text: str | None, timeout: float | None = None) -> TopologyReport:
    """The topology behind a ``--source`` spec: a simulated profile's own text, or live from
    nvidia-smi (NVML where it is missing), locally or on ``smi:HOST``, each command within
    ``timeout`` seconds (None: the tool's own default). Raises ValueError for a kind with no
    topology (a replay, a Prometheus server) and SourceUnavailable when it cannot be read."""
    import dataclasses
    import os

    from lltui.core.topo.parse import parse_topology
    from lltui.sources.gpu.kinds import KINDS, parse_source_spec
    from lltui.sources.gpu.sim import PROFILES, SimSource

    spec = parse_source_spec(spec_text)
    if spec.kind == "auto" and nvidia_missing():
        spec = parse_source_spec("amd")  # no NVIDIA tool here: an AMD rig's, if it is one
    kind = KINDS[spec.kind]
    if kind.no_topology:
        raise ValueError(kind.no_topology)
    if kind.simulated:
        name = spec.arg or ""
        profile = PROFILES[name]
        topo = dataclasses.replace(parse_topology(profile.topo_text), source=f"sim:{name}")
        source = SimSource(name)
        try:
            gpus = source.open().gpus
        finally:
            source.close()
        live = LiveTopology(topo, gpus, f"the simulated rig {name} (SIMULATED)")
        return TopologyReport(live, dict(profile.nccl_env))
    if spec.kind == "amd":
        from lltui.sources.gpu.amd.cli import AmdCliSource
        from lltui.sources.gpu.amd.topo import read_amd_topology
        from lltui.sources.ssh import split_host_port

        host, port = split_host_port(spec.arg) if spec.arg else (None, None)
        amd = LiveTopology(*read_amd_topology(AmdCliSource(host, port=port, timeout=timeout)))
        return TopologyReport(amd, dict(os.environ) if spec.arg is None else None)
    host = spec.arg if kind.host_arg else None
    live = read_live_topology(host=host, timeout=timeout or SMI_TIMEOUT_S)
    return TopologyReport(live, dict(os.environ) if host is None else None)
