"""``lltui demo``: a small model to try lltui on, offline: the file the tests' generator
writes (lltui's own writer, no ``gguf`` package), every command it suggests works, and the
real llama-server loads and serves it."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from support import gguf_factory as gf
from support.llama_fixture import llama_bins, llama_server

from lltui.cli import main
from lltui.core.gguf.reader import read_gguf
from lltui.core.gguf.values import GgufArray

__all__ = ["llama_bins"]  # a session fixture used by name


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    where = tmp_path_factory.mktemp("demo")
    assert main(["demo", str(where), "--json"]) == 0
    return where / "lltui-demo.gguf"


def _metadata(path: Path) -> list[tuple[str, object]]:
    f = read_gguf(path).files[0]
    return [(k, v.items if isinstance(v, GgufArray) else v) for k, v in f.metadata.items()]


def test_the_demo_is_the_file_the_tests_generator_writes(demo, tmp_path):
    made = gf.write_model(tmp_path / "factory.gguf", gf.llama_spec(), name="lltui-demo")[0]
    ours, theirs = read_gguf(demo), read_gguf(made)
    assert [(t.name, t.dims, t.type, t.offset) for t in ours.tensors] == [
        (t.name, t.dims, t.type, t.offset) for t in theirs.tensors
    ]
    assert _metadata(demo) == _metadata(made)
    assert ours.files[0].kv_types == theirs.files[0].kv_types
    assert demo.stat().st_size == made.stat().st_size


def test_it_is_the_same_file_each_time_and_json_names_it(demo, tmp_path, capsys):
    assert main(["demo", str(tmp_path / "again.gguf"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(tmp_path / "again.gguf") and data["architecture"] == "llama"
    assert (tmp_path / "again.gguf").read_bytes() == demo.read_bytes()
    assert data["bytes"] == demo.stat().st_size
    assert ["lltui", "fit", data["path"]] in data["commands"]


def test_every_command_it_suggests_runs(demo, tmp_path, capsys):
    assert main(["demo", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    path = str(tmp_path / "lltui-demo.gguf")
    assert out.startswith(f"wrote {path}: a llama model, 4 layers")
    assert main(["demo", str(tmp_path), "--json"]) == 0
    commands = json.loads(capsys.readouterr().out)["commands"]
    tried = 0
    for argv in commands:
        if argv == ["lltui"] or ("launch" in argv and "--dry-run" not in argv):
            continue  # the app, and a server left to the test below
        assert main(argv[1:]) == 0, argv
        tried += 1
    assert tried == 4
    capsys.readouterr()


@pytest.mark.parametrize("under", ["", "x.gguf", "sub", "sub/x.gguf"])
def test_a_path_that_is_no_folder_is_one_line(tmp_path, capsys, under):
    """A file in the folder part of the path (file.txt/x.gguf, file.txt/sub) was exit 1
    with 'cannot write it: File exists' or 'Not a directory', where file.txt itself is
    exit 2 'not a folder': each is now the latter, naming the file."""
    plain = tmp_path / "file.txt"
    plain.write_text("x")
    assert main(["demo", str(plain / under) if under else str(plain)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"lltui: demo: {plain}: not a folder (give a folder or a .gguf path)"
    assert plain.read_text() == "x"


@pytest.mark.parametrize("where", ["gone", "gone/x.gguf", "gone/deeper/x.gguf"])
def test_a_folder_that_is_not_there_is_one_line_and_nothing_is_made(tmp_path, capsys, where):
    """demo made the missing folders (as root, /nonexistent/x for /nonexistent/x/y.gguf):
    a folder not there is exit 2, one line, as other commands' missing paths."""
    assert main(["demo", str(tmp_path / where)]) == 2
    err = capsys.readouterr().err.strip()
    folder = (tmp_path / where).parent if where.endswith(".gguf") else tmp_path / where
    assert err == f"lltui: demo: {folder}: no such folder; nothing written"
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_not_the_demo_is_never_written_over(tmp_path, capsys):
    theirs = tmp_path / "my-model.gguf"
    theirs.write_bytes(b"GGUF a model of the user's")
    assert main(["demo", str(theirs)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("already exists and is not lltui's demo; nothing written")
    assert theirs.read_bytes() == b"GGUF a model of the user's"
    assert main(["demo", str(tmp_path)]) == 0  # the demo itself is written again, as before
    assert main(["demo", str(tmp_path)]) == 0
    capsys.readouterr()


def test_a_file_beside_it_is_never_followed_or_written_over(tmp_path, capsys):
    """The model was written through NAME.part: a link there (or someone's download.part)
    was followed and its file replaced."""
    notes = tmp_path / "notes.txt"
    notes.write_text("precious")
    (tmp_path / "lltui-demo.gguf.part").symlink_to(notes)
    assert main(["demo", str(tmp_path)]) == 0
    capsys.readouterr()
    assert notes.read_text() == "precious"
    assert (tmp_path / "lltui-demo.gguf.part").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "lltui-demo.gguf", "lltui-demo.gguf.part", "notes.txt"
    ]  # fmt: skip


def test_a_path_that_cannot_be_written_is_one_line(tmp_path, capsys):
    assert main(["demo", str(tmp_path / ("a" * 300 + ".gguf"))]) == 1  # a name too long
    err = capsys.readouterr().err.strip()
    assert err.startswith("lltui: demo: ") and len(err.splitlines()) == 1
    assert "internal error" not in err


@pytest.mark.slow
def test_the_real_llama_server_loads_and_serves_it(llama_bins, demo, tmp_path):
    with llama_server(llama_bins, demo, tmp_path / "server.log") as run:
        reply = httpx.post(
            f"{run.url}/completion", json={"prompt": "hello", "n_predict": 4}, timeout=60
        )
    assert reply.status_code == 200
    assert reply.json()["tokens_predicted"] == 4
