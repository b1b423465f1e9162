"""Alerts: every kind raised from a replayed or simulated rig and cleared again, through
``lltui watch`` (its lines, JSON and exit codes), ``lltui gpus --json``, the exporter's series
and the hooks; bad thresholds are one line naming the key."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.alert_rig import CONFIG, EXPECTED, TICKS, write_alert_recording
from support.proc_helpers import gone, wait_for

from lltui.cli import main
from lltui.config import ConfigError, Settings, load_settings
from lltui.core.monitor.alert_settings import (
    KINDS,
    AlertConfig,
    AlertHook,
    AlertThresholds,
    alert_config_from_mapping,
)
from lltui.core.monitor.alerts import AlertChange, AlertTracker, HostStatus, exit_code
from lltui.services.alerts import AlertWatch, HookRunner, WatchRequest, run_hook
from lltui.services.rig import ReplayOptions, RigRequest
from lltui.sources.gpu.replay import ReplaySource

ROOT = Path(__file__).resolve().parents[1]
START = 1_767_225_601.0  # the simulated rig's wall clock at its first poll (tick 0)


@pytest.fixture
def rig(tmp_path: Path) -> tuple[Path, Path]:
    recording = tmp_path / "alerts.jsonl"
    write_alert_recording(recording)
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    return recording, config


def _watch(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    """``lltui watch ARGS`` (a ``--config FILE`` among them goes before the subcommand)."""
    given = list(args)
    before: list[str] = []
    if "--config" in given:
        at = given.index("--config")
        before = given[at : at + 2]
        del given[at : at + 2]
    code = main([*before, "watch", *given])
    return code, capsys.readouterr().out.splitlines()


def test_every_gpu_alert_kind_is_raised_and_cleared_from_a_replayed_rig(rig, capsys):
    recording, config = rig
    code, lines = _watch(
        capsys, "--config", str(config), "--source", f"replay:{recording}",
        "--replay-step", "--interval", "0.01", "--json",
    )  # fmt: skip
    assert code == 0  # ran to the end of the recording: no --fail-on
    events = [json.loads(line) for line in lines]
    start = START  # the recording's wall clock at tick 0
    for kind, (gpu, raised_at, cleared_at) in EXPECTED.items():
        mine = [e for e in events if e["kind"] == kind]
        assert [e["event"] for e in mine if e["event"] != "changed"] == ["raised", "cleared"], (
            kind,
            mine,
        )
        raised = next(e for e in mine if e["event"] == "raised")
        cleared = next(e for e in mine if e["event"] == "cleared")
        assert raised["gpu"] == gpu and raised["subject"] == f"GPU{gpu}"
        assert raised["at"] - start == pytest.approx(raised_at), kind
        assert cleared["at"] - start == pytest.approx(cleared_at), kind
    severities = {e["kind"]: e["severity"] for e in events if e["event"] == "raised"}
    assert severities["gpu_temp"] == "critical" and severities["power_cap"] == "warning"
    assert severities["throttle"] == "critical"  # hw thermal costs speed hard
    power = next(e for e in events if e["kind"] == "power_cap" and e["event"] == "raised")
    assert power["since"] - start == pytest.approx(5)  # since the condition began


def test_watch_prints_one_line_per_change(rig, capsys):
    import signal

    recording, config = rig
    handler = signal.getsignal(signal.SIGTERM)
    code, lines = _watch(
        capsys, "--config", str(config), "--source", f"replay:{recording}",
        "--replay-step", "--interval", "0.01",
    )  # fmt: skip
    assert code == 0
    raised = [line for line in lines if " raised " in line]
    assert len(raised) == len(EXPECTED)
    assert any("raised critical GPU0: temperature 92°C (critical at 90)" in line for line in lines)
    assert any("cleared critical GPU1: GPU is lost" in line for line in lines)
    assert signal.getsignal(signal.SIGTERM) is handler  # its SIGTERM handler is put back


def test_a_looped_replays_alerts_go_on_later_each_loop(rig):
    """--replay-loop: each loop plays one recording's span later on the wall clock, so every
    alert is raised again later than the last loop's (its time and its since), and the XID
    events it saw with them."""
    recording, config = rig
    request = WatchRequest(
        rig=RigRequest(
            source=f"replay:{recording}",
            interval_s=0.01,
            replay=ReplayOptions(stepped=True, loop=True),
        ),
        config=load_settings(None, path=str(config)).alerts,
    )
    watch = AlertWatch(request)
    try:
        changes = [c for _ in range(2 * TICKS) for c in watch.round().changes]
    finally:
        watch.close()
    times = [c.at for c in changes]
    assert times == sorted(times)
    period = TICKS  # 21 s of samples and one 1 s gap
    for kind in EXPECTED:
        raised = [c.alert for c in changes if c.event == "raised" and c.alert.kind == kind]
        assert [a.since for a in raised] == [raised[0].since, raised[0].since + period], kind
    source = ReplaySource(recording, stepped=True, loop=True)
    source.open()
    played = [source.poll() for _ in range(2 * TICKS)]
    source.close()
    xids = [e.t for s in played for g in s.gpus for e in g.xid_events]
    assert xids == [START + 11, START + 11 + period]  # tick 12's event, seen again a loop on


def test_watch_fail_on_exits_with_the_severity_reached(rig, capsys):
    recording, config = rig
    base = ["--config", str(config), "--source", f"replay:{recording}", "--replay-step"]
    code, lines = _watch(capsys, *base, "--interval", "0.01", "--fail-on", "critical")
    assert code == 4
    # stopped at the first critical alerts: tick 1's two, nothing after them
    assert len(lines) == 2 and all(" raised critical " in line for line in lines)
    assert any(line.endswith("GPU0: temperature 92°C (critical at 90)") for line in lines)


def test_a_replay_faster_than_the_rounds_misses_no_alert(rig, capsys):
    """--replay-speed 10000 plays the 22 s recording in 2 ms, a round every 0.25 s: every
    sample played since the last round is evaluated, so the alerts are those of a stepped
    replay; it printed one line, the rest fell between rounds. --fail-on stops where a
    stepped replay stops, not at the end of the round."""
    recording, config = rig
    base = ["--config", str(config), "--source", f"replay:{recording}", "--json"]
    code, stepped = _watch(capsys, *base, "--replay-step", "--interval", "0.01")
    assert code == 0 and len(stepped) >= 2 * len(EXPECTED)
    fast = [*base, "--replay-speed", "10000", "--interval", "0.25"]
    assert _watch(capsys, *fast) == (0, stepped)
    code, lines = _watch(capsys, *fast, "--fail-on", "critical")
    assert code == 4 and lines == stepped[:2]


def test_the_alert_that_ends_a_watch_runs_its_hook_too(rig, tmp_path, capsys):
    recording, config = rig
    paged = tmp_path / "paged"
    script = (  # slow enough that the second is still waiting when the watch ends
        "import os, sys, time; time.sleep(0.5); "
        "open(sys.argv[1], 'a').write(os.environ['LLTUI_ALERT_KIND'] + '\\n')"
    )
    hook = json.dumps([sys.executable, "-c", script, str(paged)])
    config.write_text(config.read_text() + f"hook = {hook}\n")
    base = ["--config", str(config), "--source", f"replay:{recording}", "--replay-step"]
    code, lines = _watch(capsys, *base, "--interval", "0.01", "--fail-on", "critical")
    assert code == 4 and len(lines) == 2
    assert len(paged.read_text().splitlines()) == 2  # both alerts paged before it ended


def test_a_watch_that_ends_runs_every_hook_still_waiting(rig, tmp_path, capsys):
    """A replay played to its end dropped the hooks still waiting (`8 waiting not run
    (closing)`): the alerts it printed were never announced. It waits for them now, each
    bounded by the hook's timeout."""
    recording, config = rig
    paged = tmp_path / "paged"
    script = (  # slower than the whole replay: most wait in line when it ends
        "import os, sys, time; time.sleep(1.0); open(sys.argv[1], 'a').write("
        "os.environ['LLTUI_ALERT_KIND'] + ' ' + os.environ['LLTUI_ALERT_EVENT'] + '\\n')"
    )
    hook = json.dumps([sys.executable, "-c", script, str(paged)])
    config.write_text(config.read_text() + f"hook = {hook}\nhook_timeout_s = 30\n")
    argv = ["--config", str(config), "watch", "--source", f"replay:{recording}"]
    code = main([*argv, "--replay-step", "--interval", "0.01"])
    out, err = capsys.readouterr()
    assert code == 0 and out.count(" cleared ") == len(EXPECTED)
    assert "not run" not in err and "killed" not in err
    told = set(paged.read_text().splitlines())  # a raised still waiting folds into its clear
    cleared = {line for line in told if line.endswith(" cleared")}
    assert cleared == {f"{kind} cleared" for kind in EXPECTED}


