"""Compute buffers planned from the modelled graph against the real llama-server.

Tiny models of the covered families (llama, qwen2, qwen3, qwen3moe, gemma3 with
sliding-window layers, phi3, gpt2, starcoder, gpt-oss, glm4moe with and without its MTP
layer, mistral3, qwen2moe, deepseek2 with MLA as V2 and as V3 convert it) run in the pinned
CPU build at ``-lv 4``; the CPU compute buffer must equal the log's ``sched_reserve`` line
at its 0.01 MiB resolution, with flash attention on and off, several ``-ub`` and ``-np``
values, unified and per-slot KV, quantized KV (the Hadamard-rotated path) and F32 KV (cast
to F16 for flash attention); loopback RPC servers give several devices (splits, input
copies, pipeline parallelism, partial offload, -ot, -nkvo).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.llama_fixture import SERVER_ARGS, llama_bins, rpc_servers, served_log

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.llamalog.reader import parse_log
from lltui.core.memory.devices import rpc_device
from lltui.core.units import MIB

__all__ = ["llama_bins"]  # a session fixture used by name

pytestmark = pytest.mark.slow

COVERED = (
    "llama",
    "qwen2",
    "qwen3",
    "qwen3moe",
    "gemma3",
    "phi3",
    "gpt2",
    "starcoder",
    "gpt-oss",
    "glm4moe",
    "glm4moe-mtp",
    "mistral3",
    "qwen2moe",
    "deepseek2",
    "deepseek3",
    "deepseek3-grouped",
)
# qwen2: Q/K/V biases; phi3: fused QKV and gate/up matrices; gpt2/starcoder: LayerNorm,
# learned positions, biases (starcoder with one KV head)
SPECS = {
    **gf.SPECS,
    "qwen2": gf.qwen2_spec,
    "phi3": gf.phi3_spec,
    "gpt2": gf.gpt2_spec,
    "starcoder": gf.starcoder_spec,
    "gpt-oss": gf.gpt_oss_spec,  # sinks, biased experts, sliding windows, head 64 != 320/8
    "glm4moe": gf.glm4moe_spec,  # sigmoid routing, selection bias, shared expert, dense lead
    "glm4moe-mtp": lambda: gf.glm4moe_spec(n_layer=5, n_nextn=1),  # + an MTP layer, not run
    "mistral3": gf.mistral3_spec,  # attention temperature scaling
    "qwen2moe": gf.qwen2moe_spec,  # a shared expert gated by its own sigmoid
    "deepseek2": gf.deepseek2_spec,  # MLA: K-only latent cache, decompressed heads
    "deepseek3": gf.deepseek3_spec,  # deepseek2 arch, sigmoid routing, scaled weights, MTP
    "deepseek3-grouped": gf.deepseek3_grouped_spec,  # + expert groups (DeepSeek-V3 routing)
}
SLOTS = {
    "np1": ["-np", "1"],
    "np4-split": ["-np", "4", "-no-kvu"],
    "np3-unified": ["-np", "3", "-kvu"],
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compute-models")
    out = {}
    for arch in COVERED:
        path = root / f"{arch}.gguf"
        # (a name with "phi3" in it makes llama.cpp look for phi3's special tokens)
        gf.write_model(path, SPECS[arch](), "Q8_0", name="tiny-model")
        out[arch] = path
    return out


def logged_and_planned(
    bins, model: Path, argv: list[str], log: Path, devices=()
) -> tuple[dict, dict, bool]:
    flags = [*argv, "--no-warmup"]
    summary = parse_log(served_log(bins, model, log, flags))
    logged = {b.name: b.compute_mib for b in summary.buffers if b.compute_mib}
    assert logged, f"no compute buffer line in the log:\n{summary.problems}"
    res = estimate(
        read_gguf(model),
        parse_llama_args([*SERVER_ARGS, *flags]),
        devices,
        FitOptions(search=False),
    )
    ours = {n: round(b / MIB, 2) for n, k, b in res.buffers if k == "compute"}
    ours = {n: v for n, v in ours.items() if v}  # the log prints 0.00 MiB; the parser drops it
    return logged, ours, res.compute_exact


@pytest.mark.parametrize(
    ("arch", "fa", "ub", "slots"),
    list(itertools.product(COVERED, ("on", "off"), (1, 64, 512, 2048), SLOTS)),
)
def test_compute_buffer_equals_the_log(llama_bins, models, tmp_path, arch, fa, ub, slots):
    argv = ["-c", "4096", "-b", "2048", "-ub", str(ub), "-fa", fa, *SLOTS[slots]]
    logged, ours, exact = logged_and_planned(llama_bins, models[arch], argv, tmp_path / "s.log")
    assert exact
    assert ours == logged


ODD_ARGV = (
    ["-c", "5000", "-np", "3", "-no-kvu", "-ub", "256", "-ctk", "q8_0", "-ctv", "q8_0"],
    ["-c", "8192", "-np", "2", "-kvu", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"],
    ["-c", "8192", "-np", "2", "-ctk", "q8_0", "-ub", "1024"],
    ["-c", "4096", "-np", "1", "--swa-full", "-ub", "2048", "-b", "2048"],
    # an F32 cache: flash attention casts its K and V views to F16 first
    ["-c", "4096", "-np", "2", "-ctk", "f32", "-ctv", "f32", "-fa", "on"],
)


@pytest.mark.parametrize(
    ("arch", "argv"),
    [
        (arch, argv)
        for arch in COVERED
        for argv in ODD_ARGV
        # MLA models need the same K and V cache types: llama.cpp refuses a K type alone
        if not (arch.startswith("deepseek") and "-ctk" in argv and "-ctv" not in argv)
    ],
)
def test_quantized_kv_and_odd_contexts(llama_bins, models, tmp_path, arch, argv):
    logged, ours, exact = logged_and_planned(llama_bins, models[arch], argv, tmp_path / "s.log")
    assert exact
    assert ours == logged


# -- several devices: loopback RPC servers (the CPU backend behind each) -------------------------


@pytest.fixture(scope="module")
def rpc_endpoints(llama_bins, tmp_path_factory):
    with rpc_servers(llama_bins, 3, tmp_path_factory.mktemp("rpc-logs")) as servers:
        yield [f"127.0.0.1:{s.port}" for s in servers]


RPC_CASES = {
    "even-fa": ("llama", 2, ["-ts", "1,1", "-fa", "on"]),
    "even-no-fa": ("llama", 2, ["-ts", "1,1", "-fa", "off"]),
    "partial": ("llama", 2, ["-ts", "3,1", "-ngl", "3"]),
    "partial-qk-norm": ("qwen3", 2, ["-ts", "1,2", "-ngl", "4"]),
    "no-layers": ("llama", 2, ["-ts", "1,1", "-ngl", "0"]),
    "three-moe-pipeline": ("qwen3moe", 3, ["-ts", "1,1,2"]),
    "moe-big-ubatch": ("qwen3moe", 2, ["-ts", "1,3", "-fa", "off", "-ub", "2048", "-b", "2048"]),
    "experts-on-host": ("qwen3moe", 2, ["-ts", "1,1", "--cpu-moe"]),
    "slots-small-ubatch": ("llama", 3, ["-ts", "1,1,1", "-ub", "64", "-np", "4"]),
    "kv-on-host-fa": ("qwen3", 2, ["-ts", "1,1", "-nkvo", "-fa", "on"]),
    "kv-on-host-no-fa": ("qwen3", 2, ["-ts", "1,1", "-nkvo", "-fa", "off"]),
    "layer-on-host": ("qwen3", 2, ["-ts", "1,1", "-ot", r"blk\.1\.=CPU"]),
    "one-token": ("llama", 2, ["-ts", "1,1", "-ngl", "1", "-ub", "1"]),
    "main-gpu": ("llama", 2, ["-sm", "none", "-mg", "1"]),
    "swa-uneven": ("gemma3", 2, ["-ts", "2,1"]),
    "swa-three": ("gemma3", 3, ["-ts", "2,1,1", "-fa", "off"]),
    "swa-kv-on-host": ("gemma3", 2, ["-ts", "1,1", "-nkvo"]),
    "swa-partial": ("gemma3", 2, ["-ts", "1,1", "-ngl", "3", "-ctk", "q8_0"]),
    "fused-qkv": ("phi3", 2, ["-ts", "1,2", "-fa", "off"]),
    "fused-qkv-partial": ("phi3", 2, ["-ts", "1,1", "-ngl", "2", "-ub", "64"]),
    "layernorm": ("gpt2", 2, ["-ts", "1,1"]),
    "layernorm-partial": ("starcoder", 2, ["-ts", "2,1", "-ngl", "3", "-fa", "off"]),
    "sinks-moe": ("gpt-oss", 2, ["-ts", "1,1"]),
    "sinks-moe-experts-on-host": ("gpt-oss", 2, ["-ts", "1,1", "--cpu-moe", "-fa", "off"]),
    "shared-expert": ("glm4moe", 3, ["-ts", "1,1,2"]),
    "shared-expert-experts-on-host": ("glm4moe", 2, ["-ts", "1,1", "--cpu-moe", "-ub", "64"]),
    "mtp-layer": ("glm4moe-mtp", 2, ["-ts", "1,1"]),
    "mtp-layer-partial": ("glm4moe-mtp", 2, ["-ts", "1,1", "-ngl", "4", "-fa", "off"]),
    "temperature": ("mistral3", 2, ["-ts", "1,1", "-ub", "64"]),
    "gated-shared-expert": ("qwen2moe", 2, ["-ts", "1,1", "--cpu-moe"]),
    "mla": ("deepseek2", 2, ["-ts", "1,1", "-fa", "off"]),
    "mla-mtp-partial": ("deepseek3", 3, ["-ts", "1,1,1", "-ngl", "4", "-ub", "64"]),
    "mla-experts-on-host": ("deepseek3", 2, ["-ts", "1,1", "--cpu-moe"]),
    "mla-grouped-routing": ("deepseek3-grouped", 2, ["-ts", "2,1", "-np", "2"]),
}


@pytest.mark.parametrize("case", list(RPC_CASES))
def test_rpc_devices_compute_buffers_equal_the_log(
    llama_bins, models, rpc_endpoints, tmp_path, case
):
    arch, n, extra = RPC_CASES[case]
    eps = rpc_endpoints[:n]
    argv = ["--rpc", ",".join(eps), "-c", "2048", "-np", "1", *extra]
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
    logged, ours, exact = logged_and_planned(
        llama_bins, models[arch], argv, tmp_path / "s.log", devices
    )
    assert exact
    assert ours == logged
