"""``lltui quant hf:OWNER/REPO --best GOAL``: every quantization a repository offers, read by
ranged requests from the test hub (tests/support/hub_server.py), ranked by its best command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.hub_server import Hub, HubServer, Repo

from lltui.cli import main
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory.devices import parse_gpus_spec
from lltui.core.units import GIB
from lltui.sources.models import hf_hub

SPEC = gf.llama_8b_spec(n_vocab=32000, n_ctx_train=32768)
GPUS = "12GiB"
HOST = "64GiB"


@pytest.fixture(autouse=True)
def _hub_env(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_hub, "token", lambda: None)


@pytest.fixture(scope="module")
def quants(tmp_path_factory) -> dict[str, Path]:
    """One 8B model in three quantizations (real sizes, sparse files), one of them split."""
    d = tmp_path_factory.mktemp("quants")
    out = {}
    for wtype in ("F16", "Q8_0"):
        (out[wtype],) = gf.write_model(d / f"M-{wtype}.gguf", SPEC, wtype, sparse=True)
    parts = gf.write_model(d / "M-Q4_0.gguf", SPEC, "Q4_0", sparse=True, split_max_tensors=150)
    assert len(parts) == 2
    out["Q4_0-1"], out["Q4_0-2"] = parts
    cut = d / "cut.gguf"
    with out["Q8_0"].open("rb") as f:
        cut.write_bytes(f.read(4096))  # a header cut short
    out["cut"] = cut
    return out


@pytest.fixture
def hub(quants, monkeypatch):
    files = {
        "M-F16.gguf": quants["F16"],
        "M-Q8_0.gguf": quants["Q8_0"],
        "Q4_0/M-Q4_0-00001-of-00002.gguf": quants["Q4_0-1"],
        "Q4_0/M-Q4_0-00002-of-00002.gguf": quants["Q4_0-2"],
        "README.md": quants["cut"],
    }
    broken = dict(files, **{"M-Q2_K.gguf": quants["cut"]})
    h = Hub(repos={"acme/M-GGUF": Repo(files=files), "acme/Broken-GGUF": Repo(files=broken)})
    with HubServer(h) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        yield h


def _best(capsys, *argv: str) -> dict:
    assert main(["quant", *argv, "--gpus", GPUS, "--host-free", HOST, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _fits(model_path: Path, flags: list[str]) -> bool:
    model = read_gguf(model_path)
    opts = FitOptions(host_free_bytes=64 * GIB, search=False)
    return estimate(model, parse_llama_args(flags), parse_gpus_spec(GPUS).devices, opts).fits


def test_every_quant_of_a_repository_ranked_for_context(hub, quants, capsys):
    data = _best(capsys, "hf:acme/M-GGUF", "--best", "context")
    rows = data["quants"]
    assert {r["quant"] for r in rows} == {"F16", "Q8_0", "Q4_0"}
    assert data["goal"] == "context" and data["commit"]
    fitting = [r for r in rows if r["fits"]]
    ctxs = [r["max_ctx"] for r in fitting]
    assert ctxs == sorted(ctxs, reverse=True)  # the largest context first
    local = {"F16": quants["F16"], "Q8_0": quants["Q8_0"], "Q4_0": quants["Q4_0-1"]}
    for r in fitting:
        # the line names the file as llama-server's -hf does, and fits by the estimator
        assert r["flags"][:2] == ["-hf", f"acme/M-GGUF:{r['quant']}"]
        assert _fits(local[r["quant"]], r["flags"][2:])
        assert r["bytes"] > 0 and r["bits_per_weight"] > 0 and r["gives_up"]
    split = next(r for r in rows if r["quant"] == "Q4_0")
    assert split["file"] == "Q4_0/M-Q4_0-00001-of-00002.gguf"  # both parts read
    f16 = next(r for r in rows if r["quant"] == "F16")
    assert not f16["fits"] or "CPU" in f16["gives_up"]  # 15 GiB on 12 GiB: layers leave


def test_speed_and_gpu_only_goals_and_text(hub, capsys):
    rows = _best(capsys, "hf:acme/M-GGUF", "-c", "8192", "--best", "speed")["quants"]
    tps = [r["decode_tps"] for r in rows if r["fits"]]
    assert tps == sorted(tps, reverse=True)
    assert all(r["flags"][-2:] == ["-c", "8192"] for r in rows if r["fits"])
    rows = _best(capsys, "hf:acme/M-GGUF", "--best", "gpu-only")["quants"]
    assert all("-ngl" not in r["flags"] or "all" in r["flags"] for r in rows if r["fits"])
    assert main(["quant", "hf:acme/M-GGUF", "--gpus", GPUS, "--best", "context"]) == 0
    out = capsys.readouterr().out
    assert "quantizations in the repository, best for context" in out
    assert "-hf acme/M-GGUF:Q8_0" in out and "gives up:" in out


def test_an_unreadable_quant_is_one_row_the_rest_ranked(hub, capsys):
    rows = _best(capsys, "hf:acme/Broken-GGUF", "--best", "context")["quants"]
    bad = next(r for r in rows if r["quant"] == "Q2_K")
    assert bad["error"] and "\n" not in bad["error"] and not bad["fits"]
    assert rows[-1] is bad and any(r["fits"] for r in rows)


def test_bad_goal_dead_hub_and_missing_repo_are_one_line(hub, capsys, monkeypatch):
    assert main(["quant", "hf:acme/M-GGUF", "--best", "fastest"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--best" in err
    assert main(["quant", "hf:acme/Nope-GGUF", "--gpus", GPUS, "--best", "context"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert main(["quant", "hf:acme/Other-GGUF", "--gpus", GPUS, "--best", "context"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1


def test_a_local_model_ranks_the_types_llama_quantize_makes(tmp_path, capsys):
    path = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec(), "F16")
    data = _best(capsys, str(path), "--best", "context")
    names = [r["quant"] for r in data["quants"]]
    assert "Q4_K_M" in names and "Q8_0" in names
    fitting = [r for r in data["quants"] if r["fits"]]
    assert fitting and fitting[0]["file"] is None and fitting[0]["flags"][0] == "-ngl"


def test_a_draft_model_is_counted_in_every_quants_room(tmp_path, capsys):
    path = gf.write_sparse(tmp_path / "m.gguf", SPEC, "F16")
    draft = gf.write_sparse(tmp_path / "d.gguf", gf.llama_spec(n_vocab=32000), "F16")
    # nothing on the CPU: the room the draft takes shows as context (with offload allowed,
    # the search would put layers on the CPU instead and reach the trained context anyway)
    alone = {r["quant"]: r for r in _best(capsys, str(path), "--best", "gpu-only")["quants"]}
    both = _best(capsys, str(path), "-md", str(draft), "--best", "gpu-only")["quants"]
    for r in both:
        if r["fits"] and alone[r["quant"]]["fits"]:
            assert r["max_ctx"] <= alone[r["quant"]]["max_ctx"]
    assert any(
        r["fits"] and r["max_ctx"] < alone[r["quant"]]["max_ctx"] for r in both
    )  # the draft's weights and context take room


def test_the_planners_commands_name_a_remote_model_as_llama_server_takes_it(hub, quants, capsys):
    argv = ["fit", "hf:acme/M-GGUF:Q8_0", "--gpus", GPUS, "--host-free", HOST]
    assert main([*argv, "--best", "decode", "--json"]) == 0
    commands = _commands(capsys)
    assert commands and all(c.startswith("llama-server -hf acme/M-GGUF:Q8_0 ") for c in commands)
    # a split model's second part: llama-server loads it by its first
    second = str(quants["Q4_0-2"])
    assert (
        main(["fit", second, "--gpus", GPUS, "--host-free", HOST, "--best", "decode", "--json"])
        == 0
    )
    first = str(quants["Q4_0-1"])
    commands = _commands(capsys)
    assert commands and all(c.startswith(f"llama-server -m {first} ") for c in commands)


def _commands(capsys) -> list[str]:
    options = json.loads(capsys.readouterr().out)["planner"]["options"]
    return [o["command"] for o in options if o["fits"]]


def test_a_type_that_fits_only_with_a_room_split_is_ranked(tmp_path, capsys):
    """An 8B F16 on 12 + 6 GiB: llama.cpp's split by free memory overfills the 6 GiB GPU, the
    -ts sized to each GPU's room holds it; quant --best called it one that does not fit."""
    path = gf.write_sparse(tmp_path / "l8.gguf", gf.llama_8b_spec(), "F16")
    argv = ["quant", str(path), "-c", "8192", "--gpus", "12GiB,6GiB", "--best", "gpu-only"]
    assert main([*argv, "--json"]) == 0
    got = {q["quant"]: q for q in json.loads(capsys.readouterr().out)["quants"]}
    assert got["F16"]["fits"] and "-ts" in got["F16"]["flags"]
    assert main(["fit", str(path), "-c", "8192", "--gpus", "12GiB,6GiB", "-ngl", "all"]) == 0
    assert "does NOT fit" in capsys.readouterr().out  # llama.cpp's own split does not hold it
