"""One launch of llama-server, the same for ``lltui launch`` and the launch view.

A :class:`LaunchSession` takes what a front end was given (a :class:`LaunchRequest`: the model,
llama-server flags as typed, ``--profile``/``--save-profile``, the view's address) and does
everything between that and a watched server in one way for both:

1. read the flags (``parse_llama_args``, called here only) over a saved profile;
2. check the inputs: the model (a profile's model that moved is named with its profile) and
   the API key file;
3. save the profile with absolute paths, so it starts from any folder;
4. the runtime settings: an inherited ``LLAMA_API_KEY`` keeps the server locked, port 0
   becomes a free port;
5. find and probe llama-server, and build the exact command (``build_command``), writing the
   key to a private file when the binary reads keys only from one;
6. start it under the :class:`~lltui.sources.llama.supervisor.Supervisor`, report readiness and
   placement, stop it, and say why it ended.

Errors are :class:`~lltui.core.llama.launch_spec.LaunchError`: one line and an exit code.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lltui.core.llama.address import is_loopback
from lltui.core.llama.args import LlamaArgs
from lltui.core.llama.exit_reason import exit_sentence, ready_event
from lltui.core.llama.flag_table import SECRET_FIELDS
from lltui.core.llama.flag_values import tensor_split_extra
from lltui.core.llama.launch_spec import (
    ANY_LAUNCH,
    API_KEY_ENV,
    DEFAULT_HOST,
    LAUNCH_KEYS,
    BinaryFlags,
    LaunchCommand,
    LaunchError,
    LaunchPolicy,
    LaunchSpec,
    api_key_transport,
    build_command,
    read_flags,
)
from lltui.core.llamalog.models import DevicePlacement
from lltui.paths import state_dir
from lltui.sources.llama import launch_prep, profiles
from lltui.sources.llama import supervisor as supervision
from lltui.sources.llama.supervisor import ServerExit, ServerStatus

if TYPE_CHECKING:  # the prediction is made once a server has loaded
    from lltui.services.launch_compare import LaunchCheck

# lltui's own options that both front ends read among the llama-server flags.
PROFILE_OPTIONS = ("--profile", "--save-profile")
# How long a session that is closed gives a server still running (Ctrl-C already waited).
CLOSE_GRACE_S = 2.0
CLOSE_SECOND_GRACE_S = 1.0


@dataclass(frozen=True)
class Note:
    """Something to tell the user on the way. ``level``: ``note``, ``warning`` or ``info``."""

    level: str
    text: str


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


# --- reading a request -------------------------------------------------------------------------


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


def read_request(request: LaunchRequest) -> GivenLaunch:
    """The spec a request asks for: a profile, then the address field, then the flags."""
    profile, save_as, words = split_profile_options(request.words)
    model = request.model.strip() if request.model and request.model.strip() else None
    if model is None and words and not words[0].startswith("-"):
        model, words = words[0], words[1:]  # MODEL first, as `lltui launch MODEL [flags]`
    args = request.args if request.args is not None else read_flags(words)
    if model is not None and "model_path" in args.given:
        raise LaunchError("the model is given twice (MODEL and -m)")
    if model is not None:
        args = args.with_model(model)
    if "api_key" in args.given and not request.keys_on_command_line:
        raise LaunchError("pass keys with --api-key-file, not among the flags (they show in ps)")
    if "hf_token" in args.given and not request.keys_on_command_line:
        raise LaunchError("export the Hugging Face token as HF_TOKEN, not among the flags")
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
        key_on_command_line=any(name in args.given for name in SECRET_FIELDS),
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


def describe_exit(result: ServerExit) -> str:
    """One line on how the server ended, the same in the CLI and the view."""
    return exit_sentence(result.returncode, result.reason, clean=result.clean)


def _local_gpus() -> int:
    """This machine's NVIDIA GPUs (0 where NVML answers none)."""
    from lltui.services.devices import local_devices

    return len(local_devices()[0])


