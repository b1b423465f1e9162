"""Host CPU and RAM, and the host-side facts of GPU processes: from Linux's ``/proc``
(procfs.py), else through psutil (host_psutil.py)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import replace
from typing import Protocol

from lltui.core.llama.served_model import served_model
from lltui.core.monitor.models import ContainerRef, GpuProcess, HostSample
from lltui.sources.gpu import procfs
from lltui.sources.gpu.containers import ContainerReader
from lltui.sources.gpu.procfs import ProcessReading


class HostReader(Protocol):
    """Where the host's readings come from."""

    def cpu_percent(self) -> float | None: ...
    def memory(self) -> tuple[int, int] | None: ...
    def process(self, pid: int) -> ProcessReading | None: ...
    def forget(self, keep: set[int]) -> None: ...


def host_reader() -> HostReader:
    """``/proc`` where Linux has it, else psutil (imported only then)."""
    if procfs.readable():
        return procfs.ProcReader()
    from lltui.sources.gpu.host_psutil import PsutilReader

    return PsutilReader()


class HostSampler:
    """Samples host CPU/RAM; the CPU percentage is measured between two calls, never blocking."""

    def __init__(
        self, containers: ContainerReader | None = None, reader: HostReader | None = None
    ) -> None:
        self._reader = reader or host_reader()
        self._hostname = socket.gethostname()
        self._containers = containers or ContainerReader()
        self.unseen = 0  # pids of the last enrich the host could not find

    def sample(self) -> HostSample:
        memory = self._reader.memory()
        try:
            load = os.getloadavg()[0]
        except OSError:
            load = None
        return HostSample(
            cpu_pct=self._reader.cpu_percent(),
            mem_total=None if memory is None else memory[0],
            mem_used=None if memory is None else memory[0] - memory[1],
            cpu_count=os.cpu_count(),
            load_1m=load,
            hostname=self._hostname,
        )

    def enrich(self, processes: Iterable[GpuProcess]) -> tuple[GpuProcess, ...]:
        """Fill name, user, command, RSS and CPU% from the host; a vanished pid keeps Nones.
        A pid's CPU% covers the time since the previous tick (its first tick reads 0.0)."""
        out = []
        # A process on several GPUs is listed once per GPU: ask the host once per pid, or
        # the second reading's CPU% would cover the few microseconds since the first.
        host_facts: dict[int, ProcessReading | None] = {}
        for gp in processes:
            if gp.pid not in host_facts:
                host_facts[gp.pid] = self._reader.process(gp.pid)
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
                    command=" ".join(facts.cmdline) if facts.cmdline else facts.name,
                    host_rss=facts.host_rss,
                    cpu_pct=facts.cpu_pct,
                    model=served_model(facts.cmdline),
                    started=facts.started,
                    container=self._container(gp.pid, facts.started),
                )
            )
        self._reader.forget(set(host_facts))
        self._containers.forget(set(host_facts))
        self.unseen = sum(1 for facts in host_facts.values() if facts is None)
        return tuple(out)

    def _container(self, pid: int, started: float | None) -> ContainerRef | None:
        try:
            return self._containers.container(pid, started)
        except Exception:  # a container is an extra: never a failed tick
            return None
