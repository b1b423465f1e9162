"""The compute graph's architecture table: every architecture the pinned llama.cpp lists has
a recipe (its graph is modelled) or a reason its estimate is approximate, and the estimate
carries that reason to fit's text and JSON."""

from __future__ import annotations

from pathlib import Path

from support import gguf_factory as gf

from lltui.core.memory.arch_table import APPROXIMATE, RECIPES, approximate_reason

NAMES = Path(__file__).parent / "fixtures" / "llama_arch_names.txt"


def test_every_architecture_llama_cpp_lists_is_modelled_or_says_why():
    names = NAMES.read_text().split()
    assert len(names) > 150
    for name in names:
        assert (name in RECIPES) != (name in APPROXIMATE), name
        assert bool(approximate_reason(name)) == (name not in RECIPES)
    # nothing named that llama.cpp does not know
    assert set(RECIPES) | set(APPROXIMATE) == set(names)


def test_every_recipe_has_a_tiny_model_checked_against_the_real_server():
    """tests/test_fit_archs_real.py runs each of these; the families of
    tests/test_fit_compute_real.py are the rest."""
    archs = {spec().arch for spec in gf.ARCH_SPECS.values()}
    earlier = {
        "llama", "mistral3", "qwen2", "qwen3", "qwen3moe", "qwen2moe", "gemma3", "phi3",
        "gpt2", "starcoder", "gpt-oss", "glm4moe", "deepseek2",
    }  # fmt: skip
    assert set(RECIPES) <= archs | earlier


def test_an_unknown_architecture_is_approximate_with_its_name():
    assert "made-up" in approximate_reason("made-up")


def test_a_legacy_deepseek2_file_without_mla_is_approximate_not_an_mla_graph(tmp_path):
    """DeepSeek-V2 converted before MLA (one attn_kv_b, MHA cache): llama.cpp runs its
    non-MLA path, which the graph does not model; the estimate says so rather than sizing an
    MLA graph (a public Vulkan log: 1174 MiB logged, an MLA graph said 1920)."""
    from support import public_models as pm

    from lltui.core.cmdline.flags import parse_llama_args
    from lltui.core.fit.estimate import estimate
    from lltui.core.gguf.reader import read_gguf
    from lltui.core.memory.devices import DeviceSpec
    from lltui.core.memory.results import FitOptions

    rec = pm.BY_LOG["05-llama12728-vulkan-init-prefix-oom-2025.log"]
    model = read_gguf(str(pm.write(rec, tmp_path)))
    args = parse_llama_args(["-ngl", "999", "-fa", "off", "-c", "4096"])
    gpu = DeviceSpec("CUDA0", 200 * 2**30, 200 * 2**30)
    result = estimate(model, args, [gpu], FitOptions())
    assert not result.compute_exact
    assert "deepseek2" in (result.compute_note or "")
