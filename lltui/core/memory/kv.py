"""The KV cache per layer and device (GQA, SWA, MLA, quantized types, streams), the
recurrent state, and the host output buffer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.gguf.types import GGML_TYPES, GgmlType, type_from_name
from lltui.core.memory.common import CPU, FitError, device_alloc_size
from lltui.core.memory.context import Resolved
from lltui.core.memory.devices import DeviceSpec, host_buffer
from lltui.core.memory.hparams import Hparams


@dataclass(frozen=True, slots=True)
class KvCache:
    """One KV cache of the context (an SWA model has a full one and a windowed one)."""

    swa: bool
    cells: int
    layers: tuple[int, ...]
    k_bytes: int  # ggml_nbytes sums, as ``llama_kv_cache: size = ...`` prints them
    v_bytes: int
    buffers: tuple[tuple[str, int], ...]  # (buffer name, allocated bytes)
    indexer: bool = False  # DeepSeek sparse attention's indexer keys (K only, one head)
    # (buffer name, bytes one cell takes there: its layers' K and V rows), for the KV fill
    cell_bytes: tuple[tuple[str, int], ...] = ()


def _row(type_name: str, n: int) -> int:
    info = GGML_TYPES[type_from_name(type_name)]
    return n // info.block_size * info.type_size


def _check_kv_types(hp: Hparams, r: Resolved) -> None:
    for tname, head in ((r.type_k, hp.head_k), (r.type_v, hp.head_v)):
        info = GGML_TYPES[type_from_name(tname)]
        if info.block_size > 1 and head % info.block_size:
            raise FitError(
                f"cache type {tname} needs the head size ({head}) to be a multiple of "
                f"{info.block_size}"
            )


def kv_caches(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
) -> list[KvCache]:
    """The KV caches llama_kv_cache (or its iSWA pair) allocates, per layer and device."""
    if not hp.has_memory:
        return []
    layers = [il for il in range(hp.n_layer_all) if hp.has_kv(il)]
    if not layers:
        return []
    _check_kv_types(hp, r)
    v_trans = not r.flash_attn
    v_max = max(hp.n_embd_v_gqa(il) for il in range(hp.n_layer_all))
    groups: list[tuple[bool, int, list[int]]] = []
    if hp.swa_any:
        base, swa = r.n_ctx_seq, r.swa_cells
        groups.append((False, base, [il for il in layers if not hp.is_swa[il]]))
        groups.append((True, swa, [il for il in layers if hp.is_swa[il]]))
    else:
        groups.append((False, r.n_ctx_seq, layers))
    tk, tv = type_from_name(r.type_k), type_from_name(r.type_v)
    with_v = not hp.mla or r.mla_v_cache  # MLA's V shared K's rows from b7832
    out = []
    for is_swa, cells, ls in groups:
        k_total = v_total = 0
        bufs: dict[str, int] = {}
        per_cell: dict[str, int] = {}
        # (buffer, K bytes, V bytes, allocated, bytes per cell) of a layer's device and rows:
        # worked out once for the layers alike
        alike: dict[tuple[int, int, int], tuple[str, int, int, int, int]] = {}
        for il in ls:
            dev_i = layer_dev[il] if st.kv_offload else -1
            nk = hp.n_embd_k_gqa(il)
            nv = v_max if v_trans else hp.n_embd_v_gqa(il)
            got = alike.get((dev_i, nk, nv))
            if got is None:
                dev = devices[dev_i] if dev_i >= 0 else None
                k = _row(r.type_k, nk) * cells * r.n_stream
                size = device_alloc_size(dev, tk, (nk, cells, r.n_stream), k)
                cell = _row(r.type_k, nk)
                v = 0
                if with_v:
                    v = _row(r.type_v, nv) * cells * r.n_stream
                    size += device_alloc_size(dev, tv, (nv, cells, r.n_stream), v)
                    cell += _row(r.type_v, nv)
                buf = dev.name if dev is not None else CPU
                got = alike[(dev_i, nk, nv)] = (buf, k, v, size, cell)
            buf, k, v, size, cell = got
            k_total += k
            v_total += v
            bufs[buf] = bufs.get(buf, 0) + size
            per_cell[buf] = per_cell.get(buf, 0) + cell
        out.append(
            KvCache(
                is_swa,
                cells,
                tuple(ls),
                k_total,
                v_total,
                tuple(bufs.items()),
                cell_bytes=tuple(per_cell.items()),
            )
        )
    if hp.indexer_head_size and any(hp.indexer_layers):
        out.append(_indexer_cache(hp, r, st, devices, layer_dev))
    return out


def _indexer_cache(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
) -> KvCache:
    """llama_kv_cache_dsa's second cache: the lightning indexer's keys, one head of
    indexer.key_length per cell in the K type, for the layers with a full indexer (the
    rest reuse an earlier layer's top-k); no V."""
    ls = [il for il in range(hp.n_layer) if il < len(hp.indexer_layers) and hp.indexer_layers[il]]
    tk = type_from_name(r.type_k)
    nk = hp.indexer_head_size
    k_total = 0
    bufs: dict[str, int] = {}
    per_cell: dict[str, int] = {}
    for il in ls:
        dev_i = layer_dev[il] if st.kv_offload else -1
        dev = devices[dev_i] if dev_i >= 0 else None
        k = _row(r.type_k, nk) * r.n_ctx_seq * r.n_stream
        k_total += k
        buf = dev.name if dev is not None else CPU
        bufs[buf] = bufs.get(buf, 0) + device_alloc_size(dev, tk, (nk, r.n_ctx_seq, r.n_stream), k)
        per_cell[buf] = per_cell.get(buf, 0) + _row(r.type_k, nk)
    cells = tuple(per_cell.items())
    return KvCache(False, r.n_ctx_seq, tuple(ls), k_total, 0, tuple(bufs.items()), True, cells)


def rs_buffers(
    hp: Hparams,
    r: Resolved,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
) -> dict[str, int]:
    """Recurrent state (``RS buffer``): F32 conv and SSM states per sequence and layer."""
    out: dict[str, int] = {}
    rows = max(1, r.n_seq_max)
    for il in range(hp.n_layer):
        if not hp.is_recurrent[il]:
            continue
        dev_i = layer_dev[il] if st.kv_offload else -1
        dev = devices[dev_i] if dev_i >= 0 else None
        buf = dev.name if dev is not None else CPU
        size = 0
        for n in (hp.n_embd_r, hp.n_embd_s):
            nbytes = 4 * n * rows
            size += device_alloc_size(dev, GgmlType.F32, (n, rows), nbytes) if n else 0
        out[buf] = out.get(buf, 0) + size
    return out


def output_buffer(
    hp: Hparams, r: Resolved, st: LlamaArgs, devices: Sequence[DeviceSpec], out_dev: int
) -> tuple[str, int]:
    """Logits (and embeddings) for n_seq_max outputs (n_batch before b2540; none logged
    before b2413), in the output device's host buffer."""
    rows = {"n_seq_max": r.n_seq_max, "n_batch": r.n_batch}.get(r.output_rows, 0)
    floats = hp.n_vocab * rows
    if st.embedding:
        floats += hp.n_embd * rows
    name = host_buffer(devices, out_dev) or CPU
    return name, 4 * floats
