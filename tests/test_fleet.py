"""Fleets without ssh: source lists, hosts files, the fleet model, the poller threads, the
view and ``lltui gpus`` with several sources (simulated hosts and stand-ins that fail)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from lltui.app.app import create_app
from lltui.config import Settings
from lltui.core.monitor.fleet import (
    UNKNOWN_HOST_KEYS,
    FleetSample,
    HostState,
    fleet_to_json,
    host_row,
)
from lltui.core.monitor.hosts_file import HostEntry, HostsFileError, parse_hosts
from lltui.core.monitor.models import RigInfo, RigSample, SourceUnavailable
from lltui.sources.gpu.fleet import Fleet, FleetFocus, fleet_hosts, fleet_specs
from lltui.sources.gpu.kinds import is_fleet, split_sources
from lltui.sources.gpu.sim import SimSource
from lltui.sources.ssh import split_host_port


def wait_until(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        threading.Event().wait(0.01)


# --- parsing ------------------------------------------------------------------------------------


def test_source_lists_split_on_kinds_only():
    assert split_sources("smi:h1,smi:h2,nvml") == ["smi:h1", "smi:h2", "nvml"]
    assert split_sources("replay:/tmp/a,b.jsonl,sim:4xl4") == ["replay:/tmp/a,b.jsonl", "sim:4xl4"]
    assert split_sources("sim") == ["sim"] and not is_fleet("sim:4xl4")
    assert is_fleet("smi:a, smi:b")


def test_hosts_file_forms_and_errors():
    text = "# gpu boxes\ngpu1\nroot@gpu2:2222  # second\ngpu3 -p 23\n\n[::1]:2201\ngpu1\n"
    assert parse_hosts(text) == (
        HostEntry("gpu1"),
        HostEntry("root@gpu2", 2222),
        HostEntry("gpu3", 23),
        HostEntry("[::1]", 2201),
    )
    assert HostEntry("root@gpu2", 2222).spec == "smi:root@gpu2:2222"
    for bad, words in [
        ("a b", "line 1"),
        ("ok\n-oProxyCommand=x", "line 2"),
        ("a:70000", "port"),
        ("# only a comment\n", "no host"),
    ]:
        with pytest.raises(HostsFileError, match=words):
            parse_hosts(bad)


def test_host_port_split():
    assert split_host_port("root@gpu2:2222") == ("root@gpu2", 2222)
    assert split_host_port("[::1]:2201") == ("::1", 2201)
    assert split_host_port("gpu1") == ("gpu1", None)
    assert split_host_port("fe80::1") == ("fe80::1", None)  # (an IPv6 address, bare)
    for bad in ("gpu:0", "gpu:abc", "gpu:", "[::1]:x", "gpu:123456"):
        with pytest.raises(ValueError, match=r"^port "):
            split_host_port(bad)


def test_fleet_specs_join_list_and_file(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("a\nb:2200\n")
    assert fleet_specs("auto", str(hosts)) == ["smi:a", "smi:b:2200"]
    assert fleet_specs("nvml", str(hosts)) == ["nvml", "smi:a", "smi:b:2200"]
    with pytest.raises(ValueError, match="--hosts"):
        fleet_specs(None, str(tmp_path / "missing"))
    labels = [h.label for h in fleet_hosts(["smi:a", "sim:4xl4", "sim:4xl4"])]
    assert labels == ["a", "sim:4xl4", "sim:4xl4#2"]


# --- the model ----------------------------------------------------------------------------------


def sim_sample(profile: str = "4xl4") -> RigSample:
    src = SimSource(profile, seed=0)
    src.open()
    return src.poll()


def test_host_row_totals_and_states():
    sample = sim_sample()
    up = HostState("a", "sim:4xl4", sample=sample, reachable=True, received_at=100.0)
    row = host_row(up, 101.0, 1.0)
    assert row.status == "up" and row.gpus == 4
    assert row.memory_total == sum(g.info.memory_total for g in sample.gpus)
    assert row.hottest_c == max(g.temp_c for g in sample.gpus if g.temp_c is not None)
    assert row.llama_servers == 1  # the simulated rig serves one llama-server
    assert host_row(up, 110.0, 1.0).status == "stale"
    down = HostState("b", "smi:b", reachable=False, error="ssh to b failed: refused")
    assert host_row(down, 0.0, 1.0).status == "down"
    hanging = HostState("c", "smi:c", polling_since=0.0)
    assert host_row(hanging, 1.0, 1.0).status == "connecting"
    assert host_row(hanging, 4.0, 1.0).status == "down"  # no answer for 3 intervals


def test_fleet_json_keeps_each_hosts_gpus_under_it():
    sample = sim_sample()
    fleet = FleetSample(
        5.0,
        (
            HostState("a", "sim:4xl4", sample=sample, reachable=True, received_at=5.0),
            HostState("b", "smi:b", reachable=False, error="refused"),
        ),
    )
    out = json.loads(json.dumps(fleet_to_json(fleet)))
    a, b = out["hosts"]
    assert a["name"] == "a" and a["reachable"] and len(a["gpus"]) == 4
    assert a["gpus"][0]["memory_total"] == sample.gpus[0].info.memory_total
    assert b == {
        "name": "b",
        "source": "smi:b",
        "reachable": False,
        "status": "down",
        "error": "refused",
        "age_s": None,
        "gpus": [],
        "hints": [],
        # the keys of a host that answered, null (they were left out)
        **dict.fromkeys(UNKNOWN_HOST_KEYS),
    }
    assert set(a) == set(b)
    assert out["reachable"] == 1 and out["total"] == 2


# --- the threads --------------------------------------------------------------------------------


class DownSource:
    name = "down"

    def open(self) -> RigInfo:
        raise SourceUnavailable("ssh to down failed: Connection refused")

    def poll(self) -> RigSample:
        raise AssertionError("never opened")

    def close(self) -> None:
        pass


class StuckSource:
    name = "stuck"

    def __init__(self) -> None:
        self.release = threading.Event()

    def open(self) -> RigInfo:
        self.release.wait(30)
        raise SourceUnavailable("released")

    def poll(self) -> RigSample:
        raise AssertionError("never opened")

    def close(self) -> None:
        self.release.set()


def make_fleet(interval: float = 0.05) -> tuple[Fleet, StuckSource]:
    stuck = StuckSource()

    def make(spec: str, index: int):
        if spec == "smi:down":
            return DownSource()
        if spec == "smi:stuck":
            return stuck
        return SimSource(spec.partition(":")[2], seed=index)

    fleet = Fleet(
        ["sim:4xl4", "smi:down", "smi:stuck", "sim:kaggle-2xt4"], interval=interval, make=make
    )
    return fleet, stuck


def test_a_down_and_a_hung_host_do_not_stop_the_others():
    fleet, _stuck = make_fleet()
    fleet.start()
    try:
        wait_until(lambda: all(fleet.state(i).polls >= 3 for i in (0, 3)))
        snap = fleet.snapshot()
        rows = {s.label: host_row(s, snap.t + 3.1, fleet.interval) for s in snap.hosts}
        assert rows["sim:4xl4"].gpus == 4 and rows["sim:kaggle-2xt4"].gpus == 2
        assert rows["down"].status == "down" and "refused" in (rows["down"].error or "")
        assert fleet.state(2).polling_since is not None and fleet.state(2).polls == 0
        assert rows["stuck"].status == "down"  # three intervals, min 3 s, with no answer
    finally:
        fleet.close()


def test_poll_once_reports_a_hung_host_down_within_the_deadline():
    fleet, _stuck = make_fleet()
    try:
        started = time.monotonic()
        snap = fleet.poll_once(deadline_s=0.5)
        assert time.monotonic() - started < 5
        states = {s.label: s for s in snap.hosts}
        assert states["stuck"].reachable is False
        assert "did not answer" in (states["stuck"].error or "")
        assert states["sim:4xl4"].reachable and snap.reachable == 2
    finally:
        fleet.close()


def test_a_host_that_answered_a_one_shot_poll_is_up_however_slow_another_was():
    """`lltui gpus --json --source smi:a,smi:slow`: the snapshot is taken once the slow host
    gave up (past the 3 s stale limit), so the host that answered at once was "stale" (its
    text table showed it fine). One poll: a host that answered in it is up."""
    fleet, _stuck = make_fleet()
    try:
        snap = fleet.poll_once(deadline_s=3.5)  # the hung host holds the snapshot past 3 s
        states = {s.label: s for s in snap.hosts}
        assert (states["sim:4xl4"].age(snap.t) or 0) > 3.0
        status = {h["name"]: h["status"] for h in fleet_to_json(snap)["hosts"]}
        assert status == {
            "sim:4xl4": "up",
            "down": "down",
            "stuck": "down",
            "sim:kaggle-2xt4": "up",
        }
    finally:
        fleet.close()


def test_poll_once_never_overlaps_a_hosts_last_poll():
    """lltui watch: a hung host got a new poll every round (12 in flight after 35 s), and
    every round waited its timeout, so the healthy hosts were polled 5 times in 40 s."""
    fleet, stuck = make_fleet()
    opened = []
    first_open = stuck.open

    def counted() -> RigInfo:
        opened.append(1)
        return first_open()

    stuck.open = counted  # type: ignore[method-assign]
    try:
        fleet.poll_once(deadline_s=1.0)
        started = time.monotonic()
        for _ in range(3):
            snap = fleet.poll_once(deadline_s=1.0)
        assert len(opened) == 1  # its first poll still hangs: no second one
        assert time.monotonic() - started < 2.5  # nor a 1 s wait for it, round after round
        assert snap.reachable == 2
    finally:
        fleet.close()


class DriverSource:
    """A local driver source (NVML, amdsmi: no ssh host) whose poll blocks until released;
    it records a close that came while a poll ran."""

    name = "driver"
    host: str | None = None

    def __init__(self) -> None:
        self.release = threading.Event()
        self.polling = threading.Event()
        self.closed = threading.Event()
        self.closed_mid_poll = False

    def open(self) -> RigInfo:
        return RigInfo(source="nvml")

    def poll(self) -> RigSample:
        self.polling.set()
        self.release.wait(30)
        self.polling.clear()
        return sim_sample()

    def close(self) -> None:
        self.closed_mid_poll = self.closed_mid_poll or self.polling.is_set()
        self.closed.set()


def test_close_leaves_a_hung_driver_poll_alone_until_it_returns():
    """A poll that poll_once gave up on (did not answer in time) still runs: closing the
    fleet then shut NVML down under the running call (a crash or hang in the driver)."""
    driver = DriverSource()
    fleet = Fleet(["nvml"], make=lambda spec, i: driver)
    try:
        snap = fleet.poll_once(deadline_s=0.2)
        assert snap.hosts[0].reachable is False and driver.polling.is_set()
        fleet.close()
        assert not driver.closed.is_set()  # its call has not returned
    finally:
        driver.release.set()
    wait_until(driver.closed.is_set)  # closed once it returned, on its poll's thread
    assert not driver.closed_mid_poll


def test_close_stops_a_hung_ssh_hosts_poll_at_once():
    """An ssh host's source (smi:, amd:) is closed under its running poll: that stops its
    ssh command."""
    remote = DriverSource()
    remote.host = "gpu1"
    fleet = Fleet(["smi:gpu1"], make=lambda spec, i: remote)
    try:
        fleet.poll_once(deadline_s=0.2)
        fleet.close()
        assert remote.closed.is_set() and remote.closed_mid_poll
    finally:
        remote.release.set()


def test_a_closed_fleet_starts_no_poll():
    driver = DriverSource()
    fleet = Fleet(["nvml"], make=lambda spec, i: driver)
    fleet.close()
    driver.release.set()
    assert fleet.poll_host(0).polls == 0 and not driver.closed.is_set()


def test_a_host_named_twice_is_told_apart_in_the_monitor():
    """`sim:4xl4,sim:4xl4`: the fleet listed sim:4xl4#2, the monitor's header said sim:4xl4."""
    fleet = Fleet(["sim:4xl4", "sim:4xl4"], interval=0.25, timeout=5.0)
    focus = FleetFocus(fleet)
    try:
        fleet.poll_once()
        assert focus.info().source == "sim:4xl4"
        focus.set_focus(1)
        assert focus.info().source == "sim:4xl4#2"
        fleet.start()
        assert focus.poll().info.source == "sim:4xl4#2"
    finally:
        focus.close()


