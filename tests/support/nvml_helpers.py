"""What the NVML tests share beyond the fake itself."""

from __future__ import annotations

from typing import Any

import pytest

from lltui.sources.gpu.nvml import NvmlSource


@pytest.fixture(autouse=True)
def close_nvml_sources(monkeypatch: pytest.MonkeyPatch):
    """Every source a test opens is closed after it, so no event thread outlives its test.
    Imported by a test module, it applies to every test there."""
    opened: list[NvmlSource] = []
    real_open = NvmlSource.open

    def open_and_remember(self: NvmlSource) -> Any:
        opened.append(self)
        return real_open(self)

    monkeypatch.setattr(NvmlSource, "open", open_and_remember)
    yield
    for src in opened:
        src.close()
