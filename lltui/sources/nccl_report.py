"""What ``lltui nccl`` and the NCCL view show: the library, the NCCL_* environment and the
findings for this rig (a simulated profile's facts, or this machine's with its live topology)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lltui.core.monitor.models import SourceUnavailable
from lltui.core.nccl.env import (
    Finding,
    NcclFacts,
    findings_to_json,
    nccl_environment,
    nccl_findings,
)


@dataclass(frozen=True)
class NcclReport:
    info: dict[str, Any]  # available, version, path, found_by, simulated, source, ...
    env: dict[str, str | None]  # every known NCCL_* variable, None where unset
    findings: tuple[Finding, ...]
    links: dict[str, str] = field(default_factory=dict)  # {"GPU0-GPU1": "NV4"} used for advice

    @property
    def available(self) -> bool:
        return bool(self.info.get("available"))

    def to_json(self) -> dict[str, Any]:
        out = dict(self.info)
        out["env"] = dict(self.env)
        out["findings"] = findings_to_json(self.findings)
        return out


def _local_gpu_names() -> list[str]:
    from lltui.sources.registry import one_sample

    try:
        sample = one_sample("nvml")
    except Exception:  # no driver or binding: the names only sharpen the advice
        return []
    return [] if sample is None else [g.info.name for g in sample.gpus if not g.lost]


def _local_links() -> dict[str, str]:
    """GPU pair links from the live topology; empty where it cannot be read."""
    from lltui.core.topo.matrix import parse_topology
    from lltui.sources.topo import SmiMissing, read_nvml_topology, run_smi

    try:
        try:  # only the matrix: not the P2P table and GPU queries a full topology reads
            return parse_topology(run_smi(["topo", "-m"])).link_map()
        except SmiMissing:
            return read_nvml_topology().topology.link_map()
    except (SourceUnavailable, OSError, ValueError):
        return {}


def nccl_report(
    source: str | None,
    *,
    lib_path: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> NcclReport:
    """Raises ValueError for a source spec that does not parse."""
    from lltui.sources.registry import parse_source_spec

    spec = parse_source_spec(source)
    if spec.kind == "sim":
        from lltui.sources.sim import PROFILES

        profile = PROFILES[spec.arg or ""]
        facts_sim = profile.nccl_facts
        env_all: dict[str, str] = dict(profile.nccl_env)
        links = {f"GPU{i}-GPU{j}": cell for (i, j), cell in sorted(profile.links.items())}
        info: dict[str, Any] = {
            "available": bool(facts_sim["available"]),
            "version": facts_sim["version"],
            "path": facts_sim["path"],
            "found_by": str(spec),
            "simulated": True,
            "source": str(spec),
        }
        facts = NcclFacts(
            available=info["available"],
            version=info["version"],
            env=env_all,
            links=links,
            gpu_names=[g.name for g in profile.gpus],
        )
    else:
        from lltui.sources.nccl import find_cudart_candidates, local_interfaces, probe_nccl

        probe = probe_nccl(lib_path)
        environ = os.environ if environ is None else environ
        env_all = {k: v for k, v in environ.items() if k.startswith("NCCL_")}
        info = probe.to_json()
        info["simulated"] = False
        info["cudart"] = [
            {"path": c.path, "found_by": c.found_by} for c in find_cudart_candidates()
        ]
        links = _local_links() if spec.kind in ("auto", "nvml", "smi") and not spec.arg else {}
        facts = NcclFacts(
            available=probe.available,
            version=probe.version,
            env=env_all,
            links=links or None,
            gpu_names=_local_gpu_names(),
            interfaces=local_interfaces() or None,
        )
    return NcclReport(info, nccl_environment(env_all), tuple(nccl_findings(facts)), links)
