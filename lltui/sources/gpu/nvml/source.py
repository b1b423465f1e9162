"""NVIDIA GPUs read through NVML with nvidia-ml-py (module ``pynvml``).

NVML is initialised once in :meth:`NvmlSource.open` and shut down in :meth:`NvmlSource.close`.
Fields are read at three rates:

* **static**, once per GPU at open: name, UUID, PCI bus id, memory total, power limits, max
  clocks, compute capability, serial, VBIOS, persistence mode, max PCIe link, NVLink links,
  and the index CUDA gives the GPU (see :mod:`lltui.core.monitor.cuda_order`).
* **fast**, every poll: memory, utilisation, power, energy counter, enforced power limit,
  temperature, SM clock and clock-event reasons. Energy, power and the power limit come from
  one ``nvmlDeviceGetFieldValues`` call where the driver answers it, so a fast poll costs 6
  NVML calls per GPU (7 where it does not; the enforced limit then moves to the slow TTL).
* **slow**, on TTLs given to the constructor: fan, memory clock, P-state, the memory's
  temperature, ECC counts (volatile and aggregate), retired pages, NVLink throughput and
  the enforced limit (``slow_ttl_s``); the current PCIe link and NVLink state; processes
  (``process_ttl_s``); PCIe throughput (``pcie_ttl_s``).
  ``nvmlDeviceGetPcieThroughput`` samples for about 20 ms per counter, so it never runs on
  the fast path: it runs inside the poll whose PCIe TTL has expired, on the poller's worker
  thread (two counters x 8 GPUs adds about 320 ms to that one poll; the UI does not wait).

XID errors and ECC error events come through NVML's event API, waited on by a thread of their
own (:mod:`.events`); each poll takes what came since the last one without waiting. A GPU's
sample carries the XID events since the previous sample and the last XID seen; an XID 79
marks the GPU lost; an ECC event has that GPU's ECC counts read on the next poll rather than
on the slow TTL.

Driver drift is handled where it bites: process info v3 -> v2 -> v1, memory info v2 -> v1,
clocks-event -> clocks-throttle reasons, field values -> one call per field. Each GPU
remembers which version answered and which fields it does not support, so a refused call is
not repeated every tick. A GPU that falls off the bus is marked lost and not asked again;
the others keep updating. A field that fails any other way is ``None`` for that tick and the
reason goes into ``GpuSample.error``.

The package's modules: :mod:`.codes` (NVML's numbers, errors in words), :mod:`.probe`
(versions and why NVML will not start), :mod:`.calls` (one call and its outcome), :mod:`.events`,
:mod:`.fields` (the field-value batch), :mod:`.static` (open), :mod:`.reads` (fast and slow
fields), :mod:`.processes`, :mod:`.state` (per-GPU state and typed readings) and this one.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import weakref
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lltui.core.monitor.models import (
    GpuSample,
    HostSample,
    RigInfo,
    RigSample,
    SourceUnavailable,
)
from lltui.core.monitor.plausible import plausible
from lltui.core.text import error_text
from lltui.sources.gpu.base import PROCESS_TTL_S, SequenceCounter, mono_clock, wall_clock
from lltui.sources.gpu.nvml.calls import GpuLost, NvmlCalls
from lltui.sources.gpu.nvml.codes import (
    ERR_GPU_IS_LOST,
    ERR_NO_PERMISSION,
    LOST_WORDS,
    NOT_INSTALLED,
    NOT_THE_BINDING,
    error_code,
    error_words,
    import_pynvml,
    is_binding,
)
from lltui.sources.gpu.nvml.events import (
    DEFAULT_EVENT_LIMIT,
    DEFAULT_EVENT_WAIT_S,
    Drained,
    EventBuffer,
    EventWatcher,
)
from lltui.sources.gpu.nvml.mig import enumerate_mig, mig_devices, read_mig_memory
from lltui.sources.gpu.nvml.probe import init_failure, mismatch_hint, system_versions
from lltui.sources.gpu.nvml.processes import enrich_processes, read_processes
from lltui.sources.gpu.nvml.reads import read_ecc, read_fast, read_links, read_pcie, read_slow
from lltui.sources.gpu.nvml.state import NO_FAST, GpuState
from lltui.sources.gpu.nvml.static import assign_cuda_indices, placeholder_static, read_static
from lltui.sources.gpu.nvml.vgpu import HOST_VGPU, read_vgpu_memory, read_vgpus

if TYPE_CHECKING:
    from lltui.sources.gpu.host_facts import HostSampler

DEFAULT_SLOW_TTL_S = 5.0
DEFAULT_PROCESS_TTL_S = PROCESS_TTL_S
DEFAULT_PCIE_TTL_S = 5.0
DEFAULT_LINK_TTL_S = 30.0
FELL_OFF_WORDS = "GPU is lost: it has fallen off the bus (XID 79); it needs a reset or reboot"
NO_EVENTS = Drained()


class NvmlSource:
    """The GpuSource for local NVIDIA GPUs. See the module docstring for what is read when."""

    name = "nvml"

    def __init__(
        self,
        *,
        slow_ttl_s: float = DEFAULT_SLOW_TTL_S,
        process_ttl_s: float = DEFAULT_PROCESS_TTL_S,
        pcie_ttl_s: float = DEFAULT_PCIE_TTL_S,
        link_ttl_s: float = DEFAULT_LINK_TTL_S,
        clock: Callable[[], float] = mono_clock,
        wall: Callable[[], float] = wall_clock,
        host: HostSampler | None = None,
        env: Mapping[str, str] | None = None,
        event_wait_s: float = DEFAULT_EVENT_WAIT_S,
        event_limit: int = DEFAULT_EVENT_LIMIT,
    ) -> None:
        self.slow_ttl_s = slow_ttl_s
        self.event_wait_s = event_wait_s
        self.event_limit = event_limit
        self.process_ttl_s = process_ttl_s
        self.pcie_ttl_s = pcie_ttl_s
        self.link_ttl_s = link_ttl_s
        self._clock = clock
        self._wall = wall
        self._host = host
        self._env = env
        self._nv: Any = None
        self._calls: NvmlCalls | None = None
        self._gpus: list[GpuState] = []
        self._info: RigInfo | None = None
        self._hints: list[str] = []
        self._mismatch_noted = False
        self._last: dict[str, float] = {}
        self._seq = SequenceCounter()
        self._driver_version: str | None = None
        self._events: EventWatcher | None = None
        self._container_runtime: str | None = None  # "" on a host; checked when needed

    # -- GpuSource ----------------------------------------------------------------------
    def open(self) -> RigInfo:
        if self._info is not None:
            return self._info
        nv = import_pynvml()
        if nv is None:
            raise SourceUnavailable(NOT_INSTALLED)
        if not is_binding(nv):
            raise SourceUnavailable(NOT_THE_BINDING)
        try:
            nv.nvmlInit()
        except Exception as exc:
            raise SourceUnavailable(init_failure(nv, exc)[0]) from None
        self._nv = nv
        try:
            self._calls = NvmlCalls(nv, self._note_mismatch)
            info = self._open_devices(self._calls)
            self._start_events(nv)
            return info
        except BaseException:
            self.close()
            raise

    def poll(self) -> RigSample:
        calls = self._calls
        if self._info is None or self._nv is None or calls is None:
            raise SourceUnavailable("the NVML source is not open")
        now = self._clock()
        slow = self._due("slow", self.slow_ttl_s, now)
        procs = self._due("procs", self.process_ttl_s, now)
        pcie = self._due("pcie", self.pcie_ttl_s, now)
        links = slow and self._due("links", self.link_ttl_s, now)
        events = self._take_events()
        for g in self._gpus:
            self._read_gpu(calls, g, now, slow=slow, procs=procs, pcie=pcie, links=links)
        if procs:
            enrich_processes(self._host, self._gpus)
            self._check_hidden_pids()
        samples = tuple(plausible(_sample(g, events.get(g.index, NO_EVENTS))) for g in self._gpus)
        host, host_error = self._sample_host()
        error = host_error
        if samples and all(s.lost for s in samples):
            error = "every GPU is lost; restart the driver or reboot"
        return RigSample(
            seq=self._seq.next(),
            t=now,
            wall=self._wall(),
            info=self._info,
            gpus=samples,
            host=host,
            error=error,
        )

    def close(self) -> None:
        events, self._events = self._events, None
        if events is not None:
            events.stop()  # the thread frees its set and lets its own hold on NVML go
        nv, self._nv = self._nv, None
        self._calls = None
        self._info = None
        self._gpus = []
        self._last = {}
        self._hints = []
        self._mismatch_noted = False
        if nv is not None:
            # Closing must not fail; the process is leaving NVML either way.
            with contextlib.suppress(Exception):
                nv.nvmlShutdown()

    # -- open -----------------------------------------------------------------------------
    def _open_devices(self, calls: NvmlCalls) -> RigInfo:
        driver, nvml, cuda, missing = system_versions(calls.nv)
        self._driver_version = driver
        if missing:
            self._note_mismatch()
        count = self._count_gpus(calls.nv)
        gpus, refused = self._open_each(calls, count)
        if not gpus:
            raise SourceUnavailable(
                f"none of the {count} NVIDIA GPU(s) could be opened ({'; '.join(refused)})"
            )
        if refused:
            self._hints.append(
                "left out GPUs NVML would not open (" + "; ".join(refused) + "); "
                "in a container or cgroup only some GPUs may be yours"
            )
        self._gpus = gpus
        order_hint = assign_cuda_indices(gpus, os.environ if self._env is None else self._env)
        if order_hint is not None:
            self._hints.append(order_hint)
        self._info = RigInfo(
            source=self.name,
            driver_version=driver,
            cuda_version=cuda,
            nvml_version=nvml,
            hostname=socket.gethostname(),
            gpus=tuple(g.static for g in gpus if g.static is not None),
            hints=tuple(self._hints),
        )
        if self._host is None:
            from lltui.sources.gpu.host_facts import HostSampler

            self._host = HostSampler()
        return self._info

    @staticmethod
    def _count_gpus(nv: Any) -> int:
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception as exc:
            if error_code(exc) == ERR_NO_PERMISSION:
                raise SourceUnavailable(
                    "no permission to use the NVIDIA driver (cannot open /dev/nvidia*)"
                ) from None
            raise SourceUnavailable(f"NVML could not count the GPUs: {error_words(exc)}") from None
        if count <= 0:
            raise SourceUnavailable("no NVIDIA GPU found (the driver is loaded but sees no GPU)")
        return count

    @staticmethod
    def _open_each(calls: NvmlCalls, count: int) -> tuple[list[GpuState], list[str]]:
        """Every GPU with its static facts (a lost one marked lost), and the ones refused."""
        gpus: list[GpuState] = []
        refused: list[str] = []
        for index in range(count):
            try:
                handle = calls.nv.nvmlDeviceGetHandleByIndex(index)
            except Exception as exc:
                code = error_code(exc)
                if code == ERR_GPU_IS_LOST:
                    gpus.append(
                        GpuState(
                            index, None, static=placeholder_static(index), lost_reason=LOST_WORDS
                        )
                    )
                elif code == ERR_NO_PERMISSION:
                    refused.append(f"GPU {index}: no permission")
                else:
                    refused.append(f"GPU {index}: {error_words(exc)}")
                continue
            g = read_static(calls, GpuState(index, handle))
            if g.static is not None and g.static.mig_mode and g.lost_reason is None:
                g.mig = enumerate_mig(calls, g)
            gpus.append(g)
        return gpus, refused

    def _note_mismatch(self) -> None:
        if not self._mismatch_noted:
            self._mismatch_noted = True
            self._add_hint(mismatch_hint(self._driver_version))

    def _add_hint(self, hint: str) -> None:
        if hint in self._hints:
            return
        self._hints.append(hint)
        if self._info is not None:
            self._info = replace(self._info, hints=tuple(self._hints))

    def _start_events(self, nv: Any) -> None:
        watcher = EventWatcher(
            nv, EventBuffer(self.event_limit), wall=self._wall, wait_s=self.event_wait_s
        )
        handles = [(g.index, g.handle) for g in self._gpus if g.handle is not None]
        if handles and watcher.start(handles):
            self._events = watcher
            # A source dropped without close still stops its thread when collected.
            weakref.finalize(self, watcher.stop)

    @property
    def event_watcher(self) -> EventWatcher | None:
        """The XID and ECC event thread and its buffer (None: no GPU has events, or closed)."""
        return self._events

    # -- a tick ---------------------------------------------------------------------------
    def _take_events(self) -> dict[int, Drained]:
        """What the event thread saw since the last poll, applied to each GPU's state."""
        watcher = self._events
        if watcher is None:
            return {}
        if watcher.problem is not None:
            self._add_hint(watcher.problem)
        drained = watcher.buffer.drain()
        for g in self._gpus:
            got = drained.get(g.index)
            if got is None:
                continue
            if got.last is not None:
                g.last_xid = got.last
            if got.fell_off and g.lost_reason is None:
                g.lost_reason = FELL_OFF_WORDS
            g.ecc_due = g.ecc_due or got.ecc
        return drained

    def _due(self, group: str, ttl: float, now: float) -> bool:
        if ttl == math.inf:  # a group the caller does not want (one-shot API reads)
            return False
        last = self._last.get(group)
        if last is not None and now - last < ttl:
            return False
        self._last[group] = now
        return True

    def _read_gpu(
        self,
        calls: NvmlCalls,
        g: GpuState,
        now: float,
        *,
        slow: bool,
        procs: bool,
        pcie: bool,
        links: bool,
    ) -> None:
        if g.lost_reason is not None:
            return
        g.errors, g.static_errors = g.static_errors, []
        g.fast = NO_FAST
        static = g.static
        try:
            read_fast(calls, g)
            host_vgpu = static is not None and static.virtualization == HOST_VGPU
            if slow:
                read_slow(calls, g, now)
                if g.mig is not None:
                    read_mig_memory(calls, g)
                if host_vgpu and not links:
                    read_vgpu_memory(calls, g)
            if links:
                read_links(calls, g)
                if g.mig is not None:
                    g.mig = enumerate_mig(calls, g)
                if host_vgpu:
                    read_vgpus(calls, g)
            elif g.ecc_due:
                read_ecc(calls, g)
            g.ecc_due = False
            if pcie:
                read_pcie(calls, g)
            if procs:
                g.raw_procs = read_processes(calls, g)
        except GpuLost:
            g.lost_reason = LOST_WORDS
        except Exception as exc:  # a bug here must cost one GPU's tick, not the poll
            g.errors.append(f"internal error: {error_text(exc)}")
        if g.static is not static and self._info is not None:
            # The memory total NVML could not give at open came with this reading.
            statics = tuple(x.static for x in self._gpus if x.static is not None)
            self._info = replace(self._info, gpus=statics)

    def _check_hidden_pids(self) -> None:
        """Say so, once, when NVML lists processes none of which this machine can see: lltui
        runs in a container of its own pid namespace, and the pids are the host's."""
        host = self._host
        listed = {p.pid for g in self._gpus for p in g.raw_procs}
        if host is None or not listed or getattr(host, "unseen", 0) < len(listed):
            return
        if self._container_runtime is None:
            from lltui.sources.gpu.containers import inside_container

            self._container_runtime = inside_container() or ""
        if self._container_runtime:
            from lltui.sources.gpu.containers import hidden_pids_hint

            self._add_hint(hidden_pids_hint(self._container_runtime))

    def _sample_host(self) -> tuple[HostSample, str | None]:
        if self._host is None:
            return HostSample(), None
        try:
            return self._host.sample(), None
        except Exception as exc:
            return HostSample(), f"host CPU/RAM could not be read: {error_text(exc)}"


