"""How close `lltui fit` is to what llama.cpp really allocates, and how long it takes.

Runs the pinned llama-server CPU build (`lltui llama install` puts it in the user cache) at
`-lv 4` on generated models and compares every buffer line with the estimate:

- tiny models of real architectures (llama, qwen2, qwen3, gemma3 with SWA, qwen3moe, phi3,
  gpt2, starcoder, gpt-oss, glm4moe, mistral3, qwen2moe, deepseek2 with MLA) in F16, Q8_0
  and Q4_K, with real weights; and every architecture of tests/support/gguf_factory.py ARCH_SPECS
  (olmoe, granite, cohere2, llama4, ...) in Q8_0, on one device and split over rpc-servers;
- real-size shapes (Llama-8B, Llama-1B, Qwen3-4B and 0.6B, Gemma3-4B and 1B, Qwen3-30B-A3B,
  Mistral-Nemo-like, a few layers each) whose tensor data is a hole in a sparse file, so
  the compute buffers are those of real models without the disk or the download;
- loopback ggml-rpc-server devices for the per-device split.

Weights, KV and output must match the log's 0.01 MiB; compute is reported as the error in
percent, and per architecture: the buffers compared, how many equal the log, how many are
within 10 %, the worst difference (MiB and percent) and whether the graph planned them or
the formula did. Time: one estimate against one `llama-fit-params` dry run (llama.cpp's own
estimate) of the same model, measured in the same run, as a ratio.

    .venv/bin/python bench/fit_accuracy.py [--quick] [--keep DIR] [--archs-only]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

from support import gguf_factory as gf  # noqa: E402
from support.llama_fixture import SERVER_ARGS, llama_server, rpc_servers  # noqa: E402

from lltui.core.cmdline.flags import parse_llama_args  # noqa: E402
from lltui.core.fit.estimate import FitOptions, FitResult, estimate  # noqa: E402
from lltui.core.gguf.reader import read_gguf  # noqa: E402
from lltui.core.llamalog.reader import parse_log  # noqa: E402
from lltui.core.memory.devices import DeviceSpec, rpc_device  # noqa: E402
from lltui.core.units import MIB  # noqa: E402
from lltui.sources.llama import build as llama_build  # noqa: E402

TINY_CONFIGS = [
    ["-c", "512", "-np", "1", "-fa", "on", "-lm", "mmap"],
    ["-c", "4096", "-np", "1", "-fa", "on"],
    ["-c", "4096", "-np", "1", "-fa", "off"],
    ["-c", "4096", "-np", "4", "-no-kvu", "-ctk", "q8_0", "-ctv", "q8_0"],
    ["-c", "4096", "-np", "4", "-kvu", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"],
    ["-c", "5000", "-np", "3", "-no-kvu", "-ub", "256", "-lm", "none"],
    ["-c", "8192", "-np", "2", "-kvu", "-ctk", "q8_0", "-ub", "1024", "-nr"],
    ["-c", "2048", "-lm", "none", "-b", "1024", "-ub", "128"],
]

REAL_SHAPES = {
    "llama-8b": gf.llama_8b_spec(n_layer=3, n_vocab=32000),
    "llama-1b": gf.llama_spec(
        n_embd=2048, n_ff=8192, n_head=32, n_head_kv=8, head_dim=64, n_layer=3, n_vocab=32000
    ),
    "qwen3-4b": gf.qwen3_spec(
        n_embd=2560, n_ff=9728, n_head=32, n_head_kv=8, head_dim=128, n_layer=3, n_vocab=32000
    ),
    "qwen3-0.6b": gf.qwen3_spec(
        n_embd=1024, n_ff=3072, n_head=16, n_head_kv=8, head_dim=128, n_layer=3, n_vocab=32000
    ),
    "gemma3-4b": gf.gemma3_spec(
        n_embd=2560,
        n_ff=10240,
        n_head=8,
        n_head_kv=4,
        head_dim=256,
        n_layer=6,
        n_vocab=32000,
        sliding_window=1024,
    ),
    "gemma3-1b": gf.gemma3_spec(
        n_embd=1152,
        n_ff=6912,
        n_head=4,
        n_head_kv=1,
        head_dim=256,
        n_layer=6,
        n_vocab=32000,
        sliding_window=512,
    ),
    "qwen3moe-30b-a3b": gf.qwen3moe_30b_a3b_spec(n_layer=2, n_vocab=32000),
    "mistral-nemo": gf.llama_spec(
        n_embd=5120, n_ff=14336, n_head=32, n_head_kv=8, head_dim=128, n_layer=2, n_vocab=32000
    ),
}
REAL_CONFIGS = [
    ["-fa", fa, "-c", str(c), "-ub", str(ub), "-np", str(np_), kvu, "-nr"]
    for fa in ("on", "off")
    for c in (1024, 8192)
    for ub in (512, 2048)
    for np_, kvu in ((1, "-kvu"), (4, "-no-kvu"))
]

RPC_CASES = [
    (("llama", "Q4_K"), 2, ["-ts", "1,1"]),
    (("llama", "Q4_K"), 2, ["-ts", "3,1", "-ngl", "3"]),
    (("qwen3", "Q8_0"), 2, ["-ts", "1,2", "-ngl", "4", "-lm", "none"]),
    (("gemma3", "F16"), 3, ["-ts", "2,1,1"]),
    (("qwen3moe", "Q4_K"), 3, ["-ts", "1,1,2", "-np", "2", "-no-kvu", "-ctk", "q8_0"]),
    (("llama", "F16"), 2, ["-sm", "none", "-mg", "1"]),
    (("gemma3", "Q8_0"), 2, ["-ts", "1,1", "-nkvo"]),
    (("qwen3moe", "Q8_0"), 2, ["-ts", "1,1", "--cpu-moe"]),
    (("qwen3", "Q4_K"), 2, ["-ts", "1,1", "-ot", r"blk\.1\.=CPU"]),
]


@dataclass
class ArchRow:
    """One architecture's compute buffers: compared, equal at 0.01 MiB, within 10 %,
    planned from the graph, and the worst difference (MiB, percent)."""

    cases: int = 0
    exact: int = 0
    near: int = 0
    planned: int = 0
    worst_mib: float = 0.0
    worst_pct: float = 0.0


@dataclass
class Tally:
    exact: int = 0
    checked: int = 0
    misses: list[str] = field(default_factory=list)
    compute_err: list[float] = field(default_factory=list)  # percent, signed
    by_arch: dict[str, ArchRow] = field(default_factory=dict)

    def add_compute(self, arch: str, got: float, want: float, planned: bool) -> None:
        row = self.by_arch.setdefault(arch, ArchRow())
        row.cases += 1
        row.exact += f"{got:.2f}" == f"{want:.2f}"
        row.near += abs(got - want) <= 0.10 * want
        row.planned += planned
        diff = abs(round(got, 2) - want)
        if diff > row.worst_mib:
            row.worst_mib, row.worst_pct = diff, 100.0 * diff / want


def compare(
    res: FitResult, log_text: str, tally: Tally, label: str, compute: bool, arch: str = ""
) -> None:
    summary = parse_log(log_text)
    logged: dict[tuple[str, str], float] = {}
    for b in summary.buffers:
        for kind, mib in (
            ("model", b.model_mib),
            ("KV", b.kv_mib),
            ("output", b.output_mib),
            ("compute", b.compute_mib),
        ):
            if mib:
                logged[(b.name, kind)] = mib
    ours: dict[tuple[str, str], float] = {}
    for name, kind, nbytes in res.buffers:
        if not nbytes or kind == "KV":
            continue
        value = nbytes / MIB if kind == "compute" else float(f"{nbytes / MIB:.2f}")
        ours[(name, kind)] = ours.get((name, kind), 0.0) + value
    for cache in res.kv:
        for name, nbytes in cache.buffers:
            ours[(name, "KV")] = ours.get((name, "KV"), 0.0) + float(f"{nbytes / MIB:.2f}")
    for key in sorted(set(logged) | set(ours)):
        got, want = ours.get(key, 0.0), logged.get(key, 0.0)
        if key[1] == "compute":
            if compute and want > 0.05:
                tally.compute_err.append(100.0 * (got - want) / want)
                tally.add_compute(arch or res.model.architecture, got, want, res.compute_exact)
            continue
        tally.checked += 1
        if round(abs(got - want), 3) == 0:
            tally.exact += 1
        else:
            tally.misses.append(f"{label}: {key[0]} {key[1]} lltui {got:.2f} llama {want:.2f}")


def run_case(
    bins: llama_build.BuildResult,
    model: Path,
    argv: list[str],
    log: Path,
    devices: Sequence[DeviceSpec] = (),
) -> tuple[FitResult, str]:
    flags = [*argv, "--no-warmup"]
    for _ in range(3):  # a log read before its buffer lines (a loaded machine): again
        with llama_server(bins, model, log, flags) as server:
            text = server.log()
        if "compute buffer size" in text:
            break
    res = estimate(
        read_gguf(model),
        parse_llama_args([*SERVER_ARGS, *flags]),
        devices,
        FitOptions(search=False),
    )
    return res, text


ARCH_CONFIGS = [
    ["-c", "4096", "-np", "1", "-fa", "on"],
    ["-c", "4096", "-np", "2", "-fa", "off", "-ub", "64"],
    ["-c", "5000", "-np", "3", "-no-kvu", "-ub", "256", "-ctk", "q8_0", "-ctv", "q8_0"],
    ["-c", "8192", "-np", "2", "-kvu", "-ub", "1024", "-b", "2048", "-fa", "off"],
]
ARCH_SPLITS = [
    (2, ["-ts", "1,1"]),
    (3, ["-ts", "2,1,1", "-ngl", "3", "-fa", "off"]),
    (2, ["-ts", "1,3", "-nkvo", "-fa", "off"]),
]


def more_architectures(bins: llama_build.BuildResult, root: Path, log: Path, quick: bool) -> None:
    """Every architecture of the factory's ARCH_SPECS: one device, then rpc-servers."""
    paths = {}
    for name, spec in gf.ARCH_SPECS.items():
        path = root / f"arch-{name}.gguf"
        if not path.exists():
            gf.write_model(path, spec(), "Q8_0", name="tiny-model")
        paths[name] = path
    t = Tally()
    for (name, path), cfg in itertools.product(
        paths.items(), ARCH_CONFIGS[:1] if quick else ARCH_CONFIGS
    ):
        if "-ctv" in cfg and "q8_0" in cfg and "-fa" not in cfg:
            cfg = [*cfg, "-fa", "on"]  # a quantized V needs flash attention
        res, text = run_case(bins, path, cfg, log)
        compare(res, text, t, f"{name} {' '.join(cfg)}", compute=True, arch=name)
    report("more architectures, one CPU device", t)
    m = Tally()
    with rpc_servers(bins, 3, root) as servers:
        eps = [f"127.0.0.1:{s.port}" for s in servers]
        for (name, path), (n, extra) in itertools.product(
            paths.items(), ARCH_SPLITS[:1] if quick else ARCH_SPLITS
        ):
            use = eps[:n]
            argv = ["--rpc", ",".join(use), "-c", "2048", "-np", "1", *extra]
            devs = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(use)]
            res, text = run_case(bins, path, argv, log, devs)
            compare(res, text, m, f"{name} {' '.join(extra)}", compute=True, arch=name)
    report("more architectures, split over loopback rpc servers", m)


