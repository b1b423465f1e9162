"""For a front end that serves HTTP itself (the browser view): aiohttp's log with no
traceback for each malformed request a client sends."""

from __future__ import annotations

from lltui.sources.net import quiet_server_log as quiet_server_log
