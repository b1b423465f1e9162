"""Time to first frame: `lltui --screenshot` against a bare Textual app that draws one screen
and saves it, alternated in one run so machine noise hits both alike. Prints the ratio.

    .venv/bin/python bench/startup.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

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


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_CONFIG_HOME=tmp)
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
    o, b = statistics.median(ours), statistics.median(bare)
    print(f"bare textual app: {b * 1000:.0f} ms (median of {args.rounds})")
    print(f"lltui --screenshot: {o * 1000:.0f} ms (median of {args.rounds})")
    print(f"ratio: {o / b:.2f} (target <= 2.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
