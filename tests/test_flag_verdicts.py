"""fit, launch and the API against the pinned llama-server's recorded verdict on each
command line in tests/support/flag_cases.py (tests/test_flag_judge.py asks the real binary)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.flag_cases import CASES, Case
from support.flag_checks import check_api, check_fit, check_launch, check_parser, names_the_flag

from lltui.core.cmdline.args import spell
from lltui.core.cmdline.flag_table import FLAGS, pinned_arity


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("flags") / "m.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    return path


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_fit_launch_and_the_api_agree_with_llama_server(case: Case, model: Path, capsys):
    answers = {
        "parser": check_parser(case),
        "launch": check_launch(case, str(model)),
        "fit": check_fit(case, model, capsys),
    }
    api = check_api(case)
    if api is not False:
        answers["api"] = api
    for where, error in answers.items():
        if case.lltui == "ok":
            assert error is None, f"{where} refused {case.id}: {error}"
        else:
            assert error is not None, f"{where} accepted {case.id}"
            assert "\n" not in error
            if where != "api":
                assert names_the_flag(case, error), f"{where}: {error!r} does not name the flag"


def test_the_cases_cover_every_memory_flag():
    spelled = {a.replace("_", "-").split("=")[0] for c in CASES for a in c.argv[:1]}
    for f in FLAGS:
        # llama-server connects to --rpc servers while reading its flags: see test_fit_real;
        # the files a run loads besides the model: see test_parts and test_parts_real (-hfd:
        # test_remote)
        files = ("draft_model", "draft_hf_repo", "mmproj", "mmproj_url", "lora", "lora_scaled")
        if f.memory and f.key != "rpc" and f.key not in files:
            assert set(f.spellings + f.neg) & spelled, f.key


def test_every_table_spelling_is_one_the_pinned_server_has():
    for f in FLAGS:
        for s in f.spellings + f.neg:
            assert pinned_arity(s) == f.arity, s


@pytest.mark.parametrize(
    ("key", "value", "argv"),
    [
        ("n_ctx", 4096, ("-c", "4096")),
        ("n_gpu_layers", -2, ("-ngl", "all")),
        ("n_gpu_layers", 12, ("-ngl", "12")),
        ("tensor_split", (3, 1), ("-ts", "3,1")),
        ("tensor_split", (0.1234567, 0.8765433), ("-ts", "0.1234567,0.8765433")),
        ("kv_unified", False, ("-no-kvu",)),
        ("kv_offload", False, ("-nkvo",)),
        ("swa_full", False, ()),
        ("devices", (), ("-dev", "none")),
        ("flash_attn", "on", ("-fa", "on")),
    ],
)
def test_spell_writes_the_table_spelling(key, value, argv):
    assert spell(key, value) == argv


@pytest.mark.parametrize(
    ("key", "value"),
    [("tensor_split", (float("nan"), 1.0)), ("tensor_split", (1e-320,)), ("n_ctx", -1)],
)
def test_spell_refuses_what_means_nothing(key, value):
    with pytest.raises(ValueError):
        spell(key, value)
