"""Quantization what-if: llama-quantize's per-tensor type rules (:mod:`.quant_rules`) applied
to a model's tensor list, and the file it would write (metadata copied from the source,
general.file_type and general.quantization_version set, split keys removed, tensor table,
every tensor padded to 32 bytes). Only tensor names and shapes matter, plus the
source type of the tensors llama-quantize copies unchanged (norms, 1-d tensors, routers), so
the sizes of every quantization can be predicted from any GGUF of the model.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

from lltui.core.gguf.model import GgufFile, GgufModel, GgufTensor, Shapes, TensorsByName
from lltui.core.gguf.types import (
    FTYPE_DEFAULT_TYPE,
    FTYPE_NAMES,
    QUANTIZE_FTYPES,
    GgmlType,
    LlamaFtype,
    n_dims,
    tensor_nbytes,
    type_info,
)
from lltui.core.gguf.values import ValueType
from lltui.core.jsonout import fields_of
from lltui.core.quant.rules import (
    PreparedSource,
    QuantizeRefused,
    QuantSource,
    SourceTensor,
    choose_types,
    prepare,
    reads_imatrix,
)

GGUF_DEFAULT_ALIGNMENT = 32
GGML_QNT_VERSION = 2  # general.quantization_version written by this llama.cpp
GGUF_HEADER_BYTES = 4 + 4 + 8 + 8  # magic, version, tensor count, key/value count
# keys llama-quantize drops from the copied metadata, or sets itself
_REMOVED_KEYS = frozenset(
    {
        "split.no",
        "split.count",
        "split.tensors.count",
        "general.quantization_version",
        "general.file_type",
    }
)
_ADDED_U32_KEYS = ("general.quantization_version", "general.file_type")

_G = GgmlType
V = TypeVar("V")


def quant_source(model: GgufModel) -> QuantSource:
    """The rules' input from a model's header; a split model's metadata is its first file's."""
    kept = [n for k, n in model.files[0].kv_nbytes.items() if k not in _REMOVED_KEYS]
    head_kv = model.n_head_kv_layers
    return QuantSource(
        arch=model.architecture or "",
        n_layer=model.n_layer,
        n_head=model.n_head,
        n_head_kv=head_kv[0] if head_kv else model.n_head,
        n_expert=model.expert_count,
        tensors=tuple(SourceTensor(t.name, t.dims, t.type) for t in model.tensors),
        kv_bytes=sum(kept),
        n_kv=len(kept),
    )


@dataclass(frozen=True)
class QuantTensor:
    """One tensor of the file llama-quantize writes: its type and bytes there."""

    name: str
    dims: tuple[int, ...]
    source_type: int
    type: GgmlType
    nbytes: int
    quantizable: bool  # False: copied unchanged (norms, 1-d, routers, ...)
    fallback: bool  # its rows do not fit the chosen type's blocks; a fallback type was used

    @property
    def type_name(self) -> str:
        return type_info(self.type).name


@dataclass(frozen=True)
class QuantRow:
    """One llama-quantize type applied to one model."""

    ftype: LlamaFtype
    name: str  # as llama-quantize spells it: "Q4_K_M"
    tensors: tuple[QuantTensor, ...]  # in the order llama-quantize writes them
    meta_bytes: int  # header, metadata and tensor table, before padding
    header_bytes: int  # meta_bytes padded to 32: where the tensor data starts
    weights_bytes: int  # sum of tensor bytes
    file_bytes: int  # the size of the file llama-quantize writes
    n_fallback: int
    requires_imatrix: bool  # llama-quantize refuses to make it without --imatrix
    imatrix: bool  # the rules were applied as with an importance matrix
    requantize: bool  # some tensors of the source are quantized: needs --allow-requantize
    error: str | None = None  # llama-quantize would stop; sizes are then 0
    # what every type of the same source shares (names, shapes, the tensors copied unchanged)
    kept: _Kept | None = field(default=None, compare=False, repr=False)
    # why this type adds nothing over the source's own weights (F32 of an F16 model, Q8_0 of
    # a Q4_0 one)
    above_source: str | None = None

    @property
    def n_elements(self) -> int:
        if self.kept is not None and self.tensors:
            return self.kept.n_elements  # every type of a source has its tensors' shapes
        return sum(math.prod(t.dims) for t in self.tensors)

    @property
    def bits_per_weight(self) -> float:
        n = self.n_elements
        return self.weights_bytes * 8 / n if n else 0.0

    def type_counts(self) -> dict[str, int]:
        """How many tensors of each type, e.g. {"q4_K": 120, "q6_K": 17, "f32": 65}."""
        return dict(Counter(t.type_name for t in self.tensors))

    def as_dict(self) -> dict[str, object]:
        """The row for ``quant --json`` (the estimator adds fits, max_ctx and devices)."""
        return {
            "type": self.name,
            "ftype": int(self.ftype),
            **fields_of(self, "file_bytes weights_bytes header_bytes"),
            "bits_per_weight": round(self.bits_per_weight, 3),
            **fields_of(self, "n_fallback requires_imatrix requantize"),
            "tensor_types": self.type_counts(),
            **fields_of(self, "error above_source"),
        }


def _kv_u32_bytes(key: str) -> int:
    return 8 + len(key.encode("utf-8")) + 4 + 4


def _tensor_info_bytes(name: str, dims: Sequence[int]) -> int:
    return 8 + len(name.encode("utf-8")) + 4 + 8 * n_dims(dims) + 4 + 8


def _pad(n: int, align: int = GGUF_DEFAULT_ALIGNMENT) -> int:
    return -(-n // align) * align


_nbytes = lru_cache(maxsize=1024)(tensor_nbytes)


def _imatrix_keys_bytes(imatrix_file: str, imatrix_dataset: str | None) -> int:
    """The quantize.imatrix.* keys llama-quantize records (strings cut at 127 bytes)."""
    n = 8 + len("quantize.imatrix.file") + 4 + 8 + min(127, len(imatrix_file.encode("utf-8")))
    if imatrix_dataset is not None:
        n += 8 + len("quantize.imatrix.dataset") + 4 + 8
        n += min(127, len(imatrix_dataset.encode("utf-8")))
    return (
        n
        + _kv_u32_bytes("quantize.imatrix.entries_count")
        + _kv_u32_bytes("quantize.imatrix.chunks_count")
    )


def _tensor_table_bytes(prep: PreparedSource) -> int:
    """The tensor table's size: names and shapes only, the same for every type."""
    return sum(_tensor_info_bytes(f.tensor.name, f.tensor.dims) for f in prep.ordered)


