"""The GGUF reader at scale: the inlined fast paths agree with the checked reads, the columns
beside the metadata behave as mappings, quantized headers are views of the source's metadata,
and the cycle collector's pause is always undone. (Times and peaks: bench/big_inputs.py.)"""

from __future__ import annotations

import gc
import struct
import threading

import pytest
from support import gguf_factory as gf

from lltui.core.gc_pause import gc_paused
from lltui.core.gguf.model import KvColumn
from lltui.core.gguf.reader import (
    GgufError,
    GgufIncomplete,
    ValueType,
    parse_gguf_header,
    read_gguf,
    read_gguf_file,
)
from lltui.core.quant.sizes import as_quantized, quant_sizes, quant_source

F32, U8, I8, U16, I16, F32V, BOOL, F64, U64 = 0, 0, 1, 2, 3, 6, 7, 12, 10


def _mixed_kvs() -> list[bytes]:
    """Every kind of value the fast path reads, and some it leaves to the checked reads."""
    return [
        gf.raw_kv_str("general.architecture", "llama"),
        gf.raw_kv("a.u8", U8, b"\x07"),
        gf.raw_kv("a.i8", I8, b"\xff"),
        gf.raw_kv("a.u16", U16, struct.pack("<H", 513)),
        gf.raw_kv("a.i16", I16, struct.pack("<h", -2)),
        gf.raw_kv("a.f32", F32V, struct.pack("<f", 0.5)),
        gf.raw_kv("a.bool", BOOL, b"\x02"),
        gf.raw_kv("a.f64", F64, struct.pack("<d", 1e300)),
        gf.raw_kv("a.u64", U64, struct.pack("<Q", 2**64 - 1)),
        gf.raw_kv_str("a.empty", ""),
        gf.raw_kv_str("a.bad-utf8", "x"),
        gf.raw_kv(b"k\xff".decode("latin-1"), U8, b"\x01"),
        gf.raw_kv("a.array", 9, gf.raw_array(4, 3, struct.pack("<3I", 1, 2, 3))),
        gf.raw_kv_u32("general.alignment", 64),
    ]


def test_fast_and_checked_reads_give_the_same_header(tmp_path):
    """A prefix one byte short of each value sends the read through the checked path (and
    asks for more); the whole header, read at once, through the fast path: both agree."""
    infos = [
        gf.raw_tensor_info("a", (64,), F32, 0),
        gf.raw_tensor_info("b", (32, 2), F32, 256),
        gf.raw_tensor_info("c", (), F32, 512),
        gf.raw_tensor_info("d", (32, 1, 1, 2), F32, 576),
    ]
    blob = gf.raw_gguf(_mixed_kvs(), infos, data=b"\0" * 1024, alignment=64)
    path = tmp_path / "mixed.gguf"
    path.write_bytes(blob)
    whole = read_gguf_file(path)
    # grow a prefix until it parses: every cut goes through the checked reads
    n = 24
    while True:
        try:
            grown = parse_gguf_header(blob[:n], len(blob), str(path))
            break
        except GgufIncomplete as inc:
            assert inc.needed > n
            n = inc.needed
    assert dict(grown.metadata) == dict(whole.metadata)
    assert list(grown.kv_nbytes.items()) == list(whole.kv_nbytes.items())
    assert list(grown.kv_types.items()) == list(whole.kv_types.items())
    assert grown.tensors == whole.tensors
    assert whole.metadata["a.bool"] is True and whole.metadata["a.i8"] == -1
    assert whole.kv_types["a.f64"] == ValueType.FLOAT64
    assert sum(whole.kv_nbytes.values()) == whole.header_nbytes - 24 - sum(map(len, infos))
    assert [t.dims for t in whole.tensors] == [(64,), (32, 2), (), (32, 1, 1, 2)]


