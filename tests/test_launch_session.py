"""The launch session both front ends use: requests read the same way, profiles that start
from any folder, port 0, the inherited key, and how a server's end is told. No server runs
here: the binary lookup and the Supervisor are stood in for where a test needs them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.launch_proc import FakeSupervisor, RecordedPoll, no_server

from lltui.app.state.launch import form_request, preview_command
from lltui.core.cmdline.launch_spec import LaunchError, LaunchSpec
from lltui.core.llamalog.exit_reason import (
    STOPPED_FROM_OUTSIDE,
    exit_reason,
    exit_sentence,
    stopped_from_outside,
)
from lltui.services.launch import request as S
from lltui.services.launch.controller import LaunchController
from lltui.services.launch.session import LaunchSession
from lltui.services.launch.state import describe_exit
from lltui.sources.llama import profiles
from lltui.sources.llama.supervisor import ServerExit, ServerStatus

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llama-server"  # see its README.md
KEY = "sk-session-51f0a9"


@pytest.fixture
def no_binary(monkeypatch):
    """The binary lookup as on a machine without llama-server: flags go unchecked."""
    monkeypatch.setattr(
        "lltui.sources.llama.launch_prep.find_binary",
        lambda required: ("llama-server", None, None, "no llama-server in this test"),
    )
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)


_TINY: dict[str, bytes] = {}


def model_file(directory: Path, name: str = "m.gguf") -> Path:
    """A tiny real GGUF (fit reads its header before a start), written once per run."""
    from support import gguf_factory as gf

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    if "llama" not in _TINY:
        import tempfile

        with tempfile.TemporaryDirectory() as scratch:
            gf.write_model(Path(scratch) / "tiny.gguf", gf.SPECS["llama"](), "F16")
            _TINY["llama"] = (Path(scratch) / "tiny.gguf").read_bytes()
    path.write_bytes(_TINY["llama"])
    return path


def prepare(*words: str, **kw) -> S.PreparedLaunch:
    with LaunchSession(S.LaunchRequest(words=words)) as session:
        return session.prepare(require_binary=False, **kw)


# --- how a server's end is told --------------------------------------------------------------


def test_a_shutdown_lltui_did_not_ask_for_is_a_signal_from_outside():
    lines = (FIXTURES / "shutdown_sigterm_lv4.log").read_text().splitlines()
    assert stopped_from_outside(0, lines, stopped=False)
    assert not stopped_from_outside(0, lines, stopped=True)
    assert not stopped_from_outside(1, lines, stopped=False)
    assert exit_reason(0, lines, supervised=True) == STOPPED_FROM_OUTSIDE
    assert exit_reason(0, lines, stopped=True, supervised=True) == "stopped"
    # a server that exits 0 with no shutdown in its log (--version among the flags) is not one
    assert exit_reason(0, ["version: 1 (abc)"], supervised=True) == "llama-server exited"


def test_an_outside_stop_is_not_clean_and_no_words_are_doubled():
    outside = ServerExit(
        0, STOPPED_FROM_OUTSIDE, (), stopped=False, was_ready=True, from_outside=True
    )
    assert not outside.clean
    assert describe_exit(outside) == f"llama-server exited (code 0): {STOPPED_FROM_OUTSIDE}"
    own = ServerExit(0, "llama-server exited", (), stopped=False, was_ready=True)
    assert own.clean and describe_exit(own) == "llama-server exited (exit code 0)"
    stopped = ServerExit(0, "stopped", (), stopped=True, was_ready=True)
    assert describe_exit(stopped) == "llama-server stopped (exit code 0)"
    assert exit_sentence(1, "model not found: m.gguf", clean=False) == (
        "llama-server exited (code 1): model not found: m.gguf"
    )
    for sentence in map(describe_exit, (outside, own, stopped)):
        assert "llama-server llama-server" not in sentence


# --- reading a request -----------------------------------------------------------------------


def test_profile_options_are_taken_out_of_the_words():
    assert S.split_profile_options(["-c", "1", "--profile", "a", "--save-profile=b"]) == (
        "a",
        "b",
        ["-c", "1"],
    )
    with pytest.raises(LaunchError, match="--profile needs a NAME"):
        S.split_profile_options(["--profile"])


def test_a_request_reads_the_profile_then_the_form_then_the_flags(tmp_path):
    profiles.save_profile("p", LaunchSpec.of("/m.gguf", ["-c", "1024"], port=9000))
    given = S.read_request(
        S.LaunchRequest(words=("--profile", "p", "--port", "9002"), host="127.0.0.1", port=9001)
    )
    assert (given.spec.model, given.spec.args.n_ctx, given.spec.port) == ("/m.gguf", 1024, 9002)
    assert given.profile == "p" and "model" in given.from_profile
    form = S.read_request(S.LaunchRequest(words=("--profile", "p"), port=9001))
    assert form.spec.port == 9001  # the form's address over the profile
    first = S.read_request(S.LaunchRequest(words=("x.gguf", "-c", "8")))
    assert first.spec.model == "x.gguf" and "model" not in first.from_profile
    with pytest.raises(LaunchError, match="given twice"):
        S.read_request(S.LaunchRequest(words=("-m", "a.gguf"), model="b.gguf"))
    with pytest.raises(LaunchError, match="api-key-file"):
        S.read_request(
            S.LaunchRequest(words=("--api-key", KEY), model="a.gguf", keys_on_command_line=False)
        )


def test_settings_already_read_give_the_spec_their_flags_give():
    from lltui.core.cmdline.args import parse_llama_args

    words = ("-c", "4096", "-ts", "3,1", "-fa", "on", "-ctk", "q8_0", "--jinja")
    args = parse_llama_args(words)
    carried = S.read_request(S.LaunchRequest(args=args, model="m.gguf")).spec
    typed = S.read_request(S.LaunchRequest(words=words, model="m.gguf")).spec
    assert carried == typed
    assert carried.args.n_ctx == 4096 and carried.args.tensor_split == (3.0, 1.0)
    assert "--jinja" in carried.args.ignored  # passed on, not read
    assert carried.args.to_argv() == ["-m", "m.gguf", *words]


# --- profiles start from any folder ----------------------------------------------------------


def test_a_profile_saved_in_one_folder_starts_from_another(tmp_path, monkeypatch, no_binary):
    models = tmp_path / "models"
    model_file(models)
    (models / "keys").write_text(f"{KEY}\n")
    monkeypatch.chdir(models)
    prepare("m.gguf", "-c", "512", "--api-key-file", "keys", "--save-profile", "here")
    data = profiles.spec_to_dict(profiles.load_profile("here"))
    assert data["model"] == str(models / "m.gguf")  # absolute, resolved when saved
    assert data["api_key_file"] == str(models / "keys")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    prepared = prepare("--profile", "here", "-c", "256")
    argv = prepared.command.argv
    assert argv[argv.index("-m") + 1] == str(models / "m.gguf")
    assert argv[argv.index("-c") + 1] == "256"
    assert argv[argv.index("--api-key-file") + 1] == str(models / "keys")
    assert KEY not in " ".join(prepared.command.display_argv())
    assert prepared.http_key == KEY  # the poller reads /metrics with the file's key


def test_a_profile_whose_model_moved_is_one_line_naming_both(tmp_path, monkeypatch, no_binary):
    model = model_file(tmp_path / "models")
    prepare(str(model), "--save-profile", "gone")
    model.rename(tmp_path / "moved.gguf")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LaunchError) as err:
        prepare("--profile", "gone")
    message = str(err.value)
    assert err.value.code == 2 and "\n" not in message
    assert "profile 'gone'" in message and str(model) in message
    # a model given on the command line replaces the profile's, and that one is there
    prepared = prepare("--profile", "gone", str(tmp_path / "moved.gguf"))
    assert str(tmp_path / "moved.gguf") in prepared.command.argv


def test_port_zero_is_a_free_port_and_stays_zero_in_the_profile(tmp_path, no_binary):
    model = model_file(tmp_path)
    prepared = prepare(str(model), "--port", "0", "--save-profile", "any")
    assert prepared.spec.port != 0 and prepared.given.spec.port == 0
    argv = prepared.command.argv
    assert argv[argv.index("--port") + 1] == str(prepared.spec.port)
    assert profiles.spec_to_dict(profiles.load_profile("any"))["port"] == 0


def test_an_inherited_key_locks_the_server_but_is_not_saved(tmp_path, monkeypatch, no_binary):
    model = model_file(tmp_path)
    monkeypatch.setenv("LLAMA_API_KEY", KEY)
    prepared = prepare(str(model), "--save-profile", "env")
    assert prepared.spec.api_key == KEY and prepared.http_key == KEY
    assert dict(prepared.command.env_set)["LLAMA_API_KEY"] == KEY
    assert KEY not in prepared.command.shell_line()
    assert "api_key" not in profiles.spec_to_dict(profiles.load_profile("env"))


def test_a_preview_saves_nothing_and_checks_nothing(tmp_path, no_binary):
    prepared = prepare(
        str(tmp_path / "not-yet.gguf"), "--save-profile", "x", save=False, check=False
    )
    assert prepared.command.argv[0] == "llama-server"
    assert profiles.list_profiles() == []
    with pytest.raises(LaunchError, match="model not found"):
        prepare(str(tmp_path / "not-yet.gguf"))


def test_notes_reach_the_front_end(tmp_path, no_binary):
    model = model_file(tmp_path)
    notes: list[S.Note] = []
    request = S.LaunchRequest(words=(str(model), "--api-key", KEY, "--save-profile", "n"))
    with LaunchSession(request, on_note=notes.append) as session:
        session.prepare(require_binary=False)
    levels = [n.level for n in notes]
    assert levels == ["warning", "info", "note"], notes
    assert all(KEY not in n.text for n in notes)


# --- the view uses the same session ----------------------------------------------------------


def test_the_view_starts_from_a_profile_with_port_zero_like_the_cli(
    tmp_path, monkeypatch, no_binary
):
    model = model_file(tmp_path / "models")
    key_file = tmp_path / "keys"
    key_file.write_text(f"{KEY}\n")
    prepare(str(model), "-c", "512", "--api-key-file", str(key_file), "--save-profile", "v")
    no_server(monkeypatch)
    monkeypatch.chdir(tmp_path)
    ctl = LaunchController(lambda: None, lambda: None)
    ctl.start(form_request("", "--profile v", "127.0.0.1:0"))
    assert ctl.state.phase == "loading", ctl.state.message
    (sup,) = FakeSupervisor.made
    port = sup.kw["port"]
    assert port != 0 and sup.kw["url"] == f"http://127.0.0.1:{port}"
    argv = sup.command.argv
    assert argv[argv.index("-m") + 1] == str(model) and argv[argv.index("-c") + 1] == "512"
    assert RecordedPoll.made == [(f"http://127.0.0.1:{port}", KEY)]
    assert KEY not in " ".join(ctl.state.argv)
    ctl.stop()
    assert sup.stops == 1
    assert ctl.state.phase == "exited"
    assert ctl.state.message == "llama-server stopped (exit code 0)"


def test_the_view_names_a_moved_profile_model(tmp_path, monkeypatch, no_binary):
    model = model_file(tmp_path / "models")
    prepare(str(model), "--save-profile", "moved")
    os.unlink(model)
    ctl = LaunchController(lambda: None, lambda: None)
    ctl.start(form_request("", "--profile moved", "127.0.0.1:8080"))
    assert ctl.state.phase == "error"
    assert "profile 'moved'" in ctl.state.message and str(model) in ctl.state.message


def test_the_views_preview_reads_profiles_too(tmp_path, no_binary):
    model = model_file(tmp_path)
    prepare(str(model), "-c", "333", "--save-profile", "pv")
    line, note = preview_command("", "--profile pv", "127.0.0.1:8099")
    assert "-c 333" in line and "--port 8099" in line and str(model) in line
    assert note == "flags not checked: no llama-server in this test"


def test_the_views_router_preview_leaves_the_routers_own_port_to_start(tmp_path, no_binary):
    """Served on demand, the router listens on a loopback port found free when Start runs:
    the preview showed a port of its own finding instead (another at each edit), not the
    one Start runs nor where clients connect."""
    from lltui.services.launch.router import RouterSession

    models = tmp_path / "models"
    model_file(models, "a.gguf")
    model_file(models, "b.gguf")
    line, note = preview_command(str(models), "-c 512", "127.0.0.1:8099")
    assert (line, note) == preview_command(str(models), "-c 512", "127.0.0.1:8099")
    with RouterSession(form_request(str(models), "-c 512", "127.0.0.1:8099")) as session:
        started = session.prepare(require_binary=False).launch
    port = f" --port {started.spec.port} "
    assert port in started.command.shell_line()
    assert line == started.command.shell_line().replace(port, " --port PORT ")
    assert note is not None and "models load on demand at http://127.0.0.1:8099 (" in note


def test_the_views_router_listens_where_its_flags_say_as_one_server_does(tmp_path, no_binary):
    """--port among the flags: one server and lltui launch --models listen there; the view's
    router listened on the listen field's port instead, and its preview said so."""
    models = tmp_path / "models"
    model_file(models, "a.gguf")
    model_file(models, "b.gguf")
    one, _note = preview_command(str(models / "a.gguf"), "--port 8097", "127.0.0.1:8099")
    assert "--port 8097" in one
    _line, note = preview_command(str(models), "--port 8097", "127.0.0.1:8099")
    assert note is not None and "models load on demand at http://127.0.0.1:8097 (" in note


