"""The host memory available now, read without psutil where Linux says it (a fit or quant
run is a short process: psutil's import would be a tenth of it)."""

from __future__ import annotations


def host_available() -> int | None:
    """Host memory available now: MemAvailable from /proc/meminfo on Linux (what psutil
    reports, without importing it: a fit or quant run is a short process), else psutil."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return None
