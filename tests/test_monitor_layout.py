"""The monitor's layout: every GPU on screen with room for the processes, at the sizes
people run it in; the layout key; relayout on resize; cards drawn only when on screen."""

import itertools

import pytest
from support.app_helpers import feed, sim_app, wait_for

from lltui.app.monitor_layout import PROCESS_RESERVE, plan_layout
from lltui.app.widgets.gpu_card import GpuCard, short_name
from lltui.app.widgets.process_table import ProcessTable

SIZES = [(80, 24), (120, 30), (160, 50), (250, 70)]
RIGS = {1: "colab-t4", 2: "kaggle-2xt4", 4: "4xl4", 8: "8xh100-sxm", 16: "16xv100-dgx2"}


@pytest.mark.parametrize("n", list(RIGS))
@pytest.mark.parametrize("size", SIZES)
def test_the_plan_fits_the_gpus_and_keeps_the_process_rows(n, size):
    width, height = size
    room = height - 6  # status, banner, three rig lines and the footer
    plan = plan_layout(n, width, room)
    assert plan.fits
    assert plan.height <= room - PROCESS_RESERVE
    assert plan.columns * plan.item_width <= width


def test_the_plan_takes_the_richest_layout_that_fits():
    assert plan_layout(2, 80, 18).mode == "cards"
    assert not plan_layout(2, 80, 18).graphs
    assert plan_layout(8, 80, 18).compact
    wide = plan_layout(8, 250, 64)
    assert (wide.mode, wide.columns, wide.graphs) == ("cards", 3, True)
    sixteen = plan_layout(16, 80, 18)
    assert sixteen.compact and sixteen.columns == 2 and sixteen.lines == 1
    # forced: cards scroll where they do not fit, compact lines are compact anyway
    forced = plan_layout(16, 80, 18, mode="cards")
    assert forced.mode == "cards" and not forced.fits
    assert plan_layout(1, 250, 64, mode="compact").compact


def test_compact_lines_take_sparklines_where_the_rows_are_there():
    tall = plan_layout(16, 160, 44)  # 16 GPUs at 160x50: two columns of eight
    assert tall.compact and tall.lines == 4 and tall.sparklines == 2
    assert tall.fits and tall.height <= 44 - PROCESS_RESERVE
    assert plan_layout(16, 160, 44, graphs=False).sparklines == 0  # sparklines off (g)
    assert plan_layout(16, 80, 18).sparklines == 0  # no room: one line each


async def test_sixteen_gpus_at_160x50_draw_their_sparklines():
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(160, 50)) as pilot:
        feed(app, 5)
        await pilot.pause()
        layout = app.screen.gpu_layout
        assert layout is not None and layout.sparklines == 2
        card = app.screen.query(GpuCard).first()
        rows = str(card.render()).split("\n")
        assert len(rows) == 4 and rows[2].lstrip().startswith("util")
        assert rows[3].lstrip().startswith("vram")


def test_short_names_keep_the_model_and_never_cut_it():
    assert short_name("NVIDIA H100 80GB HBM3", 16) == "H100 80GB HBM3"
    assert short_name("Tesla V100-SXM3-32GB", 9) == "V100"
    assert short_name("NVIDIA GeForce RTX 3090", 5) == "3090"
    assert short_name("Tesla V100-SXM3-32GB", 3) == ""


def _visible_process_rows(table: ProcessTable) -> int:
    # the header takes one of the lines inside the table's scroll bars
    return table.scrollable_content_region.height - 1


def _check_screen(app) -> None:
    screen = app.screen
    cards = list(screen.query(GpuCard))
    assert len(cards) == len(app.model.latest.gpus)
    table = screen.query_one(ProcessTable)
    whole = screen.region
    for card in cards:
        where = screen.find_widget(card)
        # the whole card is inside the screen and the visible part of its scroll area
        assert whole.contains_region(card.region), card.uuid
        assert where.clip.contains_region(card.region), card.uuid
        assert not card.region.overlaps(table.region)
        # no line of it is wider than the card: nothing wraps into the next line
        width = card.content_region.width
        for line in str(card.render()).splitlines():
            assert len(line) <= width, (line, width)
    for a, b in itertools.combinations(cards, 2):
        assert not a.region.overlaps(b.region)
    assert whole.contains_region(table.region)
    assert _visible_process_rows(table) >= 5


