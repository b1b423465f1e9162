"""What an idle monitor keeps in memory: modules it has no use for stay unloaded (the idle
budget is the bare Textual app's RSS + 8 MiB; bench/idle_cpu.py measures it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# the monitor on the fake NVML, headless, a few samples taken and drawn; then which of the
# modules named on the command line are loaded
MONITOR = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from support import fake_pynvml as fp
sys.modules["pynvml"] = fp.FakeNvml(fp.make_gpus(8)).module
from lltui.app.app import create_app
from lltui.config import Settings
from lltui.sources.gpu.nvml import NvmlSource

async def main():
    source = NvmlSource(env={})
    app = create_app(Settings(source="nvml"), source=source, start_polling=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(3)
        await pilot.pause()
    source.close()

asyncio.run(main())
print(" ".join(name for name in sys.argv[2:] if name in sys.modules))
"""


# the monitor of a simulated rig whose GPUs run processes (the process table has rows)
SIM_MONITOR = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from support.app_helpers import feed, sim_app

async def main():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(120, 40)) as pilot:
        feed(app, 3)
        await pilot.pause()
        assert app.screen.query_one("ProcessTable").row_count > 0

asyncio.run(main())
print(" ".join(name for name in sys.argv[2:] if name in sys.modules))
"""


def loaded_by_the_monitor(*modules: str, script: str = MONITOR) -> list[str]:
    # this checkout's lltui, whichever one the environment installed
    path = os.pathsep.join(filter(None, [str(TESTS.parent), os.environ.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", script, str(TESTS), *modules],
        env=dict(os.environ, PYTHONPATH=path),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.split()


def test_the_monitor_leaves_the_flag_table_and_the_emoji_codes_unloaded():
    """llama.cpp's flag table (the process table spells the model flag itself) and rich's
    emoji codes (the table's headers are Text, not markup) are most of two megabytes."""
    assert loaded_by_the_monitor("lltui.core.cmdline.flag_table", "rich._emoji_codes") == []


def test_processes_in_the_table_leave_the_emoji_codes_unloaded():
    """The process table's cells are Text without emoji codes: rows leave the table unloaded
    too."""
    assert loaded_by_the_monitor("rich._emoji_codes", script=SIM_MONITOR) == []


async def test_the_start_s_free_heap_is_handed_back_once(monkeypatch):
    """After the first sample is drawn the app hands the heap the start freed back to the
    system, once, not on every sample."""
    from support.app_helpers import sim_app

    from lltui.app import heap

    released: list[bool] = []
    monkeypatch.setattr(heap, "release_free_heap", lambda: released.append(True) or True)
    app = sim_app()
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(3):
            app.poll_sync(1)
            await pilot.pause()
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()
        assert app.heap_released
    assert released == [True]


def test_release_free_heap_where_ctypes_is_loaded():
    """With ctypes loaded (NVML's binding loads it) on Linux's glibc the heap is trimmed."""
    import ctypes  # noqa: F401  (loaded, as NVML's binding has it)
    import platform

    from lltui.app.heap import release_free_heap

    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"
    assert release_free_heap() is glibc


def test_release_free_heap_collects_what_the_start_froze():
    """The start freezes what it built, dropped cycles too: the release thaws them once,
    collects them, and freezes again what still lives."""
    import ctypes  # noqa: F401
    import gc
    import platform
    import weakref

    from lltui.app.heap import release_free_heap

    glibc = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"

    class Node:
        pass

    dropped, kept = Node(), Node()
    dropped.me = dropped  # a cycle: only the collector frees it
    kept.me = kept
    dead = weakref.ref(dropped)
    gc.freeze()
    try:
        del dropped
        gc.collect()
        assert dead() is not None  # frozen: a collection passes it by
        assert release_free_heap() is glibc
        assert (dead() is None) is glibc  # without malloc_trim nothing is done
        assert gc.get_freeze_count() > 0  # what lives stays out of later collections
        assert kept.me is kept
    finally:
        gc.unfreeze()
