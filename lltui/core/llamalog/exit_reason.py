"""Why a llama-server stopped, in words, from its exit code and log (each line read by the
one reader, :mod:`lltui.core.llamalog`); the ``ready`` and ``exit`` events ``lltui launch``
prints."""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Any

from lltui.core.llamalog.classify import Classified, classify
from lltui.core.llamalog.events import Fatal, Flag
from lltui.core.llamalog.models import AllocFailure

HURRIED = "stopped at once: a second signal to lltui cut its shutdown short"
STOPPED_FROM_OUTSIDE = "stopped by a signal from outside lltui (SIGTERM or SIGINT to the server)"
_RPC = "(start rpc-server there, or leave it out of --rpc)"
_SAYS = {  # what stops a start, in words; of the lines that say one, the first ranked is told
    "flag": "llama-server does not accept the flag {name}",
    "value": "llama-server rejected the value of {name}: {why}",
    "env": "llama-server rejected the environment variable {name}",
    "bind": "port {why} on {name} is in use or cannot be bound",
    "rpc": "no rpc-server answered at {name} " + _RPC,
    "missing": "{part} not found: {name}",
    "file": "cannot open {part} {name}: {why}",
    "damaged": "the model file is damaged: {why}",
}
_SHUTDOWN = (Flag("shutdown"), Flag("shutdown", "second"))  # the signal handler's lines


def signal_name(returncode: int | None) -> str | None:
    """``SIGKILL`` for a Popen return code of -9; ``None`` for a normal exit."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_error(read: Sequence[Classified]) -> str | None:
    """The last line at the error level (or one that starts ``error``), without its prefix;
    not gguf's reason a file is not one it reads, which without the loader's failure after it
    is a router's scan of its models folder (with it, the load's failure says it)."""
    for c in reversed(read):
        if isinstance(c.event, Flag) and c.event.what == "gguf":
            continue
        if c.line.level == "E" or c.text.startswith(("E ", "error")):
            return c.line.message.strip().removeprefix("E ").strip()
    return None


def _unreadable(read: Sequence[Classified]) -> str | None:
    """gguf's reason the model file is not one it reads (not GGUF, cut short, a directory):
    the first of its lines right above the loader's failure. (A router's scan of its models
    folder prints them too, with no load after them.)"""
    found = run = None
    for c in read:
        if isinstance(e := c.event, Flag) and e.what == "gguf":
            run = run or e.value
            continue
        if run and isinstance(e, Fatal) and e.what == "load":
            found = run
        run = None
    return found


def stopped_from_outside(returncode: int | None, lines: Sequence[str], *, stopped: bool) -> bool:
    """True when a server lltui watched shut down on a signal lltui did not send: it exited 0
    after its signal handler's clean-up, and lltui had not asked it to stop."""
    return not stopped and returncode == 0 and any(classify(x).event in _SHUTDOWN for x in lines)


def exit_reason(
    returncode: int | None,
    lines: Sequence[str],
    *,
    stopped: bool = False,
    supervised: bool = False,
    hurried: bool = False,
) -> str:
    """Why llama-server exited, in words, from its exit code and its log.

    ``stopped``: lltui asked it to stop (``hurried``: a second signal to lltui cut the
    stop's waits short, and the server did not exit 0). ``supervised``: lltui started and
    watched it, so a clean shutdown it did not ask for came from someone else's signal (a log
    read afterwards cannot tell who sent it). Known failures get a plain name (model not
    found, port in use, out of memory, a flag the build lacks); otherwise the last error line
    is quoted.
    """
    # a host buffer refused pinned memory falls back to pageable memory: no reason to stop
    read = [c for c in map(classify, lines) if c.event != Flag("pinned")]
    events = [c.event for c in read]
    fatal = [e for e in events if isinstance(e, Fatal)]
    if said := [f for f in fatal if f.what in _SAYS]:
        first = min(said, key=lambda f: list(_SAYS).index(f.what))
        mmproj = Flag("mmproj_failed", first.name) in events  # (the file is --mmproj's)
        part = "projector" if mmproj else "model"
        return _SAYS[first.what].format(name=first.name, why=first.why, part=part)
    # (ggml-vulkan's reason line repeats the line above it: a failure's or a pinned warning's)
    oom = [
        c
        for c in read
        if isinstance(e := c.event, AllocFailure)
        and e.kind == "oom"
        and (e.backend != "Vulkan" or e.needed_bytes)
    ]
    if oom and (returncode is None or returncode != 0 or not stopped):
        # The last allocation line is the most specific ("... buffer for kv cache").
        return f"the model does not fit in memory: {oom[-1].said()}"
    loader = [f for f in fatal if f.what == "load"]
    if loader or Flag("exiting", "model loading error") in events:
        # the loader's own reason; the lines after it only say that it failed
        err = _unreadable(read) or next((f.why for f in reversed(loader) if f.why), None)
        err = err or _last_error(read)
        return "llama-server could not load the model" + (f": {err}" if err else "")
    sig = signal_name(returncode)
    if stopped:
        if hurried:
            return HURRIED
        if Flag("shutdown", "second") in events:
            # (lltui's own after its grace period, with a request still streaming, or yours)
            return "stopped (still busy after the first stop signal: a second one ended it)"
        if sig == "SIGKILL":
            return "stopped (killed after it did not exit in time)"
        if sig is not None:
            return f"stopped by {sig} (still loading, so no clean shutdown)"
        return "stopped"
    if supervised and returncode == 0 and any(e in _SHUTDOWN for e in events):
        return STOPPED_FROM_OUTSIDE
    if sig == "SIGABRT":
        at = [e.value for e in events if isinstance(e, Flag) and e.what == "abort_at"]
        err = at[-1] if at else _last_error(read)
        return "llama-server aborted" + (f": {err}" if err else "")
    if sig is not None:
        return f"llama-server was killed by {sig}"
    if returncode == 0:
        return "llama-server exited"
    err = _last_error(read)
    return f"llama-server exited with code {returncode}" + (f": {err}" if err else "")


def exit_sentence(returncode: int | None, reason: str, *, clean: bool) -> str:
    """One line for people: ``llama-server stopped (exit code 0)`` for a clean end, else
    ``llama-server exited (code 1): <reason>``; a reason that names the server is not
    prefixed with its name again."""
    if clean:
        subject = reason if reason.startswith("llama-server") else f"llama-server {reason}"
        return f"{subject} (exit code {returncode})"
    return f"llama-server exited (code {returncode}): {reason}"


# --- events printed by `lltui launch` ------------------------------------------------------


def ready_event(
    url: str, pid: int, argv: Sequence[str], devices: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    return {"event": "ready", "url": url, "pid": pid, "argv": list(argv), "devices": list(devices)}


def exit_event(
    returncode: int | None, reason: str, log_tail: Sequence[str], *, pid: int | None = None
) -> dict[str, Any]:
    return {
        "event": "exit",
        "code": returncode,
        "signal": signal_name(returncode),
        "reason": reason,
        "log_tail": list(log_tail),
        "pid": pid,
    }