def test_focus_hands_on_one_hosts_samples():
    fleet, _stuck = make_fleet()
    fleet.start()
    focus = FleetFocus(fleet)
    try:
        first = focus.poll()
        assert first.info.source == "sim:4xl4"
        assert focus.poll().seq > first.seq
        focus.set_focus(1)
        with pytest.raises(SourceUnavailable, match="down: ssh to down failed"):
            focus.poll()
        focus.set_focus(3)
        assert focus.poll().info.source == "sim:kaggle-2xt4"
    finally:
        focus.close()


# --- the view -----------------------------------------------------------------------------------


async def test_fleet_view_rows_update_and_enter_opens_the_monitor():
    from textual.widgets import DataTable

    from lltui.app.screens.fleet import FleetScreen
    from lltui.sources.gpu import fleet as fleet_module

    fleet, _stuck = make_fleet(interval=0.1)
    settings = Settings(interval=0.1, source="sim:4xl4")
    source = FleetFocus(fleet)
    app = create_app(settings, source=source, info=source.open(), view="fleet", fleet=fleet)
    assert fleet_module.Fleet is type(app.fleet)
    async with app.run_test(size=(140, 30)) as pilot:
        assert isinstance(app.screen, FleetScreen)
        table = app.screen.query_one(DataTable)
        for _ in range(400):
            await pilot.pause(0.02)
            if table.row_count == 4 and "up" in str(table.get_cell("sim:kaggle-2xt4", "status")):
                break
        assert table.row_count == 4
        assert "down" in str(table.get_cell("down", "status"))
        assert str(table.get_cell("sim:4xl4", "gpus")) == "4"
        polls = fleet.state(0).polls
        for _ in range(400):  # the rest keep updating while one host is down and one hangs
            await pilot.pause(0.02)
            if fleet.state(0).polls >= polls + 3:
                break
        assert fleet.state(0).polls >= polls + 3
        table.move_cursor(row=3)
        table.focus()
        await pilot.press("enter")
        for _ in range(400):
            await pilot.pause(0.02)
            latest = app.model.latest
            if app.current_mode == "monitor" and latest is not None:
                break
        assert app.current_mode == "monitor"
        assert app.model.latest is not None
        assert app.model.latest.info.source == "sim:kaggle-2xt4"
        await pilot.press("6")
        await pilot.pause()
        assert isinstance(app.screen, FleetScreen)


