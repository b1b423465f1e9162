"""NVIDIA GPUs read through NVML with nvidia-ml-py (module ``pynvml``); see
:mod:`lltui.sources.gpu.nvml.source` for what is read when.

``pynvml`` is imported when a source opens or a probe runs, never at import: tests put a fake
in ``sys.modules["pynvml"]`` and nothing else needs patching.
"""

from __future__ import annotations

from lltui.sources.gpu.nvml.probe import NvmlProbe, cuda_version_text, probe_nvml
from lltui.sources.gpu.nvml.source import (
    DEFAULT_LINK_TTL_S,
    DEFAULT_PCIE_TTL_S,
    DEFAULT_PROCESS_TTL_S,
    DEFAULT_SLOW_TTL_S,
    NvmlSource,
)

__all__ = [
    "DEFAULT_LINK_TTL_S",
    "DEFAULT_PCIE_TTL_S",
    "DEFAULT_PROCESS_TTL_S",
    "DEFAULT_SLOW_TTL_S",
    "NvmlProbe",
    "NvmlSource",
    "cuda_version_text",
    "probe_nvml",
]
