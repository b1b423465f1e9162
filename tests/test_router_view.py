"""The launch view with a router, real: a preset in the model field starts llama-server's
router; its models show in a table that follows loads made through the router's own API,
loads from the table go through the plan (a refusal is one line naming what to unload), and
Stop or quitting the app leaves none of the router's processes behind. Requests to the
view's address load models on demand; the table says what a request would unload."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

import httpx
import pytest
from support.app_helpers import sim_app, wait_for
from support.llama_fixture import free_port, llama_bins, rpc_servers
from support.router_helpers import all_gone, group_members, write_models

from lltui.app.screens.launch import LaunchScreen
from lltui.app.widgets.router_table import RouterTable

__all__ = ["llama_bins"]

pytestmark = pytest.mark.slow
WAIT_S = 90.0


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_models(tmp_path_factory.mktemp("view-models"))


@pytest.fixture
def server_env(llama_bins, monkeypatch, tmp_path):
    monkeypatch.setenv("LLTUI_LLAMA_SERVER", str(llama_bins.binaries["llama-server"]))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("LLAMA_API_KEY", raising=False)


def write_preset(path: Path, models: dict[str, Path], ep: str) -> Path:
    path.write_text(
        "[*]\nc = 512\nthreads = 1\nno-warmup = true\n\n"
        f"[one]\nmodel = {models['alpha']}\nrpc = {ep}\n\n"
        f"[two]\nmodel = {models['beta']}\nrpc = {ep}\n\n"
        f"[three]\nmodel = {models['gamma']}\n"
    )
    return path


def ready(app) -> bool:
    return app.launch.state.phase == "ready"


def router_rows(app) -> tuple:
    view = app.launch.state.router
    return view.rows if view is not None else ()


def row_of(app, name: str):
    return next(r for r in router_rows(app) if r.name == name)


def router_note(app) -> str:
    view = app.launch.state.router
    return (view.note if view is not None else None) or ""


def row_state(screen: LaunchScreen, name: str) -> str:
    table = screen.query_one("#launch-models", RouterTable)
    try:
        return str(table.get_cell(name, "state"))
    except Exception:  # not shown yet
        return ""


async def select(pilot, screen: LaunchScreen, name: str) -> None:
    table = screen.query_one("#launch-models", RouterTable)
    table.focus()
    table.move_cursor(row=table.get_row_index(name))
    await pilot.pause()


async def test_the_view_follows_the_router_and_gates_its_loads(
    models, server_env, llama_bins, tmp_path
):
    port = free_port()
    app = sim_app("kaggle-2xt4")
    router = None
    with rpc_servers(llama_bins, 1, tmp_path) as rpcs:
        preset = write_preset(tmp_path / "m.ini", models, f"127.0.0.1:{rpcs[0].port}")
        try:
            async with app.run_test(size=(160, 50)) as pilot:
                await pilot.press("5")
                screen = app.screen
                assert isinstance(screen, LaunchScreen)
                app.launch_action("start", str(preset), "", f"127.0.0.1:{port}")
                await wait_for(lambda: ready(app) and len(router_rows(app)) == 3, WAIT_S)
                router = app.launch.state.pid
                url = f"http://127.0.0.1:{port}"
                # a load through the router's own API shows in the table
                httpx.post(f"{url}/models/load", json={"model": "three"}, timeout=10)
                await wait_for(lambda: row_state(screen, "three") == "loaded", WAIT_S)
                # its own server's KV fill, from its command line (its output is the
                # router's): the cells of its context, none used yet
                await wait_for(lambda: row_of(app, "three").kv is not None, WAIT_S)
                kv = row_of(app, "three").kv
                assert kv.used_tokens == 0 and kv.capacity_tokens >= 512
                table = screen.query_one("#launch-models", RouterTable)
                await wait_for(lambda: str(table.get_cell("three", "kv")).startswith("0/"))
                # a load from the table, through the plan
                await select(pilot, screen, "one")
                await pilot.press("l")
                await wait_for(lambda: row_state(screen, "one") == "loaded", WAIT_S)
                # the note says so too (it said "loading one" for good)
                await wait_for(lambda: router_note(app) == "one: loaded")
                # one holds the RPC server: two is refused, in a line naming what to unload
                await select(pilot, screen, "two")
                await pilot.press("l")
                await wait_for(lambda: router_note(app).startswith("refused"))
                note = str(screen.query_one("#launch-router-note").render())
                assert "two does not fit with one, three loaded: one holds the RPC server" in note
                assert "unload one first" in note
                assert row_state(screen, "two") == "unloaded"
                # a kept model is not unloaded from the view
                await select(pilot, screen, "one")
                await pilot.press("k")
                await wait_for(lambda: "one kept" in router_note(app))
                await pilot.press("u")
                await wait_for(lambda: "one is kept" in router_note(app))
                assert row_state(screen, "one") == "loaded"
                members = group_members(router or 0)
                assert len(members) == 3  # the router, one and three
                await pilot.click("#launch-stop")
                await wait_for(lambda: app.launch.state.phase == "exited", 30)
                assert all_gone(members) == []
        finally:
            if router is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(router, signal.SIGKILL)


async def test_quitting_the_app_stops_the_router_and_its_models(models, server_env, tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "alpha.gguf").symlink_to(models["alpha"])
    port = free_port()
    app = sim_app("kaggle-2xt4")
    router = None
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("5")
            app.launch_action("start", str(folder), "-c 512 -t 1", f"127.0.0.1:{port}")
            await wait_for(lambda: ready(app) and len(router_rows(app)) == 1, WAIT_S)
            router = app.launch.state.pid
            app.launch_action("router", "load", "alpha")
            await wait_for(lambda: router_rows(app)[0].state == "loaded", WAIT_S)
            assert router_rows(app)[0].memory_mib
            members = group_members(router or 0)
            assert len(members) == 2
            await pilot.press("ctrl+q")
        assert all_gone(members) == []
    finally:
        if router is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(router, signal.SIGKILL)


def cell(screen: LaunchScreen, name: str, column: str) -> str:
    table = screen.query_one("#launch-models", RouterTable)
    try:
        return str(table.get_cell(name, column))
    except Exception:  # not shown yet
        return ""


def chat(url: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


async def test_the_view_serves_models_on_demand_and_says_what_a_request_would_evict(
    models, server_env, llama_bins, tmp_path
):
    port = free_port()
    app = sim_app("kaggle-2xt4")
    router = None
    with rpc_servers(llama_bins, 1, tmp_path) as rpcs:
        preset = write_preset(tmp_path / "m.ini", models, f"127.0.0.1:{rpcs[0].port}")
        try:
            async with app.run_test(size=(200, 50)) as pilot:
                await pilot.press("5")
                screen = app.screen
                assert isinstance(screen, LaunchScreen)
                app.launch_action("start", str(preset), "", f"127.0.0.1:{port}")
                await wait_for(lambda: ready(app) and len(router_rows(app)) == 3, WAIT_S)
                router = app.launch.state.pid
                url = f"http://127.0.0.1:{port}"
                view = app.launch.state.router
                assert view is not None and view.on_demand_url == url
                # nothing loaded: a request for any would just load it
                await wait_for(lambda: cell(screen, "two", "request") == "loads", WAIT_S)
                # a request through lltui's address loads the model it names
                answer = await asyncio.to_thread(chat, url, "one")
                assert answer.status_code == 200, answer.text
                await wait_for(lambda: row_state(screen, "one") == "loaded", WAIT_S)
                await wait_for(lambda: cell(screen, "one", "reqs") == "1", WAIT_S)
                assert cell(screen, "one", "last") != "-"
                # one holds the RPC server two needs: the table says two would unload it
                await wait_for(lambda: cell(screen, "two", "request") == "unloads one", WAIT_S)
                # (its room is the host's memory now: waited on, as the other processes' use
                # comes and goes on a busy machine)
                await wait_for(lambda: cell(screen, "three", "request") == "loads", WAIT_S)
                answer = await asyncio.to_thread(chat, url, "two")
                assert answer.status_code == 200, answer.text
                await wait_for(
                    lambda: (
                        row_state(screen, "two") == "loaded"
                        and row_state(screen, "one") == "unloaded"
                    ),
                    WAIT_S,
                )
                await wait_for(lambda: cell(screen, "one", "request") == "unloads two", WAIT_S)
                assert cell(screen, "one", "reqs") == "1" and cell(screen, "two", "reqs") == "1"
                members = group_members(router or 0)
                await pilot.click("#launch-stop")
                await wait_for(lambda: app.launch.state.phase == "exited", 30)
                assert all_gone(members) == []
        finally:
            if router is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(router, signal.SIGKILL)
