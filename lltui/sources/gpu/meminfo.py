"""The host's memory, read without psutil where Linux says it (a fit or quant run is a short
process, and a monitor a long one: psutil's import is a tenth of the one, 0.7 MiB of the
other's memory)."""

from __future__ import annotations

import os


def host_memory(root: str | os.PathLike[str] = "/") -> tuple[int, int] | None:
    """(total, available) bytes from /proc/meminfo, as psutil's ``virtual_memory`` has them
    (MemAvailable: what can be had without swapping); None where Linux does not say."""
    total = available = None
    try:
        with open(os.path.join(root, "proc", "meminfo"), "rb") as f:
            for line in f:
                if line.startswith(b"MemTotal:"):
                    total = int(line.split()[1]) * 1024
                elif line.startswith(b"MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                if total is not None and available is not None:
                    return total, available
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_available() -> int | None:
    """Host memory available now: MemAvailable on Linux, else psutil's."""
    memory = host_memory()
    if memory is not None:
        return memory[1]
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except (ImportError, OSError):
        return None
