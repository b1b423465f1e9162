"""Idle CPU of the monitor: lltui's against nvitop's, both on the FAKE pynvml
(tests/support/fake_pynvml.py) with 8 and 16 GPUs, refreshing every second, each in a
pseudo-terminal of the same size.

    .venv/bin/python bench/idle_cpu.py [--seconds 20] [--warmup 4] [--gpus 8 16] [--size 120x40]
                                       [--rounds N] [--before ROOT] [--llama-server]

nvitop is the baseline: installed with pip into a virtual environment of this bench (under
$XDG_CACHE_HOME/lltui-bench, or --nvitop-python PYTHON to use one at hand). Each tool runs
alone, one after the other, in a new pty; after a warm-up the CPU time of its process (user +
system, all threads, from /proc/PID/stat) is read over --seconds and printed as % of one
core, with lltui/nvitop as the ratio (goal <= 0.5). The bytes each writes to its terminal per
second are printed too: over SSH they are the other half of an idle monitor's cost.

A third line measures Textual's own floor, no NVML at all: a bare Textual app whose screen
shows one line per GPU and rewrites a number on each line every second. Whatever a monitor
built on Textual does beyond that is its own cost; below that it cannot go.

Both see the same fake driver: nvitop's NVML layer takes it as a binding without ctypes
internals (its startup warns the binding is "corrupted"; it then calls the functions as is),
and answers for the few per-tick queries the fake lacks come from add_peer_symbols.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
sys.path.insert(0, str(TESTS))
from support.pty_helpers import spawn_in_pty  # noqa: E402  (tests/ holds the bench's helpers)

from lltui.sources.gpu.procfs import parse_stat  # noqa: E402

# runs a module with the fake as `pynvml` (the first argument names the module)
# the GPUs' readings move a little every second, as an idle GPU's do (power, temperature,
# clocks), so neither tool can skip a redraw because nothing changed
LAUNCHER = """
import os, runpy, sys, time
sys.path.insert(0, os.environ["FAKE_NVML_TESTS"])
from support import fake_pynvml as fp
fake = fp.FakeNvml(fp.make_gpus(int(os.environ["FAKE_NVML_GPUS"])))
sys.modules["pynvml"] = fp.add_peer_symbols(fake)

# a GPU whose readings step every second, worked out when read: a thread of the bench's
# own moving them would be counted as the monitor's CPU
START = time.monotonic()

def wandering(reading):
    def get(gpu):
        tick = int(time.monotonic() - START)
        return reading((tick + gpu.wander_offset) % 4, tick)
    return property(get)

class Wandering(fp.FakeGpu):
    power_mw = wandering(lambda step, tick: 60_000 + 1_500 * step)
    temp_c = wandering(lambda step, tick: 40 + step // 2)
    util_gpu = wandering(lambda step, tick: step)
    sm_clock = wandering(lambda step, tick: 1_400 + 15 * step)
    energy_mj = wandering(lambda step, tick: 1_000_000 + 60_000 * tick)

for i, g in enumerate(fake.gpus):
    g.wander_offset = i
    g.__class__ = Wandering
if os.environ.get("FAKE_NVML_SERVER_PID"):  # a real llama-server, held on GPU 0 of the fake
    fake.gpus[0].compute_procs = [(int(os.environ["FAKE_NVML_SERVER_PID"]), 300 << 20)]
module = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

# Textual's floor: one line per GPU, a number on each rewritten every second, nothing else
FLOOR_APP = """
import sys
from textual.app import App
from textual.widgets import Static

class Floor(App):
    def compose(self):
        for i in range(int(sys.argv[1])):
            yield Static(f"GPU{i}")

    def on_mount(self):
        self.tick = 0
        self.set_interval(1.0, self.step)

    def step(self):
        self.tick += 1
        for i, line in enumerate(self.query(Static)):
            line.update(f"GPU{i}  util {(self.tick + i) % 4}%  power {60 + (self.tick + i) % 4} W",
                        layout=False)

Floor().run()
"""


@dataclass(frozen=True)
class Measured:
    cpu_pct: float  # of one core
    bytes_per_s: float  # written to the terminal
    rss_mib: float  # resident memory at the end of the measurement
    alive: bool  # still running at the end (a crash would read as idle)


def median_of(runs: list[Measured]) -> Measured:
    """Each figure's median over the runs of one tool (a run that exited counts as not
    measured)."""
    alive = [m for m in runs if m.alive]
    if not alive:
        return runs[-1]
    return Measured(
        statistics.median(m.cpu_pct for m in alive),
        statistics.median(m.bytes_per_s for m in alive),
        statistics.median(m.rss_mib for m in alive),
        len(alive) == len(runs),
    )


def nvitop_python(cache: Path) -> str:
    """A Python with nvitop installed, in a virtual environment this bench owns."""
    venv = cache / "nvitop-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        print(f"installing nvitop into {venv} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "nvitop"],
            check=True,
        )
    return str(python)


