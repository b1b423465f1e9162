"""llama-quantize's type rules and file sizes, on hand-built tensor lists and generated models."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.llama_fixture import llama_bins

from lltui.cli import main
from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.types import (
    FTYPE_NAMES,
    QUANTIZE_FTYPES,
    GgmlType,
    LlamaFtype,
    tensor_nbytes,
    type_from_name,
)
from lltui.core.quant.rules import (
    Category,
    QuantSource,
    SourceTensor,
    allows_quantization,
    tensor_category,
    tensor_sort_key,
)
from lltui.core.quant.sizes import as_quantized, quant_row, quant_sizes, quant_source
from lltui.sources.llama import build as llama_build

__all__ = ["llama_bins"]  # a session fixture used by name

G = GgmlType
F = LlamaFtype


def dense(
    n_layer=32,
    n_embd=4096,
    n_head=32,
    n_head_kv=8,
    head_dim=128,
    n_ff=14336,
    n_vocab=32000,
    tied=False,
    arch="llama",
) -> QuantSource:
    e = n_embd
    t = [
        SourceTensor("token_embd.weight", (e, n_vocab)),
        SourceTensor("output_norm.weight", (e,), 0),
    ]
    if not tied:
        t.append(SourceTensor("output.weight", (e, n_vocab)))
    for i in range(n_layer):
        b = f"blk.{i}."
        t += [
            SourceTensor(b + "attn_norm.weight", (e,), 0),
            SourceTensor(b + "attn_q.weight", (e, n_head * head_dim)),
            SourceTensor(b + "attn_k.weight", (e, n_head_kv * head_dim)),
            SourceTensor(b + "attn_v.weight", (e, n_head_kv * head_dim)),
            SourceTensor(b + "attn_output.weight", (n_head * head_dim, e)),
            SourceTensor(b + "ffn_norm.weight", (e,), 0),
            SourceTensor(b + "ffn_gate.weight", (e, n_ff)),
            SourceTensor(b + "ffn_up.weight", (e, n_ff)),
            SourceTensor(b + "ffn_down.weight", (n_ff, e)),
        ]
    return QuantSource(arch, n_layer, n_head, n_head_kv, 0, tuple(t))


def moe(
    n_layer=16,
    n_embd=2048,
    n_head=32,
    n_head_kv=4,
    head_dim=64,
    n_expert=8,
    n_ff_exp=768,
    n_vocab=32000,
    shared=False,
    arch="qwen3moe",
) -> QuantSource:
    e = n_embd
    t = [
        SourceTensor("token_embd.weight", (e, n_vocab)),
        SourceTensor("output.weight", (e, n_vocab)),
    ]
    for i in range(n_layer):
        b = f"blk.{i}."
        t += [
            SourceTensor(b + "attn_q.weight", (e, n_head * head_dim)),
            SourceTensor(b + "attn_k.weight", (e, n_head_kv * head_dim)),
            SourceTensor(b + "attn_v.weight", (e, n_head_kv * head_dim)),
            SourceTensor(b + "attn_output.weight", (n_head * head_dim, e)),
            SourceTensor(b + "ffn_gate_inp.weight", (e, n_expert), 0),
            SourceTensor(b + "ffn_gate_exps.weight", (e, n_ff_exp, n_expert)),
            SourceTensor(b + "ffn_up_exps.weight", (e, n_ff_exp, n_expert)),
            SourceTensor(b + "ffn_down_exps.weight", (n_ff_exp, e, n_expert)),
        ]
        if shared:
            t += [
                SourceTensor(b + "ffn_gate_shexp.weight", (e, n_ff_exp)),
                SourceTensor(b + "ffn_up_shexp.weight", (e, n_ff_exp)),
                SourceTensor(b + "ffn_down_shexp.weight", (n_ff_exp, e)),
            ]
    return QuantSource(arch, n_layer, n_head, n_head_kv, n_expert, tuple(t))


def types_of(row) -> dict[str, GgmlType]:
    return {t.name: t.type for t in row.tensors}


def layers_with(types: dict[str, GgmlType], suffix: str, qtype: GgmlType) -> set[int]:
    return {
        int(n.split(".")[1])
        for n, t in types.items()
        if n.startswith("blk.") and n.endswith(suffix) and t == qtype
    }


def more_bits_layers(n: int) -> set[int]:
    """Layers llama-quantize's use_more_bits picks: first and last eighth, every third between."""
    first, last = n // 8, 7 * n // 8
    return set(range(first)) | set(range(last, n)) | set(range(first + 2, last, 3))


