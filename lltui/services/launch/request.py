"""What a front end was given, read into the launch it asks for, the same for ``lltui launch``
and the launch view: the flags over a saved profile (``parse_llama_args``, called here only),
the model and the API key file checked (a profile's model that moved is named with its
profile), and the runtime settings (an inherited ``LLAMA_API_KEY`` keeps the server locked,
port 0 becomes a free port). Errors are :class:`~lltui.core.cmdline.launch_spec.LaunchError`:
one line and an exit code."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.cmdline.flag_table import SECRET_FIELDS
from lltui.core.cmdline.launch_spec import (
    API_KEY_ENV,
    DEFAULT_HOST,
    LAUNCH_KEYS,
    BinaryFlags,
    LaunchCommand,
    LaunchError,
    LaunchSpec,
    read_flags,
)
from lltui.sources.llama import launch_prep, profiles
from lltui.sources.llama import supervisor as supervision

# lltui's own options that both front ends read among the llama-server flags.
PROFILE_OPTIONS = ("--profile", "--save-profile")
SECRET_IN_PS = (
    "a secret on lltui's command line shows in `ps`: use --api-key-file for keys "
    "and export HF_TOKEN for the token"
)


@dataclass(frozen=True)
class Note:
    """Something to tell the user on the way. ``level``: ``note``, ``warning`` or ``info``."""

    level: str
    text: str


NoteSink = Callable[[Note], object]


@dataclass(frozen=True)
class LaunchRequest:
    """What a front end was given. ``words``: llama-server flags as typed, perhaps with
    ``--profile NAME``/``--save-profile NAME`` among them and the model first. ``host`` and
    ``port``: the view's address field, over a profile and under the flags."""

    words: tuple[str, ...] = ()
    # settings already read (the fit view's form): used instead of parsing flags again
    args: LlamaArgs | None = None
    model: str | None = None
    host: str | None = None
    port: int | None = None
    keys_on_command_line: bool = True  # False: --api-key is refused (the view's form)
    # said when nothing names a model, in the words of the front end's own input
    missing_model: str = "no model given: lltui launch MODEL.gguf [flags]"
    # the GPUs the server will see (a view's rig); None: this machine's, asked when needed
    n_gpus: int | None = None
    # the host memory fit's check assumes (--host-free); None: what is free here now
    host_free_bytes: int | None = None


@dataclass(frozen=True)
class GivenLaunch:
    """A request read: the spec as given (what a profile holds) and where its parts came from."""

    spec: LaunchSpec
    profile: str | None = None
    save_profile: str | None = None
    from_profile: frozenset[str] = frozenset()  # spec fields the profile supplied
    key_on_command_line: bool = False


@dataclass(frozen=True)
class PreparedLaunch:
    """The exact launch: ``spec`` is what runs (inherited key, port 0 resolved), ``given`` what
    was asked for, ``command`` the argv and environment (secrets masked in every display)."""

    given: GivenLaunch
    spec: LaunchSpec
    command: LaunchCommand
    flags: BinaryFlags | None  # None: the binary was not found, flags not checked
    origin: str | None  # where the binary was found
    http_key: str | None = field(default=None, repr=False)  # for /metrics and /slots

    @property
    def url(self) -> str | None:
        """Where ``/health`` answers; None for a UNIX socket (readiness from the log)."""
        first = self.spec.host.split(",")[0].strip()
        return None if first.endswith(".sock") else self.spec.url


def split_profile_options(words: Sequence[str]) -> tuple[str | None, str | None, list[str]]:
    """``--profile NAME`` and ``--save-profile NAME`` (or ``=NAME``) taken out of ``words``."""
    found: dict[str, str] = {}
    rest: list[str] = []
    i = 0
    while i < len(words):
        head, eq, value = words[i].partition("=")
        if head in PROFILE_OPTIONS:
            if not eq:
                if i + 1 >= len(words):
                    raise LaunchError(f"{head} needs a NAME")
                i += 1
                value = words[i]
            found[head] = value
        else:
            rest.append(words[i])
        i += 1
    return found.get("--profile"), found.get("--save-profile"), rest


def _profile(name: str) -> LaunchSpec:
    try:
        return profiles.load_profile(name)
    except profiles.ProfileError as exc:
        raise LaunchError(str(exc), exc.code) from None