# --- secrets: every secret flag gets the API key's treatment ----------------------------------

TOKEN = "hf_TopSecretToken4711"


def test_a_token_never_reaches_argv_a_display_or_a_world_readable_profile(tmp_path, no_binary):
    model = model_file(tmp_path)
    prepared = prepare(str(model), "-hft", TOKEN, "--save-profile", "tok")
    command = prepared.command
    assert TOKEN not in " ".join(command.argv), "ps would show it"
    assert dict(command.env_set)["HF_TOKEN"] == TOKEN, "llama-server reads it from HF_TOKEN"
    assert TOKEN not in command.shell_line() and TOKEN not in repr(command)
    assert TOKEN not in repr(prepared.spec)
    assert command.display_env()["HF_TOKEN"] == "***"
    path = profiles.profile_path("tok")
    assert path.stat().st_mode & 0o077 == 0, "a profile with a secret is private"
    assert profiles.load_profile("tok").hf_token == TOKEN


def test_the_cli_dry_run_masks_the_token(tmp_path, no_binary, capsys):
    from lltui.cli import main

    model = model_file(tmp_path)
    assert main(["launch", str(model), "--hf-token", TOKEN, "--dry-run", "--json"]) == 0
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    assert "HF_TOKEN" in out.out


def test_an_exported_token_is_passed_on_and_shown_masked(tmp_path, monkeypatch, no_binary):
    from lltui.core.cmdline.launch_spec import relevant_inherited_env

    model = model_file(tmp_path)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    prepared = prepare(str(model))
    shown = relevant_inherited_env(os.environ, prepared.command)
    assert shown["HF_TOKEN"] == "***"
    assert "HF_TOKEN" not in prepared.command.env_unset  # the child inherits it


