"""The host's CPU and memory and a process's host-side facts through psutil, where there is
no Linux ``/proc`` to read them from (procfs.py)."""

from __future__ import annotations

import psutil

from lltui.sources.gpu.procfs import ProcessReading


class PsutilReader:
    """The host's CPU and memory and processes' facts; psutil's Process objects are kept
    between readings so that ``cpu_percent`` covers the time since the previous one."""

    def __init__(self) -> None:
        self._procs: dict[int, psutil.Process] = {}
        psutil.cpu_percent(interval=None)  # primed, so the first reading is real

    def cpu_percent(self) -> float | None:
        """The host's CPU use since the last call."""
        return float(psutil.cpu_percent(interval=None))

    def memory(self) -> tuple[int, int] | None:
        vm = psutil.virtual_memory()
        return int(vm.total), int(vm.available)

    def process(self, pid: int) -> ProcessReading | None:
        proc = self._procs.get(pid)
        try:
            if proc is None:
                proc = self._procs[pid] = psutil.Process(pid)
            with proc.oneshot():
                return ProcessReading(
                    name=proc.name(),
                    user=proc.username(),
                    cmdline=tuple(proc.cmdline()),
                    host_rss=int(proc.memory_info().rss),
                    cpu_pct=proc.cpu_percent(interval=None),
                    started=proc.create_time(),
                )
        except (psutil.Error, OSError):
            # Gone, or in another PID namespace (containers without --pid=host).
            self._procs.pop(pid, None)
            return None

    def forget(self, keep: set[int]) -> None:
        for pid in [pid for pid in self._procs if pid not in keep]:
            del self._procs[pid]
