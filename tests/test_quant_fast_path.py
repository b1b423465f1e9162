"""lltui quant places every type of a model with what the types share worked out once: each
row must be exactly what a fresh estimate of that type alone gives."""

import math
import sys
from dataclasses import replace

import pytest
from support import gguf_factory as gf

from lltui.commands.fit import read_command
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit import search
from lltui.core.fit.estimate import estimate
from lltui.core.fit.quant_table import QuantFit, quant_table
from lltui.core.gguf.model import GgufModel, GgufTensor
from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.types import QUANTIZE_FTYPES, GgmlType
from lltui.core.memory import compute, compute_graph, placement
from lltui.core.memory.placement import REPACK_PROFILES, _Placer
from lltui.core.quant.rules import QuantizeRefused, choose_types, prepare, reads_imatrix
from lltui.core.quant.sizes import as_quantized, quant_row, quant_sizes, quant_source
from lltui.core.speed import parts as speed_parts
from lltui.services.devices import resolve_devices
from lltui.services.fit import prepare as prepare_fit

MODELS = {
    "llama": lambda: gf.llama_spec(n_layer=6),
    "llama-16": lambda: gf.llama_spec(n_layer=16),  # the first eighth of the layers: 2
    "qwen3-tied": lambda: gf.qwen3_spec(n_layer=5),
    "qwen3moe": lambda: gf.qwen3moe_spec(n_layer=6),
    "gemma3": gf.gemma3_spec,
    "gpt-oss": gf.gpt_oss_spec,
    "deepseek2": gf.deepseek2_spec,
}

CASES = [
    ("llama", ["-c", "2048", "--gpus", "24GiB,24GiB"]),
    ("llama", ["-c", "4096", "-ngl", "3", "--gpus", "24GiB,24GiB"]),
    ("llama", ["-ngl", "3", "--no-host", "--gpus", "24GiB", "--cpu", "arm"]),
    ("llama", ["--gpus", "cpu"]),
    ("llama", ["--gpus", "cpu", "--cpu", "arm", "-lm", "none"]),
    ("llama", ["-ts", "3,1,1", "--gpus", "24GiB,24GiB,12GiB"]),
    ("llama", ["-ot", r"blk\.1\.ffn_.*=CPU", "--no-host", "--gpus", "24GiB,24GiB"]),
    ("llama", ["-ot", r"blk\.[0-2]\..*=CUDA1", "--gpus", "24GiB,24GiB"]),
    # the big types fit nowhere: no context is searched for
    ("llama", ["-c", "256", "--gpus", "9MiB,3MiB", "--margin", "0"]),
    ("llama", ["-c", "512", "--gpus", "cpu", "--host-free", "12MiB"]),
    ("qwen3-tied", ["-ngl", "3", "--no-host", "--gpus", "24GiB"]),
    ("qwen3-tied", ["--gpus", "cpu", "--cpu", "x86-avx512"]),
    ("qwen3-tied", ["-ot", "token_embd.*=CUDA0", "-ngl", "2", "--gpus", "24GiB,24GiB"]),
    ("qwen3moe", ["-c", "8192", "--gpus", "24GiB,24GiB"]),
    ("qwen3moe", ["--n-cpu-moe", "2", "--gpus", "24GiB,24GiB"]),
    ("qwen3moe", ["--cpu-moe", "--no-host", "--gpus", "24GiB", "--cpu", "arm"]),
    ("qwen3moe", ["-ts", "1,2", "-ngl", "4", "--gpus", "T4,T4"]),
    ("qwen3moe", ["-nkvo", "-fa", "off", "--gpus", "16GiB,16GiB"]),
    ("qwen3moe", ["--rpc", "10.0.0.1:50052", "--gpus", "24GiB"]),
    ("gemma3", ["-np", "2", "--swa-full", "--gpus", "sim:kaggle-2xt4"]),
]


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("fast-path")
    out = {}
    for name, spec in MODELS.items():
        out[name] = root / f"{name}.gguf"
        gf.write_model(out[name], spec(), "F16")
    return out


def _clear_caches() -> None:
    """Forget every memo of the estimator, so that nothing one type left behind is reused."""
    for name, mod in list(sys.modules.items()):
        if not name.startswith("lltui.core."):
            continue
        for value in vars(mod).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


