"""How long `lltui fit --best decode` (the planner) takes on a simulated 8-GPU rig, against
`lltui fit` of the one command given and `lltui fit --best speed` (the memory-first search of
the flags given) in the same run.

Models are real-size shapes whose tensor data is a hole in a sparse file: a Llama-70B dense
(Q4_0) and a Qwen3-235B-A22B MoE (Q4_0). Rigs: sim:8xh100-sxm (everything fits: the search
is over splits, GPU sets and -ub) and 4x 24 GiB (the MoE needs host experts: a bisection over
--n-cpu-moe per layout). Each command runs as a user runs it (a fresh process, header read
included), the median of several runs; the planner's own time (without the imports and the
header) is printed from inside a fresh process too. Ratios below 1 mean the planner is
faster than the baseline.

    .venv/bin/python bench/planner_speed.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

from support import gguf_factory as gf  # noqa: E402

MODELS = {
    "llama-70b": gf.llama_spec(
        n_embd=8192, n_ff=28672, n_head=64, n_head_kv=8, head_dim=128, n_layer=80, n_vocab=128256
    ),
    "qwen3moe-235b-a22b": gf.qwen3moe_235b_a22b_spec(),
}
RIGS = {"8xh100": "sim:8xh100-sxm", "4x24GiB": "24GiB,24GiB,24GiB,24GiB"}
FLAGS = ["-c", "8192"]
ENV: dict[str, str] = {}

# run in a fresh process: the planner alone, timed inside (caches start empty)
_INSIDE = """
import json, sys, time
from lltui.core.fit.planner import plan_best
from lltui.core.gguf.reader import read_gguf
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.memory.results import FitOptions
from lltui.core.units import GIB
from lltui.services.devices import resolve_devices
model = read_gguf(sys.argv[1])
devs, _ = resolve_devices(sys.argv[2], ())
t0 = time.perf_counter()
plan = plan_best(model, parse_llama_args(sys.argv[3:]), devs, FitOptions(host_free_bytes=256 * GIB))
print(json.dumps({"s": time.perf_counter() - t0, "estimates": plan.estimates,
                  "options": len(plan.options), "first": " ".join(plan.best.flags)}))
"""


def wall(argv: list[str], runs: int) -> float:
    """Median wall time of a fresh process, seconds (-1: it failed)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, check=False, timeout=600, env=ENV)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
            print(f"  (exit {done.returncode}: {tail[-1] if tail else ''})")
            return -1.0
    return statistics.median(times)


def inside(model: str, rig: str, runs: int) -> dict[str, object]:
    """The planner's own time, the median of fresh processes, with what it found."""
    found = []
    for _ in range(runs):
        argv = [sys.executable, "-c", _INSIDE, model, rig, *FLAGS]
        done = subprocess.run(argv, capture_output=True, check=True, timeout=600, env=ENV)
        found.append(json.loads(done.stdout))
    found.sort(key=lambda d: float(d["s"]))  # type: ignore[arg-type]
    return found[len(found) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    py = [sys.executable, "-m", "lltui"]
    with tempfile.TemporaryDirectory(prefix="lltui-planner-bench-") as tmp:
        ENV.update(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
        ENV["PYTHONPATH"] = str(HERE.parent)
        for name, spec in MODELS.items():
            model = str(gf.write_sparse(Path(tmp) / f"{name}-Q4_0.gguf", spec, "Q4_0"))
            for rig_name, rig in RIGS.items():
                base = [*py, "fit", model, *FLAGS, "--gpus", rig, "--json"]
                subprocess.run(base, capture_output=True, check=False, timeout=600, env=ENV)
                fit = wall(base, args.runs)
                speed = wall([*base, "--best", "speed"], args.runs)
                plan = wall([*base, "--best", "decode"], args.runs)
                own = inside(model, rig, args.runs)
                print(f"\n{name} on {rig_name}")
                print(f"  fit                 {fit * 1000:7.0f} ms")
                print(f"  fit --best speed    {speed * 1000:7.0f} ms")
                print(
                    f"  fit --best decode   {plan * 1000:7.0f} ms   ratio {plan / fit:.2f} of fit,"
                    f" {plan / speed:.2f} of --best speed"
                )
                print(
                    f"  the planner alone   {float(own['s']) * 1000:7.0f} ms   "  # type: ignore[arg-type]
                    f"({own['estimates']} estimates, {own['options']} options; first: "
                    f"{own['first']})"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
