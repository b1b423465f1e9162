"""A GGUF model as read: its files' headers, the tensor table, and what the metadata says
(architecture, shapes, vocabulary), for one file or a split model read as one."""

from __future__ import annotations

import math
from collections.abc import (
    Callable,
    ItemsView,
    Iterator,
    KeysView,
    Mapping,
    Sequence,
    ValuesView,
)
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from lltui.core.gguf.types import GGML_TYPES, ftype_name, n_dims
from lltui.core.gguf.values import GgufArray, ValueType, as_int

T = TypeVar("T")


class KvColumn(Mapping[str, T], Generic[T]):
    """One number per metadata key, in the keys' order, held in a compact array beside the
    metadata (a key/value pair's encoded size, or its type): a header of two million keys
    costs a few MiB here rather than another dict. Iterating it, or its items, walks the
    keys and the array together; looking one key up builds an index of the keys once."""

    __slots__ = ("_cast", "_index", "_keys", "_values")

    def __init__(
        self,
        keys: Mapping[str, Any],
        values: Sequence[int],
        cast: Callable[[int], T],
    ) -> None:
        if len(keys) != len(values):
            raise ValueError("a column needs one value per key")
        self._keys = keys
        self._values = values
        self._cast = cast
        self._index: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __getitem__(self, key: str) -> T:
        if key not in self._keys:
            raise KeyError(key)
        if self._index is None:
            self._index = {k: i for i, k in enumerate(self._keys)}
        return self._cast(self._values[self._index[key]])

    def items(self) -> ItemsView[str, T]:
        return _ColumnItems(self)

    def values(self) -> ValuesView[T]:
        return _ColumnValues(self)


class _ColumnItems(ItemsView[str, T]):
    _mapping: KvColumn[T]

    def __iter__(self) -> Iterator[tuple[str, T]]:
        col = self._mapping
        return zip(col._keys, map(col._cast, col._values), strict=True)


class _ColumnValues(ValuesView[T]):
    _mapping: KvColumn[T]

    def __iter__(self) -> Iterator[T]:
        col = self._mapping
        return map(col._cast, col._values)


@dataclass(frozen=True, slots=True)
class GgufTensor:
    """One entry of the tensor table. ``dims`` in ggml order (ne0 = row length first).
    Slotted: a million of them are held at once."""

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
        return math.prod(self.dims)

    @property
    def n_dims(self) -> int:
        return n_dims(self.dims)

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
    # a file holding the header's bytes: the file itself, or a remote file's header copy
    header_file: str | None = None


class Shapes(tuple[tuple[str, tuple[int, ...]], ...]):
    """(name, dims) of each tensor of a model, hashed once: the key of caches that every
    quant of a model (the same names and shapes) shares; a million tensors take a while."""

    def __hash__(self) -> int:
        got: int | None = self.__dict__.get("_hash")
        if got is None:
            got = self.__dict__["_hash"] = super().__hash__()
        return got


class TensorsByName(Mapping[str, GgufTensor]):
    """Tensors by name through a name -> position index shared by every header with the
    same names in the same order (each quant of a model): no dict of a million per header."""

    def __init__(self, index: Mapping[str, int], tensors: Sequence[GgufTensor]) -> None:
        self._index = index
        self._tensors = tensors

    def __getitem__(self, name: str) -> GgufTensor:
        return self._tensors[self._index[name]]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def keys(self) -> KeysView[str]:
        return self._index.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)


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
    def shapes(self) -> Shapes:
        """Each tensor's (name, dims), in the table's order: what its placement reads."""
        return Shapes((t.name, t.dims) for t in self.tensors)

    @cached_property
    def tensors_by_name(self) -> Mapping[str, GgufTensor]:
        return MappingProxyType({t.name: t for t in self.tensors})

    def tensor(self, name: str) -> GgufTensor | None:
        return self.tensors_by_name.get(name)

    @cached_property  # read per estimate: a header may hold a million tensors
    def tensors_nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    @cached_property
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
        return as_int(self.metadata.get("general.file_type"))

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
        return as_int(self.arch_value(suffix))

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
    def n_head_layers(self) -> tuple[int, ...]:
        return self._per_layer("attention.head_count", 0)

    @property
    def n_head(self) -> int:
        """Heads of layer 0 (llama.cpp's n_head())."""
        layers = self.n_head_layers
        return layers[0] if layers else (self._arch_int("attention.head_count") or 0)

    @property
    def n_head_kv_layers(self) -> tuple[int, ...]:
        if self.arch_value("attention.head_count_kv") is None:
            return self.n_head_layers
        return self._per_layer("attention.head_count_kv", 0)

    @property
    def expert_count(self) -> int:
        return self._arch_int("expert_count") or 0

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
