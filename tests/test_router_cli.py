"""``lltui launch --models`` without starting anything: the dry run (the router's argv and the
preset lltui would write) and the bad input it refuses in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.llama_fixture import llama_bins
from support.router_helpers import write_models

from lltui.cli import main
from lltui.core.cmdline.preset import parse_preset, section_words

__all__ = ["llama_bins"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("router-cli")
    models = write_models(root / "all")
    folder = root / "models"
    folder.mkdir()
    for name in ("alpha", "beta"):
        (folder / f"{name}.gguf").symlink_to(models[name])
    return folder


@pytest.fixture(autouse=True)
def state_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)


def test_the_dry_run_shows_the_router_and_the_preset_it_would_write(folder, capsys):
    code = main(["launch", "--models", str(folder), "-c", "512", "-t", "1", "--port", "8099",
                 "--pin", "alpha", "--dry-run", "--json"])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert len(printed.splitlines()) == 1  # JSON lines
    out = json.loads(printed)
    argv = out["argv"]
    assert argv[argv.index("--models-preset") + 1] == out["preset_path"]
    assert out["preset_path"].endswith("router-8099.ini")
    assert "--no-models-autoload" in argv and argv[argv.index("--models-max") + 1] == "0"
    assert "-c" not in argv and "-t" not in argv  # model flags go in the preset, never here
    assert not Path(out["preset_path"]).exists()  # a dry run writes nothing
    preset = parse_preset(out["preset"])
    alpha = preset.section("alpha")
    assert alpha is not None and [s.name for s in preset.sections] == ["alpha", "beta"]
    assert section_words(alpha) == [
        "--model", str(folder / "alpha.gguf"), "-c", "512", "-t", "1", "-ngl", "all",
        "--fit", "off",
    ]  # fmt: skip
    assert out["keep"] == ["alpha"] and out["plan"]["fits"] is True
    # where clients connect, in the text as in the JSON: lltui's proxy, not the router
    assert out["url"] == "http://127.0.0.1:8099" and out["env_unset"] == ["LLAMA_API_KEY"]
    assert main(["launch", "--models", str(folder), "--port", "8099", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "url:  http://127.0.0.1:8099\n" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pin", "nope"], "--pin nope: no model of that name (models: alpha, beta)"),
        (["--models-max", "2"], "--models-max: lltui runs the router itself"),
        (["--keep-running"], "--keep-running is for one server, not a router"),
        (["--save-profile", "rp"], "--save-profile is for one server, not a router"),
        (["--profile=p1"], "--profile is for one server, not a router"),
        (["-m", "x.gguf"], "a router's models come from --models, not -m"),
        (["--host", "/tmp/r.sock"], "on one TCP address; give one, or --no-on-demand"),
        (["--priority", "nope=1"], "--priority nope: no model of that name"),
    ],
)
def test_bad_router_input_is_one_line(folder, capsys, args, message):
    assert main(["launch", "--models", str(folder), *args, "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_a_wrong_name_is_offered_the_models_served(folder, tmp_path, capsys):
    """A folder's file that cannot be read is left out: it was among the choices offered
    for a --pin or --load that names no model."""
    both = tmp_path / "models"
    both.mkdir()
    for name in ("alpha", "beta"):
        (both / f"{name}.gguf").symlink_to(folder / f"{name}.gguf")
    (both / "broken.gguf").write_bytes(b"GGUF" + bytes(60))
    for flag in ("--pin", "--load"):
        assert main(["launch", "--models", str(both), flag, "nope", "--dry-run"]) == 2
        err = capsys.readouterr().err
        assert f"{flag} nope: no model of that name (models: alpha, beta)\n" in err, err
    # a left-out model pinned is dropped with the line that says why, as before
    assert main(["launch", "--models", str(both), "--pin", "broken", "--dry-run"]) == 0
    assert "broken left out" in capsys.readouterr().err


def test_a_model_typed_on_the_command_line_that_cannot_be_read_is_refused(folder, capsys):
    """It was left out with a warning and the router started with the others (exit 0); a
    folder's unreadable file is still left out, the typed path is the user's typo."""
    good = str(next(folder.glob("*.gguf")))
    assert main(["launch", good, str(folder / "nope.gguf"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.gguf: cannot read" in err[0], err


def test_a_missing_source_and_router_options_without_a_router(tmp_path, capsys):
    assert main(["launch", "--models", str(tmp_path / "nowhere.ini"), "--dry-run"]) == 2
    assert "nowhere.ini" in capsys.readouterr().err
    assert main(["launch", "m.gguf", "--pin", "a", "--dry-run"]) == 2
    assert "are for a router (--models)" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    assert main(["launch", "--models", str(empty), "--dry-run"]) == 2
    assert "no .gguf model in it" in capsys.readouterr().err


def test_how_the_preset_names_each_kind_of_model(tmp_path):
    from lltui.core.cmdline.preset import PresetError, key_flag
    from lltui.services.launch.router_prep import model_entries

    assert model_entries("m.gguf") == [("model", str(Path("m.gguf").resolve()))]
    assert model_entries("hf:acme/Chat-GGUF:Q4_K_M") == [("hf-repo", "acme/Chat-GGUF:Q4_K_M")]
    assert model_entries("hf:acme/Chat-GGUF:sub/chat-q8.gguf") == [
        ("hf-repo", "acme/Chat-GGUF"),
        ("hf-file", "sub/chat-q8.gguf"),
    ]
    assert model_entries("https://example.org/m.gguf") == [
        ("model-url", "https://example.org/m.gguf")
    ]
    with pytest.raises(PresetError, match="no @rev"):
        model_entries("hf:acme/Chat-GGUF:Q4_K_M@v2")
    # each key is one llama-server knows
    for key in ("model", "hf-repo", "hf-file", "model-url"):
        assert key_flag(key) is not None


def test_each_models_state_is_said_once_a_listing_that_left_it_out_being_no_news():
    from lltui.core.llamalog.models import DevicePlacement
    from lltui.services.launch.polls import PLACEMENT_WAIT_S, ModelNews
    from lltui.services.launch.state import ModelRow

    placed = (DevicePlacement("CPU", model_mib=1.0),)

    def row(state: str, placement: tuple = (), problem: str | None = None) -> ModelRow:
        return ModelRow("tiny", state, False, placement=placement, problem=problem)

    news = ModelNews()
    seen = []
    # loaded (its buffer lines a moment later), unloaded, left out of one listing, unloaded
    polls = ["loading", "loaded", "loaded+", "unloaded", "unknown", "unloaded", "unloaded"]
    for t, state in enumerate(polls):
        r = row("loaded", placed) if state == "loaded+" else row(state)
        seen += [n.state for n in news.changed((r,), float(t) * PLACEMENT_WAIT_S / 4)]
    assert seen == ["loading", "loaded", "unloaded"]
    # a failure with a new reason is news, the same one is not
    assert [n.problem for n in news.changed((row("failed", problem="oom"),), 9.0)] == ["oom"]
    assert news.changed((row("failed", problem="oom"),), 9.5) == []
    # a failure whose log has not said why yet waits a little for its line (its first
    # event had no problem: the router lists it failed before its child's last lines are read)
    other = ModelNews()
    assert other.changed((row("failed"),), 0.0) == []
    assert [n.problem for n in other.changed((row("failed", problem="bad"),), 0.5)] == ["bad"]


def test_a_model_the_proxy_loaded_and_evicted_between_two_polls_is_said():
    """9 loads and 7 evictions gave 4 model events: the router's list is read once a
    second, and what loaded and unloaded between two reads was never said."""
    from lltui.services.launch.polls import ModelNews
    from lltui.services.launch.state import ModelRow

    news = ModelNews()
    rows = tuple(ModelRow(n, "unloaded", False) for n in ("alpha", "beta"))
    moves = [("loading", "alpha"), ("unloaded", "alpha"), ("loading", "beta")]
    said = [(r.name, r.state) for r in news.moved(moves, rows)]
    assert said == [("alpha", "loading"), ("alpha", "unloaded"), ("beta", "loading")]
    # a poll listing both unloaded: alpha's is no news twice, beta's is
    assert [r.name for r in news.changed(rows, 0.0)] == ["beta"]


def test_a_key_in_a_preset_is_never_printed_by_the_dry_run(folder, tmp_path, capsys):
    key = "sk-preset-40c2"
    preset = tmp_path / "models.ini"
    preset.write_text(f"[alpha]\nmodel = {folder / 'alpha.gguf'}\napi-key = {key}\nc = 512\n")
    for as_json in (["--json"], []):
        assert main(["launch", "--models", str(preset), "--dry-run", *as_json]) == 0
        printed = capsys.readouterr()
        assert key not in printed.out + printed.err


def test_a_preset_of_unreadable_models_says_which_and_why(tmp_path, capsys):
    preset = tmp_path / "bad.ini"
    missing = tmp_path / "nope.gguf"
    preset.write_text(f"[a]\nmodel = {missing}\n[b]\nmodel = {tmp_path / 'we'}\0{'ird.gguf'}\n")
    assert main(["launch", "--models", str(preset), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "launch: launch:" not in err, err
    assert err.startswith("lltui: launch: no model could be read (a: ")
    assert f"{missing}: cannot read: No such file" in err
    assert "b: " in err and "a file name cannot hold a NUL byte" in err


def test_the_dry_run_says_what_each_request_would_load_or_unload(folder, capsys):
    base = ["launch", "--models", str(folder), "-c", "512", "-t", "1", "--cache-ram", "0",
            "--gpus", "1500MiB", "--port", "8099", "--dry-run", "--json"]  # fmt: skip
    assert main([*base, "--load", "alpha"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["url"] == "http://127.0.0.1:8099" and out["router_url"] != out["url"]
    assert out["on_demand"]["models"] == {
        "alpha": {"action": "loaded", "evict": [], "code": None, "reason": ""},
        "beta": {
            "action": "evict",
            "evict": ["alpha"],
            "code": None,
            "reason": "unload alpha to load beta",
        },
    }
    assert main([*base, "--pin", "alpha"]) == 0
    beta = json.loads(capsys.readouterr().out)["on_demand"]["models"]["beta"]
    assert (beta["action"], beta["code"]) == ("cannot", "pinned")
    assert main([*base, "--no-on-demand"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["on_demand"] is None and out["url"] == "http://127.0.0.1:8099"


def test_a_bad_priority_is_one_line(folder, capsys):
    code = main(["launch", "--models", str(folder), "--priority", "alpha", "--dry-run"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "lltui: launch: --priority alpha: expected NAME=N (N an integer)"
    )


def test_a_pod_on_its_own_gpu_is_not_unloaded_for_another(folder, capsys):
    alpha, beta = folder / "alpha.gguf", folder / "beta.gguf"
    code = main(["launch", "-t", "1", "-c", "512", "--cache-ram", "0",
                 str(alpha), "-dev", "CUDA0", str(beta), "-dev", "CUDA1",
                 str(beta), "-dev", "CUDA1", "--alias", "other",
                 "--gpus", "1500MiB,1500MiB", "--load", "alpha", "--load", "beta",
                 "--dry-run", "--json"])  # fmt: skip
    assert code == 0
    models = json.loads(capsys.readouterr().out)["on_demand"]["models"]
    # alpha was loaded first (the least recently used) but holds GPU0 alone: beta goes
    assert models["other"]["evict"] == ["beta"]


def test_a_preset_pins_and_ranks_models_for_lltui(folder, tmp_path, capsys):
    preset = tmp_path / "models.ini"
    preset.write_text(
        "[*]\nc = 512\ncache-ram = 0\n\n"
        f"[a]\nmodel = {folder / 'alpha.gguf'}\nlltui-pin = true\n\n"
        f"[b]\nmodel = {folder / 'beta.gguf'}\nlltui-priority = 5\n\n"
        f"[c]\nmodel = {folder / 'alpha.gguf'}\n"
    )
    code = main(["launch", "--models", str(preset), "--gpus", "2600MiB", "--load", "b",
                 "--dry-run", "--json"])  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["keep"] == ["a"]
    assert "lltui-" not in out["preset"]  # lltui's keys stay lltui's
    # c needs room: a is pinned, so b goes, its priority notwithstanding
    assert out["on_demand"]["models"]["c"]["evict"] == ["b"]
    code = main(["launch", "--models", str(preset), "--gpus", "2600MiB", "--load", "b",
                 "--pin", "b", "--dry-run", "--json"])  # fmt: skip
    c = json.loads(capsys.readouterr().out)["on_demand"]["models"]["c"]
    assert (c["action"], c["code"]) == ("cannot", "pinned")


def test_a_router_that_could_serve_nothing_is_not_started(
    folder, tmp_path, capsys, llama_bins, monkeypatch
):
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    # a context no host holds: every request would be refused, so nothing starts
    argv = ["launch", "--models", str(folder), "-c", "999999999", "--port", "8099"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("lltui: launch: no model can load, so nothing would be served: ")
    assert "alpha does not fit even alone" in err and "beta does not fit even alone" in err
    assert not (tmp_path / "state" / "lltui" / "router-8099.ini").exists()


def test_a_router_dry_run_shows_the_rpc_host_commands(folder, capsys):
    """As one server's dry run does: the ssh command of each --rpc-host it would start."""
    words = ["launch", "--models", str(folder), "--rpc-host", "fleet-a:6000", "--dry-run"]
    assert main([*words, "--json"]) == 0
    (host,) = json.loads(capsys.readouterr().out)["rpc_hosts"]
    assert "fleet-a" in host["argv"] and host["argv"][0].endswith("ssh")
    assert main(words) == 0
    assert any(line.startswith("rpc:  fleet-a: ") for line in capsys.readouterr().out.splitlines())


