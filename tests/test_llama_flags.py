"""llama-server's memory flags: its spellings, defaults, checks and one-line errors."""

from __future__ import annotations

import re

import pytest

from lltui.core.cmdline.flags import (
    FFN_EXPS_REGEX,
    KV_CACHE_TYPES,
    NGL_ALL,
    NGL_AUTO,
    NP_AUTO,
    parse_llama_args,
    pinned_arity,
)
from lltui.core.fit.llama_fit import fit_aborts


def test_defaults_are_llama_servers():
    s = parse_llama_args([])
    assert s.n_ctx == 0
    assert s.n_parallel == NP_AUTO
    assert s.n_parallel_resolved == 4
    assert s.kv_unified_resolved is True  # auto slots turn the unified cache on
    assert (s.n_batch, s.n_ubatch) == (2048, 512)
    assert (s.type_k, s.type_v, s.flash_attn) == ("f16", "f16", "auto")
    assert s.n_gpu_layers == NGL_AUTO
    assert s.split_mode == "layer"
    assert s.load_mode == "auto" and s.use_mmap
    assert s.kv_offload and s.repack and s.host_buffer and s.op_offload
    assert s.fit and s.fit_target_mib == (1024,)


@pytest.mark.parametrize(
    ("short", "long", "value", "attr", "expected"),
    [
        ("-c", "--ctx-size", "8192", "n_ctx", 8192),
        ("-np", "--parallel", "3", "n_parallel", 3),
        ("-ctk", "--cache-type-k", "q8_0", "type_k", "q8_0"),
        ("-ctv", "--cache-type-v", "q4_0", "type_v", "q4_0"),
        ("-b", "--batch-size", "1024", "n_batch", 1024),
        ("-ub", "--ubatch-size", "256", "n_ubatch", 256),
        ("-sm", "--split-mode", "none", "split_mode", "none"),
        ("-mg", "--main-gpu", "1", "main_gpu", 1),
        ("-lm", "--load-mode", "none", "load_mode", "none"),
    ],
)
def test_short_and_long_spellings_agree(short, long, value, attr, expected):
    assert getattr(parse_llama_args([short, value]), attr) == expected
    assert getattr(parse_llama_args([long, value]), attr) == expected
    # llama.cpp accepts underscores in long flags
    assert getattr(
        parse_llama_args([long.replace("-", "_").replace("__", "--", 1), value]), attr
    ) == (expected)


def test_flash_attention_values():
    for value, mode in (("on", "on"), ("1", "on"), ("enabled", "on"), ("off", "off"), ("0", "off")):
        assert parse_llama_args(["-fa", value]).flash_attn == mode
    assert parse_llama_args(["-fa", "auto"]).flash_attn == "auto"
    with pytest.raises(ValueError, match="-fa"):
        parse_llama_args(["-fa", "maybe"])


def test_gpu_layers_accepts_auto_all_and_numbers():
    assert parse_llama_args(["-ngl", "auto"]).n_gpu_layers == NGL_AUTO
    assert parse_llama_args(["-ngl", "all"]).n_gpu_layers == NGL_ALL
    assert parse_llama_args(["--n-gpu-layers", "99"]).n_gpu_layers == 99
    assert parse_llama_args(["-ngl", "7"]).n_gpu_layers == 7


def test_kv_unified_follows_slots():
    assert parse_llama_args(["-np", "2"]).kv_unified_resolved is False
    assert parse_llama_args(["-np", "2", "-kvu"]).kv_unified_resolved is True
    # with auto slots llama-server turns it on whatever -no-kvu said
    assert parse_llama_args(["-no-kvu"]).kv_unified_resolved is True


def test_tensor_split_on_comma_and_slash():
    assert parse_llama_args(["-ts", "3,1"]).tensor_split == (3.0, 1.0)
    assert parse_llama_args(["-ts", "1/2/1"]).tensor_split == (1.0, 2.0, 1.0)
    with pytest.raises(ValueError, match="-ts"):
        parse_llama_args(["-ts", "3,x"])
    with pytest.raises(ValueError, match="not negative"):
        parse_llama_args(["-ts", "-1,1"])


