"""Which buffer each weight lands in, as llama.cpp's loader picks it (create_tensor): the
layer's device, -ot overrides, the CPU's repacked, pinned or mapped buffers, tied output
copies, and the bytes each buffer takes."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import compress
from operator import is_not
from typing import Generic, TypeVar

from lltui.core.cmdline.args import TensorOverride
from lltui.core.cmdline.flags import LlamaArgs
from lltui.core.gguf.model import GgufModel, GgufTensor
from lltui.core.gguf.types import GgmlType, n_dims
from lltui.core.memory.common import CPU, CPU_ALIGNMENT, FitError, device_alloc_size, pad
from lltui.core.memory.devices import DeviceSpec, host_buffer
from lltui.core.memory.hparams import Hparams

# CPU_REPACK takes these weight types (for MUL_MAT/MUL_MAT_ID) when the rows interleave:
# (type, ne1 multiple) per CPU family, from ggml-cpu/repack.cpp.
REPACK_PROFILES: dict[str, dict[int, int]] = {
    "x86": {GgmlType.Q4_0: 8, GgmlType.Q4_K: 8, GgmlType.IQ4_NL: 8, GgmlType.MXFP4: 8},
    "x86-avx512": {
        GgmlType.Q4_0: 8,
        GgmlType.Q4_K: 8,
        GgmlType.IQ4_NL: 8,
        GgmlType.MXFP4: 8,
        GgmlType.Q2_K: 8,
    },
    "arm": {
        GgmlType.Q4_0: 4,
        GgmlType.Q4_K: 8,
        GgmlType.Q5_K: 8,
        GgmlType.Q6_K: 8,
        GgmlType.IQ4_NL: 4,
        GgmlType.MXFP4: 4,
        GgmlType.Q8_0: 4,
        GgmlType.Q1_0: 4,
    },
    "none": {},
}

INPUT_TENSORS = ("token_embd.", "position_embd.", "token_types.", "per_layer_token_embd.")
_LAYER_RE = re.compile(r"^blk\.(\d+)\.")
V = TypeVar("V")
# Weights every layer shares, created once per buffer type the layers use.
_SHARED_PER_LAYER = ("rope_freqs.", "rope_factors_long.", "rope_factors_short.")

# buffer kinds
DEV, HOST, REPACK, PLAIN = "dev", "host", "repack", "cpu"


@dataclass(frozen=True, slots=True)
class TensorPlacement:
    """Where one weight lands: its buffer (as llama.cpp names it), device and allocated bytes."""

    name: str
    buffer: str
    device: str  # "CPU" for host memory
    nbytes: int
    alloc_bytes: int
    layer: int | None  # None: input; n_layer_all: output; else the block
    duplicate: bool = False  # a second copy (tied output, per-device rope tables)
    type_id: int = 0  # the ggml type (a GPU computing on a host weight copies it)
    dims: tuple[int, ...] = ()  # ggml dims, ne0 first (a copy's size on the GPU hangs on them)


def _matmul_op(name: str, dims: tuple[int, ...]) -> str | None:
    """MUL_MAT for 2-D weights, MUL_MAT_ID for 3-D expert stacks; None for anything else."""
    if name.endswith(".bias") or name.startswith(INPUT_TENSORS):
        return None
    nd = n_dims(dims)
    if nd == 3 and "_exps" in name:
        return "mul_mat_id"
    if nd == 2:
        return "mul_mat"
    return None


def _repack_ok(t: GgufTensor, profile: Mapping[int, int], op: str | None) -> bool:
    if op is None:
        return False
    if op == "mul_mat" and t.n_dims != 2:
        return False
    multiple = profile.get(t.type)
    if multiple is None:
        return False
    ne1 = t.dims[1] if len(t.dims) > 1 else 1
    return ne1 % multiple == 0


@dataclass(frozen=True, slots=True)
class _Buft:
    """A buffer type of llama.cpp's lists: a device's, the pinned host one, repacked, plain."""

    kind: str  # DEV, HOST, REPACK, PLAIN
    device: int = -1  # device index for DEV and HOST


_BUFTS: dict[tuple[str, int], _Buft] = {}


def _buft(kind: str, device: int = -1) -> _Buft:
    """The one _Buft of a kind and device: a route per weight shares it, none is made anew."""
    b = _BUFTS.get((kind, device))
    if b is None:
        b = _BUFTS[(kind, device)] = _Buft(kind, device)
    return b


def maps_weights(st: LlamaArgs, devices: Sequence[DeviceSpec]) -> bool:
    """Whether the weights left on the host are mapped from the file: ``-lm mmap`` (or
    ``mmap+mlock``), or ``auto`` where no device in use is an integrated GPU (an APU, GB10,
    Jetson): the CUDA/HIP and Vulkan backends report no mmap support for one, and
    load_tensors then loads them into the host buffer (``ROCm_Host``, ``CUDA_Host``), logging
    ``load_mode = none`` (llama-model.cpp, #26081)."""
    if st.load_mode == "auto":
        return not any(d.integrated for d in devices)
    return st.use_mmap


class _Placer:
    """llama.cpp's buffer type selection (llama-model-loader.cpp create_tensor)."""

    def __init__(
        self,
        hp: Hparams,
        st: LlamaArgs,
        devices: Sequence[DeviceSpec],
        all_devices: Sequence[DeviceSpec],
        layer_dev: Sequence[int],
        repack_profile: Mapping[int, int],
    ) -> None:
        self.hp = hp
        self.st = st
        self.names: tuple[str, ...] = ()  # the file's weights, whose -ot answers are indexed
        self._first_override: dict[str, int] | None = None
        self._indexed: frozenset[str] = frozenset()
        self.devices = devices
        self.layer_dev = layer_dev
        self.profile = repack_profile if st.repack else {}
        self.mmap = maps_weights(st, devices)
        host_dev = next((i for i, d in enumerate(devices) if d.kind == "cuda"), None)
        self.host_dev = host_dev if st.host_buffer else None
        self.override_targets: dict[str, int] = {}
        for d in all_devices:
            if d in devices:
                self.override_targets[d.name] = list(devices).index(d)
        self.known_bufts = {CPU, *(d.name for d in all_devices)}
        for ov in st.overrides:  # llama.cpp's argument parser checks each, matched or not
            self._check_buft(ov)

    def _check_buft(self, ov: TensorOverride) -> None:
        if ov.buft != CPU and ov.buft not in self.known_bufts:
            raise FitError(
                f"-ot {ov.pattern}={ov.buft}: unknown buffer type "
                f"(available: {', '.join(sorted(self.known_bufts))})"
            )

    def cpu_buft(self, t: GgufTensor, op: str | None) -> _Buft:
        if self.host_dev is not None:
            # the pinned host buffer comes first in the CPU list; with mmap it becomes CPU
            return _buft(PLAIN) if self.mmap else _buft(HOST, self.host_dev)
        if _repack_ok(t, self.profile, op):
            return _buft(REPACK)
        return _buft(PLAIN)

    def cpu_route(self, op: str | None) -> _Buft | None:
        """The CPU buffer a weight takes where its type does not decide it; None where it
        does (a matmul weight that CPU_REPACK may take)."""
        if self.host_dev is None and op is not None and self.profile:
            return None
        return _buft(PLAIN) if self.host_dev is None or self.mmap else _buft(HOST, self.host_dev)

    def route(self, name: str, list_dev: int, op: str | None) -> _Buft | None:
        """The buffer of a weight of the layer on ``list_dev`` (-1: the CPU), -ot first;
        None: the CPU buffer its type picks (:meth:`cpu_buft`)."""
        if self.st.overrides:
            i = self._override_of(name)
            if i is not None:
                return self._override_route(self.st.overrides[i], op)
        if list_dev < 0:
            return self.cpu_route(op)
        return _buft(DEV, list_dev)

    def _override_of(self, name: str) -> int | None:
        """The first -ot found in ``name`` (the pattern engine loads only for -ot/--cpu-moe)."""
        if self._first_override is None:  # per tensor and placement: indexed once
            from lltui.core.cmdline.tensor_pattern import first_found

            self._first_override = first_found(self._patterns(), self.names)
            self._indexed = frozenset(self.names)
        if name in self._indexed:
            return self._first_override.get(name)
        from lltui.core.cmdline.tensor_pattern import compile_search

        return next((i for i, p in enumerate(self._patterns()) if compile_search(p)(name)), None)

    def _patterns(self) -> tuple[str, ...]:
        return tuple(ov.pattern for ov in self.st.overrides)

    def _override_route(self, ov: TensorOverride, op: str | None) -> _Buft | None:
        if ov.buft == CPU:
            return self.cpu_route(op)
        target = self.override_targets.get(ov.buft)
        if target is None:
            raise FitError(f"-ot {ov.pattern}={ov.buft}: that device is not in use")
        return _buft(DEV, target)

    def cpu_buffer_name(self, b: _Buft) -> str:
        if b.kind == HOST:
            return host_buffer(self.devices, b.device) or "CUDA_Host"
        if b.kind == REPACK:
            return "CPU_REPACK"
        return "CPU_Mapped" if self.mmap else CPU

    def placement(
        self, t: GgufTensor, b: _Buft, layer: int | None, duplicate: bool
    ) -> TensorPlacement:
        """The weight in buffer ``b``: a device buffer pads it as that backend does."""
        if b.kind == DEV:
            dev = self.devices[b.device]
            alloc = device_alloc_size(dev, t.type, t.dims, t.nbytes)
            return TensorPlacement(
                t.name, dev.name, dev.name, t.nbytes, alloc, layer, duplicate, t.type, t.dims
            )
        alloc = pad(t.nbytes, CPU_ALIGNMENT)
        buffer = self.cpu_buffer_name(b)
        return TensorPlacement(
            t.name, buffer, CPU, t.nbytes, alloc, layer, duplicate, t.type, t.dims
        )


def place_tensors(
    model: GgufModel,
    hp: Hparams,
    st: LlamaArgs,
    devices: Sequence[DeviceSpec],
    layer_dev: Sequence[int],
    *,
    all_devices: Sequence[DeviceSpec] | None = None,
    repack_profile: str = "x86",
) -> tuple[Placements, dict[str, int]]:
    """Every weight's buffer, and the size of each weights buffer (mapped spans included)."""
    plan = _routes(
        model.shapes,
        hp,
        _placing(st),
        tuple(devices),
        tuple(all_devices or devices),
        tuple(layer_dev),
        repack_profile,
    )
    return _place(plan, model.tensors)


def _placing(st: LlamaArgs) -> LlamaArgs:
    """What of the settings the routes read (-ot, --no-repack, --no-host, the load mode),
    the rest left at their defaults: every context, ubatch and K/V type of one layout shares
    its routes (and what is worked out from them, see :func:`derived`)."""
    return LlamaArgs(
        overrides=st.overrides,
        repack=st.repack,
        host_buffer=st.host_buffer,
        load_mode=st.load_mode,
    )


_NOT_MADE = TensorPlacement("", "", "", 0, 0, None)  # a memo miss (None is a copy not made)


class Placements(tuple[TensorPlacement, ...]):
    """The placed weights of one estimate, with the routes they came from (``plan``) and a
    memo of what is worked out from them (``derived``): the estimates of one model and
    settings share them, however many times the context search plans its compute buffers."""

    plan: _Plan
    memo: dict[object, object]


_MISS = object()


def derived(
    placements: Sequence[TensorPlacement],
    key: object,
    make: Callable[[], V],
    *,
    per_plan: bool = False,
) -> V:
    """``make()``, remembered for these placements under ``key``; with ``per_plan``, for
    every placement of the same routes (what the weights' names, shapes and devices decide,
    not their types). Placements of no plan (a list) are worked out each time."""
    if not isinstance(placements, Placements):
        return make()
    memo = placements.plan.memo if per_plan else placements.memo
    got = memo.get(key, _MISS)
    if got is _MISS:
        got = memo[key] = make()
    return got  # type: ignore[return-value]


class _Tracked(Generic[V]):
    """``fn`` of each placement (None left out), by position, for the last placements of a
    plan under one key."""

    def __init__(self) -> None:
        self.last: tuple[TensorPlacement, ...] = ()
        self.values: dict[int, V] = {}


def tracked(
    placements: Sequence[TensorPlacement], key: object, fn: Callable[[TensorPlacement], V | None]
) -> list[V]:
    """``fn(p)`` of every placement that gives one (not None), in the placements' order.
    For Placements, the values are kept per plan and ``key`` (which must name whatever else
    ``fn`` reads) and brought up to date from the last placements of the plan: only the
    placements that are not the same objects as there (another type) are looked at."""
    if not isinstance(placements, Placements):
        out = [fn(p) for p in placements]
        return [v for v in out if v is not None]
    state = placements.plan.memo.get(("tracked", key))
    if not isinstance(state, _Tracked):
        state = placements.plan.memo[("tracked", key)] = _Tracked[V]()
    values = state.values
    changed: Iterable[int]
    if len(placements) != len(state.last):
        values.clear()
        changed = range(len(placements))
    else:
        changed = list(compress(range(len(placements)), map(is_not, placements, state.last)))
    for i in changed:
        v = fn(placements[i])
        if v is None:
            values.pop(i, None)
        else:
            values[i] = v
    # its weights alone: the placements hold the plan whose memo holds this state, a cycle
    # that only the collector would free once the plan leaves _routes' cache
    state.last = tuple(placements)
    return [values[i] for i in sorted(values)]


def _place(plan: _Plan, tensors: Sequence[GgufTensor]) -> tuple[Placements, dict[str, int]]:
    """The routes applied to weights of given types and sizes (a route and a type decide
    the buffer), with each buffer's size."""
    placer, made = plan.placer, plan.made
    out: list[TensorPlacement] = []
    sizes: dict[str, int] = {}
    # mapped spans per file, for tensors left in the plain CPU buffer under mmap
    spans: dict[int, tuple[int, int]] = {}
    for i, r in enumerate(plan.routes):
        t = tensors[r.index]
        key = (i, t.type, t.nbytes)
        p = made.get(key, _NOT_MADE)
        if p is _NOT_MADE:
            b = r.buft if r.buft is not None else placer.cpu_buft(t, r.op)
            same = r.apart_from is not None and b == r.apart_from
            p = made[key] = None if same else placer.placement(t, b, r.layer, r.duplicate)
        if p is None:
            continue
        out.append(p)
        if p.buffer != "CPU_Mapped":
            sizes[p.buffer] = sizes.get(p.buffer, 0) + p.alloc_bytes
            continue
        lo, hi = spans.get(t.split, (t.file_offset, t.file_offset + t.nbytes))
        spans[t.split] = (min(lo, t.file_offset), max(hi, t.file_offset + t.nbytes))
    mapped = sum(hi - lo for lo, hi in spans.values())
    if mapped:
        sizes["CPU_Mapped"] = mapped
    placed = Placements(out)
    placed.plan = plan
    placed.memo = {}
    return placed, sizes


@dataclass(frozen=True, slots=True)
class _Route:
    """Where one weight goes as far as its name and shape decide it: ``buft`` None leaves
    the choice among the CPU's buffer types to its type (repacked or not)."""

    index: int  # in the model's tensor list
    buft: _Buft | None
    op: str | None
    layer: int | None
    duplicate: bool = False
    apart_from: _Buft | None = None  # a copy made only where it lands elsewhere than this


@dataclass(frozen=True, slots=True)
class _Plan:
    """The routes of a model's weights for one set of settings and devices."""

    placer: _Placer
    routes: tuple[_Route, ...]
    # placements by (route, type, bytes) (None: a copy not made), the route and the type
    # decide the buffer: the quants that give a weight the same type share them
    made: dict[tuple[int, int, int], TensorPlacement | None] = field(default_factory=dict)
    # what is worked out from the placements that their types do not change (see derived)
    memo: dict[object, object] = field(default_factory=dict)


@lru_cache(maxsize=32)  # every quant of a model has the same names, shapes and settings
def _routes(
    shapes: tuple[tuple[str, tuple[int, ...]], ...],
    hp: Hparams,
    st: LlamaArgs,
    devices: tuple[DeviceSpec, ...],
    all_devices: tuple[DeviceSpec, ...],
    layer_dev: tuple[int, ...],
    repack_profile: str,
) -> _Plan:
    """Each weight's route (create_tensor's choice of buffer type), in the file's order."""
    profile = REPACK_PROFILES.get(repack_profile)
    if profile is None:
        raise FitError(f"unknown CPU repack profile {repack_profile!r}")
    placer = _Placer(hp, st, devices, all_devices, layer_dev, profile)
    placer.names = tuple(name for name, _ in shapes)
    routes: list[_Route] = []
    for i, (name, dims) in enumerate(shapes):
        routes.extend(_route_one(placer, i, name, dims, hp, layer_dev))
    index = {name: i for i, (name, _) in enumerate(shapes)}
    embd = index.get("token_embd.weight")
    if embd is not None and "output.weight" not in index and hp.has_memory:
        # tied embeddings: the output head is a second copy unless it shares the buffer type
        # (that of the input, never type-dependent: it is no matmul weight)
        b_in = placer.route("token_embd.weight", -1, None)
        # overrides see the copy under its own name, token_embd.weight
        b_out = placer.route("token_embd.weight", layer_dev[hp.n_layer_all], "mul_mat")
        routes.append(_Route(embd, b_out, "mul_mat", hp.n_layer_all, True, b_in))
    return _Plan(placer, tuple(routes))


def _block_of(name: str) -> int | None:
    """The N of a ``blk.N.`` weight name."""
    if not name.startswith("blk."):
        return None  # no regex for the names of no block (a file may hold a million)
    return _block_number(name)


@lru_cache(maxsize=16384)
def _block_number(name: str) -> int | None:
    m = _LAYER_RE.match(name)
    return int(m.group(1)) if m else None


def _route_one(
    placer: _Placer, i: int, name: str, dims: tuple[int, ...], hp: Hparams, layer_dev: Sequence[int]
) -> list[_Route]:
    """One weight of the file: a block's, an input's, a per-layer shared one, or the output's."""
    n_out = hp.n_layer_all
    il = _block_of(name)
    if il is not None:
        if hp.n_layer <= il < hp.n_layer_all:
            return []  # MTP block: skipped unless a draft of that kind is loaded
        list_dev = layer_dev[il] if il < hp.n_layer_all else layer_dev[n_out]
        op = _matmul_op(name, dims)
        return [_Route(i, placer.route(name, list_dev, op), op, il)]
    if name.startswith(INPUT_TENSORS):
        return [_Route(i, placer.route(name, -1, None), None, None)]
    if name.startswith(_SHARED_PER_LAYER):
        out: list[_Route] = []
        seen: set[_Buft | None] = set()
        for il in range(hp.n_layer):
            b = placer.route(name, layer_dev[il], None)
            if b in seen:
                continue
            out.append(_Route(i, b, None, il, duplicate=bool(seen)))
            seen.add(b)
        return out
    if name.startswith("token_embd_norm."):
        return [_Route(i, placer.route(name, layer_dev[0], None), None, 0)]
    # everything else belongs to the output layer (output, output_norm, cls, ...)
    op = _matmul_op(name, dims)
    return [_Route(i, placer.route(name, layer_dev[n_out], op), op, n_out)]


def is_matmul_name(name: str) -> bool:
    """A weight that a matmul reads: not a norm, not an input table."""
    return name.endswith(".weight") and "norm" not in name and not name.startswith(INPUT_TENSORS)
