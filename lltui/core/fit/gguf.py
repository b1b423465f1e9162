"""GGUF header reader: metadata, tensor table and split models, without reading tensor data.

Only the header region is touched (through mmap, so untouched pages are never read). Every
count and length is checked against the file size before it is used, so a corrupt or hostile
file gives one GgufError line instead of a huge allocation or a traceback. Large arrays (a
150k-token vocabulary, merges) are skipped over and kept as a lazy GgufArray: their offset,
count and type, decoded only when asked.
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from types import MappingProxyType
from typing import Any

from lltui.core.fit.ggml_types import GGML_TYPES, ftype_name

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4
GGML_MAX_NAME = 64  # llama.cpp rejects tensor names of 64 bytes or more
INT64_MAX = 2**63 - 1

# Arrays up to this many items are decoded while the header is read; longer ones stay lazy.
EAGER_ARRAY_ITEMS = 1024
MAX_ARRAY_NESTING = 8

SPLIT_NAME_RE = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


class GgufError(ValueError):
    """A GGUF file that cannot be read; the message is one line naming the file."""


class ValueType(IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# struct code and size of each fixed-size value type
_FIXED: dict[int, tuple[str, int]] = {
    ValueType.UINT8: ("B", 1),
    ValueType.INT8: ("b", 1),
    ValueType.UINT16: ("H", 2),
    ValueType.INT16: ("h", 2),
    ValueType.UINT32: ("I", 4),
    ValueType.INT32: ("i", 4),
    ValueType.FLOAT32: ("f", 4),
    ValueType.BOOL: ("B", 1),
    ValueType.UINT64: ("Q", 8),
    ValueType.INT64: ("q", 8),
    ValueType.FLOAT64: ("d", 8),
}
_FIXED_STRUCT = {t: struct.Struct("<" + code) for t, (code, _) in _FIXED.items()}
# smallest encoded size of one array item: fixed size, an empty string, an empty array
_MIN_ITEM = {t: size for t, (_, size) in _FIXED.items()} | {
    ValueType.STRING: 8,
    ValueType.ARRAY: 12,
}

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_HEADER = struct.Struct("<4sIQQ")  # magic, version, n_tensors, n_kv
_KV_MIN = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a uint8 value
_TENSOR_MIN = 8 + 4 + 4 + 8  # name length, n_dims, type, offset


def _decode_str(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class GgufArray:
    """An array value. ``items`` is set for short arrays; ``values()`` reads long ones lazily."""

    item_type: ValueType
    count: int
    nbytes: int  # encoded size of the items
    path: str
    offset: int  # file offset of the first item
    items: tuple[Any, ...] | None = None

    def __len__(self) -> int:
        return self.count

    def values(self) -> tuple[Any, ...]:
        """All items decoded (strings as str, nested arrays as tuples); may read the file."""
        if self.items is not None:
            return self.items
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                raw = f.read(self.nbytes)
        except OSError as exc:
            raise GgufError(f"{self.path}: cannot read array: {exc.strerror or exc}") from None
        if len(raw) != self.nbytes:
            raise GgufError(f"{self.path}: file changed or was truncated while in use")
        items, end = _decode_items(raw, 0, self.item_type, self.count, len(raw), self.path, 1)
        if end != self.nbytes:
            raise GgufError(f"{self.path}: file changed while in use")
        return items

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values())


@dataclass(frozen=True)
class GgufTensor:
    """One entry of the tensor table. ``dims`` in ggml order (ne0 = row length first)."""

    name: str
    dims: tuple[int, ...]
    type: int  # ggml type id (GgmlType)
    offset: int  # relative to the data section of its file
    nbytes: int
    file_offset: int  # absolute offset in its file
    split: int = 0  # index of the file of a split model that holds it

    @property
    def type_name(self) -> str:
        return GGML_TYPES[self.type].name

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def n_dims(self) -> int:
        """ggml_n_dims: trailing dimensions of 1 do not count; at least 1."""
        for i in range(len(self.dims) - 1, 0, -1):
            if self.dims[i] > 1:
                return i + 1
        return 1

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order (reversed dims), as gguf-py reports it."""
        return tuple(reversed(self.dims))