def test_overrides_keep_their_order_and_expand_moe_flags():
    s = parse_llama_args(["-ot", r"blk\.1\.=CPU,ffn_up=CUDA1", "--n-cpu-moe", "2", "--cpu-moe"])
    pats = [(o.pattern, o.buft) for o in s.overrides]
    assert pats[0] == (r"blk\.1\.", "CPU")
    assert pats[1] == ("ffn_up", "CUDA1")
    # --n-cpu-moe N: one pattern per layer 0..N-1, as llama.cpp builds them
    assert re.search(pats[2][0], "blk.0.ffn_up_exps.weight")
    assert re.search(pats[3][0], "blk.1.ffn_gate_exps.weight")
    assert not re.search(pats[3][0], "blk.11.ffn_gate_exps.weight")
    assert pats[4] == (FFN_EXPS_REGEX, "CPU")
    assert fit_aborts(s) == "-ot, --cpu-moe or --n-cpu-moe is set"  # a placement of the user's


def test_switches():
    s = parse_llama_args(["-nkvo", "--swa-full", "-nr", "--no-host", "--no-op-offload"])
    assert not s.kv_offload and s.swa_full and not s.repack
    assert not s.host_buffer and not s.op_offload
    assert parse_llama_args(["-nkvo", "-kvo"]).kv_offload


def test_rpc_servers_accumulate_and_are_checked():
    s = parse_llama_args(["--rpc", "10.0.0.1:50052,10.0.0.2:50052", "--rpc", "h:1"])
    assert s.rpc == ("10.0.0.1:50052", "10.0.0.2:50052", "h:1")
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_llama_args(["--rpc", "nohost"])


def test_other_llama_server_flags_are_accepted_and_ignored():
    s = parse_llama_args(
        ["--host", "0.0.0.0", "--port", "8080", "--metrics", "-lv", "4", "--jinja", "-c", "512"]
    )
    assert s.n_ctx == 512
    assert set(s.ignored) == {"--host", "--port", "--metrics", "-lv", "--jinja"}
    # their values are skipped, not taken for flags
    assert parse_llama_args(["--alias", "-c"]).n_ctx == 0


def test_memory_args_keep_what_changes_memory_as_given():
    s = parse_llama_args(["--port", "1", "-c", "4096", "--jinja", "-ngl", "all"])
    assert s.memory_args == ("-c", "4096", "-ngl", "all")


def test_unknown_and_malformed_flags_are_one_line_errors():
    cases = {
        ("--no-mmap",): "not a llama-server flag",  # removed from this llama.cpp
        ("--ctx-size=4096",): "next argument",
        ("-c",): "expected a value",
        ("-c", "lots"): "whole number",
        ("-np", "0"): "-np",
        ("-ctk", "q4_K"): "unsupported cache type",
        ("-sm", "rows"): "invalid value",
        ("-lm", "direct"): "invalid value",
        ("-ot", "nobuffer"): "pattern",
        ("-ot", "(=CPU"): "bad pattern",
        ("model.gguf",): "unexpected argument",
    }
    for argv, needle in cases.items():
        with pytest.raises(ValueError) as info:
            parse_llama_args(list(argv))
        message = str(info.value)
        assert needle in message
        assert "\n" not in message


def test_kv_cache_types_are_the_ones_llama_server_allows():
    for t in KV_CACHE_TYPES:
        assert parse_llama_args(["-ctk", t]).type_k == t
    assert "q4_K" not in KV_CACHE_TYPES


def test_flag_arity():
    assert pinned_arity("-c") == 1
    assert pinned_arity("--metrics") == 0
    assert pinned_arity("--control-vector-layer-range") == 2
    assert pinned_arity("--no_kv_offload") == 0
    assert pinned_arity("--nope") is None


def test_fit_and_draft_settings_are_kept():
    s = parse_llama_args(["--fit", "off", "-fitt", "512,2048", "-fitc", "8192", "-md", "d.gguf"])
    assert not s.fit and s.fit_target_mib == (512, 2048) and s.fit_ctx == 8192
    assert s.draft_model == "d.gguf"
    with pytest.raises(ValueError, match="--fit"):
        parse_llama_args(["--fit", "sometimes"])
