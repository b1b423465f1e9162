"""``lltui launch``: start llama-server in the foreground, say when it is ready, stop it cleanly.

Everything after the model that is not one of lltui's own options is a llama-server flag,
spelled as llama-server spells it, so ``argparse`` only collects the words and this module
reads them (``-c``, ``-ngl -1`` and the like would otherwise be taken for lltui's options).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError

if TYPE_CHECKING:
    from lltui.core.llama.launch_spec import BinaryFlags, LaunchCommand, LaunchSpec

USAGE = (
    "lltui launch MODEL.gguf [llama-server flags] [--dry-run] [--json] [--profile NAME]\n"
    "                    [--save-profile NAME] [--host H] [--port P] [--api-key-file F]\n"
    "                    [--keep-running]"
)
HELP = f"""usage: {USAGE}

Start llama-server with MODEL.gguf and watch it in the foreground: one line when it is ready
(with --json, a JSON object with the URL, pid, argv and the memory each device holds, read from
the server's own log), a clean stop on Ctrl-C, SIGTERM or SIGHUP, and an exit line with the
exit code, the reason and the last log lines.

Any llama-server flag may follow the model (-c 8192 -ngl all -ts 3,1 --rpc HOST:PORT ...);
each is checked against the installed llama-server and spelled the way that build spells it.

options:
  --dry-run            print the exact command and environment, start nothing
  --json               JSON lines instead of text (ready, exit; or the dry-run command)
  --profile NAME       start from a saved profile; flags given here override it
  --save-profile NAME  save these settings as a profile (mode 0600 if it holds an API key)
  --host H             address to listen on (default 127.0.0.1: this machine only)
  --port P             port (default 8080; 0 picks a free one)
  --api-key-file F     file with the API key(s), one per line; the key is never printed
  --keep-running       leave the server running when lltui exits (log in a file)
  -h, --help           show this help

exit codes: 0 stopped cleanly, 1 the server failed or exited, 2 bad input
"""

_OWN_SWITCHES = ("--dry-run", "--json", "--keep-running")
_OWN_VALUED = ("--profile", "--save-profile")


def register(sub: Any) -> None:
    # no option prefix (NUL): every word, -c or +5, passes untouched to run()
    p = sub.add_parser(
        "launch",
        help="start llama-server and watch it (--dry-run prints the command)",
        prefix_chars="\x00",
        add_help=False,
        usage=USAGE,
    )
    p.add_argument("words", nargs="*", help="MODEL.gguf, llama-server flags and lltui's options")
    p.set_defaults(func=run)


def _split_own(words: list[str]) -> tuple[dict[str, Any], list[str]]:
    """lltui's own options, and the llama-server words left in order."""
    own: dict[str, Any] = {"help": False, "profile": None, "save_profile": None}
    own.update({s.lstrip("-").replace("-", "_"): False for s in _OWN_SWITCHES})
    rest: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        head, eq, value = word.partition("=")
        if word in ("-h", "--help"):
            own["help"] = True
        elif word in _OWN_SWITCHES:
            own[word.lstrip("-").replace("-", "_")] = True
        elif head in _OWN_VALUED:
            key = head.lstrip("-").replace("-", "_")
            if not eq:
                if i + 1 >= len(words):
                    raise CliError(f"launch: {head} needs a NAME", 2)
                i += 1
                value = words[i]
            own[key] = value
        else:
            rest.append(word)
        i += 1
    return own, rest


def _state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "lltui"


def _say(text: str, *, err: bool = False) -> None:
    """Print one line; a terminal that went away (SSH drop) is not an error here."""
    with contextlib.suppress(OSError):
        print(text, file=sys.stderr if err else sys.stdout, flush=True)


def _mib(x: object) -> str:
    return f"{x:.2f}" if isinstance(x, int | float) else "?"


def _ready_text(event: dict[str, Any]) -> str:
    parts = [f"llama-server ready at {event['url']} (pid {event['pid']})"]
    for d in event["devices"]:
        parts.append(
            f"{d['name']}: model {_mib(d['model_mib'])} MiB, KV {_mib(d['kv_mib'])} MiB, "
            f"compute {_mib(d['compute_mib'])} MiB"
        )
    return " | ".join(parts)


def run(args: argparse.Namespace) -> int:
    from lltui.core.llama import launch_spec as L
    from lltui.core.llama.launch_args import parse_llama_args
    from lltui.sources import profiles

    own, words = _split_own(list(args.words))
    if own["help"]:
        _say(HELP.rstrip())
        return 0
    model: str | None = None
    if words and not words[0].startswith("-"):
        model, words = words[0], words[1:]

    try:
        given = parse_llama_args(words)
    except L.LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None
    if model is not None and "model" in given:
        raise CliError("launch: the model is given twice (MODEL and -m)", 2)
    if model is not None:
        given["model"] = model

    data: dict[str, Any] = {}
    if own["profile"]:
        try:
            data = profiles.load_profile_data(own["profile"])
        except profiles.ProfileError as exc:
            raise CliError(f"launch: {exc}", exc.code) from None
    extra = tuple(data.get("extra_args", ())) + tuple(given.pop("extra_args", ()))
    data.update(given)
    data["extra_args"] = extra
    if "api_key" in given:
        _say(
            "lltui: warning: a key on the command line shows in `ps`; use --api-key-file",
            err=True,
        )
    if "model" not in data:
        raise CliError("launch: no model given: lltui launch MODEL.gguf [flags]", 2)
    try:
        # the profile holds what was given: no key from the environment, port 0 stays 0
        saved = L.LaunchSpec(**data)
    except L.LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None
    except TypeError as exc:
        raise CliError(f"launch: {exc}", 2) from None
    if own["save_profile"]:
        try:
            path = profiles.save_profile(own["save_profile"], saved)
        except profiles.ProfileError as exc:
            raise CliError(f"launch: {exc}", exc.code) from None
        _say(f"lltui: saved launch profile {own['save_profile']!r} in {path}", err=True)

    inherited_key = os.environ.get(L.API_KEY_ENV)
    if inherited_key and not data.get("api_key") and not data.get("api_key_file"):
        data["api_key"] = inherited_key  # keep the server locked as the user expects
    if data.get("port") == 0:
        from lltui.sources.llama.supervisor import free_port

        host = str(data.get("host") or L.DEFAULT_HOST).split(",")[0]
        try:
            data["port"] = free_port(host)
        except OSError as exc:
            raise CliError(f"launch: cannot listen on {host}: {exc.strerror or exc}", 2) from None
    spec = dataclasses.replace(
        saved, api_key=data.get("api_key"), port=data.get("port", saved.port)
    )

    file_keys = _check_inputs(spec)
    binary_path, flags, origin = _find_binary(required=not own["dry_run"])
    key_dir: Any = None
    try:
        transport = L.api_key_transport(spec, flags)
        key_file = None
        if transport == "file":
            import tempfile

            key_dir = tempfile.TemporaryDirectory(prefix="lltui-key-")
            key_file = os.path.join(key_dir.name, "api-key")
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("\n".join(s for s in (spec.api_key or "").split(",") if s) + "\n")
        command = L.build_command(spec, binary_path, flags, key_file=key_file)
        if file_keys:
            command = dataclasses.replace(command, secrets=command.secrets + file_keys)
    except L.LaunchError as exc:
        if key_dir is not None:
            key_dir.cleanup()
        raise CliError(f"launch: {exc}", exc.code) from None

    try:
        if own["dry_run"]:
            return _dry_run(spec, command, flags, origin, as_json=own["json"])
        if not L.is_loopback(spec.host) and not spec.api_key and not spec.api_key_file:
            _say(
                f"lltui: warning: listening on {spec.host} with no API key: "
                "anyone who can reach this machine can use the server",
                err=True,
            )
        return _supervise(spec, command, as_json=own["json"], keep_running=own["keep_running"])
    finally:
        if key_dir is not None:
            key_dir.cleanup()


def _find_binary(required: bool) -> tuple[str, BinaryFlags | None, str | None]:
    """The llama-server path, its probed flags (a BinaryFlags) and where it was found."""
    from lltui.core.llama.launch_spec import LaunchError
    from lltui.sources.llama.launch_prep import find_binary

    try:
        path, flags, origin, why = find_binary(required)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None
    if why is not None:
        _say(f"lltui: note: flags not checked: {why}", err=True)
    return path, flags, origin


def _check_inputs(spec: LaunchSpec) -> tuple[str, ...]:
    from lltui.core.llama.launch_spec import LaunchError
    from lltui.sources.llama.launch_prep import check_inputs

    try:
        return check_inputs(spec)
    except LaunchError as exc:
        raise CliError(f"launch: {exc}", exc.code) from None


def _dry_run(
    spec: LaunchSpec,
    command: LaunchCommand,
    flags: BinaryFlags | None,
    origin: str | None,
    *,
    as_json: bool,
) -> int:
    from lltui.commands import print_json
    from lltui.core.llama.launch_spec import relevant_inherited_env

    inherited = relevant_inherited_env(os.environ, command)
    if as_json:
        print_json(
            {
                "argv": command.display_argv(),
                "env": command.display_env(),
                "env_unset": list(command.env_unset),
                "env_inherited": inherited,
                "url": spec.url,
                "binary": {
                    "path": command.argv[0],
                    "origin": origin,
                    "version": flags.version if flags is not None else None,
                    "flags_checked": flags is not None,
                },
            }
        )
        return 0
    import shlex

    _say("argv: " + " ".join(shlex.quote(a) for a in command.display_argv()))
    for name, value in command.display_env().items():
        _say(f"env:  {name}={shlex.quote(value)}")
    for name in command.env_unset:
        _say(f"env:  unset {name}")
    for name, value in inherited.items():
        _say(f"env:  {name}={shlex.quote(value)} (inherited)")
    _say(f"url:  {spec.url}")
    return 0


def _supervise(
    spec: LaunchSpec, command: LaunchCommand, *, as_json: bool, keep_running: bool
) -> int:
    import signal
    import threading

    from lltui.core.llama.exit_reason import exit_event, ready_event
    from lltui.sources.llama.supervisor import Supervisor, SupervisorError

    log_file = None
    if keep_running:
        log_dir = _state_dir()
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(f"launch: cannot create {log_dir}: {exc.strerror}", 1) from None
        log_file = log_dir / f"llama-server-{spec.port}.log"
    url = None if spec.host.split(",")[0].strip().endswith(".sock") else spec.url
    sup = Supervisor(
        command,
        url=url,
        host=spec.host,
        port=spec.port,
        keep_running=keep_running,
        log_file=log_file,
    )
    signals_seen: list[int] = []
    wake = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        signals_seen.append(signum)
        if len(signals_seen) > 1:
            sup.hurry()  # a second Ctrl-C: skip the waits
        wake.set()

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, on_signal) for s in handled}
    try:
        try:
            sup.start()
        except SupervisorError as exc:
            raise CliError(f"launch: {exc}", exc.code) from None
        announced = False
        while True:
            if signals_seen:
                break
            if not announced and sup.is_ready:
                announced = True
                pid = sup.pid or 0
                event = ready_event(spec.url, pid, command.display_argv(), sup.ready_devices())
                _say(json.dumps(event) if as_json else _ready_text(event))
            if sup.exited:
                break
            wake.wait(0.1)
        if signals_seen and keep_running and not sup.exited:
            sup.detach()
            detached = {"event": "detached", "pid": sup.pid, "url": spec.url, "log": str(log_file)}
            _say(
                json.dumps(detached)
                if as_json
                else f"llama-server left running: pid {sup.pid}, {spec.url}, log {log_file}"
            )
            return 0
        result = sup.stop() if signals_seen else sup.wait_exit(5.0)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if not keep_running and not sup.exited and sup.pid is not None:
            sup.stop(grace_s=2.0, second_grace_s=1.0)
    if result is None:
        _say("lltui: llama-server did not exit", err=True)
        return 1
    event = exit_event(result.returncode, result.reason, result.log_tail, pid=result.pid)
    if as_json:
        _say(json.dumps(event))
    elif result.clean:
        _say(f"llama-server {result.reason} (exit code {result.returncode})")
    else:
        _say(f"lltui: llama-server exited (code {result.returncode}): {result.reason}", err=True)
        if result.was_ready or result.reason.startswith("llama-server exited with code"):
            for line in result.log_tail[-10:]:
                _say(f"  | {line}", err=True)
    return 0 if result.clean else 1
