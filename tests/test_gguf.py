"""The GGUF header reader: against gguf-py on generated real-architecture models; hostile files."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import gguf
import pytest
from gguf import GGUFValueType as V
from support import gguf_factory as gf

from lltui.core.gguf.reader import (
    EAGER_ARRAY_ITEMS,
    GgufArray,
    GgufError,
    GgufIncomplete,
    ValueType,
    parse_gguf_header,
    read_gguf,
    read_gguf_file,
    split_paths,
)
from lltui.core.gguf.types import (
    FTYPE_DEFAULT_TYPE,
    FTYPE_NAMES,
    GGML_TYPES,
    GgmlType,
    LlamaFtype,
    tensor_nbytes,
    type_from_name,
    type_info,
)

# -- the type table ---------------------------------------------------------------------------

# gguf-py 0.19.0 on PyPI still lists Q8_1 with the old float scales (40 bytes); ggml-common.h in
# the pinned llama.cpp static_asserts 2*sizeof(ggml_half) + 32 = 36. Q8_1 never appears in files.
STALE_IN_GGUF_PY = {GgmlType.Q8_1: (32, 40)}


def test_type_table_matches_gguf_py_for_every_type():
    checked = 0
    for qt, (block, size) in gguf.constants.GGML_QUANT_SIZES.items():
        info = type_info(int(qt))
        assert info.canonical == qt.name
        if (info.block_size, info.type_size) != (block, size):
            assert STALE_IN_GGUF_PY.get(info.type) == (block, size), qt.name
        checked += 1
    assert checked == len(gguf.constants.GGML_QUANT_SIZES)
    # every type gguf-py knows is in our table; ours may be newer (Q2_0)
    assert {int(q) for q in gguf.constants.GGML_QUANT_SIZES} <= set(GGML_TYPES)


def test_ftype_enum_matches_gguf_py():
    for ft in gguf.constants.LlamaFileType:
        if ft.name == "GUESSED":
            continue
        assert LlamaFtype(int(ft)).name == ft.name


def test_type_helpers():
    assert type_from_name("q4_K") == type_from_name("Q4_K") == GgmlType.Q4_K
    assert tensor_nbytes(GgmlType.Q4_K, (512,)) == 2 * 144
    assert tensor_nbytes(GgmlType.Q8_0, (64, 3, 2)) == 2 * 34 * 3 * 2
    assert set(FTYPE_DEFAULT_TYPE) <= set(FTYPE_NAMES)
    with pytest.raises(ValueError):
        type_from_name("q9_Z")
    with pytest.raises(ValueError):
        type_info(4)  # Q4_2, removed from ggml


# -- real models ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("models")
    out = {}
    for i, (arch, make) in enumerate(gf.SPECS.items()):
        for j, wtype in enumerate(("F16", "Q8_0", "Q4_K")):
            p = d / f"tiny-{arch}-{wtype}.gguf"
            gf.write_model(p, make(), wtype, seed=10 * i + j)
            out[f"{arch}-{wtype}"] = p
    return out


def _flatten(v):
    if isinstance(v, tuple):
        return [x for item in v for x in _flatten(item)]
    return [v]


def _ours_as_gguf_py(value):
    if isinstance(value, GgufArray):
        return _flatten(value.values())
    return value


@pytest.mark.parametrize("arch", list(gf.SPECS))
@pytest.mark.parametrize("wtype", ["F16", "Q8_0", "Q4_K"])
def test_reader_matches_gguf_py(models, arch, wtype):
    path = models[f"{arch}-{wtype}"]
    ours = read_gguf(path)
    ref = gguf.GGUFReader(path)

    ref_fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.metadata) == list(ref_fields)
    for key, field in ref_fields.items():
        expected = field.contents()
        got = _ours_as_gguf_py(ours.metadata[key])
        if isinstance(expected, float) or (
            isinstance(expected, list) and expected and isinstance(expected[0], float)
        ):
            assert got == pytest.approx(expected), key
        else:
            assert got == expected, key
        assert ours.files[0].kv_types[key] == ValueType(int(field.types[0]))

    assert len(ours.tensors) == len(ref.tensors)
    for t, r in zip(ours.tensors, ref.tensors, strict=True):
        assert t.name == r.name
        assert t.type == int(r.tensor_type)
        assert list(t.dims) == [int(x) for x in r.shape]
        assert t.nbytes == int(r.n_bytes)
        assert t.file_offset == int(r.data_offset)
        assert t.n_elements == int(r.n_elements)
    assert ours.data_offset == ref.data_offset
    assert ours.alignment == ref.alignment
    assert ours.file_size == path.stat().st_size


@pytest.mark.parametrize("arch", list(gf.SPECS))
def test_accessors_follow_the_written_hyperparameters(models, arch):
    spec = gf.SPECS[arch]()
    m = read_gguf(models[f"{arch}-Q8_0"])
    assert m.architecture == arch
    assert m.n_layer == spec.n_layer
    assert m.n_head == spec.n_head
    assert m.n_head_kv_layers == (spec.n_head_kv,) * spec.n_layer
    assert m.vocab_size == spec.n_vocab
    assert m.expert_count == spec.n_expert
    assert m.arch_value("rope.freq_base") == 10000.0
    assert m.file_type_name == "Q8_0"
    assert m.tensors_nbytes == sum(t.nbytes for t in m.tensors)
    embd = m.tensor("token_embd.weight")
    assert embd is not None and embd.dims == (spec.n_embd, spec.n_vocab)
    assert embd.shape == (spec.n_vocab, spec.n_embd)


def test_per_layer_head_counts_and_defaults(tmp_path):
    kv = [2, 2, 1, 1]
    spec = gf.llama_spec(
        extra_kv={
            "llama.attention.head_count_kv": (kv, V.ARRAY),
            "llama.attention.sliding_window_pattern": ([True, True, False, True], V.ARRAY),
        }
    )
    p = tmp_path / "perlayer.gguf"
    gf.write_model(p, spec, "F16")
    m = read_gguf(p)
    assert m.n_head_kv_layers == tuple(kv)


# -- value types, lazy arrays -----------------------------------------------------------------


def test_every_value_type_and_nested_arrays(tmp_path):
    p = tmp_path / "values.gguf"
    w = gguf.GGUFWriter(p, "llama")
    scalars = {
        "t.u8": (200, V.UINT8),
        "t.i8": (-100, V.INT8),
        "t.u16": (60000, V.UINT16),
        "t.i16": (-30000, V.INT16),
        "t.u32": (4_000_000_000, V.UINT32),
        "t.i32": (-2_000_000_000, V.INT32),
        "t.f32": (0.5, V.FLOAT32),
        "t.bool": (True, V.BOOL),
        "t.str": ("héllo", V.STRING),
        "t.u64": (2**63 + 5, V.UINT64),
        "t.i64": (-(2**62), V.INT64),
        "t.f64": (1e-300, V.FLOAT64),
    }
    for k, (v, t) in scalars.items():
        w.add_key_value(k, v, t)
    w.add_array("t.arr_f32", [0.25, 0.5])
    w.add_array("t.arr_bool", [True, False])
    w.add_array("t.arr_str", ["a", "", "ccc"])
    w.add_array("t.nested", [[1, 2, 3], [4]])
    w.add_array("t.nested_str", [["x", "y"], ["z"]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    md = read_gguf(p).metadata
    for k, (v, _) in scalars.items():
        assert md[k] == v, k
    assert isinstance(md["t.bool"], bool)
    assert md["t.arr_f32"].values() == (0.25, 0.5)
    assert md["t.arr_bool"].values() == (True, False)
    assert md["t.arr_str"].values() == ("a", "", "ccc")
    assert md["t.nested"].values() == ((1, 2, 3), (4,))
    assert md["t.nested"].item_type == ValueType.ARRAY
    assert md["t.nested_str"].values() == (("x", "y"), ("z",))


def test_empty_arrays(tmp_path):
    kvs = [
        gf.raw_kv("t.empty", 9, gf.raw_array(4, 0, b"")),
        gf.raw_kv("t.nested", 9, gf.raw_array(9, 2, gf.raw_array(8, 0, b"") * 2)),
    ]
    md = read_gguf(_write(tmp_path, gf.raw_gguf(kvs, []))).metadata
    assert md["t.empty"].values() == ()
    assert md["t.nested"].values() == ((), ())


def test_long_arrays_stay_lazy_until_asked(tmp_path):
    n = EAGER_ARRAY_ITEMS * 3
    spec = gf.qwen3_spec(n_vocab=n)
    p = tmp_path / "vocab.gguf"
    tokens, scores, types = gf.spm_vocab(n)
    gf.write_model(p, spec, "F16", vocab=(tokens, scores, types), merges=gf.bpe_merges(n))
    m = read_gguf(p)
    arr = m.tokens
    assert arr is not None and arr.items is None  # nothing decoded yet
    assert len(arr) == n and m.vocab_size == n
    assert arr.values() == tuple(tokens)
    assert list(arr) == tokens
    merges = m.metadata["tokenizer.ggml.merges"]
    assert merges.items is None and merges.values() == tuple(gf.bpe_merges(n))
    tt = m.metadata["tokenizer.ggml.token_type"]
    assert tt.item_type == ValueType.INT32 and tt.values() == tuple(types)
    sc = m.metadata["tokenizer.ggml.scores"]
    assert sc.values() == pytest.approx(scores)


def test_long_arrays_of_strings_of_every_length_are_stepped_over(tmp_path):
    # runs of short strings are stepped over by one regex match each, the rest one at a time:
    # lengths from 0 past 256 (a uint64 length whose low byte alone looks short), in runs
    # that are all short, all long and mixed; the tensor table after them reads whole
    n = EAGER_ARRAY_ITEMS * 3 + 7
    tokens = [("ab" * 150)[: (i * 7) % 301] if i % 1000 > 600 else f"t{i}" for i in range(n)]
    tokens[5] = "\x00" * 9  # NUL bytes in a token
    _, scores, types = gf.spm_vocab(n)
    spec = gf.qwen3_spec(n_vocab=n)
    p = tmp_path / "lengths.gguf"
    gf.write_model(p, spec, "F16", vocab=(tokens, scores, types))
    m = read_gguf(p)
    assert m.tokens is not None and m.tokens.values() == tuple(tokens)
    assert [t.name for t in m.tensors] == [name for name, _ in gf.tensor_plan(spec)]


def test_lazy_array_reports_a_file_changed_underneath(tmp_path):
    n = EAGER_ARRAY_ITEMS + 10
    p = tmp_path / "shrinks.gguf"
    gf.write_model(p, gf.llama_spec(n_vocab=n), "F16")
    arr = read_gguf(p).tokens
    assert arr is not None
    p.write_bytes(p.read_bytes()[: arr.offset + 10])
    with pytest.raises(GgufError, match=r"truncated|changed"):
        arr.values()


# -- split models -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def split_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("split")
    whole = d / "whole.gguf"
    gf.write_model(whole, gf.qwen3_spec(), "Q8_0")
    parts = gf.write_model(d / "tiny.gguf", gf.qwen3_spec(), "Q8_0", split_max_tensors=25)
    return whole, parts


def test_split_model_reads_as_one(split_model):
    whole, parts = split_model
    assert [p.name for p in parts] == ["tiny-00001-of-00002.gguf", "tiny-00002-of-00002.gguf"]
    one = read_gguf(whole)
    for start in parts:  # any split names the whole model
        m = read_gguf(start)
        assert m.split_count == 2
        assert m.paths == tuple(str(p) for p in parts)
        assert [t.name for t in m.tensors] == [t.name for t in one.tensors]
        assert [t.nbytes for t in m.tensors] == [t.nbytes for t in one.tensors]
        assert {t.split for t in m.tensors} == {0, 1}
        assert m.file_size == sum(p.stat().st_size for p in parts)
        assert m.n_layer == one.n_layer and m.vocab_size == one.vocab_size
    ref = gguf.GGUFReader(parts[1])
    m = read_gguf(parts[0])
    second = [t for t in m.tensors if t.split == 1]
    assert [t.file_offset for t in second] == [int(r.data_offset) for r in ref.tensors]


def test_split_model_with_a_missing_part(tmp_path):
    parts = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(), "Q8_0", split_max_tensors=20)
    parts[1].unlink()
    with pytest.raises(GgufError, match="missing split 2 of 2"):
        read_gguf(parts[0])


def test_split_paths():
    assert split_paths("/m/x-00002-of-00003.gguf", 3) == [
        "/m/x-00001-of-00003.gguf",
        "/m/x-00002-of-00003.gguf",
        "/m/x-00003-of-00003.gguf",
    ]
    with pytest.raises(GgufError, match="does not end in"):
        split_paths("/m/model.gguf", 2)


# -- hostile and broken files -----------------------------------------------------------------


def _write(tmp_path: Path, data: bytes, name: str = "bad.gguf") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _one_line_error(path: Path, match: str) -> str:
    with pytest.raises(GgufError, match=match) as exc:
        read_gguf(path)
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg
    assert isinstance(exc.value, ValueError)
    return msg


ARCH = gf.raw_kv_str("general.architecture", "llama")


def test_minimal_valid_raw_files_v2_and_v3(tmp_path):
    for version in (2, 3):
        t = gf.raw_tensor_info("w", (32, 2), int(GgmlType.F16), 0)
        blob = gf.raw_gguf([ARCH], [t], data=bytes(32 * 2 * 2), version=version)
        m = read_gguf(_write(tmp_path, blob, f"v{version}.gguf"))
        assert m.version == version
        assert m.tensors[0].nbytes == 128 and m.architecture == "llama"


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (b"", "too small"),
        (b"GGML" + bytes(40), "not a GGUF file"),
        (gf.raw_gguf([], [], version=1), "version 1 is not supported"),
        (gf.raw_gguf([], [], version=4), "unsupported GGUF version 4"),
        (gf.raw_gguf([], [], version=3 << 24), "big-endian"),
        (gf.raw_gguf([ARCH], [], n_kv=10**12), "metadata keys, more than the file"),
        (gf.raw_gguf([ARCH], [], n_tensors=10**12), "tensors, more than the file"),
        (gf.raw_gguf([ARCH], [], n_kv=2), "runs past the end"),
        # a string length of 2^63
        (gf.raw_gguf([gf.raw_kv("k", 8, struct.pack("<Q", 2**63))], []), "length 9223372036"),
        (gf.raw_gguf([struct.pack("<Q", 2**63) + bytes(8)], []), "length 9223372036"),
        (gf.raw_gguf([gf.raw_kv("k", 77, bytes(4))], []), "unknown value type 77"),
        (gf.raw_gguf([gf.raw_kv("", 4, bytes(4))], []), "is empty"),
        (gf.raw_gguf([gf.raw_kv_u32("k", 1), gf.raw_kv_u32("k", 2)], []), "duplicate metadata"),
        # array counts past the end of the file, for each kind of item
        (
            gf.raw_gguf([gf.raw_kv("k", 9, gf.raw_array(4, 10**6, bytes(8)))], []),
            "claims 1000000 array items",
        ),
        (
            gf.raw_gguf([gf.raw_kv("k", 9, gf.raw_array(8, 2**40, b""))], []),
            "claims 1099511627776 array items",
        ),
        (
            gf.raw_gguf([gf.raw_kv("k", 9, gf.raw_array(8, 2, gf.raw_str("a") + b"\xff" * 8))], []),
            "past the end",
        ),
        (
            gf.raw_gguf([gf.raw_kv("k", 9, gf.raw_array(9, 1, gf.raw_array(4, 99, bytes(4))))], []),
            "past the end",
        ),
        (gf.raw_gguf([gf.raw_kv("k", 9, gf.raw_array(42, 1, b""))], []), "unknown value type"),
        (
            gf.raw_gguf([gf.raw_kv("general.alignment", 5, struct.pack("<i", 32))], []),
            "not a uint32",
        ),
        (gf.raw_gguf([gf.raw_kv_u32("general.alignment", 48)], []), "not a power of 2"),
        (gf.raw_gguf([gf.raw_kv_u32("general.alignment", 0)], []), "not a power of 2"),
    ],
)
def test_broken_headers_give_one_clear_line(tmp_path, blob, match):
    _one_line_error(_write(tmp_path, blob), match)


def _tensor_file(infos: list[bytes], data_len: int) -> bytes:
    return gf.raw_gguf([ARCH], infos, data=bytes(data_len))


@pytest.mark.parametrize(
    ("infos", "data_len", "match"),
    [
        ([gf.raw_tensor_info("w", (32, 1, 1, 1, 1), 0, 0)], 128, "5 dimensions"),
        ([gf.raw_tensor_info("w", (32,), 4, 0)], 128, "unknown ggml type id 4"),
        ([gf.raw_tensor_info("w", (32,), 99, 0)], 128, "unknown ggml type id 99"),
        ([gf.raw_tensor_info("w", (32,), -1, 0)], 128, "unknown ggml type id -1"),
        ([gf.raw_tensor_info("w", (100, 2), int(GgmlType.Q4_K), 0)], 4096, "block size 256"),
        ([gf.raw_tensor_info("w", (2**40, 2**40), 0, 0)], 128, "elements"),
        ([gf.raw_tensor_info("w", (2**63 + 1,), 0, 0)], 128, "dimension of"),
        ([gf.raw_tensor_info("w", (64,), 0, 0)], 128, "past the end of the file"),
        ([gf.raw_tensor_info("w", (8,), 0, 2**62)], 128, "past the end of the file"),
        ([gf.raw_tensor_info("w", (8,), 0, 8)], 128, "not a multiple of the alignment"),
        (
            [gf.raw_tensor_info("a", (16,), 0, 0), gf.raw_tensor_info("b", (16,), 0, 32)],
            256,
            "overlap",
        ),
        (
            [gf.raw_tensor_info("a", (8,), 0, 0), gf.raw_tensor_info("a", (8,), 0, 32)],
            128,
            "duplicate tensor name",
        ),
        ([gf.raw_tensor_info("x" * 64, (8,), 0, 0)], 128, "longer than 63"),
    ],
)
def test_broken_tensor_tables_give_one_clear_line(tmp_path, infos, data_len, match):
    _one_line_error(_write(tmp_path, _tensor_file(infos, data_len)), match)


def test_truncated_header_tensor_table(tmp_path):
    blob = gf.raw_gguf([ARCH], [gf.raw_tensor_info("w", (32, 4), 0, 0)], data=bytes(512))
    end_of_infos = len(blob) - 512
    for cut in range(24, end_of_infos, 3):
        p = _write(tmp_path, blob[:cut], f"cut{cut}.gguf")
        with pytest.raises(GgufError):
            read_gguf(p)


def test_every_truncation_of_a_real_model_fails_cleanly(models, tmp_path):
    """Cut a real file anywhere in its header: always a GgufError, never another exception."""
    src = models["gemma3-Q4_K"].read_bytes()
    data_offset = read_gguf(models["gemma3-Q4_K"]).data_offset
    rng = random.Random(7)
    cuts = sorted({rng.randrange(0, data_offset) for _ in range(150)} | {0, 3, 23, 24})
    for cut in cuts:
        p = _write(tmp_path, src[:cut], "trunc.gguf")
        with pytest.raises(GgufError):
            read_gguf(p)


def test_random_corruption_never_escapes_as_another_exception(models, tmp_path):
    src = bytearray(models["qwen3moe-Q8_0"].read_bytes())
    header_end = read_gguf(models["qwen3moe-Q8_0"]).data_offset
    rng = random.Random(11)
    outcomes = {"ok": 0, "error": 0}
    for i in range(200):
        blob = bytearray(src[: header_end + 4096])  # header plus a little data
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(0, header_end)
            blob[pos] = rng.randrange(256)
        p = _write(tmp_path, bytes(blob), f"flip{i}.gguf")
        try:
            m = read_gguf(p)
        except GgufError as exc:
            assert "\n" not in str(exc)
            outcomes["error"] += 1
        else:
            # anything read must still be consistent with the file
            assert all(t.file_offset + t.nbytes <= m.file_size for t in m.tensors)
            outcomes["ok"] += 1
    assert outcomes["error"] > 0


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(GgufError, match="cannot read"):
        read_gguf(tmp_path / "nope.gguf")
    with pytest.raises(GgufError, match="directory"):
        read_gguf_file(tmp_path)


def test_custom_alignment_is_honoured(tmp_path):
    p = tmp_path / "align.gguf"
    w = gguf.GGUFWriter(p, "llama")
    w.add_custom_alignment(64)
    import numpy as np

    w.add_tensor("a", np.zeros(24, dtype=np.float32))
    w.add_tensor("b", np.zeros(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = read_gguf(p)
    ref = gguf.GGUFReader(p)
    assert m.alignment == 64
    assert m.data_offset % 64 == 0
    assert [t.file_offset for t in m.tensors] == [int(r.data_offset) for r in ref.tensors]


GGUF_INT32, GGUF_FLOAT32, GGUF_UINT64 = 5, 6, 10  # gguf value types


def _hostile(tmp_path, name: str, *kvs: bytes) -> Path:
    path = tmp_path / name
    arch = gf.raw_kv_str("general.architecture", "llama")
    path.write_bytes(gf.raw_gguf([arch, *kvs], []))
    return path


HOSTILE_HPARAMS = {
    "huge block_count": [gf.raw_kv_u32("llama.block_count", 2**32 - 1)],
    "negative key_length": [
        gf.raw_kv_u32("llama.block_count", 2),
        gf.raw_kv("llama.attention.key_length", GGUF_INT32, struct.pack("<i", -64)),
    ],
    "float head_count array": [
        gf.raw_kv_u32("llama.block_count", 2),
        gf.raw_kv(
            "llama.attention.head_count",
            gf.GGUF_ARRAY,
            gf.raw_array(GGUF_FLOAT32, 2, struct.pack("<ff", float("nan"), 1.0)),
        ),
    ],
    "empty used experts": [
        gf.raw_kv_u32("llama.block_count", 2),
        gf.raw_kv("llama.expert_used_count", gf.GGUF_ARRAY, gf.raw_array(gf.GGUF_UINT32, 0, b"")),
    ],
    "negative nextn layers": [
        gf.raw_kv_u32("llama.block_count", 2),
        gf.raw_kv("llama.nextn_predict_layers", GGUF_INT32, struct.pack("<i", -(2**31))),
    ],
    "string expert widths": [
        gf.raw_kv_u32("llama.block_count", 2),
        gf.raw_kv(
            "llama.expert_feed_forward_length",
            gf.GGUF_ARRAY,
            gf.raw_array(gf.GGUF_STRING, 2, gf.raw_str("wide") + gf.raw_str("x" * 10_000)),
        ),
    ],
    "infinite expert width": [
        gf.raw_kv_u32("llama.block_count", 2),
        gf.raw_kv(
            "llama.expert_feed_forward_length", GGUF_FLOAT32, struct.pack("<f", float("inf"))
        ),
    ],
    "a width past any model": [
        gf.raw_kv_u32("llama.block_count", 2),
        gf.raw_kv("llama.embedding_length", GGUF_UINT64, struct.pack("<Q", 2**62)),
    ],
}


@pytest.mark.parametrize("case", list(HOSTILE_HPARAMS))
def test_hyperparameters_no_model_has_are_one_line_errors(tmp_path, case, capsys):
    from lltui.cli import main

    path = _hostile(tmp_path, "hostile.gguf", *HOSTILE_HPARAMS[case])
    with pytest.raises(GgufError, match=r"hostile\.gguf"):
        read_gguf(path)
    for verb in ("fit", "quant"):
        assert main([verb, str(path), "--gpus", "24GiB"]) == 2
        err = capsys.readouterr().err.strip()
        assert "hostile.gguf" in err and len(err.splitlines()) == 1


def test_a_split_count_that_disagrees_with_the_name_is_refused(tmp_path):
    path = _hostile(
        tmp_path,
        "m-00001-of-00002.gguf",
        gf.raw_kv_u32("split.count", 10**9),
        gf.raw_kv_u32("split.no", 0),
    )
    with pytest.raises(GgufError, match=r"split\.count"):
        read_gguf(path)


# -- a header from a prefix of the file (remote reads) ---------------------------------------


def test_a_header_parses_from_a_growing_prefix(tmp_path):
    n = 5000  # long arrays: tokens, scores, types and merges are skipped lazily
    p = tmp_path / "v.gguf"
    gf.write_model(
        p, gf.qwen3_spec(n_vocab=n), "F16", vocab=gf.spm_vocab(n), merges=gf.bpe_merges(n)
    )
    data = p.read_bytes()
    full = read_gguf(p).files[0]
    have = 64
    while True:
        try:
            f = parse_gguf_header(data[:have], len(data), "remote.gguf")
            break
        except GgufIncomplete as inc:
            have = max(inc.needed, have + 1)
    assert have == full.header_nbytes
    # cut inside a long array of strings: the estimate reaches about its end in one step
    tokens = full.metadata["tokenizer.ggml.tokens"]
    end = tokens.offset + tokens.nbytes
    with pytest.raises(GgufIncomplete) as cut_inside:
        parse_gguf_header(data[: tokens.offset + tokens.nbytes // 3], len(data), "remote.gguf")
    assert 0.8 * end <= cut_inside.value.needed <= 1.25 * end
    assert f.header_nbytes == full.header_nbytes and f.tensors == full.tensors
    assert f.path == "remote.gguf" and f.file_size == len(data)
    # every cut inside the header asks for more; none reads as a corrupt file
    rng = random.Random(3)
    for cut in sorted({rng.randrange(0, full.header_nbytes) for _ in range(60)} | {0, 23, 24}):
        with pytest.raises(GgufIncomplete) as exc:
            parse_gguf_header(data[:cut], len(data), "remote.gguf")
        assert exc.value.needed > 0
    # long arrays are read later from a copy of the header
    copy = tmp_path / "header.bin"
    copy.write_bytes(data[: full.header_nbytes])
    g = parse_gguf_header(copy.read_bytes(), len(data), "remote.gguf", array_file=str(copy))
    tokens = g.metadata["tokenizer.ggml.tokens"]
    assert isinstance(tokens, GgufArray) and tokens.items is None
    assert tokens.values() == full.metadata["tokenizer.ggml.tokens"].values()


def test_a_prefix_of_a_truncated_file_is_an_error_not_a_request_for_more(tmp_path):
    p = tmp_path / "t.gguf"
    gf.write_model(p, gf.llama_spec(), "Q8_0")
    data = p.read_bytes()
    head = read_gguf(p).files[0].header_nbytes
    cut = data[: head // 2]
    with pytest.raises(GgufError, match="past the end of the file"):
        parse_gguf_header(cut, len(cut), "cut.gguf")


def test_corrupt_headers_read_by_prefixes_end_in_an_error_or_a_bounded_request(models):
    """A remote reader grows the prefix while the parser asks for more: with corrupt bytes
    the parser still ends in a GgufError or a header, and never asks past the file."""
    src = bytearray(models["qwen3moe-Q8_0"].read_bytes())
    header_end = read_gguf(models["qwen3moe-Q8_0"]).data_offset
    rng = random.Random(13)
    for _ in range(60):
        blob = bytearray(src)
        for _ in range(rng.randint(1, 4)):
            blob[rng.randrange(0, header_end)] = rng.randrange(256)
        have = rng.randrange(24, header_end)
        while True:
            try:
                parse_gguf_header(bytes(blob[:have]), len(blob), "flip.gguf")
                break
            except GgufIncomplete as inc:
                assert have < len(blob)
                have = min(len(blob), max(inc.needed, have * 2))
            except GgufError as exc:
                assert "\n" not in str(exc)
                break


def test_only_a_regular_file_is_opened_and_none_is_quoted(tmp_path):
    """A model path may come from a log or a preset: a FIFO named there must not hang the
    reader (opening one blocks until a writer comes), a device must not be read, and a file
    that is not a GGUF must not have its first bytes quoted back."""
    import os
    import threading

    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_gguf(fifo)
        except GgufError as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    if reader.is_alive():  # unblock the open so the thread ends, then fail
        with open(fifo, "wb"):
            pass
        reader.join(5)
    assert outcome and "not a regular file" in str(outcome[0])
    with pytest.raises(GgufError, match="not a regular file"):
        read_gguf("/dev/zero")
    secret = _write(tmp_path, b"hunter2:x:0:0::/:/bin/sh\n" * 4, "shadow.gguf")
    with pytest.raises(GgufError) as err:
        read_gguf(secret)
    assert "not a GGUF file" in str(err.value) and "hunter" not in str(err.value)
