"""The published llama-bench points (tests/fixtures/llama_bench_published.json) as runs of the
speed model: the model shapes as sparse GGUFs, the GPUs as ``--gpus`` (none: a CPU-only run),
the host as a :class:`HostSpec`, llama-bench's flags (``-ngl``, ``--n-cpu-moe``, ``-ot``,
``-ub``, ``-b``, ``-ctk``, ``-nkvo``, ``-t``, ``-sm``, ``-d``) as a llama.cpp command line,
a power cap and the GPUs' interconnect as the speed model's clocks and links. Shared by
test_speed_published.py and bench/speed_calibrate.py, with the groups the accuracy is
reported and held by.

The sparse GGUFs are kept between runs in the user cache (``speed-models/``, named by a
hash of the shape, the quant and this file and the factory that write them): writing the
vocabularies of 40 shapes takes longer than predicting every point."""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.hardware.host import HostSpec, parse_memory
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.speed.model import estimate_speed
from lltui.core.speed.params import PARAMS, SpeedParams
from support import gguf_factory as gf

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "llama_bench_published.json"
MODEL_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lltui" / "speed-models"
)

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


def _deepseek_v2_lite() -> gf.ModelSpec:
    """DeepSeek-V2-Lite (16B, 2.4B active): MLA with a 512-wide KV row, 64 experts (6 used)
    of 1408, a dense first layer of 10944. Q is unfactored in the real model: a q_lora of 1024
    stands in for it (the same weights within 20%); the factory's shared expert is one
    expert wide where the model has two."""
    kv_lora, q_lora, rope, nope, hv = 512, 1024, 64, 128, 128
    base = gf.deepseek2_spec()
    extra = {
        **base.extra_kv,
        "deepseek2.attention.kv_lora_rank": (kv_lora, gf.V.UINT32),
        "deepseek2.attention.q_lora_rank": (q_lora, gf.V.UINT32),
        "deepseek2.attention.key_length_mla": (nope + rope, gf.V.UINT32),
        "deepseek2.attention.value_length_mla": (hv, gf.V.UINT32),
        "deepseek2.attention.key_length": (kv_lora + rope, gf.V.UINT32),
        "deepseek2.attention.value_length": (kv_lora, gf.V.UINT32),
        "deepseek2.rope.dimension_count": (rope, gf.V.UINT32),
    }
    return replace(
        base,
        n_embd=2048,
        n_ff=10944,
        n_head=16,
        head_dim=kv_lora + rope,
        n_layer=27,
        n_expert=64,
        n_expert_used=6,
        n_ff_exp=1408,
        n_vocab=102400,
        n_ctx_train=32768,
        extra_kv=extra,
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
    "tinyllama-1.1b": gf.llama_spec(
        n_embd=2048, n_ff=5632, n_head=32, n_head_kv=4, head_dim=64, n_layer=22, n_vocab=32000
    ),
    "causallm-7b": gf.llama_spec(
        n_embd=4096, n_ff=11008, n_head=32, n_head_kv=32, head_dim=128, n_layer=32, n_vocab=151936
    ),
    "qwen3-8b": gf.qwen3_spec(
        n_embd=4096,
        n_ff=12288,
        n_head=32,
        n_head_kv=8,
        head_dim=128,
        n_layer=36,
        n_vocab=151936,
        tied=False,
    ),
    "qwen3-14b": gf.qwen3_spec(
        n_embd=5120,
        n_ff=17408,
        n_head=40,
        n_head_kv=8,
        head_dim=128,
        n_layer=40,
        n_vocab=151936,
        tied=False,
    ),
    "qwen2.5-32b": gf.qwen2_spec(
        n_embd=5120,
        n_ff=27648,
        n_head=40,
        n_head_kv=8,
        head_dim=128,
        n_layer=64,
        n_vocab=152064,
        tied=False,
    ),
    "granite-3.1-3b-a800m": gf.qwen3moe_spec(
        arch="granitemoe",
        qk_norm=False,
        n_embd=1536,
        n_ff=512,
        n_head=24,
        n_head_kv=8,
        head_dim=64,
        n_layer=32,
        n_expert=40,
        n_expert_used=8,
        n_ff_exp=512,
        n_vocab=49155,
        tied=True,
    ),
    "olmoe-1b-7b": gf.qwen3moe_spec(
        arch="olmoe",
        n_embd=2048,
        n_ff=1024,
        n_head=16,
        n_head_kv=16,
        head_dim=128,
        n_layer=16,
        n_expert=64,
        n_expert_used=8,
        n_ff_exp=1024,
        n_vocab=50304,
        tied=False,
    ),
    # bench/cpu_speed.py's models, measured on this project's machine
    "bench-dense-0.7b": gf.llama_spec(
        n_layer=18, n_embd=1536, n_ff=5632, n_head=12, n_head_kv=4, head_dim=128, n_vocab=32000
    ),
    "bench-moe-1b": gf.qwen3moe_spec(
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
    ),
    "llama3.1-405b": gf.llama_spec(
        n_embd=16384, n_ff=53248, n_head=128, n_head_kv=8, head_dim=128, n_layer=126, n_vocab=128256
    ),
    # GLM-4.5-Air: the GGUF counts its MTP layer in block_count (47), llama.cpp does not run it
    "glm-4.5-air": gf.glm4moe_spec(
        n_embd=4096,
        n_ff=10944,
        n_head=96,
        n_head_kv=8,
        head_dim=128,
        n_layer=47,
        n_nextn=1,
        n_expert=128,
        n_expert_used=8,
        n_ff_exp=1408,
        n_vocab=151552,
        tied=False,
    ),
    # DeepSeek-R1-Distill-Qwen-7B (Qwen2.5-Math-7B's shape)
    "qwen2.5-7b": gf.qwen2_spec(
        n_embd=3584,
        n_ff=18944,
        n_head=28,
        n_head_kv=4,
        head_dim=128,
        n_layer=28,
        n_vocab=152064,
        tied=False,
    ),
    "deepseek-v2-lite": _deepseek_v2_lite(),
    "deepseek-coder-v2-lite": _deepseek_v2_lite(),
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


def _mxfp4_f16(name: str) -> str:
    return "MXFP4" if "_exps" in name else "F16"


def _q6_k(name: str) -> str:
    return "Q6_K"


def _q4_k_s(n_layer: int):
    """llama.cpp's Q4_K_S mix: Q4_K, but for the first eighth of ffn_down (Q5_K) and the
    output (Q6_K)."""

    def pick(name: str) -> str:
        if name == "output.weight":
            return "Q6_K"
        if ".ffn_down" in name and int(name.split(".")[1]) < n_layer // 8:
            return "Q5_K"
        return "Q4_K"

    return pick


@dataclass(frozen=True)
class Point:
    id: int
    source: str
    gpu: str  # empty: a CPU-only run
    n_gpus: int
    model: str
    quant: str
    test: str  # pp512, tg128, "pp512 @ d32768"
    tps: float
    fa: int
    split: str
    exception: str = ""
    ub: int = 0  # -ub when not llama-bench's 512
    b: int = 0  # -b when not 2048
    ngl: int = 99
    n_cpu_moe: int = 0
    nkvo: int = 0
    ctk: str = ""
    ctv: str = ""
    threads: int = 0
    sm: str = ""
    power_limit_w: int = 0  # a power cap below the card's default (nvidia-smi -pl)
    link: str = ""  # the GPUs' interconnect where the source says: "pcie", "nvlink"
    ot: str = ""  # -ot, as llama-bench takes it ("exps=CPU")
    host: dict | None = None  # the CPU side: name, cores, isa, ghz, mem, said

    @property
    def decode(self) -> bool:
        return self.test.startswith("tg")

    @property
    def tokens(self) -> int:
        return int(self.test.split()[0][2:])

    @property
    def depth(self) -> int:
        """llama-bench's -d: the KV cells filled before the test."""
        _, _, d = self.test.partition("@ d")
        return int(d) if d else 0

    @property
    def moe(self) -> bool:
        return bool(SHAPES[self.model].n_expert)

    @property
    def offload(self) -> bool:
        """Some weights or the KV on the host (or no GPU at all). -ngl counts the output layer
        as one more layer: a model is whole on the GPUs from n_layer + 1 on."""
        on_gpu = self.ngl > SHAPES[self.model].n_layer
        host = bool(self.n_cpu_moe) or bool(self.nkvo) or "CPU" in self.ot
        return not self.gpu or not on_gpu or host

    @property
    def kind(self) -> str:
        """single-GPU dense, single-GPU MoE, or a split (kept for the old groups)."""
        if self.n_gpus > 1:
            return "split"
        return "moe" if self.moe else "dense"

    @property
    def family(self) -> str:
        """The GPU generation (or the CPU's vector unit for a CPU-only run)."""
        if not self.gpu:
            return "CPU " + (self.host or {}).get("isa", "?")
        from lltui.core.hardware.gpus import find_gpu

        g = find_gpu(self.gpu)
        return FAMILY.get(g.cc, f"cc {g.cc}") if g else "unknown"

    def host_spec(self) -> HostSpec | None:
        if not self.host:
            return None
        h = self.host
        gbs, _said, lpddr = parse_memory(h["mem"])
        return HostSpec(
            name=h["name"],
            cores=h["cores"],
            isa=h["isa"],
            ghz=h["ghz"],
            mem_gbs=gbs,
            lpddr=bool(lpddr),
            source="published",
            mem_source=h.get("said", "published"),
        )


FAMILY = {
    (6, 0): "Pascal",
    (6, 1): "Pascal",
    (6, 2): "Pascal (Jetson)",
    (7, 0): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere GA100",
    (8, 6): "Ampere",
    (8, 7): "Ampere (Jetson)",
    (8, 9): "Ada",
    (9, 0): "Hopper",
    (10, 0): "Blackwell DC",
    (12, 0): "Blackwell",
    (12, 1): "Blackwell GB10",
}


def load_points() -> list[Point]:
    raw = json.loads(DATA.read_text())["points"]
    fields = Point.__dataclass_fields__
    return [Point(**{k: v for k, v in p.items() if k in fields}) for p in raw]


def load_cpu_points(path: Path) -> list[Point]:
    """This project's own llama-bench runs on its development CPU (bench/cpu_speed.py
    --save): fit points, numbered from 1001."""
    if not path.exists():
        return []
    raw = json.loads(path.read_text())
    host = raw["host"]
    return [
        Point(
            id=1001 + i,
            source="bench/cpu_speed.py on this project's machine",
            gpu="",
            n_gpus=1,
            model={"dense": "bench-dense-0.7b", "moe": "bench-moe-1b"}[p["model"]],
            quant=p["quant"],
            test=p["test"],
            tps=p["tps"],
            fa=0 if p.get("fa", -1) == 0 else 1,  # (-fa auto turns it on on the CPU)
            split="fit",
            ub=p["ub"] if p["ub"] != 512 else 0,
            threads=p["threads"],
            ctk=p.get("ctk") or "",
            ctv=p.get("ctv") or "",
            host=host,
        )
        for i, p in enumerate(raw["points"])
    ]


def _write(path: Path, model: str, quant: str) -> None:
    spec = SHAPES[model]
    if quant == "Q4_K_M":
        gf.write_sparse(path, spec, "Q4_K", type_of=_q4_k_m(spec.n_layer))
    elif quant == "Q4_K_S" and not spec.extra_kv:
        gf.write_sparse(path, spec, "Q4_K", type_of=_q4_k_s(spec.n_layer))
    elif quant == "Q3_K_S":
        gf.write_sparse(path, spec, "Q3_K", type_of=_q3_k_s)
    elif quant == "MXFP4":
        gf.write_sparse(path, spec, "Q8_0", type_of=_mxfp4)
    elif quant == "MXFP4_F16":
        gf.write_sparse(path, spec, "F16", type_of=_mxfp4_f16)
    elif spec.extra_kv:  # keys write_sparse does not write (MLA ranks)
        wtype = "Q4_K" if quant.startswith("Q4_K") else quant
        types = {n: wtype for n, _d in gf.tensor_plan(spec) if "_norm" not in n}
        gf.write_model(path, spec, wtype, sparse=True, tensor_types=types)
    else:
        gf.write_sparse(path, spec, quant)


def _writers_digest() -> str:
    here = Path(__file__).resolve()
    text = b"".join(f.read_bytes() for f in (here, here.with_name("gguf_factory.py")))
    return hashlib.sha256(text).hexdigest()[:12]


def model_file(directory: Path | None, model: str, quant: str) -> Path:
    """The sparse GGUF of a shape and quant: in ``directory``, or (None) in the user cache,
    written there once (atomically: parallel test workers may race for it)."""
    if directory is None:
        key = hashlib.sha256(f"{SHAPES[model]!r}{quant}{_DIGEST}".encode()).hexdigest()[:16]
        directory = MODEL_CACHE
        path = directory / f"{model}-{quant}-{key}.gguf"
    else:
        path = directory / f"{model}-{quant}.gguf"
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            _write(Path(tmp), model, quant)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return path


_DIGEST = _writers_digest()


def _setup(point: Point) -> tuple:
    """What a point's placement depends on but for the context."""
    return (
        point.model,
        point.quant,
        point.gpu,
        point.n_gpus,
        point.fa,
        point.ub,
        point.b,
        point.ngl,
        point.n_cpu_moe,
        point.ot,
        point.nkvo,
        point.ctk,
        point.threads,
        point.sm,
    )


def fit_all(points: list[Point], directory: Path | None = None) -> dict[int, tuple]:
    """(model, FitResult) of every point by id: the points of one setup share one placement,
    at a context that holds the deepest of them (a deeper cache changes no prediction: the
    speed model reads the cells up to each point's own depth)."""
    contexts: dict[tuple, int] = {}
    for p in points:
        contexts[_setup(p)] = max(contexts.get(_setup(p), 0), _context(p))
    cache: dict = {}
    return {p.id: fit_for(p, directory, cache, contexts[_setup(p)]) for p in points}


def fit_for(
    point: Point,
    directory: Path | None = None,
    cache: dict | None = None,
    context: int | None = None,
):
    """(model, FitResult) of the point's run: its GPUs (none: CPU only), its -ngl, experts on
    the host, -fa, -ub/-b, KV types and place, threads, the split, and llama-bench's context
    (prompt, generation and depth; ``context`` one at least as large). ``directory``: where
    the GGUFs go (None: the user cache); ``cache``: results already made."""
    ctx = context or _context(point)
    key = (*_setup(point), ctx)
    if cache is not None and key in cache:
        return cache[key]
    model_key = ("model", point.model, point.quant)
    model = (cache or {}).get(model_key)
    if model is None:
        model = read_gguf(model_file(directory, point.model, point.quant))
        if cache is not None:
            cache[model_key] = model
    devs = parse_gpus_spec(",".join([point.gpu] * point.n_gpus) if point.gpu else "cpu").devices
    opts = FitOptions(search=False, host=point.host_spec())
    res = estimate(model, parse_llama_args(_args(point, ctx)), devs, opts)
    if cache is not None:
        cache[key] = (model, res)
    return model, res


def _context(point: Point) -> int:
    """A context that holds the run (llama-bench's own: prompt, generation and depth)."""
    return max(4096, point.tokens + point.depth + 256)


def _args(point: Point, ctx: int) -> list[str]:
    """The run's llama-bench flags as llama-server's, at a context of ``ctx``."""
    args = ["-c", str(ctx), "-ngl", str(point.ngl), "-fa", "on" if point.fa else "off"]
    if point.ub:
        args += ["-ub", str(point.ub), "-b", str(point.b or max(2048, point.ub))]
    elif point.b:
        args += ["-b", str(point.b)]
    if point.n_cpu_moe:
        args += ["--n-cpu-moe", str(point.n_cpu_moe)]
    if point.ot:
        args += ["-ot", point.ot]
    if point.nkvo:
        args += ["-nkvo"]
    if point.ctk:
        args += ["-ctk", point.ctk, "-ctv", point.ctv or point.ctk]
    if point.threads:
        args += ["-t", str(point.threads)]
    if point.sm:
        args += ["-sm", point.sm]
    return args


def predict(point: Point, model, res, params: SpeedParams = PARAMS) -> float:
    """tgN is timed over N tokens after the depth: taken at half of them; ppN at its depth.
    A power cap is the GPUs' reported limit; the source's interconnect their links (where
    the speed model takes them: ``bench/speed_calibrate.py --before`` runs older ones)."""
    kw: dict = {"host": point.host_spec(), "params": params}
    takes = inspect.signature(estimate_speed).parameters
    if "clocks" in takes and point.power_limit_w:
        from lltui.core.speed.model import Clocks

        limit = Clocks(power_limit_w=point.power_limit_w)
        kw["clocks"] = {f"CUDA{i}": limit for i in range(point.n_gpus)}
    if "links" in takes and point.link:
        from lltui.core.hardware.links import RigLinks

        kw["links"] = RigLinks(nvlink=point.link == "nvlink")
    if point.decode:
        depth = point.depth + point.tokens // 2
        return estimate_speed(model, res, depth=depth, **kw).decode_tps
    tokens = point.tokens
    return estimate_speed(model, res, depth=point.depth, prompt_tokens=tokens, **kw).prefill_tps


# --- the groups accuracy is reported and held by -------------------------------------------------


def path_group(p: Point) -> str:
    """Where the work runs: all on the GPUs, experts on the host (--n-cpu-moe, -ot exps),
    layers on the host (-ngl below the layers), the KV on the host (-nkvo), or no GPU."""
    if not p.gpu:
        return "CPU only"
    if p.nkvo:
        return "-nkvo"
    if p.n_cpu_moe or "exps" in p.ot:
        return "host experts"
    if p.offload:
        return "host layers"
    return "on GPU"


def deep(p: Point) -> bool:
    """A run whose tokens read 2048 KV cells or more on average (llama-bench -d, or a long
    test)."""
    return p.depth + p.tokens // 2 >= 2048


GROUP_ORDER = (
    "all",
    "on GPU",
    "host experts",
    "host layers",
    "-nkvo",
    "CPU only",
    "dense",
    "MoE",
    "one GPU",
    "several GPUs",
    "-sm layer",
    "-sm tensor",
    "depth 0",
    "deep",
)


def group_rank(group: str) -> int:
    """Where a group goes in a report: the fixed ones in GROUP_ORDER, then the families."""
    return GROUP_ORDER.index(group) if group in GROUP_ORDER else len(GROUP_ORDER)


def groups(p: Point) -> list[str]:
    """Every group a point counts in: all; its path; dense or MoE; one GPU or several (and
    then the split mode); depth 0 or deep; the GPU family (the vector unit without a GPU)."""
    out = ["all", path_group(p), "MoE" if p.moe else "dense"]
    if p.gpu:
        out.append("several GPUs" if p.n_gpus > 1 else "one GPU")
    if p.n_gpus > 1:
        out.append(f"-sm {p.sm or 'layer'}")
    out.append("deep" if deep(p) else "depth 0")
    out.append(p.family)
    return out
