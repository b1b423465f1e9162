"""``lltui explain`` on what is not a llama.cpp log, or not only one: an empty file, a binary
one, a text file of something else, a 2 GiB file (sparse: it costs no disk), a line of a
megabyte, a pasted prompt around a log. One clear line and exit 2 for bad input (a JSON
object with --json), no traceback; bounded time (the caps, not a timer, bound it) and memory."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from lltui.cli import main
from lltui.core.llamalog.memory import MAX_BUFFERS, MAX_DEVICES, MAX_UNPARSED
from lltui.core.llamalog.reader import LogReader, scan_lines
from lltui.services.explain import ExplainRequest, explain
from lltui.sources.llama.log_file import HEAD_BYTES, MAX_LINE_BYTES, LogRead, read_lines

LOGS = Path(__file__).parent / "fixtures" / "llama-logs"
PINNED = Path(__file__).parent / "fixtures" / "llama-server" / "server_lv4_full.log"


def refused(capsys, path: str, *extra: str) -> str:
    code = main(["explain", path, *extra])
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lltui: explain:")
    return lines[0]


def test_missing_file(capsys, tmp_path):
    assert "No such file" in refused(capsys, str(tmp_path / "nope.log"))


def test_directory(capsys, tmp_path):
    assert "not a file" in refused(capsys, str(tmp_path))


def test_empty_file(capsys, tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert "empty file" in refused(capsys, str(path))


def test_binary_file(capsys, tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(os.urandom(4096) + b"\0" * 100)
    assert "not a text file" in refused(capsys, str(path))


def test_text_that_is_not_a_llama_log(capsys, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("shopping list\n" * 1000 + "eggs: 12\nmilk buffer size = 2 litres\n")
    assert "not a llama.cpp log" in refused(capsys, str(path))


def test_json_failure_is_a_json_object(capsys, tmp_path):
    path = tmp_path / "empty.log"
    path.write_bytes(b"")
    assert main(["explain", str(path), "--json"]) == 2
    out = capsys.readouterr()
    data = json.loads(out.out)
    assert data["exit_code"] == 2 and "empty file" in data["error"]


def test_bad_build_number_is_a_usage_error(capsys):
    assert main(["explain", str(PINNED), "--build", "yesterday"]) == 2
    assert "build number" in capsys.readouterr().err


def test_a_model_that_cannot_be_read_leaves_the_log_explained(capsys, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\xff" * 64)
    assert main(["explain", str(PINNED), "--model", str(bad), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"]["header_read"] is False and data["model"]["note"]
    assert data["buffers"] and all(b["predicted_bytes"] is None for b in data["buffers"])


def test_a_model_path_given_that_is_not_there_is_one_line(capsys, tmp_path):
    """A typo in --model: exit 2 and one line (it was exit 0 with a note in the report);
    the model the log names, not found, stays a note."""
    nope = str(tmp_path / "nope.gguf")
    said = refused(capsys, str(PINNED), "--model", nope)
    assert said == f"lltui: explain: model {nope}: no such file"
    assert main(["explain", str(PINNED), "--model", nope, "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["exit_code"] == 2
    assert main(["explain", str(PINNED), "--model-from-log", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["header_read"] is False


def test_two_gib_sparse_log_reads_its_head_and_tail(tmp_path):
    """A 2 GiB file: the log's load at its start, a crash at its end, a hole between (no disk
    used). Read in bounded pieces: the start and the end, with a note."""
    path = tmp_path / "huge.log"
    head = PINNED.read_bytes()
    tail = b"\nllama_model_load: error loading model: unable to allocate CUDA0 buffer\n"
    with path.open("wb") as f:
        f.write(head)
        f.seek(2 * 1024**3 - len(tail))
        f.write(tail)
    assert path.stat().st_size == 2 * 1024**3
    read = LogRead(str(path))
    lines = sum(1 for _ in read_lines(str(path), read))
    assert read.read_bytes < HEAD_BYTES + 9 * 1024 * 1024
    assert any("2.00 GiB" in n for n in read.notes)
    assert lines < 1000  # the hole is one line per NUL run, cut to MAX_LINE_BYTES
    r = explain(ExplainRequest(str(path), ask_binary=False))
    assert len(r.checks) == 4  # the load's buffers from the head
    assert r.failed is not None and r.failed.device == "CUDA0"  # the end's failure
    assert any("2.00 GiB" in n for n in r.source.notes)


def test_two_gib_of_zeros_is_refused_at_once(capsys, tmp_path):
    path = tmp_path / "zeros.log"
    with path.open("wb") as f:
        f.truncate(2 * 1024**3)
    assert "not a text file" in refused(capsys, str(path))


def test_a_megabyte_line_is_cut_not_kept(tmp_path):
    path = tmp_path / "long.log"
    path.write_bytes(PINNED.read_bytes()[:2000] + b"x" * (1 << 20) + b"\n" + PINNED.read_bytes())
    lines = list(read_lines(str(path)))
    assert max(len(line) for line in lines) <= MAX_LINE_BYTES
    r = explain(ExplainRequest(str(path), ask_binary=False))
    assert len(r.checks) == 4


def test_giving_up_early_on_a_large_text_that_is_no_log(capsys, tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("a line of some other program's output\n" * 200_000)  # 7.6 MB
    assert "not a llama.cpp log" in refused(capsys, str(path))


def test_pasted_with_a_prompt_and_markdown(tmp_path):
    text = PINNED.read_text()
    pasted = f"$ ./llama-server -m models/tiny.gguf -c 2048\n```\n{text}```\nhelp please!\n"
    path = tmp_path / "pasted.log"
    path.write_text(pasted)
    r = explain(ExplainRequest(str(path), ask_binary=False))
    assert r.facts.command[:2] == ("-m", "models/tiny.gguf")
    assert len(r.checks) == 4


def test_standard_input(monkeypatch, capsys):
    import io
    import sys

    data = (LOGS / "03-ollama6860-5gpu-compute-oom-2024.log").read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["explain", "-", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["failed"]["device"] == "CUDA4"


def test_the_reader_keeps_bounded_lists():
    reader = LogReader()
    for i in range(MAX_BUFFERS + 500):
        reader.feed(f"load_tensors:        CUDA0 model buffer size = {i}.00 MiB")
    for _ in range(MAX_UNPARSED + 50):
        reader.feed("something odd: 12 MiB of nothing")
    f = reader.facts()
    assert len(f.buffers) == MAX_BUFFERS and f.buffers_dropped == 500
    assert len(f.unparsed) == MAX_UNPARSED and f.unparsed_dropped == 50


@pytest.mark.parametrize(
    "line",
    [
        "\t" * 5000 + "buffer size = 1 MiB",
        "a" * 10000 + ": " + "b" * 10000,
        "llama_context: " + "x " * 3000 + "buffer size = 3 MiB",
        "{" + '"msg": "x", "level": "ERR", "build": 1' + "}",
        "\x1b[31m" * 1000,
        "load_tensors: RPC0[" + "9" * 5000 + "] model buffer size = 1.00 MiB",
    ],
)
def test_hostile_lines_do_not_break_the_reader(line):
    f = scan_lines([line, "load_tensors:        CUDA0 model buffer size =     1.00 MiB"])
    assert f.buffers[-1].device == "CUDA0"


def test_json_lines_log_and_verbose_log_of_the_pinned_server():
    """--log-jsonl (one JSON object a line) reads as the text log does; -v's extra lines are
    known, and its fit probe is a load of its own before the real one."""
    fixtures = Path(__file__).parent / "fixtures" / "llama-server"
    jsonl = scan_lines((fixtures / "server_jsonl_lv4_full.log").read_text().splitlines())
    assert [b.kind for b in jsonl.buffers] == ["model", "output", "kv", "compute"]
    assert jsonl.tool == "server" and jsonl.unparsed == ()
    verbose = scan_lines((fixtures / "server_verbose_v_full.log").read_text().splitlines())
    assert verbose.loads == 2 and verbose.unparsed == ()
    assert len(verbose.last_load()) == 4 and verbose.layer_devices


def test_a_fit_that_gave_up_is_not_a_failed_load(capsys, tmp_path):
    """llama.cpp's --fit warns when it cannot fit the params (-sm tensor, layers set by the
    user) and loads with the flags as given: the load that follows decides, not the warning."""
    lines = PINNED.read_text().splitlines()
    warn = (
        "0.00.005.000 W common_fit_params: failed to fit params to free device memory: "
        "llama_params_fit is not implemented for SPLIT_MODE_TENSOR, abort"
    )
    log = tmp_path / "fit-gave-up.log"
    log.write_text("\n".join([*lines[:5], warn, *lines[5:]]) + "\n")
    assert main(["explain", str(log), "--build", "11434", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["failed"] is None


def test_the_log_s_build_is_read_in_both_formats_or_said_unknown(capsys, tmp_path):
    """Current llama.cpp prints ``version: X.Y.Z (build N, commit C)``: its build number is the
    log's build. A log whose own build cannot be told (build 0: no git history) is judged by
    a build from elsewhere, and the answer says so, in text and JSON."""
    lines = PINNED.read_text().splitlines()
    semver = tmp_path / "semver.log"
    semver.write_text("\n".join(["version: 0.3.0-dev (build 10621, commit c1d0e7a00)", *lines]))
    assert main(["explain", str(semver), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["build"], data["build_note"]) == (10621, None)
    assert data["build_source"] == "the log's build line (line 1)"
    assert data["rules"]["follows"] == 10621
    assert main(["explain", str(PINNED), "--json"]) == 0
    note = json.loads(capsys.readouterr().out)["build_note"]
    assert note == "the log says build 0: llama.cpp built without its git history"
    assert main(["explain", str(PINNED)]) == 0
    assert f"  the log's own build cannot be told: {note}" in capsys.readouterr().out.splitlines()


def test_a_log_is_data_the_model_it_names_is_opened_only_when_told(capsys, tmp_path):
    """The path a log names may be anything its writer wrote: a URL (lltui would ask that
    host), hf: (the hub), a FIFO (the open would wait for ever). explain opens it only with
    --model-from-log (or reads --model), and never a FIFO or device."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from support.llama_fixture import write_tiny_llama

    asked: list[str] = []

    class Counting(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            asked.append(self.command)
            self.send_response(404)
            self.end_headers()

        do_GET = do_HEAD

        def log_message(self, *args: object) -> None:
            pass

    def log_naming(model: str) -> str:  # the pinned log, of a load of ``model``
        path = tmp_path / "named.log"
        path.write_text(PINNED.read_text().replace("models/tiny-llama.gguf", model))
        return str(path)

    def explained(*argv: str) -> dict:
        assert main(["explain", *argv, "--json"]) == 0
        return json.loads(capsys.readouterr().out)["model"]

    server = ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/m.gguf"
        model = explained(log_naming(url))
        assert asked == [] and model["ref"] == url and not model["header_read"]
        assert "--model-from-log" in model["note"]
    finally:
        server.shutdown()
        server.server_close()
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    for named in ("hf:someone/some-model:Q4_K_M", str(fifo)):
        model = explained(log_naming(named))
        assert model["ref"] == named and not model["header_read"]
    # told: the file the log names is read; a FIFO is refused, in one line
    model = explained(log_naming(str(fifo)), "--model-from-log")
    assert not model["header_read"] and "not a regular file" in model["note"]
    tiny = write_tiny_llama(tmp_path / "tiny.gguf")
    assert not explained(log_naming(str(tiny)))["header_read"]
    assert explained(log_naming(str(tiny)), "--model-from-log")["header_read"]
    assert explained(str(PINNED), "--model", str(tiny))["header_read"]


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("n_ctx                 = 2048", "n_ctx = 18446744073709551616", "-c 18446744073709551616"),
        ("n_batch               = 2048", "n_batch = 99999999999999999999999", "-b 9999999999999"),
        (
            "n_seq_max             = 4",
            "n_seq_max = 18446744073709551616",
            "-np 18446744073709551616",
        ),
        ("n_seq_max             = 4", "n_seq_max = 0", None),
        ("K (f16)", "K (f\u0663)", "-ctk f\u0663"),
        ("n_ctx                 = 2048", "n_ctx = \u00b2", None),
        (
            "CPU_Mapped model buffer size =     3.18",
            "CPU_Mapped model buffer size = " + "9" * 400,
            None,
        ),
        ("", "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size " + "9" * 400, None),
    ],
)
def test_numbers_no_llama_cpp_would_print_are_said_not_taken(capsys, tmp_path, old, new, said):
    """A log's value out of any range (a context of 2^64 cells, a batch of 10^23, a 400-digit
    MiB, a type spelled with an Arabic-Indic digit): the log is explained, the value named as
    not read, in text and in JSON; no internal error."""
    text = PINNED.read_text()
    assert old in text
    log = tmp_path / "odd.log"
    log.write_text(text.replace(old, new, 1) if old else f"{text}{new}\n")
    assert main(["explain", str(log), "--json"]) == 0
    out = capsys.readouterr()
    assert "internal error" not in out.err
    data = json.loads(out.out)
    if said is not None:
        assert any(w.startswith(said) for w in data["flags"]["ignored"]), data["flags"]
    assert main(["explain", str(log)]) == 0
    assert said is None or f"not read: {said}" in capsys.readouterr().out


