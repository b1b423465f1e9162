"""How long `lltui fit` and `lltui quant` take, against llama.cpp's own tools in the same run.

Models are real-size shapes (Llama-8B dense, Qwen3-30B-A3B MoE, all layers) in F16 whose
tensor data is a hole in a sparse file. Each command runs as a user runs it (a fresh
process, header read included), the median of several runs:

- `lltui fit MODEL` against `llama-fit-params` (llama.cpp's own estimate) with the same flags;
- `lltui fit MODEL --best context` (the ranked search) against the same `llama-fit-params`
  run, which is llama.cpp's own search for settings that fit (`--fit`);
- `lltui quant MODEL` (every type it lists, each placed on the devices) against
  `llama-quantize --dry-run` for the same types, one process per type (llama-quantize makes
  one type a run), and against a single `--dry-run` (Q4_K_M);
- with `--rpc N`: `lltui fit` of a Qwen3-235B-A22B shape (Q4_0) split over N loopback
  rpc-servers against `llama-fit-params` given the same servers.

Ratios below 1 mean lltui is faster. Binaries come from the cached llama.cpp build
(`lltui llama install`); without one the llama.cpp columns are skipped.

    .venv/bin/python bench/fit_speed.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

from support import gguf_factory as gf  # noqa: E402

from lltui.core.gguf.reader import read_gguf  # noqa: E402
from lltui.core.gguf.types import FTYPE_NAMES  # noqa: E402
from lltui.core.quant.sizes import quant_source, relevant_ftypes  # noqa: E402
from lltui.sources.llama import build as llama_build  # noqa: E402

MODELS = {
    "llama-8b": gf.llama_8b_spec(),
    "qwen3moe-30b-a3b": gf.qwen3moe_30b_a3b_spec(),
}
FLAGS = ["-c", "8192", "-np", "1"]


# lltui runs as an installed package runs: its bytecode compiled once and cached (a shell with
# PYTHONDONTWRITEBYTECODE set would otherwise compile every module in every run)
ENV: dict[str, str] = {}
CPU_TIMES: list[float] = []  # CPU seconds (user + sys) of each process wall() ran, in order


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def wall(argv: list[str], runs: int, check: bool = True, cwd: str | None = None) -> float:
    """Median wall time of a fresh process, seconds; -1 when it fails and ``check``.
    Each run's CPU time goes to CPU_TIMES (less moved by other load on the machine)."""
    times = []
    for _ in range(runs):
        c0 = _children_cpu()
        t0 = time.perf_counter()
        done = subprocess.run(
            argv, capture_output=True, check=False, timeout=600, cwd=cwd, env=ENV or None
        )
        times.append(time.perf_counter() - t0)
        CPU_TIMES.append(_children_cpu() - c0)
        if check and done.returncode != 0:
            tail = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
            print(f"  ({Path(argv[0]).name} exit {done.returncode}: {tail[-1] if tail else ''})")
            return -1.0
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rpc", type=int, default=0, help="also fit a 235B shape over N rpc-servers")
    ap.add_argument(
        "--baseline-root",
        help="another lltui checkout whose `lltui quant` runs in the same rounds (e.g. main)",
    )
    args = ap.parse_args()
    bins = llama_build.installed()
    exe = {} if bins is None else {k: str(v) for k, v in bins.binaries.items()}
    py = [sys.executable, "-m", "lltui"]
    # python -m lltui imports lltui from the working directory: this checkout's, even where
    # the interpreter has another one installed (an editable install of another worktree)
    here = str(HERE.parent)
    if bins is None:
        print("no cached llama.cpp build (lltui llama install): llama.cpp columns skipped")
    with tempfile.TemporaryDirectory(prefix="lltui-speed-bench-") as tmp:
        ENV.update(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
        ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        for name, spec in MODELS.items():
            path = gf.write_sparse(Path(tmp) / f"{name}-F16.gguf", replace(spec), "F16")
            model = str(path)
            print(f"\n{name} (F16, {path.stat().st_size / 2**30:.1f} GiB as a sparse file)")
            roots = [here, *([args.baseline_root] if args.baseline_root else [])]
            for cmd, root in [(c, r) for c in ("fit", "quant") for r in roots]:
                # untimed: compiles and caches the bytecode
                warm = [*py, cmd, model, *FLAGS, "--gpus", "4090,4090"]
                subprocess.run(
                    warm, capture_output=True, check=False, timeout=600, env=ENV, cwd=root
                )
            fit = wall([*py, "fit", model, *FLAGS, "--gpus", "4090,4090"], args.runs, cwd=here)
            line = f"  fit    lltui {fit * 1000:7.0f} ms"
            lfp = 0.0
            if "llama-fit-params" in exe:
                lfp = wall([exe["llama-fit-params"], "-m", model, *FLAGS], args.runs)
                if lfp > 0:
                    line += f"   llama-fit-params {lfp * 1000:7.0f} ms   ratio {fit / lfp:.2f}"
            print(line)
            # the search for the best command line: llama-fit-params is llama.cpp's own search
            # (--fit), so it is the baseline here too
            best = wall(
                [*py, "fit", model, *FLAGS, "--gpus", "4090,4090", "--best", "context"],
                args.runs,
                check=False,
                cwd=here,
            )
            line = f"  --best lltui {best * 1000:7.0f} ms"
            if "llama-fit-params" in exe and lfp > 0:
                line += f"   llama-fit-params {lfp * 1000:7.0f} ms   ratio {best / lfp:.2f}"
            print(line)
            ftypes, _skipped = relevant_ftypes(quant_source(read_gguf(model)))
            quant_argv = [*py, "quant", model, *FLAGS, "--gpus", "4090,4090"]
            if "llama-quantize" not in exe:
                quant = wall(quant_argv, args.runs, cwd=here)
                print(f"  quant  lltui {quant * 1000:7.0f} ms ({len(ftypes)} types)")
                continue
            # rounds of (lltui quant, llama-quantize --dry-run of every listed type, one
            # Q4_K_M dry run) back to back, so load on the machine hits both alike
            ours, every, one = [], [], []
            ours_cpu, every_cpu, base_cpu = [], [], []
            for _ in range(args.runs):
                ours.append(wall(quant_argv, 1, cwd=here))
                ours_cpu.append(CPU_TIMES[-1])
                if args.baseline_root:  # python -m lltui imports from the working directory
                    wall(quant_argv, 1, cwd=args.baseline_root)
                    base_cpu.append(CPU_TIMES[-1])
                total = total_cpu = 0.0
                for ft in ftypes:
                    argv = [exe["llama-quantize"], "--dry-run", model, FTYPE_NAMES[ft]]
                    total += wall(argv, 1, check=False)  # IQ1/IQ2 refuse: no imatrix
                    total_cpu += CPU_TIMES[-1]
                every.append(total)
                every_cpu.append(total_cpu)
                one.append(wall([exe["llama-quantize"], "--dry-run", model, "Q4_K_M"], 1))
            ratios = sorted(o / e for o, e in zip(ours, every, strict=True))
            print(
                f"  quant  lltui {statistics.median(ours) * 1000:7.0f} ms ({len(ftypes)} types)"
                f"   llama-quantize --dry-run: every type "
                f"{statistics.median(every) * 1000:7.0f} ms, ratio {statistics.median(ratios):.3f}"
                f" (rounds {min(ratios):.3f}-{max(ratios):.3f}); one type "
                f"{statistics.median(one) * 1000:.0f} ms, ratio "
                f"{statistics.median(ours) / statistics.median(one):.2f}"
            )
            cpu_ratio = statistics.median(ours_cpu) / statistics.median(every_cpu)
            print(
                f"         CPU time: lltui {statistics.median(ours_cpu) * 1000:.0f} ms, "
                f"llama-quantize every type {statistics.median(every_cpu) * 1000:.0f} ms, "
                f"ratio {cpu_ratio:.3f}"
            )
            if base_cpu:
                b = statistics.median(base_cpu)
                print(
                    f"         CPU time of {args.baseline_root}'s lltui quant {b * 1000:.0f} ms: "
                    f"this one takes {statistics.median(ours_cpu) / b:.2f}x"
                )
        if args.rpc and "llama-fit-params" in exe and bins is not None:
            rpc_split(bins, exe, py, here, Path(tmp), args.rpc, args.runs)
    return 0


def rpc_split(
    bins, exe: dict[str, str], py: list[str], here: str, tmp: Path, n: int, runs: int
) -> None:
    """lltui fit against llama-fit-params, both given the same N loopback rpc-servers."""
    from support.llama_fixture import rpc_servers

    path = gf.write_sparse(tmp / "qwen3moe-235b.gguf", gf.qwen3moe_235b_a22b_spec(), "Q4_0")
    print(
        f"\nqwen3moe-235b-a22b (Q4_0, {path.stat().st_size / 2**30:.0f} GiB sparse) "
        f"over {n} rpc-servers"
    )
    with rpc_servers(bins, n, tmp) as servers:
        rpc = ",".join(f"127.0.0.1:{s.port}" for s in servers)
        flags = [*FLAGS, "--rpc", rpc]
        warm = [*py, "fit", str(path), *flags]
        subprocess.run(warm, capture_output=True, check=False, timeout=600, env=ENV, cwd=here)
        fit = wall([*py, "fit", str(path), *flags], runs, check=False, cwd=here)
        lfp = wall([exe["llama-fit-params"], "-m", str(path), *flags], runs, check=False)
        line = f"  fit    lltui {fit * 1000:7.0f} ms   llama-fit-params {lfp * 1000:7.0f} ms"
        print(line + (f"   ratio {fit / lfp:.2f}" if lfp > 0 else ""))


if __name__ == "__main__":
    sys.exit(main())
