"""-sm tensor against the real llama-server: the pinned CPU build makes a Meta() device of
loopback rpc-servers (RPC devices are no CPU buffer type) and cuts every weight and KV cache
tensor over them. The Meta() model, KV and compute lines (the largest device's buffer) and
the CPU lines must equal lltui's at the log's 0.01 MiB resolution, with even and uneven -ts.
"""

from __future__ import annotations

import pytest
from support import gguf_factory as gf
from support.llama_fixture import (
    SERVER_ARGS,
    llama_bins,
    logged_buffers,
    rpc_servers,
    served_log,
)

from lltui.core.cmdline.args import spell
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, FitResult, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.llamalog.reader import parse_log
from lltui.core.memory.devices import rpc_device
from lltui.core.memory.tensor_parallel import META, fold_meta
from lltui.core.units import MIB

__all__ = ["llama_bins"]  # a session fixture used by name

pytestmark = pytest.mark.slow


SPECS = {
    "llama-gqa": gf.llama_spec(),  # 8 heads over 2 KV heads
    "llama-mha": gf.llama_spec(n_head=4, n_head_kv=4, head_dim=64),
    "qwen3": gf.qwen3_spec(),  # Q/K norms, tied output
    "phi3": gf.phi3_spec(),  # fused QKV and up+gate
    "qwen3moe": gf.qwen3moe_spec(),
    "gemma3": gf.gemma3_spec(),  # sliding-window layers: two KV caches
    "gpt-oss": gf.gpt_oss_spec(),  # sinks, biases, expert biases
}
CASES = {
    "llama-gqa-2": ("llama-gqa", 2, []),
    "llama-gqa-3": ("llama-gqa", 3, []),
    "llama-gqa-2-uneven": ("llama-gqa", 2, ["-ts", "3,1"]),
    "llama-gqa-3-uneven-q8kv": ("llama-gqa", 3, ["-ts", "2,1,1", "-ctk", "q8_0", "-ctv", "q8_0"]),
    "llama-mha-3": ("llama-mha", 3, ["-c", "4096"]),
    "qwen3-3-uneven": ("qwen3", 3, ["-ts", "1,2,1"]),
    "phi3-2-uneven": ("phi3", 2, ["-ts", "1,3"]),
    "qwen3moe-2": ("qwen3moe", 2, []),
    "qwen3moe-3-uneven": ("qwen3moe", 3, ["-ts", "1,2,2", "-ub", "128"]),
    "gemma3-3-uneven": ("gemma3", 3, ["-ts", "2,1,1"]),
    "gpt-oss-2-uneven": ("gpt-oss", 2, ["-ts", "1,2"]),
}


@pytest.fixture(scope="module")
def rpc_endpoints(llama_bins, tmp_path_factory):
    with rpc_servers(llama_bins, 3, tmp_path_factory.mktemp("rpc-logs")) as servers:
        yield [f"127.0.0.1:{s.port}" for s in servers]


def ours(res: FitResult) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for name, kind, nbytes in fold_meta(res.buffers, res.meta_devices):
        if kind in ("model", "KV", "compute") and nbytes:
            out[(name, kind)] = round(out.get((name, kind), 0.0) + nbytes / MIB, 2)
    return {k: v for k, v in out.items() if v}


@pytest.mark.parametrize("case", list(CASES))
def test_meta_device_buffers_equal_the_log(llama_bins, rpc_endpoints, tmp_path, case):
    spec_name, n, extra = CASES[case]
    path = tmp_path / f"{spec_name}.gguf"
    gf.write_model(path, SPECS[spec_name], "Q8_0", name="tiny-model")
    eps = rpc_endpoints[:n]
    flags = ["--rpc", ",".join(eps), "-c", "2048", "-np", "1", "-sm", "tensor", *extra]
    flags.append("--no-warmup")
    log = tmp_path / "s.log"
    text = served_log(llama_bins, path, log, flags)
    summary = parse_log(text)
    assert f"creating a Meta device for tensor parallelism from {n} devices" in text
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
    res = estimate(
        read_gguf(path),
        parse_llama_args([*SERVER_ARGS, *flags]),
        devices,
        FitOptions(search=False),
    )
    assert res.meta_devices == tuple(d.name for d in devices)
    assert res.resolved.flash_attn
    got, want = ours(res), logged_buffers(summary, ("model", "KV", "compute"))
    assert (META, "model") in want
    assert got == want


