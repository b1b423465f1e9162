"""For a front end that serves HTTP itself (the browser view): an aiohttp app served with
its connections bounded, and no traceback for each malformed request a client sends."""

from __future__ import annotations

from lltui.sources.http_server import serve as serve
