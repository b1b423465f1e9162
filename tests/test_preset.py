"""llama-server's model presets: read as the pinned build reads them, written so it reads them
back, and checked against the real binary (which refuses a file for one unknown key)."""

from __future__ import annotations

import subprocess

import pytest
from support.llama_fixture import free_port, llama_bins

from lltui.core.cmdline.preset import (
    PresetError,
    canonical_name,
    entry_words,
    key_flag,
    parse_preset,
    section_words,
    unknown_keys,
    words_to_entries,
    write_preset,
)

__all__ = ["llama_bins"]

TEXT = """\
; a comment
version = 1
[*]
c = 8192
n-gpu-layers = 8

[ggml-org/MY-MODEL-GGUF:q8_0]
chat-template = chatml   ; a comment after the value
jinja = true
c = 4096
LLAMA_ARG_CACHE_RAM = 0
model-draft = ./draft.gguf # another comment

[custom_model]\r
model = /models/my model.gguf\r
kv-offload = false\r
"""


def test_sections_global_values_and_comments_read_as_llama_cpp_reads_them():
    p = parse_preset(TEXT)
    assert p.global_section is not None
    assert [(e.key, e.value) for e in p.global_section.entries] == [
        ("c", "8192"),
        ("n-gpu-layers", "8"),
    ]
    # the tag after the last colon is upper-cased, as llama.cpp names the section
    assert [s.name for s in p.sections] == ["ggml-org/MY-MODEL-GGUF:Q8_0", "custom_model"]
    first = p.sections[0]
    assert first.get("chat-template") == "chatml"
    assert first.get("model-draft") == "./draft.gguf"
    assert p.section("custom_model").get("model") == "/models/my model.gguf"
    assert first.line == 7


def test_a_line_llama_server_cannot_read_is_one_line_with_its_number():
    with pytest.raises(PresetError, match=r"x.ini:3: .*'c = 1'"):
        parse_preset("[a]\nmodel = m.gguf\n  c = 1\n", "x.ini")
    with pytest.raises(PresetError, match=r":2: "):
        parse_preset("[a]\njust words\n", "x.ini")


def test_a_repeated_section_starts_over_and_a_repeated_key_keeps_the_last():
    p = parse_preset("[a]\nc = 1\n[b]\nc = 2\n[a]\nngl = 3\nngl = 4\n")
    a = p.section("a")
    assert a is not None and [e.key for e in a.entries] == ["ngl", "ngl"]
    assert section_words(a) == ["-ngl", "4"]


def test_canonical_names():
    assert canonical_name("owner/repo:q4_k_m") == "owner/repo:Q4_K_M"
    assert canonical_name("owner/repo:model-q4_k_m") == "owner/repo:Q4_K_M"
    assert canonical_name("plain-name") == "plain-name"


def test_keys_are_flags_without_dashes_or_their_variables():
    assert key_flag("ctx-size") == "--ctx-size"
    assert key_flag("c") == "-c"
    assert key_flag("LLAMA_ARG_CTX_SIZE") == "--ctx-size"
    assert key_flag("temp") == "--temp"  # a flag lltui does not read is still a flag
    assert key_flag("load-on-startup") is None
    assert key_flag("n_gpu_layers") is None  # llama.cpp looks keys up as written
    p = parse_preset("[m]\nmodel = a.gguf\nctx_size = 1\nload-on-startup = true\n")
    assert [e.key for e in unknown_keys(p.sections[0])] == ["ctx_size"]


def test_switches_and_their_off_halves():
    def words(key: str, value: str) -> list[str]:
        p = parse_preset(f"[m]\n{key} = {value}\n")
        return entry_words(p.sections[0].entries[0])

    assert words("jinja", "true") == ["--jinja"]
    assert words("jinja", "off") == ["--no-jinja"]
    assert words("kv-unified", "0") == ["--no-kv-unified"]
    assert words("no-kv-offload", "true") == ["--no-kv-offload"]
    assert words("load-on-startup", "true") == []
    with pytest.raises(PresetError, match="on or off"):
        words("jinja", "maybe")


def test_flags_written_as_a_section_read_back_as_the_same_flags():
    words = ["-c", "4096", "-ngl", "all", "--rpc", "h1:1", "--rpc", "h2:2", "--jinja", "-ts", "3,1"]
    entries = words_to_entries(words)
    assert ("rpc", "h1:1,h2:2") in entries  # values that add up are joined
    text = write_preset([("tiny", [("model", "/m/tiny.gguf"), *entries])], header=["by a test"])
    back = parse_preset(text).section("tiny")
    assert back is not None
    assert section_words(back) == [
        "--model", "/m/tiny.gguf", "-c", "4096", "-ngl", "all", "--rpc", "h1:1,h2:2",
        "--jinja", "-ts", "3,1",
    ]  # fmt: skip


def test_what_a_preset_cannot_hold_is_refused():
    with pytest.raises(PresetError, match="cannot hold"):
        write_preset([("m", [("chat-template", "a;b")])])
    with pytest.raises(PresetError, match="section name"):
        write_preset([("repo:q4_k_m", [])])  # llama.cpp would rename it
    with pytest.raises(PresetError, match="presets hold one"):
        words_to_entries(["--control-vector-layer-range", "1", "2"])


@pytest.mark.slow
def test_the_real_server_refuses_the_key_lltui_calls_unknown(llama_bins, tmp_path):
    """llama-server in router mode exits naming the one key lltui flags, and refuses the
    line lltui cannot read."""
    server = str(llama_bins.binaries["llama-server"])
    bad = tmp_path / "bad.ini"
    bad.write_text("[m]\nmodel = /nope.gguf\nctx_size = 512\n")
    assert [e.key for e in unknown_keys(parse_preset(bad.read_text()).sections[0])] == ["ctx_size"]
    port = free_port()
    run = subprocess.run(
        [server, "--models-preset", str(bad), "--port", str(port), "--host", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "option 'ctx_size' not recognized in preset 'm'" in run.stdout + run.stderr
    # an indented key is a line it cannot read, as lltui says
    indented = tmp_path / "indented.ini"
    indented.write_text("[m]\nmodel = /nope.gguf\n  c = 512\n")
    with pytest.raises(PresetError, match=":3: "):
        parse_preset(indented.read_text())
    run = subprocess.run(
        [server, "--models-preset", str(indented), "--port", str(port), "--host", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0
    assert "failed to parse server config file" in run.stdout + run.stderr