@dataclass(frozen=True, eq=False)
class GgufFile:
    """The header of one .gguf file."""

    path: str
    version: int
    file_size: int
    alignment: int
    data_offset: int
    header_nbytes: int  # end of the tensor table, before padding to the data section
    metadata: Mapping[str, Any]
    kv_nbytes: Mapping[str, int]  # encoded size of each key/value pair
    kv_types: Mapping[str, ValueType]  # value type of each key (ARRAY for arrays)
    tensors: tuple[GgufTensor, ...]


@dataclass(frozen=True, eq=False)
class GgufModel:
    """A model: one GGUF file, or all files of a split model read as one."""

    files: tuple[GgufFile, ...]
    tensors: tuple[GgufTensor, ...]

    # -- general -------------------------------------------------------------------------
    @property
    def path(self) -> str:
        return self.files[0].path

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    @property
    def metadata(self) -> Mapping[str, Any]:
        return self.files[0].metadata

    @property
    def version(self) -> int:
        return self.files[0].version

    @property
    def alignment(self) -> int:
        return self.files[0].alignment

    @property
    def data_offset(self) -> int:
        return self.files[0].data_offset

    @property
    def file_size(self) -> int:
        """Bytes on disk, all splits together."""
        return sum(f.file_size for f in self.files)

    @property
    def split_count(self) -> int:
        return len(self.files)

    @cached_property
    def tensors_by_name(self) -> Mapping[str, GgufTensor]:
        return MappingProxyType({t.name: t for t in self.tensors})

    def tensor(self, name: str) -> GgufTensor | None:
        return self.tensors_by_name.get(name)

    @property
    def tensors_nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str | None:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    @property
    def name(self) -> str | None:
        v = self.metadata.get("general.name")
        return v if isinstance(v, str) else None

    @property
    def file_type(self) -> int | None:
        return _as_int(self.metadata.get("general.file_type"))

    @property
    def file_type_name(self) -> str | None:
        ft = self.file_type
        return None if ft is None else ftype_name(ft)

    def arch_value(self, suffix: str, default: Any = None) -> Any:
        """``{architecture}.{suffix}``, e.g. ``arch_value("block_count")``."""
        arch = self.architecture
        if arch is None:
            return default
        return self.metadata.get(f"{arch}.{suffix}", default)

    def _arch_int(self, suffix: str) -> int | None:
        return _as_int(self.arch_value(suffix))

    def _per_layer(self, suffix: str, default: int) -> tuple[int, ...]:
        """A hyperparameter stored as a scalar or a per-layer array, as one value per layer."""
        value = self.arch_value(suffix)
        n = self.n_layer
        if value is None:
            return (default,) * n
        if isinstance(value, GgufArray):
            items = tuple(int(v) for v in value.values())
            if len(items) < n:  # llama.cpp requires at least n_layer entries; pad defensively
                items = items + (items[-1] if items else default,) * (n - len(items))
            return items[:n]
        return (int(value),) * n

    # -- shape ---------------------------------------------------------------------------
    @property
    def n_layer(self) -> int:
        """block_count (including MTP/nextn layers, as llama.cpp's n_layer_all)."""
        return self._arch_int("block_count") or 0

    @property
    def n_embd(self) -> int:
        return self._arch_int("embedding_length") or 0

    @property
    def n_ff(self) -> int | tuple[int, ...] | None:
        return _scalar_or_tuple(self.arch_value("feed_forward_length"))

    @property
    def n_ff_layers(self) -> tuple[int, ...]:
        return self._per_layer("feed_forward_length", 0)

    @property
    def n_head_layers(self) -> tuple[int, ...]:
        return self._per_layer("attention.head_count", 0)

    @property
    def n_head(self) -> int:
        """Heads of layer 0 (llama.cpp's n_head())."""
        layers = self.n_head_layers
        return layers[0] if layers else (self._arch_int("attention.head_count") or 0)

    @property
    def n_head_kv(self) -> int | tuple[int, ...]:
        """KV heads as stored: one number, or one per layer; n_head when absent."""
        value = _scalar_or_tuple(self.arch_value("attention.head_count_kv"))
        if value is None:
            return _scalar_or_tuple(self.arch_value("attention.head_count")) or 0
        return value

    @property
    def n_head_kv_layers(self) -> tuple[int, ...]:
        if self.arch_value("attention.head_count_kv") is None:
            return self.n_head_layers
        return self._per_layer("attention.head_count_kv", 0)

    @property
    def n_gqa(self) -> int:
        """n_head / n_head_kv of layer 0 (0 when layer 0 has no KV heads), as llama.cpp."""
        kv = self.n_head_kv_layers
        if not kv or kv[0] == 0:
            return 0
        return self.n_head // kv[0]

    @property
    def head_dim_k(self) -> int:
        """attention.key_length, else n_embd / n_head."""
        v = self._arch_int("attention.key_length")
        if v is not None:
            return v
        return self.n_embd // self.n_head if self.n_head else 0

    @property
    def head_dim_v(self) -> int:
        v = self._arch_int("attention.value_length")
        if v is not None:
            return v
        return self.n_embd // self.n_head if self.n_head else 0

    @property
    def context_length(self) -> int | None:
        return self._arch_int("context_length")

    @property
    def expert_count(self) -> int:
        return self._arch_int("expert_count") or 0

    @property
    def expert_used_count(self) -> int:
        return self._arch_int("expert_used_count") or 0

    @property
    def expert_shared_count(self) -> int:
        return self._arch_int("expert_shared_count") or 0

    @property
    def expert_ff_length(self) -> int | None:
        return self._arch_int("expert_feed_forward_length")

    @property
    def sliding_window(self) -> int | None:
        return self._arch_int("attention.sliding_window")

    @property
    def sliding_window_pattern(self) -> int | tuple[Any, ...] | None:
        """An int period, or a per-layer array (bools: True = sliding window layer)."""
        return _scalar_or_tuple(self.arch_value("attention.sliding_window_pattern"))

    @property
    def nextn_predict_layers(self) -> int:
        return self._arch_int("nextn_predict_layers") or 0

    @property
    def kv_lora_rank(self) -> int | None:
        return self._arch_int("attention.kv_lora_rank")

    @property
    def rope_dimension_count(self) -> int | None:
        return self._arch_int("rope.dimension_count")

    @property
    def rope_freq_base(self) -> float | None:
        v = self.arch_value("rope.freq_base")
        return float(v) if isinstance(v, int | float) else None

    @property
    def rope_scaling_type(self) -> str | None:
        v = self.arch_value("rope.scaling.type")
        return v if isinstance(v, str) else None

    @property
    def rope_scaling_factor(self) -> float | None:
        v = self.arch_value("rope.scaling.factor")
        return float(v) if isinstance(v, int | float) else None

    # -- vocabulary and embeddings --------------------------------------------------------
    @property
    def tokens(self) -> GgufArray | None:
        v = self.metadata.get("tokenizer.ggml.tokens")
        return v if isinstance(v, GgufArray) else None

    @property
    def vocab_size(self) -> int | None:
        """``{arch}.vocab_size``, else the token list length, else token_embd's row count."""
        v = self._arch_int("vocab_size")
        if v is not None:
            return v
        tokens = self.tokens
        if tokens is not None:
            return tokens.count
        embd = self.tensor("token_embd.weight")
        if embd is not None and len(embd.dims) >= 2:
            return embd.dims[1]
        return None

    @property
    def tied_embeddings(self) -> bool:
        """No output.weight: llama.cpp reuses token_embd for the output head."""
        return self.tensor("output.weight") is None


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    return None


