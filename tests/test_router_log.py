"""A router's log sorted out per model server, and its /models list, on a capture of the real
pinned llama-server in router mode (tests/fixtures/router)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lltui.core.llama.router_api import parse_router_models
from lltui.core.llamalog.router import RouterLogReader, parse_router_log

FIXTURES = Path(__file__).parent / "fixtures" / "router"


@pytest.fixture(scope="module")
def log_text() -> str:
    return (FIXTURES / "models-dir.log").read_text()


def test_each_model_server_gets_its_own_lines(log_text):
    s = parse_router_log(log_text)
    assert s.router.ready and s.router.listening == ("http://127.0.0.1:18590",)
    assert s.available == (
        ("models_dir", "alpha"),
        ("models_dir", "beta"),
        ("models_dir", "broken"),
    )
    assert [(i.name, i.state, i.exit_status) for i in s.instances] == [
        ("alpha", "exited", 0),
        ("broken", "exited", 1),
        ("beta", "exited", 0),  # stopped with the router at the end
    ]
    alpha = s.latest("alpha")
    assert alpha is not None and alpha.log.ready and not alpha.failed
    # its own buffers, not the other servers': the router forwards each line with a port
    assert {(b.name, b.model_mib, b.kv_mib, b.compute_mib) for b in alpha.log.buffers} == {
        ("CPU_Mapped", 1.66, 0.0, 0.0),
        ("CPU", 0.0, 0.5, 4.02),
    }
    beta = s.latest("beta")
    assert beta is not None and beta.log.memory.context_int("n_ctx") == 512
    assert {b.name: b.model_mib for b in beta.log.buffers}["CPU_Mapped"] == 7.07


def test_the_spawned_arguments_and_the_failure_line(log_text):
    s = parse_router_log(log_text)
    alpha = s.latest("alpha")
    assert alpha is not None
    assert alpha.args[1:5] == ("--host", "127.0.0.1", "--log-colors", "off")
    assert alpha.args[alpha.args.index("--alias") + 1] == "alpha"
    broken = s.latest("broken")
    assert broken is not None and broken.failed and not broken.log.ready
    # the cause, not the lines that repeat it up the stack
    assert (
        broken.problem()
        == "gguf_init_from_reader: invalid magic characters: 'garb', expected 'GGUF'"
    )


def test_states_follow_the_lines_as_they_come(log_text):
    parser = RouterLogReader()
    states = []
    for line in log_text.splitlines():
        if "model" in parser.feed(line):
            inst = parser.router_summary().latest("alpha")
            states.append(inst.state if inst is not None else None)
    assert states[:3] == ["loading", "loaded", "loaded"]
    assert "stopping" in states and states[-1] == "exited"
    # the router's own events only: its model servers' "listening" lines are not its own
    parser = RouterLogReader()
    ready_lines = [line for line in log_text.splitlines() if "ready" in parser.feed(line)]
    assert ready_lines == ["0.00.017.984 I srv  llama_server: listening on http://127.0.0.1:18590"]


def test_the_router_model_list():
    models = parse_router_models(json.loads((FIXTURES / "models.json").read_text()))
    by_name = {m.name: m for m in models}
    assert by_name["broken"].state == "unloaded" and by_name["broken"].failed
    assert by_name["broken"].exit_code == 1
    assert by_name["beta"].state == "loaded" and by_name["beta"].resident
    assert not by_name["alpha"].resident and not by_name["alpha"].failed
    assert by_name["alpha"].source == "models_dir"
    with pytest.raises(ValueError, match="data array"):
        parse_router_models({"models": []})


def test_a_hostile_log_stays_bounded():
    parser = RouterLogReader()
    for i in range(200):
        spawn = f"spawning server instance with name=m{i} on port {1000 + i}"
        parser.feed(f"0.00.000.001 I srv          load: {spawn}")
        parser.feed(f"0.00.000.002 I srv           run: instance name=m{i} exited with status 1")
    parser.feed("[99999] not a port of ours")
    s = parser.router_summary()
    assert len(s.instances) <= 64
    assert s.latest("m199") is not None and s.latest("m199").failed


def test_the_routers_scan_of_a_file_that_is_not_gguf_is_not_a_failure(log_text):
    """The router's scan of its models folder prints gguf's reason for the bad file (line 8)
    with no load after it; the model server that loads the file fails with it (line 243)."""
    from lltui.core.llamalog.exit_reason import exit_reason
    from lltui.core.llamalog.reader import parse_log
    from lltui.services.launch.router import router_exit
    from lltui.sources.llama.supervisor import ServerExit

    assert not parse_router_log(log_text).router.memory.failures
    first = parse_log(log_text).memory.failures[0]
    assert first.line == 243 and "invalid magic characters: 'garb'" in first.message
    lines = log_text.splitlines()
    assert exit_reason(1, lines).endswith(": invalid magic characters: 'garb', expected 'GGUF'")
    crashed = ServerExit(1, "", (), stopped=False, was_ready=True)
    assert router_exit(crashed, lines).reason == "llama-server exited with code 1"


def test_a_router_stopped_cleanly_is_not_blamed_for_a_models_failed_load(log_text):
    """The log holds one model's failed load (forwarded as ``[port] ...``); the router itself
    stopped cleanly when asked: its end is judged on its own lines."""
    from lltui.core.llamalog.exit_reason import exit_reason
    from lltui.services.launch.router import router_exit
    from lltui.sources.llama.supervisor import ServerExit

    lines = log_text.splitlines()
    as_one_server = exit_reason(0, lines, stopped=True, supervised=True)
    assert as_one_server.startswith("llama-server could not load the model")  # said before
    asked = ServerExit(0, as_one_server, tuple(lines[-20:]), stopped=True, was_ready=True)
    judged = router_exit(asked, lines)
    assert judged.reason == "stopped" and judged.clean
    assert judged.log_tail == asked.log_tail  # the tail shown is still the whole log's
    # stopped by someone else: the router's own clean-up line says so, not a model's
    outside = router_exit(replace(asked, stopped=False), lines)
    assert outside.from_outside and outside.reason.startswith("stopped by a signal from outside")