def test_the_planners_tensor_choice_loads_as_planned(llama_bins, rpc_endpoints, tmp_path):
    """``fit --best decode``'s planner over two rpc-servers: its ``-sm tensor`` choice,
    started as printed, loads what the planner said on each device. Its first choice is
    ``-sm layer``: over RPC each all-reduce is a TCP round trip per device, and on two
    loopback rpc-servers tensor decoded at half layer's speed
    (fixtures/llama-bench/rpc_loopback_split.txt)."""
    from lltui.core.fit.planner import plan_best

    path = tmp_path / "llama.gguf"
    gf.write_model(path, SPECS["llama-gqa"], "Q8_0", name="tiny-model")
    eps = rpc_endpoints[:2]
    given = [*SERVER_ARGS, "--rpc", ",".join(eps), "-np", "1", "--no-warmup"]
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
    plan = plan_best(read_gguf(path), parse_llama_args(given), devices, FitOptions())
    assert plan.tensor_note == "" and plan.split is not None  # tensor was tried
    assert plan.best is not None and plan.best.split_mode == "layer"
    assert "all-reduces" in plan.split.why
    choice = plan.split.tensor
    assert choice is not None and choice.fits and choice.split_mode == "tensor"
    text = served_log(llama_bins, path, tmp_path / "s.log", list(choice.argv))
    assert "creating a Meta device for tensor parallelism from 2 devices" in text
    res = estimate(read_gguf(path), parse_llama_args(choice.argv), devices, FitOptions())
    assert ours(res) == logged_buffers(parse_log(text), ("model", "KV", "compute"))
    # what the planner showed per device is that estimate's
    planned = {d.name: d.total_bytes for d in choice.memory}
    assert planned == {d.name: d.total_bytes for d in res.devices if d.name in planned}
    assert len(planned) == 2


def test_the_planners_room_split_with_host_experts_loads_as_planned(
    llama_bins, rpc_endpoints, tmp_path
):
    """Two rpc-servers given too little memory for a MoE's experts: the planner's first is a
    layer split with ``--n-cpu-moe`` and ``-ts`` sized to each device's room (llama.cpp's own
    split would need more experts on the host), and that command, started as printed, loads
    what the planner said on each device."""
    from lltui.core.fit.planner import plan_best

    path = tmp_path / "moe.gguf"
    gf.write_model(path, gf.qwen3moe_spec(n_layer=8), "Q8_0", name="tiny-model")
    model = read_gguf(path)
    eps = rpc_endpoints[:2]
    given = parse_llama_args([*SERVER_ARGS, "--rpc", ",".join(eps), "-np", "1", "--no-warmup"])
    roomy = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
    whole = estimate(model, given, roomy, FitOptions())
    need = max(d.total_bytes for d in whole.devices if d.kind != "cpu")
    devices = [rpc_device(ep, need * 6 // 10, i, backend="cpu") for i, ep in enumerate(eps)]
    plan = plan_best(model, given, devices, FitOptions())
    choice = plan.best
    assert choice is not None and choice.split_mode == "layer" and choice.ts == "room"
    ts, ncmoe = spell("tensor_split", (1,))[0], spell("n_cpu_moe", 1)[0]
    assert ts in choice.argv and ncmoe in choice.argv and "host" in choice.offload
    text = served_log(llama_bins, path, tmp_path / "s.log", list(choice.argv))
    res = estimate(model, parse_llama_args(choice.argv), devices, FitOptions())
    assert res.fits
    assert ours(res) == logged_buffers(parse_log(text), ("model", "KV", "compute"))
    planned = {d.name: d.total_bytes for d in choice.memory}
    assert planned == {d.name: d.total_bytes for d in res.devices if d.name in planned}
