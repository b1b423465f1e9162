"""-sm layer against -sm tensor over two loopback rpc-servers, measured with the pinned
llama-bench and predicted by lltui's speed model in the same run.

    .venv/bin/python bench/rpc_split.py [--layers 8] [--embd 1024] [--reps 3]

Writes a generated llama (Q8_0) of the shape asked, starts two ggml-rpc-servers (one thread
each) on 127.0.0.1, runs llama-bench -p 64 -n 32 with each split, and prints per split the
measured and predicted decode and prompt tokens/s and tensor/layer ratios of both. Over RPC
each of tensor's all-reduces is a TCP round trip per device: decode slows, while the prompt's
matrix work is split between the servers.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import gguf_factory as gf  # noqa: E402  (tests/ holds the generated models)
from support.llama_fixture import free_port, port_open, stop_group  # noqa: E402

from lltui.core.cmdline.flags import parse_llama_args  # noqa: E402
from lltui.core.fit.estimate import FitOptions, estimate  # noqa: E402
from lltui.core.gguf.reader import read_gguf  # noqa: E402
from lltui.core.memory.devices import rpc_device  # noqa: E402
from lltui.sources.llama import build_cache  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--embd", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    built = build_cache.installed(cuda=False)
    if built is None:
        print("no llama.cpp build: run `lltui llama install` first", file=sys.stderr)
        return 1
    work = Path("/tmp/lltui-bench-rpc-split")
    work.mkdir(exist_ok=True)
    model = work / "model.gguf"
    spec = gf.llama_spec(
        n_embd=args.embd,
        n_ff=args.embd * 11 // 4,
        n_head=args.embd // 64,
        n_head_kv=max(1, args.embd // 256),
        head_dim=64,
        n_layer=args.layers,
    )
    gf.write_model(model, spec, "Q8_0", name="bench-model")
    ports = [free_port(), free_port()]
    rpcs = [
        subprocess.Popen(
            [str(built.binaries["ggml-rpc-server"]), "-H", "127.0.0.1", "-p", str(p), "-t", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for p in ports
    ]
    try:
        deadline = time.monotonic() + 30
        while not all(port_open(p) for p in ports):
            if time.monotonic() > deadline:
                print("the rpc-servers did not start", file=sys.stderr)
                return 1
            time.sleep(0.1)
        eps = [f"127.0.0.1:{p}" for p in ports]
        devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
        got = {sm: measure(built.binaries["llama-bench"], model, eps, sm, args.reps) for sm in
               ("layer", "tensor")}  # fmt: skip
        want = {sm: predict(model, eps, devices, sm) for sm in ("layer", "tensor")}
    finally:
        for proc in rpcs:
            stop_group(proc)
    print(f"llama {args.layers} layers of {args.embd}, Q8_0, two loopback rpc-servers (1 thread)")
    for sm in ("layer", "tensor"):
        (pp, tg), (ppp, tgp) = got[sm], want[sm]
        print(f"-sm {sm:<6} decode {tg:7.1f} t/s (predicted {tgp:7.1f}), "
              f"prompt {pp:7.1f} t/s (predicted {ppp:7.1f})")  # fmt: skip
    for i, what in ((1, "decode"), (0, "prompt")):
        ratio = got["tensor"][i] / got["layer"][i]
        pred = want["tensor"][i] / want["layer"][i]
        print(f"tensor/layer {what}: measured {ratio:.2f}, predicted {pred:.2f}")
    return 0


def measure(bench: Path, model: Path, eps: list[str], sm: str, reps: int) -> tuple[float, float]:
    """(prompt t/s at -p 64, decode t/s at -n 32) as llama-bench reports them."""
    out = subprocess.run(
        [str(bench), "-m", str(model), "--rpc", ",".join(eps), "-sm", sm, "-p", "64", "-n",
         "32", "-r", str(reps), "-t", "1", "-o", "csv"],
        capture_output=True, text=True, check=True, timeout=600,
    ).stdout  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(out)))
    pp = next(float(r["avg_ts"]) for r in rows if r["n_prompt"] != "0")
    tg = next(float(r["avg_ts"]) for r in rows if r["n_gen"] != "0")
    return pp, tg


def predict(model: Path, eps: list[str], devices: list, sm: str) -> tuple[float, float]:
    argv = ["-t", "1", "--rpc", ",".join(eps), "-sm", sm, "-ngl", "all", "-np", "1"]
    res = estimate(read_gguf(model), parse_llama_args([*argv, "-c", "512"]), devices, FitOptions())
    assert res.speed is not None
    return res.speed.prefill_tps, res.speed.decode_tps


if __name__ == "__main__":
    sys.exit(main())