def report(title: str, tally: Tally) -> None:
    print(f"\n{title}")
    print(f"  weights/KV/output buffers equal at 0.01 MiB: {tally.exact}/{tally.checked}")
    for m in tally.misses[:10]:
        print(f"    miss: {m}")
    if tally.compute_err:
        errs = tally.compute_err
        within = sum(abs(e) <= 10 for e in errs)
        print(
            f"  compute buffers: {len(errs)} compared, error mean {statistics.mean(errs):+.1f} %, "
            f"median |e| {statistics.median(abs(e) for e in errs):.1f} %, "
            f"max |e| {max(abs(e) for e in errs):.1f} %, within 10 %: {within}/{len(errs)}"
        )
    if tally.by_arch:
        print(f"    {'architecture':<16} {'cases':>5} {'exact':>5} {'<10%':>5}  worst    how")
    for arch, row in sorted(tally.by_arch.items()):
        n = row.cases
        how = "graph" if row.planned == n else f"formula in {n - row.planned}"
        worst = f"{row.worst_mib:.2f} MiB ({row.worst_pct:.1f} %)" if row.worst_mib else "0"
        print(f"    {arch:<16} {n:>5} {row.exact:>5} {row.near:>5}  {worst:<20} {how}")
    if tally.by_arch:
        rows = tally.by_arch.values()
        archs_exact = sum(r.exact == r.cases for r in rows)
        print(
            f"    all: {sum(r.exact for r in rows)}/{sum(r.cases for r in rows)} buffers exact, "
            f"{archs_exact}/{len(tally.by_arch)} architectures exact in every case"
        )


