"""Strings from files never drive the terminal: the CLI prints control characters as escapes,
errors stay one line, and formatting survives NaN and infinite readings."""

from __future__ import annotations

import json
import math
import pathlib

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.text import counted, error_text, printable
from lltui.core.units import bar, fmt_bytes, fmt_pct, fmt_rate_kbs, fmt_watts, spark

HOSTILE = "evil\x1b[2J\x1b]0;owned\x07\x9b31m"


def test_printable_escapes_every_control_character():
    assert printable("plain text, ünïcode ✓") == "plain text, ünïcode ✓"
    out = printable(HOSTILE)
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert out == "evil\\u001b[2J\\u001b]0;owned\\u0007\\u009b31m"
    assert printable("a\nb\tc") == "a\nb\tc"
    assert printable("a\nb\tc", one_line=True) == "a\\u000ab\\u0009c"


def test_errors_are_said_in_words_never_by_class_name():
    class ReadTimeout(Exception):
        pass

    assert error_text(ConnectionRefusedError(111, "Connection refused")) == "Connection refused"
    assert error_text(FileNotFoundError(2, "No such file", "m.gguf")) == "m.gguf: No such file"
    assert error_text(TimeoutError()) == "timed out"
    assert error_text(ReadTimeout()) == "read timeout"  # no message: its kind, in words
    assert error_text(ValueError("first\n\nsecond\x1b[2J")) == "first; second\\u001b[2J"


def test_no_message_shows_an_exception_class_name():
    """What users read (errors of the app, services, commands and sources) is said in words:
    the one place an exception's kind becomes text is core.text.error_text."""
    import lltui

    root = pathlib.Path(lltui.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if "type(exc).__name__" in path.read_text(encoding="utf-8")
        and path.relative_to(root).as_posix() not in {"core/text.py", "commands/ui.py"}
    ]
    assert offenders == []


@pytest.mark.parametrize("command", ["fit", "quant"])
def test_model_name_with_escapes_prints_as_text(tmp_path, capsys, command):
    # a hostile general.name (fit shows it) in a file whose own name is hostile (both show it)
    path = tmp_path / "m\x1b[2J.gguf"
    gf.write_model(path, gf.llama_spec(), "F16", name=HOSTILE)
    assert main([command, str(path), "--gpus", "cpu"]) == 0
    out = capsys.readouterr().out
    if command == "quant":
        assert "m\\u001b[2J.gguf" in out, "the file name is shown, escaped"
    else:
        assert "evil\\u001b[2J" in out, "the model name is shown, escaped"
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out


def test_json_output_stays_valid_and_keeps_the_name(tmp_path, capsys):
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(), "F16", name=HOSTILE)
    assert main(["fit", str(path), "--gpus", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["name"] == HOSTILE  # JSON escapes it; a script gets the real name


def test_an_error_quoting_a_newline_is_one_line(tmp_path, capsys):
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(), "F16")
    assert main(["fit", str(path), "-c", "12\n34"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("lltui")


def test_formatting_survives_nan_and_infinity():
    for bad in (math.nan, math.inf, -math.inf):
        assert fmt_bytes(bad) == "-"
        assert fmt_watts(bad) == "-"
        assert fmt_pct(bad) == "-"
        assert fmt_rate_kbs(bad) == "-"
        assert bar(bad, 10) == "░" * 10
    assert spark([1.0, math.nan, 3.0], 3, 0.0, 4.0)[1] in " ▁"
    assert len(spark([math.inf, math.nan], 5, 0.0, 1.0)) == 5


def test_an_error_quoting_a_huge_value_stays_short(tmp_path, capsys):
    path = tmp_path / "m.gguf"
    gf.write_model(path, gf.llama_spec(), "F16")
    assert main(["fit", str(path), "-ctk", "q" * 1_000_000]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 600
    assert "characters in all" in err


def test_counted_says_one_thing_singular_and_none_or_many_plural() -> None:
    assert [counted(n, "GPU") for n in (0, 1, 2)] == ["0 GPUs", "1 GPU", "2 GPUs"]
    assert counted(1, "bonded NVLink") == "1 bonded NVLink"