def _sample(g: GpuState, events: Drained) -> GpuSample:
    """One GPU's sample from its latest readings and the events since the last sample."""
    static = g.static or placeholder_static(g.index)
    if g.lost_reason is not None:
        return GpuSample(
            info=static,
            lost=True,
            error=g.lost_reason,
            xid=g.last_xid,
            xid_events=events.events,
            xid_dropped=events.dropped,
        )
    f, s = g.fast, g.slow
    return GpuSample(
        info=static,
        memory_used=f.memory_used,
        memory_free=f.memory_free,
        memory_reserved=f.memory_reserved,
        util_gpu=f.util_gpu,
        util_mem=f.util_mem,
        power_w=f.power_w,
        power_limit_w=f.power_limit_w if f.power_limit_read else s.power_limit_w,
        energy_mj=f.energy_mj,
        temp_c=f.temp_c,
        sm_clock_mhz=f.sm_clock_mhz,
        mem_clock_mhz=s.mem_clock_mhz,
        fan_pct=s.fan_pct,
        pstate=s.pstate,
        mem_temp_c=s.mem_temp_c,
        mig=mig_devices(g),
        vgpus=g.vgpus,
        throttle_reasons=f.throttle_reasons,
        pcie_gen=s.pcie_gen,
        pcie_width=s.pcie_width,
        pcie_rx_kbs=s.pcie_rx_kbs,
        pcie_tx_kbs=s.pcie_tx_kbs,
        nvlink_active=s.nvlink_active,
        nvlink_rx_kbs=s.nvlink_rx_kbs,
        nvlink_tx_kbs=s.nvlink_tx_kbs,
        ecc_uncorrected=s.ecc_uncorrected,
        ecc_corrected=s.ecc_corrected,
        ecc_aggregate_uncorrected=s.ecc_agg_uncorrected,
        ecc_aggregate_corrected=s.ecc_agg_corrected,
        retired_pages=s.retired_pages,
        xid=g.last_xid,
        xid_events=events.events,
        xid_dropped=events.dropped,
        processes=g.procs,
        error="; ".join(dict.fromkeys(g.errors)) or None,
    )
