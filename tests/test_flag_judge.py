"""The real llama-server judges lltui's reading of its flags.

Each command line of tests/support/flag_cases.py goes to the pinned llama-server with a model path
that does not exist: its argument errors come before it opens the model, so "exiting due to
model loading error" means it accepted the flags, an argument error that it refused them.
The binary's verdict must be the recorded one, and ``lltui fit --json``, ``lltui launch
--dry-run --json`` and the parser must agree with it: refuse in one line naming the flag
what it refuses, accept with the same settings what it accepts, and refuse alike the values
that mean nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.flag_cases import CASES, Case
from support.flag_checks import check_fit, check_launch, check_parser, names_the_flag, same_settings
from support.llama_fixture import llama_bins

from lltui.cli import main
from lltui.sources.llama.binary import probe
from lltui.sources.llama.supervisor import binary_flags

__all__ = ["llama_bins"]  # a session fixture used by name

pytestmark = pytest.mark.slow
CASE_TIMEOUT_S = 30.0
ACCEPTED = "exiting due to model loading error"
REFUSED = ("error: invalid argument", "error while handling argument", "expected value")


def server_verdict(server: Path, case: Case, env: dict[str, str]) -> str:
    """ok, refuse or crash, from llama-server itself (no model is ever loaded)."""
    # the case first: its flags are read before ours, and our --port 0 wins over any port
    argv = [str(server), *case.argv, "-m", "/nonexistent/lltui-judge.gguf"]
    argv += ["--host", "127.0.0.1", "--port", "0"]
    try:
        done = subprocess.run(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=CASE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return "timeout"
    text = done.stdout + done.stderr
    if ACCEPTED in text:
        return "ok"
    if done.returncode == 1 and any(r in text for r in REFUSED):
        return "refuse"
    return "crash"


@pytest.fixture(scope="module")
def judged(llama_bins) -> dict[str, str]:
    server = llama_bins.binaries["llama-server"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "GGML_"))}
    with ThreadPoolExecutor(max_workers=4) as pool:
        verdicts = pool.map(lambda c: server_verdict(server, c, env), CASES)
        return {c.id: v for c, v in zip(CASES, verdicts, strict=True)}


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("judge") / "m.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    return path


def test_llama_server_gives_the_recorded_verdicts(judged):
    wrong = {c.id: (judged[c.id], c.server) for c in CASES if judged[c.id] != c.server}
    assert not wrong, f"llama-server's verdict (got, recorded): {wrong}"


def launch_cli(case: Case, model: Path, capsys) -> str | None:
    rc = main(["launch", str(model), *case.argv, "--dry-run", "--json"])
    out, err = capsys.readouterr()
    if rc != 0:
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and "Traceback" not in err, (case.id, err)
        return lines[0]
    data = json.loads(out)
    assert data["binary"]["flags_checked"] is True
    same_settings(case, data["argv"][1:])
    return None


def test_fit_launch_and_the_parser_agree_with_llama_server(
    judged, llama_bins, model, capsys, monkeypatch
):
    server = llama_bins.binaries["llama-server"]
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(server))
    for name in [k for k in os.environ if k.startswith(("LLAMA_ARG_", "LLAMA_API_KEY"))]:
        monkeypatch.delenv(name)
    binary = binary_flags(probe(server))
    problems = []
    for case in CASES:
        accepted = judged[case.id] == "ok" and case.lltui == "ok"
        answers = {
            "parser": check_parser(case),
            "launch (this binary)": check_launch(case, str(model), binary),
            "lltui launch": launch_cli(case, model, capsys),
            "lltui fit": check_fit(case, model, capsys),
        }
        for where, error in answers.items():
            if accepted and error is not None:
                problems.append(f"{where} refused {case.id!r}, llama-server took it: {error}")
            elif not accepted and error is None:
                problems.append(f"{where} accepted {case.id!r} ({judged[case.id]})")
            elif error is not None and not names_the_flag(case, error):
                problems.append(f"{where} on {case.id!r}: {error!r} does not name the flag")
    assert not problems, "\n".join(problems)