# -- categories and what is quantized at all -------------------------------------------------


def test_categories_by_name():
    assert tensor_category("output.weight") is Category.OUTPUT
    assert tensor_category("token_embd.weight") is Category.TOKEN_EMBD
    assert tensor_category("blk.3.attn_v.weight") is Category.ATTENTION_V
    assert tensor_category("blk.3.attn_qkv.weight") is Category.ATTENTION_QKV
    assert tensor_category("blk.3.ffn_down_exps.weight") is Category.FFN_DOWN
    assert tensor_category("blk.3.ffn_gate_shexp.weight") is Category.FFN_GATE
    assert tensor_category("blk.3.attn_norm.weight") is Category.OTHER


def test_what_llama_quantize_leaves_alone():
    assert allows_quantization("llama", "blk.0.attn_q.weight", (4096, 4096))
    assert allows_quantization("llama", "output.weight", (4096, 32000))
    assert not allows_quantization("llama", "blk.0.attn_norm.weight", (4096,))
    assert not allows_quantization("llama", "blk.0.attn_q.weight", (4096, 1))  # 1-d in ggml
    assert not allows_quantization("llama", "blk.0.attn_q.bias", (4096, 2))
    assert not allows_quantization("qwen3moe", "blk.0.ffn_gate_inp.weight", (2048, 128))
    assert not allows_quantization("bert", "position_embd.weight", (768, 512))
    assert not allows_quantization("mamba", "blk.0.ssm_conv1d.weight", (4, 1536))
    assert not allows_quantization("glm5-next", "blk.0.attn_k_b.weight", (128, 512, 64))
    assert allows_quantization("deepseek2", "blk.0.attn_k_b.weight", (128, 512, 64))


def test_weight_order_is_by_layer_number_then_name():
    names = ["blk.10.a.weight", "output.weight", "blk.9.b.weight", "blk.9.a.weight", "a.weight"]
    assert sorted(names, key=tensor_sort_key) == [
        "a.weight",
        "output.weight",
        "blk.9.a.weight",
        "blk.9.b.weight",
        "blk.10.a.weight",
    ]


# -- the rules -------------------------------------------------------------------------------


def test_q4_k_m_gives_q6_k_to_output_and_a_share_of_attn_v_and_ffn_down():
    src = dense(n_layer=32)
    row = quant_row(src, F.MOSTLY_Q4_K_M)
    types = types_of(row)
    assert types["output.weight"] == G.Q6_K
    assert types["token_embd.weight"] == G.Q4_K  # untied: the embedding gets the default
    expected = more_bits_layers(32)
    assert 0 < len(expected) < 32
    assert layers_with(types, "attn_v.weight", G.Q6_K) == expected
    assert layers_with(types, "ffn_down.weight", G.Q6_K) == expected
    assert layers_with(types, "attn_v.weight", G.Q4_K) == set(range(32)) - expected
    for n, t in types.items():
        if n.endswith(("attn_q.weight", "attn_k.weight", "ffn_up.weight", "ffn_gate.weight")):
            assert t == G.Q4_K, n
        if n.endswith("norm.weight"):
            assert t == G.F32, n
    assert row.n_fallback == 0 and row.error is None