def test_create_app_builds_a_fleet_from_a_list():
    app = create_app(Settings(source="sim:4xl4,sim:kaggle-2xt4"), start_polling=False)
    try:
        assert app.fleet is not None and len(app.fleet) == 2
        assert app._initial_view == "fleet"
    finally:
        app.fleet.close()
    with pytest.raises(ValueError, match="unknown"):
        create_app(Settings(source="sim:4xl4,sim:nope"), start_polling=False)


def test_gpus_json_with_several_sources(capsys):
    from lltui.cli import main

    code = main(["gpus", "--json", "--source", "sim:4xl4,sim:kaggle-2xt4"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [h["name"] for h in out["hosts"]] == ["sim:4xl4", "sim:kaggle-2xt4"]
    assert [len(h["gpus"]) for h in out["hosts"]] == [4, 2]
    # one source keeps the one-rig object
    assert main(["gpus", "--json", "--source", "sim:4xl4"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert "hosts" not in one and len(one["gpus"]) == 4


def test_gpus_json_of_a_fleet_says_whether_it_is_simulated(capsys):
    """The fleet's object had no top-level ``simulated`` (the one-source object and
    ``watch --once --json`` of the same fleet have it): a script reading it took a fleet of
    simulated hosts for real GPUs."""
    from lltui.cli import main

    assert main(["gpus", "--json", "--source", "sim:4xl4,sim:kaggle-2xt4"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["simulated"] is True
    assert out["simulated_reason"] == (
        "the simulated rig 4xl4 was asked for; the simulated rig kaggle-2xt4 was asked for"
    )
    real = FleetSample(1.0, (HostState("b", "smi:b", reachable=False, error="refused"),))
    assert (fleet_to_json(real)["simulated"], fleet_to_json(real)["simulated_reason"]) == (
        False,
        None,
    )


def test_gpus_with_a_bad_hosts_file_is_one_line(tmp_path, capsys):
    from lltui.cli import main

    bad = tmp_path / "hosts"
    bad.write_text("gpu1\nthis is not a host\n")
    assert main(["gpus", "--hosts", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "line 2" in err


def test_a_sample_taken_before_the_host_in_view_changed_is_dropped():
    fleet, _stuck = make_fleet()
    fleet.poll_host(0)
    fleet.poll_host(3)
    source = FleetFocus(fleet)
    app = create_app(Settings(source="sim:4xl4"), source=source, info=source.open())
    app._fleet = fleet
    try:
        old = source.poll()  # from sim:4xl4 ...
        app.focus_host(3)  # ... and the monitor moved to sim:kaggle-2xt4 meanwhile
        app.ingest(old)
        assert app.model.latest is None
        app.ingest(source.poll())
        assert app.model.latest is not None
        assert app.model.latest.info.source == "sim:kaggle-2xt4"
    finally:
        fleet.close()


def test_a_bad_host_timeout_is_bad_input(capsys):
    from lltui.cli import main

    assert main(["gpus", "--host-timeout", "0", "--source", "sim:4xl4,sim:colab-t4"]) == 2
    assert "--host-timeout" in capsys.readouterr().err


def test_a_socket_path_too_long_for_ssh_falls_back_to_a_connection_per_command(
    tmp_path, monkeypatch
):
    from lltui.sources.ssh import SshTarget

    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    target = SshTarget("gpu1")
    assert target.control_path() is None
    options = target.options()
    assert "ControlPath=none" in options and "ControlMaster=no" in options


AMD_FIX = Path(__file__).parent / "fixtures" / "amd"


def slow_amd_host(monkeypatch, tmp_path, seconds: dict[str, float], amd_smi: bool):
    """A host whose amd-smi commands (or, without amd-smi, rocm-smi) each take their
    ``seconds`` on a fake clock that the source reads: the timeouts each is given."""
    import types

    from lltui.sources.gpu import smi
    from lltui.sources.gpu.smi import CommandResult

    now = [1000.0]
    monkeypatch.setattr(smi, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    out = {
        "static": (AMD_FIX / "amd-smi/static-mi210-gpu_data.json").read_text(),
        "metric": (AMD_FIX / "amd-smi/metric-power-rocm6.1.0.json").read_text(),
        "process": (AMD_FIX / "amd-smi/process-2procs-rocm6.2.json").read_text(),
        "list": "",
        "version": "AMDSMI Tool: 24.6.2 | ROCm version: 6.2.0",
        "rocm-smi": (AMD_FIX / "rocm-smi/7900xt-productname-use-meminfo.json").read_text(),
    }
    given: list[tuple[str, float]] = []

    def host(argv, timeout: float) -> CommandResult:
        if "amd-smi" in argv and not amd_smi:
            given.append(("amd-smi", timeout))
            return CommandResult(127, "", "bash: line 1: amd-smi: command not found")
        what = next(w for w in out if w in argv)
        given.append((what, timeout))
        if timeout < seconds[what]:
            now[0] += timeout
            return CommandResult(124, "", f"{argv[0]} did not answer within {timeout:g} s")
        now[0] += seconds[what]
        return CommandResult(0, out[what], "")

    monkeypatch.setattr(smi, "run_command", host)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # (too deep for a master: no ssh)
    return given


def _rounds(spec, n):
    """A fleet of the one host ``spec`` (a 10 s host timeout), polled ``n`` rounds."""
    fleet = Fleet([spec], timeout=10.0)
    try:
        return [fleet.poll_host(0) for _ in range(n)]
    finally:
        fleet.close()


def test_an_amd_hosts_tools_share_the_host_timeout(monkeypatch, tmp_path):
    """amd:HOST gave each of its two tools half of --host-timeout: a host without amd-smi
    (it fails at once) whose rocm-smi answers in 6 s of a 10 s host timeout was down, "did
    not answer within 5 s". Then its open's commands and its first poll's shared one 10 s:
    the poll ran rocm-smi again with the 4 s left, and the fleet, reopening the host after
    the failed poll, had it down every round ("did not answer within 10 s"). An open's
    commands share the host's timeout, each poll's too; the first poll takes the rocm-smi
    output open read."""
    given = slow_amd_host(monkeypatch, tmp_path, {"rocm-smi": 6.0}, amd_smi=False)
    states = _rounds("amd:gpu-box:2222", 3)
    assert [(s.reachable, s.error) for s in states] == [(True, None)] * 3
    assert states[0].sample is not None
    assert states[0].sample.gpus[0].info.name == "Radeon RX 7900 XT"
    assert given == [("amd-smi", 10.0), ("rocm-smi", 10.0), ("rocm-smi", 10.0), ("rocm-smi", 10.0)]


def test_an_amd_hosts_polls_each_have_the_host_timeout(monkeypatch, tmp_path):
    """amd-smi answering each command in 3 s of a 10 s --host-timeout: open runs static,
    list and version (9 s) and its first poll's metric had the 1 s left: down every round
    of the fleet. Each poll now has the whole timeout, its commands sharing it."""
    seconds = dict.fromkeys(("static", "metric", "process", "list", "version"), 3.0)
    given = slow_amd_host(monkeypatch, tmp_path, seconds, amd_smi=True)
    states = _rounds("amd:gpu-box", 2)
    assert [(s.reachable, s.error) for s in states] == [(True, None)] * 2
    assert given[:5] == [
        ("static", 10.0), ("list", 7.0), ("version", 4.0), ("metric", 10.0), ("process", 7.0)
    ]  # fmt: skip


def test_a_command_given_what_was_left_says_so(monkeypatch, tmp_path):
    """A command given only what the ones before it left said it did not answer within the
    whole timeout ('within 10 s' of a process listing given 4 s), and one not run at all
    (amd-smi took the 10 s) said rocm-smi did not answer. Each says what it was given."""
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.sources.gpu.fleet import make_host_source

    seconds = {"static": 1.0, "list": 1.0, "version": 1.0, "metric": 6.0, "process": 5.0}
    slow_amd_host(monkeypatch, tmp_path, seconds, amd_smi=True)
    source = make_host_source("amd:gpu-box", timeout=10.0)
    try:
        source.open()
        sample = source.poll()  # metric 6 s: the process listing had the 4 s left
    finally:
        source.close()
    # (no ssh connection is kept here to tell whether ssh or amd-smi hung: both are named)
    left = "gpu-box did not answer within the 4.0 s left of 10 s (ssh or amd-smi)"
    assert sample.error == f"process list: {left}"
    source = make_host_source("amd:gpu-box", timeout=10.0)
    seconds["static"] = 12.0
    try:
        with pytest.raises(SourceUnavailable) as err:
            source.open()
    finally:
        source.close()
    assert str(err.value) == (
        "gpu-box did not answer within 10 s (ssh or amd-smi); "
        "rocm-smi on gpu-box was not run: the commands before it took all of 10 s"
    )


def test_watch_once_json_names_every_host_of_the_fleet_as_gpus_does(capsys):
    """`watch --once --json` over a fleet said "source": "sim:4xl4", its first host alone, as
    if one rig was watched; `gpus --json` of the same fleet named them all."""
    import json

    from lltui.cli import main

    fleet = ["--source", "sim:4xl4,sim:kaggle-2xt4,sim:4xl4"]
    assert main(["gpus", "--json", *fleet]) == 0
    said = json.loads(capsys.readouterr().out)["source"]
    main(["watch", "--once", "--json", *fleet])
    assert json.loads(capsys.readouterr().out)["source"] == said
    assert said == "sim:4xl4,sim:kaggle-2xt4,sim:4xl4"


def test_watch_takes_host_timeout_after_its_name_as_gpus_does(capsys):
    """`lltui watch --hosts FILE --host-timeout 5` was 'unrecognized arguments' (exit 2) where
    `lltui gpus --hosts FILE --host-timeout 5` was taken."""
    from lltui.cli import main

    fleet = ["--source", "sim:4xl4,sim:kaggle-2xt4"]
    assert main(["watch", "--once", *fleet, "--host-timeout", "5"]) == 0
    assert main(["watch", "--once", *fleet, "--host-timeout", "0"]) == 2
    assert "--host-timeout 0 is out of range" in capsys.readouterr().err
