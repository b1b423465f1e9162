"""What ``lltui launch`` prints, for one server and for a router, and its run in the
foreground (:func:`foreground`: signals, the launch's watch, the end): a line on the
terminal (never an error when the terminal went away), notes, the dry run, what changed in
the launch's state (:class:`StatePrinter`: how loading goes, the ready line, each served
request, each router model's news), how the server ended."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lltui.core.jsonout import fields_of

if TYPE_CHECKING:
    from lltui.core.llamalog.models import DevicePlacement
    from lltui.core.memory.kv_fill import KvDeviceFill, KvDeviceLayout, KvFill, KvLayout
    from lltui.core.speed.served import SpeedCheck
    from lltui.services.launch.request import Note, PreparedLaunch
    from lltui.services.launch.rpc_hosts import RpcHosts
    from lltui.services.launch.session import ServerExit, Session
    from lltui.services.launch.state import LaunchState, ModelRow
    from lltui.services.launch.watch import Poll


def say(text: str, *, err: bool = False) -> None:
    """Print one line; a terminal that went away (SSH drop) is not an error here. What it
    says carries paths, the environment, the server's log and its devices' names: a break in
    any of them is escaped, so it cannot print a line of its own."""
    from lltui.core.text import one_line

    with contextlib.suppress(OSError):
        print(one_line(text), file=sys.stderr if err else sys.stdout, flush=True)


def say_note(note: Note) -> None:
    prefix = "lltui: " if note.level == "info" else f"lltui: {note.level}: "
    say(prefix + note.text, err=True)


def dry_run(
    prepared: PreparedLaunch,
    environ: Mapping[str, str],
    *,
    as_json: bool,
    rpc: RpcHosts | None = None,
    url: str | None = None,
) -> int:
    """The command and environment a launch would run, nothing started; ``url``: where
    clients reach it, where that is not the server's own address (a router behind lltui's
    on-demand proxy)."""
    from lltui.commands import print_json
    from lltui.core.cmdline.launch_spec import relevant_inherited_env

    command, flags = prepared.command, prepared.flags
    inherited = relevant_inherited_env(environ, command)
    if as_json:
        print_json(
            {
                "argv": command.display_argv(),
                "env": command.display_env(),
                "env_unset": list(command.env_unset),
                "env_inherited": inherited,
                "url": prepared.spec.url,
                "binary": {
                    "path": command.argv[0],
                    "origin": prepared.origin,
                    "version": flags.version if flags is not None else None,
                    "flags_checked": flags is not None,
                },
            }
            | ({"rpc_hosts": rpc_json(rpc, with_argv=True)} if rpc is not None else {}),
            line=True,
        )
        return 0
    import shlex

    say("argv: " + " ".join(shlex.quote(a) for a in command.display_argv()))
    for name, value in command.display_env().items():
        say(f"env:  {name}={shlex.quote(value)}")
    for name in command.env_unset:
        say(f"env:  unset {name}")
    for name, value in inherited.items():
        say(f"env:  {name}={shlex.quote(value)} (inherited)")
    say(f"url:  {url or prepared.spec.url}")
    for server in rpc.servers if rpc is not None else ():
        say(f"rpc:  {server.spec.host}: " + " ".join(shlex.quote(a) for a in server.argv()))
    return 0


def rpc_json(rpc: RpcHosts, *, with_argv: bool = False) -> list[dict[str, Any]]:
    out = []
    for server in rpc.servers:
        entry: dict[str, Any] = {
            "host": server.spec.host,
            "bind": server.spec.bind,
            "port": server.spec.port,
            "endpoint": server.endpoint,
            "tunnel": server.local_port is not None,
            "pid": server.pid,
            "devices": [{"name": n, "description": d} for n, d in server.devices],
        }
        if with_argv:
            entry["argv"] = server.argv()
        out.append(entry)
    return out


def foreground(
    session: Session,
    printer: Callable[[LaunchState], None],
    *,
    as_json: bool,
    keep_running: bool = False,
    polls: Sequence[Poll] = (),
) -> int:
    """Run a server or a router in the foreground, its watch's changes printed, until it
    exits or a signal asks lltui to stop it (a second signal cuts the waits short: another
    one, or the same one again SIGNAL_BURST_S after it, not the burst ``timeout`` sends);
    ``keep_running``: until it is ready, then left running."""
    import signal
    import threading
    import time

    from lltui.core.stop_signals import SIGNAL_BURST_S, signal_exit_code
    from lltui.services.launch.watch import LaunchWatch

    signals_seen: list[int] = []
    first_at = 0.0
    wake = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal first_at
        now = time.monotonic()
        if not signals_seen:
            first_at = now
        elif signum != signals_seen[0] or now - first_at >= SIGNAL_BURST_S:
            session.hurry()  # a second Ctrl-C: skip the waits
        # else: the same signal again at once is one ask (timeout signals lltui, then its group)
        signals_seen.append(signum)
        wake.set()

    def changed(st: LaunchState) -> None:
        printer(st)
        if st.exit is not None or (keep_running and st.ready_at is not None):
            wake.set()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    watch = LaunchWatch(session, changed, polls=polls, on_end=wake.set)
    try:
        watch.start(keep_running=keep_running)
        wake.wait()
        # a server kept running is left once ready, or on a hang-up while it loads (the
        # user asked it to outlive the terminal); Ctrl-C or SIGTERM before then stops it
        cancelled = any(s != signal.SIGHUP for s in signals_seen)
        st = watch.state
        if keep_running and st.exit is None and (st.ready_at is not None or not cancelled):
            watch.close()
            return _detach(session, as_json=as_json)
        if signals_seen:
            session.stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        watch.close()
        session.close()
    if watch.state.exit is None:
        say("lltui: llama-server did not exit", err=True)
        return 1
    code = report_exit(watch.state.exit, as_json=as_json)
    # a second signal cut the stop short: the exit the first one gives (130 for Ctrl-C)
    return signal_exit_code(signals_seen[0]) if watch.state.exit.hurried else code


def _detach(session: Session, *, as_json: bool) -> int:
    session.detach()
    url = session.launch.spec.url
    stop = f"kill {session.pid}"
    detached = {
        "event": "detached",
        "pid": session.pid,
        "url": url,
        "log": str(session.log_file),
        "stop": stop,
    }
    say(
        json.dumps(detached)
        if as_json
        else f"llama-server left running: pid {session.pid}, {url}, log {session.log_file}; "
        f"stop it with: {stop}"
    )
    return 0


def report_exit(result: ServerExit, *, as_json: bool) -> int:
    from lltui.core.llamalog.exit_reason import exit_event
    from lltui.services.launch.state import describe_exit

    if as_json:
        say(
            json.dumps(
                exit_event(result.returncode, result.reason, result.log_tail, pid=result.pid)
            )
        )
    elif result.clean:
        say(describe_exit(result))
    else:
        say(f"lltui: {describe_exit(result)}", err=True)
        if result.was_ready or result.reason.startswith("llama-server exited with code"):
            for line in result.log_tail[-10:]:  # (a gdb backtrace's tabs read as spaces)
                say(f"  | {line.expandtabs(4)}", err=True)
    return 0 if result.clean else 1


# --- what changed ------------------------------------------------------------------------------


class StatePrinter:
    """Prints what changed in a launch's state, each item once: how loading goes (stderr),
    the ready line(s) (``ready``: one server's or a router's), each served request beside
    the prediction, a router's refused loads and each model's news."""

    def __init__(self, ready: Callable[[LaunchState], list[str]], *, as_json: bool) -> None:
        self._ready = ready
        self._as_json = as_json
        self._ready_said = False
        self._progress = self._served = self._refused = self._news = 0
        self._kv_said: tuple[int, ...] | None = None  # the slots' tokens last said
        self._kv_note: str | None = None

    def __call__(self, st: LaunchState) -> None:
        for line in st.progress.since(self._progress):
            say(f"lltui: {line}", err=True)
        self._progress = st.progress.total
        if st.ready_at is not None and not self._ready_said:
            self._ready_said = True
            for line in self._ready(st):
                say(line)
        if st.router is not None:  # (first: a request's speed after the load it waited for)
            for line in st.router.refused.since(self._refused):
                if self._as_json:
                    say(json.dumps({"event": "refused", "message": line}))
                else:
                    say(f"lltui: refused: {line}", err=True)
            for row in st.router.news.since(self._news):
                say(json.dumps(model_event(row)) if self._as_json else row_text(row))
            self._refused, self._news = st.router.refused.total, st.router.news.total
        for check in st.speed.served.since(self._served):
            say(self._speed(check))
        self._served = st.speed.served.total
        self._say_kv(st)

    def _say_kv(self, st: LaunchState) -> None:
        """The KV fill each time the slots' tokens change (an idle server's empty cache is
        not news), and once why there is none."""
        from lltui.core.memory.kv_fill import fill_line

        if st.kv_note is not None and st.kv_note != self._kv_note:
            self._kv_note = st.kv_note
            say(json.dumps({"event": "kv", "note": st.kv_note}) if self._as_json else
                f"lltui: {st.kv_note}", err=not self._as_json)  # fmt: skip
        fill = st.kv
        if fill is None or fill.slot_tokens == (
            self._kv_said or tuple(0 for _ in fill.slot_tokens)
        ):
            return
        self._kv_said = fill.slot_tokens
        say(json.dumps(kv_event(st)) if self._as_json else fill_line(fill))

    def _speed(self, check: SpeedCheck) -> str:
        if not self._as_json:
            return f"served {check.line()}" + (
                f"; {check.calibration}" if check.calibration else ""
            )
        event = {
            "event": "speed",
            "model": check.model,
            "kind": "prompt" if check.prompt else "generation",
            "tokens": check.tokens,
            "depth": check.depth,
            "measured_tps": round(check.measured_tps, 2),
            "predicted_tps": round(check.predicted_tps, 2),
            "diff": round(check.diff, 4),
            "kept": check.kept,
            "calibration": check.calibration,
        }
        return json.dumps(event)


def kv_event(st: LaunchState) -> dict[str, Any]:
    """The ``kv`` event: the tokens each slot holds and, per device, the bytes they take in
    its caches (``bytes_per_token``: the full-attention layers' K and V of one token there)."""
    assert st.kv is not None
    cache = st.log_summary.prompt_cache if st.log_summary is not None else None
    return (
        {"event": "kv"}
        | kv_to_json(st.kv, st.check.kv if st.check is not None else None)
        | {"prompt_cache": cache.to_json() if cache is not None else None}
    )


def kv_to_json(fill: KvFill, layout: KvLayout | None) -> dict[str, Any]:
    """A KV fill as ``--json`` gives it (``layout``: what a token takes on each device)."""
    per_token = {d.name: d for d in layout.devices} if layout is not None else {}
    return {
        "tokens": fill.used_tokens,
        "capacity_tokens": fill.capacity_tokens,
        "tokens_per_s": _round(fill.tokens_per_s, 2),
        "seconds_to_full": _round(fill.seconds_to_full),
        "slots": [
            {
                "id": i,
                "tokens": n,
                "n_ctx": fill.slot_ctx[i],
                "share": _round(fill.slot_share(i), 4),
            }
            for i, n in enumerate(fill.slot_tokens)
        ],
        "devices": [_kv_device(d, per_token.get(d.name)) for d in fill.devices],
    }


def _kv_device(d: KvDeviceFill, lay: KvDeviceLayout | None) -> dict[str, Any]:
    return {
        **fields_of(d, "name used_bytes free_bytes capacity_bytes"),
        "bytes_per_token": lay.full_bytes_per_token if lay else None,
        "swa_bytes_per_token": lay.swa_bytes_per_token if lay else None,
        "rs_bytes_per_seq": lay.rs_bytes_per_seq if lay else None,
        "seconds_to_full": _round(d.seconds_to_full),
    }


def _round(x: float | None, digits: int = 1) -> float | None:
    return None if x is None else round(x, digits)


def ready_event(st: LaunchState) -> dict[str, Any]:
    """The ``ready`` event: URL, pid, argv (masked) and memory per device from the server's
    log, each device with lltui's prediction beside it."""
    from lltui.core.llamalog.exit_reason import ready_event as event_of
    from lltui.services.launch.compare import check_summary, predicted_mib

    devices = st.log_summary.ready_devices() if st.log_summary is not None else []
    event = event_of(st.url or "", st.pid or 0, st.argv, devices)
    check = st.check
    if check is not None:
        for d in event["devices"]:
            found = check.device(str(d["name"]))
            d["predicted"] = None if found is None else predicted_mib(found)
        event["prediction"] = check_summary(check)
    event["calibrated"] = st.speed.calibrated  # the served requests' predictions: this rig's
    return event


def _mib(x: object) -> str:
    return f"{x:.2f}" if isinstance(x, int | float) else "?"


def ready_lines(event: dict[str, Any]) -> list[str]:
    """The ready line and the prediction's line under it (each printed as one line)."""
    parts = [f"llama-server ready at {event['url']} (pid {event['pid']})"]
    for d in event["devices"]:
        text = (
            f"{d['name']}: model {_mib(d['model_mib'])} MiB, KV {_mib(d['kv_mib'])} MiB, "
            f"compute {_mib(d['compute_mib'])} MiB"
        )
        if d.get("moe_cache_mib"):
            text += f", MoE cache {_mib(d['moe_cache_mib'])} MiB"
        p = d.get("predicted")
        if p:  # lltui's prediction for the same flags, beside what the server allocated
            text += (
                f" (predicted {_mib(p['model_mib'])}, {_mib(p['kv_mib'])}, "
                f"{_mib(p['compute_mib'])})"
            )
        parts.append(text)
    lines = [" | ".join(parts)]
    pred = event.get("prediction")
    if pred and not pred["compared"] and pred.get("note"):  # no line to compare: why
        lines.append(f"  {pred['note']}")
    elif pred:
        lines.append(
            f"  lltui's prediction ({pred['rules']}): {pred['exact']} of {pred['compared']} "
            f"buffer lines exact, {pred['within_1pct']} within 1%"
            + (f"; {pred['note']}" if pred.get("note") else "")
        )
    if event.get("calibrated"):
        lines.append(f"  speed predictions: {event['calibrated']}")
    return lines


def device_label(p: DevicePlacement) -> str:
    """A device as the plan names it: an RPC device with its server (``RPC0[host:port]``),
    as each model's server numbers its own RPC devices from 0."""
    if p.name.startswith("RPC"):
        return next((b for b in p.buffers if b.startswith("RPC") and "[" in b), p.name)
    return p.name


def row_text(row: ModelRow) -> str:
    text = f"{row.name}: {row.state}"
    if row.state == "loaded" and row.placement:
        text += (
            " ("
            + "; ".join(
                f"{device_label(p)} model {p.model_mib:.2f} MiB, KV {p.kv_mib:.2f}, "
                f"compute {p.compute_mib:.2f}"
                for p in row.placement
            )
            + ")"
        )
    if row.problem:
        text += f": {row.problem}"
    return text


def model_event(row: ModelRow) -> dict[str, Any]:
    return {
        "event": "model",
        "name": row.name,
        "state": row.state,
        "kept": row.kept,
        "devices": [
            {
                "name": device_label(p),
                **fields_of(p, "model_mib kv_mib compute_mib output_mib"),
            }
            for p in row.placement
        ],
        "problem": row.problem,
    }