def quant_row(
    src: QuantSource,
    ftype: LlamaFtype,
    *,
    imatrix: bool | None = None,
    imatrix_file: str = "imatrix.gguf",
    imatrix_dataset: str | None = None,
    prepared: PreparedSource | None = None,
    tensor_table_bytes: int | None = None,
    made: dict[tuple[int, int, bool], tuple[QuantTensor, int]] | None = None,
    kept: _Kept | None = None,
) -> QuantRow:
    """The tensors and file size llama-quantize produces for ``ftype``.

    ``imatrix=None`` assumes an importance matrix exactly where llama-quantize demands one.
    With one, the file also records ``imatrix_file`` and ``imatrix_dataset`` (as given to
    llama-quantize and stored in the imatrix file) in its metadata. ``made``: the tensors
    other types of the same ``prepared`` source made, by (position, type, fallback), to share;
    ``kept``: the tensors of ``prepared`` that every type copies unchanged, made once.
    """
    ftype = LlamaFtype(ftype)
    name = FTYPE_NAMES[ftype]
    default = FTYPE_DEFAULT_TYPE.get(ftype, _G.F32)
    prep = prepared if prepared is not None else prepare(src)
    try:
        use_imatrix = bool(imatrix)
        chosen, n_fallback, needs = choose_types(src, ftype, use_imatrix, prep)
        if imatrix is None and needs:
            use_imatrix = True
            if reads_imatrix(ftype):  # else the same types come out again
                chosen, n_fallback, needs = choose_types(src, ftype, use_imatrix, prep)
    except QuantizeRefused as exc:
        return QuantRow(ftype, name, (), 0, 0, 0, 0, 0, False, bool(imatrix), False, str(exc))

    tensors, weights, padded = _row_tensors(chosen, {} if made is None else made, kept)
    meta = GGUF_HEADER_BYTES + src.kv_bytes + sum(_kv_u32_bytes(k) for k in _ADDED_U32_KEYS)
    meta += _tensor_table_bytes(prep) if tensor_table_bytes is None else tensor_table_bytes
    if use_imatrix:
        meta += _imatrix_keys_bytes(imatrix_file, imatrix_dataset)
    header = _pad(meta)
    # a tensor copied unchanged keeps its source type: only the chosen ones can requantize
    facts = prep.ordered
    requantize = prep.any_source_quantized and any(
        facts[i].source_quantized and tensors[i].type != tensors[i].source_type
        for i in (range(len(tensors)) if kept is None else kept.chosen)
    )
    return QuantRow(
        ftype=ftype,
        name=name,
        tensors=tensors,
        meta_bytes=meta,
        header_bytes=header,
        weights_bytes=weights,
        file_bytes=header + padded,
        n_fallback=n_fallback,
        requires_imatrix=needs,
        imatrix=use_imatrix,
        requantize=requantize,
        kept=kept,
        above_source=above_source(default, prep.precision),
    )


