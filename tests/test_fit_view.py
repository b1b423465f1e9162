"""The fit view: estimate off the UI thread, bars per GPU, the quant table, carry to launch."""

import pytest
from support import gguf_factory as gf
from support.app_helpers import sim_app, wait_for

from lltui.app.screens.fit import FitScreen, stacked_bar
from lltui.app.state.fit import FitRequest, compute, form_flags


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("fitview") / "tiny-llama.gguf"
    gf.write_model(path, gf.SPECS["llama"](), "F16")
    return path


def test_form_flags_skip_empty_fields_and_keep_extra():
    flags = form_flags({"ctx": "8192", "np": "", "ts": "3,1"}, "--cpu-moe -ot 'exps=CPU'")
    assert flags == ["-c", "8192", "-ts", "3,1", "--cpu-moe", "-ot", "exps=CPU"]


def test_compute_places_the_model_and_lists_every_quant(model_path):
    req = FitRequest(1, str(model_path), {"ctx": "2048"}, "", "sim:4xl4")
    out = compute(req, None)
    assert out.error is None and out.result.fits
    assert [d.name for d in out.result.devices if d.kind == "cuda"] == [
        "CUDA0",
        "CUDA1",
        "CUDA2",
        "CUDA3",
    ]
    assert "Q4_K_M" in [q.row.name for q in out.quants]


@pytest.mark.parametrize(
    ("path", "fields", "devices", "needle"),
    [
        ("", {}, "sim:4xl4", "choose a GGUF"),
        ("/no/such.gguf", {}, "sim:4xl4", "No such file"),
        ("MODEL", {"ctx": "lots"}, "sim:4xl4", "-c"),
        ("MODEL", {}, "banana", "banana"),
    ],
)
def test_compute_reports_bad_input_as_one_line(model_path, path, fields, devices, needle):
    path = str(model_path) if path == "MODEL" else path
    out = compute(FitRequest(1, path, fields, "", devices), None)
    assert out.error is not None and needle in out.error and "\n" not in out.error


def test_stacked_bar_shows_overflow():
    assert "▶" in stacked_bar([(80, "$a"), (40, "$b")], 100, 10)
    assert "▶" not in stacked_bar([(20, "$a"), (30, "$b")], 100, 10)


async def test_the_view_estimates_and_carries_settings_to_launch(model_path):
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(130, 60)) as pilot:
        app.poll_sync(2)
        await pilot.press("4")
        assert isinstance(app.screen, FitScreen)
        screen = app.screen
        # a simulated rig is busy with its own server: the view sizes against it empty
        assert screen.query_one("#fit-devices").value == "sim:2x3090-nvlink"
        screen.query_one("#fit-model").value = str(model_path)
        screen.query_one("#fit-ctx").value = "4096"
        screen.query_one("#fit-ts").value = "3,1"
        await wait_for(lambda: screen.outcome is not None and screen.outcome.result is not None)
        await pilot.pause()
        bars = str(screen.query_one("#fit-bars").render())
        assert "CUDA0" in bars and "CUDA1" in bars and "fits" in bars
        assert "fits" in str(screen.query_one("#fit-verdict").render())
        assert screen.query_one("#fit-quants").row_count == len(screen.outcome.quants)
        await pilot.click("#fit-launch")
        await pilot.pause()
        assert app.current_mode == "launch"
        launch = app.screen
        assert launch.query_one("#launch-model").value == str(model_path)
        flags = launch.query_one("#launch-flags").value
        assert "-c 4096" in flags and "-ts 3,1" in flags
        # the settings themselves travel, not a string parsed again
        carried = launch.carried
        assert carried is not None
        assert carried.n_ctx == 4096 and carried.tensor_split == (3.0, 1.0)
        # an edit is the user's text: it is read as typed and the carried settings let go
        launch.query_one("#launch-flags").value = flags + " -np 2"
        await pilot.pause()
        assert launch.carried is None