def _scalar_or_tuple(v: Any) -> Any:
    if isinstance(v, GgufArray):
        return v.values()
    return v


# -- parsing ---------------------------------------------------------------------------------


class _Cursor:
    """Bounds-checked reads over the mapped file."""

    __slots__ = ("buf", "path", "pos", "size")

    def __init__(self, buf: Any, size: int, path: str) -> None:
        self.buf = buf
        self.size = size
        self.path = path
        self.pos = 0

    def fail(self, what: str) -> GgufError:
        return GgufError(f"{self.path}: {what}")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"{what} runs past the end of the file (offset {self.pos})")

    def u32(self, what: str) -> int:
        self.need(4, what)
        v: int = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self.need(8, what)
        v: int = _U64.unpack_from(self.buf, self.pos)[0]
        self.pos += 8
        return v

    def string(self, what: str) -> str:
        n = self.u64(what)
        if n > self.size - self.pos:
            raise self.fail(f"{what} has length {n}, past the end of the file")
        start = self.pos
        self.pos += n
        return _decode_str(bytes(self.buf[start : self.pos]))


def _decode_items(
    buf: Any, pos: int, item_type: int, count: int, end: int, path: str, depth: int
) -> tuple[tuple[Any, ...], int]:
    """Decode ``count`` items of ``item_type`` at ``pos``; returns (items, position after)."""
    if item_type in _FIXED:
        code, size = _FIXED[item_type]
        if count * size > end - pos:
            raise GgufError(f"{path}: array of {count} items runs past the end of the file")
        items = struct.unpack_from(f"<{count}{code}", buf, pos)
        if item_type == ValueType.BOOL:
            items = tuple(bool(b) for b in items)
        return items, pos + count * size
    if item_type == ValueType.STRING:
        if count * 8 > end - pos:
            raise GgufError(f"{path}: array of {count} strings runs past the end of the file")
        out = []
        unpack = _U64.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                raise GgufError(f"{path}: string in array runs past the end of the file")
            n = unpack(buf, pos)[0]
            pos += 8
            if n > end - pos:
                raise GgufError(f"{path}: string in array has length {n}, past the end of the file")
            out.append(_decode_str(bytes(buf[pos : pos + n])))
            pos += n
        return tuple(out), pos
    if item_type == ValueType.ARRAY:
        if depth >= MAX_ARRAY_NESTING:
            raise GgufError(f"{path}: arrays nested deeper than {MAX_ARRAY_NESTING} levels")
        if count * 12 > end - pos:
            raise GgufError(f"{path}: array of {count} arrays runs past the end of the file")
        nested = []
        for _ in range(count):
            if pos + 12 > end:
                raise GgufError(f"{path}: nested array runs past the end of the file")
            inner_type = _U32.unpack_from(buf, pos)[0]
            inner_count = _U64.unpack_from(buf, pos + 4)[0]
            if inner_type not in _MIN_ITEM:
                raise GgufError(f"{path}: unknown value type {inner_type} in a nested array")
            inner, pos = _decode_items(buf, pos + 12, inner_type, inner_count, end, path, depth + 1)
            nested.append(inner)
        return tuple(nested), pos
    raise GgufError(f"{path}: unknown value type {item_type} in an array")


