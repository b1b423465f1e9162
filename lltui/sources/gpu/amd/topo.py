"""An AMD rig's topology, live: ``amd-smi topology --json`` (``rocm-smi --showtopo`` where
amd-smi is missing), here or on a host over ssh, with the GPUs amd-smi names."""

from __future__ import annotations

import dataclasses

from lltui.core.monitor.models import GpuStatic, SourceUnavailable
from lltui.core.topo.amd import parse_amd_topology
from lltui.core.topo.matrix import Topology
from lltui.sources.gpu.amd.cli import AMD_SMI, ROCM_SMI, AmdCliSource


def read_amd_topology(src: AmdCliSource) -> tuple[Topology, tuple[GpuStatic, ...], str]:
    """(topology, GPUs, how it was read) of the AMD GPUs ``src`` reads (here or on its
    host); SourceUnavailable with one line when neither tool answers."""
    info = src.open()
    try:
        if src.tool == AMD_SMI:
            text = src.command_output(AMD_SMI, "topology", "--json")
        else:
            text = src.command_output(ROCM_SMI, "--showtopo")
    finally:
        src.close()
    topo = parse_amd_topology(text)
    if not topo.gpus:
        raise SourceUnavailable(f"{src.tool} printed no topology: {topo.warnings[0]}")
    where = f"{src.tool} {'on ' + src.ssh.label if src.ssh else 'here'}"
    return dataclasses.replace(topo, source=src.tool or "amd"), info.gpus, where