@dataclass(frozen=True, slots=True)
class _Kept:
    """The tensors every type copies unchanged (norms, 1-d tensors, routers: a header of a
    million tensors is mostly these), made once for all the types of a prepared source:
    ``tensors`` holds them at their positions (None where the type chooses), with their
    bytes and padded bytes; ``chosen`` the positions the type chooses."""

    tensors: tuple[QuantTensor | None, ...]
    weights: int
    padded: int
    chosen: tuple[int, ...]
    shapes: Shapes  # (name, dims) of every tensor in the order written
    index: Mapping[str, int]  # position by name
    n_elements: int  # of all the tensors

    @classmethod
    def of(cls, prep: PreparedSource) -> _Kept:
        tensors: list[QuantTensor | None] = []
        chosen = []
        weights = padded = 0
        for i, f in enumerate(prep.ordered):
            if f.kept_type is None:
                tensors.append(None)
                chosen.append(i)
                continue
            t = f.tensor
            nbytes = _nbytes(f.kept_type, t.dims)
            tensors.append(QuantTensor(t.name, t.dims, t.type, f.kept_type, nbytes, False, False))
            weights += nbytes
            padded += _pad(nbytes)
        shapes = Shapes((f.tensor.name, f.tensor.dims) for f in prep.ordered)
        index = {name: i for i, (name, _) in enumerate(shapes)}
        n_elements = sum(math.prod(dims) for _, dims in shapes)
        return cls(tuple(tensors), weights, padded, tuple(chosen), shapes, index, n_elements)


def _row_tensors(
    chosen: Sequence[tuple[SourceTensor, GgmlType, bool, bool]],
    made: dict[tuple[int, int, bool], tuple[QuantTensor, int]],
    kept: _Kept | None = None,
) -> tuple[tuple[QuantTensor, ...], int, int]:
    """The tensors of a row (shared with other rows through ``made``, each with its size
    padded as the file stores it), their bytes, and their padded bytes. With ``kept`` (of
    the source ``chosen`` comes from), only the tensors whose type the row chooses are
    looked at."""
    if kept is None:
        positions: Iterable[int] = range(len(chosen))
        out: list[QuantTensor | None] = [None] * len(chosen)
        weights = padded = 0
    else:
        positions = kept.chosen
        out = list(kept.tensors)
        weights, padded = kept.weights, kept.padded
    for i in positions:
        t, new, quantizable, fell_back = chosen[i]
        got = made.get((i, new, fell_back))
        if got is None:
            nbytes = _nbytes(new, t.dims)
            qt = QuantTensor(t.name, t.dims, t.type, new, nbytes, quantizable, fell_back)
            got = made[(i, new, fell_back)] = (qt, _pad(nbytes))
        out[i] = got[0]
        weights += got[0].nbytes
        padded += got[1]
    return tuple(out), weights, padded  # type: ignore[arg-type]  # every position is set


def quant_sizes(
    model: GgufModel | QuantSource,
    ftypes: Iterable[LlamaFtype] | None = None,
    *,
    imatrix: bool | None = None,
    imatrix_file: str = "imatrix.gguf",
    imatrix_dataset: str | None = None,
) -> list[QuantRow]:
    """One QuantRow per llama-quantize type (all by default), for a GgufModel or a QuantSource."""
    src = model if isinstance(model, QuantSource) else quant_source(model)
    prep = prepare(src)  # the per-tensor checks every type shares, once
    table = _tensor_table_bytes(prep)
    made: dict[tuple[int, int, bool], tuple[QuantTensor, int]] = {}
    kept = _Kept.of(prep)
    return [
        quant_row(
            src,
            ft,
            imatrix=imatrix,
            imatrix_file=imatrix_file,
            imatrix_dataset=imatrix_dataset,
            prepared=prep,
            tensor_table_bytes=table,
            made=made,
            kept=kept,
        )
        for ft in (ftypes or QUANTIZE_FTYPES)
    ]


def _bits(t: GgmlType) -> float:
    info = type_info(t)
    return info.type_size * 8 / info.block_size


def above_source(wanted: GgmlType, source: GgmlType | None) -> str | None:
    """Why making ``wanted`` of weights in ``source`` adds nothing: a type with more bits
    (F32 of F16 weights, Q8_0 of Q4_0 ones: requantizing restores nothing the source's own
    type dropped) or as many in another form (BF16 of F16 weights holds less).
    ``source`` None: no weights llama-quantize would touch."""
    if source is None or wanted == source:
        return None
    name = type_info(source).canonical
    if _bits(wanted) > _bits(source):
        return f"above the source's precision, {name}"
    if _bits(wanted) == _bits(source):
        return f"no more precise than the source's {name}"
    return None


_TERNARY_FTYPES = (LlamaFtype.MOSTLY_TQ1_0, LlamaFtype.MOSTLY_TQ2_0)
_TERNARY_TYPES = (_G.TQ1_0, _G.TQ2_0)
_TERNARY_ARCHS = ("bitnet",)


