"""The ``amd`` and ``amd:HOST`` sources: the binding here where it is importable and
initialises, else the tools. Their modules load only where something could answer: on a
machine with neither the binding nor a tool (every NVIDIA machine's ``auto``), opening says
so without importing them."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from typing import TYPE_CHECKING

from lltui.core.monitor.models import RigInfo, RigSample, SourceUnavailable
from lltui.sources.gpu.amd.tools import TOOLS, not_on_path

if TYPE_CHECKING:
    from lltui.core.monitor.models import GpuSource

NO_BINDING = "the amdsmi binding is not importable"


def _binding_findable() -> bool:
    """Whether ``import amdsmi`` could succeed (a test's fake sits in sys.modules)."""
    return "amdsmi" in sys.modules or importlib.util.find_spec("amdsmi") is not None


class AmdSource:
    """The AMD GPUs here (binding, else tools) or on ``host`` (tools over ssh)."""

    def __init__(
        self, host: str | None = None, *, port: int | None = None, timeout: float | None = None
    ) -> None:
        self.host = host
        self.port = port
        self.timeout = timeout  # an open's, a poll's commands (a fleet's --host-timeout)
        self.name = "amd" if host is None else f"amd:{host}"
        self.reader: str | None = None  # what answered: the amdsmi binding, amd-smi, rocm-smi
        self._inner: GpuSource | None = None

    def open(self) -> RigInfo:
        reasons = []
        if self.host is None and not _binding_findable():
            reasons.append(NO_BINDING)
            if not any(shutil.which(tool) for tool in TOOLS):
                raise SourceUnavailable("; ".join([*reasons, *map(not_on_path, TOOLS)]))
        elif self.host is None:
            from lltui.sources.gpu.amd.binding import AmdSmiSource

            binding = AmdSmiSource()
            try:
                info = binding.open()
                self._inner = binding
                self.name = binding.name
                self.reader = "the amdsmi binding"
                return info
            except ImportError:
                reasons.append(NO_BINDING)
            except SourceUnavailable as exc:
                reasons.append(str(exc))
        from lltui.sources.gpu.amd.cli import AmdCliSource

        cli = self._inner = AmdCliSource(self.host, port=self.port, timeout=self.timeout)
        try:  # (a close while it opens stops its ssh)
            info = cli.open()
        except SourceUnavailable as exc:
            self._inner = None
            cli.close()  # its ssh master, where the host answered and its tools did not
            raise SourceUnavailable("; ".join([*reasons, str(exc)])) from None
        self.name = cli.name
        self.reader = cli.tool
        return info

    def poll(self) -> RigSample:
        if self._inner is None:
            self.open()
        assert self._inner is not None
        return self._inner.poll()

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