def test_the_view_refuses_secrets_among_its_flags(tmp_path, no_binary):
    with pytest.raises(LaunchError, match="HF_TOKEN"):
        S.read_request(
            S.LaunchRequest(words=("-hft", TOKEN), model="m.gguf", keys_on_command_line=False)
        )
    with pytest.raises(LaunchError, match="masked"):
        LaunchSpec.of("m.gguf", env=(("HF_TOKEN", TOKEN),))


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "not a regular file"),  # /dev/zero: reading it would never end
        (b"k" * (1024 * 1024 + 1), "over 1024 KiB"),
        (b"# only a comment\n\n", "holds no key"),
    ],
)
def test_a_key_file_is_read_within_bounds(tmp_path, no_binary, content, words):
    model = model_file(tmp_path)
    if content is None:
        key_file = "/dev/zero"
    else:
        key_file = str(tmp_path / "keys")
        Path(key_file).write_bytes(content)
    with pytest.raises(LaunchError, match=words) as caught:
        prepare(str(model), "--api-key-file", key_file)
    assert caught.value.code == 2


def test_a_key_file_gives_its_keys_as_llama_server_reads_them(tmp_path, no_binary):
    from lltui.sources.llama.launch_prep import read_key_file

    keys = tmp_path / "keys"
    keys.write_bytes(b"# comment\nsk-one\n\nsk-two\n")
    assert read_key_file(str(keys)) == ("sk-one", "sk-two")


