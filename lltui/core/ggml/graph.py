"""A ggml compute graph as llama.cpp builds it: tensors with ggml shapes, strides and types,
the ops that make them (views never own memory), and the node order ggml's graph builder
gives them (a depth-first walk of the sources, left to right, per expand call).

Only what the allocator needs is kept: no data, no op parameters. Shapes follow
ggml/src/ggml.c of the pinned llama.cpp (ggml_mul_mat, ggml_get_rows, ggml_flash_attn_ext, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from lltui.core.gguf.types import GgmlType, type_info

Ne = tuple[int, int, int, int]

F32 = int(GgmlType.F32)
F16 = int(GgmlType.F16)
I32 = int(GgmlType.I32)
I64 = int(GgmlType.I64)

# ops whose result is a view of their first source (no memory of their own)
VIEW_OPS = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})

HOST = -1  # host memory: the CPU backend's
REPACK = -2  # the CPU backend's repacked weights: its own, but not host memory to others


@dataclass(eq=False, slots=True)  # not frozen: a search makes 10^5-10^6, frozen init is 6x
class Tensor:
    """One ggml tensor, never changed once made. ``external`` tensors (weights, the KV
    cache) have memory of their own; the graph allocator places every other non-view
    tensor."""

    op: str  # "NONE" for leafs
    type: int
    ne: Ne
    nb: Ne
    src: tuple[Tensor, ...] = ()
    view_src: Tensor | None = None
    external: bool = False
    is_input: bool = False
    name: str = ""
    # where an external tensor's buffer is: a device index, or HOST; weights are "WEIGHTS"
    # buffers to the scheduler (ops follow them), the KV cache is not
    loc: int = -1
    weight: bool = False
    pin: int | None = None  # a backend llama.cpp assigns by hand (a device index, or HOST)

    def nbytes(self) -> int:
        """ggml_nbytes: the span of the tensor's elements given its strides."""
        return span_bytes(self.type, self.ne, self.nb)


@lru_cache(maxsize=4096)  # asked per tensor of every planned graph; the shapes are few
def span_bytes(type_id: int, ne: Ne, nb: Ne) -> int:
    """ggml_nbytes of a tensor of that type, shape and strides."""
    if any(n <= 0 for n in ne):
        return 0
    info = type_info(type_id)
    if info.block_size == 1:
        return info.type_size + sum((n - 1) * b for n, b in zip(ne, nb, strict=True))
    return ne[0] * nb[0] // info.block_size + sum(
        (n - 1) * b for n, b in zip(ne[1:], nb[1:], strict=True)
    )


@lru_cache(maxsize=4096)  # the same few shapes come back in every layer
def contiguous_nb(type_id: int, ne: Ne) -> Ne:
    info = type_info(type_id)
    nb0 = info.type_size
    nb1 = nb0 * (ne[0] // info.block_size)
    nb2 = nb1 * ne[1]
    nb3 = nb2 * ne[2]
    return (nb0, nb1, nb2, nb3)


def row_bytes(type_id: int, n: int) -> int:
    info = type_info(type_id)
    return n // info.block_size * info.type_size


def _ne(dims: Sequence[int]) -> Ne:
    if len(dims) == 4:  # (most: every op's own shape)
        return (dims[0], dims[1], dims[2], dims[3])
    d = [*dims, 1, 1, 1, 1]
    return (d[0], d[1], d[2], d[3])


@lru_cache(maxsize=4096)  # a graph makes hundreds of tensors of a few shapes
def _shape(type_id: int, dims: tuple[int, ...]) -> tuple[Ne, Ne]:
    """ne and nb of a contiguous tensor of that type and dims."""
    ne = _ne(dims)
    return ne, contiguous_nb(type_id, ne)


def nelements(t: Tensor) -> int:
    return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]


def is_contiguous(t: Tensor) -> bool:
    return t.nb == contiguous_nb(t.type, t.ne)


class Graph:
    """Tensors in ggml's graph order: leafs (no op) and nodes, each added once."""

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []
        self.outputs: set[Tensor] = set()
        self._seen: set[Tensor] = set()

    def expand(self, t: Tensor) -> None:
        """ggml_build_forward_expand: sources first (depth first, left to right)."""
        seen = self._seen
        if t in seen:
            return
        seen.add(t)
        nodes, leafs = self.nodes, self.leafs
        stack = [(t, iter(t.src))]
        while stack:
            cur, rest = stack[-1]
            for s in rest:
                if s not in seen:
                    seen.add(s)
                    if s.src:
                        stack.append((s, iter(s.src)))
                        break
                    # (a tensor without sources is placed at once, not walked: leafs mostly)
                    (leafs if s.op == "NONE" else nodes).append(s)
            else:
                stack.pop()
                (leafs if cur.op == "NONE" else nodes).append(cur)

    def set_output(self, t: Tensor) -> None:
        self.outputs.add(t)


# -- tensors -------------------------------------------------------------------------------------


def new(type_id: int, dims: Sequence[int], op: str = "NONE", src: Sequence[Tensor] = ()) -> Tensor:
    ne, nb = _shape(type_id, tuple(dims))
    return Tensor(op, type_id, ne, nb, tuple(src))


def new_input(type_id: int, dims: Sequence[int], name: str = "") -> Tensor:
    ne, nb = _shape(type_id, tuple(dims))
    return Tensor("NONE", type_id, ne, nb, is_input=True, name=name)


