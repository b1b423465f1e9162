"""The launch view's form: the model, the flags as typed (or the settings the fit view
carried over) and the address, read into the launch service's request."""

from __future__ import annotations

import os
import shlex
from dataclasses import replace

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.cmdline.launch_spec import LaunchError
from lltui.core.text import is_digits
from lltui.services.launch.request import LaunchRequest, Note
from lltui.services.launch.router_prep import RouterRequest
from lltui.services.launch.session import LaunchSession

DEFAULT_HOSTPORT = "127.0.0.1:8080"


def parse_hostport(text: str) -> tuple[str, int]:
    host, _, port = (text.strip() or DEFAULT_HOSTPORT).rpartition(":")
    if not host or not is_digits(port) or not 0 <= int(port) <= 65535:
        raise LaunchError(f"host:port must look like 127.0.0.1:8080, got {text!r}")
    return host, int(port)


# The form's flags: as typed, or the settings the fit view carried over, unedited.
FormFlags = str | LlamaArgs


def is_router_source(model: str) -> bool:
    """A models directory or a preset file in the model field: llama-server's router."""
    text = model.strip()
    return bool(text) and (os.path.isdir(text) or text.lower().endswith(".ini"))


def form_request(
    model: str, flags: FormFlags, hostport: str, n_gpus: int | None = None
) -> LaunchRequest | RouterRequest:
    """The launch session's request from the form: the model path, llama-server flags as typed
    (``--profile NAME`` and ``--save-profile NAME`` among them) or already read, host:port;
    ``n_gpus``: the GPUs of the rig in view (None: this machine's, asked when needed).
    A directory or a preset file in the model field starts a router with its models."""
    carried = flags if isinstance(flags, LlamaArgs) else None
    try:
        words = () if carried is not None else tuple(shlex.split(str(flags)))
    except ValueError as exc:
        raise LaunchError(f"flags: {exc}") from None
    host, port = parse_hostport(hostport)
    if is_router_source(model):
        if carried is not None:
            words = tuple(carried.to_argv())
        return RouterRequest(  # served on demand, as by ``lltui launch --models``
            source=model.strip(),
            words=words,
            host=host,
            port=port,
            keys_on_command_line=False,
            on_demand=True,
        )
    return LaunchRequest(
        words=words,
        args=carried,
        model=model,
        host=host,
        port=port,
        keys_on_command_line=False,
        missing_model="no model: give the path of a .gguf file",
        n_gpus=n_gpus,
    )


def preview_command(
    model: str, flags: FormFlags, hostport: str, n_gpus: int | None = None
) -> tuple[str, str | None]:
    """The exact command (secrets masked) the form would start, or the reason it cannot; a
    router's command with the plan's verdict."""
    notes: list[Note] = []
    try:
        request = form_request(model, flags, hostport, n_gpus)
        if isinstance(request, RouterRequest):
            return _router_preview(request)
        with LaunchSession(request, on_note=notes.append) as session:
            prepared = session.prepare(require_binary=False, save=False, check=False)
    except LaunchError as exc:
        return "", str(exc)
    note = "; ".join(n.text for n in notes) or None
    return prepared.command.shell_line(), note


def _router_preview(request: RouterRequest) -> tuple[str, str | None]:
    from lltui.core.fit.plan_report import verdict_reasons
    from lltui.services.launch.router import RouterSession

    notes: list[Note] = []
    with RouterSession(request, on_note=notes.append) as session:
        prepared = session.prepare(require_binary=False)
    plan = prepared.report.plan
    verdict = (
        f"{len(plan.models)} models fit together"
        if plan.fits
        else "not all fit together: " + "; ".join(verdict_reasons(plan))
    )
    command = prepared.launch.command
    if prepared.proxy_url is not None:
        # the router's own port is one free when Start runs, not the one this preview took
        argv = list(command.argv)
        argv[argv.index("--port") + 1] = "PORT"
        command = replace(command, argv=tuple(argv))
        verdict += (
            f"; models load on demand at {prepared.proxy_url} (the router behind it "
            "on PORT: a free loopback port, picked at start)"
        )
    note = "; ".join([verdict, *(n.text for n in notes)])
    return command.shell_line(), note