def test_a_launch_that_does_not_fit_offers_a_launch_command_that_does(tmp_path, monkeypatch):
    """No GPU, a host with little free: refused with the whole command that fits (the
    suggestion checked by estimating it), its address kept, its key left out."""
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.services.fit import FitRequest, estimate_setup, prepare
    from lltui.services.launch.check import judge
    from lltui.sources.models.demo import write_demo

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no GPU here
    monkeypatch.setattr(
        "lltui.sources.gpu.meminfo.host_available", lambda: (1024 + 14) * 2**20
    )  # 1 GiB kept (fit target)
    model = tmp_path / "demo.gguf"
    write_demo(model)
    spec = LaunchSpec.of(str(model), ["-c", "4096"], port=9000, api_key=KEY)
    verdict = judge(spec)
    assert verdict.fits is False
    problem = verdict.problem
    assert problem.startswith("does not fit: the host needs") and KEY not in problem
    # a key typed on the command line is asked for again, never printed: copied without
    # it, the suggestion started an unlocked server
    assert " (and your --api-key, which is not printed)" in problem
    command = problem.split("): lltui launch ", 1)[1].split(" (and your --api-key", 1)[0].split()
    assert command[:2] == ["-m", str(model)] and command[-2:] == ["--port", "9000"]
    fixed = parse_llama_args(command[:-2])
    setup = prepare(FitRequest(str(model), fixed, verb="launch"))
    assert estimate_setup(setup).fits  # what it offers fits