def test_a_log_file_is_the_routers_not_every_models(folder, tmp_path, capsys):
    """--log-file was copied into every model's section: each model's server wrote the same
    file over the one before, and the router logged nothing there."""
    log = str(tmp_path / "router.log")
    code = main(["launch", "--models", str(folder), "--log-file", log, "--port", "8099",
                 "--dry-run", "--json"])  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    argv = out["argv"]
    assert argv[argv.index("--log-file") + 1] == log
    assert "log-file" not in out["preset"]


def test_a_request_that_loaded_its_model_is_said_after_the_load(capsys):
    """`served b: ...` came before `b: loading` / `b: loaded`: in order, a model was served
    before it loaded."""
    from lltui.commands.launch_output import StatePrinter
    from lltui.core.speed.served import SpeedCheck
    from lltui.services.launch.state import LaunchState, ModelRow, RouterView, Speed, Tail

    news = Tail(limit=256).add([ModelRow("b", "loading", False), ModelRow("b", "loaded", False)])
    check = SpeedCheck(1, False, 20, 10, 1800.0, 1700.0, model="b")
    st = LaunchState(
        phase="ready",
        router=RouterView(news=news),
        speed=Speed(served=Tail(limit=16).add([check])),
    )
    StatePrinter(lambda st: [], as_json=True)(st)
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in events] == ["model", "model", "speed"]


