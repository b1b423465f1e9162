"""One launch of llama-server, the same for ``lltui launch`` and the launch view.
:class:`Session` is what one server and a router share: the exact command from a spec (the
policy, runtime settings, the binary probed, a key file, fit's verdict), the server started
under the :class:`~lltui.sources.llama.supervisor.Supervisor`, stopped and closed (nothing
of ours left running). :class:`LaunchSession` reads a request into that spec;
:class:`~.router.RouterSession` plans a set of models."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Self

from lltui.core.cmdline.address import endpoint_is_loopback, is_loopback
from lltui.core.cmdline.args import LlamaArgs
from lltui.core.cmdline.flag_values import tensor_split_extra
from lltui.core.cmdline.launch_spec import (
    ANY_LAUNCH,
    BinaryFlags,
    LaunchError,
    LaunchPolicy,
    LaunchSpec,
    api_key_transport,
    build_command,
)
from lltui.paths import state_dir
from lltui.services.launch.request import (
    SECRET_IN_PS,
    GivenLaunch,
    LaunchRequest,
    Note,
    NoteSink,
    PreparedLaunch,
    check_given,
    read_request,
    runtime_spec,
    save_profile,
)
from lltui.sources.llama import launch_prep
from lltui.sources.llama import supervisor as supervision
from lltui.sources.llama.supervisor import ServerExit, ServerStatus

if TYPE_CHECKING:  # the prediction is made once a server has loaded
    from lltui.services.launch.compare import LaunchCheck

# How long a session that is closed gives a server still running (Ctrl-C already waited).
CLOSE_GRACE_S = 2.0
CLOSE_SECOND_GRACE_S = 1.0


def _local_gpus() -> int:
    """This machine's NVIDIA GPUs (0 where NVML answers none)."""
    from lltui.services.devices import local_devices

    return len(local_devices()[0])


