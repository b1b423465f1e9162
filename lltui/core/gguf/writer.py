"""GGUF bytes as llama.cpp reads them (version 3, little-endian): strings, key/value pairs,
arrays, the tensor table and the header with its padding. Pure: the caller writes the bytes
(and the tensor data after the header) where they go. The counts may be given apart from the
parts, to make files that lie about them (the reader's tests)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from lltui.core.gguf.values import ValueType

MAGIC = b"GGUF"
ALIGNMENT = 32  # tensor data starts (and each tensor is padded) to this many bytes


def gguf_string(s: str | bytes) -> bytes:
    data = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(data)) + data


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    """One key/value pair, its value already encoded."""
    return gguf_string(key) + struct.pack("<I", vtype) + payload


def kv_u32(key: str, value: int) -> bytes:
    return kv(key, ValueType.UINT32, struct.pack("<I", value))


def kv_f32(key: str, value: float) -> bytes:
    return kv(key, ValueType.FLOAT32, struct.pack("<f", value))


def kv_str(key: str, value: str) -> bytes:
    return kv(key, ValueType.STRING, gguf_string(value))


def array(item_type: int, count: int, items: bytes) -> bytes:
    """An array's payload: its item type, its count and the items, encoded."""
    return struct.pack("<IQ", item_type, count) + items


def kv_strings(key: str, values: Sequence[str]) -> bytes:
    items = b"".join(gguf_string(v) for v in values)
    return kv(key, ValueType.ARRAY, array(ValueType.STRING, len(values), items))


def kv_numbers(key: str, item_type: ValueType, code: str, values: Sequence[float]) -> bytes:
    """An array of numbers of one type (``code``: its struct code, ``f`` or ``i``)."""
    items = struct.pack(f"<{len(values)}{code}", *values)
    return kv(key, ValueType.ARRAY, array(item_type, len(values), items))


def tensor_info(name: str, dims: Sequence[int], type_id: int, offset: int) -> bytes:
    """One tensor's entry in the table: name, ggml dims (ne0 first), type, data offset."""
    return (
        gguf_string(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<iQ", type_id, offset)
    )


def gguf_header(
    kvs: Sequence[bytes],
    tensor_infos: Sequence[bytes],
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
    alignment: int = ALIGNMENT,
) -> bytes:
    """Everything before the tensor data, padded to ``alignment`` where there are tensors."""
    head = MAGIC + struct.pack(
        "<IQQ",
        version,
        len(tensor_infos) if n_tensors is None else n_tensors,
        len(kvs) if n_kv is None else n_kv,
    )
    body = head + b"".join(kvs) + b"".join(tensor_infos)
    if tensor_infos:
        body += b"\0" * (-len(body) % alignment)
    return body