async def test_the_view_shows_the_planners_fastest_command(model_path):
    """After the estimate and its quants, the planner's first choice for decode (the
    command ``fit --best decode`` prints) and the other split's speed."""
    app = sim_app("2x3090-nvlink")
    async with app.run_test(size=(130, 60)) as pilot:
        await pilot.press("4")
        screen = app.screen
        screen.query_one("#fit-model").value = str(model_path)
        screen.query_one("#fit-ctx").value = "4096"
        await wait_for(lambda: screen.outcome is not None and screen.outcome.plan_done, 60)
        await pilot.pause()
        plan = screen.outcome.plan
        assert plan is not None and plan.best is not None
        shown = str(screen.query_one("#fit-plan").render())
        assert shown.startswith("fastest (decode): ")
        assert f"~{plan.best.decode_tps:.0f} t/s decode" in shown
        assert plan.split is not None and plan.split.why.split(":")[0] in shown


async def test_a_newer_request_wins_over_an_older_answer(model_path):
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.press("4")
        screen = app.screen
        screen.query_one("#fit-model").value = str(model_path)
        screen.query_one("#fit-ctx").value = "1024"
        screen.query_one("#fit-ctx").value = "2048"
        # settled: no estimate waiting on its debounce, and the newest request answered
        # (an answer to a request made before the form was filled may come first)
        await wait_for(lambda: screen.settled and screen.outcome.result is not None)
        await app.workers.wait_for_complete()  # an older answer, had one been left, is in
        await pilot.pause()
        assert screen.settled
        assert screen.outcome is not None and screen.outcome.generation == screen.generation
        assert screen.outcome.result is not None
        assert screen.outcome.result.resolved.n_ctx == 2048


async def test_the_estimate_and_the_models_found_come_back_in_messages(model_path):
    from lltui.app.messages import FitReady, ModelsFound

    app = sim_app("kaggle-2xt4")
    messages = []
    async with app.run_test(size=(120, 50), message_hook=messages.append) as pilot:
        await pilot.press("4")
        screen = app.screen
        await wait_for(lambda: any(isinstance(m, ModelsFound) for m in messages))
        found = next(m for m in messages if isinstance(m, ModelsFound))
        assert isinstance(found.models, tuple)
        screen.query_one("#fit-model").value = str(model_path)
        screen.query_one("#fit-ctx").value = "2048"
        await wait_for(lambda: screen.outcome is not None and screen.outcome.result is not None)
        fits = [m for m in messages if isinstance(m, FitReady)]
        assert fits[-1].outcome is screen.outcome  # the view keeps what the message carried
        assert fits[-1].outcome.generation == screen.generation
        assert fits[-1].outcome.result.resolved.n_ctx == 2048


def test_fit_view_snapshot_empty_form(snap_compare):
    app = sim_app("4xl4")

    async def run_before(pilot):
        app.poll_sync(2)
        await pilot.press("4")
        await wait_for(lambda: app.screen.outcome is not None)  # the (debounced) first answer
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_launch_view_snapshot_idle(snap_compare):
    app = sim_app("4xl4")

    async def run_before(pilot):
        app.poll_sync(2)
        await pilot.press("5")
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


def test_rpc_servers_in_the_flags_field_join_the_live_rig(model_path):
    from lltui.app.state.fit import LIVE, FitRequest, compute
    from lltui.sources.gpu.kinds import one_sample

    sample = one_sample("sim:kaggle-2xt4")
    request = FitRequest(1, str(model_path), {}, "--rpc 10.0.0.2:50052", LIVE)
    out = compute(request, sample)
    assert out.error is None and out.result is not None
    names = [d.name for d in out.result.devices]
    assert names[0] == "RPC0[10.0.0.2:50052]"  # first, as llama.cpp lists them
    assert sum(n.startswith("CUDA") for n in names) == 2  # the rig's own GPUs stay
    assert any("free memory is unknown" in n for n in out.notes)


# --- what a user of the view meets (issue: old answers shown as current, a cut table) ---------


def _text(app) -> str:
    return "\n".join(
        "".join(seg.text for seg in strip).rstrip()
        for strip in app.screen._compositor.render_strips()
    )


@pytest.fixture
def llama8b(tmp_path_factory):
    path = tmp_path_factory.mktemp("fit8b") / "llama-8b.gguf"
    gf.write_model(path, gf.llama_8b_spec(), "Q4_K", sparse=True, name="Llama 8B")
    return path


