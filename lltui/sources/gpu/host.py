"""Host CPU and RAM, and the host-side facts of GPU processes, through psutil."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, replace

import psutil

from lltui.core.llama.served_model import served_model
from lltui.core.monitor.models import ContainerRef, GpuProcess, HostSample
from lltui.sources.gpu.containers import ContainerReader


@dataclass(frozen=True, slots=True)
class ProcessFacts:
    """What the host knows of one process."""

    name: str
    user: str
    command: str
    host_rss: int
    cpu_pct: float
    model: str | None = None  # what a llama-server serves, from its argv
    started: float | None = None  # seconds since the epoch


class HostSampler:
    """Samples host CPU/RAM; ``cpu_percent`` is measured between two calls, never blocking."""

    def __init__(self, containers: ContainerReader | None = None) -> None:
        psutil.cpu_percent(interval=None)  # prime the counter so the first sample is real
        self._hostname = socket.gethostname()
        self._procs: dict[int, psutil.Process] = {}
        self._containers = containers or ContainerReader()
        self.unseen = 0  # pids of the last enrich the host could not find

    def sample(self) -> HostSample:
        vm = psutil.virtual_memory()
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = None
        return HostSample(
            cpu_pct=psutil.cpu_percent(interval=None),
            mem_total=int(vm.total),
            mem_used=int(vm.total - vm.available),
            cpu_count=psutil.cpu_count(),
            load_1m=load,
            hostname=self._hostname,
        )

    def enrich(self, processes: Iterable[GpuProcess]) -> tuple[GpuProcess, ...]:
        """Fill name, user, command, RSS and CPU% from the host; a vanished pid keeps Nones.

        psutil.Process objects are kept between ticks so ``cpu_percent`` measures the
        interval since the previous tick (the first tick of a pid reads 0.0).
        """
        out = []
        # A process on several GPUs is listed once per GPU: ask the host once per pid, or
        # the second cpu_percent() would read the few microseconds since the first.
        host_facts: dict[int, ProcessFacts | None] = {}
        for gp in processes:
            if gp.pid not in host_facts:
                host_facts[gp.pid] = self._host_facts(gp.pid)
            facts = host_facts[gp.pid]
            if facts is None:
                # no facts (another pid namespace, or gone); its cgroup may still be read
                out.append(replace(gp, container=self._container(gp.pid, None)))
                continue
            out.append(
                replace(
                    gp,
                    name=facts.name,
                    user=facts.user,
                    command=facts.command,
                    host_rss=facts.host_rss,
                    cpu_pct=facts.cpu_pct,
                    model=facts.model,
                    started=facts.started,
                    container=self._container(gp.pid, facts.started),
                )
            )
        for pid in list(self._procs):
            if pid not in host_facts:
                del self._procs[pid]
        self._containers.forget(set(host_facts))
        self.unseen = sum(1 for facts in host_facts.values() if facts is None)
        return tuple(out)

    def _container(self, pid: int, started: float | None) -> ContainerRef | None:
        try:
            return self._containers.container(pid, started)
        except Exception:  # a container is an extra: never a failed tick
            return None

    def _host_facts(self, pid: int) -> ProcessFacts | None:
        proc = self._procs.get(pid)
        try:
            if proc is None:
                proc = psutil.Process(pid)
                self._procs[pid] = proc
            with proc.oneshot():
                cmdline = proc.cmdline()
                return ProcessFacts(
                    name=proc.name(),
                    user=proc.username(),
                    command=" ".join(cmdline) if cmdline else proc.name(),
                    host_rss=int(proc.memory_info().rss),
                    cpu_pct=proc.cpu_percent(interval=None),
                    model=served_model(cmdline),
                    started=proc.create_time(),
                )
        except (psutil.Error, OSError):
            # Gone, or in another PID namespace (containers without --pid=host).
            self._procs.pop(pid, None)
            return None
