"""ggml-alloc's graph planner, as ggml/src/ggml-alloc.c runs it when a scheduler reserves a
graph: the peak bytes each backend buffer needs.

Inputs and leafs are placed first; then every node in graph order: its sources, then itself,
reusing a source's memory in place when the op allows it (same layout, the source's only
consumer, owned by the allocator, not a graph output); a tensor is freed when its last
consumer (or the last consumer of its last view) has run. Views never own memory. Each buffer
is a dynamic allocator: best fit over the free blocks but the last, else the end of the chunk
that wastes least; freed blocks merge with their neighbours; sizes are aligned; a chunk may
not outgrow the buffer type's max size (then another chunk opens).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lltui.core.ggml.graph import Graph, Tensor

# ggml_op_can_inplace
INPLACE_OPS = frozenset(
    {
        "FILL",
        "SCALE",
        "DIAG_MASK_ZERO",
        "DIAG_MASK_INF",
        "ADD",
        "ADD_ID",
        "ADD1",
        "SUB",
        "MUL",
        "DIV",
        "SQR",
        "SQRT",
        "LOG",
        "UNARY",
        "ROPE",
        "ROPE_BACK",
        "SILU_BACK",
        "RMS_NORM",
        "RMS_NORM_BACK",
        "CLAMP",
        "SOFT_MAX",
        "SOFT_MAX_BACK",
    }
)
MAX_CHUNKS = 16  # GGML_VBUFFER_MAX_CHUNKS
SIZE_MAX = 2**64 - 1
_HALF_MAX = SIZE_MAX // 2
_INT64_MIN = -(2**63)


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


class _Chunk:
    __slots__ = ("blocks", "max_size")

    def __init__(self, size: int) -> None:
        self.blocks: list[list[int]] = [[0, size]]  # [offset, size], sorted by offset
        self.max_size = 0


class DynAllocator:
    """ggml_dyn_tallocr: offsets only, no memory."""

    def __init__(self, alignment: int, max_size: int = SIZE_MAX) -> None:
        self.alignment = alignment
        self.max_chunk = min(max_size, _HALF_MAX)
        self.chunks: list[_Chunk] = []

    def alloc(self, size: int) -> tuple[int, int]:
        a = self.alignment
        size = (size + a - 1) // a * a
        chunks = self.chunks
        best_c = best_b = -1
        # best fit among the blocks before each chunk's last one
        for c, chunk in enumerate(chunks):
            blocks = chunk.blocks
            best_size = SIZE_MAX
            for i in range(len(blocks) - 1):
                bsize = blocks[i][1]
                if size <= bsize <= best_size:
                    best_c, best_b, best_size = c, i, bsize
        if best_b == -1:
            # the last block of a chunk: the one that grows the chunk least, or wastes least
            best_reuse = _INT64_MIN
            for c, chunk in enumerate(chunks):
                blocks = chunk.blocks
                if not blocks:
                    continue
                off, bsize = blocks[-1]
                reuse = chunk.max_size - off - size
                better_reuse = best_reuse < 0 and reuse > best_reuse
                better_fit = reuse >= 0 and reuse < best_reuse
                if bsize >= size and (better_reuse or better_fit):
                    best_c, best_b, best_reuse = c, len(blocks) - 1, reuse
        if best_b == -1:
            if len(chunks) >= MAX_CHUNKS:
                raise ValueError("graph allocation: out of chunks")
            first = max(size, self.max_chunk)
            if len(chunks) == MAX_CHUNKS - 1:
                first = _HALF_MAX
            chunks.append(_Chunk(first))
            best_c, best_b = len(chunks) - 1, 0
        chunk = chunks[best_c]
        block = chunk.blocks[best_b]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del chunk.blocks[best_b]
        if offset + size > chunk.max_size:
            chunk.max_size = offset + size
        return best_c, offset

    def free(self, chunk_id: int, offset: int, size: int) -> None:
        a = self.alignment
        size = (size + a - 1) // a * a
        blocks = self.chunks[chunk_id].blocks
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:
                block[1] += size
                if i < len(blocks) - 1 and block[0] + block[1] == blocks[i + 1][0]:
                    block[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                return
            if offset + size == block[0]:
                block[0] = offset
                block[1] += size
                if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]:
                    blocks[i - 1][1] += block[1]
                    del blocks[i]
                return
        pos = 0
        while pos < len(blocks) and blocks[pos][0] < offset:
            pos += 1
        blocks.insert(pos, [offset, size])

    def size(self) -> int:
        return sum(c.max_size for c in self.chunks)


@dataclass(frozen=True, slots=True)
class BufferType:
    """What the planner needs of a backend buffer type."""

    alignment: int
    max_size: int = SIZE_MAX
    alloc_size: Callable[[Tensor], int] = Tensor.nbytes


@dataclass(frozen=True, slots=True)
class Schedule:
    """The graph the allocator plans: nodes with their (possibly copied) sources and the
    backend of each, leafs likewise, and the tensors never freed."""

    nodes: tuple[Tensor, ...]
    srcs: tuple[tuple[Tensor, ...], ...]
    node_backend: tuple[int, ...]
    leafs: tuple[Tensor, ...]
    leaf_backend: tuple[int, ...]
    outputs: frozenset[Tensor]
    inputs: frozenset[Tensor]
    n_splits: int


def single_backend(graph: Graph) -> Schedule:
    """Everything on one backend: the graph as it is."""
    return Schedule(
        tuple(graph.nodes),
        tuple(n.src for n in graph.nodes),
        (0,) * len(graph.nodes),
        tuple(graph.leafs),
        (0,) * len(graph.leafs),
        frozenset(graph.outputs),
        frozenset(t for t in graph.leafs if t.is_input),
        1,
    )


class _State:
    __slots__ = ("addr", "allocated", "buffer", "children", "size", "views")

    def __init__(self) -> None:
        self.children = 0
        self.views = 0
        self.buffer = 0
        self.addr = (0, 0)
        self.size = 0  # the buffer type's alloc size, once allocated
        self.allocated = False


class _Planner:
    """ggml_gallocr_alloc_graph_impl over one scheduled graph."""

    def __init__(self, sched: Schedule, bufts: Sequence[BufferType]) -> None:
        self.sched = sched
        self.allocs = [DynAllocator(b.alignment, b.max_size) for b in bufts]
        self.alloc_size = [b.alloc_size for b in bufts]
        self.state: defaultdict[Tensor, _State] = defaultdict(_State)
        self.outputs = sched.outputs

    def allocate(self, t: Tensor, buffer: int, srcs: tuple[Tensor, ...] = ()) -> None:
        if t.external or t.view_src is not None:
            return
        hn = self.state[t]
        if hn.allocated:
            return
        hn.allocated = True
        if t.op in INPLACE_OPS and self._reuse_parent(t, hn, srcs):
            return
        hn.buffer = buffer
        # (a tensor's size is asked once, here: its free uses the one kept)
        hn.size = size = self.alloc_size[buffer](t)
        hn.addr = self.allocs[buffer].alloc(size)

    def _reuse_parent(self, t: Tensor, hn: _State, srcs: tuple[Tensor, ...]) -> bool:
        outputs, state = self.outputs, self.state
        for parent in srcs:
            if parent.external or parent.view_src is not None:
                continue  # never placed by the planner (nor given a state for it)
            p_hn = state[parent]
            if not p_hn.allocated or parent in outputs:
                continue
            if parent.type != t.type or parent.ne != t.ne or parent.nb != t.nb:
                continue
            if p_hn.children == 1 and p_hn.views == 0:
                hn.buffer = p_hn.buffer
                hn.addr = p_hn.addr
                p_hn.allocated = False
                self._free_extra(t, hn, p_hn)
                return True
        return False

    def _free_extra(self, t: Tensor, hn: _State, p_hn: _State) -> None:
        alloc = self.allocs[p_hn.buffer]
        hn.size = self.alloc_size[hn.buffer](t)
        p_size = _align(p_hn.size, alloc.alignment)
        n_size = _align(hn.size, alloc.alignment)
        if p_size > n_size:
            alloc.free(p_hn.addr[0], p_hn.addr[1] + n_size, p_size - n_size)

    def run(self) -> list[int]:
        sc = self.sched
        inputs = sc.inputs
        state = self.state
        allocate = self.allocate
        for leaf, b in zip(sc.leafs, sc.leaf_backend, strict=True):
            if not leaf.external and leaf.view_src is None:  # (allocate's own test, first)
                allocate(leaf, b)
        steps = list(zip(sc.nodes, sc.srcs, sc.node_backend, strict=True))
        for node, srcs, b in steps:
            if node.view_src is not None and node.op != "NONE":
                state[node.view_src].views += 1
            if node in inputs:
                allocate(node, b)
            for s in srcs:
                if s.external:
                    continue  # (never placed nor freed here: not counted)
                state[s].children += 1
                if s in inputs:
                    allocate(s, b)
        allocs, alloc_size, outputs = self.allocs, self.alloc_size, self.outputs
        reuse_parent = self._reuse_parent
        for node, srcs, b in steps:
            for s in srcs:
                # (externals, views and what is placed already are left as they are)
                if not s.external and s.view_src is None and not state[s].allocated:
                    allocate(s, b)
            if not node.external and node.view_src is None:
                # (allocate, inlined: every node comes here)
                hn = state[node]
                if not hn.allocated:
                    hn.allocated = True
                    if node.op not in INPLACE_OPS or not reuse_parent(node, hn, srcs):
                        hn.buffer = b
                        hn.size = size = alloc_size[b](node)
                        hn.addr = allocs[b].alloc(size)
            for s in srcs:
                # one consumer of ``s`` has run: free it (or its view's source) after the
                # last, unless it is a graph output (free, inlined: every source of every
                # node comes here)
                if s.external:
                    continue
                p_hn = state[s]
                p_hn.children -= 1
                if p_hn.children != 0 or p_hn.views != 0:
                    continue
                t = s.view_src
                if t is not None:
                    p_hn = state[t]
                    p_hn.views -= 1
                    if p_hn.views != 0 or p_hn.children != 0:
                        continue
                else:
                    t = s
                if p_hn.allocated and t not in outputs:
                    allocs[p_hn.buffer].free(p_hn.addr[0], p_hn.addr[1], p_hn.size)
                    p_hn.allocated = False
        return [a.size() for a in self.allocs]


def plan(graph: Graph | Schedule, bufts: Sequence[BufferType]) -> list[int]:
    """Bytes each buffer needs (ggml_gallocr_reserve_n's sizes): a graph on one backend,
    or a scheduled graph with one buffer type per backend."""
    sched = single_backend(graph) if isinstance(graph, Graph) else graph
    return _Planner(sched, bufts).run()
