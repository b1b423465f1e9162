"""AMD GPUs (ROCm): the ``amd`` and ``amd:HOST`` sources.

Here, the ``amdsmi`` Python binding where it is importable and initialises
(:mod:`.binding`), else the ``amd-smi`` / ``rocm-smi`` command-line tools (:mod:`.cli`); on
a host over ssh, the tools. Per-process VRAM comes from the binding or amd-smi, else from
the kernel's DRM fdinfo (:mod:`.fdinfo`).
"""

from __future__ import annotations

from lltui.core.monitor.models import GpuSource, RigInfo, RigSample, SourceUnavailable
from lltui.sources.gpu.amd.binding import AmdSmiSource
from lltui.sources.gpu.amd.cli import AMD_SMI, ROCM_SMI, AmdCliSource

__all__ = ["AMD_SMI", "ROCM_SMI", "AmdCliSource", "AmdSmiSource", "AmdSource"]


class AmdSource:
    """The AMD GPUs here (binding, else tools) or on ``host`` (tools over ssh)."""

    def __init__(self, host: str | None = None, *, port: int | None = None) -> None:
        self.host = host
        self.port = port
        self.name = "amd" if host is None else f"amd:{host}"
        self._inner: GpuSource | None = None

    def open(self) -> RigInfo:
        reasons = []
        if self.host is None:
            binding = AmdSmiSource()
            try:
                info = binding.open()
                self._inner = binding
                self.name = binding.name
                return info
            except ImportError:
                reasons.append("the amdsmi binding is not importable")
            except SourceUnavailable as exc:
                reasons.append(str(exc))
        cli = AmdCliSource(self.host, port=self.port)
        try:
            info = cli.open()
        except SourceUnavailable as exc:
            raise SourceUnavailable("; ".join([*reasons, str(exc)])) from None
        self._inner = cli
        self.name = cli.name
        return info

    def poll(self) -> RigSample:
        if self._inner is None:
            self.open()
        assert self._inner is not None
        return self._inner.poll()

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
