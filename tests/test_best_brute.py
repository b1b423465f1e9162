"""fit --best against a brute force: on small models whose GPUs and host are both tight,
every point of the space the search claims is tried one by one with the plain estimator (every
-ngl or --n-cpu-moe, each with llama.cpp's split and the split sized to the GPUs' room for it,
every K/V type and ubatch, every context), and the search's first line must be as good as the
best of them for its goal. A second brute force over every -ts of two GPUs shows the split
sized to their room reaches the largest context any -ts does with everything on the GPUs."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from support import gguf_factory as gf

from lltui.core.cmdline.args import spell
from lltui.core.cmdline.flag_values import writable_split
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.best import (
    KV_LOSS,
    best_configs,
    headroom_split,
    room_for_weights,
    speed_tier,
)
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.units import MIB

# (model spec, weight type, GPUs, host MiB free): the GPUs hold part of the model and the host
# not all of it, so the best lines sit between the two limits
CASES = {
    "dense": (
        gf.llama_spec(n_layer=6, n_embd=512, n_ff=1536, n_ctx_train=8192),
        "F16",
        "20MiB,14MiB",
        40,
    ),
    "moe": (gf.qwen3moe_spec(n_layer=6, n_ctx_train=8192), "F16", "12MiB,10MiB", 40),
}
ASKED = 2048
CAP = 8192  # the cases' trained context
KVS = ("f16", "q8_0", "q4_0")


def _kv_flags(kv: str) -> list[str]:
    if kv == "f16":
        return []
    return [*spell("type_k", kv), *spell("type_v", kv), *spell("flash_attn", "on")]


def _fits(model, devs, opts, flags: list[str]) -> bool:
    return estimate(model, parse_llama_args(flags), devs, opts).fits


def _largest(model, devs, opts, flags: list[str], cap: int) -> int:
    """The largest context (a multiple of 256) at which the line fits, by bisection."""
    if not _fits(model, devs, opts, [*flags, "-c", "256"]):
        return 0
    lo, hi = 1, cap + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (
            (mid, hi) if _fits(model, devs, opts, [*flags, "-c", str(mid * 256)]) else (lo, mid)
        )
    return lo * 256


def _space(model, devs, opts, moe: bool, n_layer: int):
    """Every line of the claimed space, without -c: (K/V type, flags)."""
    offloads = (
        [["-ngl", "all", *(spell("n_cpu_moe", k) if k else [])] for k in range(n_layer + 1)]
        if moe
        else [["-ngl", str(n)] for n in range(n_layer + 2)]
    )
    for kv, ub, place in itertools.product(KVS, ([], ["-ub", "256"]), offloads):
        flags = [*place, *_kv_flags(kv), *ub]
        yield kv, flags
        if len(devs) > 1:  # and the split sized to the GPUs' room for this placement
            at = estimate(model, parse_llama_args([*flags, "-c", str(ASKED)]), devs, opts)
            top = estimate(model, parse_llama_args([*flags, "-c", str(CAP)]), devs, opts)
            counts = headroom_split(at, devs, top)
            ts = writable_split(counts) if counts else None
            if ts:
                yield kv, [*place, *spell("tensor_split", ts), *_kv_flags(kv), *ub]


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, tmp_path_factory):
    spec, wtype, gpus, host_mib = CASES[request.param]
    path = tmp_path_factory.mktemp("brute") / f"{request.param}.gguf"
    gf.write_model(path, spec, wtype)
    model = read_gguf(path)
    devs = parse_gpus_spec(gpus).devices
    opts = FitOptions(host_free_bytes=host_mib * MIB, margin_bytes=0, search=False)
    cap = spec.n_ctx_train // 256
    brute = []
    for kv, flags in _space(model, devs, opts, spec.n_expert > 1, spec.n_layer):
        ctx = _largest(model, devs, opts, flags, cap)
        if ctx:
            at = estimate(model, parse_llama_args([*flags, "-c", str(ASKED)]), devs, opts)
            decode = at.speed.decode_tps if at.fits and at.speed else 0.0
            brute.append((ctx, KV_LOSS[kv], decode, at.fits, flags))
    assert brute, "nothing fits: make the devices bigger"
    assert any(b[0] < cap * 256 for b in brute), "nothing binds: make the devices smaller"
    return model, devs, opts, cap, brute


def test_the_largest_context_is_the_brute_forces(case):
    model, devs, opts, _cap, brute = case
    top = best_configs(model, parse_llama_args(["-c", str(ASKED)]), devs, opts, "context")[0]
    want = max(brute, key=lambda b: (b[0], -b[1]))
    assert (top.max_ctx, KV_LOSS[top.kv]) == (want[0], want[1]), (top, want)


def test_the_fastest_at_the_context_asked_is_the_brute_forces(case):
    model, devs, opts, _cap, brute = case
    fast = best_configs(model, parse_llama_args(["-c", str(ASKED)]), devs, opts, "speed")[0]
    fastest = max(b[2] for b in brute if b[3])
    # within 2 % of the fastest, the least quality given up
    want_kv = min(b[1] for b in brute if b[3] and speed_tier(b[2], fastest) == 0)
    assert (speed_tier(fast.decode_tps, fastest), KV_LOSS[fast.kv]) == (0, want_kv)


def test_every_line_proposed_fits_as_printed(case):
    model, devs, opts, _cap, _brute = case
    settings = parse_llama_args(["-c", str(ASKED)])
    for goal in ("context", "speed", "gpu-only"):
        for c in best_configs(model, settings, devs, opts, goal):
            assert _fits(model, devs, opts, list(c.flags)), (goal, c)


def _weights(res) -> int:
    return sum(t.nbytes for t in res.placements if not t.duplicate)


def test_every_line_that_fits_holds_at_least_the_weights_own_bytes(case):
    """--best stops at once where all the free memory is less than the weights: sound only
    if every line's devices count at least each weight's own bytes somewhere."""
    model, devs, opts, _cap, brute = case
    for *_, flags in brute:
        res = estimate(model, parse_llama_args([*flags, "-c", "256"]), devs, opts)
        assert sum(d.weights_bytes for d in res.devices) >= _weights(res), flags
        assert room_for_weights(res)  # it fits: the bound must not rule it out


def test_with_less_free_memory_than_the_weights_nothing_is_searched(case):
    model, _devs, opts, _cap, _brute = case
    devs = parse_gpus_spec("4MiB,4MiB").devices
    res = estimate(model, parse_llama_args([]), devs, opts)
    host = _weights(res) - sum(d.free_bytes or 0 for d in devs) - 1  # one byte short
    tight = replace(opts, host_free_bytes=host)
    steps: list[int] = []
    settings = parse_llama_args(["-c", "256"])
    found = best_configs(
        model, settings, devs, tight, "context", progress=lambda d, _: steps.append(d)
    )
    assert found == [] and steps == []
    # the ends of the space agree: everything on the GPUs, everything on the host
    for flags in (["-ngl", "all"], ["-ngl", "0"]):
        assert not _fits(model, devs, tight, [*flags, "-c", "256"])
    # and with all of a byte more, the search runs (it need not find a line)
    steps.clear()
    best_configs(
        model,
        settings,
        devs,
        replace(tight, host_free_bytes=host + 1),
        "context",
        progress=lambda d, _: steps.append(d),
    )
    assert steps


@pytest.mark.parametrize(("case_name", "gpus"), [("dense", "48MiB,40MiB"), ("moe", "40MiB,32MiB")])
def test_the_room_split_reaches_what_any_split_does_with_everything_on_the_gpus(
    tmp_path, case_name, gpus
):
    spec, wtype, _gpus, _host = CASES[case_name]
    path = tmp_path / "m.gguf"
    gf.write_model(path, spec, wtype)
    model = read_gguf(path)
    devs = parse_gpus_spec(gpus).devices  # room for everything, not at every context
    opts = FitOptions(host_free_bytes=1 << 40, margin_bytes=0, search=False)
    cap = spec.n_ctx_train // 256
    n = len(estimate(model, parse_llama_args([]), devs, opts).layer_devices)
    every = [
        _largest(model, devs, opts, ["-ngl", "all", "-ts", f"{i},{n - i}"], cap)
        for i in range(n + 1)
    ]
    default = _largest(model, devs, opts, ["-ngl", "all"], cap)
    at = estimate(model, parse_llama_args(["-ngl", "all", "-c", str(ASKED)]), devs, opts)
    top = estimate(model, parse_llama_args(["-ngl", "all", "-c", str(CAP)]), devs, opts)
    counts = headroom_split(at, devs, top)
    room = (
        _largest(model, devs, opts, ["-ngl", "all", *spell("tensor_split", counts)], cap)
        if counts
        else default
    )
    assert 0 < max(every) < cap * 256, every  # the split matters: not vacuous
    assert max(room, default) == max(every)