@pytest.mark.parametrize(
    "kvs, infos, match",
    [
        ([gf.raw_kv("k", U8, b"\1"), gf.raw_kv("k", U8, b"\2")], [], "duplicate metadata key 'k'"),
        ([gf.raw_kv_str("k", "a"), gf.raw_kv_str("k", "b")], [], "duplicate metadata key 'k'"),
        (
            [],
            [gf.raw_tensor_info("t", (32,), F32, 0), gf.raw_tensor_info("t", (32,), F32, 128)],
            "duplicate tensor name 't'",
        ),
        ([], [gf.raw_tensor_info("x" * 64, (32,), F32, 0)], "longer than 63 bytes"),
        ([], [gf.raw_tensor_info("q", (33,), 8, 0)], "not a multiple of the q8_0 block size"),
        ([], [gf.raw_tensor_info("u", (32,), 99, 0)], "unknown ggml type id 99"),
        ([], [gf.raw_tensor_info("big", (2**62, 4), F32, 0)], "more than ggml can address"),
    ],
)
def test_the_fast_paths_refuse_what_the_checked_reads_refuse(tmp_path, kvs, infos, match):
    path = tmp_path / "bad.gguf"
    path.write_bytes(gf.raw_gguf(kvs, infos, data=b"\0" * 512))
    with pytest.raises(GgufError, match=match):
        read_gguf_file(path)


def test_the_columns_are_mappings_over_the_keys_in_order():
    keys = {"b": 1, "a": 2, "c": 3}
    col = KvColumn(keys, [10, 20, 30], int)
    assert list(col) == ["b", "a", "c"] and len(col) == 3
    assert col["a"] == 20 and "c" in col and "z" not in col
    assert list(col.items()) == [("b", 10), ("a", 20), ("c", 30)]
    assert list(col.values()) == [10, 20, 30]
    assert dict(col) == {"b": 10, "a": 20, "c": 30}
    with pytest.raises(KeyError):
        col["z"]
    types = KvColumn(keys, bytearray([4, 8, 9]), ValueType)
    assert types["c"] is ValueType.ARRAY
    with pytest.raises(ValueError):
        KvColumn(keys, [1], int)


def test_identical_shapes_share_one_tuple(tmp_path):
    infos = [gf.raw_tensor_info(f"t{i}", (32, 4), F32, 512 * i) for i in range(50)]
    path = tmp_path / "shapes.gguf"
    path.write_bytes(gf.raw_gguf([], infos, data=b"\0" * 512 * 50))
    dims = [t.dims for t in read_gguf_file(path).tensors]
    assert len({id(d) for d in dims}) == 1


def test_a_quantized_header_is_a_view_of_the_source_metadata(tmp_path):
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(n_layer=2, n_embd=64, n_ff=128, n_vocab=256), "F16")
    model = read_gguf(path)
    row = next(r for r in quant_sizes(quant_source(model)) if r.error is None)
    q = as_quantized(model, row).files[0]
    dropped = {"general.file_type", "general.quantization_version", "split.no", "split.count"}
    expected = [k for k in model.metadata if k not in dropped]
    expected += ["general.quantization_version", "general.file_type"]
    assert list(q.metadata) == expected and len(q.metadata) == len(expected)
    assert list(q.kv_nbytes) == expected and list(q.kv_types) == expected
    assert q.metadata["general.file_type"] == int(row.ftype)
    assert q.kv_types["general.file_type"] == ValueType.UINT32
    assert q.kv_nbytes["general.name"] == model.files[0].kv_nbytes["general.name"]
    assert "split.count" not in q.metadata
    with pytest.raises(KeyError):
        q.metadata["split.no"]


def test_the_collector_pause_is_undone_however_pauses_overlap():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()

    inside, release = threading.Barrier(3), threading.Event()

    def hold() -> None:
        with gc_paused():
            inside.wait()
            release.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait()
    assert not gc.isenabled()
    release.set()
    for t in threads:
        t.join()
    assert gc.isenabled()

    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("inside")
    assert gc.isenabled()
