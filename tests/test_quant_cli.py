"""lltui quant: every quant's size and fit, from any GGUF of the model."""

import json

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.gguf.reader import read_gguf
from lltui.core.quant.sizes import quant_sizes


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("quant") / "llama-f16.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    return path


def test_json_rows_match_the_quantize_rules_and_carry_fit(model, capsys):
    assert main(["quant", str(model), "-c", "2048", "--gpus", "24GiB,24GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = {r["type"]: r for r in data["rows"]}
    skipped = {s["type"] for s in data["skipped"]}
    assert skipped == {"TQ1_0", "TQ2_0", "MXFP4_MOE"}  # a dense model, not ternary
    expected = {
        r.name: r.file_bytes
        for r in quant_sizes(read_gguf(model))
        if not r.error and r.name not in skipped
    }
    assert {k: rows[k]["file_bytes"] for k in expected} == expected
    q4 = rows["Q4_K_M"]
    assert {"type", "file_bytes", "weights_bytes", "fits", "max_ctx", "devices"} <= set(q4)
    assert q4["fits"] is True and q4["max_ctx"] >= 2048
    assert [d["name"] for d in q4["devices"]][:2] == ["CUDA0", "CUDA1"]
    sizes = [r["file_bytes"] for r in data["rows"] if r["file_bytes"]]
    assert sizes == sorted(sizes)
    # the devices offered, as fit --json names them (it was one string of words)
    assert data["devices"] == [
        {"name": f"CUDA{i}", "kind": "cuda", "total_bytes": 24 << 30, "free_bytes": 24 << 30}
        for i in range(2)
    ]


def test_json_model_is_the_input_file(model, capsys):
    assert main(["quant", str(model), "--gpus", "24GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["path"] == str(model)
    assert data["model"]["file_type"] == "F16"
    q4 = next(r for r in data["rows"] if r["type"] == "Q4_K_M")
    assert q4["speed"]["decode_tps"] > 0 and q4["speed"]["bound"] == "memory"


def test_moe_models_get_mxfp4_moe_and_ternary_types_stay_out(tmp_path, capsys):
    path = tmp_path / "moe.gguf"
    gf.write_model(path, gf.SPECS["qwen3moe"](), "F16")
    assert main(["quant", str(path), "--gpus", "24GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    types = {r["type"] for r in data["rows"]}
    assert "MXFP4_MOE" in types and not types & {"TQ1_0", "TQ2_0"}


def test_text_marks_imatrix_types_and_explains_columns(model, capsys):
    assert main(["quant", str(model), "--gpus", "24GiB"]) == 0
    out = capsys.readouterr().out
    assert "IQ2_XS*" in out and "Q4_K_M*" not in out
    assert "needs an importance matrix" in out and "t/s" in out
    assert "not listed: TQ1_0" in out
    assert main(["quant", "--help"]) == 0
    help_text = capsys.readouterr().out
    for column in ("type", "file", "bpw", "fits", "max ctx", "t/s", "per device"):
        assert f"  {column} " in help_text


def test_the_legend_explains_a_mark_only_where_a_row_shows_it(model, capsys):
    """The footer always explained 'fits ?', though no row said '?' unless a device's free
    memory was unknown (an rpc-server that does not answer)."""
    assert main(["quant", str(model), "--gpus", "24GiB"]) == 0
    out = capsys.readouterr().out
    assert "fits ?" not in out and "per device: GiB allocated" in out
    assert main(["quant", str(model), "--gpus", "rpc:127.0.0.1:1"]) == 0
    out = capsys.readouterr().out
    assert " ? " in out and "; fits ?: on a device whose free memory is not known" in out


def test_a_device_too_small_fits_nothing(model, capsys):
    assert (
        main(["quant", str(model), "--gpus", "1MiB", "-ngl", "99", "--margin", "0", "--json"]) == 0
    )
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert not any(r["fits"] for r in rows)


def test_text_marks_the_most_bits_that_fit(model, capsys):
    assert main(["quant", str(model), "--gpus", "sim:kaggle-2xt4"]) == 0
    out = capsys.readouterr().out
    assert "Q4_K_M" in out and "most bits that fit" in out


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["quant"], "no model"),
        (["quant", "/no/such.gguf"], "No such file"),
        (["quant", "MODEL", "--gpus", "banana"], "--gpus"),
        (["quant", "MODEL", "--frobnicate"], "frobnicate"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(model, capsys, argv, needle, tmp_path):
    argv = [str(model) if a == "MODEL" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_a_corrupt_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert main(["quant", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert str(bad) in err and len(err.splitlines()) == 1


def test_a_type_above_the_sources_precision_is_marked_and_never_recommended(model, capsys):
    """``model`` is F16: F32 of it holds nothing more, BF16 no more; neither is chosen."""
    assert main(["quant", str(model), "--gpus", "24GiB", "--json"]) == 0
    rows = {r["type"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["F32"]["above_source"] == "above the source's precision, F16"
    assert rows["BF16"]["above_source"] == "no more precise than the source's F16"
    assert rows["F16"]["above_source"] is None and rows["Q8_0"]["above_source"] is None
    assert main(["quant", str(model), "--gpus", "24GiB"]) == 0
    lines = capsys.readouterr().out.splitlines()
    [best] = [line for line in lines if line.endswith("<- most bits that fit")]
    assert best.startswith("F16 ")
    [f32] = [line for line in lines if line.startswith("F32 ")]
    assert f32.endswith("(adds nothing: above the source's precision, F16)")
    assert main(["quant", str(model), "--gpus", "24GiB", "--best", "context", "--json"]) == 0
    ranked = [q["quant"] for q in json.loads(capsys.readouterr().out)["quants"] if q["fits"]]
    assert ranked[-2:] == ["BF16", "F32"] and ranked.index("Q6_K") < ranked.index("F32")


def test_a_type_above_a_quantized_sources_own_quant_is_marked_and_never_recommended(
    tmp_path, capsys
):
    """Requantizing Q4_0 weights to more bits restores nothing of what Q4_0 dropped (and
    llama-quantize warns it can severely reduce quality): Q8_0 and F16 of a Q4_0 file were
    recommended as the most bits that fit and ranked first by --best."""
    path = tmp_path / "q4.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "Q4_0")
    assert main(["quant", str(path), "--gpus", "24GiB", "--json"]) == 0
    rows = {r["type"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    above = {t for t, r in rows.items() if r["above_source"]}
    assert {"Q4_1", "Q5_K_M", "Q6_K", "Q8_0", "F16", "BF16", "F32"} <= above
    assert rows["Q8_0"]["above_source"] == "above the source's precision, Q4_0"
    assert rows["Q4_0"]["above_source"] is None and rows["Q3_K_M"]["above_source"] is None
    assert main(["quant", str(path), "--gpus", "24GiB"]) == 0
    lines = capsys.readouterr().out.splitlines()
    [best] = [line for line in lines if line.endswith("<- most bits that fit")]
    assert best.startswith("Q4_0 ")
    [q8] = [line for line in lines if line.startswith("Q8_0 ")]
    assert q8.endswith("(adds nothing: above the source's precision, Q4_0)")
    assert main(["quant", str(path), "--gpus", "24GiB", "--best", "context", "--json"]) == 0
    ranked = [q["quant"] for q in json.loads(capsys.readouterr().out)["quants"] if q["fits"]]
    assert ranked[0].rstrip("*") not in above
    assert {q.rstrip("*") for q in ranked[-len(above) :]} == above


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["-ctv", "q4_0", "-fa", "off"], "quantized V cache (-ctv) requires flash attention"),
        (["-dev", "CUDA5"], "invalid device: CUDA5"),
        (["--mmproj", "MODEL"], "not a multimodal projector"),
    ],
)
def test_settings_llama_cpp_refuses_are_one_line_and_exit_2(model, capsys, flags, needle):
    """Refused for every type alike, as fit refuses them (the table, and --best's list, were
    a row of the same error per type, exit 0)."""
    flags = [str(model) if f == "MODEL" else f for f in flags]
    for json_flag in ([], ["--json"], ["--best", "speed"], ["--best", "context", "--json"]):
        assert main(["quant", str(model), "--gpus", "24GiB", *flags, *json_flag]) == 2
        out = capsys.readouterr()
        err = out.err.strip().removeprefix("lltui: ")
        said = json.loads(out.out)["error"] if "--json" in json_flag else err
        assert said.startswith("quant: ") and needle in said and len(said.splitlines()) == 1


@pytest.mark.parametrize("verb", ["fit", "quant"])
def test_a_projector_or_adapter_given_as_the_model_says_what_it_is(tmp_path, capsys, verb):
    """It said 'clip.block_count is missing' (or llama's): the file is no model at all."""
    spec = gf.SPECS["llama"]()
    mmproj = gf.write_mmproj(tmp_path / "mmproj.gguf", spec.n_embd)
    lora = gf.write_lora(tmp_path / "lora.gguf", spec)
    for path, what in ((mmproj, "a multimodal projector"), (lora, "a LoRA adapter")):
        # quant --best listed it once a type, each row the error, exit 0
        for best in ([], ["--best", "context"]):
            assert main([verb, str(path), "--gpus", "24GiB", *best]) == 2
            err = capsys.readouterr().err.strip()
            assert f"{path}: {what}, not a model" in err and len(err.splitlines()) == 1


def test_the_estimates_warnings_are_said_as_fit_says_them(tmp_path, capsys):
    """An architecture llama.cpp does not know (llama-quantize and llama-server refuse it)
    and a context past the trained one: every type was 'fits yes' without a word."""
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(arch="foobar", n_ctx_train=4096), "F16")
    argv = ["quant", str(path), "--gpus", "24GiB", "-c", "8192"]
    assert main([*argv, "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert main(["fit", *argv[1:], "--json"]) == 0
    assert warnings == json.loads(capsys.readouterr().out)["warnings"]
    assert any("does not know the architecture 'foobar'" in w for w in warnings)
    assert any("past the 4096 the model was trained on" in w for w in warnings)
    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("warning: ")] == [
        f"warning: {w}" for w in warnings
    ]


@pytest.mark.parametrize("goal", ["speed", "context"])
def test_best_says_the_estimates_warnings_as_plain_quant_does(tmp_path, capsys, goal):
    """quant --best ranked a model llama.cpp does not know, at a context past the trained
    one, without a word (plain quant says both)."""
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(arch="foobar", n_ctx_train=4096), "F16")
    argv = ["quant", str(path), "--gpus", "24GiB", "-c", "8192"]
    assert main([*argv, "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert len(warnings) == 2
    assert main([*argv, "--best", goal, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == warnings
    assert main([*argv, "--best", goal]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line for line in out if line.startswith("warning: ")] == [
        f"warning: {w}" for w in warnings
    ]


def test_best_says_its_command_lines_are_added_to_the_flags_given(model, capsys):
    """Its lines leave out -fa on and -np 2 given here, as fit --best's do: said, as fit says it."""
    assert main(["quant", str(model), "--gpus", "24GiB", "--best", "speed", "-fa", "on"]) == 0
    out = capsys.readouterr().out
    assert "command line: what is added to the flags given" in out
    assert "-fa on" not in out.split("command line\n", 1)[1]


def test_best_takes_fits_words_for_the_fastest_decode(model, capsys):
    """fit --best decode and --best speed are one goal; quant --best decode was refused
    ('expected one of context, speed, gpu-only')."""
    argv = ["quant", str(model), "--gpus", "24GiB", "-c", "2048", "--json", "--best"]
    assert main([*argv, "speed"]) == 0
    speed = json.loads(capsys.readouterr().out)
    assert main([*argv, "decode"]) == 0
    decode = json.loads(capsys.readouterr().out)
    assert decode == speed and decode["goal"] == "speed"
    assert main(["quant", str(model), "--best"]) == 2
    assert "one of context, speed, gpu-only, decode" in capsys.readouterr().err