def _skip_items(
    buf: Any, pos: int, item_type: int, count: int, end: int, path: str, depth: int
) -> int:
    """Validate and step over ``count`` items without decoding them; returns the end position."""
    min_size = _MIN_ITEM.get(item_type)
    if min_size is None:
        raise GgufError(f"{path}: unknown value type {item_type} in an array")
    if count * min_size > end - pos:
        raise GgufError(f"{path}: array of {count} items runs past the end of the file")
    if item_type in _FIXED:
        return pos + count * min_size
    if item_type == ValueType.STRING:
        unpack = _U64.unpack_from
        try:
            for _ in range(count):
                pos += 8 + unpack(buf, pos)[0]
                if pos > end:
                    break
        except struct.error:
            pos = end + 1
        if pos > end:
            raise GgufError(f"{path}: string in array runs past the end of the file")
        return pos
    if depth >= MAX_ARRAY_NESTING:
        raise GgufError(f"{path}: arrays nested deeper than {MAX_ARRAY_NESTING} levels")
    for _ in range(count):
        if pos + 12 > end:
            raise GgufError(f"{path}: nested array runs past the end of the file")
        inner_type = _U32.unpack_from(buf, pos)[0]
        inner_count = _U64.unpack_from(buf, pos + 4)[0]
        pos = _skip_items(buf, pos + 12, inner_type, inner_count, end, path, depth + 1)
    return pos