@pytest.mark.parametrize(
    "line",
    [
        "llama_memory_recurrent:      CUDA0 RS buffer size =    50.25 MiB",
        # a weights line of its own RPC server each: the devices are capped too
        "load_tensors:      RPC0[10.0.{i}:50052] model buffer size =    50.25 MiB",
    ],
)
def test_a_hundred_thousand_buffer_lines_of_one_load(tmp_path, line):
    """Each buffer line costs the same however many came before it in the load (once, 8,000
    recurrent-state lines took 9.8 s and 100,000 did not end): every line read, the kept ones
    capped and the rest counted."""
    n = 100_000
    log = tmp_path / "many.log"
    with log.open("w") as f:
        f.write("load_tensors: loading model tensors, this can take a while... (mmap = true)\n")
        f.writelines(line.format(i=f"{i // 250 % 250}.{i % 250}") + "\n" for i in range(n))
    r = explain(ExplainRequest(str(log), ask_binary=False))
    assert r.facts.lines == n + 1 and r.facts.loads == 1
    assert len(r.checks) == MAX_BUFFERS and r.facts.buffers_dropped == n - MAX_BUFFERS
    assert len(r.devices.devices) == (MAX_DEVICES if "RPC" in line else 1)


def test_the_keys_of_a_pasted_command_are_never_shown(capsys, tmp_path):
    log = tmp_path / "with-keys.log"
    log.write_text(
        "$ llama-server -m m.gguf --api-key sk-kept-9f1 -hft hf_tok --hf-token=hf_t2 -c 4096\n"
        "load_tensors:        CUDA0 model buffer size =  3577.56 MiB\n"
    )
    for extra in ((), ("--json",)):
        main(["explain", str(log), *extra])
        out = capsys.readouterr().out
        assert "sk-kept-9f1" not in out and "hf_tok" not in out and "hf_t2" not in out
    assert main(["report", "--log", str(log), "--json"]) == 0
    report = capsys.readouterr().out
    assert "sk-kept-9f1" not in report and "hf_tok" not in report
    assert json.loads(report)  # still JSON
    command = explain(ExplainRequest(log=str(log))).facts.command
    assert command[command.index("--api-key") + 1] == "***"