@pytest.mark.parametrize(("model", "flags"), CASES, ids=[f"{m} {' '.join(f)}" for m, f in CASES])
def test_every_row_is_a_fresh_estimate_of_that_type(paths, model, flags, monkeypatch):
    command = read_command([str(paths[model]), "--host-free", "64GiB", *flags], "quant", "")
    assert command is not None
    inputs = prepare_fit(command.request)
    _clear_caches()
    table = quant_table(inputs.model, inputs.args, inputs.devices, inputs.options)
    opts = replace(inputs.options, suggest=False)
    assert any(q.result is not None for q in table)
    for q in table:
        if q.result is None:
            continue
        _clear_caches()
        alone = estimate(as_quantized(inputs.model, q.row), inputs.args, inputs.devices, opts)
        assert q.result == alone, q.row.name
        assert q.to_json() == QuantFit(q.row, alone).to_json()
        if q.max_ctx is None:
            # no context fits: the search, made in full, finds none either
            with monkeypatch.context() as m:
                m.setattr(search, "_weights_overflow", lambda *_: False)
                _clear_caches()
                searched = estimate(
                    as_quantized(inputs.model, q.row), inputs.args, inputs.devices, opts
                )
            assert searched == alone, q.row.name


@pytest.mark.parametrize("profile", sorted(REPACK_PROFILES))
@pytest.mark.parametrize("flags", [[], ["--no-host"], ["--no-host", "-lm", "none"], ["-nr"]])
@pytest.mark.parametrize("gpus", ["cpu", "24GiB"])
def test_a_cpu_route_is_the_buffer_every_type_would_get(profile, flags, gpus):
    """Where the placement decides a CPU weight's buffer before its type is known, every
    type gets that buffer (else it leaves the choice to the type)."""
    st = parse_llama_args(flags, env={})
    devices, _ = resolve_devices(gpus)
    hp = None  # the placer reads no hyperparameters for CPU buffers
    placer = _Placer(hp, st, devices, devices, (), REPACK_PROFILES[profile])  # type: ignore[arg-type]
    for op in (None, "mul_mat", "mul_mat_id"):
        route = placer.cpu_route(op)
        if route is None:
            continue
        for dims in ((256, 512), (256, 8, 4), (512, 4)):
            for t in GgmlType:
                tensor = GgufTensor("blk.0.ffn_up.weight", dims, int(t), 0, 0, 0)
                assert placer.cpu_buft(tensor, op) == route, (op, dims, t)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_types_that_do_not_read_the_imatrix_come_out_the_same_with_one(paths, model):
    """quant_row makes such a type once, not again with an importance matrix."""
    src = quant_source(read_gguf(paths[model]))
    prep = prepare(src)
    for ftype in QUANTIZE_FTYPES:
        if reads_imatrix(ftype):
            continue
        try:
            without = choose_types(src, ftype, False, prep)
        except QuantizeRefused:
            with pytest.raises(QuantizeRefused):
                choose_types(src, ftype, True, prep)
            continue
        assert choose_types(src, ftype, True, prep) == without, ftype


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_quant_header_counts_its_own_tensors(paths, model):
    """as_quantized hands each type the source's parameter count and the row's bytes rather
    than summing a million tensors again: both are what its own tensors sum to."""
    source = read_gguf(paths[model])
    src = quant_source(source)
    for row in quant_sizes(src, QUANTIZE_FTYPES):
        if row.error is not None:
            continue
        quant = as_quantized(source, row)
        assert quant.n_params == sum(t.n_elements for t in quant.tensors), row.name
        assert quant.tensors_nbytes == sum(t.nbytes for t in quant.tensors), row.name


@pytest.mark.parametrize(
    "name",
    ["blk.3.attn_q.weight", "blk.12.ffn_up_exps.weight", "blk.x.weight", "blk..weight",
     "x.blk.3.weight", "output.weight", "x.123", "blk.7", "blk.0007.attn_k.weight"],
)  # fmt: skip
def test_block_of_matches_the_pattern(name):
    """_block_of skips the pattern for names that cannot match it: the same answer."""
    m = placement._LAYER_RE.match(name)
    assert placement._block_of(name) == (int(m.group(1)) if m else None)