def test_an_abort_is_told_by_ggml_s_own_line_not_the_debugger_s():
    # what a GGML_ABORT leaves in the log: its FILE:LINE line, then gdb's backtrace
    lines = [
        "/src/llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:88: CUDA error",
        "Using host libthread_db library",
        "#2  0x000055a34415b718 in ggml_abort ()",
    ]
    assert exit_reason(-6, lines) == "llama-server aborted: CUDA error"


@pytest.mark.parametrize("name", ["nl\n", "../x", "a/b", "", ".hidden", "x.toml"])
def test_a_profile_name_is_a_plain_file_name(name, tmp_path):
    """'nl\\n' passed the name check ('$' matches before a final newline): a file named
    with a newline was written."""
    with pytest.raises(profiles.ProfileError, match="must be letters"):
        profiles.profile_path(name, tmp_path)


@pytest.mark.parametrize("url", ["not a url ::", "127.0.0.1:99999", "http://127.0.0.1:0"])
def test_following_what_is_no_server_url_is_one_line(url):
    """A typed address that is no URL: said in the view's state, no watch started (a bad
    port was followed as "down" for ever; a garbled one only made a toast)."""
    ctl = LaunchController(lambda: None, lambda: None)
    ctl.follow(url)
    assert ctl.state.phase == "error" and "expected an http" in ctl.state.message
    assert "\n" not in ctl.state.message
    ctl.close()


def test_load_steps_say_the_context_once_its_compute_buffers_are_known():
    """Each load step is said once: the context was said at the KV cache's line, before the
    compute reserve, as 'CPU KV 144 + compute 0 MiB' for a server that then reserved 52 MiB;
    and a device with no KV cache (or no compute buffer) read 'KV 0' or 'compute 0'."""
    from lltui.core.llamalog.reader import LogReader, parse_log
    from lltui.services.launch.watch import LoadProgress, load_steps

    reader, progress, said = LogReader(), LoadProgress(0.0), []
    for line in (FIXTURES / "server_lv4_full.log").read_text().splitlines():
        reader.feed(line)  # one line at a time: the slowest a log can come
        said += progress.lines(reader.summary(), 0.0)
    assert "context allocated: CPU KV 4 + compute 6 MiB" in said
    assert not [s for s in said if " 0 MiB" in s or " 0 +" in s], said
    # a buffer under one MiB read 'CPU KV 0 + compute 6 MiB' beside the ready line's 'KV
    # 0.50 MiB' (a 512-token context of the demo model)
    small = (FIXTURES / "server_lv4_full.log").read_text()
    small = small.replace("model buffer size =     3.18 MiB", "model buffer size =     0.16 MiB")
    small = small.replace("CPU KV buffer size =     4.00 MiB", "CPU KV buffer size =     0.50 MiB")
    steps = load_steps(parse_log(small))
    assert steps["weights"] == "weights placed: CPU_Mapped 0.16 MiB"
    assert steps["context"] == "context allocated: CPU KV 0.50 + compute 6 MiB"
    vulkan = Path(__file__).resolve().parent / "fixtures" / "llama-logs"
    log = parse_log((vulkan / "06-llama14854-vulkan-cpu-split-setrows0-2025.log").read_text())
    assert load_steps(log)["context"] == (
        "context allocated: Vulkan0 KV 384 + compute 1252 MiB, CPU KV 192 MiB, "
        "Vulkan_Host compute 26 MiB"
    )


