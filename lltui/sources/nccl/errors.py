"""The errors of the NCCL and CUDA runtime wrappers."""

from __future__ import annotations

from lltui.core.monitor.models import SourceUnavailable
from lltui.core.nccl.enums import NCCLResult


class NcclUnavailable(SourceUnavailable):
    """libnccl, libcudart or a GPU is missing; ``str()`` says which in one line."""


class NCCLError(RuntimeError):
    """An NCCL call returned an error."""

    def __init__(self, result: int, message: str) -> None:
        super().__init__(message)
        self.code = result
        self.result: NCCLResult | None = (
            NCCLResult(result) if result in NCCLResult._value2member_map_ else None
        )


class CudaError(RuntimeError):
    """A CUDA runtime call returned an error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
