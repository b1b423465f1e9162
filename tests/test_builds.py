"""llama.cpp's memory rules by build: the table, and the estimate following each change at
the build it came in (and not one build before). The newest rules are the pinned build's,
which tests/test_fit_real.py checks against the real llama-server byte for byte."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.core.cmdline.args import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.llama.builds import (
    NEWEST,
    PINNED_BUILD,
    RULES,
    BuildRules,
    build_range,
    rules_for,
)
from lltui.core.llamalog.reader import scan_lines
from lltui.core.memory.context import resolve_context
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import read_hparams
from lltui.core.units import GIB, MIB


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rules")
    out = {}
    for name, spec in (
        ("llama", gf.llama_spec()),
        ("gemma3", gf.gemma3_spec(sliding_window=128)),
        ("deepseek2", gf.deepseek2_spec()),
    ):
        out[name] = root / f"{name}.gguf"
        gf.write_model(out[name], spec, "F16")
    return out


def hp_of(path: Path):
    return read_hparams(read_gguf(path))


def ctx(path: Path, argv: list[str], build: int | None, tool: str = "server"):
    return resolve_context(hp_of(path), parse_llama_args(argv), rules=rules_for(build, tool))


def est(path: Path, argv: list[str], build: int | None, devices=(), tool: str = "server"):
    opts = FitOptions(search=False, rules=rules_for(build, tool), server=tool == "server")
    return estimate(read_gguf(path), parse_llama_args(argv), devices, opts)


def gpus(n: int) -> tuple[DeviceSpec, ...]:
    return tuple(DeviceSpec(f"CUDA{i}", "cuda", 24 * GIB, 24 * GIB) for i in range(n))


# -- the table -------------------------------------------------------------------------------


MODELLED = [r for r in RULES if r.modelled and r.first > 0]


@pytest.mark.parametrize("row", MODELLED, ids=lambda r: f"b{r.first}-{r.field}")
def test_each_change_starts_at_its_build(row):
    """From its first build a rule has its value; the build before has the value before."""
    tool = row.tools[0]
    assert getattr(rules_for(row.first, tool), row.field) == row.value
    before = [r for r in RULES if r.field == row.field and tool in r.tools and r.first < row.first]
    if before and before[-1].value != row.value:
        assert getattr(rules_for(row.first - 1, tool), row.field) == before[-1].value


def test_every_field_has_a_value_before_any_change():
    fields_changed = {r.field for r in MODELLED}
    for field in fields_changed:
        assert any(r.field == field and r.first == 0 for r in RULES), field


def _rules(r: BuildRules) -> BuildRules:
    """The rules alone: the build, the tool and the notes aside."""
    return replace(r, build=None, tool=NEWEST.tool, notes=())


def test_newest_rules_are_the_pinned_builds_and_the_estimators_defaults():
    assert _rules(rules_for(PINNED_BUILD)) == NEWEST
    assert _rules(rules_for(None)) == NEWEST


def test_builds_past_the_table_and_unknown_builds_follow_the_newest_with_a_note():
    later = rules_for(PINNED_BUILD + 500)
    assert _rules(later) == NEWEST and later.build == PINNED_BUILD + 500
    assert "newer than lltui's table" in later.notes[0]
    assert "build unknown" in rules_for(None).notes[0]


def test_each_answer_names_what_its_build_does_not_model():
    old = rules_for(4000)
    assert any("compute buffers follow the pinned build" in n for n in old.notes)
    assert not any("LLAMA_SET_ROWS" in n for n in old.notes)  # not yet
    assert any("LLAMA_SET_ROWS" in n for n in rules_for(6000).notes)
    assert not any("LLAMA_SET_ROWS" in n for n in rules_for(6071).notes)  # over by then
    assert not any("compute buffers follow" in n for n in rules_for(PINNED_BUILD).notes)


# -- KV cache padding ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "fa", "cells"),
    [
        (2492, "on", 1000),  # no padding
        (2493, "on", 1024),  # 32
        (2771, "off", 1024),  # 256 always
        (2871, "off", 1024),  # 32 without FA (1000 -> 1024 either way)
        (2871, "on", 1024),
        (6868, "on", 1000),  # padding removed
        (6975, "on", 1024),  # 256 again
    ],
)
def test_kv_padding_by_build(models, build, fa, cells):
    r = ctx(models["llama"], ["-c", "1000", "-np", "1", "-fa", fa], build)
    assert r.n_ctx_seq == cells


def test_padding_to_32_without_flash_attention(models):
    r = ctx(models["llama"], ["-c", "1100", "-np", "1", "-fa", "off"], 3000)
    assert r.n_ctx_seq == 1120  # 32 cells: b2871-b6867 without FA
    assert ctx(models["llama"], ["-c", "1100", "-np", "1", "-fa", "on"], 3000).n_ctx_seq == 1280


# -- one cache or one per sequence -----------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "streams", "per_stream"),
    [
        (6000, 1, 5024),  # one cache for every sequence, n_ctx padded to 32
        (6071, 3, 1696),  # ceil(5000 / 3) = 1667, padded to 32 (FA off)
        (6868, 3, 1667),  # no padding
        (6925, 3, 1666),  # floor
        (6975, 3, 1792),  # pad(5120 // 3 = 1706, 256)
    ],
)
def test_per_sequence_streams_by_build(models, build, streams, per_stream):
    r = ctx(models["llama"], ["-c", "5000", "-np", "3", "-no-kvu", "-fa", "off"], build)
    assert (r.n_stream, r.n_ctx_seq) == (streams, per_stream)


# -- llama-server's slots ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "argv", "slots", "unified"),
    [
        (6000, [], 1, True),  # -np 1; one stream anyway
        (6924, [], 1, False),
        (6925, [], 4, True),  # -np 1 without -kvu: 4 slots, one cache
        (6925, ["-np", "1"], 4, True),  # ... even when given
        (6925, ["-np", "2"], 2, False),
        (7433, [], 4, True),  # -np auto
        (7433, ["-np", "1"], 1, False),
    ],
)
def test_server_slots_by_build(models, build, argv, slots, unified):
    r = ctx(models["llama"], ["-c", "4096", *argv], build)
    assert (r.n_seq_max, r.kv_unified or r.n_stream == 1) == (slots, unified or slots == 1)


def test_other_tools_run_one_sequence(models):
    assert ctx(models["llama"], ["-c", "4096"], PINNED_BUILD, tool="cli").n_seq_max == 1
    assert ctx(models["llama"], ["-c", "4096"], PINNED_BUILD, tool="bench").n_seq_max == 1


# -- defaults: flash attention, offload, context, batch -------------------------------------


def test_flash_attention_default_by_build(models):
    assert not ctx(models["llama"], ["-c", "4096"], 6324).flash_attn
    assert ctx(models["llama"], ["-c", "4096"], 6325).flash_attn
    assert ctx(models["llama"], ["-c", "4096", "-fa", "on"], 6324).flash_attn


def test_offload_default_by_build(models):
    none = est(models["llama"], ["-c", "512"], 6324, gpus(1))
    assert set(none.layer_devices) == {"CPU"}
    full = est(models["llama"], ["-c", "512"], 6325, gpus(1))
    assert set(full.layer_devices) == {"CUDA0"}


@pytest.mark.parametrize(("build", "n_ctx"), [(3086, 512), (3087, 4096), (4014, 4096)])
def test_context_default_by_build(models, build, n_ctx):
    # the model trains on 4096 tokens: -c 0 (b3087-b4013) means the same as -c 4096 here
    assert ctx(models["llama"], ["-np", "1"], build).n_ctx == n_ctx


def test_context_default_is_the_training_context_from_b7407(models):
    long = gf.llama_spec(n_ctx_train=8192)
    path = models["llama"].parent / "long.gguf"
    gf.write_model(path, long, "F16")
    assert ctx(path, ["-np", "1"], 7406).n_ctx == 4096
    assert ctx(path, ["-np", "1"], 7407).n_ctx == 8192


def test_batch_default_by_build(models):
    assert ctx(models["llama"], ["-c", "4096"], 2412).n_batch == 512
    assert ctx(models["llama"], ["-c", "4096"], 2413).n_batch == 2048


# -- SWA cache -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "swa_cells"),
    [
        (5428, 4096),  # every layer caches n_ctx
        (5429, 2176),  # min(4096, pad(128 x 1 + n_batch 2048, 32))
        (5554, 640),  # n_ubatch: pad(128 + 512, 32)
        (6868, 640),  # no padding: 640 is 640
        (6975, 768),  # pad(min(4096, 640), 256)
    ],
)
def test_swa_cache_by_build(models, build, swa_cells):
    argv = ["-c", "4096", "-fa", "off", "-b", "2048", "-ub", "512"]
    res = est(models["gemma3"], argv, build, tool="cli")  # one sequence whatever the build
    caches = {c.swa: c.cells for c in res.kv}
    assert caches[True] == swa_cells
    assert caches[False] == 4096


def test_swa_window_counts_sequences_per_stream(models):
    """One window per sequence in one cache before b5913; from the streams (b6071 by
    default) a window per stream of 2048 cells."""
    argv = ["-c", "8192", "-np", "4", "-no-kvu", "-fa", "on", "-ub", "512"]
    old = est(models["gemma3"], argv, 5912)
    new = est(models["gemma3"], argv, 6071)
    assert {c.swa: c.cells for c in old.kv} == {False: 8192, True: 1024}  # 128 x 4 + 512
    assert {c.swa: c.cells for c in new.kv} == {False: 2048, True: 768}  # pad(128 + 512, 256)
    assert new.resolved.n_stream == 4


def test_swa_full_keeps_n_ctx_in_every_build(models):
    argv = ["-c", "4096", "-np", "1", "--swa-full"]
    for build in (5500, 6000, PINNED_BUILD):
        assert {c.cells for c in est(models["gemma3"], argv, build).kv} == {4096}


# -- MLA (DeepSeek) ---------------------------------------------------------------------------


def test_mla_cache_stores_v_until_b7831(models):
    hp = hp_of(models["deepseek2"])
    argv = ["-c", "4096", "-np", "1", "-fa", "on"]
    with_v = est(models["deepseek2"], argv, 7831).kv[0]
    k_only = est(models["deepseek2"], argv, 7832).kv[0]
    row = 2 * 4096 * len(with_v.layers)  # f16 bytes per element x cells x layers
    assert k_only.v_bytes == 0 and k_only.k_bytes == hp.n_embd_k_gqa(0) * row
    assert with_v.k_bytes == k_only.k_bytes
    assert with_v.v_bytes == hp.n_embd_v_gqa(0) * row  # kv_lora_rank per token
    # DeepSeek-V3's sizes: K 576, V 512 per token and layer: a V-less cache is 47% smaller
    assert round(1 - 576 / (576 + 512), 2) == 0.47


# -- outputs and the compute reserve --------------------------------------------------------


@pytest.mark.parametrize(("build", "rows"), [(2412, None), (2413, 2048), (2540, 1)])
def test_output_buffer_by_build(models, build, rows):
    res = est(models["llama"], ["-c", "4096", "-np", "1", "-b", "2048"], build)
    out = [n for _, kind, n in res.buffers if kind == "output"]
    if rows is None:
        assert out == []
    else:
        assert out == [4 * rows * hp_of(models["llama"]).n_vocab]


def test_server_limits_its_reserved_outputs_from_b9460(models):
    assert ctx(models["llama"], ["-c", "4096", "-np", "2"], 9459).n_outputs_max == 2048
    assert ctx(models["llama"], ["-c", "4096", "-np", "2"], 9460).n_outputs_max == 2
    # the other tools keep a batch of outputs
    assert ctx(models["llama"], ["-c", "4096"], 9460, tool="cli").n_outputs_max == 2048


def test_pipeline_parallelism_from_b2413(models):
    argv = ["-c", "4096", "-np", "1", "-ngl", "all"]
    assert not est(models["llama"], argv, 2412, gpus(2)).pipeline_parallel
    assert est(models["llama"], argv, 2413, gpus(2)).pipeline_parallel


def test_rules_travel_in_the_options_not_after_the_estimate(models):
    """The same FitProblem path: a search under old rules finds contexts for those rules."""
    opts = FitOptions(rules=rules_for(5400), search=True)
    res = estimate(read_gguf(models["gemma3"]), parse_llama_args(["-c", "4096"]), gpus(1), opts)
    assert res.max_ctx is not None
    assert {c.cells for c in res.kv} == {4096}  # b5400: no SWA window yet


# -- the build a log's formats imply -------------------------------------------------------


def test_build_range_from_line_formats():
    fa = scan_lines(["llm_load_tensors:   CPU_Mapped model buffer size =   417.66 MiB"])
    assert fa.build_range is not None and fa.build_range.label == "b3990-b4462"
    new = scan_lines(["sched_reserve:      CUDA0 compute buffer size =   100.00 MiB"])
    assert new.build_range is not None and new.build_range.first == 7746
    assert new.build_range.representative == PINNED_BUILD


def test_a_function_dates_a_log_only_by_the_lines_it_stopped_printing():
    """llama_model_load_from_file_impl still says "failed to load model" after b9018; only
    its "using device" lines moved (a b11434 log of a missing model was dated b9018)."""
    failed = scan_lines(["llama_model_load_from_file_impl: failed to load model"])
    assert failed.build_range is None or failed.build_range.last is None
    using = "llama_model_load_from_file_impl: using device CUDA0 (RTX) (0000:01:00.0) - 9 MiB free"
    old = scan_lines([using])
    assert old.build_range is not None and old.build_range.last == 9018


def test_contradicting_formats_give_no_range():
    lines = ["llm_load_tensors: CPU buffer size = 1.00 MiB", "sched_reserve: x"]
    assert build_range([]) is None
    assert scan_lines(lines).build_range is None


def test_rules_are_hashable_options():
    assert hash(FitOptions(rules=rules_for(5000))) != hash(FitOptions())
    assert isinstance(replace(NEWEST, build=1), BuildRules)
    assert MIB  # the module's constants are importable for the next tests
