"""The compute graph of llama-like decoders, as llama.cpp's graph builders make it for a reserve.

One builder, switched by the model's tensors and hparams, covers: llama (mistral-style GGUFs,
mixtral MoE), mistral3 (attention temperature scaling), qwen2 (Q/K/V and output biases),
qwen3 (Q/K norms), qwen2moe (a gated shared expert), qwen3moe (softmax-routed experts),
gemma3 (scaled embeddings, post norms, scaled Q, GELU, sliding-window layers with their own
cache), phi3 (fused QKV and gate/up matrices), gpt2 and starcoder (learned positions,
LayerNorm, biases, GELU), gpt-oss (sinks, biased experts, models/openai-moe.cpp), glm4moe
(sigmoid routing with a selection bias, a shared expert, dense leading layers; MTP layers
are not in the graph), deepseek2 with MLA (low-rank Q, a K-only latent cache, heads
decompressed by attn_k_b/attn_v_b). Built from src/models/*.cpp, src/llama-graph.cpp
(build_inp_embd, build_qkv, build_attn, build_attn_mha, build_ffn, build_moe_ffn) and
src/llama-kv-cache.cpp (cpy_k, cpy_v, get_k, get_v, the Hadamard rotation inputs).
"""

from __future__ import annotations

from dataclasses import dataclass

from lltui.core.ggml import graph as gg
from lltui.core.ggml.graph import F16, F32, HOST, I32, I64, Graph, Tensor
from lltui.core.gguf.types import type_info

LLAMA_FAMILY = frozenset(
    {
        "llama",
        "qwen2",
        "qwen3",
        "qwen3moe",
        "gemma3",
        "phi3",
        "gpt2",
        "starcoder",
        "gpt-oss",
        "glm4moe",
        "mistral3",
        "qwen2moe",
        "deepseek2",
    }
)


@dataclass(frozen=True, slots=True)
class LayerShape:
    n_head: int
    n_head_kv: int
    n_ff: int  # dense FFN width; 0 for an MoE layer
    moe: bool


@dataclass(frozen=True, slots=True)
class LlamaShape:
    """What the graph depends on: model dimensions, optional tensors, and the settings."""

    n_embd: int
    n_vocab: int
    head_k: int
    head_v: int
    layers: tuple[LayerShape, ...]
    n_expert: int
    n_expert_used: int
    n_ff_exp: int
    qkv_bias: bool
    wo_bias: bool
    qk_norm: bool
    output_bias: bool
    # settings
    flash_attn: bool
    type_k: int
    type_v: int
    kv_size: int  # cells per stream
    n_stream: int  # KV streams (1 when unified)
    kv_unified: bool
    # placement: the device of each layer and of the output (HOST: the CPU), weights placed
    # elsewhere than their layer (-ot, --cpu-moe), the KV cache in host memory (-nkvo), and
    # whether llama.cpp pins each layer's norms to the layer's device
    layer_dev: tuple[int, ...] = ()
    moved: tuple[tuple[str, int], ...] = ()
    kv_host: bool = False
    full_offload: bool = False
    # ggml types of the weights a GPU may copy (host weights under op offload); others F32
    weight_types: tuple[tuple[str, int], ...] = ()
    # gemma3: scaled embeddings, post-attention and post-FFN norms, scaled Q, GELU; with
    # sliding-window layers (iSWA) their own cache of kv_size_swa cells
    gemma3: bool = False
    # phi3: one attn_qkv matrix, Q scaled, one ffn_up of gate and up (SwiGLU on halves),
    # the block's last add taking the residual first
    phi3: bool = False
    fused_qkv: bool = False
    # gpt2/starcoder: learned position embeddings, LayerNorm with biases, no rope, biased
    # matmuls, a plain GELU FFN
    gpt2: bool = False
    # gpt-oss: attention sinks, post-attention norm, biased router and experts, softmax over
    # the chosen experts' logits, SwiGLU-OAI, the output rows picked after the last layer
    oss: bool = False
    # MoE routing: gating (1 softmax, 2 sigmoid), a selection bias, normalised and scaled
    # weights, a shared expert of this width; glm4moe reads the FFN norm after attention
    gating: int = 1
    probs_bias: bool = False
    norm_w: bool = True
    w_scale: bool = False
    n_ff_shexp: int = 0
    glm4moe: bool = False
    groups: tuple[int, int] = (0, 0)  # expert groups and groups used (DeepSeek-V3 routing)
    shexp_gated: bool = False  # qwen2moe: the shared expert scaled by a sigmoid of its own gate
    n_ff_shexp_gated: int = 0
    attn_temp: bool = False  # mistral3 with temperature scaling: Q times a per-token input
    # deepseek2's MLA: (kv_lora_rank, q_lora_rank, full K head, full V head, rope dims)
    mla: tuple[int, ...] = ()
    swa: tuple[bool, ...] = ()
    kv_size_swa: int = 0