async def test_an_edit_marks_the_shown_answer_as_old_until_the_new_one_comes(llama8b, monkeypatch):
    import threading

    import lltui.app.screens.fit as fit_screen

    # the second estimate waits for the test, so the stale state is there to be seen
    gate, first = threading.Event(), fit_screen.compute_estimate

    def gated(request, sample):
        if request.generation > 1:
            gate.wait(60)
        return first(request, sample)

    monkeypatch.setattr(fit_screen, "compute_estimate", gated)
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(80, 40)) as pilot:
        app.poll_sync(2)
        await pilot.press("4")
        screen = app.screen
        screen.query_one("#fit-model").value = str(llama8b)
        screen._changed()
        await wait_for(lambda: screen.settled, timeout=60)
        await pilot.pause()
        state = screen.query_one("#fit-state")
        assert "computing" not in str(state.render())
        before = screen.outcome
        screen.query_one("#fit-ngl").value = "20"
        screen.query_one("#fit-ts").value = "3,1"
        await pilot.pause()
        # the old answer is still on screen, and says so, faded
        assert screen.outcome is before and not screen.current
        assert "computing" in str(state.render())
        assert screen.query_one("#fit-results").has_class("-stale")
        gate.set()
        await wait_for(lambda: screen.current, timeout=60)
        await pilot.pause()
        assert screen.outcome.result.settings.tensor_split == (3.0, 1.0)
        assert not screen.query_one("#fit-results").has_class("-stale")
        await wait_for(lambda: screen.settled, timeout=60)
        await pilot.pause()
        assert str(state.render()).strip() == ""


async def test_a_path_typed_after_the_first_estimate_is_not_answered_by_it(model_path):
    """The model field has focus at once: the first estimate may read a path half typed
    (``/t``). Its answer is not shown as the answer to the path typed since: it is marked
    old until Enter estimates that path."""
    app = sim_app("16xv100-dgx2")
    async with app.run_test(size=(80, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press("4")
        screen, path = app.screen, str(model_path)
        await pilot.press(*path[:2])
        await wait_for(lambda: screen.current)  # whatever the first request read
        await pilot.press(*path[2:])
        await pilot.pause()
        assert screen.query_one("#fit-model").value == path
        assert not screen.current and not screen.settled
        assert screen.query_one("#fit-results").has_class("-stale")
        assert "Enter estimates" in str(screen.query_one("#fit-state").render())
        await pilot.press("enter")
        await wait_for(lambda: screen.settled)
        await pilot.pause()
        assert screen.outcome.result is not None
        assert not screen.query_one("#fit-results").has_class("-stale")
        assert str(screen.query_one("#fit-state").render()).strip() == ""


@pytest.mark.parametrize("size", [(80, 60), (200, 60)], ids=["80", "200"])
async def test_the_summary_groups_gpus_and_the_quant_table_fits_the_width(llama8b, size):
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=size) as pilot:
        app.poll_sync(2)
        await pilot.press("4")
        screen = app.screen
        screen.query_one("#fit-model").value = str(llama8b)
        screen._changed()
        await wait_for(lambda: screen.settled, timeout=60)
        await pilot.pause()
        verdict = str(screen.query_one("#fit-verdict").render())
        assert "8x H100 80GB HBM3 (CUDA0-7)" in " ".join(verdict.split())
        assert "CUDA1 NVIDIA" not in verdict
        table = screen.query_one("#fit-quants")
        keys = [c.key.value for c in table.columns.values()]
        assert "fullest" in keys
        assert ("per-gpu" in keys) == (size[0] == 200)  # each GPU's MiB where they fit
        width = sum(c.get_render_width(table) for c in table.columns.values())
        assert width <= size[0] - 3  # nothing cut at the right edge
        row = table.get_row("Q4_K_M")
        assert row[keys.index("fullest")].startswith("CUDA")
        if size[0] == 200:
            assert len(row[keys.index("per-gpu")].split()) == 8


async def test_a_gpus_spec_typed_in_the_view_goes_through_the_gpus_parser(model_path):
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(120, 50)) as pilot:
        app.poll_sync(2)
        await pilot.press("4")
        screen = app.screen
        screen.query_one("#fit-model").value = str(model_path)
        screen.query_one("#fit-gpus").value = "24GiB,24GiB"
        await wait_for(lambda: screen.settled and screen.outcome.result is not None)
        gpus = [d for d in screen.outcome.result.devices if d.kind == "cuda"]
        assert [(d.name, d.free_bytes) for d in gpus] == [("CUDA0", 24 << 30), ("CUDA1", 24 << 30)]
        assert "2x 24.0 GiB (CUDA0,1)" in str(screen.query_one("#fit-verdict").render())
        screen.query_one("#fit-gpus").value = "4090,nonsense"
        await wait_for(lambda: screen.settled and screen.outcome.error is not None)
        assert "nonsense" in screen.outcome.error and "\n" not in screen.outcome.error


