"""Signalling a process on a GPU from the monitor: the pid's identity checked first and
again just before the signal, so a reused pid is never signalled (sources.gpu.signals)."""

from lltui.sources.gpu.signals import check_signal, send_signal, still_running

__all__ = ["check_signal", "send_signal", "still_running"]