def cpu_seconds(pid: int) -> float:
    """CPU seconds of a process, all its threads: the scheduler's own count in nanoseconds
    (``/proc/PID/task/*/schedstat``) where the kernel keeps it. ``/proc/PID/stat``'s user +
    system time comes in 10 ms ticks, a sixth of a bare Textual app's idle second, and is
    sampled at those ticks; it is the fallback. (A thread that ended is not counted: the
    monitors measured here keep theirs.)"""
    try:
        total = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat", encoding="ascii") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        pass
    with open(f"/proc/{pid}/stat", "rb") as f:
        return parse_stat(f.read()).cpu_ticks / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident memory of a process (VmRSS), MiB."""
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def drain(fd: int, until: float) -> int:
    """Read what the child writes to its terminal until ``until``; how many bytes."""
    total = 0
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return total
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed its end
                return total
            if not chunk:
                return total
            total += len(chunk)


def run_in_pty(
    argv: list[str], env: dict[str, str], size: tuple[int, int], warmup: float, seconds: float
) -> Measured:
    child, master = spawn_in_pty(argv, env, size)
    try:
        drain(master, time.monotonic() + warmup)
        start_cpu, start = cpu_seconds(child.pid), time.monotonic()
        written = drain(master, start + seconds)
        alive = child.poll() is None
        cpu = cpu_seconds(child.pid) - start_cpu if alive else float("nan")
        rss = rss_mib(child.pid) if alive else float("nan")
        elapsed = time.monotonic() - start
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGTERM)
            try:
                child.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
        os.close(master)
    return Measured(100.0 * cpu / elapsed, written / elapsed, rss, alive)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=4.0)
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--size", default="120x40")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the tools in turn this many times and print each one's median (a shared "
        "machine's CPU time varies by a third between runs of the same code)",
    )
    parser.add_argument("--nvitop-python", default=None)
    parser.add_argument(
        "--llama-server",
        action="store_true",
        help="run a real llama-server (the pinned CPU build, a tiny generated model, its log "
        "a file) that the fake driver says holds memory on GPU 0: lltui finds it and holds "
        "it against its plan each tick",
    )
    parser.add_argument(
        "--before",
        metavar="ROOT",
        default=None,
        help="also run the lltui of another checkout (say, the commit before a change), "
        "side by side in the same run, as 'before'",
    )
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.lower().split("x"))
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "lltui-bench"
    cache.mkdir(parents=True, exist_ok=True)
    launcher = cache / "fake_nvml_launcher.py"
    launcher.write_text(LAUNCHER, encoding="utf-8")
    floor = cache / "textual_floor.py"
    floor.write_text(FLOOR_APP, encoding="utf-8")
    peer_python = args.nvitop_python or nvitop_python(cache)

    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    env["FAKE_NVML_TESTS"] = str(TESTS)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["XDG_CONFIG_HOME"] = str(cache / "config")  # no user config or theme
    tools = {
        "lltui": [sys.executable, str(launcher), "lltui", "--source", "nvml", "--interval", "1"],
        "nvitop": [peer_python, str(launcher), "nvitop", "--interval", "1"],
        "floor": [sys.executable, str(floor)],  # the GPU count is added below
    }
    if args.before:
        before = [sys.executable, str(launcher), "lltui", "--source", "nvml", "--interval", "1"]
        tools["before"] = before
    roots = {"before": str(Path(args.before).resolve())} if args.before else {}
    print(
        f"{args.seconds:.0f} s each after {args.warmup:.0f} s warm-up, {cols}x{rows}, 1 s interval"
        + (f", medians of {args.rounds} rounds run in turn" if args.rounds > 1 else "")
    )
    with contextlib.ExitStack() as stack:
        if args.llama_server:
            pid = stack.enter_context(llama_server(cache))
            env["FAKE_NVML_SERVER_PID"] = str(pid)
            print(f"a llama-server (pid {pid}) on GPU 0 of the fake driver, watched")
        measure(args, tools, roots, env, (cols, rows))
    return 0


@contextlib.contextmanager
def llama_server(cache: Path) -> Iterator[int]:
    """The pinned llama-server on a tiny generated model, its log a file; its pid."""
    from support.llama_fixture import free_port, stop_group, write_tiny_llama

    from lltui.sources.llama import build_cache

    built = build_cache.installed(cuda=False)
    if built is None:
        raise SystemExit("no llama.cpp build: run `lltui llama install` first")
    model = write_tiny_llama(cache / "idle-tiny-llama.gguf")
    port = free_port()
    argv = [str(built.binaries["llama-server"]), "-m", str(model), "--port", str(port)]
    with (cache / "idle-llama-server.log").open("wb") as log:
        proc = subprocess.Popen(
            [*argv, "-t", "1", "-c", "512"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while b"listening on http" not in (cache / "idle-llama-server.log").read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the llama-server did not start: see its log in " + str(cache))
            time.sleep(0.1)
        yield proc.pid
    finally:
        stop_group(proc)


def measure(
    args: argparse.Namespace,
    tools: dict[str, list[str]],
    roots: dict[str, str],
    env: dict[str, str],
    size: tuple[int, int],
) -> None:
    """Each tool's idle cost per GPU count, with the ratios."""
    cols, rows = size
    for n in args.gpus:
        env["FAKE_NVML_GPUS"] = str(n)
        runs: dict[str, list[Measured]] = {name: [] for name in tools}
        for _round in range(max(1, args.rounds)):
            for name, argv in tools.items():
                tool_env = dict(env)
                if name in roots:  # the other checkout's lltui first on the path
                    tool_env["PYTHONPATH"] = os.pathsep.join([roots[name], env["PYTHONPATH"]])
                runs[name].append(
                    run_in_pty(
                        [*argv, str(n)] if name == "floor" else argv,
                        tool_env,
                        (cols, rows),
                        args.warmup,
                        args.seconds,
                    )
                )
        got = {name: median_of(measured) for name, measured in runs.items()}
        for name, m in got.items():
            state = "" if m.alive else "  (EXITED: not measured)"
            print(
                f"{n:>2} GPUs  {name:<6} CPU {m.cpu_pct:5.2f}% of a core,"
                f" {m.bytes_per_s / 1024:6.1f} KiB/s to the terminal,"
                f" RSS {m.rss_mib:5.1f} MiB{state}"
            )
        ratio = got["lltui"].cpu_pct / got["nvitop"].cpu_pct
        floor_ratio = got["floor"].cpu_pct / got["nvitop"].cpu_pct
        print(f"{n:>2} GPUs  ratio lltui/nvitop CPU {ratio:.2f} (goal <= 0.5)")
        print(f"{n:>2} GPUs  ratio Textual floor/nvitop CPU {floor_ratio:.2f}")
        base = got["floor"]
        for name in [k for k in ("before", "lltui") if k in got]:
            m = got[name]
            print(
                f"{n:>2} GPUs  {name}/floor: CPU {m.cpu_pct / base.cpu_pct:.2f} (goal <= 1.3),"
                f" terminal bytes {m.bytes_per_s / max(base.bytes_per_s, 1):.2f} (goal <= 2),"
                f" RSS +{m.rss_mib - base.rss_mib:.1f} MiB (goal <= 8)"
            )


if __name__ == "__main__":
    sys.exit(main())
