"""What a plain `lltui` leaves for later: the subcommands' modules, the other views and their
CSS (bench/startup.py measures the time; these check that the work is not done)."""

import subprocess
import sys

from lltui.cli import main, wants_command


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_only_a_subcommand_or_help_loads_the_subcommands():
    assert not wants_command(["--source", "sim:4xl4", "--interval", "2"])
    assert not wants_command(["--screenshot", "x.svg", "--view", "topology"])
    assert wants_command(["gpus", "--json"])
    assert wants_command(["--source", "sim:4xl4", "fit", "m.gguf"])
    assert wants_command(["-h"])
    lean = _modules_after("from lltui.cli import build_parser\nbuild_parser(with_commands=False)")
    assert not {m for m in lean if m.startswith("lltui.commands.") and m != "lltui.commands.output"}


def test_a_usage_error_still_lists_the_subcommands(capsys):
    assert main(["--source", "sim:kaggle-2xt4", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'bogus'" in err and "gpus" in err


def test_help_wraps_to_the_terminal_width(monkeypatch):
    from lltui.cli import build_parser

    for columns in (50, 120):
        monkeypatch.setenv("COLUMNS", str(columns))
        text = build_parser().format_help()
        assert max(len(line) for line in text.splitlines()) <= columns - 2
        # the options' help is wrapped to the width, not to argparse's default
        assert max(len(line) for line in text.splitlines()) > columns - 12, columns
    monkeypatch.setenv("COLUMNS", "not a number")
    assert build_parser().format_help()  # the terminal's, else 80


def test_every_help_expands_as_its_option_is_added(monkeypatch):
    """Python 3.14 expands each option's help as it is added (a help that needs more than
    the option holds then is refused): the same check here, for every command's options."""
    import argparse

    from lltui.cli import build_parser

    real = argparse.ArgumentParser._add_action
    checked: list[str] = []

    def add(self: argparse.ArgumentParser, action: argparse.Action) -> argparse.Action:
        if action.help and action.help is not argparse.SUPPRESS:
            text = self._get_formatter()._expand_help(action)
            assert "%(" not in text, action.dest
            checked.append(action.dest)
        return real(self, action)

    monkeypatch.setattr(argparse.ArgumentParser, "_add_action", add)
    build_parser()
    assert {"source", "sub_source"} <= set(checked) and len(checked) > 40


def test_the_app_module_leaves_the_other_views_and_their_css_for_later():
    mods = _modules_after("import lltui.app.app")
    later = {
        "lltui.app.screens.fit",
        "lltui.app.screens.launch",
        "lltui.app.screens.topology",
        "lltui.app.screens.nccl",
        "lltui.app.screens.help",
        "lltui.app.screens.gpu_detail",
    }
    assert not mods & later
    from pathlib import Path

    import lltui.app

    css = (Path(lltui.app.__file__).parent / "lltui.tcss").read_text(encoding="utf-8")
    assert "#fit-" not in css and "#launch-" not in css and "#topo-" not in css


def test_a_screenshot_of_the_monitor_leaves_the_signal_dialog_and_psutil_for_later(tmp_path):
    shot = tmp_path / "shot.svg"
    mods = _modules_after(
        "from lltui.cli import main\n"
        f"assert main(['--source', 'sim:kaggle-2xt4', '--screenshot', {str(shot)!r}]) == 0"
    )
    assert "lltui.app.screens.monitor" in mods  # it did draw the monitor
    assert not mods & {"lltui.app.screens.signal_dialog", "lltui.sources.gpu.signals", "psutil"}


async def test_a_simulated_rig_is_sampled_before_the_monitor_is_composed(monkeypatch):
    """Its first layout has the cards' lines: no relayout when the first sample lands."""
    from support.app_helpers import sim_app

    from lltui.app.screens.monitor import MonitorScreen
    from lltui.app.widgets.gpu_card import GpuCard

    app = sim_app("kaggle-2xt4", start_polling=True)
    at_compose: list[int] = []
    compose = MonitorScreen.compose

    def spy(screen: MonitorScreen):  # type: ignore[no-untyped-def]
        at_compose.append(app.samples_applied)
        return compose(screen)

    monkeypatch.setattr(MonitorScreen, "compose", spy)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert at_compose == [1]
        assert len(app.screen.query(GpuCard)) == 2
        assert app.poller.polls == 0  # the poller takes the next one, an interval later


async def test_the_first_frame_parses_the_stylesheet_once_with_the_theme_chosen(monkeypatch):
    from support.app_helpers import sim_app

    app = sim_app("kaggle-2xt4", theme="light", start_polling=True)
    reparses: list[object] = []
    monkeypatch.setattr(app.stylesheet, "reparse", lambda: reparses.append(1))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert reparses == []
        assert app.screen.styles.background == app.current_theme.to_color_system().background


def test_collection_is_back_on_after_the_app_ran_or_failed(tmp_path):
    import gc

    from lltui.cli import main

    assert main(["--source", "sim:colab-t4", "--screenshot", "x.svg", "--size", "huge"]) == 2
    assert gc.isenabled()
    assert main(["--source", "sim:colab-t4", "--screenshot", str(tmp_path / "s.svg")]) == 0
    assert gc.isenabled()


def test_a_fit_run_as_the_program_collects_nothing_and_freezes_its_objects_for_the_exit(
    tmp_path,
):
    from support import gguf_factory as gf

    model = gf.write_sparse(tmp_path / "m.gguf", gf.llama_spec(n_layer=2), "F16")
    code = (
        "import gc, sys\nfrom lltui.cli import main\n"
        "sys.argv = ['lltui', *sys.argv[1:]]\nrc = main()\n"
        "print(rc, gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)"
    )

    def state(*words: str) -> str:
        run = [sys.executable, "-c", code, *words]
        return subprocess.run(run, capture_output=True, text=True, check=True).stderr.split()

    for verb in ("fit", "quant"):
        assert state(verb, str(model), "--gpus", "4090") == ["0", "False", "True"], verb
    # a command that may run on (and a caller's main([...])) collects as usual
    assert state("gpus", "--source", "sim:colab-t4") == ["0", "True", "False"]
    import gc

    frozen = gc.get_freeze_count()  # (the app's run in this process may have frozen some)
    assert main(["fit", str(model), "--gpus", "4090"]) == 0
    assert gc.isenabled() and gc.get_freeze_count() <= frozen