def _launch_settings(spec: LaunchSpec) -> dict[str, Any]:
    """The launch settings a spec holds that are not the defaults."""
    defaults = {f.name: f.default for f in fields(LaunchSpec) if f.name != "args"}
    return {n: getattr(spec, n) for n, d in defaults.items() if getattr(spec, n) != d}


def check_secrets(given: Iterable[str], keys_on_command_line: bool) -> bool:
    """Keys among a form's flags are refused (they would show in ``ps``); True when a secret
    is among lltui's own command line (said as a warning)."""
    given = set(given)
    if "api_key" in given and not keys_on_command_line:
        raise LaunchError("pass keys with --api-key-file, not among the flags (they show in ps)")
    if "hf_token" in given and not keys_on_command_line:
        raise LaunchError("export the Hugging Face token as HF_TOKEN, not among the flags")
    return bool(given & set(SECRET_FIELDS))


def read_request(request: LaunchRequest) -> GivenLaunch:
    """The spec a request asks for: a profile, then the address field, then the flags."""
    profile, save_as, words = split_profile_options(request.words)
    model = request.model.strip() if request.model and request.model.strip() else None
    if model is None and words and not words[0].startswith("-"):
        model, words = words[0], words[1:]  # MODEL first, as `lltui launch MODEL [flags]`
    args = request.args if request.args is not None else read_flags(words)
    try:
        args.model_of(model)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    if model is not None:
        args = args.with_model(model)
    secret = check_secrets(args.given, request.keys_on_command_line)
    base = _profile(profile) if profile else None
    launch = _launch_settings(base) if base is not None else {}
    from_profile = set(launch)
    if base is not None and "model_path" not in args.given:
        from_profile.add("model")
    if request.host is not None:
        launch["host"] = request.host
    if request.port is not None:
        launch["port"] = request.port
    launch.update({name: getattr(args, name) for name in _given_launch(args)})
    merged = base.args.then(args) if base is not None else args
    if merged.model_path is None:
        raise LaunchError(request.missing_model)
    spec = LaunchSpec.from_args(merged, **launch)
    return GivenLaunch(
        spec=spec,
        profile=profile,
        save_profile=save_as,
        from_profile=frozenset(k for k in from_profile if k not in _given_launch(args)),
        key_on_command_line=secret,
    )


def _given_launch(args: LlamaArgs) -> frozenset[str]:
    """The launch settings given among the flags (``--host``, ``--api-key``, ...)."""
    return frozenset(args.given & LAUNCH_KEYS - {"model_path"})


def check_given(given: GivenLaunch) -> tuple[str, ...]:
    """The model and key file checked (LaunchError, code 2); the keys in the key file.

    A path that came from a profile and is not there any more is named with the profile."""
    spec = given.spec
    if given.profile is not None:
        for name, path in (("model", spec.model), ("api_key_file", spec.api_key_file)):
            if name in given.from_profile and path is not None and not os.path.exists(path):
                what = "model" if name == "model" else "API key file"
                raise LaunchError(
                    f"profile {given.profile!r}: its {what} is not there any more: {path} "
                    "(moved or deleted? save the profile again)"
                )
    return launch_prep.check_inputs(spec)


def save_profile(given: GivenLaunch) -> str:
    """The profile ``--save-profile`` names, written with absolute paths; where it went."""
    assert given.save_profile is not None
    spec = profiles.with_absolute_paths(given.spec)
    try:
        return str(profiles.save_profile(given.save_profile, spec))
    except profiles.ProfileError as exc:
        raise LaunchError(str(exc), exc.code) from None


def runtime_spec(spec: LaunchSpec, environ: Mapping[str, str]) -> LaunchSpec:
    """What runs: an inherited key keeps the server locked as the user expects (unless the
    spec has its own), and port 0 becomes a port that is free now."""
    inherited = environ.get(API_KEY_ENV)
    if inherited and not spec.api_key and not spec.api_key_file:
        spec = replace(spec, api_key=inherited)
    if spec.port == 0:
        host = spec.host.split(",")[0].strip() or DEFAULT_HOST
        try:
            spec = replace(spec, port=supervision.free_port(host))
        except OSError as exc:
            raise LaunchError(f"cannot listen on {host}: {exc.strerror or exc}") from None
    return spec