def _read_value(cur: _Cursor, vtype: int, key: str) -> Any:
    fixed = _FIXED_STRUCT.get(vtype)
    if fixed is not None:
        cur.need(fixed.size, f"value of {key!r}")
        v = fixed.unpack_from(cur.buf, cur.pos)[0]
        cur.pos += fixed.size
        return bool(v) if vtype == ValueType.BOOL else v
    if vtype == ValueType.STRING:
        return cur.string(f"value of {key!r}")
    if vtype == ValueType.ARRAY:
        item_type = cur.u32(f"array type of {key!r}")
        count = cur.u64(f"array length of {key!r}")
        if item_type not in _MIN_ITEM:
            raise cur.fail(f"key {key!r} is an array of unknown value type {item_type}")
        if count * _MIN_ITEM[item_type] > cur.size - cur.pos:
            raise cur.fail(f"key {key!r} claims {count} array items, more than the file can hold")
        start = cur.pos
        items: tuple[Any, ...] | None = None
        if count <= EAGER_ARRAY_ITEMS:
            items, cur.pos = _decode_items(cur.buf, start, item_type, count, cur.size, cur.path, 1)
        else:
            cur.pos = _skip_items(cur.buf, start, item_type, count, cur.size, cur.path, 1)
        return GgufArray(
            item_type=ValueType(item_type),
            count=count,
            nbytes=cur.pos - start,
            path=cur.path,
            offset=start,
            items=items,
        )
    raise cur.fail(f"key {key!r} has unknown value type {vtype}")


def read_gguf_file(path: str | os.PathLike[str]) -> GgufFile:
    """Read the header of one .gguf file (not following split siblings)."""
    spath = os.fspath(path)
    try:
        with open(spath, "rb") as f:
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
    except IsADirectoryError:
        raise GgufError(f"{spath}: is a directory, not a GGUF file") from None
    except OSError as exc:
        raise GgufError(f"{spath}: cannot read: {exc.strerror or exc}") from None


