"""fit --best: ranked command lines that fit, searched over placement, KV type and ubatch."""

import json
from dataclasses import replace

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.cmdline.args import spell
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.best import best_configs
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.units import GIB

DENSE = gf.llama_8b_spec(n_vocab=32000)
MOE = gf.qwen3moe_30b_a3b_spec(n_vocab=32000, n_ctx_train=32768)
OPTS = FitOptions(host_free_bytes=256 * GIB)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    d = tmp_path_factory.mktemp("best")
    return {
        "dense": gf.write_sparse(d / "dense.gguf", DENSE, "F16"),
        "moe": gf.write_sparse(d / "moe.gguf", MOE, "Q8_0"),
    }


def _fits(model, argv, gpus):
    res = estimate(model, parse_llama_args(argv), parse_gpus_spec(gpus).devices, OPTS)
    return res.fits


def test_moe_too_big_puts_the_fewest_experts_on_the_cpu(paths):
    model = read_gguf(paths["moe"])
    settings = parse_llama_args(["-c", "8192"])
    devs = parse_gpus_spec("16GiB").devices
    best = best_configs(model, settings, devs, OPTS, "speed")
    assert best
    for c in best:
        assert _fits(model, ["-c", "8192", *c.flags], "16GiB")
    top = best[0]
    ncmoe = spell("n_cpu_moe", 1)[0]  # lltui writes the flag table's spelling
    assert ncmoe in top.flags
    k = int(top.flags[top.flags.index(ncmoe) + 1])
    fewer = [*top.flags]
    fewer[fewer.index(ncmoe) + 1] = str(k - 1)
    assert not _fits(model, ["-c", "8192", *fewer], "16GiB")  # the fewest that fit
    assert "CPU" in top.gives_up


def test_a_given_fa_off_is_kept_in_every_line(paths):
    """--best context's quantized-cache lines added -fa on over the -fa off given."""
    model = read_gguf(paths["dense"])
    settings = parse_llama_args(["-c", "32768", "-fa", "off"])
    best = best_configs(model, settings, parse_gpus_spec("12GiB").devices, OPTS, "context")
    assert best
    assert all("-fa" not in c.flags and "-ctk" not in c.flags for c in best), best


def test_dense_too_big_keeps_the_most_layers_on_the_gpus(paths):
    model = read_gguf(paths["dense"])
    best = best_configs(
        model, parse_llama_args(["-c", "4096"]), parse_gpus_spec("12GiB").devices, OPTS, "speed"
    )
    assert best and all(_fits(model, ["-c", "4096", *c.flags], "12GiB") for c in best)
    assert any(f == "-ngl" for f in best[0].flags)


def test_gpu_only_never_leaves_weights_on_the_cpu(paths):
    model = read_gguf(paths["moe"])
    best = best_configs(
        model, parse_llama_args([]), parse_gpus_spec("16GiB").devices, OPTS, "gpu-only"
    )
    assert all(spell("n_cpu_moe", 1)[0] not in c.flags for c in best)
    big = best_configs(
        model, parse_llama_args([]), parse_gpus_spec("80GiB").devices, OPTS, "context"
    )
    assert big and big[0].gives_up == "nothing" and big[0].max_ctx == 32768


def test_cli_best_text_json_and_bad_goal(paths, capsys):
    assert (
        main(
            [
                "fit",
                str(paths["moe"]),
                "--gpus",
                "16GiB",
                "--host-free",
                "256GiB",
                "--best",
                "context",
                "--json",
            ]
        )
        == 0
    )
    best = json.loads(capsys.readouterr().out)["best"]
    assert best and {"flags", "max_ctx", "decode_tps", "prefill_tps", "gives_up"} <= set(best[0])
    assert main(["fit", str(paths["moe"]), "--gpus", "16GiB", "--best", "context"]) == 0
    assert "best for context" in capsys.readouterr().out
    # the fastest command is the planner's (it tries -sm tensor, GPU sets and -ub too)
    fast = ["fit", str(paths["moe"]), "--gpus", "16GiB", "--host-free", "256GiB", "--json"]
    assert main([*fast, "--best", "speed"]) == 0
    speed = json.loads(capsys.readouterr().out)
    assert main([*fast, "--best", "decode"]) == 0
    assert (
        speed["planner"] == json.loads(capsys.readouterr().out)["planner"] and "best" not in speed
    )
    assert main(["fit", str(paths["moe"]), "--best", "fastest"]) == 2
    assert "--best" in capsys.readouterr().err


def test_split_sized_to_each_gpus_room_fits_more_context(paths):
    """On 20 + 16 GiB the default split (by free memory) fills the GPU with the output layer
    first; layers sized to what each GPU has left after its fixed costs fit more context."""
    model = read_gguf(paths["moe"])
    best = best_configs(
        model, parse_llama_args([]), parse_gpus_spec("20GiB,16GiB").devices, OPTS, "context", 40
    )
    with_ts = [c for c in best if "-ts" in c.flags]
    assert with_ts and all(c.gains for c in with_ts)
    assert all("-ts" in c.gains and "default split" in c.gains for c in with_ts)
    for c in with_ts:
        assert _fits(model, c.flags, "20GiB,16GiB")
        # the same line without -ts: less context (or it does not fit at this context)
        i = c.flags.index("-ts")
        default = [*c.flags[:i], *c.flags[i + 2 :]]
        assert not _fits(model, default, "20GiB,16GiB")
    # the trained context with nothing given up needs the split
    assert "-ts" in best[0].flags and best[0].gives_up == "nothing"
    assert best[0].max_ctx == 32768


