"""What ``lltui nccl`` and the NCCL view show: the library, the NCCL_* environment and the
findings for this rig (a simulated profile's facts, or this machine's with its live topology)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lltui.core.monitor.models import SourceUnavailable
from lltui.core.nccl.conf import conf_files_json, conf_findings, spaced_names
from lltui.core.nccl.enums import parse_version
from lltui.core.nccl.findings import (
    INFO,
    Finding,
    NcclFacts,
    findings_to_json,
    nccl_findings,
    severity_rank,
)
from lltui.core.nccl.variables import SHOWN_PREFIXES, nccl_environment
from lltui.sources.nccl import (  # the seed API's NCCL names, served as they are
    NCCLCommunicator as NCCLCommunicator,
)
from lltui.sources.nccl import get_nccl_info as get_nccl_info
from lltui.sources.nccl import get_nccl_version as get_nccl_version
from lltui.sources.nccl import is_nccl_available as is_nccl_available
from lltui.sources.nccl import kaggle_nccl_config as kaggle_nccl_config
from lltui.sources.nccl import print_nccl_info as print_nccl_info
from lltui.sources.nccl import setup_nccl_environment as setup_nccl_environment
from lltui.sources.nccl.conf import nccl_settings
from lltui.sources.nccl.finder import LibraryCandidate, library_kind

if TYPE_CHECKING:
    from lltui.sources.gpu.kinds import SourceSpec
    from lltui.sources.nccl.bench import BenchResult


def _candidates_json(cands: tuple[LibraryCandidate, ...]) -> list[dict[str, str]]:
    return [{"path": c.path, "found_by": c.found_by} for c in cands]


@dataclass(frozen=True, slots=True)
class NcclInfo:
    """The library part of the report: this machine's probe, or a simulated rig's facts."""

    available: bool
    version: str | None
    path: str | None
    found_by: str | None
    simulated: bool
    source: str | None = None  # the source spec of a simulated rig
    version_code: int | None = None
    candidates: tuple[LibraryCandidate, ...] = ()  # every libnccl found, first one used
    reason: str | None = None  # why it is not available
    cudart: tuple[LibraryCandidate, ...] = ()  # CUDA runtimes found

    @property
    def library(self) -> str | None:
        return library_kind(self.path)

    def to_json(self) -> dict[str, Any]:
        # The keys and their order are what `lltui nccl --json` has always printed: a
        # simulated rig has no probe, so no version_code, candidates, reason or cudart.
        out: dict[str, Any] = {"available": self.available, "version": self.version}
        if self.library == "rccl":  # ROCm's library: said only where it is, keys unchanged
            out["library"] = "rccl"
        if self.simulated:
            out |= {"path": self.path, "found_by": self.found_by}
            return out | {"simulated": True, "source": self.source}
        out |= {
            "version_code": self.version_code,
            "path": self.path,
            "found_by": self.found_by,
            "candidates": _candidates_json(self.candidates),
            "reason": self.reason,
        }
        return out | {"simulated": False, "cudart": _candidates_json(self.cudart)}


@dataclass(frozen=True)
class NcclReport:
    info: NcclInfo
    env: dict[str, str | None]  # every known NCCL_* variable, None where unset
    findings: tuple[Finding, ...]
    links: dict[str, str] = field(default_factory=dict)  # {"GPU0-GPU1": "NV4"} used for advice
    # where each set variable came from, "environment" or a config file's "PATH:LINE", and
    # the files NCCL reads at start (this machine's NCCL only: a simulated rig has neither)
    env_from: dict[str, str] | None = None
    conf_files: tuple[dict[str, Any], ...] = ()

    @property
    def available(self) -> bool:
        return self.info.available

    def to_json(self) -> dict[str, Any]:
        out = self.info.to_json()
        out["env"] = dict(self.env)
        out["findings"] = findings_to_json(self.findings)
        if self.env_from is not None:
            out["env_from"] = dict(self.env_from)
            out["conf_files"] = list(self.conf_files)
        return out


def _local_gpu_names() -> list[str]:
    from lltui.sources.gpu.kinds import one_sample

    try:
        sample = one_sample("nvml")
    except Exception:  # no driver or binding: the names only sharpen the advice
        return []
    return [] if sample is None else [g.info.name for g in sample.gpus if not g.lost]


def _amd_gpus_alone(nvidia_names: list[str]) -> bool:
    """Whether this machine's GPUs are AMD's alone (none of NVIDIA's, one of AMD's): ROCm's
    RCCL is the library for them, before a libnccl that a CUDA wheel brought along."""
    if nvidia_names:
        return False
    from lltui.sources.gpu.kinds import open_source

    try:
        source, info = open_source("amd", facts_only=True)
    except (SourceUnavailable, ImportError, OSError):  # no tool, binding or GPU here
        return False
    source.close()
    return bool(info.gpus)


def _local_links() -> dict[str, str]:
    """GPU pair links from the live topology; empty where it cannot be read."""
    from lltui.core.topo.parse import parse_topology
    from lltui.sources.gpu.topo import SmiMissing, read_nvml_topology, run_smi

    try:
        try:  # only the matrix: not the P2P table and GPU queries a full topology reads
            return parse_topology(run_smi(["topo", "-m"])).link_map()
        except SmiMissing:
            return read_nvml_topology().topology.link_map()
    except (SourceUnavailable, OSError, ValueError):
        return {}


def _simulated_report(spec: SourceSpec) -> NcclReport:
    """A simulated profile's library facts, environment and links."""
    from lltui.sources.gpu.sim import PROFILES

    profile = PROFILES[spec.arg or ""]
    facts_sim = profile.nccl_facts
    env_all: dict[str, str] = dict(profile.nccl_env)
    links = {f"GPU{i}-GPU{j}": cell for (i, j), cell in sorted(profile.links.items())}
    version = facts_sim["version"]
    path = facts_sim["path"]
    info = NcclInfo(
        available=bool(facts_sim["available"]),
        version=None if version is None else str(version),
        path=None if path is None else str(path),
        found_by=str(spec),
        simulated=True,
        source=str(spec),
    )
    facts = NcclFacts(
        available=info.available,
        version=info.version,
        env=env_all,
        links=links,
        gpu_names=[g.name for g in profile.gpus],
    )
    return NcclReport(info, nccl_environment(env_all), tuple(nccl_findings(facts)), links)