@pytest.mark.parametrize(("model", "flags"), CASES, ids=[f"{m} {' '.join(f)}" for m, f in CASES])
def test_what_is_derived_from_placements_is_what_each_estimate_works_out(
    paths, model, flags, monkeypatch
):
    """The names and shapes, moved weights and host weights the compute planning reads are
    remembered per routes or per placements (see placement.derived): every row of the table
    comes out the same when each estimate works them out again from its own placements."""
    command = read_command([str(paths[model]), "--host-free", "64GiB", *flags], "quant", "")
    assert command is not None
    inputs = prepare_fit(command.request)
    _clear_caches()
    table = quant_table(inputs.model, inputs.args, inputs.devices, inputs.options)

    def afresh(placements, key, make, *, per_plan=False):
        return make()

    monkeypatch.setattr(compute, "derived", afresh)
    monkeypatch.setattr(compute_graph, "derived", afresh)
    _clear_caches()
    again = quant_table(inputs.model, inputs.args, inputs.devices, inputs.options)
    assert [q.to_json() for q in table] == [q.to_json() for q in again]
    assert [q.result for q in table] == [q.result for q in again]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_rows_made_with_the_kept_tensors_shared_are_rows_made_alone(paths, model):
    """quant_sizes makes the tensors every type copies unchanged once (and looks at the
    others only): each row is the row quant_row makes from nothing."""
    src = quant_source(read_gguf(paths[model]))
    for row in quant_sizes(src, QUANTIZE_FTYPES):
        alone = quant_row(src, row.ftype)
        assert row == alone, row.name
        assert row.tensors == alone.tensors and row.requantize == alone.requantize
        assert row.n_elements == alone.n_elements == sum(math.prod(t.dims) for t in row.tensors)


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_quant_header_shares_names_and_shapes_as_its_own_tensors_give_them(paths, model):
    source = read_gguf(paths[model])
    for row in quant_sizes(quant_source(source), QUANTIZE_FTYPES):
        if row.error is not None:
            continue
        quant = as_quantized(source, row)
        plain = GgufModel(files=quant.files, tensors=quant.tensors)
        assert quant.shapes == plain.shapes and hash(quant.shapes) == hash(tuple(plain.shapes))
        assert dict(quant.tensors_by_name) == dict(plain.tensors_by_name)
        assert list(quant.tensors_by_name) == list(plain.tensors_by_name)
        assert "no.such.weight" not in quant.tensors_by_name
        assert quant.tensor("output_norm.weight") == plain.tensor("output_norm.weight")


@pytest.mark.parametrize(("model", "flags"), CASES[:6] + CASES[13:17])
def test_weight_sums_kept_up_to_date_are_those_of_one_pass(paths, model, flags):
    """The speed model's per-device weight sums, updated from one type's placements to the
    next (parts._WeightSums), are the sums one pass over each type's placements makes, key
    order included; a fraction of a byte per row is summed afresh."""
    command = read_command([str(paths[model]), "--host-free", "64GiB", *flags], "quant", "")
    assert command is not None
    inputs = prepare_fit(command.request)
    table = quant_table(inputs.model, inputs.args, inputs.devices, inputs.options)
    results = [q.result for q in table if q.result is not None]
    results += results[::-1]
    names = inputs.model.tensors_by_name.keys()
    state = speed_parts._WeightSums(results[0].layer_devices, names)
    for res in results:
        expect = speed_parts._weight_sums(res.placements, res.layer_devices, names)
        got = state.sums(tuple(res.placements))
        assert got is not None and list(got[0].items()) == list(expect[0].items())
        assert got[1] == expect[1]
    odd = replace(results[0].placements[0], nbytes=results[0].placements[0].nbytes + 1)
    uneven = (odd, *results[0].placements[1:])
    rows = speed_parts._tensor_facts(odd.type_id, odd.dims, odd.layer is None, False)[1]
    if rows > 1:
        assert state.sums(uneven) is None


def test_tracked_values_are_those_of_each_placements_alone(paths):
    """placement.tracked brings a plan's values up to date from the last placements: what
    it gives for each quant (and back again) is what a list of the same placements gives."""
    command = read_command([str(paths["qwen3moe"]), "--cpu-moe", "--gpus", "24GiB"], "quant", "")
    assert command is not None
    inputs = prepare_fit(command.request)
    table = quant_table(inputs.model, inputs.args, inputs.devices, inputs.options)
    results = [q.result for q in table if q.result is not None]

    def on_host(p):
        return (p.name, p.type_id, p.buffer) if p.device == "CPU" else None

    for res in results + results[::-1]:
        placed = res.placements
        assert isinstance(placed, placement.Placements)
        got = placement.tracked(placed, "test-host", on_host)
        assert got == placement.tracked(list(placed), "test-host", on_host)
        assert got == [on_host(p) for p in placed if p.device == "CPU"]
