"""The launch view's router table from a launch state: each model's state, pin, priority,
pod, last use and requests (the on-demand proxy's counts), tokens/s and what a request would
do now; a refresh updates the cells of the rows it keeps, by model. Its columns fit its width
(none scroll sideways, at 80 columns or 160), and the selected model's line says what its row
leaves out or cuts short."""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.app_helpers import sim_app, wait_for
from textual.app import App, ComposeResult
from textual.widgets import Static

from lltui.app.widgets.router_table import COLUMNS, RouterTable, row_cells, row_detail
from lltui.core.fit.evict import Decision
from lltui.services.launch.state import LaunchState, ModelRow, ModelUse, RouterView

KEYS = [key for key, _label, _w in COLUMNS]


def cells(row: ModelRow, now: float | None = 100.0) -> dict[str, str]:
    return dict(zip(KEYS, (str(c) for c in row_cells(row, now=now)), strict=True))


CODER = ModelRow(
    "coder",
    "loaded",
    kept=True,
    priority=5,
    pod=("CUDA0", "CUDA1"),
    use=ModelUse("coder", requests=12, last_used=28.0),
    gen_tps=41.26,
)
CHAT = ModelRow(
    "chat",
    "unloaded",
    kept=False,
    pod=("CUDA2",),
    use=ModelUse("chat", requests=3, last_used=10.0),
    on_request=Decision("chat", "evict", evict=("tiny",)),
)


def test_a_loaded_models_row_says_its_pod_use_and_speed() -> None:
    got = cells(CODER)
    assert got["state"] == "loaded" and got["kept"] == "yes" and got["prio"] == "5"
    assert got["pod"] == "CUDA0, CUDA1"
    assert got["last"] == "1m12s" and got["reqs"] == "12" and got["tps"] == "41.3"
    assert got["request"] == "-"  # resident: a request is just served


def test_an_unloaded_models_row_says_what_a_request_would_unload() -> None:
    assert cells(CHAT)["request"] == "unloads tiny"
    fits = ModelRow("chat", "unloaded", kept=False, on_request=Decision("chat", "load"))
    assert cells(fits)["request"] == "loads"
    refused = Decision("big", "cannot", code="does_not_fit", reason="CUDA0 short by 3 GiB")
    got = cells(ModelRow("big", "unloaded", kept=False, on_request=refused))
    assert got["request"] == "refused: CUDA0 short by 3 GiB"
    # never served, no pod known (not on demand): dashes, not zeros
    assert (got["last"], got["reqs"], got["pod"], got["prio"]) == ("-", "-", "-", "-")


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield RouterTable(id="t")


async def test_a_refresh_updates_cells_in_place_by_model() -> None:
    app = TableApp()
    async with app.run_test(size=(210, 24)) as pilot:  # every column shown
        table = app.query_one(RouterTable)
        table.show_rows([CODER, CHAT], now=100.0)
        await pilot.pause()
        first_keys = list(table.rows)
        added: list[object] = []
        add_row = table.add_row
        table.add_row = lambda *cells, **kw: added.append(kw) or add_row(*cells, **kw)  # type: ignore[method-assign]
        table.clear = lambda columns=False: pytest.fail("the table was cleared")  # type: ignore[method-assign]
        served = CHAT.use
        assert served is not None
        loaded = ModelRow(
            "chat",
            "loaded",
            kept=False,
            pod=("CUDA2",),
            use=ModelUse("chat", served.requests + 1, 99.0),
        )
        table.show_rows([CODER, loaded], now=100.0)
        await pilot.pause()
        assert list(table.rows) == first_keys and added == []  # updated, not added again
        assert str(table.get_cell("chat", "state")) == "loaded"
        assert str(table.get_cell("chat", "reqs")) == "4"
        assert str(table.get_cell("chat", "last")) == "1s"
        assert str(table.get_cell("chat", "request")) == "-"
        table.show_rows([loaded], now=100.0)
        await pilot.pause()
        assert [k.value for k in table.rows] == ["chat"]


BIG = ModelRow(
    "qwen3-coder-30b-a3b-instruct",
    "unloaded",
    kept=False,
    n_ctx=32768,
    planned_bytes=20_000 * 1024 * 1024,
    on_request=Decision("big", "cannot", code="does_not_fit", reason="CUDA0 short by 3 GiB"),
)


def test_the_detail_says_what_the_row_leaves_out_or_cuts_short() -> None:
    shown = ("model", "state", "request")
    got = row_detail(BIG, shown)
    # the whole name, the refusal cut short in its column, the columns left out (none unknown)
    assert got == (
        "qwen3-coder-30b-a3b-instruct: ON REQUEST refused: CUDA0 short by 3 GiB, "
        "CTX 32768, PLAN MiB 20000"
    )
    assert row_detail(CHAT, [key for key, _l, _w in COLUMNS], now=100.0) == "chat"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
async def test_the_launch_views_router_table_fits_its_width(size) -> None:
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=size) as pilot:
        await pilot.press("5")
        view = RouterView(rows=(CODER, CHAT, BIG), note="coder loaded")
        app.launch._set(LaunchState(phase="ready", router=view))
        table = app.screen.query_one("#launch-models", RouterTable)
        detail = app.screen.query_one("#launch-model-detail", Static)
        await wait_for(lambda: table.row_count == 3 and str(detail.render()).startswith("coder"))
        await pilot.pause()
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert not table.show_horizontal_scrollbar
        shown = [str(c.label) for c in table.columns.values()]
        assert shown[:3] == ["MODEL", "STATE", "KEPT"] and "ON REQUEST" in shown
        if size[0] >= 160:
            assert "TOK/S" in shown and "KV TOKENS" in shown
        else:  # the rest of the selected row is its detail line
            assert "TOK/S" not in shown and "TOK/S 41.3" in str(detail.render())
        table.focus()
        await pilot.press("down", "down")
        await wait_for(lambda: str(detail.render()).startswith(BIG.name))
        assert "refused: CUDA0 short by 3 GiB" in str(detail.render())


def test_the_note_of_a_load_says_what_is_true_now():
    """The note kept saying 'loading alpha' after alpha had loaded (the last action's word,
    never revisited): it follows the model now, as each poll folds the router's list."""
    from lltui.services.launch.polls import RouterPoll

    poll = RouterPoll(None, per_model=False)  # type: ignore[arg-type]  # (fold only)
    asked = RouterView(rows=(ModelRow("alpha", "unloaded", False),), note="loading alpha")
    st = LaunchState(phase="ready", router=replace(asked, acted=("load", "alpha")))
    notes = []
    for state in ("unloaded", "loading", "loaded", "unloaded"):
        st = poll.fold(st, (ModelRow("alpha", state, False),), None, [], 0.0)
        notes.append(st.router.note if st.router else None)
    assert notes == ["loading alpha", "loading alpha", "alpha: loaded", "alpha: unloaded"]
    # an unload, and a load that fails
    for what, states, said in (
        ("unload", ("loaded", "unloaded"), ["unloading alpha", "alpha: unloaded"]),
        ("load", ("loading", "failed"), ["loading alpha", "alpha: failed"]),
    ):
        st = replace(st, router=replace(st.router or asked, acted=(what, "alpha")))
        notes = []
        for state in states:
            st = poll.fold(st, (ModelRow("alpha", state, False),), None, [], 0.0)
            notes.append(st.router.note if st.router else None)
        assert notes == said
