"""The speed model's CPU prediction for this machine against the pinned llama-bench, measured
here on generated models (random weights, quantized by the pinned llama-quantize): a dense
0.7B llama-shaped model in F16, Q8_0, Q4_0 and Q4_K_M, and a small MoE (qwen3moe). Prints
predicted and measured tokens/s and their ratio per test; ``--save`` writes the measurements
to tests/fixtures/cpu_bench_measured.json (what bench/speed_calibrate.py fits the host
constants to). ``--before`` also prints what the model lltui had before the host was costed
(60 GB/s assumed, 1 TFLOPS): the issue's baseline. Run from the repository root:

    PYTHONPATH=$PWD:tests python bench/cpu_speed.py [--quick] [--save] [--before]

Takes 10-20 minutes on 2 cores (``--quick``: Q4_0 only, a few minutes). Not a test: it
times real runs on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tests"), str(HERE.parent)]

from support import gguf_factory as gf  # noqa: E402

from lltui.core.cmdline.flags import parse_llama_args  # noqa: E402
from lltui.core.fit.estimate import FitOptions, estimate  # noqa: E402
from lltui.core.gguf.reader import read_gguf  # noqa: E402
from lltui.core.memory.devices import parse_gpus_spec  # noqa: E402
from lltui.core.speed.model import estimate_speed  # noqa: E402
from lltui.sources.gpu.cpu import read_host  # noqa: E402
from lltui.sources.llama import build as llama_build  # noqa: E402

WORK = Path("/tmp/lltui-cpu-bench")
FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "cpu_bench_measured.json"
DENSE = gf.llama_spec(
    n_layer=18, n_embd=1536, n_ff=5632, n_head=12, n_head_kv=4, head_dim=128, n_vocab=32000
)
MOE = gf.qwen3moe_spec(
    n_layer=12,
    n_embd=1024,
    n_ff=2048,
    n_head=16,
    n_head_kv=4,
    head_dim=64,
    n_expert=32,
    n_expert_used=4,
    n_ff_exp=512,
    n_vocab=32000,
)
# (model, quant, llama-bench flags): one test per run, so that its CPU time is its own
PP, TG = ("-p", "512", "-n", "0"), ("-p", "0", "-n", "64")
TESTS: list[tuple[str, str, tuple[str, ...]]] = [
    ("dense", "Q4_0", TG),
    ("dense", "Q4_0", PP),
    ("dense", "Q8_0", TG),
    ("dense", "Q8_0", PP),
    ("dense", "F16", TG),
    ("dense", "F16", PP),
    ("dense", "Q4_K_M", TG),
    ("dense", "Q4_K_M", PP),
    ("dense", "Q4_0", ("-p", "256", "-n", "0", "-ub", "64")),
    ("dense", "Q4_0", ("-p", "0", "-n", "64", "-d", "2048")),
    # the CPU's attention at depth: a token's (cell by cell) and a ubatch's (tiled), two
    # head sizes (the dense model's 128, the MoE's 64)
    ("dense", "Q4_0", ("-p", "0", "-n", "64", "-d", "1024")),
    ("dense", "Q4_0", ("-p", "0", "-n", "64", "-d", "4096")),
    ("moe", "Q4_0", ("-p", "0", "-n", "64", "-d", "2048")),
    ("moe", "Q4_0", ("-p", "0", "-n", "64", "-d", "4096")),
    ("dense", "Q4_0", ("-p", "512", "-n", "0", "-d", "2048")),
    ("moe", "Q4_0", ("-p", "512", "-n", "0", "-d", "2048")),
    # a q8_0 cache: ggml tiles only F16/F32 ones, so a ubatch visits each query's cells
    ("dense", "Q4_0", (*PP, "-d", "2048", "-fa", "1", "-ctk", "q8_0", "-ctv", "q8_0")),
    ("dense", "Q4_0", (*TG, "-d", "2048", "-fa", "1", "-ctk", "q8_0", "-ctv", "q8_0")),
    ("moe", "Q4_0", TG),
    ("moe", "Q4_0", PP),
    ("moe", "Q8_0", TG),
]


def models(bins: llama_build.BuildResult, quants: set[tuple[str, str]]) -> dict[tuple, Path]:
    WORK.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, spec in (("dense", DENSE), ("moe", MOE)):
        base = WORK / f"{name}-F16.gguf"
        if not base.exists() and any(n == name for n, _q in quants):
            print(f"writing {base} ...", file=sys.stderr, flush=True)
            gf.write_model(base, spec, "F16", seed=1)
        for n, q in quants:
            if n != name:
                continue
            path = base if q == "F16" else WORK / f"{name}-{q}.gguf"
            if not path.exists():
                subprocess.run(
                    [str(bins.binaries["llama-quantize"]), str(base), str(path), q],
                    check=True,
                    capture_output=True,
                )
            out[(n, q)] = path
    return out


def wait_quiet(limit: float, max_wait_s: float) -> float:
    """Wait (up to max_wait_s) until the 1-minute load is below ``limit``; the load then."""
    import os

    waited = 0.0
    while os.getloadavg()[0] >= limit and waited < max_wait_s:
        time.sleep(10)
        waited += 10
    return os.getloadavg()[0]


def _cpu_s() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_bench(bins, path: Path, flags: tuple[str, ...], threads: int, reps: int) -> tuple:
    """One llama-bench process: its rows and the CPU seconds it took."""
    argv = [str(bins.binaries["llama-bench"]), "-m", str(path), "-t", str(threads)]
    argv += ["-r", str(reps), "-o", "json", *flags]
    before = _cpu_s()
    proc = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout), _cpu_s() - before


def measure(bins, path: Path, flags: tuple[str, ...], threads: int) -> list[dict]:
    """Each test's rows, with ``cpu_ts``: tokens over the CPU time the test itself took
    (a run of 3 repetitions less a run of 1: loading and warm-up cancel out). With one
    thread the CPU time is the time the work takes, whatever else runs on a shared
    machine; the wall-clock ``avg_ts`` is kept beside it."""
    _rows1, cpu1 = run_bench(bins, path, flags, threads, 1)
    rows3, cpu3 = run_bench(bins, path, flags, threads, 3)
    total_tokens = sum(r["n_prompt"] + r["n_gen"] for r in rows3)
    per_token_s = (cpu3 - cpu1) / (2 * total_tokens) if total_tokens else 0.0
    for r in rows3:
        r["cpu_ts"] = 1.0 / per_token_s / threads if per_token_s > 0 else 0.0
    return rows3


def predict(path: Path, row: dict, host) -> float:
    model = read_gguf(path)
    n_prompt, n_gen, depth = row["n_prompt"], row["n_gen"], row["n_depth"]
    args = ["-c", str(max(4096, n_prompt + n_gen + depth)), "-ub", str(row["n_ubatch"])]
    fa = {-1: "auto", 0: "off", 1: "on"}.get(row["flash_attn"], "auto")
    args += ["-b", str(row["n_batch"]), "-t", str(row["n_threads"]), "-fa", fa]
    args += ["-ctk", row.get("type_k") or "f16", "-ctv", row.get("type_v") or "f16"]
    res = estimate(
        model,
        parse_llama_args(args),
        parse_gpus_spec("cpu").devices,
        FitOptions(search=False, host=host),
    )
    if n_gen:
        return estimate_speed(model, res, depth=depth + n_gen // 2, host=host).decode_tps
    return estimate_speed(model, res, depth=depth, prompt_tokens=n_prompt, host=host).prefill_tps


def compare_saved(bins, host) -> int:
    """Today's prediction against the saved measurements (same models, same flags)."""
    saved = json.loads(FIXTURE.read_text())
    quants = {(p["model"], p["quant"]) for p in saved["points"]}
    paths = models(bins, quants)
    print(f"host: {host.describe()}")
    for p in saved["points"]:
        name, _, depth = p["test"].partition(" @ d")
        tokens = int(name[2:])
        decode = name.startswith("tg")
        row = {
            "n_prompt": 0 if decode else tokens,
            "n_gen": tokens if decode else 0,
            "n_depth": int(depth or 0),
            "n_ubatch": p["ub"],
            "n_batch": 2048,
            "n_threads": p["threads"],
            "flash_attn": p.get("fa", -1),
            "type_k": p.get("ctk") or "f16",
            "type_v": p.get("ctv") or "f16",
        }
        pred = predict(paths[(p["model"], p["quant"])], row, host)
        print(
            f"{p['model']:5s} {p['quant']:6s} ub{p['ub']:<4d} {p['test']:14s} -t {p['threads']} "
            f"predicted {pred:7.1f}  measured {p['tps']:7.1f} t/s  ratio {pred / p['tps']:5.2f}"
        )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--save", action="store_true")
    ap.add_argument(
        "--threads",
        type=int,
        default=0,
        help="llama-bench -t (default: the cores; 1 keeps a shared machine's noise out)",
    )
    ap.add_argument("--quiet-load", type=float, default=0.8, help="wait for a load below this")
    ap.add_argument(
        "--from-fixture",
        action="store_true",
        help="no run: today's prediction against the measurements saved with --save",
    )
    args = ap.parse_args()
    bins = llama_build.build(progress=lambda m: print(m, file=sys.stderr))
    host = read_host()
    if args.from_fixture:
        return compare_saved(bins, host)
    tests = [t for t in TESTS if not args.quick or (t[0], t[1]) == ("dense", "Q4_0")]
    paths = models(bins, {(m, q) for m, q, _f in tests})
    print(f"host: {host.describe()}")
    rows = []
    threads = args.threads or host.workers
    for name, quant, flags in tests:
        load = wait_quiet(args.quiet_load, 60.0)
        started = time.monotonic()
        for row in measure(bins, paths[(name, quant)], flags, threads):
            pred = predict(paths[(name, quant)], row, host)
            test = ("tg" if row["n_gen"] else "pp") + str(row["n_gen"] or row["n_prompt"])
            if row["n_depth"]:
                test += f" @ d{row['n_depth']}"
            got = row["cpu_ts"] if threads == 1 else row["avg_ts"]
            print(
                f"{name:5s} {quant:6s} ub{row['n_ubatch']:<4d} {test:14s} predicted "
                f"{pred:8.1f}  measured {got:8.1f} t/s (wall {row['avg_ts']:7.1f})  "
                f"ratio {pred / got:5.2f}",
                flush=True,
            )
            rows.append(
                {
                    "model": name,
                    "quant": quant,
                    "test": test,
                    "ub": row["n_ubatch"],
                    "threads": row["n_threads"],
                    "fa": row["flash_attn"],
                    "ctk": row.get("type_k", "f16"),
                    "ctv": row.get("type_v", "f16"),
                    "tps": round(got, 2),
                    "wall_tps": round(row["avg_ts"], 2),
                    "stddev": round(row["stddev_ts"], 2),
                    "load_before": round(load, 2),
                }
            )
        print(f"  ({time.monotonic() - started:.0f} s, load {load:.2f} before)", file=sys.stderr)
    if args.save:
        FIXTURE.write_text(
            json.dumps(
                {
                    "about": "llama-bench (the pinned CPU build) on this machine, random-weight "
                    "models written by bench/cpu_speed.py; 'tps': tokens over the CPU time of "
                    "the test with one thread (3 repetitions less 1), 'wall_tps': llama-bench's",
                    "host": {
                        "name": host.name,
                        "cores": host.cores,
                        "isa": host.isa,
                        "ghz": host.ghz,
                        "mem": f"{host.mem_gbs:g}",
                        "said": host.mem_source,
                    },
                    "points": rows,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
