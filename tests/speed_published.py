"""The published llama-bench points (tests/fixtures/llama_bench_published.json) as runs of the
speed model: the model shapes as sparse GGUFs, the GPUs as ``--gpus``, llama-bench's flags as
a llama.cpp command line. Shared by test_speed_published.py and bench/speed_calibrate.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gguf_factory as gf

from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.llama.flags import parse_llama_args
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.speed.model import estimate_speed

DATA = Path(__file__).parent / "fixtures" / "llama_bench_published.json"

_GPT_OSS = dict(
    n_embd=2880,
    n_head=64,
    n_head_kv=8,
    head_dim=64,
    n_ff=2880,
    n_ff_exp=2880,
    n_expert_used=4,
    n_vocab=201088,
    sliding_window=128,
    swa_pattern=2,
)
SHAPES: dict[str, gf.ModelSpec] = {
    "llama2-7b": gf.llama_spec(
        n_embd=4096, n_ff=11008, n_head=32, n_head_kv=32, head_dim=128, n_layer=32, n_vocab=32000
    ),
    "llama3-8b": gf.llama_8b_spec(),
    "llama3.2-3b": gf.llama_spec(
        n_embd=3072,
        n_ff=8192,
        n_head=24,
        n_head_kv=8,
        head_dim=128,
        n_layer=28,
        n_vocab=128256,
        tied=True,
    ),
    "llama3.2-1b": gf.llama_spec(
        n_embd=2048,
        n_ff=8192,
        n_head=32,
        n_head_kv=8,
        head_dim=64,
        n_layer=16,
        n_vocab=128256,
        tied=True,
    ),
    "llama3-70b": gf.llama_spec(
        n_embd=8192, n_ff=28672, n_head=64, n_head_kv=8, head_dim=128, n_layer=80, n_vocab=128256
    ),
    "mistral-nemo-12b": gf.llama_spec(
        n_embd=5120, n_ff=14336, n_head=32, n_head_kv=8, head_dim=128, n_layer=40, n_vocab=131072
    ),
    "qwen3-32b": gf.qwen3_spec(
        n_embd=5120,
        n_ff=25600,
        n_head=64,
        n_head_kv=8,
        head_dim=128,
        n_layer=64,
        n_vocab=151936,
        tied=False,
    ),
    "qwen3-30b-a3b": gf.qwen3moe_30b_a3b_spec(),
    "gpt-oss-20b": gf.gpt_oss_spec(n_layer=24, n_expert=32, **_GPT_OSS),
    "gpt-oss-120b": gf.gpt_oss_spec(n_layer=36, n_expert=128, **_GPT_OSS),
}


def _more_bits(i: int, n: int) -> bool:
    """llama.cpp's use_more_bits: the layers a _M mix gives Q6_K (first and last eighth, and
    every third between)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _q4_k_m(n_layer: int):
    def pick(name: str) -> str:
        if name == "output.weight":
            return "Q6_K"
        if ".attn_v." in name or ".ffn_down" in name:
            return "Q6_K" if _more_bits(int(name.split(".")[1]), n_layer) else "Q4_K"
        return "Q4_K"

    return pick


def _q3_k_s(name: str) -> str:
    return "Q6_K" if name == "output.weight" else "Q3_K"


def _mxfp4(name: str) -> str:
    return "MXFP4" if "_exps" in name else "Q8_0"


@dataclass(frozen=True)
class Point:
    id: int
    source: str
    gpu: str
    n_gpus: int
    model: str
    quant: str
    test: str
    tps: float
    fa: int
    split: str
    exception: str = ""
    ub: int = 0  # -ub when not llama-bench's 512

    @property
    def decode(self) -> bool:
        return self.test.startswith("tg")

    @property
    def tokens(self) -> int:
        return int(self.test[2:])

    @property
    def kind(self) -> str:
        """single-GPU dense, single-GPU MoE, or a split."""
        if self.n_gpus > 1:
            return "split"
        return "moe" if SHAPES[self.model].n_expert else "dense"


def load_points() -> list[Point]:
    raw = json.loads(DATA.read_text())["points"]
    fields = Point.__dataclass_fields__
    return [Point(**{k: v for k, v in p.items() if k in fields}) for p in raw]


def model_file(directory: Path, model: str, quant: str) -> Path:
    spec = SHAPES[model]
    path = directory / f"{model}-{quant}.gguf"
    if not path.exists():
        if quant == "Q4_K_M":
            gf.write_sparse(path, spec, "Q4_K", type_of=_q4_k_m(spec.n_layer))
        elif quant == "Q3_K_S":
            gf.write_sparse(path, spec, "Q3_K", type_of=_q3_k_s)
        elif quant == "MXFP4":
            gf.write_sparse(path, spec, "Q8_0", type_of=_mxfp4)
        else:
            gf.write_sparse(path, spec, quant)
    return path


def fit_for(point: Point, directory: Path, cache: dict | None = None):
    """(model, FitResult) of the point's run: its GPUs, -ngl 99, its -fa, llama-bench's -c."""
    key = (point.model, point.quant, point.gpu, point.n_gpus, point.fa, point.ub)
    if cache is not None and key in cache:
        return cache[key]
    model = read_gguf(model_file(directory, point.model, point.quant))
    devs = parse_gpus_spec(",".join([point.gpu] * point.n_gpus)).devices
    args = ["-c", "4096", "-ngl", "99", "-fa", "on" if point.fa else "off"]
    if point.ub:
        args += ["-ub", str(point.ub), "-b", str(max(2048, point.ub)), "-c", "8192"]
    res = estimate(model, parse_llama_args(args), devs, FitOptions(search=False))
    if cache is not None:
        cache[key] = (model, res)
    return model, res


def predict(point: Point, model, res) -> float:
    """tgN is timed over N tokens from an empty cache: taken at half its depth."""
    if point.decode:
        return estimate_speed(model, res, depth=point.tokens // 2).decode_tps
    return estimate_speed(model, res, prompt_tokens=point.tokens).prefill_tps