# --- the session -------------------------------------------------------------------------------


class LaunchSession:
    """One launch, from a request to the server's exit: :meth:`prepare` once (the command, for
    a dry run or a preview), then :meth:`start`, watch, :meth:`stop`; :meth:`close` (or the
    ``with`` block) at the end leaves nothing of ours running and removes the key file."""

    def __init__(
        self,
        request: LaunchRequest,
        *,
        environ: Mapping[str, str] | None = None,
        on_note: Callable[[Note], object] | None = None,
        on_line: Callable[[str], None] | None = None,
        on_event: Callable[[str], None] | None = None,
        log_parser: supervision.LogParser | None = None,
        policy: LaunchPolicy = ANY_LAUNCH,
    ) -> None:
        self.request = request
        self.policy = policy
        self._log_parser = log_parser
        self.environ: dict[str, str] = dict(os.environ if environ is None else environ)
        self._on_note = on_note
        self._on_line = on_line
        self._on_event = on_event
        self._prepared: PreparedLaunch | None = None
        self._key_dir: tempfile.TemporaryDirectory[str] | None = None
        self._sup: supervision.Supervisor | None = None
        self._keep_running = False
        self._stopped = False
        self._detached = False
        self.log_file: Path | None = None

    # -- preparing --------------------------------------------------------------------------

    def prepare(
        self,
        *,
        require_binary: bool = True,
        save: bool = True,
        check: bool = True,
        plan: str = "refuse",
    ) -> PreparedLaunch:
        """The exact command. ``require_binary``: a missing llama-server is an error (else the
        command names ``llama-server`` and flags go unchecked); ``save``: write the profile
        ``--save-profile`` names; ``check``: check the model and key file, and ask fit about
        the command (a preview does not). ``plan``: what a command fit says will not fit does:
        ``refuse`` (LaunchError, code 1, with the command that fits), ``warn`` (a note, a dry
        run) or ``force`` (a warning note, it starts)."""
        given = read_request(self.request)
        if given.key_on_command_line:
            self._note(
                "warning",
                "a secret on lltui's command line shows in `ps`: use --api-key-file for keys "
                "and export HF_TOKEN for the token",
            )
        file_keys = check_given(given) if check else ()
        if save and given.save_profile:
            self._save(given)
        return self.prepare_given(
            given, file_keys, require_binary=require_binary, plan=plan if check else None
        )

    def prepare_given(
        self,
        given: GivenLaunch,
        file_keys: tuple[str, ...] = (),
        *,
        require_binary: bool = True,
        plan: str | None = None,
    ) -> PreparedLaunch:
        """The exact command for a spec already read and checked (a router's, whose models
        come from a preset): the runtime settings, the binary, the key file. ``plan``: as
        for :meth:`prepare`; None asks fit nothing (a router's loads are gated by its own
        plan)."""
        words = given.spec.args.to_argv()
        self.policy.check([*words, *(("--api-key-file",) if given.spec.api_key_file else ())])
        spec = runtime_spec(given.spec, self.environ)
        split_warning = self._split_warning(spec.args)
        if split_warning:
            self._note("warning", split_warning)
        path, flags, origin, why = launch_prep.find_binary(required=require_binary)
        if why is not None:
            self._note("note", f"flags not checked: {why}")
        command = build_command(spec, path, flags, key_file=self._key_file(spec, flags))
        if plan is not None:
            self._check_plan(spec, path if flags is not None else None, plan)
        if file_keys:
            command = replace(command, secrets=command.secrets + file_keys)
        http_key = spec.api_key.split(",")[0] if spec.api_key else None
        self._prepared = PreparedLaunch(
            given=given,
            spec=spec,
            command=command,
            flags=flags,
            origin=origin,
            http_key=http_key or (file_keys[0] if file_keys else None),
        )
        return self._prepared

    def _check_plan(self, spec: LaunchSpec, binary_path: str | None, plan: str) -> None:
        """fit's verdict on the command before anything starts (see launch_check)."""
        from lltui.services.launch_check import FORCE_HINT, judge

        verdict = judge(spec, binary_path)
        for text in verdict.notes:
            self._note("note", text)
        if verdict.fits is not False:
            return
        if plan == "refuse":
            raise LaunchError(f"{verdict.problem}; {FORCE_HINT}", 1)
        self._note("warning", verdict.problem if plan == "warn" else f"forced: {verdict.problem}")

    def _split_warning(self, args: LlamaArgs) -> str | None:
        """A ``-ts`` with more values than the server will have devices (llama.cpp drops the
        rest without a word)."""
        if not args.tensor_split:
            return None
        if args.devices is not None:
            n = len(args.devices)
        else:
            n = self.request.n_gpus if self.request.n_gpus is not None else _local_gpus()
            visible = self.environ.get("CUDA_VISIBLE_DEVICES")
            if visible is not None:
                n = min(n, len([v for v in visible.split(",") if v.strip()]))
            n += len(args.rpc)
        return tensor_split_extra(args.tensor_split, n) if n else None

    def _save(self, given: GivenLaunch) -> None:
        assert given.save_profile is not None
        spec = profiles.with_absolute_paths(given.spec)
        try:
            path = profiles.save_profile(given.save_profile, spec)
        except profiles.ProfileError as exc:
            raise LaunchError(str(exc), exc.code) from None
        self._note("info", f"saved launch profile {given.save_profile!r} in {path}")

    def _key_file(self, spec: LaunchSpec, flags: BinaryFlags | None) -> str | None:
        """A private file with the key, for a binary that reads keys only from a file."""
        if api_key_transport(spec, flags) != "file":
            return None
        self._remove_key_file()
        try:
            self._key_dir = tempfile.TemporaryDirectory(prefix="lltui-key-")
            key_file = os.path.join(self._key_dir.name, "api-key")
            fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("\n".join(s for s in (spec.api_key or "").split(",") if s) + "\n")
        except OSError as exc:
            raise LaunchError(f"cannot write the key file: {exc.strerror or exc}", 1) from None
        return key_file

    @property
    def prepared(self) -> PreparedLaunch:
        if self._prepared is None:
            raise LaunchError("the launch is not prepared yet", 1)
        return self._prepared

    # -- running ----------------------------------------------------------------------------

    def start(self, *, keep_running: bool = False) -> None:
        """Start the prepared server; returns once it runs (not once it is ready).
        ``keep_running``: it outlives lltui, its log in :func:`lltui.paths.state_dir`."""
        prepared = self._prepared or self.prepare()
        spec = prepared.spec
        if not is_loopback(spec.host) and not spec.api_key and not spec.api_key_file:
            self._note(
                "warning",
                f"listening on {spec.host} with no API key: "
                "anyone who can reach this machine can use the server",
            )
        if keep_running:
            self.log_file = self._keep_running_log(spec)
        self._keep_running = keep_running
        sup = supervision.Supervisor(
            prepared.command,
            url=prepared.url,
            host=spec.host,
            port=spec.port,
            keep_running=keep_running,
            log_file=self.log_file,
            environ=self.environ,
            on_line=self._on_line,
            on_event=self._on_event,
            parser=self._log_parser,
        )
        self._sup = sup
        try:
            sup.start()
        except supervision.SupervisorError as exc:
            raise LaunchError(str(exc), exc.code) from None
        except OSError as exc:
            raise LaunchError(f"cannot start llama-server: {exc.strerror or exc}", 1) from None

    def _keep_running_log(self, spec: LaunchSpec) -> Path:
        log_dir = state_dir(self.environ)
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LaunchError(f"cannot create {log_dir}: {exc.strerror}", 1) from None
        return log_dir / f"llama-server-{spec.port}.log"

    @property
    def started(self) -> bool:
        return self._sup is not None

    @property
    def pid(self) -> int | None:
        return self._sup.pid if self._sup is not None else None

    @property
    def is_ready(self) -> bool:
        return self._sup is not None and self._sup.is_ready

    @property
    def exited(self) -> bool:
        return self._sup is not None and self._sup.exited

    def ready_event(self, check: LaunchCheck | None = None) -> dict[str, Any]:
        """The launcher's ``ready`` event: URL, pid, argv (masked) and memory per device,
        each device with lltui's prediction beside it (``check``, else made here)."""
        from lltui.services.launch_compare import check_summary, predicted_mib

        prepared = self.prepared
        devices = self._sup.ready_devices() if self._sup is not None else []
        check = check if check is not None else self.check()
        event = ready_event(
            prepared.spec.url, self.pid or 0, prepared.command.display_argv(), devices
        )
        if check is not None:
            for d in event["devices"]:
                found = check.device(str(d["name"]))
                d["predicted"] = None if found is None else predicted_mib(found)
            event["prediction"] = check_summary(check)
        return event

    def check(self) -> LaunchCheck | None:
        """The server's buffer lines beside lltui's prediction for its settings and build
        (None before the first buffer line)."""
        from lltui.services.launch_compare import build_of_binary, check_launch

        if self._sup is None or self._prepared is None:
            return None
        facts = self._sup.facts()
        if not facts.buffers:
            return None
        prepared = self._prepared
        groups = facts.placement()
        by_buffer = {b: p.name for p in groups for b in p.buffers}
        build = build_of_binary(prepared.command.argv[0] if prepared.command.argv else None)
        return check_launch(facts, by_buffer, prepared.spec.args, prepared.spec.model, build)

    def placement(self) -> tuple[DevicePlacement, ...]:
        """Where the model went, per device, from the server's log so far."""
        if self._sup is None:
            return ()
        return tuple(self._sup.summary().placement())

    def status(self) -> ServerStatus | None:
        return self._sup.status() if self._sup is not None else None

    @property
    def supervisor(self) -> supervision.Supervisor | None:
        return self._sup

    def wait_ready(self, timeout_s: float | None = None) -> bool:
        return self._sup is not None and self._sup.wait_ready(timeout_s)

    def wait_exit(self, timeout_s: float | None = None) -> ServerExit | None:
        return self._sup.wait_exit(timeout_s) if self._sup is not None else None

    # -- stopping ---------------------------------------------------------------------------

    def stop(self, **waits: float) -> ServerExit | None:
        """Stop the server (SIGTERM, a bounded wait, again, then SIGKILL; ``waits`` are the
        Supervisor's ``grace_s``, ``second_grace_s``, ``kill_wait_s``); how it ended."""
        if self._sup is None:
            return None
        self._stopped = True
        return self._sup.stop(**waits)

    def hurry(self) -> None:
        """Cut the waits of a stop in progress short (a second Ctrl-C)."""
        if self._sup is not None:
            self._sup.hurry()

    def detach(self) -> None:
        """Leave a ``keep_running`` server running and stop watching it."""
        if self._sup is not None:
            self._sup.detach()
            self._detached = True

    def close(self) -> None:
        """Nothing of ours outlives lltui: stop a server still running (unless it was meant to
        keep running) and remove the key file."""
        sup = self._sup
        try:
            if (
                sup is not None
                and not (self._stopped or self._detached or self._keep_running)
                and not sup.exited
                and sup.pid is not None
            ):
                self.stop(grace_s=CLOSE_GRACE_S, second_grace_s=CLOSE_SECOND_GRACE_S)
        finally:
            self._remove_key_file()

    def _remove_key_file(self) -> None:
        if self._key_dir is not None:
            with contextlib.suppress(OSError):
                self._key_dir.cleanup()
            self._key_dir = None

    def __enter__(self) -> LaunchSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _note(self, level: str, text: str) -> None:
        if self._on_note is not None:
            self._on_note(Note(level, text))
