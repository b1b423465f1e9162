"""Config precedence and validation; themes as data, failing soft."""

import asyncio
from pathlib import Path

import pytest
from support.app_helpers import sim_app

from lltui.app.themes import BUILTIN_NAMES, load_user_themes, theme_from_mapping
from lltui.config import ConfigError, load_settings

REPO = Path(__file__).resolve().parents[1]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_without_a_file():
    s = load_settings(environ={})
    assert (s.interval, s.theme, s.source, s.config_path) == (1.0, "dark", "auto", None)


def test_precedence_defaults_file_env_cli(isolated_config):
    write(isolated_config / "config.toml", 'interval = 2.0\ntheme = "light"\nsource = "sim:4xl4"\n')
    s = load_settings(environ={})
    assert (s.interval, s.theme, s.source) == (2.0, "light", "sim:4xl4")
    s = load_settings(environ={"LLTUI_INTERVAL": "5", "LLTUI_THEME": "high-contrast"})
    assert (s.interval, s.theme, s.source) == (5.0, "high-contrast", "sim:4xl4")
    s = load_settings({"interval": 0.5, "theme": None}, environ={"LLTUI_INTERVAL": "5"})
    assert (s.interval, s.theme) == (0.5, "light")


def test_keymap_merges_from_the_file(isolated_config):
    write(isolated_config / "config.toml", '[keymap]\npause = "x"\n')
    assert load_settings(environ={}).keymap == {"pause": "x"}


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("interval = 0.01\n", "between 0.25 and 3600"),
        ('interval = "fast"\n', "number of seconds"),
        ("interval = true\n", "number of seconds"),  # float(True) is 1: it was 1 s
        ("history_minutes = true\n", "history_minutes must be a number"),
        ("colour = 1\n", "unknown setting 'colour'"),
        ("interval = \n", "config.toml"),
        ("[keymap]\npause = 3\n", "keymap"),
    ],
)
def test_bad_config_names_the_file_and_problem(isolated_config, text, needle):
    write(isolated_config / "config.toml", text)
    with pytest.raises(ConfigError, match=needle):
        load_settings(environ={})


def test_bad_env_is_named():
    with pytest.raises(ConfigError, match="LLTUI_"):
        load_settings(environ={"LLTUI_INTERVAL": "soon"})


def test_explicit_missing_config_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_settings(path=tmp_path / "nope.toml", environ={})


def test_cli_bad_config_is_one_line_and_exit_2(isolated_config, capsys):
    from lltui.cli import main

    write(isolated_config / "config.toml", "interval = -1\n")
    assert main(["--source", "sim:colab-t4"]) == 2
    err = capsys.readouterr().err.strip()
    assert "interval" in err and len(err.splitlines()) == 1


def test_example_themes_in_the_repo_load():
    result = load_user_themes(REPO / "themes")
    assert result.failures == ()
    names = {t.name for t in result.themes}
    assert {"solarized-rig", "paper"} <= names
    paper = next(t for t in result.themes if t.name == "paper")
    assert paper.variables["bar-vram"]  # defaults fill what the file leaves out


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"primary": "#fff"}, "needs a name"),
        ({"name": "x"}, "primary"),
        ({"name": "dark", "primary": "#fff"}, "built-in"),
        ({"name": "x", "primary": "not-a-colour"}, "not a colour"),
        ({"name": "x", "primary": "#fff", "sparkle": 1}, "unknown key"),
        ({"name": "x", "primary": "#fff", "variables": {"bar-vram": "nope"}}, "not a colour"),
        ({"name": "x", "primary": "#fff", "dark": "yes"}, "true or false"),
        # what Textual's stylesheet cannot take broke the app (an internal error), or hung
        # it (footer-key-foreground); a name that is no CSS class name broke it too
        ({"name": "x", "primary": "#fff", "variables": {"scrollbar": "zzz"}}, "not a colour"),
        ({"name": "x", "primary": "#fff", "variables": {"footer-key-foreground": "zzz"}}, "colour"),
        ({"name": "x", "primary": "#fff", "variables": {"link-style": "zzz"}}, "text style"),
        ({"name": "x", "primary": "#fff", "variables": {"scrolbar": "red"}}, "no such variable"),
        ({"name": "my theme", "primary": "#fff"}, "letters, digits"),
        ({"name": "a.b", "primary": "#fff"}, "letters, digits"),
    ],
)
def test_invalid_theme_data_is_rejected_with_a_reason(data, needle):
    with pytest.raises(ValueError, match=needle):
        theme_from_mapping(data)


def test_broken_theme_file_notifies_and_falls_back(isolated_config):
    themes = isolated_config / "themes"
    write(themes / "broken.toml", 'name = "broken"\nprimary = \n')
    write(themes / "good.toml", 'name = "good"\nprimary = "#ff8800"\n')

    async def run():
        app = sim_app(theme="broken")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            return app.theme, app.theme_failures, "good" in app.available_themes

    theme, failures, good_loaded = asyncio.run(run())
    assert theme == "dark"
    assert good_loaded
    assert any("broken.toml" in f for f in failures)
    assert any("not found" in f for f in failures)


def test_builtin_themes_are_registered():
    async def run():
        app = sim_app(theme="high-contrast")
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            return app.theme, set(BUILTIN_NAMES) <= set(app.available_themes)

    assert asyncio.run(run()) == ("high-contrast", True)


def test_textual_variables_that_are_well_formed_are_kept():
    ok = {
        "scrollbar": "#123456",
        "link-style": "bold not underline",
        "block-cursor-foreground": "auto 87%",
        "footer-key-foreground": "ansi_red",
    }
    theme = theme_from_mapping({"name": "my-theme_2", "primary": "#fff", "variables": ok})
    assert {k: theme.variables[k] for k in ok} == ok


def test_watch_and_exporter_take_the_interval_from_the_environment_and_file(
    isolated_config, monkeypatch
):
    """The README's layers (defaults, file, LLTUI_*, the command line) held for the app and
    --source, but watch and the exporter polled every second whatever they said."""
    import argparse

    from lltui.commands import command_interval

    assert command_interval(argparse.Namespace()) == 1.0
    write(isolated_config / "config.toml", "interval = 3\n")
    assert command_interval(argparse.Namespace()) == 3.0
    monkeypatch.setenv("LLTUI_INTERVAL", "5")
    assert command_interval(argparse.Namespace()) == 5.0
    assert command_interval(argparse.Namespace(interval=7.0)) == 7.0
    assert command_interval(argparse.Namespace(interval=7.0, sub_interval=2.0)) == 2.0


def test_a_theme_file_that_is_a_fifo_is_reported_not_waited_on(tmp_path):
    """Theme files are read as the config file is: a FIFO hung the app's start."""
    import os

    os.mkfifo(tmp_path / "stuck.toml")
    write(tmp_path / "good.toml", 'name = "good"\nprimary = "#ff8800"\n')
    loaded = load_user_themes(tmp_path)
    assert [t.name for t in loaded.themes] == ["good"]
    assert loaded.failures == ("stuck.toml: not a regular file",)