def external(
    type_id: int, dims: Sequence[int], name: str = "", loc: int = HOST, weight: bool = True
) -> Tensor:
    """A tensor with its own buffer on device ``loc``: a weight, or the KV cache."""
    ne, nb = _shape(type_id, tuple(dims))
    # (positional: a graph has hundreds of weights, and keywords cost a third more)
    return Tensor("NONE", type_id, ne, nb, (), None, True, False, name, loc, weight)


def pinned(t: Tensor, backend: int) -> Tensor:
    """The same tensor assigned to a backend by hand (ggml_backend_sched_set_tensor_backend)."""
    # (not dataclasses.replace: a graph pins thousands, and replace costs 30 times this)
    return Tensor(
        t.op, t.type, t.ne, t.nb, t.src, t.view_src, t.external, t.is_input, t.name, t.loc,
        t.weight, pin=backend,
    )  # fmt: skip


def dup_of(a: Tensor, op: str, src: Sequence[Tensor]) -> Tensor:
    """ggml_dup_tensor: a's shape and type, contiguous."""
    return Tensor(op, a.type, a.ne, contiguous_nb(a.type, a.ne), tuple(src))


def _view(a: Tensor, op: str, ne: Ne, nb: Ne, src: Sequence[Tensor] | None = None) -> Tensor:
    root = a.view_src if a.view_src is not None else a
    # (view_src positional: a graph has hundreds of views, and keywords cost a third more)
    return Tensor(op, a.type, ne, nb, tuple(src) if src is not None else (a,), root)


# -- views ---------------------------------------------------------------------------------------


def reshape(a: Tensor, *dims: int) -> Tensor:
    ne, nb = _shape(a.type, dims)
    return _view(a, "RESHAPE", ne, nb)


def view(a: Tensor, dims: Sequence[int], strides: Sequence[int]) -> Tensor:
    """ggml_view_Nd: ``strides`` are nb1.. (nb0 is the element size)."""
    ne = _ne(dims)
    nb = [type_info(a.type).type_size, *strides]
    for i in range(len(nb), 4):
        nb.append(nb[i - 1] * ne[i - 1])
    return _view(a, "VIEW", ne, (nb[0], nb[1], nb[2], nb[3]))


def permute(a: Tensor, ax0: int, ax1: int, ax2: int, ax3: int) -> Tensor:
    ne = [0, 0, 0, 0]
    nb = [0, 0, 0, 0]
    for i, ax in enumerate((ax0, ax1, ax2, ax3)):
        ne[ax] = a.ne[i]
        nb[ax] = a.nb[i]
    return _view(a, "PERMUTE", _ne(ne), (nb[0], nb[1], nb[2], nb[3]))


def transpose(a: Tensor) -> Tensor:
    ne = (a.ne[1], a.ne[0], a.ne[2], a.ne[3])
    nb = (a.nb[1], a.nb[0], a.nb[2], a.nb[3])
    return _view(a, "TRANSPOSE", ne, nb)


def view_of(a: Tensor, op: str, src: Sequence[Tensor]) -> Tensor:
    """ggml_view_tensor with an op set (set_rows writes into its destination)."""
    return _view(a, op, a.ne, a.nb, src)


# -- ops -----------------------------------------------------------------------------------------


def mul_mat(a: Tensor, b: Tensor) -> Tensor:
    return new(F32, (a.ne[1], b.ne[1], b.ne[2], b.ne[3]), "MUL_MAT", (a, b))


def mul_mat_id(a: Tensor, b: Tensor, ids: Tensor) -> Tensor:
    return new(F32, (a.ne[1], ids.ne[0], b.ne[2], 1), "MUL_MAT_ID", (a, b, ids))


def get_rows(a: Tensor, b: Tensor) -> Tensor:
    type_id = I32 if a.type == I32 else F32
    return new(type_id, (a.ne[0], b.ne[0], b.ne[1], b.ne[2]), "GET_ROWS", (a, b))


def unary(op: str, a: Tensor, *more: Tensor) -> Tensor:
    """Element-wise ops whose result has a's shape (norms, rope, add, mul, soft_max, ...)."""
    return dup_of(a, op, (a, *more))


def cont(a: Tensor, *dims: int) -> Tensor:
    return new(a.type, dims or a.ne, "CONT", (a,))


def glu_split(a: Tensor, b: Tensor) -> Tensor:
    return new(a.type, a.ne, "GLU", (a, b))


def set_rows(dst: Tensor, rows: Tensor, idxs: Tensor) -> Tensor:
    # ggml keeps the sources in this order (rows, indices, destination)
    return view_of(dst, "SET_ROWS", (rows, idxs, dst))


def sum_rows(a: Tensor) -> Tensor:
    return new(a.type, (1, a.ne[1], a.ne[2], a.ne[3]), "SUM_ROWS", (a,))


def argsort_top_k(a: Tensor, k: int) -> Tensor:
    srt = new(I32, a.ne, "ARGSORT", (a,))
    return view(srt, (k, srt.ne[1], srt.ne[2], srt.ne[3]), srt.nb[1:])


def flash_attn_ext(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    return new(F32, (v.ne[0], q.ne[2], q.ne[1], q.ne[3]), "FLASH_ATTN_EXT", (q, k, v, mask))
