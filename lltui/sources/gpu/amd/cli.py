"""AMD GPUs through their command-line tools, here or on a host over ssh (``amd:HOST``):
``amd-smi`` (ROCm 6 on) where it runs, else ``rocm-smi`` (every ROCm, deprecated).

Each poll runs ``amd-smi metric --json`` (processes every ``process_ttl_s`` with
``amd-smi process --json``), or one ``rocm-smi --show... --json``. Argv lists, no shell;
over ssh the words sent are checked as the ``smi:HOST`` source checks them. A tool that is
missing, too old for a flag, or prints an error is one line (a failed process listing only
marks the sample; the GPUs keep updating).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Unpack

from lltui.core.monitor.amd_smi_json import (
    AmdJsonError,
    read_processes,
    read_rig,
    read_samples,
)
from lltui.core.monitor.models import (
    GpuProcess,
    GpuSample,
    GpuStatic,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.monitor.rocm_smi_json import read_cards
from lltui.sources.gpu.amd.fdinfo import read_drm_processes
from lltui.sources.gpu.amd.tools import AMD_SMI, ROCM_SMI, TOOLS, not_on_path
from lltui.sources.gpu.smi import CommandResult, ToolOptions, ToolSource, ssh_failed

# one rocm-smi run gives every reading; -a is the fallback for a rocm-smi too old for one
ROCM_SMI_FLAGS: tuple[str, ...] = (
    "--showproductname", "--showbus", "--showuniqueid", "--showuse", "--showmemuse",
    "--showmeminfo", "vram", "gtt", "--showpower", "--showmaxpower", "--showtemp",
    "--showclocks", "--showfan", "--showdriverversion", "--json",
)  # fmt: skip
ROCM_SMI_ALL: tuple[str, ...] = ("-a", "--json")
_ROCM_VERSION = re.compile(r"ROCm version:\s*([0-9][0-9.]*)")
_UNKNOWN_FLAG = re.compile(r"unrecognized arguments|invalid choice|unknown option", re.I)


class _HostUnreachable(SourceUnavailable):
    """ssh did not reach the host: its other tool would fail alike (and wait as long)."""


class AmdCliSource(ToolSource):
    """GPUs as ``amd-smi`` or ``rocm-smi`` report them, on this machine or on ``host``.

    ``tool`` forces one; by default ``amd-smi`` is tried first and ``rocm-smi`` stands in
    when it is not installed or fails at open (the hint says so)."""

    prefix = "amd"

    def __init__(
        self,
        host: str | None = None,
        *,
        tool: str | None = None,
        proc_root: str = "/",
        **options: Unpack[ToolOptions],
    ) -> None:
        super().__init__(host, **options)
        self.tool = tool
        self._proc_root = proc_root
        self._rocm_args: tuple[str, ...] = ROCM_SMI_FLAGS
        self._statics: tuple[GpuStatic, ...] = ()
        self._procs: dict[int, tuple[GpuProcess, ...]] = {}
        self._procs_t: float | None = None
        self._hints: list[str] = []
        # an open's commands share one timeout, both tools in turn (a tool missing or failing
        # fast leaves the other the rest: each had its own half), and so do a poll's; the
        # first poll takes the rocm-smi output its open read (amd-smi's open reads no metric)
        self._opened_out: str | None = None

    # -- commands ----------------------------------------------------------------------------
    def command_output(self, tool: str, *args: str) -> str:
        """What ``tool ARGS`` prints here or on the host; SourceUnavailable when it fails."""
        self._start()
        return self._json(tool, *args)

    def _json(self, tool: str, *args: str) -> str:
        """A command's stdout; SourceUnavailable (one line) when it fails."""
        result = self._call(tool, *args)
        if result.returncode != 0:
            raise self._unavailable(tool, result)
        return result.stdout

    def _unavailable(self, tool: str, result: CommandResult) -> SourceUnavailable:
        kind = _HostUnreachable if ssh_failed(result, self.host) else SourceUnavailable
        return kind(self._failure(tool, result))

    # -- open --------------------------------------------------------------------------------
    def open(self) -> RigInfo:
        tools = (self.tool,) if self.tool else TOOLS
        reasons = []
        self._start()
        self._opened_out = None
        for tool in tools:
            if self.host is None and self._which(tool) is None:
                reasons.append(not_on_path(tool))
                continue
            try:
                info = self._open_amd_smi() if tool == AMD_SMI else self._open_rocm_smi()
            except (SourceUnavailable, AmdJsonError) as exc:
                reasons.append(str(exc))
                if isinstance(exc, _HostUnreachable):
                    break  # not the tool's failure: the next one's over the same dead host
                continue
            self.tool = tool
            if tool == ROCM_SMI and reasons:
                self._hints.append(f"reading rocm-smi: {reasons[-1]}")
            self._info = replace(info, hints=tuple(self._hints))
            return self._info
        raise SourceUnavailable("; ".join(reasons) or "no AMD tool to run")

    def _open_amd_smi(self) -> RigInfo:
        static_out = self._json(AMD_SMI, "static", "--json")
        listed = self._call(AMD_SMI, "list", "--json")
        rig = read_rig(listed.stdout if listed.returncode == 0 else None, static_out)
        if not rig.statics:
            raise SourceUnavailable(f"amd-smi lists no GPU {self._where()}")
        self._statics = rig.statics
        version = self._call(AMD_SMI, "version")
        rocm = _ROCM_VERSION.search(version.stdout) if version.returncode == 0 else None
        return RigInfo(
            source=self.name,
            driver_version=rig.driver_version,
            rocm_version=rocm.group(1) if rocm else None,
            hostname=self._hostname(),
            gpus=rig.statics,
        )

    def _rocm_smi_output(self) -> str:
        """One ``rocm-smi`` run; a rocm-smi too old for a flag of ours is asked for ``-a``."""
        result = self._call(ROCM_SMI, *self._rocm_args)
        too_old = _UNKNOWN_FLAG.search(result.stderr + result.stdout)
        if result.returncode != 0 and self._rocm_args != ROCM_SMI_ALL and too_old:
            self._rocm_args = ROCM_SMI_ALL
            self._hints.append("this rocm-smi is too old for its --show flags; using -a")
            result = self._call(ROCM_SMI, *self._rocm_args)
        if result.returncode != 0:
            raise self._unavailable(ROCM_SMI, result)
        return result.stdout

    def _open_rocm_smi(self) -> RigInfo:
        out = self._rocm_smi_output()
        cards, driver = read_cards(out, ROCM_SMI)
        if not cards:
            raise SourceUnavailable(f"rocm-smi lists no GPU {self._where()}")
        self._statics = tuple(c.static for c in cards)
        self._opened_out = out
        return RigInfo(
            source=self.name, driver_version=driver, hostname=self._hostname(), gpus=self._statics
        )

    # -- poll --------------------------------------------------------------------------------
    def _readings(self, opened: str | None) -> dict[int, GpuSample]:
        try:
            if self.tool == AMD_SMI:
                return read_samples(self._json(AMD_SMI, "metric", "--json"), self._statics)
            cards, _ = read_cards(opened or self._rocm_smi_output(), ROCM_SMI)
        except AmdJsonError as exc:
            raise SourceUnavailable(str(exc)) from None
        known = {s.index: s for s in self._statics}
        return {c.index: replace(c.sample, info=known.get(c.index, c.static)) for c in cards}

    def _processes(self, now: float) -> str | None:
        """Refresh the process lists when due; the error of a failed listing, else None."""
        if self._procs_t is not None and now - self._procs_t < self.process_ttl_s:
            return None
        self._procs_t = now
        error = None
        if self.tool == AMD_SMI:
            try:
                self._procs = read_processes(self._json(AMD_SMI, "process", "--json"))
                return None
            except (SourceUnavailable, AmdJsonError) as exc:
                error = f"process list: {exc}"
        # rocm-smi lists no memory per process; the kernel's fdinfo does (local only)
        self._procs = (
            read_drm_processes(self._statics, self._proc_root) if self.host is None else {}
        )
        return error

    def poll(self) -> RigSample:
        if self._info is None:
            self.open()
        assert self._info is not None
        opened, self._opened_out = self._opened_out, None
        if opened is None:
            self._start()
        readings = self._readings(opened)
        now, wall = self._clock(), self._wall()
        error = self._processes(now)
        sampler = self._host() if self.host is None else None
        gpus = []
        for static in self._statics:
            sample = readings.get(static.index)
            if sample is None:
                gpus.append(
                    GpuSample(info=static, lost=True, error=f"missing from {self.tool} output")
                )
                continue
            procs = self._procs.get(static.index, ())
            if sampler is not None and procs:
                procs = sampler.enrich(procs)
            gpus.append(replace(sample, processes=procs))
        return self._rig_sample(now, wall, gpus, error)
