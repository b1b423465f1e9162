"""-sm tensor's split rules (llama_meta_device_get_split_state), ported: which axis each
tensor is cut on, whole Q groups and 128-element FFN blocks per device, the proportions of
-ts rotated layer by layer, and the Meta() buffer as the largest device's."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitError, FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.types import GgmlType
from lltui.core.memory.devices import rpc_device
from lltui.core.memory.hparams import read_hparams
from lltui.core.memory.tensor_parallel import (
    META,
    MIRRORED,
    fold_meta,
    split_state,
    supports_sm_tensor,
)

Q8 = int(GgmlType.Q8_0)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tp") / "llama.gguf"
    gf.write_model(path, gf.llama_spec(), "Q8_0", name="tiny-model")  # 8 heads, 2 KV heads
    return path


def _split(path: Path, name: str, dims: tuple[int, ...], n: int, ts: tuple[float, ...] = ()):
    model = read_gguf(path)
    types = {t.name: t.type for t in model.tensors}
    state = split_state(name, dims, read_hparams(model), types, n, ts)
    if state.axis == MIRRORED:
        return state.axis, None
    return state.axis, [state.elements(j) for j in range(n)]


def test_attention_splits_whole_q_groups(llama):
    # n_gqa 4 x head 32: Q goes in groups of 128 rows, K and V in 32 (one KV head)
    assert _split(llama, "blk.0.attn_q.weight", (256, 256), 2) == (1, [128, 128])
    assert _split(llama, "blk.0.attn_q.weight", (256, 256), 3) == (1, [0, 128, 128])
    assert _split(llama, "blk.0.attn_k.weight", (256, 64), 3) == (1, [0, 32, 32])
    assert _split(llama, "blk.0.attn_output.weight", (256, 256), 3) == (0, [0, 128, 128])
    # the next layer of the same kind rotates which device takes the rounding
    assert _split(llama, "blk.1.attn_q.weight", (256, 256), 3) == (1, [128, 0, 128])
    assert _split(llama, "cache_k_l1", (64, 2048, 1), 3) == (0, [32, 0, 32])


def test_ffn_splits_in_blocks_of_128_and_norms_are_mirrored(llama):
    assert _split(llama, "blk.0.ffn_down.weight", (512, 256), 3) == (0, [128, 128, 256])
    assert _split(llama, "blk.0.ffn_up.weight", (256, 512), 3) == (1, [128, 128, 256])
    assert _split(llama, "blk.0.attn_norm.weight", (256,), 3) == (MIRRORED, None)
    assert _split(llama, "output_norm.weight", (256,), 2) == (MIRRORED, None)
    # the output head: rows of the vocabulary, no granularity, rotated by the layer count
    assert _split(llama, "output.weight", (256, 1001), 3) == (1, [334, 333, 334])


def test_tensor_split_proportions_rotate_per_layer(llama):
    assert _split(llama, "blk.0.attn_q.weight", (256, 256), 2, (3, 1)) == (1, [128, 128])
    # layer 1 reads -ts from device 1 on: 1/4 of 256 rounds down to no Q group
    assert _split(llama, "blk.1.attn_q.weight", (256, 256), 2, (3, 1)) == (1, [256, 0])
    assert _split(llama, "blk.0.ffn_down.weight", (512, 256), 2, (3, 1)) == (0, [384, 128])


def test_fold_meta_logs_the_largest_device():
    buffers = [("A", "model", 5), ("B", "model", 7), ("A", "KV", 3), ("B", "KV", 2)]
    buffers.append(("CPU_Mapped", "model", 1))
    assert sorted(fold_meta(buffers, ("A", "B"))) == sorted(
        [(META, "model", 7), (META, "KV", 3), ("CPU_Mapped", "model", 1)]
    )
    assert fold_meta(buffers, ()) == buffers


def _est(path: Path, argv: list[str], n: int = 2):
    devs = [rpc_device(f"10.0.0.{i}:50052", None, i, backend="cpu") for i in range(n)]
    flags = ["-c", "2048", "-np", "1", "-sm", "tensor", *argv]
    return estimate(read_gguf(path), parse_llama_args(flags), devs, FitOptions(search=False))


def test_estimate_gives_each_device_its_slice(llama):
    even = _est(llama, [])
    uneven = _est(llama, ["-ts", "3,1"])
    assert even.meta_devices == tuple(d.name for d in even.devices[:2])
    assert even.resolved.flash_attn  # -fa auto turns on for -sm tensor
    assert even.devices[0].kv_bytes == even.devices[1].kv_bytes
    a, b = uneven.devices[0], uneven.devices[1]
    assert a.weights_bytes > b.weights_bytes and a.kv_bytes > b.kv_bytes
    assert a.layers == b.layers == (0, 1, 2, 3, 4)  # every device holds part of every layer
    assert a.compute_bytes == b.compute_bytes  # the graph's buffer, whole on each
    assert not any("layer split" in w for w in even.warnings)


def test_fa_off_is_refused_and_unsupported_archs_fall_back(llama, tmp_path):
    with pytest.raises(FitError, match="flash attention"):
        _est(llama, ["-fa", "off"])
    assert not supports_sm_tensor("olmo2") and supports_sm_tensor("llama")
    path = tmp_path / "olmo2.gguf"
    gf.write_model(path, gf.ARCH_SPECS["olmo2"](), "Q8_0", name="tiny-model")
    res = _est(path, [])
    assert res.meta_devices == ()
    assert any("refuses to load" in w and "layer split" in w for w in res.warnings)


def test_a_tensor_split_that_does_not_fit_is_offered_shares_sized_to_each_gpus_room(tmp_path):
    """-sm tensor's even cut overflows the small GPU: fit offered no -ts at all (the layer
    split's counts it tried, filled back to front, fitted nothing)."""
    from lltui.core.memory.devices import parse_gpus_spec

    spec = gf.llama_8b_spec(n_vocab=32000)
    model = read_gguf(gf.write_sparse(tmp_path / "m.gguf", spec, "F16"))
    devs = parse_gpus_spec("12GiB,12GiB,4GiB").devices
    opts = FitOptions(host_free_bytes=256 << 30)
    args = ["-c", "4096", "-sm", "tensor"]
    res = estimate(model, parse_llama_args(args), devs, opts)
    assert not res.fits
    (ts,) = [s.flags for s in res.suggestions if s.flags[:1] == ("-ts",)]
    a, b, c = (int(x) for x in ts[1].split(","))
    assert a == b > 2 * c > 0, ts  # shares as the rooms: 12, 12 and 4 GiB less fixed costs
    assert estimate(model, parse_llama_args([*args, *ts]), devs, opts).fits