class ReplaySupervisor(FakeSupervisor):
    """A real server's log replayed whole as the server starts (faster than any tick of a
    watch), ready at its listening line as the real supervisor is."""

    def start(self) -> None:
        from lltui.core.llamalog.reader import LogReader

        self.reader = LogReader()
        for line in (FIXTURES / "server_lv4_full.log").read_text().splitlines():
            events = self.reader.feed(line)
            self.kw["on_line"](line)
            if "ready" in events:
                self.is_ready = True
                self.kw["on_event"]("ready")

    def status(self) -> ServerStatus:
        state = "ready" if self.is_ready else "loading"
        return ServerStatus(state, self.pid, self.kw["url"] or "", 200, self.reader.summary(), None)

    def facts(self):
        return self.reader.summary().memory


def test_every_load_step_is_said_once_in_order_however_slow_the_tick(
    tmp_path, monkeypatch, no_binary
):
    """A load that ends between two ticks still says each step its log shows, in order,
    before the ready state: the ready fold said none (a tiny model, ready within the 0.1 s
    tick, printed no load line at all four times in five; a busy machine lost the last)."""
    import threading

    from lltui.core.llamalog.reader import parse_log
    from lltui.services.launch.watch import LaunchWatch, load_steps

    monkeypatch.setattr("lltui.sources.llama.supervisor.Supervisor", ReplaySupervisor)
    ready = threading.Event()
    seen: list = []

    def changed(st) -> None:
        seen.append(st)
        if st.ready_at is not None:
            ready.set()

    model = model_file(tmp_path)
    with LaunchSession(S.LaunchRequest(words=(str(model), "-c", "512"))) as session:
        session.prepare(require_binary=False)
        watch = LaunchWatch(session, changed, tick_s=60.0)  # far slower than the log
        try:
            watch.start()
            assert ready.wait(10), "never ready"
        finally:
            watch.close()
    steps = tuple(load_steps(parse_log((FIXTURES / "server_lv4_full.log").read_text())).values())
    assert len(steps) == 4 and steps[-1] == "model loaded; warming up"
    first_ready = next(st for st in seen if st.ready_at is not None)
    assert first_ready.progress.items == steps  # each once, in order, before the ready line
    assert watch.state.progress.items == steps


def test_a_launch_says_it_set_an_unreadable_calibration_store_aside(tmp_path, monkeypatch):
    """fit's check before a launch read this rig's calibration store and set a cut-short
    one aside, its line kept in fit's notes, which a launch never shows: the store was
    renamed without a word. The launch's notes now say it, once."""
    from lltui.services.bench import local_rig
    from lltui.services.launch.check import judge
    from lltui.sources.gpu import rig_store
    from lltui.sources.gpu.cpu import local_host
    from lltui.sources.models.demo import write_demo

    monkeypatch.setitem(sys.modules, "pynvml", None)  # no GPU here: the host's rig
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    model = tmp_path / "demo.gguf"
    write_demo(model)
    store = rig_store.record_path(local_rig([], local_host()))
    store.parent.mkdir(parents=True)
    store.write_text('{"format": 1,')
    verdict = judge(LaunchSpec.of(str(model), ["-c", "512"]))
    said = [n for n in verdict.notes if "could not be read" in n]
    assert len(said) == 1 and said[0].startswith(f"the calibration store {store} ")
    assert not store.exists() and rig_store.kept_aside(store)
