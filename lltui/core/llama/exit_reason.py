"""Why a llama-server stopped, in words, from its exit code and log; the ``ready`` and
``exit`` events ``lltui launch`` prints."""

from __future__ import annotations

import re
import signal
from collections.abc import Mapping, Sequence
from typing import Any

_RE_INVALID_ARG = re.compile(r"error: invalid argument: (\S+)")
_RE_BAD_VALUE = re.compile(r'error while handling argument "([^"]+)": ?(.*)')
_RE_BAD_ENV = re.compile(r'error while handling environment variable "([^"]+)"')
_RE_NO_FILE = re.compile(r"failed to open GGUF file '(.+)' \((.+)\)")
_RE_CORRUPT = re.compile(r"error loading model: (.*(?:corrupted|incomplete|bounds|invalid).*)")
_RE_BIND = re.compile(r"couldn't bind HTTP server socket, hostname: (\S+), port: (\d+)")
_RE_MEMORY = re.compile(
    r"(failed to allocate[^\n]*|insufficient memory[^\n]*|out of memory[^\n]*"
    r"|unable to allocate[^\n]*|cudaMalloc failed[^\n]*)",
    re.IGNORECASE,
)
# GGML_ABORT / GGML_ASSERT print "FILE:LINE: message" before the backtrace
_RE_GGML_ABORT = re.compile(r"^\S+\.(?:c|cc|cpp|cu|cuh|h|hpp|m|mm):\d+: (.+)$", re.MULTILINE)
_RE_RPC_CONNECT = re.compile(r"Failed to connect to (\S+)")
_RE_LOAD_FAILED = re.compile(r"exiting due to model loading error|failed to load model")
# the loader's own reason; the E lines after it (failed to load model, exiting due to model
# loading error) only say that it failed
_RE_LOAD_ERROR = re.compile(r"error loading model: (.+)")
_RE_SECOND = re.compile(r"Received second interrupt")
# llama-server's signal handler ends its main loop; these lines follow (the second one when a
# second signal cut the clean-up short).
_RE_SHUTDOWN = re.compile(r"cleaning up before exit|Received second interrupt")
HURRIED = "stopped at once: a second signal to lltui cut its shutdown short"
STOPPED_FROM_OUTSIDE = "stopped by a signal from outside lltui (SIGTERM or SIGINT to the server)"
_RE_LEVEL_PREFIX = re.compile(r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} )?([IWED]) ")


def signal_name(returncode: int | None) -> str | None:
    """``SIGKILL`` for a Popen return code of -9; ``None`` for a normal exit."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _last_error_line(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        m = _RE_LEVEL_PREFIX.match(line)
        if (m and m.group(1) == "E") or line.startswith("error"):
            return line[m.end() :].strip() if m else line.strip()
    return None


def stopped_from_outside(returncode: int | None, lines: Sequence[str], *, stopped: bool) -> bool:
    """True when a server lltui watched shut down on a signal lltui did not send: it exited 0
    after its signal handler's clean-up, and lltui had not asked it to stop."""
    return not stopped and returncode == 0 and _RE_SHUTDOWN.search("\n".join(lines)) is not None


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
    lines = [x for x in lines if "pinned memory" not in x]
    text = "\n".join(lines)
    m = _RE_INVALID_ARG.search(text)
    if m:
        return f"llama-server does not accept the flag {m.group(1)}"
    m = _RE_BAD_VALUE.search(text)
    if m:
        detail = m.group(2).strip().removeprefix("error: ").strip() or "invalid value"
        return f"llama-server rejected the value of {m.group(1)}: {detail}"
    m = _RE_BAD_ENV.search(text)
    if m:
        return f"llama-server rejected the environment variable {m.group(1)}"
    m = _RE_BIND.search(text)
    if m:
        return f"port {m.group(2)} on {m.group(1)} is in use or cannot be bound"
    m = _RE_RPC_CONNECT.search(text)
    if m:
        return (
            f"no rpc-server answered at {m.group(1)} (start rpc-server there, or leave it out "
            "of --rpc)"
        )
    m = _RE_NO_FILE.search(text)
    if m:
        if "No such file" in m.group(2):
            return f"model not found: {m.group(1)}"
        return f"cannot open model {m.group(1)}: {m.group(2)}"
    m = _RE_CORRUPT.search(text)
    if m:
        return f"the model file is damaged: {m.group(1).strip()}"
    found = _RE_MEMORY.findall(text)
    if found and (returncode is None or returncode != 0 or not stopped):
        # The last allocation line is the most specific ("... buffer for kv cache").
        return f"the model does not fit in memory: {found[-1].strip()}"
    if _RE_LOAD_FAILED.search(text):
        why = _RE_LOAD_ERROR.findall(text)
        err = why[-1].strip() if why else _last_error_line(lines)
        return "llama-server could not load the model" + (f": {err}" if err else "")
    sig = signal_name(returncode)
    if stopped:
        if hurried:
            return HURRIED
        if _RE_SECOND.search(text):
            # (lltui's own after its grace period, with a request still streaming, or yours)
            return "stopped (still busy after the first stop signal: a second one ended it)"
        if sig == "SIGKILL":
            return "stopped (killed after it did not exit in time)"
        if sig is not None:
            return f"stopped by {sig} (still loading, so no clean shutdown)"
        return "stopped"
    if supervised and stopped_from_outside(returncode, lines, stopped=stopped):
        return STOPPED_FROM_OUTSIDE
    if sig == "SIGABRT":
        found_abort = _RE_GGML_ABORT.findall(text)
        err = found_abort[-1].strip() if found_abort else _last_error_line(lines)
        return "llama-server aborted" + (f": {err}" if err else "")
    if sig is not None:
        return f"llama-server was killed by {sig}"
    if returncode == 0:
        return "llama-server exited"
    err = _last_error_line(lines)
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
