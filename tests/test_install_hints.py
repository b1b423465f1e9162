"""Where an NVIDIA GPU is present, the hints to build llama-server say ``--cuda`` (doctor,
the launch view, ``lltui launch``); elsewhere they do not. The GPU is told by the files the
driver makes (here pointed at a folder the test fills)."""

from __future__ import annotations

import json

import pytest
from support.llama_fixture import llama_bins  # noqa: F401 (builds or finds the pinned CPU build)

from lltui.cli import main
from lltui.sources.llama import binary


@pytest.fixture
def gpu_here(tmp_path, monkeypatch):
    gpus = tmp_path / "proc-nvidia-gpus"
    (gpus / "0000:17:00.0").mkdir(parents=True)
    monkeypatch.setattr(binary, "NVIDIA_PROC_GPUS", gpus)
    monkeypatch.setattr(binary, "NVIDIA_DEVICE", tmp_path / "no-dev-nvidia0")


@pytest.fixture
def no_gpu_here(tmp_path, monkeypatch):
    monkeypatch.setattr(binary, "NVIDIA_PROC_GPUS", tmp_path / "none")
    monkeypatch.setattr(binary, "NVIDIA_DEVICE", tmp_path / "no-dev-nvidia0")


@pytest.fixture
def no_llama_server(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("LLTUI_LLAMA_SERVER", raising=False)


def _doctor(capsys) -> dict:
    main(["doctor", "--json"])
    return {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}


def test_doctor_says_cuda_where_an_nvidia_gpu_is(gpu_here, no_llama_server, capsys):
    check = _doctor(capsys)["llama-server"]
    assert check["status"] == "missing"
    assert check["hint"].startswith("lltui llama install --cuda")


def test_doctor_says_no_cuda_without_one(no_gpu_here, no_llama_server, capsys):
    check = _doctor(capsys)["llama-server"]
    assert check["hint"].startswith("lltui llama install ") and "--cuda" not in check["hint"]


def test_a_cpu_build_on_a_gpu_machine_is_a_warning_with_the_cuda_build(
    gpu_here,
    llama_bins,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("LLTUI_LLAMA_SERVER", raising=False)
    found = binary.find_llama_server()
    if found.origin != "cache:cpu":
        pytest.skip(f"the llama-server found here is not lltui's CPU build ({found.origin})")
    check = _doctor(capsys)["llama-server"]
    assert check["status"] == "warn" and "lltui llama install --cuda" in check["hint"]


def test_the_launch_view_and_launch_say_cuda_where_an_nvidia_gpu_is(
    gpu_here, no_llama_server, tmp_path, capsys
):
    from lltui.app.state.launch import preview_command

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    _line, note = preview_command(str(model), "-c 4096", "127.0.0.1:8080")
    assert note is not None and "lltui llama install --cuda" in note
    rc = main(["launch", str(model), "-c", "4096"])
    err = capsys.readouterr().err
    assert rc != 0 and "lltui llama install --cuda" in err
