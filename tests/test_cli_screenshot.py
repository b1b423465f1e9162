import os
import stat
import subprocess
import sys

from lltui.cli import main


def test_screenshot_writes_an_svg_of_the_simulated_rig(tmp_path, capsys):
    out = tmp_path / "shot.svg"
    code = main(["--source", "sim:2x3090-nvlink", "--screenshot", str(out), "--size", "100x30"])
    assert code == 0
    svg = out.read_text()
    assert svg.startswith("<svg") and "SIMULATED" in svg and "RTX&#160;3090" in svg
    # it shows every process on the GPUs, other users' too: private, whatever the umask
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_a_screenshot_over_a_shared_file_makes_it_private(tmp_path, capsys):
    out = tmp_path / "shot.svg"
    out.write_text("old")
    os.chmod(out, 0o644)
    assert main(["--source", "sim:colab-t4", "--screenshot", str(out), "--size", "80x24"]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600 and out.read_text().startswith("<svg")


def test_screenshot_bad_size_and_view_are_usage_errors(tmp_path, capsys):
    assert main(["--source", "sim:colab-t4", "--screenshot", "x.svg", "--size", "huge"]) == 2
    assert "--size" in capsys.readouterr().err
    assert main(["--source", "sim:colab-t4", "--screenshot", "x.svg", "--view", "nope"]) == 2
    assert "unknown view" in capsys.readouterr().err


def test_an_unknown_theme_is_a_warning_a_screenshot_says(tmp_path, capsys):
    """The app's notice is a toast; a screenshot taken without a screen says it on stderr."""
    out = tmp_path / "shot.svg"
    argv = ["--source", "sim:colab-t4", "--screenshot", str(out), "--theme", "nope"]
    assert main(argv) == 0 and out.is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["lltui: warning: theme 'nope' not found; using dark"]


def test_python_dash_m_runs_the_cli():
    proc = subprocess.run(
        [sys.executable, "-m", "lltui", "--version"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0 and proc.stdout.startswith("lltui ")
