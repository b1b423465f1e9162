"""llama.cpp itself: llama-server built into the user cache (``lltui llama install``), and
what the one found here is (``lltui llama info``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lltui.sources.llama.binary import LlamaBinaryError
from lltui.sources.llama.build import BuildError
from lltui.sources.llama.build import build as install  # from the pinned sdist, or found built

if TYPE_CHECKING:
    from lltui.core.llamalog.models import DeviceSeen
    from lltui.sources.llama.binary import LlamaBinary, ServerProbe

__all__ = ["BuildError", "LlamaBinaryError", "ServerFacts", "install", "server_facts"]


@dataclass(frozen=True)
class ServerFacts:
    binary: LlamaBinary
    probe: ServerProbe  # its version and the flags it takes
    devices: tuple[DeviceSeen, ...]  # what it sees now (free memory: never cached)


def server_facts() -> ServerFacts:
    """The llama-server found here, what it says of itself and its devices. LlamaBinaryError."""
    from lltui.sources.llama import binary

    found = binary.find_llama_server()
    return ServerFacts(found, binary.probe(found.path), binary.list_devices(found.path))
