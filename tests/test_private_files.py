"""Files that may hold another user's data: recordings are created 0600 with the secrets of
every command line written as ***, unless --record-full; nothing in lltui changes the
process's umask (a file another thread created meanwhile would get the new one)."""

from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest
from support.recording import read_recording

from lltui import paths
from lltui.cli import main
from lltui.core.cmdline.secrets import REDACTED, redact_command, secret_name
from lltui.core.monitor.models import GpuProcess, GpuSample, GpuStatic, RigInfo, RigSample
from lltui.core.monitor.redact import redact_sample
from lltui.sources.gpu.replay import Recorder

PACKAGE = Path(paths.__file__).parent


@pytest.mark.parametrize(
    "command, expected",
    [
        (
            "llama-server -m /m.gguf --api-key abc -ngl 99",
            "llama-server -m /m.gguf --api-key *** -ngl 99",
        ),
        ("llama-server --api-key=abc --port 8080", "llama-server --api-key=*** --port 8080"),
        ("llama-cli -hft hf_x -m m", "llama-cli -hft *** -m m"),
        ("llama-cli --hf-token tok --hf-repo a/b", "llama-cli --hf-token *** --hf-repo a/b"),
        (
            "app --db-password s3 --auth-token t --openai-api-key k",
            "app --db-password *** --auth-token *** --openai-api-key ***",
        ),
        (
            "app --api-key-file /run/key --token-count 5",
            "app --api-key-file /run/key --token-count 5",
        ),
        (
            "env HF_TOKEN=abc AWS_SECRET_ACCESS_KEY=x python t.py",
            "env HF_TOKEN=*** AWS_SECRET_ACCESS_KEY=*** python t.py",
        ),
        (
            "curl https://me:pw@h.example/p?token=zz&page=2",
            "curl https://***@h.example/p?token=***&page=2",
        ),
        ("x --url http://h/x?sig=abc&expires=1", "x --url http://h/x?sig=***&expires=1"),
        # the word's own punctuation stays (an error line's "URL: why" lost its ':'), a
        # colon inside a value is the value's
        ("scrape:http://h/m?token=abc: refused", "scrape:http://h/m?token=***: refused"),
        ("x http://h/x?token=a:b", "x http://h/x?token=***"),
        ("x hf_abcdefghijklmnopqrstuvwxyz sk-abcdefghijklmnopqrstuvwxyz", "x *** ***"),
        ("x --api-key --verbose", "x --api-key --verbose"),  # no value: the next flag stays
        ("x --api-key", "x --api-key"),
        (
            "python train.py --monkey 3 --keys 4 --lr 1e-4",
            "python train.py --monkey 3 --keys 4 --lr 1e-4",
        ),
        ("a  b   --api-key   k", "a  b   --api-key   ***"),  # spacing kept
        # a quoted value with spaces, masked to its closing quote (the second half showed)
        ('x --api-key "k 1" --port 8', "x --api-key *** --port 8"),
        ("x --api-key='a b c' -m m", "x --api-key=*** -m m"),
        ('x --port "a b" --api-key  "k 1"', 'x --port "a b" --api-key  ***'),
    ],
)
def test_secrets_in_a_command_line_are_written_as_stars(command, expected):
    assert redact_command(command) == expected


def test_what_a_name_says():
    assert secret_name("--api-key") and secret_name("HF_TOKEN") and secret_name("password")
    assert not secret_name("--api-key-file") and not secret_name("--token-count")
    assert not secret_name("--model") and not secret_name("keyboard")


def _sample(command: str) -> tuple[RigInfo, RigSample]:
    static = GpuStatic(index=0, uuid="GPU-1", name="NVIDIA L4", pci_bus_id="0:1", memory_total=1)
    info = RigInfo(source="sim:test", hostname="h", gpus=(static,))
    proc = GpuProcess(pid=7, gpu_index=0, used_memory=1, name="llama-server", user="bob",
                      command=command)  # fmt: skip
    gpu = GpuSample(info=static, processes=(proc,))
    return info, RigSample(seq=1, t=1.0, wall=1.0, info=info, gpus=(gpu,))


