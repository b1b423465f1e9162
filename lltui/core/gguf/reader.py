"""GGUF header reader: metadata, tensor table and split models, without reading tensor data.

Only the header region is touched (through mmap, so untouched pages are never read). Every
count and length is checked against the file size before it is used, so a corrupt or hostile
file gives one GgufError line instead of a huge allocation or a traceback. Large arrays (a
150k-token vocabulary, merges) are skipped over and kept as a lazy GgufArray: their offset,
count and type, decoded only when asked.
"""

from __future__ import annotations

import itertools
import math
import mmap
import os
import struct
from array import array
from types import MappingProxyType
from typing import Any

from lltui.core.gc_pause import gc_paused
from lltui.core.gguf.model import GgufFile, GgufModel, GgufTensor, KvColumn
from lltui.core.gguf.types import GGML_TYPES
from lltui.core.gguf.values import (
    EAGER_ARRAY_ITEMS,
    FIXED_STRUCTS,
    MAX_ARRAY_NESTING,
    U32,
    U64,
    Cursor,
    GgufArray,
    GgufError,
    GgufIncomplete,
    ValueType,
    as_int,
    open_regular,
    read_value,
)
from lltui.core.llama.limits import MAX_LAYERS, SPLIT_NAME_RE

# the names callers use, from one place
__all__ = [
    "EAGER_ARRAY_ITEMS",
    "GGML_MAX_DIMS",
    "GGML_MAX_NAME",
    "GGUF_DEFAULT_ALIGNMENT",
    "GGUF_MAGIC",
    "MAX_ARRAY_NESTING",
    "MAX_LAYERS",
    "SIZE_KEYS",
    "SPLIT_NAME_RE",
    "GgufArray",
    "GgufError",
    "GgufFile",
    "GgufIncomplete",
    "GgufModel",
    "GgufTensor",
    "ValueType",
    "check_sizes",
    "join_splits",
    "parse_gguf_header",
    "read_gguf",
    "read_gguf_file",
    "split_paths",
]

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # llama.cpp rejects tensor names of 64 bytes or more
INT64_MAX = 2**63 - 1


_HEADER = struct.Struct("<4sIQQ")  # magic, version, n_tensors, n_kv
_DIMS = {n: struct.Struct(f"<{n}Q") for n in range(1, GGML_MAX_DIMS + 1)}
_TYPE_OFFSET = struct.Struct("<iQ")  # a tensor's ggml type and data offset
_STRING, _BOOL = int(ValueType.STRING), int(ValueType.BOOL)
_SLOW = object()  # a value the fast path leaves to the checked reads
_KV_MIN = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a uint8 value
_TENSOR_MIN = 8 + 4 + 4 + 8  # name length, n_dims, type, offset


def read_gguf_file(path: str | os.PathLike[str]) -> GgufFile:
    """Read the header of one .gguf file (not following split siblings)."""
    spath = os.fspath(path)
    try:
        with open_regular(spath) as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER.size:
                raise GgufError(f"{spath}: not a GGUF file ({size} bytes, too small)")
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                mm = None
            if mm is None:  # a file system without mmap: read it the plain way
                data: Any = f.read()
                return _parse(data, len(data), spath)
            try:
                return _parse(mm, size, spath)
            finally:
                mm.close()
    except GgufError:
        raise
    except OSError as exc:
        raise GgufError(f"{spath}: cannot read: {exc.strerror or exc}") from None


def parse_gguf_header(
    buf: Any, file_size: int, path: str, *, array_file: str | None = None
) -> GgufFile:
    """The header of a file of ``file_size`` bytes from its first ``len(buf)`` bytes (a remote
    file read by ranges). GgufIncomplete when more bytes are needed, GgufError when the
    header cannot be a GGUF header of that file. ``path`` names the file in messages; long
    arrays are read later from ``array_file`` (a copy of the header), or not at all."""
    return _parse(buf, file_size, path, avail=len(buf), array_file=array_file)


