"""Time to first frame: `lltui --screenshot` against a bare Textual app that draws one screen
and saves it, alternated in one run so machine noise hits both alike. Prints the ratios of
wall time and of CPU time (user + system of the child; steadier on a shared machine).

    .venv/bin/python bench/startup.py [--rounds N]

lltui is imported from the checkout this file is in (its root put first on PYTHONPATH), from
any working directory: found on sys.path as an installed wheel is, not through the import
hook of an editable install elsewhere. The first line printed says which lltui ran.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BARE_APP = """
import asyncio, sys
from textual.app import App
from textual.widgets import Static

class Bare(App):
    def compose(self):
        yield Static("hello")

async def main():
    app = Bare()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        app.save_screenshot(filename="bare.svg", path=sys.argv[1])

asyncio.run(main())
"""


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one run of ``argv``."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env)
    _pid, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise subprocess.CalledProcessError(child.returncode, argv)
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # bytecode cached for both, as an installed lltui has it, in a folder of this run (a
        # shell with PYTHONDONTWRITEBYTECODE set would compile lltui from source every time)
        env = dict(os.environ, XDG_CONFIG_HOME=tmp, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
        where = [sys.executable, "-c", "import lltui; print(lltui.__file__)"]
        found = subprocess.run(where, env=env, capture_output=True, text=True, check=True)
        print("lltui:", found.stdout.strip())
        bare_script = os.path.join(tmp, "bare.py")
        with open(bare_script, "w") as f:
            f.write(BARE_APP)
        ours_argv = [
            sys.executable, "-m", "lltui", "--source", "sim:kaggle-2xt4",
            "--screenshot", os.path.join(tmp, "ours.svg"), "--size", "120x40",
        ]  # fmt: skip
        bare_argv = [sys.executable, bare_script, tmp]
        timed(ours_argv, env)  # warm the page cache and bytecode for both
        timed(bare_argv, env)
        ours, bare = [], []
        for _ in range(args.rounds):
            ours.append(timed(ours_argv, env))
            bare.append(timed(bare_argv, env))
    for n, what in ((0, "wall"), (1, "CPU")):
        o = statistics.median(t[n] for t in ours)
        b = statistics.median(t[n] for t in bare)
        print(f"{what}: bare textual app {b * 1000:.0f} ms, lltui --screenshot {o * 1000:.0f} ms"
              f" (medians of {args.rounds}); ratio {o / b:.2f} (target <= 1.5)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