def test_a_router_dry_run_on_demand_open_to_the_network_warns(folder, capsys):
    """The proxy's warning was said only once it started: a dry run showed nothing."""
    assert main(["launch", "--models", str(folder), "--host", "0.0.0.0", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert err.count("listening on 0.0.0.0 with no API key") == 1


def test_a_preset_that_names_its_model_by_repository_or_url_plans_it(
    folder, tmp_path, capsys, monkeypatch
):
    """hf-repo (with or without hf-file) and model-url name a model the router downloads,
    and lltui writes them so for hf: models: such a section was left out ("it names no
    model file"), so lltui's own preset read back lost them."""
    from support.hub_server import Hub, HubServer, Repo

    from lltui.sources.models import hf_hub

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_hub, "token", lambda: None)
    repo = Repo(files={"Alpha-Q8_0.gguf": folder / "alpha.gguf"})
    hub = Hub(repos={"acme/Alpha-GGUF": repo}, files={"beta.gguf": folder / "beta.gguf"})
    with HubServer(hub) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        preset = tmp_path / "models.ini"
        preset.write_text(
            "[a]\nhf-repo = acme/Alpha-GGUF\nhf-file = Alpha-Q8_0.gguf\nc = 512\n"
            "[b]\nhf-repo = acme/Alpha-GGUF:Q8_0\nc = 512\n"
            f"[c]\nmodel-url = {url}/files/beta.gguf\nc = 512\n[d]\nc = 512\n"
        )
        assert main(["launch", "--models", str(preset), "--dry-run", "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        written = parse_preset(out["preset"])
        assert [s.name for s in written.sections] == ["a", "b", "c"]
        a, b, c = written.sections
        assert (a.get("hf-repo"), a.get("hf-file")) == ("acme/Alpha-GGUF", "Alpha-Q8_0.gguf")
        assert (b.get("hf-repo"), c.get("model-url")) == (
            "acme/Alpha-GGUF:Q8_0",
            f"{url}/files/beta.gguf",
        )
        assert len(out["plan"]["models"]) == 3
        # lltui's own preset read back plans the same models
        own = tmp_path / "own.ini"
        own.write_text(out["preset"])
        assert main(["launch", "--models", str(own), "--dry-run", "--json"]) == 0
        again = parse_preset(json.loads(capsys.readouterr().out)["preset"])
        assert [s.name for s in again.sections] == ["a", "b", "c"]


def test_fit_plans_a_router_command_line_as_launch_does(folder, tmp_path, capsys):
    """llama-server --models-preset FILE (or --models-dir DIR) with no model serves the
    file's (the folder's) models: fit said "no model" and planned none of them."""
    preset = tmp_path / "models.ini"
    preset.write_text(f"[chat]\nmodel = {folder / 'alpha.gguf'}\nc = 512\n[x]\nc = 1\n")
    gpus = ["--gpus", "24GiB", "--json"]
    assert main(["fit", "--models-preset", str(preset), "-t", "1", *gpus]) == 0
    out = json.loads(capsys.readouterr().out)
    (chat,) = out["models"]
    assert chat["name"] == "chat" and chat["n_ctx"] == 512
    assert any("[x] left out" in n for n in out["notes"])
    assert main(["fit", "--models-dir", str(folder), "-c", "512", *gpus]) == 0
    names = [m["name"] for m in json.loads(capsys.readouterr().out)["models"]]
    assert names == ["alpha", "beta"]
    # one model's plan says so in the singular ("1 models ... they fit together")
    assert main(["fit", "--models-preset", str(preset), "-t", "1", "--gpus", "24GiB"]) == 0
    assert capsys.readouterr().out.startswith("1 model on CUDA0 and the host: it fits\n")
    both = ["--models-dir", str(folder), "--models-preset", str(preset)]
    assert main(["fit", *both, *gpus]) == 2
    assert capsys.readouterr().err.strip() == (
        "lltui: fit: give --models-dir or --models-preset, not both"
    )


def test_fit_leaves_out_a_folders_unreadable_model_as_launch_does(folder, tmp_path, capsys):
    """fit --models-dir DIR gave up on every model (exit 2, no plan) for one truncated
    .gguf, where launch --models DIR leaves it out with a line and serves the others."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "alpha.gguf").symlink_to(folder / "alpha.gguf")
    (mixed / "broken.gguf").write_bytes((folder / "beta.gguf").read_bytes()[:100_000])
    gpus = ["--gpus", "24GiB", "-c", "512"]
    assert main(["launch", "--models", str(mixed), "--dry-run", *gpus]) == 0
    said = capsys.readouterr().err
    (line,) = [n for n in said.splitlines() if "broken left out: " in n]
    why = line.removeprefix("lltui: warning: ")
    assert main(["fit", "--models-dir", str(mixed), *gpus, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [m["name"] for m in out["models"]] == ["alpha"] and why in out["notes"]
    assert main(["fit", "--models-dir", str(mixed), *gpus]) == 0
    assert f"note: {why}\n" in capsys.readouterr().out
    (mixed / "alpha.gguf").unlink()
    assert main(["fit", "--models-dir", str(mixed), *gpus]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lltui: fit: no model could be read (broken: ") and "\n" not in err


def test_the_router_command_line_overrides_the_preset(folder, tmp_path, capsys):
    """llama-server's router gives a model its preset's [*], then its own section, then the
    router's command line, each over the one before (the pinned build started the model of
    ``--models-preset P -c 2048`` with a section's ``c = 1024`` at --ctx-size 2048): lltui
    had the file over the command line, planning and launching it at 1024."""
    preset = tmp_path / "models.ini"
    preset.write_text(
        f"[*]\nc = 256\nt = 2\n[a]\nmodel = {folder / 'alpha.gguf'}\nc = 1024\n"
        f"[b]\nmodel = {folder / 'beta.gguf'}\n"
    )
    gpus = ["--gpus", "24GiB", "--json"]
    assert main(["fit", "--models-preset", str(preset), *gpus]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [m["n_ctx"] for m in plan["models"]] == [1024, 256]  # the file alone
    assert main(["fit", "--models-preset", str(preset), "-c", "2048", *gpus]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [m["n_ctx"] for m in plan["models"]] == [2048, 2048]
    code = main(["launch", "--models", str(preset), "-c", "2048", "--port", "8099",
                 "--dry-run", "--json"])  # fmt: skip
    assert code == 0
    written = parse_preset(json.loads(capsys.readouterr().out)["preset"])
    for name in ("a", "b"):
        section = written.section(name)
        assert section is not None
        words = section_words(section)
        assert words[words.index("-c") + 1] == "2048" and words[words.index("-t") + 1] == "2"


def test_a_models_aliases_stay_in_the_preset_written(folder, tmp_path, capsys):
    """A preset section's alias (chat, assistant) names the model to llama-server's router
    too, but lltui wrote the preset without it: a client's request for chat through lltui
    was 404 model_not_found. An alias that is another model's name, or an earlier model's
    alias, is left out: the router would not start on the clash."""
    preset = tmp_path / "models.ini"
    preset.write_text(
        f"[a]\nmodel = {folder / 'alpha.gguf'}\nalias = chat, assistant,b\n"
        f"[b]\nmodel = {folder / 'beta.gguf'}\nalias = chat\n"
    )
    flags = ["--port", "8099", "--dry-run", "--json"]
    assert main(["launch", "--models", str(preset), *flags]) == 0
    written = parse_preset(json.loads(capsys.readouterr().out)["preset"])
    assert [s.get("alias") for s in written.sections] == ["chat,assistant", None]
    # on the command line, the first alias names the model, the others stay its aliases
    words = [str(folder / "alpha.gguf"), "--alias", "x,y", str(folder / "beta.gguf"), "-a", "x"]
    assert main(["launch", *words, *flags]) == 0
    written = parse_preset(json.loads(capsys.readouterr().out)["preset"])
    assert [(s.name, s.get("alias")) for s in written.sections] == [("x", "y"), ("x-2", None)]


def test_a_folders_entries_that_are_not_models_say_why(folder, tmp_path, capsys):
    """A .gguf the folder's scan passed over was said to be 'not .gguf': a broken link
    (its model deleted from the cache it pointed into) and a projector alone alike."""
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    (mixed / "alpha.gguf").symlink_to(folder / "alpha.gguf")
    (mixed / "gone.gguf").symlink_to(tmp_path / "deleted.gguf")
    (mixed / "mmproj-f16.gguf").write_bytes(b"GGUF")
    (mixed / "notes.txt").write_text("")
    assert main(["launch", "--models", str(mixed), "--port", "8099", "--dry-run"]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "not a model" in line]
    assert said == [
        f"lltui: warning: {mixed}: 3 not a model: gone.gguf (a broken link), mmproj-f16.gguf "
        "(a projector beside no model of its own), notes.txt"
    ]


def _ot_rules(args):
    """The -ot rules of a planned model's flags."""
    return [args[i + 1] for i, w in enumerate(args) if w == "-ot"]


def _preset_plan(preset, capsys, *flags):
    """lltui fit's plan (--json) of a preset's models on one 24 GiB GPU, and their -ot rules."""
    assert main(["fit", "--models-preset", str(preset), *flags, "--gpus", "24GiB", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    return plan, [_ot_rules(m["args"]) for m in plan["models"]]


def test_a_later_preset_layer_replaces_the_tensor_overrides(folder, tmp_path, capsys):
    """llama-server's router keeps one value an option for each model ([*], its section, the
    router's command line, each over the one before): the pinned build started a section's
    ``override-tensor = blk\\.0...`` under ``-ot blk\\.1...`` with only blk.1's. lltui
    added -ot (and --rpc) up across the layers, planning and writing both rules."""
    preset = tmp_path / "models.ini"
    zero, one, two = (rf"blk\.{i}\.ffn_.*=CPU" for i in range(3))
    preset.write_text(
        f"[*]\noverride-tensor = {two}\n[a]\nmodel = {folder / 'alpha.gguf'}\n"
        f"override-tensor = {zero}\n[b]\nmodel = {folder / 'beta.gguf'}\n"
    )
    assert _preset_plan(preset, capsys)[1] == [[zero], [two]]
    assert _preset_plan(preset, capsys, "-ot", one)[1] == [[one], [one]]
    code = main(["launch", "--models", str(preset), "-ot", one, "--port", "8099",
                 "--dry-run", "--json"])  # fmt: skip
    assert code == 0
    written = parse_preset(json.loads(capsys.readouterr().out)["preset"])
    for name in ("a", "b"):
        section = written.section(name)
        assert section is not None
        assert _ot_rules(section_words(section)) == [one]


def test_the_python_api_plans_a_router_command_line_as_fit_does(folder, tmp_path, capsys):
    """plan_models([], flags=["--models-preset", FILE]) said "fit: no model could be read"
    where lltui fit planned the preset's models; with nothing at all it said the same."""
    from lltui.api import plan_models

    preset = tmp_path / "models.ini"
    preset.write_text(f"[chat]\nmodel = {folder / 'alpha.gguf'}\nc = 512\n[x]\nc = 1\n")
    got = plan_models([], flags=["--models-preset", str(preset), "-t", "1"], gpus="24GiB")
    assert (
        main(["fit", "--models-preset", str(preset), "-t", "1", "--gpus", "24GiB", "--json"]) == 0
    )
    cli = json.loads(capsys.readouterr().out)  # (the host's free memory is measured twice)
    assert [m["args"] for m in got["models"]] == [m["args"] for m in cli["models"]]
    assert got["notes"] == cli["notes"]
    assert [m["name"] for m in got["models"]] == ["chat"]
    assert any("[x] left out" in n for n in got["notes"])
    dir_plan = plan_models([], flags=f"--models-dir {folder} -c 512", gpus="24GiB")
    assert [m["name"] for m in dir_plan["models"]] == ["alpha", "beta"]
    with pytest.raises(ValueError, match=r"^fit: no model given"):
        plan_models([], gpus="24GiB")
    with pytest.raises(ValueError, match=r"not both$"):
        plan_models([], flags=["--models-dir", str(folder), "--models-preset", str(preset)])


def test_a_preset_repository_with_no_tag_plans_the_file_the_router_picks(
    folder, tmp_path, capsys, monkeypatch
):
    """hf-repo = OWNER/REPO with no quantization: llama-server's router loads Q4_K_M's file,
    else Q8_0's, else the first model (find_best_model); lltui asked for a quantization and
    left the model out."""
    from support.hub_server import Hub, HubServer, Repo

    from lltui.sources.models import hf_hub

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_hub, "token", lambda: None)
    alpha, beta = folder / "alpha.gguf", folder / "beta.gguf"
    repos = {
        "acme/Alpha-GGUF": Repo(  # no Q4_K_M: Q8_0's, not the head nor the first listed
            files={"Alpha-F16.gguf": beta, "Alpha-Q8_0.gguf": alpha, "mtp-Alpha-Q8_0.gguf": beta}
        ),
        "acme/Beta-GGUF": Repo(files={"x/Beta-BF16.gguf": beta, "y/Beta-F16.gguf": alpha}),
        "acme/None-GGUF": Repo(files={"mmproj-F16.gguf": alpha}),
    }
    with HubServer(Hub(repos=repos)) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        preset = tmp_path / "models.ini"
        preset.write_text(
            "[a]\nhf-repo = acme/Alpha-GGUF\nc = 512\n[b]\nhf-repo = acme/Beta-GGUF\nc = 512\n"
            "[n]\nhf-repo = acme/None-GGUF\nc = 512\n"
        )
        assert main(["launch", "--models", str(preset), "--dry-run", "--json"]) == 0
        got = capsys.readouterr()
    out = json.loads(got.out)
    a, b = parse_preset(out["preset"]).sections
    assert (a.get("hf-repo"), a.get("hf-file")) == ("acme/Alpha-GGUF", "Alpha-Q8_0.gguf")
    assert (b.get("hf-repo"), b.get("hf-file")) == ("acme/Beta-GGUF", "x/Beta-BF16.gguf")
    assert len(out["plan"]["models"]) == 2
    assert "[n] left out: hf:acme/None-GGUF: no GGUF model in this repository" in got.err


def test_a_flag_given_twice_in_one_router_layer_keeps_the_last(folder, tmp_path, capsys):
    """llama-server's router reads its command line and each preset section into one value
    an option: the pinned build started ``-ot A -ot B`` on the router's command line, and
    ``override-tensor`` twice in a section, with only the last rule. lltui planned both and
    wrote them comma-joined. A plain llama-server adds them up: kept there."""
    preset = tmp_path / "models.ini"
    zero, one, two, three = (rf"blk\.{i}\.ffn_.*=CPU" for i in range(4))
    preset.write_text(
        f"[*]\noverride-tensor = {two}\noverride-tensor = {three}\n"
        f"[a]\nmodel = {folder / 'alpha.gguf'}\noverride-tensor = {zero}\n"
        f"override-tensor = {one}\n[b]\nmodel = {folder / 'beta.gguf'}\n"
    )
    plan, rules = _preset_plan(preset, capsys)
    assert rules == [[one], [three]]
    said = [n for n in plan["notes"] if "given 2 times" in n]
    assert [n.split(":")[1] for n in said] == [" [*]", " [a]"]
    assert said[1].endswith(f"keeps only the last, --override-tensor {one} (give one, its values "
                            "comma-separated)")  # fmt: skip
    ot = ["-ot", zero, "-ot", one]
    plan, rules = _preset_plan(preset, capsys, *ot)
    assert rules == [[one], [one]]
    assert any(n.startswith("the command line: -ot is given 2 times") for n in plan["notes"])
    code = main(["launch", "--models", str(preset), *ot, "--port", "8099", "--dry-run", "--json"])
    assert code == 0
    written = parse_preset(json.loads(capsys.readouterr().out)["preset"])
    assert [written.section(n).get("ot") for n in ("a", "b")] == [one, one]  # type: ignore[union-attr]
    # one model, no router: llama-server adds the rules up
    code = main(
        ["launch", str(folder / "alpha.gguf"), *ot, "--port", "8099", "--dry-run", "--json"]
    )
    assert code == 0
    assert _ot_rules(json.loads(capsys.readouterr().out)["argv"]) == [zero, one]


def test_pin_load_and_priority_take_a_models_alias(folder, tmp_path, capsys):
    """The router serves [alpha] under its alias chat too, yet `--pin chat` (and --load,
    --priority) said 'no model of that name'."""
    from lltui.services.launch.router import RouterSession
    from lltui.services.launch.router_prep import RouterRequest

    preset = tmp_path / "models.ini"
    preset.write_text(
        f"[alpha]\nmodel = {folder / 'alpha.gguf'}\nalias = chat,helper\n"
        f"[beta]\nmodel = {folder / 'beta.gguf'}\n"
    )
    base = ["launch", "--models", str(preset), "-c", "512", "--dry-run", "--json"]
    assert main([*base, "--pin", "chat"]) == 0
    assert json.loads(capsys.readouterr().out)["keep"] == ["alpha"]
    assert main([*base, "--load", "helper", "--load", "beta"]) == 0
    assert json.loads(capsys.readouterr().out)["load"] == ["alpha", "beta"]
    request = RouterRequest(source=str(preset), words=("-c", "512"), priority=(("chat", 3),))
    with RouterSession(request) as session:
        assert session.prepare(require_binary=False).priority == (("alpha", 3),)
    assert main([*base, "--pin", "nope"]) == 2
    assert "--pin nope: no model of that name (models: alpha, beta)" in capsys.readouterr().err


def test_the_dry_run_says_which_loads_at_start_would_be_refused(folder, capsys):
    """`--load alpha --load beta` where beta does not fit beside alpha: the run refuses beta
    once the router is ready (a request for it later unloads alpha), the dry run said only
    'beta: would unload alpha, then load', as if --load beta were done so."""
    base = ["launch", "--models", str(folder), "-c", "512", "-t", "1", "--cache-ram", "0",
            "--gpus", "1500MiB", "--load", "alpha", "--load", "beta", "--dry-run"]  # fmt: skip
    assert main([*base, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (line,) = out["load_refused"].values()
    assert list(out["load_refused"]) == ["beta"]
    assert line.startswith("beta does not fit with alpha loaded: CUDA0 has ")
    assert line.endswith("; unload alpha first")
    assert out["on_demand"]["models"]["beta"]["evict"] == ["alpha"]
    assert main(base) == 0
    assert f"\nrefused at start: {line}\n" in capsys.readouterr().out
    assert main([*base[:-5], "--load", "alpha", "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["load_refused"] == {}


def test_host_free_sets_the_host_memory_the_plan_assumes(folder, capsys):
    """As fit's --host-free: the router's plan with the host memory given, not what was
    free at that moment (launch had no --host-free)."""
    base = ["launch", "--models", str(folder), "-c", "512", "-t", "1", "--cache-ram", "0",
            "--gpus", "1500MiB", "--dry-run", "--json"]  # fmt: skip
    assert main([*base, "--host-free", "64GiB"]) == 0
    models = json.loads(capsys.readouterr().out)["on_demand"]["models"]
    assert {m["action"] for m in models.values()} == {"load"}
    assert main([*base, "--host-free", "1MiB"]) == 0
    out = json.loads(capsys.readouterr().out)
    host = next(d for d in out["plan"]["devices"] if d["name"] == "CPU")
    assert host["free_bytes"] == 2**20
    assert {m["code"] for m in out["on_demand"]["models"].values()} == {"host_memory"}