def _parse(
    buf: Any, size: int, path: str, avail: int | None = None, array_file: str | None = None
) -> GgufFile:
    # a million tensor entries are a million new objects: the cycle collector, run again
    # and again over all of them as they pile up, would cost more than reading them
    with gc_paused():
        return _parse_header(buf, size, path, avail, array_file)


def _parse_header(
    buf: Any, size: int, path: str, avail: int | None, array_file: str | None
) -> GgufFile:
    cur = Cursor(buf, size, path, avail, array_file)
    if cur.avail < min(_HEADER.size, size):
        raise GgufIncomplete(_HEADER.size)
    if size < _HEADER.size:
        raise GgufError(f"{path}: not a GGUF file ({size} bytes, too small)")
    version, n_tensors, n_kv = _read_header(cur)
    metadata, kv_nbytes, kv_types = _read_metadata(cur, n_kv)
    alignment = _alignment(cur, metadata, kv_types)
    raw_tensors = _read_tensor_table(cur, n_tensors)

    header_nbytes = cur.pos
    data_offset = header_nbytes
    if n_tensors:
        data_offset = -(-header_nbytes // alignment) * alignment
        if data_offset > size:
            raise cur.fail("the tensor data section starts past the end of the file")

    tensors = tuple(
        GgufTensor(name, dims, type_id, offset, nbytes, data_offset + offset)
        for name, dims, type_id, offset, nbytes in raw_tensors
    )
    del raw_tensors
    _check_tensor_data(tensors, size, alignment, path)
    return GgufFile(
        path=path,
        version=version,
        file_size=size,
        alignment=alignment,
        data_offset=data_offset,
        header_nbytes=header_nbytes,
        metadata=MappingProxyType(metadata),
        kv_nbytes=kv_nbytes,
        kv_types=kv_types,
        tensors=tensors,
        header_file=array_file if avail is not None else path,
    )


def _read_header(cur: Cursor) -> tuple[int, int, int]:
    """Magic and version checked; (version, tensor count, key count), both bounded by the size."""
    magic, version, n_tensors, n_kv = _HEADER.unpack_from(cur.buf, 0)
    if magic != GGUF_MAGIC:
        raise cur.fail("not a GGUF file (no GGUF magic at its start)")  # its bytes unquoted
    if version == 1:
        raise cur.fail("GGUF version 1 is not supported (llama.cpp reads v2 and v3; re-convert)")
    if version & 0xFFFF == 0 and version != 0:
        raise cur.fail(f"GGUF version {version:#x}: a big-endian file, not supported")
    if version not in (2, 3):
        raise cur.fail(f"unsupported GGUF version {version} (expected 2 or 3)")
    cur.pos = _HEADER.size
    remaining = cur.size - cur.pos
    if n_kv * _KV_MIN > remaining:
        raise cur.fail(f"header claims {n_kv} metadata keys, more than the file can hold")
    if n_tensors * _TENSOR_MIN > remaining:
        raise cur.fail(f"header claims {n_tensors} tensors, more than the file can hold")
    return version, n_tensors, n_kv


def _read_metadata(
    cur: Cursor, n_kv: int
) -> tuple[dict[str, Any], KvColumn[int], KvColumn[ValueType]]:
    """Every key/value pair: the values, and (as columns beside them) their encoded sizes and
    their types. Keys whose value is a number or a short string are read by an inlined fast
    path (a file of two million keys reads in seconds); anything else, and every error, goes
    through the cursor's checked reads."""
    metadata: dict[str, Any] = {}
    nbytes = array("Q")
    types = bytearray()
    buf, avail = cur.buf, cur.avail
    u64, u32 = U64.unpack_from, U32.unpack_from
    fixed = FIXED_STRUCTS
    pos = cur.pos
    for i in range(n_kv):
        start = pos
        # the fast path: key, type and a fixed-size or string value all within the bytes at hand
        if pos + 8 <= avail:
            n = u64(buf, pos)[0]
            kend = pos + 8 + n
            if n > 0 and kend + 4 <= avail:
                key = buf[pos + 8 : kend].decode("utf-8", "replace")
                vtype = u32(buf, kend)[0]
                vpos = kend + 4
                st = fixed.get(vtype)
                value: Any = _SLOW
                if st is not None:
                    if vpos + st.size <= avail:
                        value = st.unpack_from(buf, vpos)[0]
                        vpos += st.size
                        if vtype == _BOOL:
                            value = bool(value)
                elif vtype == _STRING and vpos + 8 <= avail:
                    m = u64(buf, vpos)[0]
                    if vpos + 8 + m <= avail:
                        value = buf[vpos + 8 : vpos + 8 + m].decode("utf-8", "replace")
                        vpos += 8 + m
                if value is not _SLOW:
                    before = len(metadata)
                    metadata[key] = value
                    if len(metadata) == before:
                        raise cur.fail(f"duplicate metadata key {key!r}")
                    nbytes.append(vpos - start)
                    types.append(vtype)
                    pos = vpos
                    continue
        cur.pos = start
        key = cur.string(f"metadata key {i}")
        if not key:
            raise cur.fail(f"metadata key {i} is empty")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        vtype = cur.u32(f"type of {key!r}")
        metadata[key] = read_value(cur, vtype, key)
        nbytes.append(cur.pos - start)
        types.append(ValueType(vtype))
        pos = cur.pos
    cur.pos = pos
    return metadata, KvColumn(metadata, nbytes, int), KvColumn(metadata, types, ValueType)


def _alignment(cur: Cursor, metadata: dict[str, Any], kv_types: KvColumn[ValueType]) -> int:
    if "general.alignment" not in metadata:
        return GGUF_DEFAULT_ALIGNMENT
    a = metadata["general.alignment"]
    if kv_types["general.alignment"] != ValueType.UINT32:
        raise cur.fail("general.alignment is not a uint32")
    if a <= 0 or a & (a - 1):
        raise cur.fail(f"general.alignment {a} is not a power of 2")
    return int(a)


_RawTensor = tuple[str, tuple[int, ...], int, int, int]


def _read_tensor_table(cur: Cursor, n_tensors: int) -> list[_RawTensor]:
    """Every tensor table entry, checked. An entry whose name and 1 to 4 dimensions lie within
    the bytes at hand, of a known type and a whole number of blocks, is read by an inlined fast
    path; any other goes through :func:`_read_tensor_entry`, which says what is wrong."""
    out: list[_RawTensor] = []
    seen: set[str] = set()
    shapes: dict[tuple[int, ...], tuple[int, ...]] = {}  # one tuple per distinct shape
    buf, avail = cur.buf, cur.avail
    u64, u32 = U64.unpack_from, U32.unpack_from
    dims_structs = _DIMS
    types = GGML_TYPES
    pos = cur.pos
    for i in range(n_tensors):
        if pos + 8 <= avail:
            n = u64(buf, pos)[0]
            nend = pos + 8 + n
            if n < GGML_MAX_NAME and nend + 4 <= avail:
                n_dims = u32(buf, nend)[0]
                end = nend + 4 + 8 * n_dims + 12
                if 0 < n_dims <= GGML_MAX_DIMS and end <= avail:
                    name = buf[pos + 8 : nend].decode("utf-8", "replace")
                    dims = dims_structs[n_dims].unpack_from(buf, nend + 4)
                    type_id, offset = _TYPE_OFFSET.unpack_from(buf, end - 12)
                    info = types.get(type_id)
                    n_elem = math.prod(dims)
                    if (
                        info is not None
                        and n_elem <= INT64_MAX
                        and max(dims) <= INT64_MAX
                        and dims[0] % info.block_size == 0
                        and name not in seen
                        and len(name.encode("utf-8", "replace")) < GGML_MAX_NAME
                    ):
                        seen.add(name)
                        dims = shapes.setdefault(dims, dims)
                        nbytes = n_elem // info.block_size * info.type_size
                        out.append((name, dims, type_id, offset, nbytes))
                        pos = end
                        continue
        cur.pos = pos
        out.append(_read_tensor_entry(cur, i, seen))
        pos = cur.pos
    cur.pos = pos
    return out


def _read_tensor_entry(cur: Cursor, i: int, seen: set[str]) -> _RawTensor:
    """One tensor table entry, checked: (name, dims, type id, offset, bytes); ``seen`` holds
    the names read before it."""
    name = cur.string(f"name of tensor {i}")
    if len(name.encode("utf-8", errors="replace")) >= GGML_MAX_NAME:
        raise cur.fail(f"tensor name {name[:40]!r}... is longer than {GGML_MAX_NAME - 1} bytes")
    if name in seen:
        raise cur.fail(f"duplicate tensor name {name!r}")
    seen.add(name)
    n_dims = cur.u32(f"dimension count of tensor {name!r}")
    if n_dims > GGML_MAX_DIMS:
        raise cur.fail(f"tensor {name!r} has {n_dims} dimensions (at most {GGML_MAX_DIMS})")
    cur.need(8 * n_dims + 4 + 8, f"entry of tensor {name!r}")
    dims = struct.unpack_from(f"<{n_dims}Q", cur.buf, cur.pos)
    cur.pos += 8 * n_dims
    type_id = struct.unpack_from("<i", cur.buf, cur.pos)[0]
    offset = U64.unpack_from(cur.buf, cur.pos + 4)[0]
    cur.pos += 12
    n_elem = 1
    for d in dims:
        if d > INT64_MAX:
            raise cur.fail(f"tensor {name!r} has a dimension of {d}")
        n_elem *= d
    if n_elem > INT64_MAX:
        raise cur.fail(f"tensor {name!r} has {n_elem} elements, more than ggml can address")
    info = GGML_TYPES.get(type_id)
    if info is None:
        raise cur.fail(f"tensor {name!r} has unknown ggml type id {type_id}")
    ne0 = dims[0] if dims else 1
    if ne0 % info.block_size:
        raise cur.fail(
            f"tensor {name!r} rows of {ne0} elements are not a multiple of the "
            f"{info.name} block size {info.block_size}"
        )
    return name, tuple(dims), type_id, offset, n_elem // info.block_size * info.type_size


def _check_tensor_data(
    tensors: tuple[GgufTensor, ...], size: int, alignment: int, path: str
) -> None:
    for t in tensors:
        if t.offset % alignment:
            raise GgufError(
                f"{path}: tensor {t.name!r} data offset {t.offset} is not a multiple of "
                f"the alignment {alignment}"
            )
        if t.file_offset + t.nbytes > size:
            raise GgufError(
                f"{path}: tensor {t.name!r} data (bytes {t.file_offset}.."
                f"{t.file_offset + t.nbytes}) lies past the end of the file ({size} bytes);"
                " truncated download?"
            )
    ordered = sorted((t for t in tensors if t.nbytes), key=lambda t: t.offset)
    for prev, nxt in itertools.pairwise(ordered):
        if prev.offset + prev.nbytes > nxt.offset:
            raise GgufError(f"{path}: tensors {prev.name!r} and {nxt.name!r} overlap")


def split_paths(path: str | os.PathLike[str], count: int) -> list[str]:
    """All file names of a split model given any one of them (``-00001-of-00004.gguf``)."""
    spath = os.fspath(path)
    m = SPLIT_NAME_RE.match(spath)
    if m is None:
        raise GgufError(
            f"{spath}: split model ({count} files) but the name does not end in "
            f"-NNNNN-of-{count:05d}.gguf"
        )
    # the count is the file's claim: it must agree with the name (at most 99999 parts)
    named = int(m.group("count"))
    if named != count:
        raise GgufError(f"{spath}: split.count is {count} but the name says {named} files")
    prefix = m.group("prefix")
    return [f"{prefix}-{i + 1:05d}-of-{count:05d}.gguf" for i in range(count)]


# Hyperparameters the estimator and the quant rules compute with: each must be a whole
# number >= 0, or (per layer) a non-empty array of them.
# Every size-like hyperparameter the estimator reads: a whole number >= 0 (or one per
# layer), below MAX_SIZE. Checked once here, so nothing downstream sizes a tuple, a loop or a
# float by a value no model has.
SIZE_KEYS = (
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.key_length_mla",
    "attention.value_length_mla",
    "attention.key_length_swa",
    "attention.value_length_swa",
    "attention.shared_kv_layers",
    "attention.sliding_window",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "nextn_predict_layers",
    "full_attention_interval",
    "shortconv.l_cache",
    "ssm.conv_kernel",
    "ssm.group_count",
    "ssm.inner_size",
    "ssm.state_size",
    "token_shift_count",
    "wkv.head_size",
)
# a whole number or one flag per layer
PATTERN_KEYS = ("attention.sliding_window_pattern",)
MAX_SIZE = 1 << 40  # past any width, count or context a model has; floats stay exact


def check_sizes(f: GgufFile) -> None:
    """Refuse hyperparameters no model has, so nothing downstream sizes a tuple by them."""
    arch = f.metadata.get("general.architecture")
    if not isinstance(arch, str):
        return
    for suffix in SIZE_KEYS + PATTERN_KEYS:
        key = f"{arch}.{suffix}"
        value = f.metadata.get(key)
        if value is None:
            continue
        if isinstance(value, GgufArray):
            if value.count == 0 or value.count > MAX_LAYERS + 1:
                raise GgufError(f"{f.path}: {key} holds {value.count} values, not one per layer")
            items = value.values()
        else:
            items = (value,)
        flags_ok = suffix in PATTERN_KEYS and isinstance(value, GgufArray)
        for v in items:
            if flags_ok and isinstance(v, bool):
                continue
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < MAX_SIZE:
                shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:40] + "..."
                raise GgufError(f"{f.path}: {key} is {shown}, not a size a model has")
    blocks = f.metadata.get(f"{arch}.block_count")
    if isinstance(blocks, int) and blocks > MAX_LAYERS:
        raise GgufError(f"{f.path}: {blocks} layers; llama.cpp allows {MAX_LAYERS}")


