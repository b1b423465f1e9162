"""The process toolkit for a front end that runs processes of its own (the browser view runs
an app per tab): a command line whose process dies with lltui's, and a process group stopped
step by step (signal, wait, then SIGKILL)."""

from __future__ import annotations

from lltui.sources.proc_group import dies_with_us as dies_with_us
from lltui.sources.proc_group import stop_group as stop_group