def test_split_proposed_only_where_it_changes_something(paths):
    model = read_gguf(paths["dense"])
    for gpus in ("2x4090", "24GiB"):  # room to spare; a single GPU
        best = best_configs(model, parse_llama_args([]), parse_gpus_spec(gpus).devices, OPTS)
        assert best and not any("-ts" in c.flags for c in best)
    # a split given is kept as given
    best = best_configs(
        model,
        parse_llama_args(["-ts", "1,1"]),
        parse_gpus_spec("20GiB,16GiB").devices,
        OPTS,
    )
    assert not any("-ts" in c.flags for c in best)


def test_cli_shows_what_the_split_gives(paths, capsys):
    argv = ["fit", str(paths["moe"]), "--gpus", "20GiB,16GiB", "--host-free", "256GiB"]
    assert main([*argv, "--best", "context"]) == 0
    out = capsys.readouterr().out
    assert "gives: -ts " in out
    assert main([*argv, "--best", "context", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert best[0]["gains"] and "-ts" in best[0]["flags"]


def test_a_split_that_leaves_a_gpu_empty_says_so(tmp_path, capsys):
    """-ts 0,5 on two T4s was said to give 'each GPU the layers its memory has room for'."""
    from lltui.sources.models.demo import write_demo

    model = tmp_path / "demo.gguf"
    write_demo(model)
    argv = ["fit", str(model), "--gpus", "T4,T4", "-c", "4096", "--best", "context", "--json"]
    assert main(argv) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    emptying = [b for b in best if "-ts" in b["flags"] and b.get("gains")]
    emptying = [b for b in emptying if "0" in b["flags"][b["flags"].index("-ts") + 1].split(",")]
    assert emptying, best
    for b in emptying:
        assert "puts every layer on one GPU" in b["gains"]
        assert "room for" not in b["gains"]


def test_a_quantized_kv_cache_that_buys_nothing_is_not_listed(paths):
    """The 8B fits two 24 GiB GPUs whole at its trained context: q8_0 and q4_0 caches were
    listed below the f16 line at the same context and speeds, giving up quality for
    nothing."""
    model = read_gguf(paths["dense"])
    devs = parse_gpus_spec("24GiB,24GiB").devices
    got = best_configs(model, parse_llama_args(["-c", "4096"]), devs, OPTS, goal="context")
    assert got and got[0].kv == "f16"
    assert all(c.kv == "f16" for c in got), [(c.flags, c.kv) for c in got]
    # where a cache buys something (here more layers on the GPUs, faster), it is offered
    small = parse_gpus_spec("9GiB,9GiB").devices
    more = best_configs(model, parse_llama_args(["-c", "32768"]), small, OPTS, goal="context")
    assert any(c.kv != "f16" for c in more), [(c.flags, c.kv) for c in more]


def test_a_smaller_ubatch_gives_up_prompts_only_where_they_run_slower(paths):
    """-ub 256 said "gives up: prompt batches of 256" where its prompts ran faster (two
    ubatches let a layer split's GPUs overlap)."""
    from lltui.core.fit.best import _UB_WHY

    model = read_gguf(paths["dense"])
    for gpus in ("24GiB,24GiB", "10GiB,10GiB"):
        got = best_configs(
            model, parse_llama_args(["-c", "8192"]), parse_gpus_spec(gpus).devices, OPTS
        )
        plain = {c.change.tensor_split: c for c in got if c.change.n_ubatch is None}
        for c in got:
            base = plain.get(c.change.tensor_split)
            if c.change.n_ubatch is None or base is None or c.kv != base.kv:
                continue
            said = _UB_WHY in c.gives_up
            assert said == (c.prefill_tps < base.prefill_tps), (c.flags, c.gives_up)


def test_floors_answer_as_the_whole_estimate_with_fewer_estimates(paths):
    """gpus_fit, host_fits and all_fit say no from an estimate without compute buffers, or
    with the prompt batch's alone, where that does not fit; they answer as the whole
    estimate everywhere, and estimate fewer settings whole."""
    from lltui.core.fit.best import Change, make_space

    model = read_gguf(paths["moe"])
    devs = parse_gpus_spec("16GiB,16GiB").devices
    opts = FitOptions(host_free_bytes=16 * GIB)

    def space():
        made = make_space(model, parse_llama_args(["-c", "8192"]), devs, opts)
        assert made
        return made[0]

    whole = space()
    points = [
        replace(whole.placement(Change(kv=kv), x), n_ctx=u * whole.unit)
        for kv in ("f16", "q8_0")
        for x in (0, 8, 16, 24, 32, 48)
        for u in (1, 16, whole.cap)
    ]
    expected = [whole.fits(c) for c in points]
    assert {(False, True), (True, False), (True, True)} <= set(expected)
    for i, ask in enumerate(("gpus_fit", "host_fits", "all_fit")):
        lazy = space()
        answers = [getattr(lazy, ask)(c) for c in points]
        assert answers == [all(e) if i == 2 else e[i] for e in expected], ask
        assert len(lazy._results) < len(whole._results) - 3, ask