def test_a_log_of_two_loads_names_the_model_of_the_one_compared(capsys, tmp_path):
    """A router's log loads alpha, then beta: beta's buffers were compared against alpha's
    file (the first path a log named was kept)."""
    text = PINNED.read_text()
    log = tmp_path / "router.log"
    log.write_text(
        text.replace("models/tiny-llama.gguf", "models/alpha.gguf")
        + text.replace("models/tiny-llama.gguf", "models/beta.gguf")
    )
    assert main(["explain", str(log), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"]["ref"] == "models/beta.gguf"


def test_a_run_appended_below_another_is_read_with_its_own_settings(tmp_path):
    """A retry appended to one file (`>> server.log`): the earlier run's flash attention
    (auto, set to enabled) was said of the later one, which never got that far."""
    both = tmp_path / "retry.log"
    both.write_bytes(
        (LOGS / "08-jamepeng78-qwen35-recurrent-rs-2026.log").read_bytes()
        + (LOGS / "11-llama20431-model-load-oom-2026.log").read_bytes()
    )
    r = explain(ExplainRequest(str(both), ask_binary=False))
    assert r.facts.loads == 2 and r.facts.flash_attn is None
    assert not any(f.startswith("-fa on") for f in r.settings.from_log)
    assert r.failed is not None and r.failed.device == "CUDA0"  # the last load's own failure


def test_a_refusal_with_room_to_spare_is_not_a_negative_shortfall():
    """ulimit -v refused 256 MiB with 24 GiB free: the JSON said short_bytes -25e9."""
    from lltui.core.explain.failure import Failed

    f = Failed("failed", 3, "oom", device="CPU", needed_bytes=256 << 20, free_bytes=24 << 30)
    assert f.short_bytes is None
    assert Failed("x", 3, "oom", needed_bytes=3 << 30, free_bytes=1 << 30).short_bytes == 2 << 30


def test_a_log_through_a_pipe_is_read_as_standard_input_is(capsys, tmp_path):
    """`lltui explain <(cat log)` said "/dev/fd/63: not a file"."""
    import threading

    fifo = tmp_path / "log.pipe"
    os.mkfifo(fifo)
    body = (LOGS / "11-llama20431-model-load-oom-2026.log").read_bytes()

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(body)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        assert main(["explain", str(fifo), "--json"]) == 0
    finally:
        writer.join(10)
    data = json.loads(capsys.readouterr().out)
    assert data["failed"]["device"] == "CUDA0"


def test_an_allocation_that_fails_after_the_model_loaded_is_the_servings(tmp_path):
    """It was said as the load's failure and held against the load's compute buffer."""
    log = tmp_path / "serving.log"
    failed = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size"
    log.write_text(f"{PINNED.read_text()}{failed} 9268435456\n")
    r = explain(ExplainRequest(str(log), ask_binary=False))
    assert r.failed is not None and r.failed.stage == "serving"
    assert r.failed.predicted_bytes is None  # no buffer of the load's to hold it against
    from lltui.core.explain.report import report_to_text

    assert "while serving, after the model loaded" in report_to_text(r)


def test_a_run_appended_that_fails_before_its_tensors_is_a_load_of_its_own(tmp_path):
    """A retry that could not open its file was load 1's failure, and "serving" (load 1
    had said "model loaded")."""
    log = tmp_path / "retry.log"
    log.write_text(
        PINNED.read_text()
        + "0.00.006.479 I srv    load_model: loading model 'models/x.gguf'\n"
        + "0.00.006.500 E gguf_init_from_file: failed to open GGUF file 'models/x.gguf'\n"
        + "0.00.006.502 E srv    load_model: failed to load model, 'models/x.gguf'\n"
    )
    r = explain(ExplainRequest(str(log), ask_binary=False))
    assert r.facts.loads == 2 and {f.load for f in r.facts.failures} == {2}
    assert r.failed is not None and r.failed.stage != "serving"


def test_a_failure_before_any_load_is_said_as_such(tmp_path):
    """ "load 1 of 1 failed ...; the verdict ... are load 1's" contradicted itself."""
    log = tmp_path / "two.log"
    log.write_text("error: invalid argument: --no-such-flag\n" + PINNED.read_text())
    r = explain(ExplainRequest(str(log), ask_binary=False))
    assert r.failed is None
    (note,) = [n for n in r.notes if "failed (line 1" in n]
    assert note.startswith("a run before load 1 failed (line 1: ")


def test_a_utf16_log_is_read_as_its_mark_says(tmp_path):
    """Windows PowerShell 5.1's `>` writes UTF-16: it was refused as binary data."""
    plain = explain(ExplainRequest(str(PINNED), ask_binary=False))
    wide = tmp_path / "server.log"
    wide.write_bytes(PINNED.read_text().encode("utf-16"))
    r = explain(ExplainRequest(str(wide), ask_binary=False))
    assert [(b.device, b.kind, b.mib_text) for b in r.facts.buffers] == [
        (b.device, b.kind, b.mib_text) for b in plain.facts.buffers
    ]
    assert any("UTF-16" in n for n in r.source.notes)


@pytest.mark.parametrize("last", ["loading model tensors", "KV buffer size", "compute buffer"])
def test_a_log_that_ends_mid_load_says_so(capsys, tmp_path, last):
    """A log cut off inside its load (a capture stopped, a paste cut short) was explained as
    if the load were whole: nothing said the buffers still to come were missing."""
    lines = PINNED.read_text().splitlines(keepends=True)
    end = next(i for i, line in enumerate(lines) if last in line) + 1
    log = tmp_path / "cut.log"
    log.write_text("".join(lines[:end]))
    said = "the log ends before its load finished"
    assert main(["explain", str(log), "--json"]) == 0
    (note,) = json.loads(capsys.readouterr().out)["notes"]
    assert note.startswith(said)
    assert main(["explain", str(log)]) == 0
    assert [n for n in capsys.readouterr().out.splitlines() if said in n] == [f"note: {note}"]
    assert not any(said in n for n in explain(ExplainRequest(str(PINNED), ask_binary=False)).notes)


def test_a_split_model_s_mapped_buffers_are_summed(capsys, tmp_path):
    """A model in two files (tests/fixtures/llama-logs/30-...): llama.cpp maps one
    CPU_Mapped buffer per file, and both lines are its weights. The first was compared with
    the whole prediction (+2.38 MiB) and the second called the same buffer printed again:
    3 of 4 lines exact, in explain and in a launch's ready line."""
    from support import gguf_factory as gf

    from lltui.core.cmdline.args import parse_llama_args
    from lltui.services.launch.compare import check_launch

    log = LOGS / "30-lltui-launch-split-model-cpu-2026.log"
    first, _ = gf.write_model(tmp_path / "sp.gguf", gf.llama_spec(), "F16", split_max_tensors=20)
    assert main(["explain", str(log), "--model", str(first), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["summary"]["compared"] == out["summary"]["exact"] == 4
    mapped = [b for b in out["buffers"] if b["device"] == "CPU_Mapped"]
    assert [b["logged_mib"] for b in mapped] == ["2.88", "2.38"]
    assert mapped[0]["exact"] and abs(mapped[0]["diff_bytes"]) < 0.01 * 2**20
    assert mapped[0]["summed_lines"] == [mapped[1]["line"]]
    assert mapped[1]["predicted_bytes"] is None and "sum" in mapped[1]["note"]
    facts = scan_lines(log.read_text().splitlines())
    check = check_launch(facts, {}, parse_llama_args([]), str(first), None)
    assert (check.compared, check.exact) == (4, 4)


def test_a_hub_that_cannot_be_reached_leaves_the_log_explained(capsys, monkeypatch):
    """--model hf:... with the hub out of reach: as a file that cannot be read (README:
    a note in model, exit 0), the log still explained; the note told the user to give
    '--model PATH or hf:OWNER/REPO', which they had."""
    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert main(["explain", str(PINNED), "--model", "hf:acme/R-GGUF:Q4_K_M", "--json"]) == 0
    model = json.loads(capsys.readouterr().out)["model"]
    assert model["header_read"] is False
    assert model["note"].startswith(
        f"no header read: hf:acme/R-GGUF:Q4_K_M: cannot reach http://127.0.0.1:{port} "
    )
    assert "give --model" not in model["note"]
