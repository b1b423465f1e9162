"""The fleet view as its users read it: why a host is down (a refused port and a hung one, both
real sockets on 127.0.0.1, reached by the real ssh client), every column at 80 and 200
columns, the states counted in words, and a host keeping its history and energy when
another one is opened."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest
from support.app_helpers import wait_for
from support.ssh_fixture import ssh_children_of_us
from textual.widgets import DataTable

from lltui.app.app import create_app
from lltui.app.screens.fleet import COLUMNS, FleetScreen, fleet_layout, fleet_summary
from lltui.app.widgets.hanging import HangingList
from lltui.config import Settings
from lltui.core.monitor.fleet import HostRow
from lltui.sources.gpu.fleet import Fleet, FleetFocus
from lltui.sources.gpu.sim import SimSource
from lltui.sources.ssh import SSH_CONFIG_ENV


def screen_text(app) -> str:
    return "\n".join(
        "".join(seg.text for seg in strip).rstrip()
        for strip in app.screen._compositor.render_strips()
    )


@pytest.fixture
def dead_hosts(tmp_path, monkeypatch) -> Iterator[tuple[int, int]]:
    """(a port nothing listens on, a port that accepts and never says a word), both on
    127.0.0.1; ssh with an empty config, its control sockets in a short folder."""
    if shutil.which("ssh") is None:
        pytest.skip("no ssh client: the fleet's ssh hosts cannot be tried")
    runtime = tempfile.mkdtemp(prefix="lr-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    config = tmp_path / "ssh_config"
    config.write_text("")
    monkeypatch.setenv(SSH_CONFIG_ENV, str(config))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused = probe.getsockname()[1]  # closed again: nothing listens there
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    taken: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        hung.settimeout(0.1)
        while not stop.is_set():
            try:
                taken.append(hung.accept()[0])  # and never a word back
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield refused, hung.getsockname()[1]
    stop.set()
    thread.join(5)
    for conn in taken:
        conn.close()
    hung.close()
    shutil.rmtree(runtime, ignore_errors=True)


def _row_status(app, host: str) -> str:
    return str(app.screen.query_one(DataTable).get_cell(host, "status"))


@pytest.mark.parametrize("size", [(80, 24), (200, 60)], ids=["80x24", "200x60"])
async def test_a_refused_and_a_hung_host_say_why_they_are_down(dead_hosts, size):
    refused, hung = dead_hosts
    down, hang = f"127.0.0.1:{refused}", f"127.0.0.1:{hung}"
    settings = Settings(interval=0.5, source=f"sim:4xl4,smi:{down},smi:{hang}")
    app = create_app(settings, host_timeout=1.5)
    async with app.run_test(size=size) as pilot:
        assert isinstance(app.screen, FleetScreen)
        fleet = app.fleet
        assert fleet is not None
        await wait_for(lambda: fleet.state(1).error and fleet.state(2).error, timeout=30)
        app.screen.show_fleet()
        await wait_for(
            lambda: (
                "3 hosts: 1 up, 2 down" in screen_text(app)
                and "ssh did not answer within 1.5 s" in screen_text(app)
            )
        )
        text = screen_text(app)
        assert "down" in _row_status(app, down) and "down" in _row_status(app, hang)
        # the reason, whole, on screen: in the note column or under the table
        assert f"connect to host 127.0.0.1 port {refused}: Connection refused" in text
        assert "ssh did not answer within 1.5 s" in text
        assert "Unavailable" not in text and "Error:" not in text  # no class names
        assert "3 hosts: 1 up, 2 down" in text  # the states counted in words
        for heading in ("Host", "State", "GPUs", "VRAM GiB", "Power", "Util", "llama", "Age"):
            assert heading in text.splitlines()[3], heading  # every column on screen
        notes = app.screen.query_one("#fleet-notes", HangingList)
        assert bool(notes.entries) == (size[0] == 80)  # at 200 the note column holds them
        # opening the refused host says why in the monitor, in words
        table = app.screen.query_one(DataTable)
        table.move_cursor(row=1)
        table.focus()
        await pilot.press("enter")
        await wait_for(lambda: app.current_mode == "monitor" and app.model.error is not None)
        await wait_for(lambda: "Connection refused" in screen_text(app))
        monitor = screen_text(app)
        assert "Connection refused" in monitor and "SourceUnavailable" not in monitor
        assert "no data" in monitor and "starting" not in monitor

    # an ssh still connecting to the hung host ends within its own connect timeout
    def ours() -> list[str]:
        return [line for line in ssh_children_of_us() if f"{refused}" in line or f"{hung}" in line]

    deadline = time.monotonic() + 15
    while ours() and time.monotonic() < deadline:
        threading.Event().wait(0.1)
    assert not ours(), ours()


def test_the_table_fits_80_columns_and_grows_a_note_column_when_wide():
    narrow = fleet_layout(80, 15)
    used = sum(narrow.widths) + 2 * len(narrow.columns) + 1
    assert narrow.narrow and used <= 80 and narrow.note_width == 0
    assert narrow.widths[0] == 15  # 127.0.0.1:PORT whole
    wide = fleet_layout(200, 15)
    assert not wide.narrow and wide.note_width >= 60
    assert sum(wide.widths) + wide.note_width + 2 * len(wide.columns) + 1 <= 200
    assert [c.key for c in wide.columns] == [c.key for c in COLUMNS] + ["error"]


def test_hosts_of_one_machine_stay_apart_when_their_labels_are_cut():
    """Two exporters of one machine (ports 9400, 9401) were both shown gpu-node-01.la…."""
    from lltui.app.screens.fleet import row_cells

    layout = fleet_layout(80, 20)
    cells = [
        row_cells(
            HostRow(label, "up", None, 0, None, None, None, None, None, None, None, None, None),
            layout,
        )[0]
        for label in ("gpu-node-01.lab:9400", "gpu-node-01.lab:9401")
    ]
    assert len(set(cells)) == 2 and all(len(c) <= layout.widths[0] for c in cells), cells
    assert all(c.startswith("gpu-") and "…" in c for c in cells)


def test_summary_counts_states_in_words():
    def row(status: str) -> HostRow:
        return HostRow("h", status, None, 0, None, None, None, None, None, None, None, None, None)

    rows = [row("up"), row("down"), row("stale"), row("connecting"), row("up")]
    assert fleet_summary(rows) == "5 hosts: 2 up, 1 stale, 1 down, 1 connecting"
    assert fleet_summary([row("up")]) == "1 host: 1 up"


def _two_host_app():
    """The app over a fleet of two simulated hosts, in the fleet view."""
    fleet = Fleet(
        ["sim:4xl4", "sim:kaggle-2xt4"],
        interval=0.05,
        make=lambda spec, i: SimSource(spec.partition(":")[2], seed=i),
    )
    source = FleetFocus(fleet)
    settings = Settings(interval=0.05, source="sim:4xl4,sim:kaggle-2xt4")
    return create_app(settings, source=source, info=source.open(), view="fleet", fleet=fleet)


async def test_the_views_that_read_a_rig_once_read_the_host_opened_next():
    """Topology, NCCL and fit read the host in view when shown; opening another host of the
    fleet makes them read that one (they kept the first host's)."""
    app = _two_host_app()
    async with app.run_test(size=(120, 30)) as pilot:
        for view in ("topology", "fit"):
            app.switch_mode(view)
            await pilot.pause()
        await wait_for(lambda: "4xl4" in screen_text(app) or app.screen.awaiting_data is False)
        app.focus_host(1)
        await pilot.pause()
        app.switch_mode("topology")
        await wait_for(lambda: "kaggle-2xt4" in screen_text(app).split("\n", 3)[2])
        app.switch_mode("fit")
        await pilot.pause()
        assert app.screen.query_one("#fit-devices").value == "sim:kaggle-2xt4"


async def test_a_host_with_no_sample_yet_shows_no_other_hosts_gpus():
    """Opening a host that has not answered, after one that has: the monitor says it waits,
    with no cards or processes (the first host's were left under that line)."""
    from lltui.core.monitor.models import SourceUnavailable

    class Dead(SimSource):
        def poll(self):  # type: ignore[override]
            raise SourceUnavailable("not reachable")

    fleet = Fleet(
        ["sim:4xl4", "sim:kaggle-2xt4"],
        interval=0.05,
        make=lambda spec, i: SimSource("4xl4") if i == 0 else Dead("kaggle-2xt4"),
    )
    source = FleetFocus(fleet)
    settings = Settings(interval=0.05, source="sim:4xl4,sim:kaggle-2xt4")
    app = create_app(settings, source=source, info=source.open(), view="fleet", fleet=fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        app.focus_host(0)
        await wait_for(lambda: app.model.latest is not None)
        await pilot.pause()
        assert app.screen.query_one("#cards-scroll").display
        app.focus_host(1)
        await pilot.pause()
        assert app.model.latest is None
        assert not app.screen.query_one("#cards-scroll").display
        assert not app.screen.query_one("#processes").display
        app.focus_host(0)
        await pilot.pause()
        assert app.screen.query_one("#cards-scroll").display


async def test_a_host_keeps_its_history_and_energy_when_another_is_opened():
    app = _two_host_app()
    async with app.run_test(size=(120, 30)) as pilot:
        first = app.model
        await wait_for(lambda: first.history.seconds() > 0)
        app.focus_host(1)
        await pilot.pause()
        second = app.model
        assert second is not first
        held = first.history.seconds()
        energy = first.history.energy_since_start_mj()
        start = first.history.first
        # host 0, out of view, keeps taking its samples from its own thread
        await wait_for(lambda: first.history.seconds() > held + 0.2)
        app.focus_host(0)
        await pilot.pause()
        assert app.model is first and first.history.first is start  # not restarted
        assert energy is not None and (first.history.energy_since_start_mj() or 0) > energy
        app.focus_host(1)
        await pilot.pause()
        assert app.model is second  # the second host's history too
        assert app.host_model(0) is first and app.host_model(1) is second


async def test_every_down_hosts_reason_is_on_screen_at_80x24():
    """14 hosts down at 80x24: the notes under the table, one a host, showed 2 of them (the
    table took the screen). They are one a reason now, its hosts named, and whole on screen;
    the table, which scrolls, gives up the rows they need."""
    from lltui.core.monitor.models import SourceUnavailable

    refused = [f"127.0.0.1:{port}" for port in range(40001, 40013)]
    unknown = ["nosuch-a.invalid", "nosuch-b.invalid"]

    class Down(SimSource):
        def __init__(self, host: str) -> None:
            super().__init__("4xl4")
            self.host = host

        def open(self):  # type: ignore[override]
            if self.host in unknown:
                why = f"Could not resolve hostname {self.host}: Name or service not known"
            else:
                why = f"connect to host 127.0.0.1 port {self.host[-5:]}: Connection refused"
            raise SourceUnavailable(f"ssh: {why}")

    specs = ["sim:4xl4", *(f"smi:{h}" for h in refused + unknown)]
    fleet = Fleet(
        specs,
        interval=0.05,
        make=lambda spec, i: SimSource("4xl4") if i == 0 else Down(spec.partition(":")[2]),
    )
    source = FleetFocus(fleet)
    settings = Settings(interval=0.05, source=",".join(specs))
    app = create_app(settings, source=source, info=source.open(), view="fleet", fleet=fleet)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(lambda: all(fleet.state(i).error for i in range(1, 15)))
        app.screen.show_fleet()
        await pilot.pause()
        notes = app.screen.query_one("#fleet-notes", HangingList)
        assert notes.plain_lines() == [
            f"12 hosts ssh: Connection refused ({', '.join(refused)})",
            "2 hosts ssh: Could not resolve hostname: Name or service not known "
            "(nosuch-a.invalid, nosuch-b.invalid)",
        ]
        await wait_for(lambda: "(nosuch-a.invalid, nosuch-b.invalid)" in screen_text(app))
        text = screen_text(app)
        assert "15 hosts: 1 up, 14 down" in text and "12 hosts ssh: Connection refused" in text
        assert "127.0.0.1:40011, 127.0.0.1:40012)" in text  # the last line of the first note


def test_hosts_down_for_one_reason_that_names_them_have_one_note():
    """14 hosts behind one dead jump host had 14 notes at 80x24, each naming its host ("ssh to
    gpu00 failed at its jump host ..."); so had a key every host refuses and a host key that
    is unknown. Each host's own name is HOST in the note the hosts share."""
    from lltui.app.screens.fleet import note_groups
    from lltui.sources.gpu.smi import CommandResult, command_failure

    def down(label: str, stderr: str) -> HostRow:
        host = label.partition(":")[0]  # (the source's host: a port apart)
        error = command_failure("nvidia-smi", CommandResult(255, "", stderr), host)
        return HostRow(label, "down", None, 0, *(None,) * 8, error)

    hosts = [f"gpu{i:02d}" for i in range(14)]
    jump = "ssh: connect to host bastion port 22: Connection refused\r\n"
    jump += "Connection closed by UNKNOWN port 65535\r\n"
    rows = [down(h, jump) for h in hosts]
    rows += [down(f"alice@{h}:2222", f"alice@{h}: Permission denied (publickey).") for h in hosts]
    rows += [down(f"{h}.lan", "Host key verification failed.") for h in hosts]
    assert [(len(members), note) for members, note in note_groups(rows, fits=30)] == [
        (14, "ssh to HOST failed at its jump host (ProxyJump/ProxyCommand): "
             "ssh: connect to host bastion port 22: Connection refused"),
        (14, "ssh to alice@HOST failed: alice@HOST: Permission denied (publickey)."),
        (14, "ssh to HOST failed: Host key verification failed."),
    ]  # fmt: skip
    (alone,) = note_groups(rows[:1], fits=30)
    assert alone[1].startswith("ssh to gpu00 failed at its jump host")  # one host: whole


@pytest.mark.parametrize("width", [80, 200])
def test_a_host_with_more_than_a_thousand_gib_shows_its_vram_whole(width):
    """8 MI300X hold 1535.7 GiB: the cell read ``567.3/1535.``, a cut number."""
    from lltui.app.screens.fleet import row_cells
    from lltui.core.units import GIB

    layout = fleet_layout(width, 15)
    used, total = int(567.3 * GIB), int(1535.7 * GIB)
    row = HostRow("sim:8xmi300x", "up", 8, 0, used, total, None, None, None, None, 1, 0, None)
    vram = row_cells(row, layout)[[c.key for c in layout.columns].index("vram")]
    assert vram == "567/1536"
    small = replace(row, memory_used=int(12.2 * GIB), memory_total=30 * GIB)
    assert row_cells(small, layout)[3] == "12.2/30.0"  # tenths where they fit


async def test_paused_the_fleet_view_holds_still_and_resumed_it_moves_on():
    """Space put PAUSED on the fleet view while its rows went on changing with each poll;
    and every host went on being polled under "Stop polling the source". Paused, no host is
    polled (as a single source is not); resumed, the hosts' histories go on."""
    import math

    app = _two_host_app()
    fleet = app.fleet
    parked: set[int] = set()
    pace = fleet._pace

    def spy(index: int) -> float:
        rest = pace(index)
        if rest == math.inf:
            parked.add(index)  # its loop waits until woken: no poll until resumed
        return rest

    fleet._pace = spy  # the loops take it when they start (on mount)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for(lambda: all(fleet.state(i).sample is not None for i in range(2)))
        app.focus_host(1)
        app.focus_host(0)  # host 1 opened before: its own history, fed while not in view
        app.switch_mode("fleet")
        await wait_for(lambda: app.host_model(1).latest is not None)
        await pilot.press("space")
        await pilot.pause()
        held = screen_text(app)
        assert "PAUSED" in held
        await wait_for(lambda: parked == {0, 1})
        polls = [fleet.state(i).polls for i in range(2)]
        seqs = [app.model.latest.seq, app.host_model(1).latest.seq]
        app.screen.show_fleet()
        await pilot.pause()
        assert screen_text(app) == held
        assert [fleet.state(i).polls for i in range(2)] == polls
        await pilot.press("space")
        await wait_for(lambda: "PAUSED" not in screen_text(app))
        await wait_for(lambda: screen_text(app).split("\n")[3:] != held.split("\n")[3:])
        await wait_for(lambda: app.model.latest.seq > seqs[0])
        await wait_for(lambda: app.host_model(1).latest.seq > seqs[1])