def timing(bins: llama_build.BuildResult, model: Path) -> None:
    """One estimate (header read included) against one llama-fit-params dry run."""
    argv = ["-c", "8192", "-np", "1"]
    exe = str(bins.binaries["llama-fit-params"])
    ours, theirs = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        estimate(read_gguf(model), parse_llama_args(argv), (), FitOptions())
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run(
            [exe, "-m", str(model), *argv, "--fit-print", "on"],
            capture_output=True,
            check=True,
            timeout=120,
        )
        theirs.append(time.perf_counter() - t0)
    o, t = statistics.median(ours), statistics.median(theirs)
    print(
        f"\ntime: lltui estimate (with the largest-context search) {o * 1000:.1f} ms, "
        f"llama-fit-params dry run {t * 1000:.1f} ms: ratio {o / t:.2f}"
    )


@contextlib.contextmanager
def workdir(keep: str | None) -> Iterator[Path]:
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
        return
    with tempfile.TemporaryDirectory(prefix="lltui-fit-bench-") as tmp:
        yield Path(tmp)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a subset: one config per model")
    parser.add_argument("--keep", metavar="DIR", help="keep the generated models in DIR")
    parser.add_argument(
        "--archs-only", action="store_true", help="only the ARCH_SPECS architectures"
    )
    args = parser.parse_args()
    bins = llama_build.installed()
    if bins is None:
        print("no llama.cpp build in the user cache: run `lltui llama install` first")
        return 1
    with workdir(args.keep) as root:
        log = root / "server.log"
        if args.archs_only:
            more_architectures(bins, root, log, args.quick)
            return 0
        tiny: dict[tuple[str, str], Path] = {}
        specs = {
            **gf.SPECS,
            "qwen2": gf.qwen2_spec,
            "phi3": gf.phi3_spec,
            "gpt2": gf.gpt2_spec,
            "starcoder": gf.starcoder_spec,
            "gpt-oss": gf.gpt_oss_spec,
            "glm4moe": gf.glm4moe_spec,
            "mistral3": gf.mistral3_spec,
            "qwen2moe": gf.qwen2moe_spec,
            "deepseek2": gf.deepseek2_spec,
        }
        for arch, wt in itertools.product(specs, ("F16", "Q8_0", "Q4_K")):
            path = root / f"{arch}-{wt}.gguf"
            if not path.exists():
                # (a name with "phi3" in it makes llama.cpp look for phi3's special tokens)
                gf.write_model(path, specs[arch](), wt, name="tiny-model")
            tiny[(arch, wt)] = path

        t = Tally()
        configs = TINY_CONFIGS[:1] if args.quick else TINY_CONFIGS
        for (key, path), cfg in itertools.product(tiny.items(), configs):
            if key[0] == "deepseek2" and "-ctk" in cfg and "-ctv" not in cfg:
                continue  # MLA models refuse different K and V cache types
            res, text = run_case(bins, path, cfg, log)
            compare(res, text, t, f"{key} {' '.join(cfg)}", compute=True, arch=key[0])
        report("tiny models, one CPU device", t)

        r = Tally()
        for name, spec in REAL_SHAPES.items():
            path = root / f"{name}.gguf"
            if not path.exists():
                gf.write_sparse(path, spec)
            for cfg in REAL_CONFIGS[:2] if args.quick else REAL_CONFIGS:
                res, text = run_case(bins, path, cfg, log)
                compare(res, text, r, f"{name} {' '.join(cfg)}", compute=True, arch=spec.arch)
        report("real-size shapes (sparse files), one CPU device", r)

        m = Tally()
        with rpc_servers(bins, 3, root) as servers:
            eps = [f"127.0.0.1:{s.port}" for s in servers]
            for key, n, extra in RPC_CASES:
                use = eps[:n]
                argv = ["--rpc", ",".join(use), "-c", "1024", "-np", "1", "-fa", "on", *extra]
                devs = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(use)]
                res, text = run_case(bins, tiny[key], argv, log, devs)
                compare(res, text, m, f"{key} {' '.join(extra)}", compute=True, arch=key[0])
        report("several devices (loopback rpc servers)", m)

        more_architectures(bins, root, log, args.quick)
        timing(bins, root / "llama-8b.gguf")
    return 0


if __name__ == "__main__":
    sys.exit(main())