@pytest.mark.parametrize("profile", ["8xh100-sxm", "16xv100-dgx2"])
async def test_every_gpu_and_five_process_rows_are_on_screen_at_80x24(profile):
    app = sim_app(profile)
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 20)
        await pilot.pause()
        _check_screen(app)
        table = app.screen.query_one(ProcessTable)
        assert table.row_count >= 3  # the llama-server and the jobs beside it


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("profile", list(RIGS.values()))
async def test_nothing_is_cut_or_overlaps_at_other_sizes(profile, size):
    app = sim_app(profile)
    async with app.run_test(size=size) as pilot:
        feed(app, 5)
        await pilot.pause()
        _check_screen(app)


async def test_the_layout_key_cycles_auto_compact_and_cards():
    app = sim_app("4xl4")
    async with app.run_test(size=(120, 40)) as pilot:
        feed(app, 10)
        await pilot.pause()
        screen = app.screen
        assert app.monitor_prefs.layout_mode == "auto"
        assert screen.gpu_layout.mode == "cards"
        await pilot.press("l")
        await pilot.pause()
        assert app.monitor_prefs.layout_mode == "compact"
        assert screen.gpu_layout.compact
        assert all(c.has_class("-compact") for c in screen.query(GpuCard))
        assert "GPU0 L4" in str(screen.query(GpuCard)[0].render())
        await pilot.press("l")
        await pilot.pause()
        assert app.monitor_prefs.layout_mode == "cards"
        assert not any(c.has_class("-compact") for c in screen.query(GpuCard))
        await pilot.press("l")
        assert app.monitor_prefs.layout_mode == "auto"


async def test_a_resize_lays_the_gpus_out_again():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 10)
        await pilot.pause()
        assert app.screen.gpu_layout.compact
        await pilot.resize_terminal(250, 70)
        await pilot.pause()
        await pilot.pause()
        layout = app.screen.gpu_layout
        assert (layout.mode, layout.columns, layout.graphs) == ("cards", 3, True)
        _check_screen(app)


async def test_cards_off_screen_are_not_rebuilt_until_scrolled_into_view():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 5)
        await pilot.pause()
        await pilot.press("l", "l")  # cards, scrolled: only the first fits
        await pilot.pause()
        await pilot.pause()
        cards = list(app.screen.query(GpuCard))
        before = [c.renders for c in cards]
        feed(app, 3)
        await pilot.pause()
        after = [c.renders for c in cards]
        assert after[0] > before[0]
        assert after[-1] == before[-1]  # the last card is far below the fold
        scroll = app.screen.query_one("#cards-scroll")
        scroll.scroll_end(animate=False)
        await pilot.pause()
        await pilot.pause()
        assert cards[-1].renders > after[-1]
        assert "GPU7" in str(cards[-1].render())


async def test_a_render_without_a_new_sample_rebuilds_no_card():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(160, 50)) as pilot:
        feed(app, 5)
        await pilot.pause()
        cards = list(app.screen.query(GpuCard))
        before = [c.renders for c in cards]
        app.render_model()  # a key that changes nothing the cards show
        await pilot.pause()
        assert [c.renders for c in cards] == before


async def test_selecting_a_gpu_below_the_fold_scrolls_it_into_view():
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 5)
        await pilot.pause()
        await pilot.press("l", "l")  # cards, scrolled
        await pilot.pause()
        await pilot.press("left_square_bracket")  # from GPU0 back round to GPU7
        await pilot.pause()
        await pilot.pause()
        last = list(app.screen.query(GpuCard))[-1]
        assert last.has_class("-selected")
        where = app.screen.find_widget(last)
        assert where.clip.contains_region(last.region)
        assert "GPU7" in str(last.render())


