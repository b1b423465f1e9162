"""The graph planner (ggml-alloc's rules) on small hand-made graphs, and the llama-family
graph it plans compute buffers from."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lltui.core.ggml import graph as gg
from lltui.core.ggml.alloc import BufferType, DynAllocator, plan
from lltui.core.ggml.graph import F32, Graph
from lltui.core.gguf.types import GgmlType
from lltui.core.memory.arch_table import RECIPES
from lltui.core.memory.compute_graph import (
    PERIODIC_FROM,
    clear_plans,
    plan_every_layer,
    planned_peak,
)
from lltui.core.memory.graph_decoder import DecoderShape, LayerShape, Ubatch

CPU = BufferType(alignment=32)


# -- the dynamic allocator ------------------------------------------------------------------------


def test_sizes_are_aligned_and_the_buffer_grows_at_the_end():
    a = DynAllocator(alignment=32)
    assert a.alloc(10) == (0, 0)
    assert a.alloc(33) == (0, 32)
    assert a.size() == 32 + 64


def test_best_fit_takes_the_smallest_free_block_that_fits():
    a = DynAllocator(alignment=32)
    offs = [a.alloc(n)[1] for n in (256, 32, 128, 32, 64)]
    assert offs == [0, 256, 288, 416, 448]
    a.free(0, 0, 256)  # a 256 hole
    a.free(0, 288, 128)  # a 128 hole
    assert a.alloc(96) == (0, 288)  # the 128 hole, not the first (256) one
    assert a.alloc(200) == (0, 0)
    assert a.size() == 512  # nothing grew


def test_freed_neighbours_merge_into_one_block():
    a = DynAllocator(alignment=32)
    for n in (64, 64, 64, 64):
        a.alloc(n)
    a.free(0, 0, 64)
    a.free(0, 128, 64)
    a.free(0, 64, 64)  # joins both sides: one 192-byte block at 0
    assert a.alloc(192) == (0, 0)
    assert a.size() == 256


def test_a_block_too_small_everywhere_grows_the_end():
    a = DynAllocator(alignment=32)
    a.alloc(64)
    a.alloc(64)
    a.free(0, 0, 64)
    assert a.alloc(96) == (0, 128)
    assert a.size() == 224


def test_max_size_opens_a_new_chunk():
    a = DynAllocator(alignment=32, max_size=128)
    a.alloc(96)
    assert a.alloc(64) == (1, 0)
    assert a.size() == 96 + 64


# -- the graph planner ----------------------------------------------------------------------------


def _chain() -> tuple[Graph, gg.Tensor]:
    g = Graph()
    x = gg.new_input(F32, (256,), "x")  # 1 KiB
    w = gg.external(F32, (256,))
    norm = gg.unary("RMS_NORM", x)
    scaled = gg.unary("MUL", norm, w)  # same layout, norm's only consumer: in place
    out = gg.mul_mat(gg.external(F32, (256, 512)), scaled)  # 2 KiB
    g.expand(out)
    g.set_output(out)
    return g, out


def test_in_place_ops_reuse_their_source():
    g, _ = _chain()
    # the norm and its scaling run in the input's memory; only the matmul needs more
    assert plan(g, [CPU]) == [1024 + 2048]


def test_an_op_that_cannot_run_in_place_gets_new_memory():
    g = Graph()
    x = gg.new_input(F32, (256,), "x")
    y = gg.cont(x)  # CONT never runs in place
    z = gg.cont(y)
    g.expand(z)
    # x is freed after y, and z fits in x's hole
    assert plan(g, [CPU]) == [2048]


def test_views_take_no_memory_and_keep_their_source_alive():
    g = Graph()
    x = gg.new_input(F32, (256,), "x")
    a = gg.cont(x)  # 1 KiB
    v = gg.view(a, (128,), ())  # a view: no memory, a stays alive while v is used
    b = gg.cont(gg.new_input(F32, (256,), "y"))  # allocated while a is still alive
    c = gg.unary("ADD", b, v)
    g.expand(c)
    # x, y and a: a outlives x (freed after a) because its view is used at the end;
    # b takes x's hole, c runs in b's memory
    assert plan(g, [CPU]) == [3 * 1024]


def test_outputs_are_neither_freed_nor_reused():
    g = Graph()
    x = gg.new_input(F32, (256,), "x")
    norm = gg.unary("RMS_NORM", x)
    g.set_output(norm)
    scaled = gg.unary("MUL", norm, gg.external(F32, (256,)))
    g.expand(scaled)
    # norm runs in x's memory, but as an output it cannot lend it on to scaled
    assert plan(g, [CPU]) == [2 * 1024]
    g2 = Graph()
    g2.expand(scaled)
    assert plan(g2, [CPU]) == [1024]


def test_graph_order_is_depth_first_left_to_right():
    g = Graph()
    a = gg.new_input(F32, (4,), "a")
    b = gg.new_input(F32, (4,), "b")
    s1 = gg.unary("ADD", a, b)
    s2 = gg.unary("MUL", b, a)
    top = gg.unary("ADD", s2, s1)
    g.expand(top)
    assert g.leafs == [b, a]
    assert g.nodes == [s2, s1, top]


# -- the llama-family graph ---------------------------------------------------------------------


def _shape(n_layer: int, moe: bool, flash: bool, n_stream: int = 1) -> DecoderShape:
    """A qwen3-like model: 256 wide, 8 heads of 64 (2 for K/V), Q/K norms; 8 experts."""
    e, hd = 256, 64
    weights = [
        ("attn_norm.weight", (e,)),
        ("attn_q.weight", (e, 8 * hd)),
        ("attn_k.weight", (e, 2 * hd)),
        ("attn_v.weight", (e, 2 * hd)),
        ("attn_q_norm.weight", (hd,)),
        ("attn_k_norm.weight", (hd,)),
        ("attn_output.weight", (8 * hd, e)),
        ("ffn_norm.weight", (e,)),
    ]
    if moe:
        weights += [
            ("ffn_gate_inp.weight", (e, 8)),
            ("ffn_up_exps.weight", (e, 256, 8)),
            ("ffn_gate_exps.weight", (e, 256, 8)),
            ("ffn_down_exps.weight", (256, e, 8)),
        ]
    else:
        weights += [
            ("ffn_up.weight", (e, 512)),
            ("ffn_gate.weight", (e, 512)),
            ("ffn_down.weight", (512, e)),
        ]
    layer = LayerShape(8, 2, hd, hd, tuple(sorted(weights)))
    top = (
        ("output.weight", (e, 1024)),
        ("output_norm.weight", (e,)),
        ("token_embd.weight", (e, 1024)),
    )
    return DecoderShape(
        recipe=RECIPES["qwen3moe" if moe else "qwen3"],
        n_embd=e,
        n_vocab=1024,
        layers=(layer,) * n_layer,
        top=top,
        flash_attn=flash,
        type_k=int(GgmlType.F16),
        type_v=int(GgmlType.F16),
        kv_size=1024,
        n_stream=n_stream,
        kv_unified=n_stream == 1,
        n_expert_used=2 if moe else 0,
    )


@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("ub", [Ubatch(512, 1, 1), Ubatch(64, 4, 4), Ubatch(2, 2, 2)])
def test_the_periodic_shortcut_plans_what_every_layer_would(moe, flash, ub):
    shape = _shape(PERIODIC_FROM + 7, moe, flash, n_stream=ub.n_seqs if ub.n_seqs > 1 else 1)
    clear_plans()
    assert planned_peak(shape, ub) == plan_every_layer(shape, ub)


def test_attention_without_flash_attention_holds_the_scores():
    shape = _shape(2, False, flash=False)
    ub = Ubatch(512, 1, 1)
    (with_fa,) = plan_every_layer(replace(shape, flash_attn=True), ub)
    (without,) = plan_every_layer(shape, ub)
    # the F32 KQ scores of one layer: 8 heads x 1024 cells x 512 tokens
    assert without - with_fa >= 8 * 1024 * 512 * 4


# -- CUDA's op offload, decided from the scheduler (no GPU needed) -------------------------------


def _cuda_compute(path, argv):
    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.fit.estimate import FitOptions, estimate
    from lltui.core.gguf.reader import read_gguf
    from lltui.core.memory.devices import DeviceSpec

    dev = (DeviceSpec("CUDA0", "cuda", 80 << 30, 80 << 30),)
    res = estimate(read_gguf(path), parse_llama_args(argv), dev, FitOptions(search=False))
    assert not res.compute_exact  # CUDA is planned, not verified
    return res.buffer_bytes("CUDA0", "compute"), res


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory):
    from support import gguf_factory as gf

    path = tmp_path_factory.mktemp("cuda") / "moe.gguf"
    gf.write_model(path, gf.qwen3moe_spec(n_expert=16, n_ff_exp=1024), "F16")
    return path


def test_a_copied_host_expert_reuses_memory_the_attention_freed(moe_model):
    argv = ["-c", "8192", "-fa", "off", "-ub", "512"]
    on_gpu, _ = _cuda_compute(moe_model, argv)
    experts_on_host, res = _cuda_compute(moe_model, [*argv, "--cpu-moe"])
    copy = max(p.alloc_bytes for p in res.placements if "_exps" in p.name)
    # the copy of one expert tensor lives only while its matmul runs: the buffer holds it,
    # but not on top of the attention's peak (the KQ scores of this layer are freed by then)
    assert experts_on_host >= copy
    assert experts_on_host < on_gpu + copy


def test_an_rpc_server_with_a_gpu_behind_it_takes_no_op_offload(moe_model):
    """ggml-rpc's device has no offload_op: host experts' matmuls stay on the CPU even when
    a GPU runs behind the server (its buffers still follow CUDA's allocation rules)."""
    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.fit.estimate import FitOptions, estimate
    from lltui.core.gguf.reader import read_gguf
    from lltui.core.memory.devices import rpc_device

    argv = ["-c", "4096", "-ub", "512", "--cpu-moe", "--rpc", "127.0.0.1:1"]
    rpc = rpc_device("127.0.0.1:1", 80 << 30, 0, backend="cuda")
    res = estimate(read_gguf(moe_model), parse_llama_args(argv), (rpc,), FitOptions(search=False))
    on_rpc = res.buffer_bytes(rpc.name, "compute")
    on_cuda, cres = _cuda_compute(moe_model, argv[:-2])
    copy = max(p.alloc_bytes for p in cres.placements if "_exps" in p.name)
    assert on_rpc + copy <= on_cuda
    assert res.buffer_bytes("CPU", "compute") > cres.buffer_bytes("CUDA_Host", "compute")


def test_with_no_layers_offloaded_the_gpu_holds_the_offloaded_activations(moe_model):
    compute, res = _cuda_compute(moe_model, ["-c", "4096", "-ngl", "0", "-ub", "512"])
    copy = max(p.alloc_bytes for p in res.placements if p.layer is not None)
    ffn_rows = 512 * 2 * 1024 * 4  # one expert matmul's output: 512 tokens x 2 experts
    assert compute >= copy + ffn_rows
    # under op offload's 32 rows only the Q/K norms go (n_head x 16 rows each), no matmul
    small, _ = _cuda_compute(moe_model, ["-c", "4096", "-ngl", "0", "-ub", "16"])
    assert 0 < small < 64 * 1024


def test_an_uncovered_architecture_keeps_the_formula_and_says_so(tmp_path):
    from support import gguf_factory as gf

    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.fit.estimate import FitOptions, estimate
    from lltui.core.fit.report import result_to_json, result_to_text
    from lltui.core.gguf.reader import read_gguf

    covered = tmp_path / "llama.gguf"
    gf.write_model(covered, gf.llama_spec(), "F16")
    other = tmp_path / "plamo2.gguf"
    gf.write_model(other, gf.llama_spec(arch="plamo2"), "F16")
    # a block of the file the graph does not read: llama's graph with an unknown tensor
    extra = tmp_path / "extra.gguf"
    gf.write_model(extra, gf.llama_spec(extra_layer_tensors=(("ffn_act.weight", (512,)),)))
    st = parse_llama_args(["-c", "1024"])
    exact = estimate(read_gguf(covered), st, (), FitOptions(search=False))
    assert exact.compute_exact and result_to_json(exact)["compute_exact"] is True
    assert "approximate" not in result_to_text(exact)
    assert result_to_json(exact)["compute_note"] == ""
    for path, why in ((other, "plamo2"), (extra, "ffn_act.weight")):
        approx = estimate(read_gguf(path), st, (), FitOptions(search=False))
        assert not approx.compute_exact and result_to_json(approx)["compute_exact"] is False
        assert why in approx.compute_note and why in result_to_json(approx)["compute_note"]
        assert f"approximate (formula: {approx.compute_note.removeprefix('formula: ')})" in (
            result_to_text(approx)
        )


def test_repacked_host_weights_keep_their_ops_on_the_cpu(tmp_path):
    from support import gguf_factory as gf

    path = tmp_path / "q4.gguf"
    gf.write_model(path, gf.llama_spec(n_ff=1024), "Q4_0")
    argv = ["-c", "2048", "-ngl", "2", "-ub", "512"]
    pinned, res = _cuda_compute(path, argv)
    assert not any(p.buffer == "CPU_REPACK" for p in res.placements)
    # --no-host: the host's layers go to CPU_REPACK, which is not host memory to the GPU's
    # scheduler, so their matmuls are not offloaded and nothing is copied for them
    repacked, res = _cuda_compute(path, [*argv, "--no-host"])
    assert any(p.buffer == "CPU_REPACK" for p in res.placements)
    assert repacked < pinned


@pytest.mark.parametrize("cuda", [(True, True), (False, False)])
@pytest.mark.parametrize("flash", [False, True])
def test_the_periodic_shortcut_holds_across_devices_and_moved_weights(cuda, flash):
    from lltui.core.ggml.graph import HOST
    from lltui.core.memory.compute_graph import Backends, shortened

    n = 24  # runs long enough to be cut: 4 on the host, 10 per device, experts moved from 6
    shape = replace(
        _shape(n, moe=True, flash=flash),
        layer_dev=(HOST,) * 4 + (0,) * 10 + (1,) * 10 + (1,),
        moved=tuple((f"blk.{i}.ffn_up_exps.weight", HOST) for i in range(6, n)),
    )
    backends = Backends(cuda, n_copies=1)
    ub = Ubatch(512, 1, 1)
    short = shortened(shape, PERIODIC_FROM + 1)
    longer = shortened(shape, PERIODIC_FROM + 2)
    assert short is not None and longer is not None
    full = plan_every_layer(shape, ub, backends)
    assert plan_every_layer(short, ub, backends) == plan_every_layer(longer, ub, backends) == full
    clear_plans()
    assert planned_peak(shape, ub, backends) == full


@pytest.mark.parametrize(("n", "split", "moved"), [(24, 13, 15), (25, 13, 15)])
def test_a_token_graph_that_settles_every_second_layer_is_planned_from_cuts(
    n, split, moved, monkeypatch
):
    """qwen3moe-30B's shapes on two GPUs, experts of the first layers on the host: a token's
    graph plans differently cut to 3 and to 4 layers a run (its KiB-sized blocks are reused
    in turn), so cuts of each run's own parity stand for it, not every layer."""
    from lltui.core.ggml.graph import HOST
    from lltui.core.memory import compute_graph as cg
    from lltui.core.memory.graph_decoder import LayerShape

    e, hd, ff, ne, vocab = 2048, 128, 768, 128, 151936
    exps = [("ffn_down_exps.weight", (ff, e, ne))]
    exps += [(f"ffn_{w}_exps.weight", (e, ff, ne)) for w in ("gate", "up")]
    weights = [("attn_k.weight", (e, 4 * hd)), ("attn_v.weight", (e, 4 * hd))]
    weights += [("attn_q.weight", (e, 32 * hd)), ("attn_output.weight", (32 * hd, e))]
    weights += [(f"attn_{w}_norm.weight", (hd,)) for w in "qk"]
    weights += [("attn_norm.weight", (e,)), ("ffn_norm.weight", (e,))]
    weights += [*exps, ("ffn_gate_inp.weight", (e, ne))]
    host = sorted(f"blk.{i}.{name}" for i in range(moved) for name, _ in exps)
    norm = ("output_norm.weight", (e,))
    shape = replace(
        _shape(n, moe=True, flash=True),
        n_embd=e,
        n_vocab=vocab,
        layers=(LayerShape(32, 4, hd, hd, tuple(sorted(weights))),) * n,
        top=(*((f"{w}.weight", (e, vocab)) for w in ("output", "token_embd")), norm),
        kv_size=8192,
        n_expert_used=8,
        layer_dev=(0,) * split + (1,) * (n - split + 1),
        moved=tuple((name, HOST) for name in host),
        weight_types=tuple((name, int(GgmlType.F16)) for name in host),
    )
    backends = cg.Backends((True, True), 1, True, (True, True))
    ub = Ubatch(1, 1, 1)
    short, longer = (cg.shortened(shape, PERIODIC_FROM + k) for k in (1, 2))
    assert short is not None and longer is not None
    assert plan_every_layer(short, ub, backends) != plan_every_layer(longer, ub, backends)
    full = plan_every_layer(shape, ub, backends)
    planned: list[int] = []

    def counted(s: DecoderShape, u: Ubatch, b: cg.Backends) -> tuple[int, ...]:
        planned.append(len(s.layers))
        return plan_every_layer(s, u, b)

    monkeypatch.setattr(cg, "plan_every_layer", counted)
    clear_plans()
    assert planned_peak(shape, ub, backends) == full
    assert max(planned) < n


@pytest.mark.parametrize("cuda", [False, True])
@pytest.mark.parametrize("copies", [1, 4])
@pytest.mark.parametrize(
    ("moe", "flash", "kv_host", "n_stream"),
    [
        (False, True, False, 1),
        (True, False, False, 1),
        (False, False, True, 1),
        (True, True, False, 2),
    ],
)
@pytest.mark.parametrize("per_device", [(3, 3, 3, 3, 3, 3, 2, 2), (1, 4, 4, 4, 4, 4, 3)])
def test_alike_middle_devices_are_planned_once(
    cuda, copies, moe, flash, kv_host, n_stream, per_device
):
    """A layer split over many devices plans each run of alike middle devices once: every
    buffer (each device's and the host's) is the one planning every device gives."""
    from lltui.core.ggml.graph import HOST
    from lltui.core.memory.compute_graph import Backends, fewer_devices, plan_layers

    devs = tuple(d for d, k in enumerate(per_device) for _ in range(k))
    n = len(devs)
    base = _shape(n, moe=moe, flash=flash, n_stream=n_stream)
    shape = replace(base, layer_dev=(*devs, devs[-1]), kv_host=kv_host, full_offload=True)
    backends = Backends((cuda,) * len(per_device), n_copies=copies)
    ub = Ubatch(512 if n_stream == 1 else 256, n_stream, n_stream)
    assert (fewer_devices(shape, backends) is None) == kv_host  # the host runs every layer
    assert plan_layers(shape, ub, backends) == plan_every_layer(shape, ub, backends)
    # the output on the host, the first layers too (-ngl): still the same
    partial = replace(shape, layer_dev=(HOST, HOST, *devs[2:], HOST), full_offload=False)
    assert plan_layers(partial, ub, backends) == plan_every_layer(partial, ub, backends)


@pytest.mark.parametrize("flash", [False, True])
def test_the_periodic_shortcut_keeps_the_sliding_window_pattern(flash):
    """gemma3-like: five sliding-window layers, then a full one; runs are cut per kind."""
    n = 12
    swa = tuple(il % 6 < 5 for il in range(n))
    base = _shape(n, moe=False, flash=flash)
    layers = tuple(replace(lay, swa=w) for lay, w in zip(base.layers, swa, strict=True))
    shape = replace(base, recipe=RECIPES["gemma3"], layers=layers, kv_size_swa=512)
    ub = Ubatch(512, 1, 1)
    clear_plans()
    assert planned_peak(shape, ub) == plan_every_layer(shape, ub)


def test_shapes_no_graph_could_have_fall_back_to_the_formula(tmp_path):
    """A MoE file whose expert count is zero (or groups that do not divide the experts)
    cannot be planned: the estimate still answers, from the formula."""
    from support import gguf_factory as gf

    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.fit.estimate import FitOptions, estimate
    from lltui.core.gguf.reader import read_gguf

    spec = gf.qwen3moe_spec()
    broken = replace(spec, extra_kv={"qwen3moe.expert_used_count": (0, gf.V.UINT32)})
    path = tmp_path / "broken.gguf"
    gf.write_model(path, broken, "F16")
    res = estimate(read_gguf(path), parse_llama_args(["-c", "512"]), (), FitOptions(search=False))
    assert not res.compute_exact
    assert res.buffer_bytes("CPU", "compute") > 0


# -- the scheduler on a hand graph ------------------------------------------------------------


def test_a_split_copies_its_input_and_frees_the_copy_after_its_last_use():
    from lltui.core.ggml.graph import HOST
    from lltui.core.ggml.sched import Backend, schedule

    g = Graph()
    x = gg.new_input(F32, (256, 4), "x")  # graph inputs live on the CPU: 4 KiB
    w0 = gg.external(F32, (256, 256), loc=0)  # a weight on device 0
    w1 = gg.external(F32, (256, 256), loc=0)
    h = gg.mul_mat(w0, x)  # runs on device 0, reading a copy of x
    y = gg.mul_mat(w1, h)
    g.expand(y)
    dev0, cpu = Backend(0, CPU), Backend(HOST, CPU)
    sched = schedule(g, [dev0, cpu])
    assert sched.n_splits == 1
    assert sched.node_backend == (1, 0, 0, 0)  # the copy's source dependency (CPU), the copy, h, y
    copy = sched.nodes[1]
    assert copy.ne == x.ne and sched.srcs[2] == (w0, copy)
    # device 0: the copy (4 KiB), then h beside it, then y in the copy's place; the CPU: x
    assert plan(sched, [CPU, CPU]) == [8 * 1024, 4 * 1024]