def _parse(buf: Any, size: int, path: str) -> GgufFile:
    cur = _Cursor(buf, size, path)
    magic, version, n_tensors, n_kv = _HEADER.unpack_from(buf, 0)
    if magic != GGUF_MAGIC:
        raise cur.fail(f"not a GGUF file (starts with {magic!r})")
    if version == 1:
        raise cur.fail("GGUF version 1 is not supported (llama.cpp reads v2 and v3; re-convert)")
    if version & 0xFFFF == 0 and version != 0:
        raise cur.fail(f"GGUF version {version:#x}: a big-endian file, not supported")
    if version not in (2, 3):
        raise cur.fail(f"unsupported GGUF version {version} (expected 2 or 3)")
    cur.pos = _HEADER.size
    remaining = size - cur.pos
    if n_kv * _KV_MIN > remaining:
        raise cur.fail(f"header claims {n_kv} metadata keys, more than the file can hold")
    if n_tensors * _TENSOR_MIN > remaining:
        raise cur.fail(f"header claims {n_tensors} tensors, more than the file can hold")

    metadata: dict[str, Any] = {}
    kv_nbytes: dict[str, int] = {}
    kv_types: dict[str, ValueType] = {}
    for i in range(n_kv):
        start = cur.pos
        key = cur.string(f"metadata key {i}")
        if not key:
            raise cur.fail(f"metadata key {i} is empty")
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        vtype = cur.u32(f"type of {key!r}")
        metadata[key] = _read_value(cur, vtype, key)
        kv_nbytes[key] = cur.pos - start
        kv_types[key] = ValueType(vtype)

    alignment = GGUF_DEFAULT_ALIGNMENT
    if "general.alignment" in metadata:
        a = metadata["general.alignment"]
        if kv_types["general.alignment"] != ValueType.UINT32:
            raise cur.fail("general.alignment is not a uint32")
        if a <= 0 or a & (a - 1):
            raise cur.fail(f"general.alignment {a} is not a power of 2")
        alignment = a

    raw_tensors: list[tuple[str, tuple[int, ...], int, int, int]] = []
    seen: set[str] = set()
    for i in range(n_tensors):
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
        dims = struct.unpack_from(f"<{n_dims}Q", buf, cur.pos)
        cur.pos += 8 * n_dims
        type_id = struct.unpack_from("<i", buf, cur.pos)[0]
        offset = _U64.unpack_from(buf, cur.pos + 4)[0]
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
        nbytes = n_elem // info.block_size * info.type_size
        raw_tensors.append((name, tuple(dims), type_id, offset, nbytes))

    header_nbytes = cur.pos
    data_offset = header_nbytes
    if n_tensors:
        data_offset = -(-header_nbytes // alignment) * alignment
        if data_offset > size:
            raise cur.fail("the tensor data section starts past the end of the file")

    tensors = tuple(
        GgufTensor(
            name=name,
            dims=dims,
            type=type_id,
            offset=offset,
            nbytes=nbytes,
            file_offset=data_offset + offset,
        )
        for name, dims, type_id, offset, nbytes in raw_tensors
    )
    _check_tensor_data(tensors, size, alignment, data_offset, path)
    return GgufFile(
        path=path,
        version=version,
        file_size=size,
        alignment=alignment,
        data_offset=data_offset,
        header_nbytes=header_nbytes,
        metadata=MappingProxyType(metadata),
        kv_nbytes=MappingProxyType(kv_nbytes),
        kv_types=MappingProxyType(kv_types),
        tensors=tensors,
    )


def _check_tensor_data(
    tensors: tuple[GgufTensor, ...], size: int, alignment: int, data_offset: int, path: str
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


MAX_LAYERS = 512  # llama.cpp's LLAMA_MAX_LAYERS

# Hyperparameters the estimator and the quant rules compute with: each must be a whole
# number >= 0, or (per layer) a non-empty array of them.
SIZE_KEYS = (
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.sliding_window",
    "expert_count",
    "expert_used_count",
)


def _check_sizes(f: GgufFile) -> None:
    """Refuse hyperparameters no model has, so nothing downstream sizes a tuple by them."""
    arch = f.metadata.get("general.architecture")
    if not isinstance(arch, str):
        return
    for suffix in SIZE_KEYS:
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
        for v in items:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise GgufError(f"{f.path}: {key} is {v!r}, not a whole number >= 0")
    blocks = f.metadata.get(f"{arch}.block_count")
    if isinstance(blocks, int) and blocks > MAX_LAYERS:
        raise GgufError(f"{f.path}: {blocks} layers; llama.cpp allows {MAX_LAYERS}")


def read_gguf(path: str | os.PathLike[str]) -> GgufModel:
    """Read a model's header; a split model (split.count > 1) is read from all its files."""
    first = read_gguf_file(path)
    _check_sizes(first)
    count = _as_int(first.metadata.get("split.count"))
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
        no = _as_int(f.metadata.get("split.no"))
        if no != i:
            raise GgufError(f"{p}: split.no is {no}, expected {i}")
        files.append(f)

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
    expected = _as_int(files[0].metadata.get("split.tensors.count"))
    if expected is not None and expected != len(tensors):
        raise GgufError(
            f"{files[0].path}: split.tensors.count is {expected} but the {count} files hold "
            f"{len(tensors)} tensors"
        )
    return GgufModel(files=tuple(files), tensors=tuple(tensors))