class Session:
    """What one server and a router share, from the exact command to the server's exit:
    :meth:`prepare_given`, :meth:`start`, :meth:`stop`; :meth:`close` (or the ``with``
    block) at the end leaves nothing of ours running and removes the key file."""

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        on_note: NoteSink | None = None,
        policy: LaunchPolicy = ANY_LAUNCH,
        n_gpus: int | None = None,
    ) -> None:
        self.policy = policy
        self.environ: dict[str, str] = dict(os.environ if environ is None else environ)
        self._on_note = on_note
        self._n_gpus = n_gpus  # the GPUs the server will see; None: this machine's
        self._launch: PreparedLaunch | None = None
        self._key_dir: tempfile.TemporaryDirectory[str] | None = None
        self._sup: supervision.Supervisor | None = None
        self._keep_running = False
        self._stopped = False
        self._detached = False
        self.log_file: Path | None = None
        self.notes: list[Note] = []  # every note said, in order
        # --rpc endpoints whose missing authentication was said (here, or by the front end:
        # --rpc-host's warning of an rpc-server it binds beyond loopback)
        self.rpc_warned: set[str] = set()

    @property
    def subject(self) -> str:
        """What is launched, in words (the model; a router's models)."""
        return self.launch.spec.model

    def log_parser(self) -> supervision.LogParser | None:
        """How the server's log is read (None: one server's reader)."""
        return None

    def loaded_check(self) -> LaunchCheck | None:
        """Once loaded: the server's buffers beside lltui's prediction (None: none made)."""
        return None

    def judged_exit(self, result: ServerExit) -> ServerExit:
        """How the server ended, as this kind of launch judges it (a router: see there)."""
        return result

    def prepare_given(
        self,
        given: GivenLaunch,
        file_keys: tuple[str, ...] = (),
        *,
        require_binary: bool = True,
        plan: str | None = None,
        host_free_bytes: int | None = None,
    ) -> PreparedLaunch:
        """The exact command for a spec already read and checked: the policy, the runtime
        settings, the binary, the key file. ``require_binary``: a missing llama-server is an
        error (else the command names ``llama-server`` and flags go unchecked). ``plan``:
        what a command fit says will not fit does: ``refuse`` (LaunchError, code 1, with the
        command that fits), ``warn`` (a note, a dry run), ``force`` (a warning note, it
        starts); None asks fit nothing (a router's loads are gated by its own plan).
        ``host_free_bytes``: the host memory fit assumes (None: what is free now)."""
        words = given.spec.args.to_argv()
        self.policy.check([*words, *(("--api-key-file",) if given.spec.api_key_file else ())])
        spec = runtime_spec(given.spec, self.environ)
        # (said by a dry run too: what it shows would be open to the network)
        self._warn_if_open(spec.host, spec, "use the server")
        self._warn_if_rpc_open(spec.args.rpc)
        split_warning = self._split_warning(spec.args)
        if split_warning:
            self._note("warning", split_warning)
        path, flags, origin, why = launch_prep.find_binary(required=require_binary)
        if why is not None:
            self._note("note", f"flags not checked: {why}")
        command = build_command(spec, path, flags, key_file=self._key_file(spec, flags))
        if plan is not None:
            # the command as given (no inherited key, port 0 as asked): fit's suggestion
            # repeats it
            binary = path if flags is not None else None
            self._check_plan(given.spec, binary, plan, host_free_bytes)
        if file_keys:
            command = replace(command, secrets=command.secrets + file_keys)
        http_key = spec.api_key.split(",")[0] if spec.api_key else None
        self._launch = PreparedLaunch(
            given=given,
            spec=spec,
            command=command,
            flags=flags,
            origin=origin,
            http_key=http_key or (file_keys[0] if file_keys else None),
        )
        return self._launch

    def _check_plan(
        self, spec: LaunchSpec, binary_path: str | None, plan: str, host_free: int | None
    ) -> None:
        """fit's verdict on the command before anything starts (see check.py)."""
        from lltui.services.launch.check import FORCE_HINT, judge

        verdict = judge(spec, binary_path, host_free)
        for text in verdict.notes:
            self._note("note", text)
        if verdict.hang and plan == "refuse":
            raise LaunchError(f"{verdict.hang}; {FORCE_HINT}", 1)
        if verdict.hang:
            self._note("warning", verdict.hang if plan == "warn" else f"forced: {verdict.hang}")
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
            n = self._n_gpus if self._n_gpus is not None else _local_gpus()
            visible = self.environ.get("CUDA_VISIBLE_DEVICES")
            if visible is not None:
                n = min(n, len([v for v in visible.split(",") if v.strip()]))
            n += len(args.rpc)
        return tensor_split_extra(args.tensor_split, n) if n else None

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
    def launch(self) -> PreparedLaunch:
        """The exact launch of the server's process."""
        if self._launch is None:
            raise LaunchError("the launch is not prepared yet", 1)
        return self._launch

    def _ensure_prepared(self) -> PreparedLaunch:
        return self.launch

    def start(
        self,
        *,
        keep_running: bool = False,
        on_line: Callable[[str], None] | None = None,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        """Start the prepared server; returns once it runs (not once it is ready).
        ``keep_running``: it outlives lltui, its log in :func:`lltui.paths.state_dir`.
        ``on_line``/``on_event``: the supervisor's listeners (a watch's)."""
        prepared = self._ensure_prepared()
        spec = prepared.spec
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
            on_line=on_line,
            on_event=on_event,
            parser=self.log_parser(),
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
    def pid(self) -> int | None:
        return self._sup.pid if self._sup is not None else None

    @property
    def is_ready(self) -> bool:
        return self._sup is not None and self._sup.is_ready

    def status(self) -> ServerStatus | None:
        return self._sup.status() if self._sup is not None else None

    @property
    def supervisor(self) -> supervision.Supervisor | None:
        return self._sup

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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn_if_open(self, host: str, spec: LaunchSpec, what: str) -> None:
        """A warning where ``host`` is reachable beyond this machine and no key locks it."""
        if not is_loopback(host) and not spec.api_key and not spec.api_key_file:
            self._note(
                "warning",
                f"listening on {host} with no API key: anyone who can reach this machine "
                f"can {what}",
            )

    def _warn_if_rpc_open(self, endpoints: Iterable[str]) -> None:
        """A warning where llama-server reaches an rpc-server beyond loopback."""
        from lltui.services.devices import RPC_WARNING

        far = [
            ep
            for ep in dict.fromkeys(endpoints)
            if not endpoint_is_loopback(ep) and ep not in self.rpc_warned
        ]
        self.rpc_warned.update(far)
        if far:
            self._note("warning", f"--rpc {','.join(far)}: {RPC_WARNING}")

    def _note(self, level: str, text: str) -> None:
        note = Note(level, text)
        self.notes.append(note)
        if self._on_note is not None:
            self._on_note(note)


class LaunchSession(Session):
    """One llama-server from a :class:`~.request.LaunchRequest`: :meth:`prepare` once (the
    command, for a dry run or a preview), then start, watch, stop, close."""

    def __init__(
        self,
        request: LaunchRequest,
        *,
        environ: Mapping[str, str] | None = None,
        on_note: NoteSink | None = None,
        policy: LaunchPolicy = ANY_LAUNCH,
    ) -> None:
        super().__init__(environ=environ, on_note=on_note, policy=policy, n_gpus=request.n_gpus)
        self.request = request

    def prepare(
        self,
        *,
        require_binary: bool = True,
        save: bool = True,
        check: bool = True,
        plan: str = "refuse",
    ) -> PreparedLaunch:
        """The exact command. ``save``: write the profile ``--save-profile`` names;
        ``check``: check the model and key file, and ask fit about the command (a preview
        does not); ``require_binary`` and ``plan`` as for :meth:`Session.prepare_given`."""
        given = read_request(self.request)
        if given.key_on_command_line:
            self._note("warning", SECRET_IN_PS)
        file_keys = check_given(given) if check else ()
        if save and given.save_profile:
            path = save_profile(given)
            self._note("info", f"saved launch profile {given.save_profile!r} in {path}")
        return self.prepare_given(
            given,
            file_keys,
            require_binary=require_binary,
            plan=plan if check else None,
            host_free_bytes=self.request.host_free_bytes,
        )

    def _ensure_prepared(self) -> PreparedLaunch:
        return self._launch or self.prepare()

    def loaded_check(self) -> LaunchCheck | None:
        """The server's buffer lines beside lltui's prediction for its settings and build
        (None before the first buffer line, unless its log level hides them)."""
        from lltui.services.launch.compare import build_of_binary, check_launch, unlogged_check

        if self._sup is None or self._launch is None:
            return None
        facts = self._sup.facts()
        prepared = self._launch
        if not facts.buffers:
            spec = prepared.spec
            return unlogged_check(spec.model, spec.args, spec.log_verbosity)
        by_buffer = {b: p.name for p in facts.placement() for b in p.buffers}
        build = build_of_binary(prepared.command.argv[0] if prepared.command.argv else None)
        return check_launch(facts, by_buffer, prepared.spec.args, prepared.spec.model, build)
