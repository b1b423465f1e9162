"""Spellings of llama-server flags with the pinned llama-server's own verdict on each.

``server`` is what llama-server 11434.0.0 does with the command line (``ok``: its parser
accepts it; ``refuse``: it exits with an argument error; ``crash``: it accepts it and
aborts). ``lltui`` is what fit, launch and the API must all do: accept (``ok``, with the
``settings`` given) or refuse with one line naming ``flag``. They differ only where the
value means nothing (``8k`` read as 8, NaN, a negative count): lltui refuses what the server
would take. tests/test_flag_judge.py asks the real binary; tests/test_flag_verdicts.py checks
lltui against these recorded verdicts without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]
    server: str  # ok, refuse, crash
    lltui: str  # ok, refuse
    settings: dict[str, Any] = field(default_factory=dict)  # LlamaArgs fields when ok

    @property
    def flag(self) -> str:
        """The flag an error must name."""
        return self.argv[0]

    @property
    def id(self) -> str:
        return " ".join(self.argv) or "(nothing)"


def ok(*argv: str, **settings: Any) -> Case:
    return Case(argv, "ok", "ok", settings)


def refused(*argv: str) -> Case:
    return Case(argv, "refuse", "refuse")


def meaningless(*argv: str, server: str = "ok") -> Case:
    """llama-server takes it (or takes it and aborts); it means nothing, so lltui refuses."""
    return Case(argv, server, "refuse")


SIXTEEN = ",".join(["1"] * 16)
FIFTEEN = ",".join(["1"] * 15)

CASES: tuple[Case, ...] = (
    # -c
    ok("-c", "4096", n_ctx=4096),
    ok("--ctx-size", "4096", n_ctx=4096),
    ok("--ctx_size", "4096", n_ctx=4096),
    ok("-c", "+5", n_ctx=5),
    ok("-c", "0", n_ctx=0),
    refused("--ctx-size=4096"),
    refused("--CTX-SIZE", "4096"),
    refused("-c"),
    refused("-c", ""),
    refused("-c", "99999999999"),
    refused("-c", "lots"),
    meaningless("-c", "4096abc"),
    meaningless("-c", "8k"),
    meaningless("-c", "1e3"),
    meaningless("-c", "-5"),
    # -np
    ok("-np", "2", n_parallel=2),
    ok("--parallel", "-1", n_parallel=-1),
    refused("-np", "0"),
    refused("--parallel=2"),
    meaningless("-np", "-3"),
    # -kvu / -no-kvu, --kv-unified-per-slot
    ok("-kvu", kv_unified=True),
    ok("--kv-unified", kv_unified=True),
    ok("-no-kvu", kv_unified=False),
    ok("--no-kv-unified", kv_unified=False),
    ok("--no_kv_unified", kv_unified=False),
    ok("--kv-unified-per-slot", "512", kv_unified_per_slot=512),
    refused("--kv-unified=on"),
    meaningless("--kv-unified-per-slot", "-1"),
    # -ctk / -ctv
    ok("-ctk", "q8_0", type_k="q8_0"),
    ok("--cache-type-k", "q4_0", type_k="q4_0"),
    ok("--cache_type_k", "bf16", type_k="bf16"),
    ok("-ctv", "iq4_nl", type_v="iq4_nl"),
    ok("--cache-type-v", "q5_1", type_v="q5_1"),
    refused("-ctk", "Q8_0"),
    refused("-ctv", "q4_K"),
    refused("--cache-type-v=q8_0"),
    # -fa
    ok("-fa", "on", flash_attn="on"),
    ok("-fa", "enabled", flash_attn="on"),
    ok("-fa", "1", flash_attn="on"),
    ok("-fa", "0", flash_attn="off"),
    ok("--flash-attn", "off", flash_attn="off"),
    ok("--flash-attn", "-1", flash_attn="auto"),
    ok("--flash_attn", "auto", flash_attn="auto"),
    refused("-fa"),
    refused("-fa", "-c", "512"),
    refused("-fa", "ON"),
    refused("-fa", "maybe"),
    refused("--flash-attn=on"),
    # -b / -ub
    ok("-b", "1024", n_batch=1024),
    ok("--batch-size", "256", n_batch=256),
    ok("-ub", "128", n_ubatch=128),
    ok("--ubatch_size", "64", n_ubatch=64),
    refused("--batch-size=1024"),
    meaningless("-b", "0"),
    meaningless("-ub", "-1"),
    meaningless("-ub", "512x"),
    # -ngl
    ok("-ngl", "99", n_gpu_layers=99),
    ok("-ngl", "0", n_gpu_layers=0),
    ok("--gpu-layers", "all", n_gpu_layers=-2),
    ok("--n-gpu-layers", "auto", n_gpu_layers=-1),
    ok("-ngl", "-2", n_gpu_layers=-2),
    refused("-ngl", "AUTO"),
    refused("-ngl", "All"),
    refused("--n-gpu-layers=10"),
    meaningless("-ngl", "-5"),
    meaningless("-ngl", "3.5"),
    # -sm
    ok("-sm", "row", split_mode="row"),
    ok("--split-mode", "none", split_mode="none"),
    ok("--split_mode", "tensor", split_mode="tensor"),
    ok("-sm", "layer", split_mode="layer"),
    refused("-sm", "ROW"),
    refused("-sm", "rows"),
    refused("--split-mode=row"),
    # -ts
    ok("-ts", "3,1", tensor_split=(3.0, 1.0)),
    ok("--tensor-split", "1/2/1", tensor_split=(1.0, 2.0, 1.0)),
    ok("-ts", "3,1,", tensor_split=(3.0, 1.0)),
    ok("-ts", "3//1", tensor_split=(3.0, 1.0)),
    ok("-ts", "0.75,0.25", tensor_split=(0.75, 0.25)),
    ok("-ts", "1e-30,1e-30", tensor_split=(1e-30, 1e-30)),
    ok("-ts", FIFTEEN, tensor_split=(1.0,) * 15),
    refused("--tensor-split=3,1"),
    refused("-ts", "1e-320,1e-320"),
    refused("-ts", "1e-40"),
    refused("-ts", "1e39"),
    refused("-ts", ",1"),
    refused("-ts", ""),
    refused("-ts", "a,b"),
    refused("-ts", SIXTEEN),
    meaningless("-ts", "nan,1"),
    meaningless("-ts", "inf"),
    meaningless("-ts", "1,inf"),
    meaningless("-ts", "-1,1"),
    meaningless("-ts", "3x"),
    meaningless("-ts", "0x1p3"),
    meaningless("-ts", "0,0"),
    # -mg
    ok("-mg", "1", main_gpu=1),
    ok("--main-gpu", "0", main_gpu=0),
    refused("--main-gpu=1"),
    meaningless("-mg", "-1"),
    # -dev (device names depend on the build: this one has none but "none")
    ok("-dev", "none", devices=()),
    ok("--device", "none", devices=()),
    refused("-dev", ""),
    refused("-dev", "none,none"),
    # -ot, --cpu-moe, --n-cpu-moe, --n-cpu-ffn (buffer types: this build has CPU)
    ok("-ot", "exps=CPU"),
    ok("--override-tensor", r"blk\.0\.=CPU,ffn_up=CPU"),
    ok("--cpu-moe"),
    ok("-cmoe"),
    ok("-ncmoe", "2"),
    ok("--n_cpu_moe", "3"),
    ok("-ncffn", "1"),
    ok("-ncmoe", "1000"),
    refused("-ot", "x"),
    refused("-ot", "exps="),
    refused("--override-tensor=exps=CPU"),
    refused("--n-cpu-moe", "-1"),
    meaningless("-ot", "(=CPU"),
    meaningless("-ot", "=CPU"),
    meaningless("-ncmoe", "99999", server="crash"),
    # switches
    ok("-nkvo", kv_offload=False),
    ok("--no-kv-offload", kv_offload=False),
    ok("--no_kv_offload", kv_offload=False),
    ok("-kvo", kv_offload=True),
    ok("--swa-full", swa_full=True),
    ok("--no-host", host_buffer=False),
    ok("-nr", repack=False),
    ok("--no-repack", repack=False),
    ok("--repack", repack=True),
    ok("--no-op-offload", op_offload=False),
    ok("--embeddings", embedding=True),
    # -lm and the flags it replaced
    ok("-lm", "none", load_mode="none"),
    ok("--load-mode", "mmap+mlock", load_mode="mmap+mlock"),
    ok("-lm", "dio", load_mode="dio"),
    refused("-lm", "NONE"),
    refused("-lm", "direct"),
    refused("--no-mmap"),
    refused("--mlock"),
    refused("--mmap"),
    # --fit and its targets
    ok("-fit", "off", fit=False),
    ok("-fitt", "512,1024", fit_target_mib=(512, 1024)),
    ok("-fitc", "8192", fit_ctx=8192),
    refused("--fit", "sometimes"),
    meaningless("-fitt", "-5"),
    meaningless("-fitc", "-1"),
    # the draft model's settings, the projector's placement, embeddings
    ok("-ngld", "2", draft_n_gpu_layers=2),
    ok("--spec-draft-ngl", "all", draft_n_gpu_layers=-2),
    ok("-devd", "none", draft_devices=()),
    ok("-ctkd", "q8_0", draft_type_k="q8_0"),
    ok("--cache-type-v-draft", "q8_0", draft_type_v="q8_0"),
    refused("-ctkd", "q9_0"),
    ok("--spec-type", "draft-simple", spec_types=("draft-simple",)),
    ok("--spec-type", "draft-simple,ngram-mod", spec_types=("draft-simple", "ngram-mod")),
    refused("--spec-type", "bogus"),
    ok("--spec-draft-n-max", "5", spec_draft_n_max=5),
    refused("--spec-draft-n-max", "-1"),
    ok("-otd", "blk=CPU"),
    ok("-cmoed"),
    ok("-ncmoed", "2"),
    refused("-otd", "blk="),
    ok("-mmdev", "none", mmproj_device="none"),
    ok("--no-mmproj-offload", mmproj_offload=False),
    ok("--mmproj-offload", mmproj_offload=True),
    ok("--no-mmproj", mmproj_auto=False),
    ok("--no-mmproj-auto", mmproj_auto=False),
    ok("--mmproj-auto", mmproj_auto=True),
    ok("--pooling", "mean", pooling="mean"),
    refused("--pooling", "max"),
    ok("--rerank", reranking=True, embedding=True, pooling="rank"),
    # flags that change nothing lltui estimates
    ok("--jinja"),
    ok("--temp", "0.7"),
    ok("--alias", "x"),
    ok("--no-warmup"),
    ok("-t", "2"),
    ok("--port", "8080"),
    refused("--ctx-size-draft", "4096"),
    refused("-cd", "4096"),
    refused("--draft", "5"),
    refused("--no-such-flag"),
    refused("--temp=0.7"),
    refused("stray"),
)