def test_q5_k_m_and_q4_k_s_and_q3_k_m_layer_rules():
    src = dense(n_layer=32)
    q5 = types_of(quant_row(src, F.MOSTLY_Q5_K_M))
    assert layers_with(q5, "ffn_down.weight", G.Q6_K) == more_bits_layers(32)
    q4s = types_of(quant_row(src, F.MOSTLY_Q4_K_S))
    assert layers_with(q4s, "attn_v.weight", G.Q5_K) == {0, 1, 2, 3}  # the first four attn_v
    assert layers_with(q4s, "ffn_down.weight", G.Q5_K) == set(range(32 // 8))
    q3 = types_of(quant_row(src, F.MOSTLY_Q3_K_M))
    assert layers_with(q3, "attn_v.weight", G.Q5_K) == {0, 1}
    assert layers_with(q3, "attn_v.weight", G.Q4_K) == set(range(2, 32))
    assert layers_with(q3, "ffn_down.weight", G.Q5_K) == set(range(32 // 16))
    assert layers_with(q3, "attn_output.weight", G.Q4_K) == set(range(32))
    assert q3["blk.5.attn_q.weight"] == G.Q3_K


def test_q2_k_attn_v_depends_on_grouped_query_attention():
    gqa4 = types_of(quant_row(dense(n_head=32, n_head_kv=8), F.MOSTLY_Q2_K))
    gqa1 = types_of(quant_row(dense(n_head=32, n_head_kv=32), F.MOSTLY_Q2_K))
    assert gqa4["blk.0.attn_v.weight"] == G.Q4_K
    assert gqa1["blk.0.attn_v.weight"] == G.Q3_K
    assert gqa4["blk.0.ffn_down.weight"] == G.Q3_K
    assert gqa4["blk.0.attn_q.weight"] == G.Q2_K


def test_tied_embeddings_take_the_output_type():
    tied = types_of(quant_row(dense(tied=True), F.MOSTLY_Q4_K_M))
    assert "output.weight" not in tied
    assert tied["token_embd.weight"] == G.Q6_K
    q8 = types_of(quant_row(dense(tied=True), F.MOSTLY_Q8_0))
    assert q8["token_embd.weight"] == G.Q8_0


def test_rows_not_divisible_by_the_block_fall_back():
    # 2880 columns: whole blocks of 32 but not of 256
    src = dense(n_layer=8, n_embd=2880, n_head=64, n_head_kv=8, head_dim=64, n_ff=2816)
    row = quant_row(src, F.MOSTLY_Q4_K_M)
    types = types_of(row)
    fell_back = {t.name for t in row.tensors if t.fallback}
    assert types["output.weight"] == G.Q8_0  # the output rule picks Q8_0 itself
    assert "output.weight" not in fell_back
    assert types["blk.0.attn_q.weight"] == G.Q5_0  # Q4_K -> Q5_0
    assert types["blk.0.attn_v.weight"] == G.Q8_0  # Q6_K (more bits) -> Q8_0
    assert types["blk.4.attn_v.weight"] == G.Q5_0
    assert types["blk.0.ffn_down.weight"] == G.Q6_K  # 2816 = 11 * 256: fits
    expected = {
        t.name
        for t in src.tensors
        if t.dims[0] == 2880 and len(t.dims) > 1 and t.name not in ("output.weight",)
    }
    assert fell_back == expected
    assert row.n_fallback == len(expected)

    odd = QuantSource("llama", 1, 1, 1, 0, (SourceTensor("blk.0.attn_q.weight", (100, 64)),))
    r = quant_row(odd, F.MOSTLY_Q4_K_M)
    assert r.tensors[0].type == G.F16 and r.n_fallback == 1  # not even blocks of 32


def test_k_quant_fallbacks_by_type():
    src = QuantSource("llama", 1, 1, 1, 0, (SourceTensor("blk.0.attn_q.weight", (96, 64)),))
    got = {
        ft: quant_row(src, ft).tensors[0].type
        for ft in (F.MOSTLY_Q2_K, F.MOSTLY_Q3_K_S, F.MOSTLY_Q5_K_S, F.MOSTLY_Q6_K, F.MOSTLY_IQ4_XS)
    }
    assert got == {
        F.MOSTLY_Q2_K: G.Q4_0,
        F.MOSTLY_Q3_K_S: G.Q4_0,
        F.MOSTLY_Q5_K_S: G.Q5_1,
        F.MOSTLY_Q6_K: G.Q8_0,
        F.MOSTLY_IQ4_XS: G.IQ4_NL,
    }


def test_no_fallback_type_makes_llama_quantize_stop():
    src = QuantSource("llama", 1, 1, 1, 0, (SourceTensor("blk.0.attn_q.weight", (96, 64)),))
    row = quant_row(src, F.MOSTLY_Q1_0)  # blocks of 128, no fallback defined
    assert row.error is not None and "no tensor type fallback" in row.error
    assert row.file_bytes == 0 and row.tensors == ()


def test_eight_experts_get_q8_0_attention():
    types = types_of(quant_row(moe(n_expert=8), F.MOSTLY_Q4_K_M))
    assert types["blk.0.attn_v.weight"] == G.Q8_0
    assert types["blk.0.attn_k.weight"] == G.Q8_0
    assert types["blk.0.attn_output.weight"] == G.Q5_K
    other = types_of(quant_row(moe(n_expert=16), F.MOSTLY_Q4_K_M))
    assert other["blk.0.attn_k.weight"] == G.Q4_K


def test_moe_ffn_down_layer_comes_from_the_name():
    # two ffn_down tensors per layer: a counter would drift, the layer in the name does not
    src = moe(n_layer=16, n_expert=16, shared=True)
    types = types_of(quant_row(src, F.MOSTLY_Q4_K_M))
    expected = more_bits_layers(16)
    assert layers_with(types, "ffn_down_exps.weight", G.Q6_K) == expected
    assert layers_with(types, "ffn_down_shexp.weight", G.Q6_K) == expected


def test_moe_tensor_outside_the_layers_stops_llama_quantize():
    src = moe(n_layer=2, n_expert=16)
    bad = (*src.tensors, SourceTensor("blk.7.ffn_down_exps.weight", (768, 2048, 16)))
    row = quant_row(QuantSource(src.arch, 2, 32, 4, 16, bad), F.MOSTLY_Q4_K_M)
    assert row.error is not None and "bad layer 7" in row.error


def test_mxfp4_moe_puts_experts_in_mxfp4_and_the_rest_in_q8_0():
    types = types_of(quant_row(moe(n_expert=16), F.MOSTLY_MXFP4_MOE))
    assert types["blk.0.ffn_up_exps.weight"] == G.MXFP4
    assert types["blk.0.attn_q.weight"] == G.Q8_0
    assert types["output.weight"] == G.Q8_0
    assert types["blk.0.ffn_gate_inp.weight"] == G.F32


def test_llama_70b_gets_more_bits_on_attn_v():
    big = types_of(quant_row(dense(n_layer=80, n_head=64, n_head_kv=8), F.MOSTLY_Q4_K_M))
    other = types_of(
        quant_row(dense(n_layer=80, n_head=64, n_head_kv=8, arch="qwen2"), F.MOSTLY_Q4_K_M)
    )
    plain = sorted(set(range(80)) - more_bits_layers(80))
    assert big[f"blk.{plain[0]}.attn_v.weight"] == G.Q5_K
    assert other[f"blk.{plain[0]}.attn_v.weight"] == G.Q4_K


def test_float_types_apply_no_mixture():
    for ft, t in ((F.MOSTLY_F16, G.F16), (F.MOSTLY_BF16, G.BF16), (F.ALL_F32, G.F32)):
        types = types_of(quant_row(dense(n_layer=2), ft))
        assert types["output.weight"] == t
        assert types["blk.1.attn_v.weight"] == t
        assert types["blk.1.attn_norm.weight"] == G.F32


def test_copied_tensors_keep_their_source_type():
    src = dense(n_layer=1)
    extra = (
        SourceTensor("blk.0.attn_q.bias", (4096,), int(G.F16)),
        SourceTensor("rope_freqs.weight", (64,), int(G.F32)),
    )
    row = quant_row(QuantSource("llama", 1, 32, 8, 0, src.tensors + extra), F.MOSTLY_Q4_0)
    types = types_of(row)
    assert types["blk.0.attn_q.bias"] == G.F16
    assert types["rope_freqs.weight"] == G.F32


def test_importance_matrix_rules():
    src = dense(n_layer=16, n_head=32, n_head_kv=32)  # gqa 1
    without = quant_row(src, F.MOSTLY_IQ3_XXS, imatrix=False)
    with_im = quant_row(src, F.MOSTLY_IQ3_XXS, imatrix=True)
    auto = quant_row(src, F.MOSTLY_IQ3_XXS)
    assert types_of(without)["blk.0.attn_v.weight"] == G.IQ3_S
    assert types_of(with_im)["blk.0.attn_v.weight"] == G.IQ3_XXS
    assert auto.requires_imatrix and auto.imatrix
    assert types_of(auto) == types_of(with_im)
    q4 = quant_row(src, F.MOSTLY_Q4_K_M)
    assert not q4.requires_imatrix and not q4.imatrix
    assert quant_row(src, F.MOSTLY_Q2_K_S).requires_imatrix
    q40 = types_of(quant_row(src, F.MOSTLY_Q4_0, imatrix=True))
    assert layers_with(q40, "ffn_down.weight", G.Q4_1) == {0, 1}


def test_requantizing_is_flagged():
    q8_source = QuantSource(
        "llama", 1, 1, 1, 0, (SourceTensor("blk.0.attn_q.weight", (256, 256), int(G.Q8_0)),)
    )
    assert quant_row(q8_source, F.MOSTLY_Q4_K_M).requantize
    assert not quant_row(q8_source, F.MOSTLY_Q8_0).requantize


def test_sizes_are_the_sum_of_row_sizes():
    src = dense(n_layer=4, n_embd=512, n_head=8, n_head_kv=2, head_dim=64, n_ff=1024, n_vocab=1000)
    row = quant_row(src, F.MOSTLY_Q4_K_M)
    for t in row.tensors:
        assert t.nbytes == tensor_nbytes(t.type, t.dims)
    assert row.weights_bytes == sum(t.nbytes for t in row.tensors)
    padded = sum(-(-t.nbytes // 32) * 32 for t in row.tensors)
    assert row.file_bytes == row.header_bytes + padded
    assert row.header_bytes % 32 == 0
    assert row.type_counts()["q6_K"] == 1 + 2 * len(more_bits_layers(4))
    assert 4.5 < row.bits_per_weight < 6.5


def test_row_as_json():
    import json

    row = quant_row(dense(n_layer=4), F.MOSTLY_Q4_K_M)
    d = json.loads(json.dumps(row.as_dict()))
    assert d["type"] == "Q4_K_M" and d["ftype"] == 15
    assert d["file_bytes"] == row.file_bytes and d["weights_bytes"] == row.weights_bytes
    assert sum(d["tensor_types"].values()) == len(row.tensors)
    assert d["error"] is None
    refused = QuantSource("llama", 1, 1, 1, 0, (SourceTensor("blk.0.attn_q.weight", (96, 64)),))
    assert quant_row(refused, F.MOSTLY_Q1_0).as_dict()["error"]


def test_quant_sizes_covers_every_llama_quantize_type():
    rows = quant_sizes(dense(n_layer=4))
    assert [r.ftype for r in rows] == list(QUANTIZE_FTYPES)
    by_name = {r.name: r for r in rows}
    assert by_name["Q2_K"].file_bytes < by_name["Q4_K_M"].file_bytes < by_name["Q8_0"].file_bytes
    assert by_name["Q8_0"].file_bytes < by_name["F16"].file_bytes < by_name["F32"].file_bytes


# -- against real files ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("qmodels")
    out = {}
    for i, (arch, make) in enumerate(gf.SPECS.items()):
        for j, wtype in enumerate(("F16", "Q8_0", "Q4_K")):
            p = d / f"{arch}-{wtype}.gguf"
            gf.write_model(p, make(), wtype, seed=10 * i + j)
            out[f"{arch}-{wtype}"] = p
    return out


@pytest.mark.parametrize("arch", list(gf.SPECS))
def test_same_type_quantization_predicts_the_file_size(written, arch):
    """F16 of an F16 file and Q8_0 of a Q8_0 file are the file itself, byte for byte in size."""
    for wtype, ftype in (("F16", F.MOSTLY_F16), ("Q8_0", F.MOSTLY_Q8_0)):
        path = written[f"{arch}-{wtype}"]
        model = read_gguf(path)
        row = quant_row(quant_source(model), ftype)
        assert row.file_bytes == path.stat().st_size, wtype
        assert row.meta_bytes == model.files[0].header_nbytes
        assert row.header_bytes == model.data_offset
        assert not row.requantize


@pytest.mark.parametrize("arch", list(gf.SPECS))
@pytest.mark.parametrize("ftype", [F.MOSTLY_Q4_K_M, F.MOSTLY_Q3_K_S, F.MOSTLY_IQ4_XS])
def test_predicted_size_matches_a_file_written_with_those_types(written, tmp_path, arch, ftype):
    row = quant_row(quant_source(read_gguf(written[f"{arch}-F16"])), ftype)
    types = {t.name: t.type.name for t in row.tensors if t.quantizable}
    out = tmp_path / "requant.gguf"
    gf.write_model(out, gf.SPECS[arch](), "F16", tensor_types=types, file_type=int(ftype))
    assert row.file_bytes == out.stat().st_size
    m = read_gguf(out)
    assert {t.name: t.type for t in m.tensors} == {t.name: int(t.type) for t in row.tensors}


@pytest.mark.parametrize("arch", list(gf.SPECS))
def test_source_types_do_not_change_the_prediction(written, arch):
    rows = [quant_sizes(read_gguf(written[f"{arch}-{w}"])) for w in ("F16", "Q8_0", "Q4_K")]
    for a, b, c in zip(*rows, strict=True):
        assert a.file_bytes == b.file_bytes == c.file_bytes, a.name
        assert types_of(a) == types_of(b) == types_of(c)


@pytest.mark.parametrize("arch", ["qwen3", "qwen3moe"])
def test_as_quantized_is_the_header_of_that_file(written, tmp_path, arch):
    source = read_gguf(written[f"{arch}-F16"])
    row = quant_row(quant_source(source), F.MOSTLY_Q4_K_M)
    what_if = as_quantized(source, row)
    types = {t.name: t.type.name for t in row.tensors if t.quantizable}
    out = tmp_path / "q4km.gguf"
    gf.write_model(out, gf.SPECS[arch](), "F16", tensor_types=types, file_type=15)
    real = read_gguf(out)

    def table(m):
        return {t.name: (t.type, t.dims, t.nbytes) for t in m.tensors}

    assert table(what_if) == table(real)
    assert what_if.data_offset == real.data_offset
    assert what_if.file_size == real.file_size == row.file_bytes
    assert what_if.file_type_name == "Q4_K_M"
    assert set(what_if.metadata) == set(real.metadata)
    assert what_if.files[0].header_nbytes == real.files[0].header_nbytes
    # llama-quantize's order: by layer, then name; each tensor padded to 32 bytes
    names = [t.name for t in what_if.tensors]
    assert names == sorted(names, key=tensor_sort_key)
    for a, b in itertools.pairwise(what_if.tensors):
        assert b.offset >= a.offset + a.nbytes and b.offset % 32 == 0
    assert what_if.n_layer == source.n_layer and what_if.vocab_size == source.vocab_size
    assert what_if.tokens is not None and what_if.tokens.values() == source.tokens.values()


def test_as_quantized_joins_a_split_model(tmp_path):
    parts = gf.write_model(tmp_path / "sp.gguf", gf.llama_spec(), "F16", split_max_tensors=20)
    source = read_gguf(parts[1])
    what_if = as_quantized(source, quant_row(quant_source(source), F.MOSTLY_Q8_0))
    assert what_if.split_count == 1
    assert not any(k.startswith("split.") for k in what_if.metadata)
    assert what_if.path == str(tmp_path / "sp-Q8_0.gguf")
    assert {t.split for t in what_if.tensors} == {0}
    assert len(what_if.tensors) == len(source.tensors)


def test_split_model_predicts_the_same_as_one_file(tmp_path):
    whole = tmp_path / "whole.gguf"
    gf.write_model(whole, gf.gemma3_spec(), "Q8_0")
    parts = gf.write_model(tmp_path / "sp.gguf", gf.gemma3_spec(), "Q8_0", split_max_tensors=30)
    assert len(parts) > 1
    a = quant_sizes(read_gguf(whole))
    b = quant_sizes(read_gguf(parts[0]))
    assert [r.file_bytes for r in a] == [r.file_bytes for r in b]


def test_gemma3_tiny_model_q4_k_m(written):
    row = quant_row(quant_source(read_gguf(written["gemma3-F16"])), F.MOSTLY_Q4_K_M)
    types = types_of(row)
    assert types["token_embd.weight"] == G.Q6_K  # tied
    assert layers_with(types, "attn_v.weight", G.Q6_K) == more_bits_layers(6)
    assert types["blk.0.attn_q_norm.weight"] == G.F32


# -- against llama.cpp's own type-selection snapshots -------------------------------------------
# tests/snapshots/*.schema in the pinned llama.cpp tree list, per ftype, every tensor of real
# models whose type differs from the default. They are read from $LLTUI_LLAMA_CPP_SRC (a llama.cpp
# tree) or from the sdist that `lltui llama install` keeps in the user cache.


def _snapshot_texts() -> dict[str, str]:
    tree = os.environ.get("LLTUI_LLAMA_CPP_SRC")
    if tree:
        snap = Path(tree) / "tests" / "snapshots"
        return {p.stem: p.read_text() for p in snap.glob("*.schema")}
    for cuda in (False, True):
        archive = llama_build.flavor_root(cuda) / "download" / llama_build.sdist_name()
        if archive.is_file():
            texts = {}
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar:
                    if member.isfile() and "/tests/snapshots/" in member.name:
                        f = tar.extractfile(member)
                        if f is not None and member.name.endswith(".schema"):
                            texts[Path(member.name).stem] = f.read().decode()
            return texts
    return {}


@pytest.fixture(scope="module")
def snapshots() -> dict[str, str]:
    texts = _snapshot_texts()
    if not texts:
        pytest.skip("no llama.cpp source: set LLTUI_LLAMA_CPP_SRC or run `lltui llama install`")
    return texts


def _gpt_oss() -> QuantSource:
    e, x = 2880, 128
    t = [SourceTensor("token_embd.weight", (e, 201088)), SourceTensor("output.weight", (e, 201088))]
    for i in range(36):
        b = f"blk.{i}."
        t += [
            SourceTensor(b + "attn_q.weight", (e, 4096)),
            SourceTensor(b + "attn_k.weight", (e, 512)),
            SourceTensor(b + "attn_v.weight", (e, 512)),
            SourceTensor(b + "attn_output.weight", (4096, e)),
            SourceTensor(b + "attn_sinks.weight", (64,), 0),
            SourceTensor(b + "ffn_gate_inp.weight", (e, x), 0),
            SourceTensor(b + "ffn_gate_exps.weight", (e, e, x)),
            SourceTensor(b + "ffn_up_exps.weight", (e, e, x)),
            SourceTensor(b + "ffn_down_exps.weight", (e, e, x)),
        ]
    return QuantSource("gpt-oss", 36, 64, 8, x, tuple(t))


def _deepseek_v3() -> QuantSource:
    e, n_head, x = 7168, 128, 256
    t = [SourceTensor("token_embd.weight", (e, 129280)), SourceTensor("output.weight", (e, 129280))]
    for i in range(61):
        b = f"blk.{i}."
        t += [
            SourceTensor(b + "attn_q_a.weight", (e, 1536)),
            SourceTensor(b + "attn_q_b.weight", (1536, n_head * 192)),
            SourceTensor(b + "attn_kv_a_mqa.weight", (e, 576)),
            SourceTensor(b + "attn_k_b.weight", (128, 512, n_head)),
            SourceTensor(b + "attn_v_b.weight", (512, 128, n_head)),
            SourceTensor(b + "attn_output.weight", (n_head * 128, e)),
        ]
        if i < 3:
            t += [
                SourceTensor(b + "ffn_gate.weight", (e, 18432)),
                SourceTensor(b + "ffn_up.weight", (e, 18432)),
                SourceTensor(b + "ffn_down.weight", (18432, e)),
            ]
        else:
            t += [
                SourceTensor(b + "ffn_gate_exps.weight", (e, 2048, x)),
                SourceTensor(b + "ffn_up_exps.weight", (e, 2048, x)),
                SourceTensor(b + "ffn_down_exps.weight", (2048, e, x)),
                SourceTensor(b + "ffn_gate_shexp.weight", (e, 2048)),
                SourceTensor(b + "ffn_up_shexp.weight", (e, 2048)),
                SourceTensor(b + "ffn_down_shexp.weight", (2048, e)),
            ]
    return QuantSource("deepseek2", 61, n_head, 1, x, tuple(t))


SNAPSHOT_MODELS = {
    "qwen3-0.6b": lambda: dense(28, 1024, 16, 8, 128, 3072, 151936, arch="qwen3"),
    "qwen3-14b": lambda: dense(40, 5120, 40, 8, 128, 17408, 151936, arch="qwen3"),
    "meta-llama-3.1-70b-instruct": lambda: dense(80, 8192, 64, 8, 128, 28672, 128256),
    "gemma-3-4b-it": lambda: dense(34, 2560, 8, 4, 256, 10240, 262144, tied=True, arch="gemma3"),
    "gpt-oss-120b": _gpt_oss,
    "deepseek-v3.1": _deepseek_v3,
}


def _parse_schema(text: str) -> dict[str, tuple[str, dict[str, str]]]:
    sections: dict[str, tuple[str, dict[str, str]]] = {}
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            ftype, default = line[1:].split("] ")
            current = {}
            sections[ftype] = (default, current)
        else:
            name, qtype = line.rsplit(" ", 1)
            current[name] = qtype
    return sections


FTYPE_BY_NAME = {name: ftype for ftype, name in FTYPE_NAMES.items()}


@pytest.mark.parametrize("model", list(SNAPSHOT_MODELS))
def test_matches_llama_cpp_type_selection_snapshots(snapshots, model):
    sections = _parse_schema(snapshots[model])
    src = SNAPSHOT_MODELS[model]()
    assert len(sections) > 30
    for ftype_name, (default, overrides) in sections.items():
        # the snapshots are made without an importance matrix
        row = quant_row(src, FTYPE_BY_NAME[ftype_name], imatrix=False)
        assert row.error is None, (ftype_name, row.error)
        got = {t.name: t.type for t in row.tensors if t.quantizable}
        assert set(overrides) <= set(got), ftype_name
        for name, qtype in got.items():
            want = type_from_name(overrides.get(name, default))
            assert qtype == want, (ftype_name, name)


# -- against the real llama-quantize -----------------------------------------------------------

REAL_FTYPES = ("Q4_K_M", "Q3_K_M", "Q2_K", "IQ4_XS", "Q5_K_S", "Q4_0", "MXFP4_MOE", "BF16")
IMATRIX_FTYPES = ("IQ2_XXS", "IQ3_XXS", "Q2_K_S", "Q4_0")


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(gf.SPECS))
def test_llama_quantize_writes_the_predicted_files(llama_bins, tmp_path, arch):
    quantize = llama_bins.binaries["llama-quantize"]
    src = tmp_path / "f16.gguf"
    gf.write_model(src, gf.SPECS[arch](), "F16")
    imatrix = gf.write_imatrix(tmp_path / "imatrix.gguf", src, dataset="calibration.txt")
    model = read_gguf(src)
    runs = [(ft, False) for ft in REAL_FTYPES] + [(ft, True) for ft in IMATRIX_FTYPES]
    for name, with_imatrix in runs:
        row = quant_row(
            quant_source(model),
            FTYPE_BY_NAME[name],
            imatrix=with_imatrix,
            imatrix_file=str(imatrix),
            imatrix_dataset="calibration.txt",
        )
        out = tmp_path / f"{name}.gguf"
        argv = [str(quantize), *(["--imatrix", str(imatrix)] if with_imatrix else [])]
        proc = subprocess.run(
            [*argv, str(src), str(out), name, "2"], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr[-500:]
        written = read_gguf(out)
        assert {t.name: t.type for t in written.tensors} == {
            t.name: int(t.type) for t in row.tensors
        }, name
        assert out.stat().st_size == row.file_bytes, name
        what_if = as_quantized(model, row)
        assert [(t.name, t.type, t.dims, t.file_offset) for t in what_if.tensors] == [
            (t.name, t.type, t.dims, t.file_offset) for t in written.tensors
        ], name
        assert written.data_offset == what_if.data_offset
        assert set(written.metadata) - set(what_if.metadata) <= {
            "quantize.imatrix.file",
            "quantize.imatrix.dataset",
            "quantize.imatrix.entries_count",
            "quantize.imatrix.chunks_count",
        }
        out.unlink()


def test_a_device_of_unknown_memory_is_no_yes(tmp_path, capsys):
    """An rpc-server that did not answer: every row said "fits yes" where fit says '-'."""
    (path,) = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0")
    assert main(["quant", str(path), "--gpus", "rpc:127.0.0.1:1", "--json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["devices"]]
    assert rows and all(r["fits"] is None for r in rows)
    assert all(r["fits_unknown_on"] == ["RPC0[127.0.0.1:1]"] for r in rows)
