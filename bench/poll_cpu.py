"""Poll CPU of the monitor's NVML source against the other monitor's NVML layer (the one
bench/idle_cpu.py names), both on the FAKE pynvml (tests/support/fake_pynvml.py), at 8 to 64 GPUs.

    .venv/bin/python bench/poll_cpu.py [--ticks 120] [--gpus 8 16 32 64] [--peer-python PY]

Each side runs in its own process, one 1 s tick after another on a stepped clock (so every
TTL comes round at its own pace, without waiting in real time): lltui's ``NvmlSource.poll()``
(host facts left out), and the peer's per-tick device query, ``Device.as_snapshot()`` and
``Device.processes()`` for every GPU, as its panels take each refresh (its caches on the same
stepped clock). It prints the CPU time per tick per GPU,
the NVML calls per GPU per tick (the fake counts them) and the ratio (goal <= 0.3).

The peer's side is its API's full snapshot, not the exact set its TUI asks for each refresh:
it makes 29 calls per GPU per tick here, where its TUI makes about 9.3, so the ratio flatters
lltui; lltui's own figures, beside ``--before ROOT`` (another checkout, same run), are the
ones to compare across changes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from idle_cpu import nvitop_python  # noqa: E402

LLTUI_SIDE = """
import json, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from support import fake_pynvml as fp
n, ticks = int(sys.argv[2]), int(sys.argv[3])
gpus = fp.make_gpus(n, nvlinks=4)
for i, g in enumerate(gpus):
    g.compute_procs = [(40_000 + i, 1024 * fp.MIB)]
fake = fp.FakeNvml(gpus)
sys.modules["pynvml"] = fake.module
from lltui.core.monitor.models import HostSample
from lltui.sources.gpu.nvml import NvmlSource

class NoHost:
    def sample(self): return HostSample()
    def enrich(self, processes): return tuple(processes)

class Clock:
    now = 1000.0
    def __call__(self): return self.now

clock = Clock()
src = NvmlSource(clock=clock, host=NoHost(), env={})
src.open()
for _ in range(60):  # warm: every TTL once
    clock.now += 1.0
    src.poll()
fake.reset_counts()
t0 = time.process_time()
for _ in range(ticks):
    clock.now += 1.0
    src.poll()
cpu = time.process_time() - t0
print(json.dumps({"cpu": cpu, "calls": sum(fake.count(i) for i in range(n))}))
"""

PEER_SIDE = """
import json, sys, time
sys.path[:0] = [sys.argv[1] + "/tests"]
from support import fake_pynvml as fp
n, ticks = int(sys.argv[2]), int(sys.argv[3])
gpus = fp.make_gpus(n, nvlinks=4)
for i, g in enumerate(gpus):
    g.compute_procs = [(40_000 + i, 1024 * fp.MIB)]
fake = fp.FakeNvml(gpus)
sys.modules["pynvml"] = fp.add_peer_symbols(fake)
# its caches expire on time.monotonic, bound when it is imported: a clock stepped per tick
now = [time.monotonic()]
time.monotonic = lambda: now[0]
import nvitop
devices = nvitop.Device.all()
for _ in range(60):  # warm: every cache once
    now[0] += 1.0
    for d in devices:
        d.as_snapshot()
        d.processes()
fake.reset_counts()
t0 = time.process_time()
for _ in range(ticks):
    now[0] += 1.0
    for d in devices:
        d.as_snapshot()
        d.processes()
cpu = time.process_time() - t0
print(json.dumps({"cpu": cpu, "calls": sum(fake.count(i) for i in range(n))}))
"""


def run_side(python: str, code: str, n: int, ticks: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [python, "-c", code, str(ROOT), str(n), str(ticks)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{python}: {out.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=120)
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--peer-python", default=None)
    parser.add_argument("--before", metavar="ROOT", default=None, help="another checkout too")
    args = parser.parse_args()
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lltui-bench"
    cache.mkdir(parents=True, exist_ok=True)
    peer = args.peer_python or nvitop_python(cache)
    print(f"{args.ticks} ticks of 1 s (stepped clock), fake NVML, 4 NVLink links per GPU")
    print(f"{'GPUs':>4} {'side':<7} {'us/tick/GPU':>12} {'calls/tick/GPU':>15} {'ratio':>6}")
    for n in args.gpus:
        peer_got = run_side(peer, PEER_SIDE, n, args.ticks)
        sides = [("lltui", LLTUI_SIDE, sys.executable, str(ROOT))]
        if args.before:
            sides.append(("before", LLTUI_SIDE, sys.executable, str(Path(args.before).resolve())))
        peer_us = peer_got["cpu"] / args.ticks / n * 1e6
        print(f"{n:>4} {'peer':<7} {peer_us:>12.1f} {peer_got['calls'] / args.ticks / n:>15.1f}")
        for name, code, python, root in sides:
            got = run_side(python, code.replace("sys.argv[1]", repr(root), 1), n, args.ticks)
            us = got["cpu"] / args.ticks / n * 1e6
            calls = got["calls"] / args.ticks / n
            print(f"{n:>4} {name:<7} {us:>12.1f} {calls:>15.1f} {us / peer_us:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
