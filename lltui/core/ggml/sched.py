"""ggml-backend's scheduler on a graph, as ggml_backend_sched_split_graph runs it for a
reserve: which backend runs each node, the splits, the copies of their inputs, and the graph
the allocator then plans (ggml/src/ggml-backend.cpp).

Backends are the offload devices in llama.cpp's order, then the CPU backend (last, lowest
priority). Every backend here runs every op of the modelled graphs (CPU, RPC servers, CUDA);
a backend reads only its own buffers, the CPU backend every host buffer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lltui.core.ggml.alloc import BufferType, Schedule
from lltui.core.ggml.graph import HOST, REPACK, VIEW_OPS, Graph, Tensor

OP_OFFLOAD_MIN_BATCH = 32  # GGML_OP_OFFLOAD_MIN_BATCH
_NO_WEIGHT_CHOICE = frozenset({"ROPE", "FLASH_ATTN_EXT"})


@dataclass(frozen=True, slots=True)
class Backend:
    device: int  # device index; HOST for the CPU backend
    buft: BufferType
    offload_op: bool = False  # CUDA takes big-batch ops whose weights are in host memory


def _batch_size(t: Tensor) -> int:
    if t.op == "GET_ROWS":
        return 0
    if t.op == "MUL_MAT":
        return t.ne[1]
    if t.op in ("MUL_MAT_ID", "ROPE"):
        return t.ne[2]
    return t.ne[1] * t.ne[2] * t.ne[3]


@dataclass
class _Split:
    backend: int
    start: int
    end: int = 0
    inputs: list[Tensor] | None = None


class _Scheduler:
    def __init__(
        self, graph: Graph, backends: Sequence[Backend], op_offload: bool, n_copies: int
    ) -> None:
        self.g = graph
        self.backends = backends
        self.cpu = len(backends) - 1
        self.op_offload = op_offload
        self.n_copies = n_copies
        self.assigned: dict[Tensor, int] = {}
        # the nodes whose sources pass 5 swapped for copies (the others keep their own src)
        self.srcs: dict[Tensor, tuple[Tensor, ...]] = {}
        # the non-view nodes: the only ones passes 2 and 3 look at
        self.ops = [n for n in graph.nodes if n.op not in VIEW_OPS]
        self._of_device: dict[int, int] = {}
        self.copies: dict[tuple[Tensor, int], list[Tensor]] = {}
        self.outputs: set[Tensor] = set(graph.outputs)
        self.inputs: set[Tensor] = {t for t in graph.leafs if t.is_input}

    # -- where tensors live ------------------------------------------------------------------

    def supports(self, b: int, loc: int) -> bool:
        """Whether backend ``b`` reads a buffer on ``loc`` (the CPU reads its repacked ones)."""
        dev = self.backends[b].device
        return dev == loc or (dev == HOST and loc == REPACK)

    def backend_of_device(self, loc: int) -> int:
        b = self._of_device.get(loc)
        if b is None:  # (asked for every weight: remembered per device)
            ok = (b for b in range(len(self.backends)) if self.supports(b, loc))
            b = self._of_device[loc] = next(ok, self.cpu)
        return b

    def _buffer_loc(self, t: Tensor) -> int | None:
        """The device of the buffer a tensor already has (weights, KV, views of them)."""
        base = t.view_src if t.view_src is not None else t
        return base.loc if base.external else None

    def get(self, t: Tensor | None) -> int:
        return -1 if t is None else self.assigned.get(t, -1)

    def buffer_supported(self, t: Tensor, b: int) -> bool:
        loc = self._buffer_loc(t)
        if loc is None:
            tid = self.get(t)
            if tid == -1 and t.view_src is not None:
                tid = self.get(t.view_src)
            if tid == -1:
                return False
            loc = self.backends[tid].device
        return self.supports(b, loc)

    # -- pass 1: from the buffers of the weights ---------------------------------------------

    def from_cur(self, t: Tensor) -> int:
        base = t.view_src if t.view_src is not None else t  # (_buffer_loc, inlined)
        if base.external:
            return self.backend_of_device(base.loc)
        if t.is_input:
            return self.cpu
        if t.op in _NO_WEIGHT_CHOICE:
            return -1
        for s in t.src:
            if s.external and s.weight:
                sb = self.backend_of_device(s.loc)
                if self.op_offload and sb == self.cpu and s.loc == HOST:
                    for b in range(self.cpu):
                        be = self.backends[b]
                        if be.offload_op and _batch_size(t) >= OP_OFFLOAD_MIN_BATCH:
                            return b
                return sb
        return -1

    def pass1(self) -> None:
        assigned, of_device, from_cur = self.assigned, self.backend_of_device, self.from_cur
        for t in (*self.g.leafs, *self.g.nodes):
            if t.pin is not None:
                assigned[t] = of_device(t.pin)
            else:
                b = from_cur(t)
                if b != -1:
                    assigned[t] = b

    # -- pass 2 and 3: spread to the neighbours ----------------------------------------------

    def _expand(self, order: Sequence[Tensor], skip_cpu: bool) -> None:
        cur = -1
        assigned, cpu = self.assigned, self.cpu
        for n in order:  # (views left out)
            b = assigned.get(n, -1)
            if b != -1:
                cur = -1 if (skip_cpu and b == cpu) else b
            elif cur != -1:
                assigned[n] = cur

    def pass2(self) -> None:
        nodes = self.ops
        self._expand(nodes, True)
        self._expand(nodes[::-1], True)
        self._expand(nodes, False)
        self._expand(nodes[::-1], False)

    def pass3(self) -> None:
        assigned = self.assigned
        for n in self.ops:
            if n in assigned:  # (assigned: never -1)
                continue
            best, best_b = -1, -1
            for b in range(len(self.backends)):
                count = sum(
                    1
                    for s in n.src
                    if (self.get(s) != -1 or self.get(s.view_src) != -1)
                    and self.buffer_supported(s, b)
                )
                if count > best:
                    best, best_b = count, b
            self.assigned[n] = best_b

    def pass4(self) -> None:
        assigned = self.assigned
        get = assigned.get
        for n in self.g.nodes:
            bn = get(n, -1)  # (no source is the node itself: it holds over the loop)
            if bn == -1 and n.view_src is not None:
                bn = assigned[n] = get(n.view_src, -1)
            for s in n.src:
                if get(s, -1) == -1:
                    vs = s.view_src
                    assigned[s] = get(vs, -1) if vs is not None else bn
            if bn == -1:
                assigned[n] = 0

    # -- pass 5: splits and their input copies -----------------------------------------------

    def _copy(self, src: Tensor, b: int) -> list[Tensor]:
        made = [
            Tensor("NONE", src.type, src.ne, src.nb, name=f"{b}#{src.name}#{c}")
            for c in range(self.n_copies)
        ]
        if self.n_copies > 1:
            self.inputs.update(made)
            self.outputs.update(made)
        return made

    def _foreign_weight(self, n: Tensor, b: int) -> bool:
        """Whether ``n`` reads a weight backend ``b`` cannot (a new split then)."""
        get = self.assigned.get
        return any(
            s.external and s.weight and get(s, -1) != b and not self.buffer_supported(s, b)
            for s in n.src
        )

    def pass5(self) -> list[_Split]:
        nodes = self.g.nodes
        assigned = self.assigned
        first = next((i for i, n in enumerate(nodes) if n.op not in VIEW_OPS), 0)
        split = _Split(self.get(nodes[first]) if nodes else self.cpu, 0, inputs=[])
        splits = [split]
        supported, copies = self.buffer_supported, self.copies
        for i in range(first, len(nodes)):
            n = nodes[i]
            if n.op in VIEW_OPS:
                continue
            nb = assigned.get(n, -1)
            sb = split.backend
            if nb != sb or (split.inputs and self._foreign_weight(n, sb)):
                split.end = i
                split = _Split(nb, i, inputs=[])
                splits.append(split)
                sb = nb
            swapped: list[Tensor] | None = None
            for j, s in enumerate(n.src):
                if assigned.get(s, -1) != sb and not supported(s, sb):
                    key = (s, sb)
                    if key not in copies:
                        copies[key] = self._copy(s, sb)
                        assert split.inputs is not None
                        split.inputs.append(s)
                    if swapped is None:
                        swapped = list(n.src)
                    swapped[j] = copies[key][0]
            if swapped is not None:
                self.srcs[n] = tuple(swapped)
        split.end = len(nodes)
        return splits

    # -- the graph the allocator sees --------------------------------------------------------

    def graph_copy(self, splits: list[_Split]) -> Schedule:
        nodes: list[Tensor] = []
        srcs: list[tuple[Tensor, ...]] = []
        node_b: list[int] = []
        get, swapped = self.assigned.get, self.srcs
        for sp in splits:
            for inp in sp.inputs or ():
                root = inp.view_src if inp.view_src is not None else inp
                dep = Tensor("NONE", inp.type, inp.ne, inp.nb, (inp,), view_src=root)
                nodes.append(dep)
                srcs.append((inp,))
                node_b.append(self.get(inp))
                cpy = self.copies[(inp, sp.backend)][0]
                nodes.append(cpy)
                srcs.append(())
                node_b.append(sp.backend)
            part = self.g.nodes[sp.start : sp.end]
            nodes.extend(part)
            srcs.extend([swapped.get(n, n.src) for n in part])
            node_b.extend([get(n, -1) for n in part])
        leafs: list[Tensor] = []
        leaf_b: list[int] = []
        if self.n_copies > 1:
            self._pipeline_leafs(splits, leafs, leaf_b)
        for leaf in self.g.leafs:
            leafs.append(leaf)
            leaf_b.append(max(self.get(leaf), 0))
        return Schedule(
            tuple(nodes),
            tuple(srcs),
            tuple(node_b),
            tuple(leafs),
            tuple(leaf_b),
            frozenset(self.outputs),
            frozenset(self.inputs),
            len(splits),
        )

    def _pipeline_leafs(self, splits: list[_Split], leafs: list[Tensor], leaf_b: list[int]) -> None:
        """Pipeline parallelism keeps n_copies of every graph input and split input."""
        for leaf in self.g.leafs:
            if not leaf.is_input:
                continue
            b = self.get(leaf)
            made = [leaf, *self._copy(leaf, b)[1:]]
            self.outputs.update(made)
            self.inputs.update(made)
            leafs.extend(made)
            leaf_b.extend([b] * len(made))
        for sp in splits:
            for inp in sp.inputs or ():
                made = self.copies[(inp, sp.backend)]
                leafs.extend(made)
                leaf_b.extend([sp.backend] * len(made))


def schedule(
    graph: Graph, backends: Sequence[Backend], op_offload: bool = True, n_copies: int = 1
) -> Schedule:
    """Assign backends, split, copy split inputs (ggml_backend_sched_split_graph)."""
    s = _Scheduler(graph, backends, op_offload, n_copies)
    s.pass1()
    s.pass2()
    s.pass3()
    s.pass4()
    return s.graph_copy(s.pass5())