@dataclass(frozen=True, slots=True)
class Ubatch:
    n_tokens: int
    n_seqs: int
    n_outputs: int


def _rot_sizes(s: LlamaShape) -> tuple[int, int]:
    """Hadamard rotation sizes llama_kv_cache picks for quantized K/V caches."""
    rot_k = rot_v = 0
    if type_info(s.type_k).quantized and s.head_k % 64 == 0:
        rot_k = 64
        while s.head_k % (2 * rot_k) == 0:
            rot_k *= 2
    if type_info(s.type_v).quantized and s.head_v % 64 == 0:
        rot_v = 64
    return rot_k, rot_v


@dataclass(frozen=True, slots=True)
class _CacheInputs:
    """The inputs of one KV cache: rows to write K and V to, the mask, Hadamard rotations."""

    k_idxs: Tensor
    v_idxs: Tensor
    kq_mask: Tensor
    k_rot: Tensor | None
    v_rot: Tensor | None

    @staticmethod
    def make(s: LlamaShape, ub: Ubatch, kv_size: int) -> _CacheInputs:
        T = ub.n_tokens
        n_v_max = max(lay.n_head_kv for lay in s.layers) * s.head_v
        v_rows = T if s.flash_attn else T * n_v_max
        streams = 1 if s.kv_unified else ub.n_seqs
        mask_type = F16 if s.flash_attn else F32
        rot_k, rot_v = _rot_sizes(s)
        return _CacheInputs(
            gg.new_input(I64, (T,), "attn_inp_k_idxs"),
            gg.new_input(I64, (v_rows,), "attn_inp_v_idxs"),
            gg.new_input(mask_type, (kv_size, T // streams, 1, streams), "attn_inp_kq_mask"),
            gg.new_input(F32, (rot_k, rot_k), "attn_inp_k_rot") if rot_k else None,
            gg.new_input(F32, (rot_v, rot_v), "attn_inp_v_rot") if rot_v else None,
        )


class _Builder:
    """One graph build: the inputs shared by every layer, then the layers in order."""

    def __init__(self, s: LlamaShape, ub: Ubatch) -> None:
        self.s = s
        self.T = ub.n_tokens
        self.ub = ub
        self.g = Graph()
        self.moved = dict(s.moved)
        self.types = dict(s.weight_types)
        # llama.cpp pins each layer's norms to its device for small batches or full offload
        self.pin_norms = s.full_offload or ub.n_tokens < 32
        self.il = -1  # the layer being built
        E, T = s.n_embd, self.T
        self.tok_embd = gg.external(F32, (E, s.n_vocab), "token_embd.weight")
        self.pos = gg.new_input(I32, (T,), "inp_pos")
        self.attn_scale = gg.new_input(F32, (1, 1, T), "inp_attn_scale") if s.attn_temp else None
        self.base = _CacheInputs.make(s, ub, s.kv_size)
        self.swa = _CacheInputs.make(s, ub, s.kv_size_swa) if any(s.swa) else None
        self.out_ids = gg.new_input(I32, (ub.n_outputs,), "out_ids")

    def dev(self, il: int) -> int:
        """The device of layer ``il`` (-1: the output layer)."""
        if not self.s.layer_dev:
            return HOST
        return self.s.layer_dev[il if il >= 0 else len(self.s.layers)]

    def w(self, name: str, *dims: int) -> Tensor:
        """A weight of the current layer (or the output layer), where llama.cpp put it."""
        full = f"blk.{self.il}.{name}" if self.il >= 0 else name
        loc = self.moved.get(full, self.dev(self.il))
        return gg.external(self.types.get(full, F32), dims, full, loc=loc)

    def rms_norm(self, x: Tensor) -> Tensor:
        """build_norm's RMS norm: pinned to the layer's device where llama.cpp does so."""
        t = gg.unary("RMS_NORM", x)
        if self.pin_norms and self.il >= 0:
            t = gg.pinned(t, self.dev(self.il))
        return t

    # -- inputs --------------------------------------------------------------------------------

    def inp_embd(self) -> Tensor:
        E, T = self.s.n_embd, self.T
        tokens = gg.new_input(I32, (T,), "inp_tokens")
        embd = gg.new_input(F32, (E, T), "inp_embd")
        tok = gg.get_rows(self.tok_embd, tokens)
        mixed_tokens = gg.new_input(I32, (T,), "inp_mixed_tokens")
        mixed_slots = gg.new_input(I64, (T,), "inp_mixed_slots")
        mixed_embd = gg.new_input(F32, (E, T), "inp_mixed_embd")
        mixed = gg.set_rows(
            gg.unary("DUP", mixed_embd), gg.get_rows(self.tok_embd, mixed_tokens), mixed_slots
        )
        for t in (tok, embd, mixed):
            self.g.expand(t)
        if self.s.gemma3:
            # token rows scaled by sqrt(n_embd) after the select, by an input of row factors
            tok = gg.unary("MUL", tok, gg.new_input(F32, (1, T), "inp_scale_rows"))
            self.g.expand(tok)
        return tok

    # -- attention -----------------------------------------------------------------------------

    def hadamard(self, cur: Tensor, rot: Tensor) -> Tensor:
        n = rot.ne[0]
        flat = gg.nelements(cur) // n
        res = gg.reshape(cur, n, flat) if gg.is_contiguous(cur) else gg.cont(cur, n, flat)
        res = gg.mul_mat(rot, res)
        return gg.reshape(res, *cur.ne)

    def qkv(self, lay: LayerShape, cur: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """build_qkv: separate Q/K/V matmuls (+ biases), or views of one fused matmul."""
        s, T = self.s, self.T
        hk, hv = s.head_k, s.head_v
        n_q, n_k, n_v = lay.n_head * hk, lay.n_head_kv * hk, lay.n_head_kv * hv
        if s.fused_qkv:
            qkv = gg.mul_mat(self.w("attn_qkv.weight", s.n_embd, n_q + n_k + n_v), cur)
            if s.qkv_bias:
                qkv = gg.unary("ADD", qkv, self.w("attn_qkv.bias", n_q + n_k + n_v))
            row = qkv.nb[1]
            return (
                gg.view(qkv, (hk, lay.n_head, T), (gg.row_bytes(F32, hk), row)),
                gg.view(qkv, (hk, lay.n_head_kv, T), (gg.row_bytes(F32, hk), row)),
                gg.view(qkv, (hv, lay.n_head_kv, T), (gg.row_bytes(F32, hv), row)),
            )
        q = gg.mul_mat(self.w("attn_q.weight", s.n_embd, n_q), cur)
        if s.qkv_bias:
            q = gg.unary("ADD", q, self.w("attn_q.bias", n_q))
        k = gg.mul_mat(self.w("attn_k.weight", s.n_embd, n_k), cur)
        if s.qkv_bias:
            k = gg.unary("ADD", k, self.w("attn_k.bias", n_k))
        v = gg.mul_mat(self.w("attn_v.weight", s.n_embd, n_v), cur)
        if s.qkv_bias:
            v = gg.unary("ADD", v, self.w("attn_v.bias", n_v))
        return (
            gg.reshape(q, hk, lay.n_head, T),
            gg.reshape(k, hk, lay.n_head_kv, T),
            gg.reshape(v, hv, lay.n_head_kv, T),
        )

    def attention_mla(self, lay: LayerShape, cur: Tensor) -> Tensor:
        """deepseek2's multi-head latent attention: Q through a low rank, one compressed KV
        row (latent + rope part) per token in a K-only cache, heads decompressed by wv_b."""
        s, g, T = self.s, self.g, self.T
        kv_lora, q_lora, hk, hv, rope = s.mla
        nope, E, H = hk - rope, s.n_embd, lay.n_head
        if q_lora:
            q = gg.mul_mat(self.w("attn_q_a.weight", E, q_lora), cur)
            q = gg.unary("MUL", self.rms_norm(q), self.w("attn_q_a_norm.weight", q_lora))
            q = gg.mul_mat(self.w("attn_q_b.weight", q_lora, H * hk), q)
        else:  # the lite variants: one Q matrix
            q = gg.mul_mat(self.w("attn_q.weight", E, H * hk), cur)
        q = gg.reshape(q, hk, H, T)
        kv_pe = gg.mul_mat(self.w("attn_kv_a_mqa.weight", E, kv_lora + rope), cur)
        row = kv_pe.nb[1]
        kv_cmpr = gg.view(kv_pe, (kv_lora, T), (row,))
        k_pe = gg.unary("ROPE", gg.view(kv_pe, (rope, 1, T), (row, row)), self.pos)
        kv_cmpr = gg.unary("MUL", self.rms_norm(kv_cmpr), self.w("attn_kv_a_norm.weight", kv_lora))
        q_nope = gg.view(q, (nope, H, T), (q.nb[1], q.nb[2]))
        q_pe = gg.unary("ROPE", gg.view(q, (rope, H, T), (q.nb[1], q.nb[2])), self.pos)
        wk_b = self.w("attn_k_b.weight", nope, kv_lora, H)
        q_abs = gg.permute(gg.mul_mat(wk_b, gg.permute(q_nope, 0, 2, 1, 3)), 0, 2, 1, 3)
        q_cur = gg.new(F32, (kv_lora + rope, H, T), "CONCAT", (q_abs, q_pe))
        kv_cmpr = gg.reshape(kv_cmpr, kv_lora, 1, T)
        k_cur = gg.new(F32, (kv_lora + rope, 1, T), "CONCAT", (kv_cmpr, k_pe))
        v_cur = kv_cmpr
        if self.attn_scale is not None:
            q_cur = gg.unary("MUL", q_cur, self.attn_scale)
        for t in (q_cur, v_cur, k_cur):
            g.expand(t)
        ci = self.base
        n_k = lay.n_head_kv * s.head_k
        kv_loc = HOST if s.kv_host else self.dev(self.il)
        k_cache = gg.external(s.type_k, (n_k, s.kv_size, s.n_stream), loc=kv_loc, weight=False)
        g.expand(self.cpy_k(k_cur, k_cache, ci))
        kb = gg.row_bytes(s.type_k, s.head_k), gg.row_bytes(s.type_k, n_k)
        k_view = gg.view(
            k_cache,
            (s.head_k, lay.n_head_kv, s.kv_size, s.n_stream),
            (*kb, gg.row_bytes(s.type_k, n_k * s.kv_size)),
        )
        v_view = gg.view(k_view, (v_cur.ne[0], *k_view.ne[1:]), k_view.nb[1:])
        v_mla = self.w("attn_v_b.weight", kv_lora, hv, H)
        cur = self.mha(q_cur, k_view, v_view, ci.kq_mask, v_mla=v_mla)
        return gg.mul_mat(self.w("attn_output.weight", H * hv, E), cur)

    def attention(self, lay: LayerShape, cur: Tensor) -> Tensor:
        s = self.s
        if s.mla:
            return self.attention_mla(lay, cur)
        hk = s.head_k
        q, k, v = self.qkv(lay, cur)
        if s.qk_norm:
            q = gg.unary("MUL", self.rms_norm(q), self.w("attn_q_norm.weight", hk))
        if not s.gpt2:
            q = gg.unary("ROPE", q, self.pos)
        if s.qk_norm:
            k = gg.unary("MUL", self.rms_norm(k), self.w("attn_k_norm.weight", hk))
        if not s.gpt2:
            k = gg.unary("ROPE", k, self.pos)
        if s.gemma3 or s.phi3:
            q = gg.unary("SCALE", q)
        if self.attn_scale is not None:
            q = gg.unary("MUL", q, self.attn_scale)
        return self.attn_kv(lay, q, k, v)

    def attn_kv(self, lay: LayerShape, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        s, g = self.s, self.g
        is_swa = bool(s.swa) and s.swa[self.il]
        ci = self.swa if is_swa and self.swa is not None else self.base
        kv_size = s.kv_size_swa if is_swa else s.kv_size
        if ci.k_rot is not None:
            q = self.hadamard(q, ci.k_rot)
            k = self.hadamard(k, ci.k_rot)
        if ci.v_rot is not None:
            v = self.hadamard(v, ci.v_rot)
        # build_attn expands q, v, k with one cache, q, k, v with two (iSWA)
        for t in (q, k, v) if self.swa is not None else (q, v, k):
            g.expand(t)
        n_k = lay.n_head_kv * s.head_k
        n_v = lay.n_head_kv * s.head_v
        kv_loc = HOST if s.kv_host else self.dev(self.il)
        k_cache = gg.external(s.type_k, (n_k, kv_size, s.n_stream), loc=kv_loc, weight=False)
        v_cache = gg.external(s.type_v, (n_v, kv_size, s.n_stream), loc=kv_loc, weight=False)
        g.expand(self.cpy_k(k, k_cache, ci))
        g.expand(self.cpy_v(v, v_cache, ci))
        k_view = gg.view(
            k_cache,
            (s.head_k, lay.n_head_kv, kv_size, s.n_stream),
            (
                gg.row_bytes(s.type_k, s.head_k),
                gg.row_bytes(s.type_k, n_k),
                gg.row_bytes(s.type_k, n_k * kv_size),
            ),
        )
        if s.flash_attn:
            v_view = gg.view(
                v_cache,
                (s.head_v, lay.n_head_kv, kv_size, s.n_stream),
                (
                    gg.row_bytes(s.type_v, s.head_v),
                    gg.row_bytes(s.type_v, n_v),
                    gg.row_bytes(s.type_v, n_v * kv_size),
                ),
            )
        else:
            v_view = gg.view(
                v_cache,
                (kv_size, lay.n_head_kv, s.head_v, s.n_stream),
                (
                    gg.row_bytes(s.type_v, kv_size * s.head_v),
                    gg.row_bytes(s.type_v, kv_size),
                    gg.row_bytes(s.type_v, kv_size * n_v),
                ),
            )
        sinks = self.w("attn_sinks.weight", lay.n_head) if s.oss else None
        cur = self.mha(q, k_view, v_view, ci.kq_mask, sinks)
        if ci.v_rot is not None:
            cur = self.hadamard(cur, ci.v_rot)
        cur = gg.mul_mat(self.w("attn_output.weight", lay.n_head * s.head_v, s.n_embd), cur)
        if s.wo_bias:
            cur = gg.unary("ADD", cur, self.w("attn_output.bias", s.n_embd))
        return cur

    def cpy_k(self, k_cur: Tensor, k_cache: Tensor, ci: _CacheInputs) -> Tensor:
        n_gqa = k_cur.ne[0] * k_cur.ne[1]
        rows = gg.view(k_cur, (n_gqa, k_cur.ne[2]), (k_cur.nb[2],))
        if self.s.n_stream > 1:
            k_cache = gg.reshape(k_cache, n_gqa, k_cache.ne[1] * self.s.n_stream)
        return gg.set_rows(k_cache, rows, ci.k_idxs)

    def cpy_v(self, v_cur: Tensor, v_cache: Tensor, ci: _CacheInputs) -> Tensor:
        n_gqa = v_cur.ne[0] * v_cur.ne[1]
        if self.s.flash_attn:
            rows = gg.view(v_cur, (n_gqa, v_cur.ne[2]), (v_cur.nb[2],))
            if self.s.n_stream > 1:
                v_cache = gg.reshape(v_cache, n_gqa, v_cache.ne[1] * self.s.n_stream)
            return gg.set_rows(v_cache, rows, ci.v_idxs)
        if gg.row_bytes(v_cur.type, n_gqa) == v_cur.nb[2]:
            flat = gg.reshape(v_cur, n_gqa, v_cur.ne[2])
        else:
            flat = gg.cont(v_cur, n_gqa, v_cur.ne[2])
        if n_gqa < v_cache.ne[0]:
            flat = gg.new(flat.type, (v_cache.ne[0], flat.ne[1]), "PAD", (flat,))
        v_flat = gg.reshape(v_cache, 1, gg.nelements(v_cache))
        flat = gg.reshape(flat, 1, gg.nelements(flat))
        return gg.set_rows(v_flat, flat, ci.v_idxs)

    def mha(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor,
        sinks: Tensor | None = None,
        v_mla: Tensor | None = None,
    ) -> Tensor:
        v_trans = v.nb[1] > v.nb[2]
        n_stream = k.ne[3]
        per = q.ne[2] // n_stream
        q = gg.view(q, (q.ne[0], q.ne[1], per, n_stream), (q.nb[1], q.nb[2], q.nb[2] * per))
        q = gg.permute(q, 0, 2, 1, 3)
        k = gg.permute(k, 0, 2, 1, 3)
        v = gg.permute(v, 0, 2, 1, 3)
        if self.s.flash_attn:
            if v_trans:
                v = gg.transpose(v)
            cur = gg.flash_attn_ext(q, k, v, mask)
            if sinks is not None:
                cur = gg.Tensor(cur.op, cur.type, cur.ne, cur.nb, (*cur.src, sinks))
            if v_mla is not None:
                # decompress the heads: a matmul with the tokens in dimension 1
                cur = gg.mul_mat(v_mla, gg.permute(cur, 0, 2, 1, 3))
                cur = gg.cont(gg.permute(cur, 0, 2, 1, 3))
            cur = gg.reshape(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
        else:
            kq = gg.mul_mat(k, q)
            kq = gg.unary("SOFT_MAX", kq, mask, *((sinks,) if sinks is not None else ()))
            if not v_trans:
                v = gg.cont(gg.transpose(v))
            kqv = gg.mul_mat(v, kq)
            if v_mla is not None:
                kqv = gg.mul_mat(v_mla, kqv)
            cur = gg.permute(kqv, 0, 2, 1, 3)
            cur = gg.cont(cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
            if self.s.kv_host:
                # everything between the KV store and the attention output runs on the CPU
                cur = gg.pinned(cur, HOST)
        self.g.expand(cur)
        return cur

    # -- feed-forward --------------------------------------------------------------------------

    def ffn(self, lay: LayerShape, cur: Tensor) -> Tensor:
        E = self.s.n_embd
        if self.s.gpt2:
            up = gg.mul_mat(self.w("ffn_up.weight", E, lay.n_ff), cur)
            up = gg.unary("ADD", up, self.w("ffn_up.bias", lay.n_ff))
            act = gg.unary("UNARY", up)  # GELU
            down = gg.mul_mat(self.w("ffn_down.weight", lay.n_ff, E), act)
            return gg.unary("ADD", down, self.w("ffn_down.bias", E))
        if self.s.phi3:
            up = gg.mul_mat(self.w("ffn_up.weight", E, 2 * lay.n_ff), cur)
            act = gg.new(up.type, (lay.n_ff, *up.ne[1:]), "GLU", (up,))  # swiglu on halves
            return gg.mul_mat(self.w("ffn_down.weight", lay.n_ff, E), act)
        up = gg.mul_mat(self.w("ffn_up.weight", E, lay.n_ff), cur)
        gate = gg.mul_mat(self.w("ffn_gate.weight", E, lay.n_ff), cur)
        act = gg.glu_split(gate, up)
        return gg.mul_mat(self.w("ffn_down.weight", lay.n_ff, E), act)

    def shared_expert(self, cur: Tensor, width: int = 0) -> Tensor:
        E, F = self.s.n_embd, width or self.s.n_ff_shexp
        up = gg.mul_mat(self.w("ffn_up_shexp.weight", E, F), cur)
        gate = gg.mul_mat(self.w("ffn_gate_shexp.weight", E, F), cur)
        return gg.mul_mat(self.w("ffn_down_shexp.weight", F, E), gg.glu_split(gate, up))

    def gated_shared_expert(self, cur: Tensor) -> Tensor:
        gate_inp = gg.mul_mat(self.w("ffn_gate_inp_shexp.weight", self.s.n_embd), cur)
        gate = gg.unary("DIV", gg.unary("UNARY", gate_inp), gate_inp)  # silu(x) / x: sigmoid
        return gg.unary("MUL", self.shared_expert(cur, self.s.n_ff_shexp_gated), gate)

    def group_mask(self, selection: Tensor) -> Tensor:
        """build_moe_ffn's group selection: the best groups by their top two scores; the
        experts of the others masked out (filled with -inf, the kept rows set back)."""
        n_groups, n_used_groups = self.s.groups
        T = selection.ne[1]
        per = self.s.n_expert // n_groups
        groups = gg.reshape(selection, per, n_groups, T)
        top2 = gg.argsort_top_k(groups, 2)
        scores = gg.get_rows(gg.reshape(groups, 1, per, n_groups, T), top2)
        scores = gg.sum_rows(gg.reshape(scores, scores.ne[1], scores.ne[2], scores.ne[3]))
        scores = gg.reshape(scores, scores.ne[1], scores.ne[2])
        best = gg.argsort_top_k(scores, n_used_groups)
        kept = gg.get_rows(groups, best)
        masked = gg.set_rows(gg.unary("FILL", groups), kept, best)
        return gg.reshape(masked, self.s.n_expert, T)

    def moe(self, cur: Tensor) -> Tensor:
        s, g, T = self.s, self.g, cur.ne[1]  # the rows it gets (the outputs, last layer)
        E, n_exp, n_used, n_ff = s.n_embd, s.n_expert, s.n_expert_used, s.n_ff_exp
        logits = gg.mul_mat(self.w("ffn_gate_inp.weight", E, n_exp), cur)
        if s.oss:
            logits = gg.unary("ADD", logits, self.w("ffn_gate_inp.bias", n_exp))
            probs = logits  # softmax over the chosen experts' logits, below
        elif s.gating == 2:
            probs = gg.unary("UNARY", logits)  # sigmoid
        else:
            probs = gg.unary("SOFT_MAX", logits)
        selection = probs
        if s.probs_bias:
            selection = gg.unary("ADD", probs, self.w("exp_probs_b.bias", n_exp))
        if s.groups[0] > 1 and T > 0:
            selection = self.group_mask(selection)
        selected = gg.argsort_top_k(selection, n_used)
        weights = gg.get_rows(gg.reshape(probs, 1, n_exp, T), selected)
        if s.oss:
            weights = gg.unary("SOFT_MAX", gg.reshape(weights, n_used, T))
            weights = gg.reshape(weights, 1, n_used, T)
        if s.norm_w:
            weights = gg.reshape(weights, n_used, T)
            wsum = gg.unary("CLAMP", gg.sum_rows(weights))
            weights = gg.reshape(gg.unary("DIV", weights, wsum), 1, n_used, T)
        if s.w_scale:
            weights = gg.unary("SCALE", weights)
        g.expand(weights)
        x = gg.reshape(cur, E, 1, T)
        up = gg.mul_mat_id(self.w("ffn_up_exps.weight", E, n_ff, n_exp), x, selected)
        if s.oss:
            up = gg.unary("ADD_ID", up, self.w("ffn_up_exps.bias", n_ff, n_exp), selected)
        gate = gg.mul_mat_id(self.w("ffn_gate_exps.weight", E, n_ff, n_exp), x, selected)
        if s.oss:
            gate = gg.unary("ADD_ID", gate, self.w("ffn_gate_exps.bias", n_ff, n_exp), selected)
        act = gg.glu_split(gate, up)
        experts = gg.mul_mat_id(self.w("ffn_down_exps.weight", n_ff, E, n_exp), act, selected)
        if s.oss:
            experts = gg.unary("ADD_ID", experts, self.w("ffn_down_exps.bias", E, n_exp), selected)
        experts = gg.unary("MUL", experts, weights)
        g.expand(experts)
        views = [
            gg.view(
                experts,
                (E, T),
                (experts.nb[2],),
            )
            for _ in range(n_used)
        ]
        for vw in views:
            g.expand(vw)
        out = views[0]
        for vw in views[1:]:
            out = gg.unary("ADD", out, vw)
            g.expand(out)
        if n_used == 1:
            out = gg.cont(out)
        return out

    # -- the model -----------------------------------------------------------------------------

    def norm(self, x: Tensor, name: str) -> Tensor:
        if self.s.gpt2:
            # LayerNorm (not in place), then its weight and bias
            t = gg.unary("NORM", x)
            if self.pin_norms and self.il >= 0:
                t = gg.pinned(t, self.dev(self.il))
            t = gg.unary("MUL", t, self.w(name, self.s.n_embd))
            return gg.unary("ADD", t, self.w(name.replace(".weight", ".bias"), self.s.n_embd))
        return gg.unary("MUL", self.rms_norm(x), self.w(name, self.s.n_embd))

    def build(self) -> Graph:
        s, g = self.s, self.g
        inp = self.inp_embd()
        if s.gpt2:
            pos_embd = gg.external(F32, (s.n_embd, 1), "position_embd.weight")
            inp = gg.unary("ADD", inp, gg.get_rows(pos_embd, self.pos))
        last = len(s.layers) - 1
        for il, lay in enumerate(s.layers):
            self.il = il
            cur = self.attention(lay, self.norm(inp, "attn_norm.weight"))
            res = inp
            if il == last and not s.oss:
                cur = gg.get_rows(cur, self.out_ids)
                res = gg.get_rows(res, self.out_ids)
            if s.gemma3:
                cur = self.norm(cur, "post_attention_norm.weight")
            ffn_inp = gg.unary("ADD", cur, res)
            post = s.oss or s.glm4moe
            x = self.norm(ffn_inp, "post_attention_norm.weight" if post else "ffn_norm.weight")
            if lay.moe:
                cur = self.moe(x)
                if s.n_ff_shexp:
                    cur = gg.unary("ADD", cur, self.shared_expert(x))
                elif s.shexp_gated:
                    cur = gg.unary("ADD", cur, self.gated_shared_expert(x))
            else:
                cur = self.ffn(lay, x)
            if s.gemma3:
                # built with il = -1: llama.cpp does not pin this norm
                cur = gg.unary(
                    "MUL", gg.unary("RMS_NORM", cur), self.w("post_ffw_norm.weight", s.n_embd)
                )
            inp = gg.unary("ADD", ffn_inp, cur) if s.phi3 else gg.unary("ADD", cur, ffn_inp)
        self.il = -1
        if s.oss:
            g.set_output(inp)  # the hidden state MTP drafts read
            inp = gg.get_rows(inp, self.out_ids)
        embd = self.norm(inp, "output_norm.weight")
        logits = gg.mul_mat(self.w("output.weight", s.n_embd, s.n_vocab), embd)
        if s.output_bias:
            logits = gg.unary("ADD", logits, self.w("output.bias", s.n_vocab))
        g.expand(logits)
        g.set_output(embd)
        g.set_output(logits)
        return g


def build_llama_graph(shape: LlamaShape, ub: Ubatch) -> Graph:
    """The graph llama.cpp reserves for ``ub`` tokens against the full KV cache."""
    return _Builder(shape, ub).build()
