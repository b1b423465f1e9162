"""lltui's own options on the command lines that also take llama-server's flags: one table,
one splitter, the help written from the table, and a mistyped option of lltui's named as
lltui's ("did you mean --gpus?"), not blamed on llama-server."""

from __future__ import annotations

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.commands.own_options import OWN_OPTIONS, options_of, split_own


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("own") / "tiny.gguf"
    gf.write_model(path, gf.llama_spec())
    return str(path)


@pytest.mark.parametrize(
    ("verb", "typed", "meant"),
    [
        ("fit", "--gpu", "--gpus"),
        ("fit", "--jsn", "--json"),
        ("quant", "--gpu", "--gpus"),
        ("quant", "--marign", "--margin"),
        ("bench", "--budgett", "--budget"),
        ("launch", "--jsn", "--json"),
        ("launch", "--dry-rnu", "--dry-run"),
        ("launch", "--gpu", "--gpus"),
    ],
)
def test_a_mistyped_option_of_lltui_is_named_as_lltuis(model, capsys, verb, typed, meant):
    extra = ["--dry-run"] if verb == "launch" and typed != "--dry-rnu" else []
    assert main([verb, model, typed, "2x4090", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert f"did you mean {meant}?" in err, err
    assert "llama-server has no" not in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("verb", ["fit", "quant"])
def test_a_mistyped_llama_server_flag_gets_the_nearest_flag(model, capsys, verb):
    assert main([verb, model, "--ctx-sise", "4096"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("llama-server has no --ctx-sise flag; did you mean --ctx-size?"), err


def test_nothing_near_is_suggested_and_an_option_of_another_command_is_named(model, capsys):
    assert main(["fit", model, "--zzzzzzzz"]) == 2
    assert capsys.readouterr().err.strip().endswith("llama-server has no --zzzzzzzz flag")
    assert main(["quant", model, "--oracle"]) == 2
    assert "--oracle is an option of lltui fit, not of lltui quant" in capsys.readouterr().err
    assert main(["fit", model, "--json=yes"]) == 2
    assert "--json takes no value" in capsys.readouterr().err


def test_options_take_their_value_either_way_and_the_last_counts(model):
    split = split_own([model, "--gpus=24GiB", "-c", "4096", "--gpus", "T4,T4", "--json"], "fit")
    assert split.last("--gpus") == "T4,T4" and split.switches == {"--json"}
    assert split.single() == (model, ["-c", "4096"], None)
    # fit's --host is the CPU (it has "="); llama-server's --host ADDRESS stays its flag
    split = split_own([model, "--host", "127.0.0.1", "--host", "cores=8"], "fit")
    assert split.last("--host") == "cores=8" and split.words == [model, "--host", "127.0.0.1"]
    # launch leaves what its session reads among the words, and flags the build may have
    words = [model, "--profile", "p", "--brand-new-flag", "--pin", "a"]
    split = split_own(words, "launch", strict=False)
    assert split.words == [model, "--profile", "p", "--brand-new-flag"]
    assert split.unknown == ["--brand-new-flag"] and split.all("--pin") == ("a",)


@pytest.mark.parametrize("verb", ["fit", "quant", "bench", "launch"])
def test_the_help_lists_every_option_of_the_table(capsys, verb):
    assert main([verb, "--help"]) == 0
    text = capsys.readouterr().out
    for option in options_of(verb):
        label = option.name + (f" {option.metavar}" if option.metavar else "")
        assert f"  {label}" in text, label
    assert {o.name for o in OWN_OPTIONS} >= {"--gpus", "--json", "--dry-run", "--budget"}


@pytest.mark.parametrize("verb", ["fit", "quant"])
def test_best_without_a_goal_lists_the_goals(model, capsys, verb):
    assert main([verb, model, "--best"]) == 2
    err = capsys.readouterr().err.strip()
    goals = "context, speed, gpu-only, decode"  # decode: the fastest, speed's other word
    if verb == "fit":  # and the planner's
        goals += ", prompt, joules, fewest-gpus"
    assert err.endswith(f"--best expects a value (GOAL): one of {goals}"), err


@pytest.mark.parametrize(
    ("words", "name"),
    [
        (["fit", "MODEL", "--source", "sim:8xh100-sxm"], "--source"),
        (["quant", "MODEL", "--config=x.toml"], "--config"),
        (["launch", "MODEL", "--readonly", "--dry-run"], "--readonly"),
        (["gpus", "--interval", "2"], "--interval"),
    ],
)
def test_an_option_of_lltui_itself_after_the_command_says_where_it_goes(model, capsys, words, name):
    """`lltui fit M --source S` was 'llama-server has no --source flag', though lltui takes
    it (before the command); `gpus --interval 2` was 'unrecognized arguments'."""
    words = [model if w == "MODEL" else w for w in words]
    assert main(words) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"lltui: {words[0]}: {name} is an option of lltui itself: give it before the command "
        f"(lltui {name} ... {words[0]} ...)"
    ), err
    # where the command takes it too, it stays the command's
    assert main(["gpus", "--source", "sim:4xl4"]) == 0


@pytest.mark.parametrize(
    "words", [["--foo", "gpus"], ["--source", "sim:4xl4", "--foo", "gpus"], ["--foo=1", "gpus"]]
)
def test_an_option_lltui_lacks_before_the_command_is_named(capsys, words):
    """argparse would take the word after an unknown option for the command and say that."""
    assert main(words) == 2
    assert capsys.readouterr().err.strip() == (
        f"lltui: unknown option {words[-2]} (see lltui --help)"
    )
