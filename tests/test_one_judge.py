"""fit and launch judge a command line alike: what `lltui fit` refuses, `lltui launch` refuses
too (dry run or not), with the same line; what fit accepts, a dry run prints."""

from __future__ import annotations

import pytest
from support import gguf_factory as gf
from support.llama_fixture import llama_bins

from lltui.cli import main

__all__ = ["llama_bins"]  # a session fixture used by name
pytestmark = pytest.mark.slow  # launch checks flags against the real llama-server


@pytest.fixture
def server_env(llama_bins, monkeypatch):
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)


# command lines an outside probe found launch accepting and fit refusing, and some fit takes
LINES = [
    (["-md", "/nonexistent/draft.gguf"], 2),
    (["--mmproj", "/x"], 2),
    (["--lora", "/nonexistent/adapter.gguf"], 2),
    (["-dev", "-1"], 2),
    (["-dev", "mmap+mlock"], 2),
    (["-dev", "CUDA7"], 2),
    (["-ctv", "q8_0", "-fa", "off"], 2),  # a quantized V needs flash attention
    (["-c", "4096", "-np", "2"], 0),
    (["-ngl", "0", "-ctk", "q8_0"], 0),
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("judge") / "m.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    return path


@pytest.mark.parametrize(
    ("flags", "want"), LINES, ids=lambda v: " ".join(v) if isinstance(v, list) else str(v)
)
def test_fit_and_launch_judge_alike(server_env, model, flags, want, capsys):
    # the devices launch's llama-server (a CPU build) has: none (without --gpus, fit sizes
    # for the rig in use, which on a machine without a GPU is the simulated one)
    fit_rc = main(["fit", str(model), *flags, "--gpus", "cpu"])
    fit_err = capsys.readouterr().err.strip().splitlines()
    launch_rc = main(["launch", str(model), *flags, "--dry-run"])
    launch_out, launch_err = capsys.readouterr()
    assert (fit_rc, launch_rc) == (want, want), (fit_err, launch_err)
    if want:
        # the same reason, one line each (each names its own verb)
        assert len(fit_err) == 1 and len(launch_err.strip().splitlines()) == 1, launch_err
        assert fit_err[0].split(": ", 2)[-1] == launch_err.strip().split(": ", 2)[-1]
    else:
        assert launch_out.startswith("argv: ")
