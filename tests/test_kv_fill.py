"""The KV fill from the fit model's caches: bytes per token per device as the caches are
laid out (a layer split, SWA layers capped at the window, recurrent state once per
sequence), how long until full at the current rate, and the watch's fold of /slots
answers (a server with /slots disabled says so)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.gguf.reader import read_gguf
from lltui.core.llama.metrics import SlotState
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.kv_fill import KvDeviceLayout, KvLayout, fill_line, kv_fill, kv_layout
from lltui.core.memory.results import FitOptions
from lltui.core.units import GIB
from lltui.services.launch.compare import LaunchCheck
from lltui.services.launch.kv_watch import NO_LAYOUT, NO_SLOTS, KvWatch
from lltui.services.launch.state import LaunchState
from lltui.sources.llama.http import DISABLED, OK, EndpointResult, ServerPoll

GPUS = tuple(DeviceSpec(f"CUDA{i}", "cuda", 8 * GIB, 8 * GIB) for i in range(2))


def fit(tmp_path: Path, spec: gf.ModelSpec, *argv: str):
    from lltui.core.fit.estimate import estimate

    path = tmp_path / "m.gguf"
    gf.write_model(path, spec, "F16")
    model = read_gguf(path)
    return estimate(model, parse_llama_args(list(argv)), GPUS, FitOptions(search=False))


def test_a_layer_split_shares_a_token_by_the_layers_each_gpu_holds(tmp_path):
    spec = gf.SPECS["llama"](n_layer=8)
    result = fit(tmp_path, spec, "-c", "1024", "-ngl", "99", "-ts", "3,1", "-np", "2")
    layout = kv_layout(result)
    assert layout is not None
    hp = {d.name: d for d in layout.devices}
    per_layer = 2 * 2 * spec.n_head_kv * spec.head_dim  # K and V rows, F16
    layers = {n: result.layer_devices[:-1].count(n) for n in ("CUDA0", "CUDA1")}
    assert layers["CUDA0"] > layers["CUDA1"] > 0
    for name, count in layers.items():
        assert hp[name].full_bytes_per_token == count * per_layer
        assert hp[name].swa_bytes_per_token == 0
        # the cache allocated for every cell is the capacity
        assert hp[name].capacity_bytes == result.buffer_bytes(name, "KV")
    fill = kv_fill(layout, [100, 30], [512, 512], t=10.0)
    for d in fill.devices:
        assert d.used_bytes == 130 * hp[d.name].full_bytes_per_token
        assert d.free_bytes == d.capacity_bytes - d.used_bytes
    assert fill.slot_share(0) == 100 / 512
    assert fill.seconds_to_full is None  # one sample: no rate yet


def test_sliding_window_layers_hold_at_most_the_window(tmp_path):
    result = fit(tmp_path, gf.SPECS["gemma3"](), "-c", "4096", "-ngl", "99", "-np", "1")
    layout = kv_layout(result)
    assert layout is not None and layout.swa_window > 0
    d = layout.devices[0]
    assert d.full_bytes_per_token > 0 and d.swa_bytes_per_token > 0
    w = layout.swa_window
    short = kv_fill(layout, [w // 2], [4096], 0.0).devices[0].used_bytes
    long = kv_fill(layout, [w + 500], [4096], 0.0).devices[0].used_bytes
    assert short == (w // 2) * (d.full_bytes_per_token + d.swa_bytes_per_token)
    assert long == (w + 500) * d.full_bytes_per_token + w * d.swa_bytes_per_token


def test_recurrent_state_is_counted_once_per_sequence_that_holds_tokens():
    dev = KvDeviceLayout("CUDA0", 1000, 0, rs_bytes_per_seq=50_000, capacity_bytes=10**7)
    layout = KvLayout((dev,), cells_per_stream=4096, streams=1, swa_window=0)
    fill = kv_fill(layout, [10, 0, 20], [4096] * 3, 0.0)
    assert fill.devices[0].used_bytes == 30 * 1000 + 2 * 50_000


def test_how_long_until_full_at_the_rate_of_the_last_samples():
    dev = KvDeviceLayout("CUDA0", 1000, 0, 0, capacity_bytes=1000 * 1000)
    layout = KvLayout((dev,), 1000, 1, 0)
    first = kv_fill(layout, [100], [1000], 0.0)
    second = kv_fill(layout, [300], [1000], 10.0, [first])  # 20 tokens a second
    assert second.tokens_per_s == 20.0
    assert second.devices[0].seconds_to_full == 700 / 20
    assert "full in 35 s" in fill_line(second)
    # a sample older than the window is not a rate
    late = kv_fill(layout, [300], [1000], 100.0, [first])
    assert late.tokens_per_s is None and late.seconds_to_full is None
    # an emptying cache is not filling
    less = kv_fill(layout, [50], [1000], 20.0, [second])
    assert less.seconds_to_full is None


def _answer(slots=None, status=OK) -> ServerPoll:
    health = EndpointResult("/health", OK)
    return ServerPoll(
        url="http://127.0.0.1:1",
        t=5.0,
        wall=0.0,
        state="ready",
        health=health,
        slots=slots,
        endpoints=(health, EndpointResult("/slots", status)),
    )


def test_the_watch_folds_slots_or_says_why_there_is_no_fill():
    dev = KvDeviceLayout("RPC0", 2048, 0, 0, capacity_bytes=2048 * 512)
    check = LaunchCheck((), None, "-", 0, 0, 0, kv=KvLayout((dev,), 512, 1, 0))
    st = LaunchState(phase="ready", check=check)
    slots = (SlotState(0, n_ctx=512, n_prompt_tokens=57), SlotState(1, n_ctx=512))
    folded = KvWatch().fold(st, _answer(slots))
    assert folded.kv is not None and folded.kv.slot_tokens == (57, 0)
    assert folded.kv.devices[0].used_bytes == 57 * 2048
    disabled = KvWatch().fold(st, _answer(None, DISABLED))
    assert disabled.kv is None and disabled.kv_note == NO_SLOTS
    no_plan = KvWatch().fold(LaunchState(phase="following"), _answer(slots))
    assert no_plan.kv is None and no_plan.kv_note == NO_LAYOUT
    # while a server of ours loads, its prediction may still come: no note yet
    loading = KvWatch().fold(LaunchState(phase="loading"), _answer(slots))
    assert loading.kv is None and loading.kv_note is None


def test_the_launch_view_shows_the_fill_in_a_line_or_why_not():
    from lltui.app.screens.launch import render_rates

    dev = KvDeviceLayout("RPC0", 2048, 0, 0, capacity_bytes=2048 * 512)
    check = LaunchCheck((), None, "-", 0, 0, 0, kv=KvLayout((dev,), 512, 1, 0))
    slots = (SlotState(0, n_ctx=512, n_prompt_tokens=128), SlotState(1, n_ctx=512))
    st = KvWatch().fold(LaunchState(phase="ready", check=check), _answer(slots))
    text = render_rates(st, 80)
    assert "KV 128/512 tokens: RPC0 0.2/1.0 MiB; slots 25% 0%" in text
    off = KvWatch().fold(LaunchState(phase="ready", check=check), _answer(None, DISABLED))
    assert "--no-slots" in render_rates(off, 80)


def test_a_tensor_split_shares_each_token_by_the_heads_each_gpu_holds(tmp_path):
    spec = gf.SPECS["llama"](n_layer=8)
    result = fit(tmp_path, spec, "-c", "1024", "-ngl", "99", "-sm", "tensor", "-fa", "on")
    layout = kv_layout(result)
    assert layout is not None
    per_token = spec.n_layer * 2 * 2 * spec.n_head_kv * spec.head_dim
    assert [d.name for d in layout.devices] == ["CUDA0", "CUDA1"]
    assert [d.full_bytes_per_token for d in layout.devices] == [per_token // 2] * 2
    for d in layout.devices:
        assert d.capacity_bytes == d.full_bytes_per_token * layout.capacity_tokens


def test_a_small_caches_capacity_is_not_rounded_away():
    """A 512-token cache of a tiny model is 0.5 MiB: the line said 'CPU 0.0/0 MiB'."""
    dev = KvDeviceLayout("CPU", 1024, 0, 0, capacity_bytes=512 * 1024)
    fill = kv_fill(KvLayout((dev,), 512, 1, 0), [14], [512], 0.0)
    assert "CPU 0.0/0.5 MiB" in fill_line(fill)
    big = KvDeviceLayout("CUDA0", 1024, 0, 0, capacity_bytes=2048 * 2**20)
    assert "CUDA0 0.0/2048 MiB" in fill_line(kv_fill(KvLayout((big,), 512, 1, 0), [14], [512], 0.0))


def test_full_in_counts_cells_of_full_attention_and_each_slots_limit():
    """gemma3 (sliding window) on -np 2: 630 cells left at 48 t/s said "full in 76 s" (the
    window's bytes counted as room and as growth), with slot 1 at 1009 of its 1024."""
    full = KvDeviceLayout("CPU", 100, 400, 0, capacity_bytes=2048 * 100 + 2 * 1024 * 400)
    layout = KvLayout((full,), cells_per_stream=1024, streams=2, swa_window=512)
    first = kv_fill(layout, [309, 600], [1024, 1024], t=0.0)
    later = kv_fill(layout, [409, 1009], [1024, 1024], t=10.0, earlier=[first])
    assert later.tokens_per_s == pytest.approx(50.9)
    # slot 1: 15 cells left at 40.9 t/s; the whole cache: 630 cells at 50.9 t/s
    assert later.seconds_to_full == pytest.approx(15 / 40.9, rel=0.01)
    one = KvLayout((full,), cells_per_stream=2048, streams=1, swa_window=512)
    a = kv_fill(one, [1000], [2048], t=0.0)
    b = kv_fill(one, [1418], [2048], t=10.0, earlier=[a])
    assert b.seconds_to_full == pytest.approx(630 / 41.8, rel=0.01)  # cells, not bytes
