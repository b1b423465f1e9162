"""AMD GPUs read through AMD's Python binding (module ``amdsmi``, shipped with ROCm 6 on in
``/opt/rocm/share/amd_smi``), the library amd-smi itself calls.

Static facts are read once at open; each poll reads memory (VRAM and GTT), activity, power,
temperatures (edge, junction, memory), clocks, the energy counter, ECC totals, the fan,
the PCIe link, the gpu_metrics table (XGMI traffic, throttle status) and violation flags,
and every ``process_ttl_s`` the process list. A call the GPU does not support is None from
then on (asked once); a GPU whose reads fail as gone is marked lost and the rest update.
``amdsmi`` is imported when the source opens: tests put a fake in ``sys.modules``.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import Any

from lltui.core.monitor.amd_smi_json import with_catalog
from lltui.core.monitor.amd_values import integer, nonneg, pci_bus_id, pcie_gen, text
from lltui.core.monitor.models import (
    GpuProcess,
    GpuSample,
    GpuStatic,
    RigInfo,
    RigSample,
    SourceUnavailable,
    gpu_key,
)
from lltui.core.monitor.plausible import plausible, within
from lltui.core.monitor.throttle import AMD_THROTTLED, AMD_VIOLATIONS
from lltui.core.text import error_text
from lltui.core.units import KIB
from lltui.sources.gpu.amd.fdinfo import read_drm_processes
from lltui.sources.gpu.base import PROCESS_TTL_S, Clock, SequenceCounter, mono_clock, wall_clock
from lltui.sources.gpu.host_facts import HostSampler

# amdsmi_status_t codes (amdsmi.h): fixed by the C ABI, written out for old bindings
NOT_SUPPORTED = 2
NOT_YET_IMPLEMENTED = 3
NO_PERM = 10
NOT_FOUND = 31
DRIVER_NOT_LOADED = 34
UNSUPPORTED = frozenset({NOT_SUPPORTED, NOT_YET_IMPLEMENTED})
GONE = frozenset({NOT_FOUND, DRIVER_NOT_LOADED})
INIT_WORDS = {
    DRIVER_NOT_LOADED: "the amdgpu driver is not loaded",
    NO_PERM: "permission denied (is this user in the render and video groups?)",
    NOT_FOUND: "no AMD GPU found",
}
MICRO = 1e-6


class _Gone(Exception):
    """A GPU's read failed as a GPU that is no longer there."""


def import_amdsmi() -> ModuleType:
    return importlib.import_module("amdsmi")