def test_watch_once_exit_codes_by_severity(tmp_path, capsys):
    from support.alert_rig import alert_samples

    from lltui.sources.gpu.replay import Recorder

    info, samples = alert_samples()
    cases = {"none": (samples[0], 0), "warning": (samples[7], 3), "critical": (samples[1], 4)}
    for name, (sample, expected) in cases.items():
        path = tmp_path / f"{name}.jsonl"
        with Recorder(path, wall=lambda: 1_767_225_600.0) as rec:
            rec.start(info)
            rec.write(sample)
        code, lines = _watch(capsys, "--once", "--source", f"replay:{path}")
        assert code == expected, (name, lines)
        code, _ = _watch(capsys, "--once", "--source", f"replay:{path}", "--fail-on", "critical")
        assert code == (4 if expected == 4 else 0)
    code, lines = _watch(capsys, "--once", "--json", "--source", f"replay:{tmp_path}/warning.jsonl")
    data = json.loads("\n".join(lines))
    assert [a["kind"] for a in data["alerts"]] == ["power_cap"]  # one look: no 30 s wait


def test_watch_bad_input_and_failures_are_one_line(tmp_path, capsys):
    code = main(["watch", "--once", "--source", f"replay:{tmp_path}/none.jsonl"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no such recording" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("[alerts]\ngpu_temp_critical = 'hot'\n")
    code = main(["--config", str(bad), "watch", "--once", "--source", "sim:kaggle-2xt4"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "alerts.gpu_temp_critical must be a number, got 'hot'" in err


# -- no real GPU where one was expected ------------------------------------------------------
@pytest.fixture
def no_nvml(monkeypatch):
    """A machine without the NVML binding: ``auto`` stands in the simulated rig."""
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError


def test_watch_once_without_a_gpu_says_simulated_and_is_critical(no_nvml, capsys):
    code = main(["watch", "--once", "--json"])
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert code == 4
    assert data["simulated"] is True and data["source"] == "sim:kaggle-2xt4"
    assert "nvidia-ml-py is not installed" in data["simulated_reason"]
    [alert] = data["alerts"]
    assert (alert["kind"], alert["severity"], alert["subject"]) == (
        "no_gpu",
        "critical",
        "source auto",
    )
    assert "SIMULATED rig (sim:kaggle-2xt4): no NVIDIA GPU here: nvidia-ml-py" in err
    # the README's cron line pages: --fail-on critical fails
    assert main(["watch", "--once", "--fail-on", "critical"]) == 4
    assert (
        "critical source auto: no NVIDIA GPU here: nvidia-ml-py is not installed"
        in capsys.readouterr().out
    )


def test_plain_watch_without_a_gpu_says_so_and_stops_at_fail_on(no_nvml, capsys):
    # bounded: a watch that never raises it is stopped (as by SIGTERM) and exits 0
    stop = threading.Timer(60, os.kill, (os.getpid(), signal.SIGTERM))
    stop.start()
    try:
        code = main(["watch", "--interval", "0.25", "--fail-on", "critical"])
    finally:
        stop.cancel()
    assert code == 4
    out, err = capsys.readouterr()
    assert "SIMULATED rig (sim:kaggle-2xt4)" in err
    assert out.count(" raised critical source auto: no NVIDIA GPU here: nvidia-ml-py") == 1


def test_a_simulated_rig_asked_for_raises_nothing_but_says_it_is_simulated(capsys):
    assert main(["watch", "--once", "--json", "--source", "sim:kaggle-2xt4"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["alerts"] == [] and data["simulated"] is True
    assert "SIMULATED rig (sim:kaggle-2xt4)" in err


def test_a_simulated_fleet_says_it_is_simulated_as_one_rig_does(capsys):
    """A fleet of simulated rigs said "simulated": false and no SIMULATED line (its first
    host's info, read before any host answered, stood for the fleet)."""
    fleet = ["--source", "sim:4xl4,sim:kaggle-2xt4"]
    assert main(["watch", "--once", "--json", *fleet]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["simulated"] is True and "rig kaggle-2xt4" in data["simulated_reason"]
    assert "SIMULATED rig (sim:4xl4,sim:kaggle-2xt4): the simulated rig 4xl4" in err
    assert main(["watch", "--once", *fleet]) == 0
    assert err.count("SIMULATED") == 1 and "SIMULATED" in capsys.readouterr().err


def test_gpus_json_without_a_gpu_has_the_alert_too(no_nvml, capsys):
    assert main(["gpus", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["simulated"] is True
    assert [a["kind"] for a in data["alerts"]] == ["no_gpu"]
    assert main(["gpus", "--json", "--source", "sim:kaggle-2xt4"]) == 0
    assert json.loads(capsys.readouterr().out)["alerts"] == []


def test_report_without_a_gpu_has_the_alert_too(no_nvml, capsys):
    assert main(["report", "--json"]) == 0
    assert [a["kind"] for a in json.loads(capsys.readouterr().out)["alerts"]] == ["no_gpu"]
    assert main(["report", "--json", "--source", "sim:kaggle-2xt4"]) == 0
    assert json.loads(capsys.readouterr().out)["alerts"] == []


async def test_the_monitor_without_a_gpu_shows_the_alert_and_runs_its_hook(no_nvml, tmp_path):
    """The monitor left the source out of its alerts: no ``no_gpu`` line, and a hook on it
    never ran, where ``watch``, ``gpus`` and ``report`` raised it."""
    from support.app_helpers import wait_for as settle

    from lltui.app.app import create_app
    from lltui.app.widgets.text_lines import TextLines

    paged = tmp_path / "paged"
    script = "import os, sys; open(sys.argv[1], 'a').write(os.environ['LLTUI_ALERT_KIND'])"
    config = tmp_path / "config.toml"
    hook = json.dumps([sys.executable, "-c", script, str(paged)])
    config.write_text(f"[alerts.hooks]\nno_gpu = {hook}\n")
    app = create_app(load_settings(None, path=str(config)), start_polling=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(1)
        await pilot.pause()
        line = str(app.screen.query_one("#alerts", TextLines).render())
        assert "CRIT source auto no NVIDIA GPU here: nvidia-ml-py is not installed" in line
        await settle(lambda: paged.exists() and paged.read_text() == "no_gpu")
    # a simulated rig asked for is no alert in the monitor either
    app = create_app(Settings(source="sim:kaggle-2xt4"), start_polling=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(1)
        await pilot.pause()
        assert not app.screen.query_one("#alerts", TextLines).display


class _NvmlSource:
    """A rig read through NVML (a simulated one, told as real): its polls fail from the
    ``fail_from``-th on, as a driver gone does."""

    name = "nvml"

    def __init__(self, fail_from: int = 1) -> None:
        from lltui.sources.gpu.sim import SimSource

        self.inner = SimSource("kaggle-2xt4", seed=0)
        self.fail_from, self.polls = fail_from, 0

    def open(self) -> Any:
        from dataclasses import replace

        return replace(self.inner.open(), source="nvml", simulated=False, stand_in=False)

    def poll(self) -> Any:
        from dataclasses import replace

        from lltui.core.monitor.models import SourceUnavailable

        self.polls += 1
        if self.polls >= self.fail_from:
            raise SourceUnavailable("NVML: driver gone (Driver Not Loaded)")
        return replace(self.inner.poll(), info=self.open())

    def close(self) -> None:
        pass


@pytest.mark.parametrize("fail_from", [1, 2])  # before any sample, after one
async def test_the_monitor_whose_source_fails_shows_the_alert_and_runs_its_hook(
    tmp_path, fail_from
):
    """A poll that failed outright only set the status line's error: the monitor raised no
    ``no_gpu`` alert and ran none of its hooks, where ``watch`` raised it. A recording that
    stopped (an error of the same path) is no source failure."""
    from dataclasses import replace

    from support.app_helpers import wait_for as settle

    from lltui.app.app import create_app
    from lltui.app.widgets.text_lines import TextLines

    paged = tmp_path / "paged"
    script = "import os, sys; open(sys.argv[1], 'a').write(os.environ['LLTUI_ALERT_KIND'])"
    config = tmp_path / "config.toml"
    config.write_text(
        f"[alerts.hooks]\nno_gpu = {json.dumps([sys.executable, '-c', script, str(paged)])}\n"
    )
    settings = replace(load_settings(None, path=str(config)), source="nvml", interval=0.25)
    app = create_app(settings, source=_NvmlSource(fail_from))  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(lambda: app.model.error is not None)
        await pilot.pause()
        line = str(app.screen.query_one("#alerts", TextLines).render())
        assert "CRIT source nvml NVML: driver gone (Driver Not Loaded)" in line, line
        await settle(lambda: paged.exists() and paged.read_text() == "no_gpu")

    def full_disk(sample: Any) -> None:
        raise OSError(28, "No space left on device")

    app = create_app(
        settings, source=_NvmlSource(fail_from=99), on_sample=full_disk, start_polling=False
    )  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        app.poll_sync(1)
        await pilot.pause()
        assert app.model.error == "recording stopped: [Errno 28] No space left on device"
        assert not app.model.alerts.active


def test_a_source_that_fails_is_critical_until_it_answers():
    from lltui.core.monitor.alerts import SourceStatus
    from lltui.core.monitor.models import RigInfo
    from lltui.services.rig import source_problem

    fallback = RigInfo("sim:kaggle-2xt4", simulated=True, simulated_reason="no NVIDIA GPU here")
    assert source_problem("auto", fallback) == "no NVIDIA GPU here"
    assert source_problem("sim:kaggle-2xt4", fallback) is None
    assert source_problem("nvml", RigInfo("nvml"), "NVML: driver gone") == "NVML: driver gone"
    assert source_problem("nvml", RigInfo("nvml")) is None
    tracker = AlertTracker()
    first = tracker.update(1.0, sources=[SourceStatus("nvml", "NVML: driver gone")])
    assert [(c.event, c.alert.kind, c.alert.severity) for c in first] == [
        ("raised", "no_gpu", "critical")
    ]
    assert [c.event for c in tracker.update(2.0, sources=[SourceStatus("nvml")])] == ["cleared"]


def test_watch_interval_zero_is_refused(capsys):
    assert main(["watch", "--once", "--interval", "0", "--source", "sim:kaggle-2xt4"]) == 2
    assert "interval must be between 0.25 and 3600 s" in capsys.readouterr().err
    assert main(["--interval", "0", "watch", "--once", "--source", "sim:kaggle-2xt4"]) == 2


def test_an_interval_has_one_rule_before_the_command_or_after_it(capsys):
    """`lltui --interval 120 watch --once` was refused (between 0.25 and 60.0 s) while
    `lltui watch --interval 120 --once` was taken (at most 3600 s), and 0 and 0.01 after the
    command were refused in two other words: each is now the same answer both ways."""
    for value, code in (("120", 0), ("0", 2), ("0.01", 2), ("4000", 2)):
        said = []
        for argv in (
            ["--interval", value, "watch", "--once", "--source", "sim:kaggle-2xt4"],
            ["watch", "--once", "--interval", value, "--source", "sim:kaggle-2xt4"],
        ):
            assert main(argv) == code, (argv, capsys.readouterr().err)
            said.append([ln for ln in capsys.readouterr().err.splitlines() if "interval" in ln])
        assert said[0] == said[1], said
        assert code == 0 or said[0] == [
            "lltui: command line: interval must be between 0.25 and 3600 s (shorter only for"
            f" a --replay-step replay), got {value}"
        ]


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"gpu_temp_warning": "hot"}, "alerts.gpu_temp_warning must be a number"),
        ({"vram_warning_pct": 140}, "alerts.vram_warning_pct must be a percentage"),
        ({"nope": 1}, "alerts.nope: unknown setting"),
        ({"gpu_temp_warning": 95, "gpu_temp_critical": 90}, "alerts.gpu_temp_warning (95)"),
        ({"disabled": ["power"]}, "alerts.disabled: 'power' is no alert kind"),
        ({"hook": "notify-send hi"}, "alerts.hook must be a command as a list of words"),
        ({"hooks": {"xid": []}}, "alerts.hooks.xid must be a command"),
        ({"hooks": {"fire": ["x"]}}, "alerts.hooks.fire: no such alert kind"),
        ({"hook_timeout_s": 0}, "alerts.hook_timeout_s must be seconds"),
        ({"hook": ["echo", "a\0b"]}, "alerts.hook: a word holds a NUL character"),
        ({"hooks": {"xid": ["x\0"]}}, "alerts.hooks.xid: a word holds a NUL character"),
    ],
)
def test_a_malformed_threshold_config_is_one_line_naming_the_key(tmp_path, table, words):
    with pytest.raises(ValueError) as exc:
        alert_config_from_mapping(table)
    assert words in str(exc.value) and "\n" not in str(exc.value)
    path = tmp_path / "config.toml"
    lines = ["[alerts]"] + [f"{k} = {json.dumps(v)}" for k, v in table.items() if k != "hooks"]
    if "hooks" in table:
        lines += ["[alerts.hooks]"] + [f"{k} = {json.dumps(v)}" for k, v in table["hooks"].items()]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path=path, environ={})
    assert words in str(err.value) and str(path) in str(err.value)


def test_thresholds_from_the_config_reach_the_tracker(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(
        '[alerts]\ngpu_temp_warning = 65\ngpu_temp_critical = 70\ndisabled = ["vram_full"]\n'
        'hook = ["true"]\nhook_timeout_s = 2\n[alerts.hooks]\nxid = ["false", "x"]\n'
    )
    settings = load_settings(path=path, environ={})
    config = settings.alerts
    assert config.thresholds.gpu_temp_critical == 70 and "vram_full" in config.thresholds.disabled
    assert [h.argv for h in config.hooks_for("xid")] == [("true",), ("false", "x")]
    assert [h.argv for h in config.hooks_for("gpu_temp")] == [("true",)]


def test_temperatures_clear_only_a_margin_under_their_threshold():
    from support.alert_rig import alert_samples

    _info, samples = alert_samples()
    tracker = AlertTracker(AlertThresholds())
    base = samples[0]

    def at(temp: float, t: float) -> tuple[AlertChange, ...]:
        from dataclasses import replace

        gpus = (replace(base.gpus[0], temp_c=temp), *base.gpus[1:])
        return tracker.update(t, rigs={None: replace(base, gpus=gpus)})

    assert [c.event for c in at(91, 1)] == ["raised"]
    assert [(c.event, c.alert.severity) for c in at(89, 2)] == [("changed", "warning")]
    assert at(81, 3) == ()  # under 83, but not 3 degrees under: still raised
    assert [c.event for c in at(79, 4)] == ["cleared"]


def test_fleet_host_down_is_raised_and_cleared_when_it_answers(tmp_path):
    later = tmp_path / "later.jsonl"
    request = WatchRequest(
        rig=RigRequest(source=f"sim:kaggle-2xt4,replay:{later}", interval_s=0.05)
    )
    watch = AlertWatch(request)
    try:
        first = watch.round()
        assert [(c.event, c.alert.kind) for c in first.changes] == [("raised", "host_down")]
        assert "no such recording" in first.active[0].message
        down = first.active[0]  # its host is named (it was None), and said once in its line
        assert down.host == f"replay:{later}" and down.subject == f"host replay:{later}"
        assert down.line.startswith(f"critical host replay:{later}: ")
        write_alert_recording(later)  # the host comes up
        second = watch.round()
        assert ("cleared", "host_down") in [(c.event, c.alert.kind) for c in second.changes]
    finally:
        watch.close()


class _Health(http.server.BaseHTTPRequestHandler):
    """/health as llama-server answers it: 503 "Loading model", then 200 once ready."""

    ready = False

    def do_GET(self) -> None:
        if self.path != "/health":
            self.send_error(404)
            return
        if type(self).ready:
            body, code = b'{"status":"ok"}', 200
        else:
            body = b'{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}'
            code = 503
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@contextmanager
def _server() -> Iterator[http.server.ThreadingHTTPServer]:
    handler = type("Health", (_Health,), {"ready": False})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_llama_server_not_ready_then_ready_then_down(tmp_path):
    config = AlertConfig(AlertThresholds(llama_not_ready_for_s=0))
    with _server() as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        watch = AlertWatch(
            WatchRequest(rig=RigRequest(source="sim:kaggle-2xt4"), llama=(url,), config=config)
        )
        try:
            changes = watch.round().changes
            assert [(c.event, c.alert.kind, c.alert.severity) for c in changes] == [
                ("raised", "llama_not_ready", "warning")
            ]
            assert "Loading model" in changes[0].alert.message
            server.RequestHandlerClass.ready = True  # type: ignore[attr-defined]
            assert [(c.event, c.alert.kind) for c in watch.round().changes] == [
                ("cleared", "llama_not_ready")
            ]
            server.shutdown()
            server.server_close()
            changes = watch.round().changes
            assert [(c.event, c.alert.kind, c.alert.severity) for c in changes] == [
                ("raised", "llama_down", "critical")
            ]
        finally:
            watch.close()
    tracker = watch.tracker  # and cleared when nothing is followed any more
    assert [c.event for c in tracker.update(time.time(), llama=[])] == ["cleared"]


def test_every_kind_in_the_table_is_tested():
    tested = set(EXPECTED) | {"llama_down", "llama_not_ready", "host_down", "no_gpu"}
    tested |= {"plan_growth", "plan_placement"}  # tests/test_plan_reality.py
    assert tested == set(KINDS)


# -- gpus --json and the exporter ---------------------------------------------------------------
def test_gpus_json_lists_the_alerts_raised_now(tmp_path, capsys):
    from support.alert_rig import alert_samples

    from lltui.sources.gpu.replay import Recorder

    info, samples = alert_samples()
    path = tmp_path / "hot.jsonl"
    with Recorder(path, wall=lambda: 1_767_225_600.0) as rec:
        rec.start(info)
        rec.write(samples[1])
    assert main(["gpus", "--json", "--source", f"replay:{path}"]) == 0
    data = json.loads(capsys.readouterr().out)
    kinds = {(a["kind"], a["gpu"], a["severity"]) for a in data["alerts"]}
    assert kinds == {("gpu_temp", 0, "critical"), ("mem_temp", 1, "critical")}
    assert data["gpus"][1]["mem_temp_c"] == 96.0


def test_the_exporter_serves_alerts_as_series(tmp_path):
    from prometheus_client import generate_latest

    from lltui.services.exporter import Sampler, make_registry
    from lltui.sources.gpu.prom import parse_exposition

    recording = tmp_path / "alerts.jsonl"
    write_alert_recording(recording)
    source = ReplaySource(recording, stepped=True)
    source.open()
    sampler = Sampler(source, host="rig-a", thresholds=AlertThresholds(event_hold_s=3))
    registry = make_registry(sampler)
    sampler.sample_once()
    sampler.sample_once()  # tick 1: GPU0 at 92 °C
    series = parse_exposition(generate_latest(registry).decode())
    active = [s for s in series if s.name == "lltui_alert_active"]
    labels = {
        (s.label("kind"), s.label("gpu"), s.label("severity"), s.label("host")) for s in active
    }
    assert labels == {
        ("gpu_temp", "0", "critical", "rig-a"),
        ("mem_temp", "1", "critical", "rig-a"),
    }
    since = [s for s in series if s.name == "lltui_alert_since_timestamp_seconds"]
    assert {s.value for s in since} == {START + 1}
    for _ in range(4):
        sampler.sample_once()  # tick 5: cooled down
    series = parse_exposition(generate_latest(registry).decode())
    assert {s.label("kind") for s in series if s.name == "lltui_alert_active"} == {"vram_full"}
    source.close()


def test_the_example_alerting_rules_are_valid_prometheus_rules():
    rules = ROOT / "examples" / "prometheus" / "lltui-alerts.yml"
    text = rules.read_text()
    assert "lltui_alert_active" in text and "lltui_gpu_lost" in text
    promtool = next(
        (p for p in ("/usr/bin/promtool", "/usr/local/bin/promtool") if os.path.exists(p)), None
    )
    if promtool is None:
        pytest.skip("no promtool (apt install prometheus) to check the rules with")
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


# -- hooks ---------------------------------------------------------------------------------------
def _change(kind: str = "xid") -> AlertChange:
    from lltui.core.monitor.alerts import Alert

    alert = Alert(kind, "critical", "GPU1", "XID 79: GPU has fallen off the bus", 1_767_225_600.0,
                  gpu_index=1, gpu_uuid="GPU-1")  # fmt: skip
    return AlertChange("raised", alert, 1_767_225_601.0)


def test_a_hook_gets_the_alert_in_its_environment_and_no_shell(tmp_path):
    out = tmp_path / "env.json"
    script = (
        "import json, os, sys; json.dump({k: v for k, v in os.environ.items() "
        "if k.startswith('LLTUI_ALERT')} | {'argv': sys.argv[1:]}, open(sys.argv[1], 'w'))"
    )
    hook = AlertHook((sys.executable, "-c", script, str(out), "$HOME;", "`id`"))
    result = run_hook(hook, _change(), timeout_s=30)
    assert result.code == 0 and not result.timed_out
    got = json.loads(out.read_text())
    assert got["argv"] == [str(out), "$HOME;", "`id`"]  # words as given: no shell read them
    assert got["LLTUI_ALERT_KIND"] == "xid" and got["LLTUI_ALERT_GPU"] == "1"
    assert (
        got["LLTUI_ALERT_EVENT"] == "raised"
        and json.loads(got["LLTUI_ALERT_JSON"])["uuid"] == "GPU-1"
    )


def test_a_hook_that_hangs_is_killed_after_its_timeout_with_what_it_started(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open({str(pidfile)!r}, 'w').write(str(c.pid)); time.sleep(120)"
    )
    started = time.monotonic()
    result = run_hook(AlertHook((sys.executable, "-c", script)), _change(), timeout_s=1.0)
    assert result.timed_out and time.monotonic() - started < 15
    assert "killed after its timeout" in result.line
    child = int(pidfile.read_text())
    for _ in range(100):  # the grandchild went with its group
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the hook's child {child} outlived the timeout")


def test_hooks_run_per_kind_off_the_caller_and_report_failures(tmp_path):
    marker = tmp_path / "ran"
    config = AlertConfig(
        hooks=(
            AlertHook((sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')")),
            AlertHook(("/nonexistent/hook",), frozenset({"xid"})),
            AlertHook(("/nonexistent/other",), frozenset({"ecc"})),
        ),
        hook_timeout_s=10,
    )
    heard = []
    runner = HookRunner(config, heard.append)
    runner.fire([_change("xid")])
    runner.wait(30)
    assert marker.read_text() == "x"
    assert [r.line for r in heard] == ["alert hook hook: cannot run: No such file or directory"]


def _gpu_change(i: int, event: str = "raised") -> AlertChange:
    from lltui.core.monitor.alerts import Alert

    alert = Alert("xid", "critical", f"GPU{i}", f"XID 79 on GPU{i}", START, gpu_index=i)
    return AlertChange(event, alert, START + i)


@pytest.mark.parametrize("exits_first", [False, True], ids=["hangs", "exits-leaving-a-child"])
def test_a_hooks_background_child_is_stopped_with_it_at_the_timeout(tmp_path, exits_first):
    pidfile = tmp_path / "child.pid"
    tail = "" if exits_first else "; sleep 300"
    hook = AlertHook(("sh", "-c", f'sleep 300 & echo $! > "{pidfile}"{tail}'))  # a list: no shell
    result = run_hook(hook, _change(), timeout_s=1.0)
    assert result.timed_out and "killed after its timeout" in result.line
    child = int(pidfile.read_text())
    assert wait_for(lambda: gone(child), 10), f"the hook's child {child} outlived it"


def test_a_storm_of_alerts_runs_every_hook_none_lost(tmp_path):
    out = tmp_path / "ran"
    hook = AlertHook(("sh", "-c", f'echo "$LLTUI_ALERT_SUBJECT" >> "{out}"'))
    runner = HookRunner(AlertConfig(hooks=(hook,), hook_timeout_s=30))
    runner.fire([_gpu_change(i) for i in range(200)])
    assert runner.wait(120)
    ran = out.read_text().split()
    assert sorted(ran) == sorted(f"GPU{i}" for i in range(200))
    assert (runner.started, runner.coalesced, runner.dropped) == (200, 0, 0)


def test_a_full_queue_runs_oldest_first_coalesces_and_says_what_it_drops(tmp_path):
    out, gate = tmp_path / "ran", tmp_path / "gate"
    script = (
        f'while [ ! -e "{gate}" ]; do sleep 0.02; done; '
        f'echo "$LLTUI_ALERT_SUBJECT $LLTUI_ALERT_EVENT $LLTUI_ALERT_COALESCED" >> "{out}"'
    )
    heard: list[str] = []
    config = AlertConfig(hooks=(AlertHook(("sh", "-c", script)),), hook_timeout_s=60)
    runner = HookRunner(config, lambda r: heard.append(r.line), max_running=1, max_queued=4)
    runner.fire([_gpu_change(0)])
    assert wait_for(lambda: runner.started == 1)  # GPU0's hook runs (held at the gate)
    runner.fire([_gpu_change(i) for i in (1, 2, 3, 4)])  # the queue is full
    runner.fire([_gpu_change(1, "changed"), _gpu_change(1, "changed")])
    runner.fire([_gpu_change(1, "cleared"), _gpu_change(5), _gpu_change(6)])
    gate.touch()
    assert runner.wait(60)
    assert out.read_text().splitlines() == [
        "GPU0 raised 0",
        "GPU1 cleared 3",  # its place in line, the newest change, three folded in
        "GPU2 raised 0",
        "GPU3 raised 0",
        "GPU4 raised 0",
    ]
    assert (runner.started, runner.coalesced, runner.dropped) == (5, 3, 2)
    assert heard == ["alert hook sh: dropped (4 already waiting)"] * 2  # 5 + 3 + 2 = 10 fired


def test_a_hanging_hook_does_not_starve_the_others_and_close_stops_it(tmp_path):
    pids, out = tmp_path / "pids", tmp_path / "ran"
    hang = AlertHook(("sh", "-c", f'echo $$ >> "{pids}"; exec sleep 300'))
    quick = AlertHook(("sh", "-c", f'echo "$LLTUI_ALERT_SUBJECT" >> "{out}"'))
    runner = HookRunner(AlertConfig(hooks=(hang, quick), hook_timeout_s=300))
    runner.fire([_gpu_change(i) for i in range(10)])
    assert wait_for(lambda: out.exists() and len(out.read_text().split()) == 10, 60)
    assert runner.pending > 0  # the hanging ones are still there
    started = time.monotonic()
    runner.close()
    assert time.monotonic() - started < 15
    hung = [int(p) for p in pids.read_text().split()]
    assert hung and wait_for(lambda: all(gone(p) for p in hung), 10)


def test_hooks_dropped_at_close_name_the_alerts_they_did_not_announce():
    """Ctrl-C said only `3 waiting not run (closing)`: which alerts went unannounced?"""
    heard: list[str] = []
    config = AlertConfig(hooks=(AlertHook(("sleep", "300")),), hook_timeout_s=300)
    runner = HookRunner(config, lambda r: heard.append(r.line), max_running=1)
    runner.fire([_gpu_change(i) for i in range(4)])
    assert wait_for(lambda: runner.started == 1)  # GPU0's runs, the rest wait
    runner.close()
    assert heard == [
        "alert hooks: 3 waiting not run (closing); not announced: xid GPU1, xid GPU2, xid GPU3",
        "alert hook sleep: stopped (closing)",  # not its timeout: 300 s
    ]


def test_a_nul_in_a_hooks_argv_is_one_line_not_a_traceback(tmp_path, capsys):
    result = run_hook(AlertHook(("echo", "a\0b")), _change(), timeout_s=5)
    assert result.error is not None and result.line.startswith("alert hook echo: cannot run")
    config = tmp_path / "config.toml"
    config.write_text('[alerts]\nhook = ["echo", "a\\u0000b"]\n')
    assert main(["--config", str(config), "watch", "--once", "--source", "sim:4xl4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "alerts.hook: a word holds a NUL character" in err[0], err


def test_exit_codes_table():
    from lltui.core.monitor.alerts import Alert

    warn = Alert("power_cap", "warning", "GPU0", "m", 0.0)
    crit = Alert("xid", "critical", "GPU0", "m", 0.0)
    assert exit_code([]) == 0
    assert exit_code([warn]) == 3 and exit_code([warn], "critical") == 0
    assert exit_code([warn, crit]) == 4 and exit_code([crit], "critical") == 4
    assert HostStatus("h", True).down


def test_a_hook_named_with_control_characters_is_printed_escaped(tmp_path):
    result = run_hook(AlertHook(("\x1b[2J\nFORGED", "x")), _change(), timeout_s=5)
    assert result.error is not None
    assert "\x1b" not in result.line and "\n" not in result.line and "FORGED" in result.line


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGKILL])
def test_hooks_end_with_watch_when_the_terminal_closes_or_it_is_killed(tmp_path, sig):
    """SIGTERM stopped the hooks running; SIGHUP (the terminal closing) and SIGKILL left
    them behind with parent 1."""
    pids = tmp_path / "pids"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\nsleep 300 &\necho $! $$ >> {pids}\nexec sleep 301\n")
    hook.chmod(0o755)
    config = tmp_path / "watch.toml"
    config.write_text(
        "[alerts]\ngpu_temp_warning = 1\ngpu_temp_critical = 2\n"
        f"hook = [{json.dumps(str(hook))}]\nhook_timeout_s = 120\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    argv = [sys.executable, "-m", "lltui", "--config", str(config), "watch", "--source", "sim"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for(lambda: pids.exists() and pids.read_text().strip(), 60)
        child, leader = (int(p) for p in pids.read_text().split()[:2])
        proc.send_signal(sig)
        proc.wait(30)
        assert wait_for(lambda: gone(leader), 15)  # the hook itself, dead with lltui
        if sig == signal.SIGHUP:  # stopped as by Ctrl-C: its whole group
            assert wait_for(lambda: gone(child), 15)
    finally:
        proc.kill()
        for line in pids.read_text().split() if pids.exists() else ():
            with contextlib.suppress(OSError):
                os.kill(int(line), signal.SIGKILL)


def _vram_alert(memory: Callable[[int], dict[str, int | None]]) -> AlertChange:
    """The VRAM alert a simulated GPU 0 raises with the memory fields ``memory(total)``."""
    from dataclasses import replace

    from lltui.core.monitor.models import RigSample
    from lltui.sources.gpu.sim import SimSource

    src = SimSource("kaggle-2xt4", seed=0)
    src.open()
    s = src.poll()
    g = s.gpus[0]
    total = g.info.memory_total
    assert total is not None
    sample: RigSample = replace(s, gpus=(replace(g, **memory(total)), *s.gpus[1:]))
    (change,) = [
        c for c in AlertTracker().update(1.0, rigs={None: sample}) if c.alert.kind == "vram_full"
    ]
    return change


def test_vram_alert_works_out_free_memory_a_source_does_not_send():
    """all-smi sends used and total, no free: the alert said "0 MiB free" of a GPU with
    100 MiB left."""
    change = _vram_alert(lambda total: {"memory_used": total - 100 * 2**20, "memory_free": None})
    assert "(100 MiB free)" in change.alert.message


def test_a_card_with_nothing_free_is_critical_though_nvml_used_leaves_reserved_out():
    """NVML's used leaves the driver's reserved memory out: a full 32 GB V100 showed 98.8 %
    used and only warned, under the 99 % critical line it could never reach."""
    from lltui.core.monitor.alerts import CRITICAL

    reserved = 390 * 2**20
    change = _vram_alert(
        lambda total: {
            "memory_used": total - reserved,
            "memory_reserved": reserved,
            "memory_free": 0,
        }
    )
    assert change.alert.severity == CRITICAL
    assert change.alert.message == "VRAM 100.0% full (0 MiB free)"


def test_a_commands_interval_below_the_apps_shortest_is_refused(capsys):
    """`watch --interval 1e-9` spun a core (the global --interval was checked, the
    command's own was not); a replay stepped may still go as fast as it likes."""
    for argv in (
        ["watch", "--once", "--interval", "1e-9", "--source", "sim:kaggle-2xt4"],
        ["exporter", "--interval", "0.1", "--source", "sim:kaggle-2xt4"],
    ):
        assert main(argv) == 2
        assert "interval must be between 0.25 and 3600 s" in capsys.readouterr().err


def test_watch_ends_quietly_when_its_reader_goes_though_no_alert_changes(tmp_path):
    """`lltui watch --json | head -1` never ended: after its first line nothing changed, so
    it wrote nothing and never learned that head had gone (it lingered, its poller and
    hooks with it)."""
    config = tmp_path / "watch.toml"
    config.write_text("[alerts]\ngpu_temp_warning = 1\ngpu_temp_critical = 2\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    argv = [sys.executable, "-m", "lltui", "--config", str(config), "watch", "--json"]
    argv += ["--interval", "0.25", "--source", "sim:4xl4"]
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "raised" and first["kind"] == "gpu_temp"
        proc.stdout.close()  # head -1 has what it wanted
        assert proc.wait(30) == 0  # (a wait past a few rounds: it lingered)
        err = proc.stderr.read().splitlines()  # no traceback, no "Exception ignored"
        assert all(line.startswith("lltui watch: SIMULATED rig") for line in err), err
    finally:
        proc.kill()
        proc.wait()


def test_a_hooks_failure_is_one_write_with_its_newline(monkeypatch):
    """Hooks end on several threads at once: print wrote the text and the newline apart,
    and two failures ran into one line."""
    import io
    import sys

    from lltui.commands.watch import say_hook
    from lltui.services.alerts import HookResult

    writes: list[str] = []

    class Stream(io.StringIO):
        def write(self, s: str) -> int:
            writes.append(s)
            return len(s)

    monkeypatch.setattr(sys, "stderr", Stream())
    say_hook(HookResult(("hook.sh",), None, timed_out=True))
    assert len(writes) == 1 and writes[0].endswith("\n") and "hook.sh" in writes[0]
