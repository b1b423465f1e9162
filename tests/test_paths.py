"""Every file lltui keeps lives where the XDG base directory rules say, from one module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lltui import paths


def test_xdg_variables_are_followed():
    env = {
        "HOME": "/home/u",
        "XDG_CONFIG_HOME": "/x/config",
        "XDG_CACHE_HOME": "/x/cache",
        "XDG_STATE_HOME": "/x/state",
        "XDG_DATA_HOME": "/x/data",
    }
    assert paths.config_dir(env) == Path("/x/config/lltui")
    assert paths.cache_dir(env) == Path("/x/cache/lltui")
    assert paths.state_dir(env) == Path("/x/state/lltui")
    assert paths.data_dir(env) == Path("/x/data/lltui")
    assert paths.themes_dir(env) == Path("/x/config/lltui/themes")
    assert paths.profiles_dir(env) == Path("/x/config/lltui/profiles")


def test_defaults_under_home_and_relative_values_ignored():
    env = {"HOME": "/home/u", "XDG_CACHE_HOME": "relative/cache"}
    assert paths.config_dir(env) == Path("/home/u/.config/lltui")
    assert paths.cache_dir(env) == Path("/home/u/.cache/lltui")
    assert paths.state_dir(env) == Path("/home/u/.local/state/lltui")
    assert paths.data_dir(env) == Path("/home/u/.local/share/lltui")


def test_the_llama_build_and_header_caches_are_under_the_cache_dir():
    from lltui.sources.llama.build_cache import flavor_root
    from lltui.sources.models.remote_gguf import cache_dir

    env = {"HOME": "/home/u", "XDG_CACHE_HOME": "/x/cache"}
    assert flavor_root(env=env).parent == Path("/x/cache/lltui/llama.cpp")
    assert cache_dir(env) == Path("/x/cache/lltui/gguf-headers")


def test_runtime_dir_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = paths.runtime_dir()
    assert folder == tmp_path / "lltui" and folder.stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "--once", "--source", "sim", "--llama", "http://127.0.0.1:1",
         "--llama-api-key-file", "{bad}", "--json"],
        ["serve", "--token-file", "{bad}", "--listen", "127.0.0.1:1"],
        ["--config", "{bad}", "gpus", "--source", "sim", "--json"],
        ["launch", "{model}", "--api-key-file", "{bad}", "--dry-run"],
    ],
)  # fmt: skip
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_key_token_and_config_files_are_small_regular_files(tmp_path, capsys, argv, kind):
    """/dev/zero was read until memory ran out, and a FIFO hung every reader."""
    from support.gguf_factory import SPECS, write_model

    from lltui.cli import main

    bad = tmp_path / "fifo"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad = Path("/dev/zero")
    model = tmp_path / "m.gguf"
    write_model(model, SPECS["llama"]())
    words = [w.format(bad=bad, model=model) for w in argv]
    assert main(words) == 2
    err = capsys.readouterr().err.strip()
    assert "not a regular file" in err and len(err.splitlines()) == 1
