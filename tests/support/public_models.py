"""GGUF headers of the models in tests/fixtures/llama-logs that can be reconstructed: the
published architecture's shapes, the quantization the log names, each tensor's type from
llama-quantize's own rules (lltui.core.quant.rules), written sparse (a real-size file with a
hole for the weights). A reconstruction is not the user's file: a converter or quantizer of
another version may have made other choices; the tests and the bench say which logs these
stand in for and what they leave open."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.types import GGML_TYPES, LlamaFtype
from lltui.core.quant.rules import choose_types
from lltui.core.quant.sizes import quant_source
from support import gguf_factory as gf

V = gf.V


@dataclass(frozen=True)
class Reconstruction:
    name: str
    spec: gf.ModelSpec
    ftype: str  # F16, Q4_0, Q4_K_M, Q8_0
    source: str  # where the shapes come from
    omit: tuple[str, ...] = ()  # keys of spec.extra_kv the header leaves out


TINYLLAMA = gf.llama_spec(
    n_layer=22, n_embd=2048, n_head=32, n_head_kv=4, head_dim=64, n_ff=5632, n_vocab=32000,
    n_ctx_train=2048,
)  # fmt: skip
R1_QWEN_32B = gf.qwen2_spec(
    n_layer=64, n_embd=5120, n_head=40, n_head_kv=8, head_dim=128, n_ff=27648, n_vocab=152064,
    n_ctx_train=131072, tied=False,
)  # fmt: skip
LLAMA3_8B_64K = gf.llama_8b_spec(n_ctx_train=65536)
MISTRAL_7B_V03 = gf.llama_spec(
    n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=14336, n_vocab=32768,
    n_ctx_train=32768,
)  # fmt: skip
QWEN3_30B_A3B = gf.qwen3moe_30b_a3b_spec(n_ctx_train=40960)
# DeepSeek-V2 as converted before MLA (b5137): one K/V head per attention head, K 192 (128 +
# 64 rope), V 128; no *_mla keys. The tensors are the MLA layout's (the KV cache depends on
# the heads alone).
DEEPSEEK_V2_MHA = gf.ModelSpec(
    arch="deepseek2", n_layer=60, n_embd=5120, n_head=128, n_head_kv=128, head_dim=192,
    n_ff=12288, n_vocab=102400, n_ctx_train=163840, n_expert=160, n_expert_used=6,
    n_ff_exp=1536,
    extra_kv={
        "deepseek2.attention.kv_lora_rank": (512, V.UINT32),
        "deepseek2.attention.q_lora_rank": (1536, V.UINT32),
        "deepseek2.attention.key_length_mla": (192, V.UINT32),
        "deepseek2.attention.value_length_mla": (128, V.UINT32),
        "deepseek2.rope.dimension_count": (64, V.UINT32),
        "deepseek2.attention.value_length": (128, V.UINT32),
        "deepseek2.leading_dense_block_count": (1, V.UINT32),
        "deepseek2.expert_shared_count": (2, V.UINT32),
    },
)  # fmt: skip

# public log -> the model it loaded (PROVENANCE.md names each)
BY_LOG: dict[str, Reconstruction] = {
    "04-ollama4225-nkvo-compute-oom-2024.log": Reconstruction(
        "Llama-3-8B-Instruct-64k", LLAMA3_8B_64K, "Q8_0", "Meta-Llama-3-8B config, 64k context"
    ),
    "05-llama12728-vulkan-init-prefix-oom-2025.log": Reconstruction(
        "DeepSeek-V2 (pre-MLA GGUF)",
        DEEPSEEK_V2_MHA,
        "Q4_K_M",
        "DeepSeek-V2 config",
        omit=("deepseek2.attention.key_length_mla", "deepseek2.attention.value_length_mla"),
    ),
    "07-llama13729-qwen3-30b-a3b-partial-ngl-2025.log": Reconstruction(
        "Qwen3-30B-A3B", QWEN3_30B_A3B, "Q4_K_M", "Qwen3-30B-A3B config (quant not in the log)"
    ),
    "12-llama11807-cpu-only-aarch64-repack-2025.log": Reconstruction(
        "TinyLlama-1.1B Q4_0", TINYLLAMA, "Q4_0", "TinyLlama-1.1B-Chat-v1.0 config"
    ),
    "17-ollama9496-cpu-only-init_from_model-2025.log": Reconstruction(
        "Mistral-7B-v0.3 Q4_0", MISTRAL_7B_V03, "Q4_0", "ollama mistral:latest (7B v0.3)"
    ),
    "26-llama9426-rpc-16-servers-tinyllama-2024.log": Reconstruction(
        "TinyLlama-1.1B F16", TINYLLAMA, "F16", "TinyLlama-1.1B-Chat-v1.0 config"
    ),
    "28-llama11861-r1-distill-qwen32b-fa-2025.log": Reconstruction(
        "DeepSeek-R1-Distill-Qwen-32B Q4_K_M", R1_QWEN_32B, "Q4_K_M", "Qwen2.5-32B config"
    ),
}

_FTYPES = {"Q4_0": LlamaFtype.MOSTLY_Q4_0, "Q4_K_M": LlamaFtype.MOSTLY_Q4_K_M,
           "Q8_0": LlamaFtype.MOSTLY_Q8_0}  # fmt: skip


def write(rec: Reconstruction, directory: Path) -> Path:
    """The reconstruction's sparse GGUF in ``directory`` (written once)."""
    safe = "".join(c if c.isalnum() else "-" for c in f"{rec.name}-{rec.ftype}")
    path = directory / f"{safe}.gguf"
    if path.exists():
        return path
    if rec.ftype == "F16":
        return gf.write_sparse(path, rec.spec, "F16", omit=rec.omit)
    f16 = directory / f"{safe}.f16.gguf"
    gf.write_sparse(f16, rec.spec, "F16", omit=rec.omit)
    src = quant_source(read_gguf(str(f16)))
    chosen, _, _ = choose_types(src, _FTYPES[rec.ftype], imatrix=False)
    types = {t.name: GGML_TYPES[new].name.upper() for t, new, _, _ in chosen}
    f16.unlink()
    return gf.write_sparse(
        path, rec.spec, "Q4_0", type_of=lambda name: types.get(name, "F16"), omit=rec.omit
    )


def corpus_entry(log: Path, models: Path) -> dict[str, object]:
    """A log's case as kept in the corpus: nothing of the machine that made it."""
    from lltui.core.explain.report import case_to_json, check_to_json
    from lltui.services.explain import ExplainRequest, explain

    rec = BY_LOG.get(log.name)
    model = str(write(rec, models)) if rec is not None else None
    r = explain(ExplainRequest(str(log), model=model, ask_binary=False))
    case = case_to_json(r)
    case["model"] = f"reconstructed: {rec.name} ({rec.source})" if rec is not None else r.model_ref
    return {
        "log": log.name,
        "case": case,
        "lines": [
            {k: v for k, v in check_to_json(c).items() if k not in ("logged_mib",)}
            for c in r.checks
        ],
    }