class AmdSmiSource:
    """AMD GPUs through the ``amdsmi`` binding on this machine."""

    name = "amdsmi"

    def __init__(
        self,
        *,
        host_sampler: HostSampler | None = None,
        clock: Clock = mono_clock,
        wall: Clock = wall_clock,
        process_ttl_s: float = PROCESS_TTL_S,
        proc_root: str = "/",
    ) -> None:
        self._amd: Any = None
        self._handles: list[Any] = []
        self._statics: tuple[GpuStatic, ...] = ()
        self._info: RigInfo | None = None
        self._unsupported: set[tuple[int, str]] = set()
        self._lost: dict[int, str] = {}
        self._xgmi_last: dict[int, tuple[float, float, float]] = {}
        self._procs: dict[int, tuple[GpuProcess, ...]] = {}
        self._procs_t: float | None = None
        self._host_sampler = host_sampler
        self._clock, self._wall = clock, wall
        self.process_ttl_s = process_ttl_s
        self._proc_root = proc_root
        self._seq = SequenceCounter()

    # -- calls -------------------------------------------------------------------------------
    def _code(self, exc: BaseException) -> int | None:
        code = getattr(exc, "err_code", None)
        return abs(code) if isinstance(code, int) else None

    def _call(self, i: int, name: str, *args: Any) -> Any:
        """``amdsmi.<name>(handle, *args)``; None where it is unsupported or fails, _Gone
        where the GPU is gone. Unsupported calls are not asked again."""
        key = (i, name + "".join(f" {a!s}" for a in args))  # EDGE may fail where HOTSPOT works
        if key in self._unsupported:
            return None
        fn: Callable[..., Any] | None = getattr(self._amd, name, None)
        if fn is None:  # an older binding without this call
            self._unsupported.add(key)
            return None
        try:
            return fn(self._handles[i], *args)
        except self._amd.AmdSmiException as exc:
            code = self._code(exc)
            if code in GONE:
                raise _Gone(error_text(exc)) from None
            if code in UNSUPPORTED:
                self._unsupported.add(key)
            return None
        except Exception:  # the binding's own code: a name not UTF-8, a serial not hex
            return None

    # -- open --------------------------------------------------------------------------------
    def open(self) -> RigInfo:
        self._amd = amd = import_amdsmi()
        try:
            amd.amdsmi_init(amd.AmdSmiInitFlags.INIT_AMD_GPUS)
            self._handles = list(amd.amdsmi_get_processor_handles())
        except amd.AmdSmiException as exc:
            words = INIT_WORDS.get(self._code(exc) or -1, error_text(exc))
            raise SourceUnavailable(f"amdsmi: {words}") from None
        if not self._handles:
            self._shut_down()
            raise SourceUnavailable("amdsmi finds no AMD GPU here")
        self._statics = tuple(self._static(i) for i in range(len(self._handles)))
        driver = self._call(0, "amdsmi_get_gpu_driver_info") or {}
        self._info = RigInfo(
            source=self.name,
            driver_version=text(driver.get("driver_version")),
            hostname=self._host().sample().hostname,
            gpus=self._statics,
        )
        return self._info

    def _static(self, i: int) -> GpuStatic:
        amd = self._amd
        asic = self._call(i, "amdsmi_get_gpu_asic_info") or {}
        cap = self._call(i, "amdsmi_get_power_cap_info") or {}
        pcie = (self._call(i, "amdsmi_get_pcie_info") or {}).get("pcie_static", {})
        vram = self._call(i, "amdsmi_get_gpu_vram_info") or {}
        default_cap = nonneg(cap.get("default_power_cap"))
        max_cap = nonneg(cap.get("max_power_cap"))
        width = integer(pcie.get("max_pcie_width"))
        return with_catalog(
            GpuStatic(
                index=i,
                uuid=gpu_key(text(self._call(i, "amdsmi_get_gpu_device_uuid")), i),
                name=text(asic.get("market_name")) or f"AMD GPU {i}",
                pci_bus_id=pci_bus_id(self._call(i, "amdsmi_get_gpu_device_bdf")),
                memory_total=self._call(
                    i, "amdsmi_get_gpu_memory_total", amd.AmdSmiMemoryType.VRAM
                ),
                power_limit_default_w=None if default_cap is None else default_cap * MICRO,
                power_limit_max_w=None if max_cap is None else max_cap * MICRO,
                pcie_gen_max=pcie_gen({"value": pcie.get("max_pcie_speed"), "unit": "MT/s"}),
                pcie_width_max=width or None,
                mem_bus_width_bits=integer(vram.get("vram_bit_width")),
                vendor="amd",
                gfx_target=text(asic.get("target_graphics_version")),
                compute_partition=text(self._call(i, "amdsmi_get_gpu_compute_partition")),
                memory_partition=text(self._call(i, "amdsmi_get_gpu_memory_partition")),
            )
        )

    def _host(self) -> HostSampler:
        if self._host_sampler is None:
            self._host_sampler = HostSampler()
        return self._host_sampler

    # -- poll --------------------------------------------------------------------------------
    def _temps(self, i: int) -> tuple[float | None, float | None, float | None]:
        amd = self._amd
        kinds = amd.AmdSmiTemperatureType
        now = amd.AmdSmiTemperatureMetric.CURRENT
        return (
            within("temp_c", nonneg(self._call(i, "amdsmi_get_temp_metric", kinds.EDGE, now))),
            nonneg(self._call(i, "amdsmi_get_temp_metric", kinds.HOTSPOT, now)),
            nonneg(self._call(i, "amdsmi_get_temp_metric", kinds.VRAM, now)),
        )

    def _memory(self, i: int) -> dict[str, Any]:
        kinds = self._amd.AmdSmiMemoryType
        used = self._call(i, "amdsmi_get_gpu_memory_usage", kinds.VRAM)
        total = self._statics[i].memory_total
        return {
            "memory_used": used,
            "memory_free": None if used is None or total is None else max(total - used, 0),
            "gtt_used": self._call(i, "amdsmi_get_gpu_memory_usage", kinds.GTT),
            "gtt_total": self._call(i, "amdsmi_get_gpu_memory_total", kinds.GTT),
        }

    def _power(self, i: int) -> dict[str, Any]:
        power = self._call(i, "amdsmi_get_power_info") or {}
        cap = self._call(i, "amdsmi_get_power_cap_info") or {}
        energy = self._call(i, "amdsmi_get_energy_count") or {}
        acc = nonneg(energy.get("energy_accumulator", energy.get("power")))
        resolution = nonneg(energy.get("counter_resolution"))
        watts = None  # 7.x names it socket_power; MI200 and Radeon report the average only
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            watts = watts or nonneg(power.get(key))
        limit = nonneg(cap.get("power_cap"))
        return {
            "power_w": watts,
            "power_limit_w": None if limit is None else limit * MICRO,
            "energy_mj": int(acc * resolution / 1000) if acc and resolution else None,
        }

    def _pcie(self, i: int) -> dict[str, Any]:
        metric = (self._call(i, "amdsmi_get_pcie_info") or {}).get("pcie_metric", {})
        bw = nonneg(metric.get("pcie_bandwidth"))  # Mb/s
        width = integer(metric.get("pcie_width"))
        return {
            "pcie_gen": pcie_gen({"value": metric.get("pcie_speed"), "unit": "MT/s"}),
            "pcie_width": width or None,
            "pcie_bw_kbs": None if bw is None else bw * 1e6 / 8 / KIB,
        }

    def _throttle(self, i: int, metrics: dict[str, Any]) -> tuple[str, ...] | None:
        violation = self._call(i, "amdsmi_get_violation_status")
        if isinstance(violation, dict):
            flags = [(word, violation.get(flag)) for word, _, flag in AMD_VIOLATIONS if flag]
            if any(isinstance(v, bool) for _, v in flags):
                return tuple(word for word, v in flags if v is True)
        status = metrics.get("throttle_status")
        if isinstance(status, bool | int) and not isinstance(status, str):
            return (AMD_THROTTLED,) if status else ()
        return None

    def _xgmi(self, i: int, metrics: dict[str, Any], now: float) -> dict[str, Any]:
        """Links up and traffic (KiB/s) from the gpu_metrics accumulators (KB per link)."""
        reads = [nonneg(v) for v in metrics.get("xgmi_read_data_acc") or []]
        writes = [nonneg(v) for v in metrics.get("xgmi_write_data_acc") or []]
        up = [r for r in reads if r is not None]
        if not up:
            return {}
        rx, tx = float(sum(up)), float(sum(w for w in writes if w is not None))
        last = self._xgmi_last.get(i)
        self._xgmi_last[i] = (now, rx, tx)
        rates: dict[str, Any] = {"xgmi_active": len(up)}
        if last is not None and now > last[0]:
            dt = now - last[0]
            rates["xgmi_rx_kbs"] = max(rx - last[1], 0.0) / dt
            rates["xgmi_tx_kbs"] = max(tx - last[2], 0.0) / dt
        return rates

    def _sample(self, i: int, now: float) -> GpuSample:
        static = self._statics[i]
        memory = self._memory(i)  # first: a GPU that is gone fails here
        activity = self._call(i, "amdsmi_get_gpu_activity") or {}
        edge, hotspot, mem = self._temps(i)
        clock = self._amd.AmdSmiClkType
        gfx = self._call(i, "amdsmi_get_clock_info", clock.GFX) or {}
        memclk = self._call(i, "amdsmi_get_clock_info", clock.MEM) or {}
        ecc = self._call(i, "amdsmi_get_gpu_total_ecc_count") or {}
        fan = nonneg(self._call(i, "amdsmi_get_gpu_fan_speed", 0))
        fan_max = nonneg(self._call(i, "amdsmi_get_gpu_fan_speed_max", 0))
        metrics = self._call(i, "amdsmi_get_gpu_metrics_info") or {}
        return GpuSample(
            info=static,
            util_gpu=nonneg(activity.get("gfx_activity")),
            util_mem=nonneg(activity.get("umc_activity")),
            temp_c=edge if edge is not None else hotspot,
            hotspot_temp_c=hotspot,
            mem_temp_c=mem,
            sm_clock_mhz=integer(gfx.get("clk")),
            mem_clock_mhz=integer(memclk.get("clk")),
            fan_pct=None if fan is None or not fan_max else 100.0 * fan / fan_max,
            ecc_corrected=integer(ecc.get("correctable_count")),
            ecc_uncorrected=integer(ecc.get("uncorrectable_count")),
            ecc_deferred=integer(ecc.get("deferred_count")),
            throttle_reasons=self._throttle(i, metrics),
            **memory,
            **self._power(i),
            **self._pcie(i),
            **self._xgmi(i, metrics, now),
        )

    def _processes(self, now: float) -> None:
        if self._procs_t is not None and now - self._procs_t < self.process_ttl_s:
            return
        self._procs_t = now
        procs: dict[int, tuple[GpuProcess, ...]] = {}
        listed = False
        for i in range(len(self._handles)):
            if i in self._lost:
                continue
            rows = self._call(i, "amdsmi_get_gpu_process_list")
            if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                continue  # an older binding returns handles: the kernel's fdinfo says more
            listed = True
            procs[i] = tuple(_process(r, i) for r in rows if integer(r.get("pid")))
        self._procs = procs if listed else read_drm_processes(self._statics, self._proc_root)

    def poll(self) -> RigSample:
        if self._info is None:
            self.open()
        assert self._info is not None
        now, wall = self._clock(), self._wall()
        gpus = []
        for i, static in enumerate(self._statics):
            try:
                gpus.append(plausible(self._sample(i, now)))
                self._lost.pop(i, None)
            except _Gone as exc:
                self._lost[i] = str(exc)
                gpus.append(GpuSample(info=static, lost=True, error=f"GPU is gone: {exc}"))
        self._processes(now)
        sampler = self._host()
        out = []
        for g in gpus:
            procs = self._procs.get(g.index, ())
            out.append(replace(g, processes=sampler.enrich(procs)) if procs else g)
        host = sampler.sample()
        return RigSample(
            seq=self._seq.next(), t=now, wall=wall, info=self._info, gpus=tuple(out), host=host
        )

    def _shut_down(self) -> None:
        with contextlib.suppress(Exception):  # closing: nothing to tell anyone
            self._amd.amdsmi_shut_down()

    def close(self) -> None:
        if self._amd is not None and self._info is not None:
            self._shut_down()
        self._info = None


def _process(row: dict[str, Any], gpu: int) -> GpuProcess:
    usage = row.get("memory_usage") if isinstance(row.get("memory_usage"), dict) else {}
    assert isinstance(usage, dict)
    vram = nonneg(usage.get("vram_mem"))
    return GpuProcess(
        pid=int(row["pid"]),
        gpu_index=gpu,
        used_memory=int(vram) if vram is not None else integer(row.get("mem")),
        name=text(row.get("name")),
        gtt_memory=integer(usage.get("gtt_mem")),
    )