async def test_a_new_theme_recolours_the_cards_without_a_new_sample():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        feed(app, 5)
        await pilot.pause()
        card = app.screen.query(GpuCard)[0]
        before = card.renders
        app.theme = "light"
        await pilot.pause()
        await pilot.pause()
        assert card.renders > before


async def test_a_tick_rebuilds_only_the_cards_in_view():
    # what a tick costs follows what is on screen, not the number of GPUs
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 5)
        await pilot.press("l", "l")  # cards: about two of sixteen in view
        await pilot.pause()
        await pilot.pause()
        cards = list(app.screen.query(GpuCard))
        before = sum(c.renders for c in cards)
        feed(app, 1)
        await pilot.pause()
        rebuilt = sum(c.renders for c in cards) - before
        assert 1 <= rebuilt <= 3


def test_the_history_label_says_how_much_of_the_window_it_holds():
    from lltui.app.widgets.status import fmt_history

    assert fmt_history(39, 60) == "graphs 39s of 1m"
    assert fmt_history(300, 900) == "graphs 5m of 15m"
    assert fmt_history(900, 900) == "graphs 15m"
    assert fmt_history(39, 60, short=True) == "39s/1m"


@pytest.mark.parametrize("profile", ["16xv100-dgx2", "mixed-4090-3090"])
async def test_the_status_line_fits_80_columns_with_the_history_label(profile):
    app = sim_app(profile)
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 20)
        await pilot.pause()
        await pilot.pause()
        status = app.screen.query_one("#status")
        line = str(status.render())
        assert "\n" not in line and len(line) <= 78 and "19s/1m" in line
        assert status.outer_size.height == 1


async def test_a_status_line_too_long_wraps_and_follows_the_width():
    """The status line is drawn a line per row: a line longer than the width wraps there,
    and a resize wraps it again in the same layout pass (the height right at once)."""
    from rich.text import Text

    from lltui.app.widgets.status import StatusBar

    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")  # a view whose status line is not fitted to the width
        await wait_for(lambda: app.screen.query_one(StatusBar).size.width > 0)
        bar = app.screen.query_one(StatusBar)
        # the view's own refresh of its status each second would replace the text under test
        # (on a busy machine, between two of the checks below)
        bar.show = lambda *_args, **_kwargs: None  # type: ignore[method-assign]
        words = " ".join(f"word{i:02d}" for i in range(20))  # 139 cells
        bar.update(Text(words + "\nhint: short"))
        await wait_for(lambda: bar.outer_size.height == 3)
        rows = str(bar.render()).split("\n")
        assert [len(r.rstrip()) <= 78 for r in rows] == [True] * 3
        assert " ".join(r.strip() for r in rows[:2]) == words  # wrapped at a space
        assert rows[2] == "hint: short" and str(bar.text) == words + "\nhint: short"
        await pilot.resize_terminal(160, 24)
        await wait_for(lambda: bar.outer_size.height == 2)
        assert str(bar.render()) == words + "\nhint: short"
        await pilot.resize_terminal(60, 24)
        await wait_for(lambda: bar.outer_size.height == 4)


async def test_cycling_the_layout_redraws_the_cards_out_of_view_too():
    """`l` to cards and back to lines at 80x24, sampling paused: every GPU is one line at
    once (the cards below the fold kept five lines until they scrolled into view)."""
    from lltui.app.widgets.gpu_card import GpuCard

    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 24)) as pilot:
        feed(app, 60)
        await pilot.pause()
        for key in ("space", "l", "l", "l"):
            await pilot.press(key)
            await pilot.pause()
        await wait_for(lambda: all(c.size.height == 1 for c in app.screen.query(GpuCard)))
        assert app.screen.gpu_layout is not None and app.screen.gpu_layout.compact
