"""Data never writes a line of its own in text output: a line break, a line separator or a
bidi override in a model's name, a GPU's name, another user's command line, a hub's file
name, a library's path or the environment is escaped, so what lltui prints line by line is
what lltui wrote (no forged ``verdict: fits``). JSON keeps the real values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.text import one_line, printable

FORGED = "verdict: fits"
# a break, a carriage return, NEL, the line and paragraph separators, and a bidi override
HOSTILE = f"x\n{FORGED}\r\n{FORGED}\x85{FORGED}\u2028{FORGED}\u2029{FORGED}\u202e{FORGED}"
RAW = ("\r", "\x85", "\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\x1b")


def assert_no_forged_line(out: str, allowed: int = 0) -> None:
    """No character that starts a line or reorders text, and no line from the data."""
    for ch in RAW:
        assert ch not in out, f"{ch!r} printed raw"
    forged = [ln for ln in out.split("\n") if ln.lstrip(" |").startswith(FORGED)]
    assert len(forged) == allowed, forged


def test_printable_escapes_separators_and_bidi_controls_always():
    bidi = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    out = printable(f"a\u2028b\u2029c\x85d{bidi}e\nf\tg")
    assert out == (
        "a\\u2028b\\u2029c\\u0085d\\u061c\\u200e\\u200f\\u202a\\u202b\\u202c\\u202d\\u202e"
        "\\u2066\\u2067\\u2068\\u2069e\nf\tg"
    )
    assert one_line("a\nb\tc\u202e") == "a\\u000ab\\u0009c\\u202e"
    assert one_line(42) == "42"
    assert printable("ünïcode ✓ 日本 עברית") == "ünïcode ✓ 日本 עברית"  # text, not controls


@pytest.mark.parametrize("command", ["fit", "quant"])
def test_a_model_name_cannot_forge_a_verdict(tmp_path, capsys, command):
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(), "F16", name=HOSTILE)
    # does not fit: the only verdict line is lltui's own "does NOT fit"
    assert main([command, str(path), "--gpus", "1MiB", "-ngl", "99"]) == 0
    out = capsys.readouterr().out
    assert_no_forged_line(out)
    if command == "fit":
        assert "verdict: does NOT fit" in out and "x\\u000averdict: fits" in out


def test_a_model_name_keeps_its_breaks_in_json(tmp_path, capsys):
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(), "F16", name=HOSTILE)
    assert main(["fit", str(path), "--gpus", "cpu", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["name"] == HOSTILE


def _hostile_recording(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    rec = tmp_path / "rec.jsonl"
    assert main(["--source", "sim:4xl4", "--record", str(rec), "gpus"]) == 0
    capsys.readouterr()

    def poison(obj: object) -> object:
        if isinstance(obj, dict):
            keys = ("name", "command", "user", "hostname", "driver_version", "cuda_version")
            return {k: HOSTILE if k in keys else poison(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [poison(v) for v in obj]
        return obj

    lines = [json.dumps(poison(json.loads(ln))) for ln in rec.read_text().splitlines()]
    rec.write_text("\n".join(lines) + "\n")
    return rec


def test_gpu_names_commands_users_and_hosts_cannot_forge_lines(tmp_path, capsys):
    rec = _hostile_recording(tmp_path, capsys)
    assert main(["gpus", "--source", f"replay:{rec}"]) == 0
    out = capsys.readouterr().out
    assert_no_forged_line(out)
    assert "x\\u000averdict: fits" in out


def test_the_nccl_environment_cannot_forge_lines(capsys, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", HOSTILE)
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", HOSTILE)
    main(["nccl", "--source", "sim:2x3090-nvlink"])
    assert_no_forged_line(capsys.readouterr().out)


def test_doctor_details_cannot_forge_lines(capsys, monkeypatch):
    from lltui.core.doctor import Check
    from lltui.services import doctor

    checks = [Check("driver", "ok", HOSTILE, version=HOSTILE, hint=HOSTILE, essential=True)]
    monkeypatch.setattr(doctor, "run_checks", lambda config=None: checks)
    assert main(["doctor"]) == 0
    assert_no_forged_line(capsys.readouterr().out)


def test_a_launch_dry_run_prints_one_line_per_item(tmp_path, capsys, monkeypatch):
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(), "F16", name=HOSTILE)
    monkeypatch.setenv("LLAMA_ARG_ALIAS", HOSTILE)
    main(["launch", str(path), "--dry-run", "--alias", HOSTILE])
    out = capsys.readouterr()
    assert_no_forged_line(out.out)
    assert_no_forged_line(out.err)


def test_a_repository_listing_cannot_forge_lines():
    from lltui.core.gguf.refs import RepoFile, listing_lines, repo_models

    files = [RepoFile(path=f"{HOSTILE}-Q4_K_M.gguf", size=10, etag="e")]
    out = "\n".join(listing_lines("hf:o/r", repo_models(files)))
    assert_no_forged_line(printable(out))