def _local_report(
    spec: SourceSpec, source: str | None, lib_path: str | None, environ: Mapping[str, str] | None
) -> NcclReport:
    """This machine's libnccl, NCCL_* environment, interfaces and (for a local source) links."""
    from lltui.sources.nccl.finder import find_cudart_candidates
    from lltui.sources.nccl.info import local_interfaces
    from lltui.sources.nccl.library import probe_nccl

    gpu_names = _local_gpu_names()
    probe = probe_nccl(lib_path, rccl_first=_amd_gpus_alone(gpu_names))
    environ = os.environ if environ is None else environ
    # the environment NCCL runs with: this one plus what its configuration files add (a
    # secret's value already ***)
    settings = nccl_settings(environ, parse_version(probe.version))
    env_all = {k: v for k, v in settings.env.items() if k.startswith(SHOWN_PREFIXES)}
    spaced = spaced_names(settings)  # said once, by conf_findings
    info = NcclInfo(
        available=probe.available,
        version=probe.version,
        path=probe.path,
        found_by=probe.found_by,
        simulated=False,
        version_code=probe.version_code,
        candidates=probe.candidates,
        reason=probe.reason,
        cudart=tuple(find_cudart_candidates()),
    )
    links = _local_links() if spec.kind in ("auto", "nvml", "smi") and not spec.arg else {}
    here = on_this_machine(source)
    facts = NcclFacts(
        available=probe.available,
        version=probe.version,
        env={k: v for k, v in env_all.items() if k not in spaced},
        links=links or None,
        gpu_names=gpu_names,
        interfaces=local_interfaces() or None,
    )
    findings = sorted(nccl_findings(facts) + conf_findings(settings), key=severity_rank)
    if not here:  # a replay, another host, a Prometheus server: its NCCL is not read
        findings.insert(0, Finding(INFO, "this-machine", f"{THIS_MACHINE} ({source})"))
    env = nccl_environment(env_all)
    origin = {k: settings.origin[k] for k, v in env.items() if v is not None}
    conf = tuple(conf_files_json(settings))
    return NcclReport(info, env, tuple(findings), links, origin, conf)


THIS_MACHINE = "the NCCL, environment and interfaces of this machine, not of the rig shown"


def on_this_machine(source: str | None) -> bool:
    """Whether the rig a source of this name shows is this machine's (its NCCL and GPUs the
    ones lltui can read and test; auto: this machine's), not another host's, a recording's
    or a made-up one."""
    from lltui.sources.gpu.kinds import kind_of, pids_here

    return kind_of(source).name == "auto" or pids_here(source)


def nccl_report(
    source: str | None,
    *,
    lib_path: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> NcclReport:
    """Raises ValueError for a source spec that does not parse."""
    from lltui.sources.gpu.kinds import KINDS, parse_source_spec

    spec = parse_source_spec(source)
    if KINDS[spec.kind].simulated:
        return _simulated_report(spec)
    return _local_report(spec, source, lib_path, environ)


AMD_BENCH = (
    "the bandwidth test drives GPUs through the CUDA runtime and does not run on AMD GPUs; "
    "rccl-tests' all_reduce_perf measures RCCL there (lltui nccl tests FILE reads its output)"
)


class BenchFailed(Exception):
    """The all-reduce bench could not run or failed; ``str()`` is one line, ``code`` 2 for
    settings it refused, 1 for a library or GPU that failed."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def allreduce_bench(**settings: Any) -> BenchResult:
    """The all-reduce bus-bandwidth sweep across the local GPUs (``settings``: those of
    ``run_allreduce_bench``). BenchFailed, whatever went wrong."""
    from lltui.sources.nccl import CudaError, NCCLError, NcclUnavailable, run_allreduce_bench

    try:
        return run_allreduce_bench(**settings)
    except (NcclUnavailable, NCCLError, CudaError, OSError) as exc:
        if _amd_gpus_alone(_local_gpu_names()):  # not a library to install: no AMD path
            raise BenchFailed(AMD_BENCH) from None
        raise BenchFailed(str(exc)) from None
    except ValueError as exc:
        raise BenchFailed(str(exc), 2) from None
