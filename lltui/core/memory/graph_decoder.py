"""The compute graph of a decoder as llama.cpp builds it for a reserve, from what the model
contains: each layer's tensors (and their shapes), the hyperparameters, and the few choices
of the architecture's graph code the file does not record (:mod:`.arch_table`).

The building blocks follow src/llama-graph.cpp (build_inp_embd, build_norm, build_qkv,
build_attn, build_attn_mha, build_ffn, build_moe_ffn) and src/llama-kv-cache.cpp (cpy_k,
cpy_v, get_k, get_v, the Hadamard rotation inputs); the layer layouts follow
src/models/*.cpp. A block is in the graph when the layer has its tensors: a norm where its
weight (or bias) is, Q/K norms where attn_q_norm/attn_k_norm are (per head or over the whole
row, by their width), biases where .bias tensors are, a gated FFN where ffn_gate is (a merged
gate/up where ffn_up is twice the width of ffn_down), experts where ffn_gate_inp is, a shared
expert where ffn_*_shexp are (gated where ffn_gate_inp_shexp is), sinks where attn_sinks is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lltui.core.ggml import graph as gg
from lltui.core.ggml.graph import F16, F32, HOST, I32, I64, Graph, Tensor
from lltui.core.gguf.types import type_info
from lltui.core.memory.arch_table import LAYER, Recipe
from lltui.core.memory.placement import INPUT_TENSORS

Dims = tuple[int, ...]
Named = tuple[tuple[str, Dims], ...]


@dataclass(frozen=True, slots=True)
class LayerShape:
    """One layer: its heads and head sizes, whether it slides a window and rotates
    positions, and its weights (the name after ``blk.N.``, with ggml dims)."""

    n_head: int
    n_head_kv: int
    head_k: int
    head_v: int
    weights: Named
    swa: bool = False
    rope: bool = True
    indexer: bool = False  # DeepSeek sparse attention: this layer runs its own indexer


@dataclass(frozen=True, slots=True)
class DecoderShape:
    """What the graph depends on: the model's layers and other weights, the architecture's
    recipe, routing and scales from the file, and the settings and placement."""

    recipe: Recipe
    n_embd: int
    n_vocab: int
    layers: tuple[LayerShape, ...]
    top: Named  # weights outside the layers (token_embd, output, output_norm, ...)
    # settings
    flash_attn: bool
    type_k: int
    type_v: int
    kv_size: int  # cells per stream
    n_stream: int  # KV streams (1 when unified)
    kv_unified: bool
    kv_size_swa: int = 0
    # placement: the device of each layer and of the output (HOST: the CPU), weights placed
    # elsewhere than their layer (-ot, --cpu-moe), the KV cache in host memory (-nkvo), and
    # whether llama.cpp pins each layer's norms to the layer's device
    layer_dev: tuple[int, ...] = ()
    moved: tuple[tuple[str, int], ...] = ()
    kv_host: bool = False
    full_offload: bool = False
    # ggml types of the weights a GPU may copy (host weights under op offload); others F32
    weight_types: tuple[tuple[str, int], ...] = ()
    # MoE routing: experts used, gating (1 softmax, 2 sigmoid, 3 softmax of the chosen
    # logits), normalised and scaled weights, expert groups (groups, groups used)
    n_expert_used: int = 0
    gating: int = 1
    norm_w: bool = True
    w_scale: bool = False
    groups: tuple[int, int] = (0, 0)
    # scales the file sets (granite's embedding and residual scales, a logit scale)
    embd_scale: bool = False
    residual_scale: bool = False
    logit_scale: bool = False
    softcap: bool = False
    clamp: bool = False  # Q/K/V clamped (clamp_kqv)
    attn_scale: bool = False  # a per-token attention temperature input
    n_pos: int = 1  # positions per token (4 with multi-section RoPE)
    # deepseek2's MLA: (kv_lora_rank, q_lora_rank, full K head, full V head, rope dims)
    mla: tuple[int, ...] = ()
    # DeepSeek sparse attention: (indexer key size, indexer heads, top-k)
    dsa: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Ubatch:
    n_tokens: int
    n_seqs: int
    n_outputs: int


def _rot_sizes(s: DecoderShape) -> tuple[int, int]:
    """Hadamard rotation sizes llama_kv_cache picks for quantized K/V caches."""
    head_k = max(lay.head_k for lay in s.layers)
    head_v = max(lay.head_v for lay in s.layers)
    rot_k = rot_v = 0
    if type_info(s.type_k).quantized and head_k % 64 == 0:
        rot_k = 64
        while head_k % (2 * rot_k) == 0:
            rot_k *= 2
    if type_info(s.type_v).quantized and head_v % 64 == 0:
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
    def make(s: DecoderShape, ub: Ubatch, kv_size: int) -> _CacheInputs:
        T = ub.n_tokens
        n_v_max = max(lay.n_head_kv * lay.head_v for lay in s.layers)
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

    def __init__(self, s: DecoderShape, ub: Ubatch) -> None:
        self.s = s
        self.r = s.recipe
        self.T = ub.n_tokens
        self.ub = ub
        self.g = Graph()
        self.moved = dict(s.moved)
        self.types = dict(s.weight_types)
        self.top = dict(s.top)
        self.lw: Mapping[str, Dims] = {}  # the current layer's weights
        self.used: set[str] = set()  # the weights the graph read
        # llama.cpp pins each layer's norms to its device for small batches or full offload
        self.pin_norms = s.full_offload or ub.n_tokens < 32
        self.il = -1  # the layer being built
        self.prefix = ""  # its weights' names start so: "blk.N."
        T = self.T
        self.pos = gg.new_input(I32, (T * s.n_pos,), "inp_pos")
        self.attn_scale = gg.new_input(F32, (1, 1, T), "inp_attn_scale") if s.attn_scale else None
        self.base = _CacheInputs.make(s, ub, s.kv_size)
        swa = any(lay.swa for lay in s.layers)
        self.swa = _CacheInputs.make(s, ub, s.kv_size_swa) if swa else None
        self.out_ids = gg.new_input(I32, (ub.n_outputs,), "out_ids")
        self.lid: _CacheInputs | None = None
        self.top_k: Tensor | None = None  # the last full indexer's choice (shared layers)
        if s.dsa:
            # the indexer's cache: its rows, its mask (F16: the fused indexer), and the
            # Hadamard rotation llama.cpp always makes for it
            ik = s.dsa[0]
            n_rot = 64
            while ik % (2 * n_rot) == 0:
                n_rot *= 2
            streams = 1 if s.kv_unified else ub.n_seqs
            self.lid = _CacheInputs(
                gg.new_input(I64, (T,), "attn_inp_k_idxs"),
                gg.new_input(I64, (T,), "attn_inp_v_idxs"),
                gg.new_input(F16, (s.kv_size, T // streams, 1, streams), "attn_inp_kq_mask"),
                gg.new_input(F32, (n_rot, n_rot), "attn_inp_k_rot"),
                None,
            )

    # -- weights -------------------------------------------------------------------------------

    def dev(self, il: int) -> int:
        """The device of layer ``il`` (-1: the output layer)."""
        if not self.s.layer_dev:
            return HOST
        return self.s.layer_dev[il if il >= 0 else len(self.s.layers)]

    def has(self, name: str) -> bool:
        return name in (self.lw if self.il >= 0 else self.top)

    def w(self, name: str) -> Tensor:
        """A weight of the current layer (or outside the layers), where llama.cpp put it."""
        il = self.il
        dims = (self.lw if il >= 0 else self.top)[name]
        full = self.prefix + name if il >= 0 else name
        self.used.add(full)
        if il < 0 and name.startswith(INPUT_TENSORS):
            loc = HOST  # the input layer's weights stay in host memory
        elif name.startswith("token_embd_norm."):
            loc = self.dev(0)  # llama.cpp gives it layer 0's buffer type
        else:
            moved = self.moved.get(full)
            loc = self.dev(il) if moved is None else moved
        return gg.external(self.types.get(full, F32), dims, full, loc=loc)

    def w_opt(self, name: str) -> Tensor | None:
        return self.w(name) if self.has(name) else None

    # -- norms ---------------------------------------------------------------------------------

    def norm(self, x: Tensor, name: str, kind: str | None = None, il: int | None = None) -> Tensor:
        """build_norm: the norm, then its weight and bias where the file has them; the
        norm is pinned to the layer's device where llama.cpp does so (a norm with a weight
        or a bias, built with the layer's index)."""
        kind = kind or self.r.norm
        t = gg.unary("NORM" if kind == LAYER else "RMS_NORM", x)
        mw = self.w_opt(f"{name}.weight")
        mb = self.w_opt(f"{name}.bias")
        il = self.il if il is None else il
        if (mw is not None or mb is not None) and self.pin_norms and il >= 0:
            t = gg.pinned(t, self.dev(il))
        if mw is not None:
            t = gg.unary("MUL", t, mw)
        if mb is not None:
            t = gg.unary("ADD", t, mb)
        return t

    # -- inputs --------------------------------------------------------------------------------

    def inp_embd(self) -> Tensor:
        s, T = self.s, self.T
        E = s.n_embd
        tok_embd = self.w("token_embd.weight")
        tokens = gg.new_input(I32, (T,), "inp_tokens")
        embd = gg.new_input(F32, (E, T), "inp_embd")
        tok = gg.get_rows(tok_embd, tokens)
        mixed_tokens = gg.new_input(I32, (T,), "inp_mixed_tokens")
        mixed_slots = gg.new_input(I64, (T,), "inp_mixed_slots")
        mixed_embd = gg.new_input(F32, (E, T), "inp_mixed_embd")
        mixed = gg.set_rows(
            gg.unary("DUP", mixed_embd), gg.get_rows(tok_embd, mixed_tokens), mixed_slots
        )
        for t in (tok, embd, mixed):
            self.g.expand(t)
        if s.embd_scale:
            tok = gg.unary("SCALE", tok)  # granite's embedding_scale
        if self.r.embd_scale == "rows":
            # token rows scaled by sqrt(n_embd) after the select, by an input of row factors
            tok = gg.unary("MUL", tok, gg.new_input(F32, (1, T), "inp_scale_rows"))
        self.g.expand(tok)
        if self.r.embd_scale == "scale":
            tok = gg.unary("SCALE", tok)  # gemma, gemma2: sqrt(n_embd)
        if self.has("position_embd.weight"):
            tok = gg.unary("ADD", tok, gg.get_rows(self.w("position_embd.weight"), self.pos))
        if self.has("token_embd_norm.weight"):
            tok = self.norm(tok, "token_embd_norm", il=0)  # bloom: pinned as layer 0's
        return tok

    # -- attention -----------------------------------------------------------------------------

    def hadamard(self, cur: Tensor, rot: Tensor) -> Tensor:
        n = rot.ne[0]
        flat = gg.nelements(cur) // n
        res = gg.reshape(cur, n, flat) if gg.is_contiguous(cur) else gg.cont(cur, n, flat)
        res = gg.mul_mat(rot, res)
        return gg.reshape(res, *cur.ne)

    def mm_b(self, name: str, x: Tensor) -> Tensor:
        """A matmul with the layer's ``name`` weight, plus its bias where the file has one."""
        t = gg.mul_mat(self.w(f"{name}.weight"), x)
        if self.has(f"{name}.bias"):
            t = gg.unary("ADD", t, self.w(f"{name}.bias"))
        return t

    def qkv(self, lay: LayerShape, cur: Tensor, split: bool) -> tuple[Tensor, Tensor, Tensor]:
        """build_qkv: separate Q/K/V matmuls (+ biases), or views of one fused matmul;
        ``split``: the rows cut into heads (else 2-d rows, llama.cpp's reshape=false)."""
        T = self.T
        hk, hv = lay.head_k, lay.head_v
        n_q, n_k, n_v = lay.n_head * hk, lay.n_head_kv * hk, lay.n_head_kv * hv
        if self.has("attn_qkv.weight"):
            qkv = self.mm_b("attn_qkv", cur)
            if split and self.s.clamp:
                qkv = gg.unary("CLAMP", qkv)
            row = qkv.nb[1]
            if split:
                return (
                    gg.view(qkv, (hk, lay.n_head, T), (gg.row_bytes(F32, hk), row)),
                    gg.view(qkv, (hk, lay.n_head_kv, T), (gg.row_bytes(F32, hk), row)),
                    gg.view(qkv, (hv, lay.n_head_kv, T), (gg.row_bytes(F32, hv), row)),
                )
            return (
                gg.cont(gg.view(qkv, (n_q, T), (row,))),
                gg.cont(gg.view(qkv, (n_k, T), (row,))),
                gg.cont(gg.view(qkv, (n_v, T), (row,))),
            )
        q, k, v = (self.mm_b(n, cur) for n in ("attn_q", "attn_k", "attn_v"))
        if split and self.s.clamp:
            q, k, v = (gg.unary("CLAMP", t) for t in (q, k, v))
        if not split:
            return q, k, v
        return (
            gg.reshape(q, hk, lay.n_head, T),
            gg.reshape(k, hk, lay.n_head_kv, T),
            gg.reshape(v, hv, lay.n_head_kv, T),
        )

    def rope(self, lay: LayerShape, x: Tensor) -> Tensor:
        return gg.unary("ROPE", x, self.pos) if lay.rope else x

    def attention(self, lay: LayerShape, cur: Tensor) -> Tensor:
        if self.s.mla:
            return self.attention_mla(lay, cur)
        r, T = self.r, self.T
        qn, kn = self.has("attn_q_norm.weight"), self.has("attn_k_norm.weight")
        if r.qk_order == "full" and (qn or kn):
            # the norms over whole Q/K rows, before they are cut into heads
            q, k, v = self.qkv(lay, cur, split=False)
            q = self.norm(q, "attn_q_norm", r.qk_norm) if qn else q
            k = self.norm(k, "attn_k_norm", r.qk_norm) if kn else k
            q = gg.reshape(q, lay.head_k, lay.n_head, T)
            k = gg.reshape(k, lay.head_k, lay.n_head_kv, T)
            v = gg.reshape(v, lay.head_v, lay.n_head_kv, T)
            q, k = self.rope(lay, q), self.rope(lay, k)
        elif r.qk_order == "norms":
            q, k, v = self.qkv(lay, cur, split=True)
            q = self.norm(q, "attn_q_norm", r.qk_norm) if qn else q
            k = self.norm(k, "attn_k_norm", r.qk_norm) if kn else k
            q, k = self.rope(lay, q), self.rope(lay, k)
        elif r.qk_order == "after":
            q, k, v = self.qkv(lay, cur, split=True)
            q, k = self.rope(lay, q), self.rope(lay, k)
            q = self.norm(q, "attn_q_norm", r.qk_norm) if qn else q
            k = self.norm(k, "attn_k_norm", r.qk_norm) if kn else k
        else:
            q, k, v = self.qkv(lay, cur, split=True)
            q = self.rope(lay, self.norm(q, "attn_q_norm", r.qk_norm) if qn else q)
            k = self.rope(lay, self.norm(k, "attn_k_norm", r.qk_norm) if kn else k)
        if r.rope == "llama4":
            # llama4: the temperature scales Q in the layers without RoPE; the others
            # RMS-norm Q and K (no weight, unpinned)
            if not lay.rope and self.attn_scale is not None:
                q = gg.unary("MUL", q, self.attn_scale)
            elif lay.rope and r.kq_rms_after_rope:
                q, k = gg.unary("RMS_NORM", q), gg.unary("RMS_NORM", k)
            return self.attn_kv(lay, q, k, v)
        if r.q_scale:
            q = gg.unary("SCALE", q)
        if self.attn_scale is not None:
            q = gg.unary("MUL", q, self.attn_scale)
        return self.attn_kv(lay, q, k, v)

    def kv_loc(self) -> int:
        return HOST if self.s.kv_host else self.dev(self.il)

    def attn_kv(self, lay: LayerShape, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        s, g = self.s, self.g
        ci = self.swa if lay.swa and self.swa is not None else self.base
        kv_size = s.kv_size_swa if lay.swa else s.kv_size
        if ci.k_rot is not None:
            q = self.hadamard(q, ci.k_rot)
            k = self.hadamard(k, ci.k_rot)
        if ci.v_rot is not None:
            v = self.hadamard(v, ci.v_rot)
        # build_attn expands q, v, k with one cache, q, k, v with two (iSWA)
        for t in (q, k, v) if self.swa is not None else (q, v, k):
            g.expand(t)
        hk, hv = lay.head_k, lay.head_v
        n_k, n_v = lay.n_head_kv * hk, lay.n_head_kv * hv
        ns = s.n_stream
        k_cache = gg.external(s.type_k, (n_k, kv_size, ns), loc=self.kv_loc(), weight=False)
        v_cache = gg.external(s.type_v, (n_v, kv_size, ns), loc=self.kv_loc(), weight=False)
        g.expand(self.cpy_k(k, k_cache, ci))
        g.expand(self.cpy_v(v, v_cache, ci))
        rk, rv = gg.row_bytes, gg.row_bytes
        k_view = gg.view(
            k_cache,
            (hk, lay.n_head_kv, kv_size, ns),
            (rk(s.type_k, hk), rk(s.type_k, n_k), rk(s.type_k, n_k * kv_size)),
        )
        if s.flash_attn:
            v_view = gg.view(
                v_cache,
                (hv, lay.n_head_kv, kv_size, ns),
                (rv(s.type_v, hv), rv(s.type_v, n_v), rv(s.type_v, n_v * kv_size)),
            )
        else:
            v_view = gg.view(
                v_cache,
                (kv_size, lay.n_head_kv, hv, ns),
                (rv(s.type_v, kv_size * hv), rv(s.type_v, kv_size), rv(s.type_v, kv_size * n_v)),
            )
        sinks = self.w_opt("attn_sinks.weight")
        cur = self.mha(q, k_view, v_view, ci.kq_mask, sinks)
        if ci.v_rot is not None:
            cur = self.hadamard(cur, ci.v_rot)
        return self.mm_b("attn_output", cur)

    def indexer(self, cur: Tensor, qr: Tensor) -> Tensor:
        """The lightning indexer of a layer with a full one: its keys go to their own cache,
        every cached key is scored for every token (fused), the best top_k cells kept."""
        s, g, T = self.s, self.g, self.T
        ik, ih, top_k = s.dsa
        assert self.lid is not None and self.lid.k_rot is not None
        iq = gg.reshape(gg.mul_mat(self.w("indexer.attn_q_b.weight"), qr), ik, ih, T)
        iq = gg.unary("ROPE", iq, self.pos)
        ikey = gg.mul_mat(self.w("indexer.attn_k.weight"), cur)
        ikey = self.norm(ikey, "indexer.k_norm", LAYER)
        ikey = gg.unary("ROPE", gg.reshape(ikey, ik, 1, T), self.pos)
        iq = gg.mul_mat(self.lid.k_rot, iq)
        ikey = gg.mul_mat(self.lid.k_rot, ikey)
        cache = gg.external(s.type_k, (ik, s.kv_size, s.n_stream), loc=self.kv_loc(), weight=False)
        g.expand(self.cpy_k(ikey, cache, self.lid))
        iw = gg.mul_mat(self.w("indexer.proj.weight"), cur)
        rb = gg.row_bytes(s.type_k, ik)
        keys = gg.view(cache, (ik, 1, s.kv_size, s.n_stream), (rb, rb, rb * s.kv_size))
        ns = s.n_stream
        iq = gg.view(iq, (ik, ih, T // ns, ns), (iq.nb[1], iq.nb[2], iq.nb[3] // ns))
        iw = gg.view(iw, (ih, T // ns, 1, ns), (iw.nb[1], iw.nb[2] // ns, iw.nb[3] // ns))
        iw = gg.unary("SCALE", iw)
        score = gg.new(
            F32, (s.kv_size, iq.ne[2], 1, ns), "LIGHTNING_INDEXER", (iq, keys, iw, self.lid.kq_mask)
        )
        k = min(score.ne[0], top_k)
        return gg.cont(gg.new(I32, (k, *score.ne[1:]), "TOP_K", (score,)))

    def attention_mla(self, lay: LayerShape, cur: Tensor) -> Tensor:
        """deepseek2's multi-head latent attention: Q through a low rank, one compressed KV
        row (latent + rope part) per token in a K-only cache, heads decompressed by wv_b."""
        s, g, T = self.s, self.g, self.T
        kv_lora, _q_lora, hk, _hv, rope = s.mla
        nope, H = hk - rope, lay.n_head
        if self.has("attn_q_a.weight"):
            qr = self.norm(gg.mul_mat(self.w("attn_q_a.weight"), cur), "attn_q_a_norm")
            if s.dsa and lay.indexer:
                self.top_k = self.indexer(cur, qr)
            q = gg.mul_mat(self.w("attn_q_b.weight"), qr)
        else:  # the lite variants: one Q matrix
            q = gg.mul_mat(self.w("attn_q.weight"), cur)
        q = gg.reshape(q, hk, H, T)
        kv_pe = gg.mul_mat(self.w("attn_kv_a_mqa.weight"), cur)
        row = kv_pe.nb[1]
        kv_cmpr = gg.view(kv_pe, (kv_lora, T), (row,))
        k_pe = gg.unary("ROPE", gg.view(kv_pe, (rope, 1, T), (row, row)), self.pos)
        kv_cmpr = self.norm(kv_cmpr, "attn_kv_a_norm")
        q_nope = gg.view(q, (nope, H, T), (q.nb[1], q.nb[2]))
        q_pe = gg.unary("ROPE", gg.view(q, (rope, H, T), (q.nb[1], q.nb[2])), self.pos)
        wk_b = self.w("attn_k_b.weight")
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
        n_k = lay.n_head_kv * lay.head_k
        k_cache = gg.external(
            s.type_k, (n_k, s.kv_size, s.n_stream), loc=self.kv_loc(), weight=False
        )
        g.expand(self.cpy_k(k_cur, k_cache, ci))
        kb = gg.row_bytes(s.type_k, lay.head_k), gg.row_bytes(s.type_k, n_k)
        k_view = gg.view(
            k_cache,
            (lay.head_k, lay.n_head_kv, s.kv_size, s.n_stream),
            (*kb, gg.row_bytes(s.type_k, n_k * s.kv_size)),
        )
        v_view = gg.view(k_view, (v_cur.ne[0], *k_view.ne[1:]), k_view.nb[1:])
        mask = ci.kq_mask if not s.dsa else self.sparse_mask(ci.kq_mask)
        v_mla = self.w("attn_v_b.weight")
        cur = self.mha(q_cur, k_view, v_view, mask, v_mla=v_mla)
        return gg.mul_mat(self.w("attn_output.weight"), cur)

    def sparse_mask(self, mask: Tensor) -> Tensor:
        """build_attn (DSA): the mask of every cell filled with -inf, the top_k cells of each
        token set back to 0 (from a zero-filled tensor), then added to the causal mask."""
        top_k = self.top_k
        if top_k is None:
            raise ValueError("a shared indexer layer before any full one")
        n_kv, rows, _, ns = mask.ne
        filled = gg.unary("FILL", mask)
        flat = gg.view(filled, (1, n_kv, rows, ns), (filled.nb[0], filled.nb[1], filled.nb[2]))
        k = top_k.ne[0]
        idx = gg.view(top_k, (k, top_k.ne[1], top_k.ne[3], 1), (top_k.nb[1], top_k.nb[2]))
        zeros = gg.unary("FILL", gg.new(F32, (1, k, rows, ns)))
        kept = gg.set_rows(flat, zeros, idx)
        kept = gg.view(kept, (n_kv, rows, 1, ns), (kept.nb[2], kept.nb[3], kept.nb[3]))
        return gg.unary("ADD", kept, mask)

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
            # an F32 cache (-ctk/-ctv f32) is cast to F16 for the kernel: a copy of the view
            if k.type == F32:
                k = gg.new(F16, k.ne, "CPY", (k,))
            if v.type == F32:
                v = gg.new(F16, v.ne, "CPY", (v,))
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
            if self.r.attn_softcap:
                kq = gg.unary("SCALE", gg.unary("UNARY", gg.unary("SCALE", kq)))
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

    def ffn(
        self, x: Tensor, up: str = "ffn_up", gate: str = "ffn_gate", down: str = "ffn_down"
    ) -> Tensor:
        """build_ffn with the weights the layer has: up (+ bias), a parallel gate (+ bias)
        whose activation is fused with up (GLU), or a merged gate/up row (SwiGLU on its
        halves), or a plain activation in place; then down (+ bias)."""
        tmp = self.mm_b(up, x)
        act = self.r.act
        if self.has(f"{gate}.weight"):
            cur = self.mm_b(gate, x)
            if act == "relu_sqr":
                cur = gg.unary("SQR", gg.unary("UNARY", cur))
                cur = gg.unary("MUL", cur, tmp)
            else:
                cur = gg.glu_split(cur, tmp)
        elif tmp.ne[0] == 2 * self.lw[f"{down}.weight"][0]:
            cur = gg.new(tmp.type, (tmp.ne[0] // 2, *tmp.ne[1:]), "GLU", (tmp,))
        else:
            cur = gg.unary("UNARY", tmp)
            if act == "relu_sqr":
                cur = gg.unary("SQR", cur)
        return self.mm_b(down, cur)

    def shared_expert(self, x: Tensor) -> Tensor:
        cur = self.ffn(x, "ffn_up_shexp", "ffn_gate_shexp", "ffn_down_shexp")
        if self.r.shexp == "gated" and self.has("ffn_gate_inp_shexp.weight"):
            gate_inp = gg.mul_mat(self.w("ffn_gate_inp_shexp.weight"), x)
            gate = gg.unary("DIV", gg.unary("UNARY", gate_inp), gate_inp)  # silu(x) / x
            cur = gg.unary("MUL", cur, gate)
        return cur

    def group_mask(self, selection: Tensor, n_expert: int) -> Tensor:
        """build_moe_ffn's group selection: the best groups by their top two scores; the
        experts of the others masked out (filled with -inf, the kept rows set back)."""
        n_groups, n_used_groups = self.s.groups
        T = selection.ne[1]
        per = n_expert // n_groups
        groups = gg.reshape(selection, per, n_groups, T)
        top2 = gg.argsort_top_k(groups, 2)
        scores = gg.get_rows(gg.reshape(groups, 1, per, n_groups, T), top2)
        scores = gg.sum_rows(gg.reshape(scores, scores.ne[1], scores.ne[2], scores.ne[3]))
        scores = gg.reshape(scores, scores.ne[1], scores.ne[2])
        best = gg.argsort_top_k(scores, n_used_groups)
        kept = gg.get_rows(groups, best)
        masked = gg.set_rows(gg.unary("FILL", groups), kept, best)
        return gg.reshape(masked, n_expert, T)

    def moe(self, cur: Tensor) -> Tensor:
        """build_moe_ffn: the router, the chosen experts' weights, the experts, their sum."""
        s, g, T = self.s, self.g, cur.ne[1]  # the rows it gets (the outputs, last layer)
        E, n_used = s.n_embd, s.n_expert_used
        logits = gg.mul_mat(self.w("ffn_gate_inp.weight"), cur)
        n_exp = logits.ne[0]
        if self.has("ffn_gate_inp.bias"):
            logits = gg.unary("ADD", logits, self.w("ffn_gate_inp.bias"))
        if s.gating == 3:
            probs = logits  # softmax over the chosen experts' logits, below
        elif s.gating == 2:
            probs = gg.unary("UNARY", logits)  # sigmoid
        else:
            probs = gg.unary("SOFT_MAX", logits)
        selection = logits if self.r.weight_before_ffn else probs
        if self.has("exp_probs_b.bias"):
            selection = gg.unary("ADD", probs, self.w("exp_probs_b.bias"))
        if s.groups[0] > 1 and T > 0:
            selection = self.group_mask(selection, n_exp)
        selected = gg.argsort_top_k(selection, n_used)
        weights = gg.get_rows(gg.reshape(probs, 1, n_exp, T), selected)
        if s.gating == 3:
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
        if self.r.weight_before_ffn:
            # llama4: the input repeated for each chosen expert, weighted before the FFN
            x = gg.unary("MUL", gg.new(x.type, (E, n_used, T), "REPEAT", (x,)), weights)

        def experts_mm(name: str, inp: Tensor) -> Tensor:
            t = gg.mul_mat_id(self.w(f"{name}.weight"), inp, selected)
            if self.has(f"{name}.bias"):
                t = gg.unary("ADD_ID", t, self.w(f"{name}.bias"), selected)
            return t

        if self.has("ffn_gate_up_exps.weight"):
            gate_up = experts_mm("ffn_gate_up_exps", x)
            n_ff = gate_up.ne[0] // 2
            gate = gg.view(gate_up, (n_ff, gate_up.ne[1], gate_up.ne[2]), gate_up.nb[1:3])
            up = gg.view(gate_up, (n_ff, gate_up.ne[1], gate_up.ne[2]), gate_up.nb[1:3])
            act = gg.glu_split(gate, up)
        else:
            up = experts_mm("ffn_up_exps", x)
            if self.has("ffn_gate_exps.weight"):
                act = gg.glu_split(experts_mm("ffn_gate_exps", x), up)
            else:
                act = gg.unary("UNARY", up)
        experts = experts_mm("ffn_down_exps", act)
        if not self.r.weight_before_ffn:
            experts = gg.unary("MUL", experts, weights)
        g.expand(experts)
        views = [gg.view(experts, (E, T), (experts.nb[2],)) for _ in range(n_used)]
        for vw in views:
            g.expand(vw)
        out = views[0]
        for vw in views[1:]:
            out = gg.unary("ADD", out, vw)
            g.expand(out)
        if n_used == 1:
            out = gg.cont(out)
        return out

    def feed_forward(self, x: Tensor) -> Tensor:
        """The layer's FFN: experts (with a shared expert where the layer has one), or dense."""
        if not self.has("ffn_gate_inp.weight"):
            return self.ffn(x)
        cur = self.moe(x)
        if self.has("ffn_up_shexp.weight") and self.r.shexp:
            cur = gg.unary("ADD", cur, self.shared_expert(x))
        return cur

    # -- the layers ----------------------------------------------------------------------------

    def last_rows(self, *ts: Tensor) -> tuple[Tensor, ...]:
        """The last layer keeps only the output rows (where the architecture does it there)."""
        if self.il != len(self.s.layers) - 1 or self.r.out_rows != "layer":
            return ts
        return tuple(gg.get_rows(t, self.out_ids) for t in ts)

    def scaled(self, t: Tensor) -> Tensor:
        return gg.unary("SCALE", t) if self.s.residual_scale else t

    def layer_seq(self, lay: LayerShape, inp: Tensor) -> Tensor:
        cur = self.attention(lay, self.norm(inp, "attn_norm"))
        cur, res = self.last_rows(cur, inp)
        # post_attention_norm is a norm of the attention's output where the layer has its
        # own FFN norm (gemma2/3), else the FFN's norm (gpt-oss, glm4moe), as dbrx's
        # attn_output_norm is
        ffn_norm = "ffn_norm"
        if self.has("post_attention_norm.weight"):
            if self.has("ffn_norm.weight"):
                cur = self.norm(cur, "post_attention_norm")
            else:
                ffn_norm = "post_attention_norm"
        elif self.has("attn_output_norm.weight"):
            ffn_norm = "attn_output_norm"
        ffn_inp = gg.unary("ADD", self.scaled(cur), res)
        cur = self.feed_forward(self.norm(ffn_inp, ffn_norm))
        if self.has("post_ffw_norm.weight"):
            # built unpinned (il -1), except where the graph gives it the layer's index
            cur = self.norm(cur, "post_ffw_norm", il=None if self.r.post_ffw_pinned else -1)
        cur = self.scaled(cur)
        if self.r.add_res_first:
            return gg.unary("ADD", ffn_inp, cur)
        return gg.unary("ADD", cur, ffn_inp)

    def layer_post(self, lay: LayerShape, inp: Tensor) -> Tensor:
        cur = self.attention(lay, inp)
        cur, res = self.last_rows(cur, inp)
        cur = self.norm(cur, "post_attention_norm")
        ffn_inp = gg.unary("ADD", cur, res)
        cur = self.norm(self.feed_forward(ffn_inp), "post_ffw_norm", il=-1)
        return gg.unary("ADD", cur, ffn_inp)

    def layer_parallel(self, lay: LayerShape, inp: Tensor) -> Tensor:
        layout = self.r.layout
        normed = self.norm(inp, "attn_norm")
        attn_in = normed
        if layout == "falcon" and self.has("attn_norm_2.weight"):
            attn_in = self.norm(inp, "attn_norm_2")
        attn = self.attention(lay, attn_in)
        if layout == "neox":
            attn, inp = self.last_rows(attn, inp)
            cur = self.feed_forward(self.norm(inp, "ffn_norm"))
            return gg.unary("ADD", gg.unary("ADD", cur, inp), attn)
        if layout == "parallel":  # command-r: (FFN + input) + attention
            attn, inp, normed = self.last_rows(attn, inp, normed)
            cur = gg.unary("ADD", self.feed_forward(normed), inp)
            return gg.unary("ADD", cur, attn)
        attn, inp, normed = self.last_rows(attn, inp, normed)
        ffn = self.feed_forward(normed)
        if layout == "phi2":  # (attention + FFN) + input
            return gg.unary("ADD", gg.unary("ADD", attn, ffn), inp)
        return gg.unary("ADD", gg.unary("ADD", ffn, attn), inp)  # falcon

    def build(self) -> Graph:
        s, g, r = self.s, self.g, self.r
        inp = self.inp_embd()
        layer = {"seq": self.layer_seq, "post": self.layer_post}.get(r.layout, self.layer_parallel)
        for il, lay in enumerate(s.layers):
            self.il = il
            self.prefix = f"blk.{il}."
            self.lw = dict(lay.weights)
            inp = layer(lay, inp)
        self.il = -1
        if r.out_rows == "after":
            g.set_output(inp)  # the hidden state MTP drafts read
            inp = gg.get_rows(inp, self.out_ids)
        embd = self.norm(inp, "output_norm")
        out = "output.weight" if self.has("output.weight") else "token_embd.weight"
        dims = self.top[out]
        self.used.add(out)
        logits = gg.mul_mat(
            gg.external(
                self.types.get("output.weight", F32),
                dims,
                "output.weight",
                loc=self.moved.get("output.weight", self.dev(-1)),
            ),
            embd,
        )
        if self.has("output.bias"):
            logits = gg.unary("ADD", logits, self.w("output.bias"))
        if s.logit_scale:
            logits = gg.unary("SCALE", logits)
        if s.softcap:
            logits = gg.unary("SCALE", gg.unary("UNARY", gg.unary("SCALE", logits)))
        g.expand(logits)
        g.set_output(embd)
        g.set_output(logits)
        return g


def build_decoder_graph(shape: DecoderShape, ub: Ubatch) -> Graph:
    """The graph llama.cpp reserves for ``ub`` tokens against the full KV cache."""
    return _Builder(shape, ub).build()


def used_weights(shape: DecoderShape, ub: Ubatch) -> set[str]:
    """The full names of the weights the graph reads."""
    b = _Builder(shape, ub)
    b.build()
    return b.used