def read_gguf(path: str | os.PathLike[str]) -> GgufModel:
    """Read a model's header; a split model (split.count > 1) is read from all its files."""
    first = read_gguf_file(path)
    check_sizes(first)
    count = as_int(first.metadata.get("split.count"))
    if count is None or count <= 1:
        return GgufModel(files=(first,), tensors=first.tensors)

    paths = split_paths(first.path, count)
    files: list[GgufFile] = []
    for i, p in enumerate(paths):
        if os.path.abspath(p) == os.path.abspath(first.path):
            f = first
        elif not os.path.exists(p):
            raise GgufError(f"{p}: missing split {i + 1} of {count} of {first.path}")
        else:
            f = read_gguf_file(p)
        files.append(f)
    return join_splits(files)


def join_splits(files: list[GgufFile]) -> GgufModel:
    """The files of a split model, in order, read as one model: each file's split.no checked,
    the tensor tables joined (a tensor in two files refused), split.tensors.count checked."""
    count = len(files)
    for i, f in enumerate(files):
        no = as_int(f.metadata.get("split.no"))
        if no != i:
            raise GgufError(f"{f.path}: split.no is {no}, expected {i}")

    tensors: list[GgufTensor] = []
    seen: set[str] = set()
    for i, f in enumerate(files):
        for t in f.tensors:
            if t.name in seen:
                raise GgufError(f"{f.path}: tensor {t.name!r} also appears in an earlier split")
            seen.add(t.name)
            tensors.append(
                GgufTensor(t.name, t.dims, t.type, t.offset, t.nbytes, t.file_offset, split=i)
            )
    expected = as_int(files[0].metadata.get("split.tensors.count"))
    if expected is not None and expected != len(tensors):
        raise GgufError(
            f"{files[0].path}: split.tensors.count is {expected} but the {count} files hold "
            f"{len(tensors)} tensors"
        )
    return GgufModel(files=tuple(files), tensors=tuple(tensors))
