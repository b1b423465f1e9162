"""A GGUF of the same shape as a model whose weights are not here (read by its header only):
the header copied byte for byte (metadata, vocabulary, tensor names, shapes, types and
offsets), the data section a hole of the real size (a sparse file: no disk), and data only
where speed depends on it:

- the token embeddings: a few hundred distinct random rows repeated over the vocabulary,
  so the tokens of a batch differ;
- the norm weights: ones, so the hidden state stays what the embeddings make it;
- the MoE routers: random, so each token picks its own experts and a batch's routing
  spreads across the experts as real weights do (all-zero routers tie, and every token
  would take the same few experts: prompts would run too fast).

Every other weight is zero: matmuls and attention cost the same for any values (no
denormals), so llama-bench on this file times what the real model would. Blocks are made
valid for each type by writing small finite scales where the type keeps them.
"""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

from lltui.core.gguf.model import GgufFile, GgufModel, GgufTensor
from lltui.core.gguf.types import GgmlType, type_info
from lltui.core.gguf.values import GgufError, open_regular

DISTINCT_ROWS = 251  # token embedding rows before they repeat (prime: consecutive ids differ)
_F16_SMALL = struct.pack("<e", 0.01)
# where each block type keeps its f16 scales (byte offsets in the block): random bytes
# elsewhere are valid values (quant indices, grid indices, sign bits)
_F16_SCALES: dict[int, tuple[int, ...]] = {
    GgmlType.Q4_0: (0,),
    GgmlType.Q4_1: (0, 2),
    GgmlType.Q5_0: (0,),
    GgmlType.Q5_1: (0, 2),
    GgmlType.Q8_0: (0,),
    GgmlType.Q8_1: (0, 2),
    GgmlType.Q2_K: (80, 82),
    GgmlType.Q3_K: (108,),
    GgmlType.Q4_K: (0, 2),
    GgmlType.Q5_K: (0, 2),
    GgmlType.Q6_K: (208,),
    GgmlType.IQ2_XXS: (0,),
    GgmlType.IQ2_XS: (0,),
    GgmlType.IQ2_S: (0,),
    GgmlType.IQ3_XXS: (0,),
    GgmlType.IQ3_S: (0,),
    GgmlType.IQ1_S: (0,),
    GgmlType.IQ4_NL: (0,),
    GgmlType.IQ4_XS: (0,),
    GgmlType.TQ2_0: (64,),
}


class SameShapeError(OSError):
    """The file cannot be written; ``str()`` is one line."""


def _floats(rng: random.Random, n: int, type_id: int, scale: float = 0.02) -> bytes | None:
    """``n`` random small values as F32/F16/BF16 bytes; None for other types."""
    values = [rng.gauss(0.0, scale) for _ in range(n)]
    if type_id == GgmlType.F32:
        return struct.pack(f"<{n}f", *values)
    if type_id == GgmlType.F16:
        return struct.pack(f"<{n}e", *values)
    if type_id == GgmlType.BF16:
        raw = struct.pack(f"<{n}f", *values)
        return b"".join(raw[i + 2 : i + 4] for i in range(0, len(raw), 4))
    return None


def random_row(rng: random.Random, type_id: int, n: int) -> bytes:
    """One row of ``n`` elements of a weight type with random, finite values (zeros for a
    type whose scales this does not know)."""
    got = _floats(rng, n, type_id)
    if got is not None:
        return got
    info = type_info(type_id)
    blocks = n // info.block_size
    row = bytearray(rng.randbytes(blocks * info.type_size))
    if type_id == GgmlType.MXFP4:
        row[0 :: info.type_size] = bytes([120]) * blocks  # e8m0 scale 2^-7
        return bytes(row)
    offsets = _F16_SCALES.get(type_id)
    if offsets is None:
        return bytes(blocks * info.type_size)
    for b in range(blocks):
        base = b * info.type_size
        for off in offsets:
            row[base + off : base + off + 2] = _F16_SMALL
    return bytes(row)


def ones_row(n: int, type_id: int) -> bytes:
    if type_id == GgmlType.F32:
        return struct.pack("<f", 1.0) * n
    if type_id == GgmlType.F16:
        return struct.pack("<e", 1.0) * n
    if type_id == GgmlType.BF16:
        return struct.pack("<f", 1.0)[2:] * n
    return b""


def _fill(tensor: GgufTensor, rng: random.Random) -> tuple[bytes, int] | None:
    """The data a tensor gets, as (pattern, times it repeats); None: it stays zero."""
    name = tensor.name
    n = tensor.n_elements
    if name == "token_embd.weight" and len(tensor.dims) >= 2:
        width, rows = tensor.dims[0], tensor.dims[1]
        distinct = [random_row(rng, tensor.type, width) for _ in range(min(rows, DISTINCT_ROWS))]
        return b"".join(distinct), -(-rows // len(distinct))
    got: bytes | None = None
    if len(tensor.dims) == 1 or tensor.n_dims == 1:
        got = ones_row(n, tensor.type) if name.endswith("norm.weight") else None
    elif name.endswith("ffn_gate_inp.weight"):
        got = _floats(rng, n, tensor.type, scale=0.5)
    return (got, 1) if got else None


def write_same_shape(model: GgufModel, out: Path, seed: int = 0) -> list[Path]:
    """Write ``model``'s shape to ``out`` (and its split siblings); the paths written."""
    rng = random.Random(seed)
    paths = []
    names = _split_names(out, len(model.files))
    for f, path in zip(model.files, names, strict=True):
        _write_one(f, path, rng)
        paths.append(path)
    return paths


def _split_names(out: Path, count: int) -> list[Path]:
    if count == 1:
        return [out]
    stem = out.name.removesuffix(".gguf")
    return [out.with_name(f"{stem}-{i + 1:05d}-of-{count:05d}.gguf") for i in range(count)]


def _write_one(f: GgufFile, path: Path, rng: random.Random) -> None:
    if f.header_file is None:
        raise SameShapeError(f"{f.path}: no copy of its header was kept to write from")
    try:
        with open_regular(f.header_file) as src:
            header = src.read(f.header_nbytes)
    except (OSError, GgufError) as exc:
        raise SameShapeError(f"{f.path}: cannot read its header: {exc}") from None
    if len(header) < f.header_nbytes:
        raise SameShapeError(f"{f.path}: the header copy is incomplete")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    try:
        with open(tmp, "wb") as dst:
            dst.write(header)
            dst.write(bytes(f.data_offset - f.header_nbytes))
            dst.truncate(f.file_size)  # a hole of the real size
            for t in f.tensors:
                fill = _fill(t, rng)
                if fill is None:
                    continue
                pattern, times = fill
                dst.seek(f.data_offset + t.offset)
                left = t.nbytes
                for _ in range(times):
                    chunk = pattern[:left]
                    dst.write(chunk)
                    left -= len(chunk)
                    if left <= 0:
                        break
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise SameShapeError(f"{path}: cannot write it: {exc}") from None
