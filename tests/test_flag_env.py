"""What users export reaches llama-server and lltui's estimate alike: LLAMA_ARG_* settings,
GGML_CUDA_P2P, CUDA_VISIBLE_DEVICES; and fit names the flag it cannot take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.cmdline.flags import parse_llama_args


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("env") / "m.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    return path


def test_llama_arg_variables_are_read_before_the_flags():
    env = {"LLAMA_ARG_CTX_SIZE": "1024", "LLAMA_ARG_NO_KV_OFFLOAD": "1", "LLAMA_ARG_NO_HOST": "0"}
    args = parse_llama_args([], env=env)
    assert args.n_ctx == 1024 and not args.kv_offload and args.host_buffer
    assert dict(args.from_env) == {"LLAMA_ARG_CTX_SIZE": "1024", "LLAMA_ARG_NO_KV_OFFLOAD": "1"}
    assert parse_llama_args(["-c", "2048"], env=env).n_ctx == 2048  # the flag wins
    assert parse_llama_args([], env={"LLAMA_ARG_KV_UNIFIED": "off"}).kv_unified is False
    with pytest.raises(ValueError, match=r"LLAMA_ARG_CTX_SIZE='8k' .*-c"):
        parse_llama_args([], env={"LLAMA_ARG_CTX_SIZE": "8k"})


def test_fit_reads_exported_settings_and_says_so(model, capsys, monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "1024")
    assert main(["fit", str(model), "--gpus", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["settings"]["n_ctx"] == 1024
    assert "LLAMA_ARG_CTX_SIZE=1024 from the environment" in data["notes"]
    monkeypatch.setenv("LLAMA_ARG_CACHE_TYPE_K", "Q8_0")
    assert main(["fit", str(model), "--gpus", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "LLAMA_ARG_CACHE_TYPE_K" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--ctx-size-draft", "4096"], "--ctx-size-draft is not a llama-server flag"),
        (["-fa", "--gpus", "cpu"], "-fa: expected on, off or auto"),
        (["-fa"], "write -fa on"),
        (["--no-mmap"], "use -lm none"),
        (["--mlock"], "use -lm mlock"),
        (["-ts", "nan,1"], "-ts: proportions must be finite"),
    ],
)
def test_fit_names_the_flag_it_cannot_take(model, capsys, argv, needle):
    assert main(["fit", str(model), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err, err


def test_quant_reads_flags_the_same_way(model, capsys):
    assert main(["quant", str(model), "--ctx-size=4096", "--gpus", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lltui: quant: --ctx-size=4096") and "next argument" in err


def test_launch_keeps_what_the_user_exported(model, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(tmp_path / "no-llama-server"))
    monkeypatch.setenv("GGML_CUDA_P2P", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    monkeypatch.setenv("LLAMA_ARG_THREADS", "8")
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)
    assert main(["launch", str(model), "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "GGML_CUDA_P2P" not in data["env_unset"]
    assert data["env_inherited"] == {
        "CUDA_VISIBLE_DEVICES": "1,0",
        "GGML_CUDA_P2P": "1",
        "LLAMA_ARG_THREADS": "8",
    }
    assert main(["launch", str(model), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "env:  GGML_CUDA_P2P=1 (inherited)" in out.splitlines()