async def test_the_model_picker_says_how_many_it_found_and_where_it_looked(tmp_path, monkeypatch):
    for name in ("HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE", "LLTUI_MODELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / ".cache"))
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        screen = app.screen
        await wait_for(lambda: screen.found is not None and screen.outcome is not None)
        await pilot.pause()
        said = " ".join(str(screen.query_one("#fit-verdict").render()).split())
        assert "no .gguf file found in ~/models, ~/.cache/huggingface/hub" in said
        assert "LLTUI_MODELS" in said
        assert screen.query_one("#fit-found").prompt == "none in the usual folders"
    (tmp_path / "models").mkdir()
    gf.write_model(tmp_path / "models" / "tiny.gguf", gf.SPECS["llama"](), "F16")
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        screen = app.screen
        await wait_for(lambda: screen.found is not None and screen.outcome is not None)
        await pilot.pause()
        assert screen.query_one("#fit-found").prompt == "1 model: pick one"
        assert "1 model found (looked in ~/models" in str(screen.query_one("#fit-verdict").render())


async def test_tab_into_a_field_then_typing_edits_it_instead_of_replacing_it():
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("4")
        screen = app.screen
        screen.query_one("#fit-ctx").value = "8192"
        screen.query_one("#fit-model").focus()
        await pilot.press("tab")  # past the picker, to the context field
        while app.focused is not screen.query_one("#fit-ctx"):
            await pilot.press("tab")
        await pilot.press("0")  # no select-all on focus: the digit joins what is there
        assert screen.query_one("#fit-ctx").value == "81920"


async def test_the_view_says_when_fewer_gpus_would_hold_the_model(llama8b):
    app = sim_app("8xh100-sxm")
    async with app.run_test(size=(120, 50)) as pilot:
        app.poll_sync(2)
        await pilot.press("4")
        screen = app.screen
        screen.query_one("#fit-model").value = str(llama8b)
        screen._changed()
        await wait_for(lambda: screen.current and screen.outcome.result is not None, timeout=60)
        verdict = " ".join(str(screen.query_one("#fit-verdict").render()).split())
        assert "fewer GPUs: -dev CUDA0: one GPU holds it" in verdict
        assert "the other 7 stay free" in verdict


def test_the_plan_lines_name_the_host_once_and_the_kv_option():
    from dataclasses import replace

    from lltui.app.state.fit import plan_text
    from lltui.core.fit.planner import KV_OPTION_COST, PlanOption, PlanResult

    best = PlanOption(
        "layer", ("CUDA0", "CUDA1"), 512, True, flags=("-ncmoe", "12"),
        offload="experts of 12 layers on the host", decode_tps=35.0, prefill_tps=900.0,
    )  # fmt: skip
    kv = replace(
        best, kv="q8_0", offload="experts of 11 layers on the host", decode_tps=38.8,
        lost=KV_OPTION_COST,
    )  # fmt: skip
    lines = plan_text(PlanResult("decode", 32768, (best,), None, "", 10, kv_option=kv))
    assert lines[0].endswith(", experts of 12 layers on the host")
    assert lines[1] == (
        "faster with a q8_0 K/V cache (a little quality): ~39 t/s decode, "
        "experts of 11 layers on the host"
    )


@pytest.mark.parametrize("size", [1023.5 * 2**20, 1000.04 * 2**10, 1010 * 2**30, 4.2 * 2**30])
def test_quant_file_cell_fits_the_narrow_column(size):
    from lltui.app.screens.fit import QUANT_COLUMNS, file_cell

    narrow = dict((k, n) for k, _h, _w, n in QUANT_COLUMNS)["file"]
    text = file_cell(int(size), wide=False)
    assert len(text) <= narrow, text
    assert text.split()[1] in ("KiB", "MiB", "GiB")
    assert file_cell(int(size), wide=True).count(".") == 1  # the wide table keeps a decimal


async def estimated_with_quants(screen, model_path) -> None:
    """The fit view given ``model_path`` (and a context, which submits it), until its
    estimate and quant table are worked out."""
    screen.query_one("#fit-model").value = str(model_path)
    screen.query_one("#fit-ctx").value = "4096"  # (a path is estimated on submit)
    await wait_for(
        lambda: (
            screen.outcome is not None
            and screen.outcome.result is not None
            and screen.outcome.quants_done
        ),
        60,
    )


async def test_the_quant_tables_cursor_stays_on_screen_at_80x24(model_path):
    """The table was up to 24 rows tall in a 21-row body: its cursor went down under the
    footer, and the F16/BF16/F32 rows were never seen while moving through it."""
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        screen = app.screen
        await estimated_with_quants(screen, model_path)
        await pilot.pause()
        table = screen.query_one("#fit-quants")
        await wait_for(lambda: table.row_count > 15, 60)  # (filled on the UI thread after)
        table.focus()
        for _ in range(table.row_count):
            await pilot.press("down")
        await pilot.pause()
        body_bottom = app.size.height - 1  # (the footer's row)
        assert table.region.bottom <= body_bottom
        cursor_y = table.region.y + 1 + table.cursor_row - round(table.scroll_y)  # (header)
        assert table.region.y < cursor_y < table.region.bottom


async def test_rpc_servers_keep_their_names_and_one_line_each_at_80_columns(model_path):
    """Two RPC servers were both "RPC0[192.168.100" in the quant table, their MiB lost, and
    their bar lines wrapped at 80 columns."""
    from textual.widgets import Static

    from lltui.app.screens.fit import device_label

    assert device_label("RPC0[192.168.100.200:50052]", 16) == "RPC0[…200:50052]"
    assert device_label("CUDA0", 16) == "CUDA0"
    app = sim_app("kaggle-2xt4")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        screen = app.screen
        screen.query_one(
            "#fit-gpus"
        ).value = "rpc:192.168.100.200:50052=24GiB,rpc:192.168.100.201:50052=24GiB"
        await estimated_with_quants(screen, model_path)
        await wait_for(lambda: screen.query_one("#fit-quants").row_count > 0, 60)
        bars = screen.query_one("#fit-bars", Static)
        lines = [line for line in str(bars.render()).splitlines() if line.startswith("RPC")]
        assert any("RPC0[…200:50052]" in line for line in lines)
        assert all(len(line) <= bars.size.width for line in lines), lines
        table = screen.query_one("#fit-quants")
        fullest = [str(table.get_row_at(i)[-1]) for i in range(table.row_count)]
        assert any(cell.split()[-1].isdigit() for cell in fullest), fullest


@pytest.mark.parametrize(("profile", "width"), [("8xh100-sxm", 130), ("16xv100-dgx2", 178)])
async def test_the_quant_table_keeps_room_for_its_rows_scroll_bar(model_path, profile, width):
    """At 24 rows the table scrolls its rows: the per-GPU column was sized for the table's
    whole width, and the scroll bar's two cells had the table scroll sideways."""
    app = sim_app(profile)
    async with app.run_test(size=(width, 24)) as pilot:
        app.poll_sync(2)
        await pilot.press("4")
        screen = app.screen
        await estimated_with_quants(screen, model_path)
        table = screen.query_one("#fit-quants")
        await wait_for(lambda: table.row_count > 15 and table.show_vertical_scrollbar, 60)
        await pilot.pause()
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert not table.show_horizontal_scrollbar


def test_the_fastest_command_says_which_of_the_flags_given_the_planner_replaced(model_path):
    """The view's fastest line is added to the form's flags; a -ts 3,1 (or --cpu-moe) the
    planner chose anew was kept there without a word, where fit --best says it."""
    from lltui.app.state.fit import compute_estimate, compute_plan, plan_text

    outcome = compute_estimate(FitRequest(1, str(model_path), {"ts": "3,1"}, "", "sim:4xl4"), None)
    plan, error = compute_plan(outcome)
    assert error is None and plan is not None and plan.replaced == ("-ts", "3,1")
    assert "(-ts 3,1 given: the planner chooses these itself)" in plan_text(plan)