def is_ternary(src: QuantSource) -> bool:
    """A model trained with ternary weights (BitNet b1.58): the only kind TQ1_0 and TQ2_0
    keep; on any other model they destroy it. Known by its architecture or by tensors that
    already are TQ1_0/TQ2_0."""
    return src.arch in _TERNARY_ARCHS or any(t.type in _TERNARY_TYPES for t in src.tensors)


def relevant_ftypes(src: QuantSource) -> tuple[list[LlamaFtype], list[tuple[str, str]]]:
    """The llama-quantize types worth listing for this model, and those left out with why:
    TQ1_0/TQ2_0 only for ternary models, MXFP4_MOE only for MoE models (on a dense one
    llama-quantize makes every tensor Q8_0: the Q8_0 row again)."""
    keep: list[LlamaFtype] = []
    skipped: list[tuple[str, str]] = []
    ternary = is_ternary(src)
    for ft in QUANTIZE_FTYPES:
        if ft in _TERNARY_FTYPES and not ternary:
            skipped.append((FTYPE_NAMES[ft], "ternary type: only for ternary (BitNet) models"))
        elif ft == LlamaFtype.MOSTLY_MXFP4_MOE and src.n_expert <= 1:
            skipped.append((FTYPE_NAMES[ft], "MoE type: on a dense model it is Q8_0"))
        else:
            keep.append(ft)
    return keep, skipped


class _Quantized(Mapping[str, V]):
    """A column of the metadata llama-quantize writes: ``base`` (the source's) without the
    keys it drops, then ``own`` (the keys it sets, all among those dropped). A view, not a
    copy: a header may hold millions of keys, and every quantization type shares them."""

    def __init__(self, own: Mapping[str, V], base: Mapping[str, V]) -> None:
        self._own = own
        self._base = base
        self._len = len(own) + len(base) - sum(1 for k in _REMOVED_KEYS if k in base)

    def __getitem__(self, key: str) -> V:
        if key in _REMOVED_KEYS:
            return self._own[key]
        return self._base[key]

    def __contains__(self, key: object) -> bool:
        if key in _REMOVED_KEYS:
            return key in self._own
        return key in self._base

    def __iter__(self) -> Iterator[str]:
        yield from (k for k in self._base if k not in _REMOVED_KEYS)
        yield from self._own

    def __len__(self) -> int:
        return self._len


def as_quantized(model: GgufModel, row: QuantRow) -> GgufModel:
    """The header of the file llama-quantize would write for ``row``, as a GgufModel.

    One file (splits are joined), tensors in llama-quantize's order with their new types, sizes
    and offsets, the metadata with general.file_type set and the split keys gone. Lets the
    estimator place a quantization that exists only as a what-if. The path is a name only.
    """
    if row.error is not None:
        raise ValueError(f"{row.name}: {row.error}")
    first = model.files[0]
    # the metadata every type shares, seen through views; each type adds its own two keys
    own = {"general.quantization_version": GGML_QNT_VERSION, "general.file_type": int(row.ftype)}
    metadata = _Quantized(own, first.metadata)
    kv_nbytes = _Quantized({k: _kv_u32_bytes(k) for k in own}, first.kv_nbytes)
    kv_types = _Quantized(dict.fromkeys(own, ValueType.UINT32), first.kv_types)

    tensors: list[GgufTensor] = []
    offset = 0
    header = row.header_bytes
    align = GGUF_DEFAULT_ALIGNMENT
    add = tensors.append
    for t in row.tensors:  # once per tensor and type: _pad inlined
        nbytes = t.nbytes
        add(GgufTensor(t.name, t.dims, int(t.type), offset, nbytes, header + offset))
        offset += -(-nbytes // align) * align
    stem = first.path[:-5] if first.path.endswith(".gguf") else first.path
    stem = re.sub(r"-\d{5}-of-\d{5}$", "", stem)
    out = GgufFile(
        path=f"{stem}-{row.name}.gguf",
        version=3,
        file_size=row.file_bytes,
        alignment=GGUF_DEFAULT_ALIGNMENT,
        data_offset=row.header_bytes,
        header_nbytes=row.meta_bytes,
        metadata=metadata,
        kv_nbytes=kv_nbytes,
        kv_types=kv_types,
        tensors=tuple(tensors),
    )
    quant = GgufModel(files=(out,), tensors=out.tensors)
    # the source's tensors in another order and types: its parameters, the row's bytes
    quant.__dict__["n_params"] = model.n_params
    quant.__dict__["tensors_nbytes"] = row.weights_bytes
    if row.kept is not None:  # the names and shapes of every type's header: made once
        quant.__dict__["shapes"] = row.kept.shapes
        quant.__dict__["tensors_by_name"] = TensorsByName(row.kept.index, quant.tensors)
    return quant
