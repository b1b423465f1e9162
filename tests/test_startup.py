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