SECRET = "sk-live-0123456789abcdefghijklmnop"
CMD = f"llama-server -m /m.gguf --api-key {SECRET} --port 8080"


def _recorded(path: Path, **kw: bool) -> tuple[str, str]:
    info, sample = _sample(CMD)
    with Recorder(path, **kw) as rec:
        rec.start(info)
        rec.write(sample)
    text = path.read_text()
    (written,) = read_recording(path).samples
    return text, written.gpus[0].processes[0].command or ""


def test_a_recording_is_private_and_keeps_no_secret(tmp_path):
    old = os.umask(0)  # the most open umask: the file must be private anyway
    try:
        text, command = _recorded(tmp_path / "rec.jsonl")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "rec.jsonl").stat().st_mode) == 0o600
    assert SECRET not in text
    assert command == f"llama-server -m /m.gguf --api-key {REDACTED} --port 8080"


def test_gpus_and_the_process_table_show_no_secret():
    from lltui.core.monitor.commands import command_label
    from lltui.core.monitor.gpus_report import rig_to_json, rig_to_text

    _, sample = _sample(CMD)
    assert SECRET not in json.dumps(rig_to_json(sample)) + rig_to_text(sample, width=200)
    assert "--api-key ***" in rig_to_text(sample)
    assert SECRET not in command_label(CMD) and "m.gguf" in command_label(CMD)
    assert sample.gpus[0].processes[0].command == CMD  # the sample itself keeps it whole


def test_record_full_keeps_the_command_lines_whole(tmp_path):
    text, command = _recorded(tmp_path / "rec.jsonl", full=True)
    assert command == CMD and SECRET in text
    assert stat.S_IMODE((tmp_path / "rec.jsonl").stat().st_mode) == 0o600


def test_recording_over_a_shared_file_makes_it_private(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text("old")
    os.chmod(path, 0o644)
    _recorded(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_redacting_a_sample_touches_command_lines_only():
    _, sample = _sample(CMD)
    out = redact_sample(sample)
    p, q = sample.gpus[0].processes[0], out.gpus[0].processes[0]
    assert q.command != p.command and (q.pid, q.user, q.name) == (p.pid, p.user, p.name)
    _, plain = _sample("llama-server -m m.gguf")
    assert redact_sample(plain).gpus[0].processes[0].command == "llama-server -m m.gguf"


def test_the_cli_records_privately_and_record_full_needs_record(tmp_path, capsys):
    path = tmp_path / "gpus.jsonl"
    assert main(["--source", "sim:4xl4", "--record", str(path), "gpus"]) == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text().splitlines()[0])["lltui_recording"] == 1
    assert main(["--record-full", "gpus", "--source", "sim:4xl4"]) == 2
    assert "--record-full goes with --record" in capsys.readouterr().err


def test_open_private_and_the_umask_read_without_setting_it(tmp_path):
    with paths.open_private(tmp_path / "a.txt") as f:
        f.write("x")
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o600
    with paths.open_private(tmp_path / "b.bin", binary=True) as f:
        f.write(b"\0")
    old = os.umask(0o027)
    try:
        assert paths.current_umask() == 0o027
    finally:
        os.umask(old)


def test_nothing_in_lltui_sets_the_umask():
    """``os.umask(x)`` sets the mask for every thread at once: lltui never calls it."""
    calls = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "umask"
            ):
                calls.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not calls, calls


def test_a_secret_with_spaces_is_masked_whole_word_by_word():
    from lltui.core.cmdline.secrets import redact_argv

    argv = ("llama-server", "-m", "m.gguf", "--api-key", "correct horse", "--hf-token", "hf_a b")
    assert redact_argv(argv) == [
        "llama-server",
        "-m",
        "m.gguf",
        "--api-key",
        "***",
        "--hf-token",
        "***",
    ]


def test_a_bearer_token_in_a_command_line_is_masked():
    from lltui.core.cmdline.secrets import redact_command

    masked = redact_command("curl -H 'Authorization: Bearer sk-live-0123' http://127.0.0.1:8080")
    assert "sk-live-0123" not in masked and "Bearer ***" in masked
