"""What to launch: a llama-server command line and environment, built from a frozen spec.

A :class:`LaunchSpec` is the command line as the one parser read it
(:class:`~lltui.core.cmdline.args.LlamaArgs`: the model and every flag, in order) plus what
only a launch has (address, API key, token, log level, environment). :func:`build_command`
turns it into the exact argv and environment for one binary, spelling each flag the way that
binary does (``--load-mode none`` or ``--no-mmap``), and refusing, in one line, a flag the
binary lacks.

The API key is a secret: it never goes into argv (``ps`` would show it), it is passed as the
``LLAMA_API_KEY`` environment variable, and every repr, display form and captured log line
shows ``***`` instead. Standard library only.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from lltui.core.cmdline.address import (
    DEFAULT_HOST,
    AddressError,
    check_hostport,
    check_listen_host,
    server_url,
)
from lltui.core.cmdline.args import LlamaArgs
from lltui.core.cmdline.flag_table import (
    BY_KEY,
    FILE_FLAGS,
    FLAGS,
    MASK,
    REMOVED,
    SECRET_ENV,
    SECRET_FIELDS,
    BinaryFlags,
    arity_of,
    canonical,
    closest_flag,
    is_flag_token,
    is_secret,
    unknown_flag_message,
)
from lltui.core.llama.limits import first_split_part

DEFAULT_PORT = 8080
# Level 4 is where llama.cpp prints device, layer and buffer lines; the default (3) hides them.
PLACEMENT_LOG_VERBOSITY = 4

API_KEY_ENV = "LLAMA_API_KEY"
ROUTER_PRESET_FLAG = "--models-preset"  # llama-server in router mode, its models from a file
P2P_ENV = "GGML_CUDA_P2P"  # enables peer access when set at all, whatever its value
P2P_OFF_WORDS = ("0", "off", "false", "no", "disabled", "")  # values that read as off, but are on
# Inherited variables that change what llama-server does; shown by a dry run.
RELEVANT_ENV_PREFIXES: tuple[str, ...] = ("LLAMA_", "GGML_", "CUDA_", "NCCL_")

_NCCL_NAME = re.compile(r"^NCCL_[A-Z0-9_]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU_ID = re.compile(r"^(?:\d+|GPU-[0-9A-Za-z-]+|MIG-[0-9A-Za-z/-]+)$")


class LaunchError(ValueError):
    """A spec or flag that cannot be launched; ``str()`` is one line, ``code`` the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class LaunchPolicy:
    """What a front end may start. ``allowed`` False: nothing (a read-only app: no launch,
    stop, restart or follow). ``served``: the app is driven from a browser (``lltui serve``),
    so a launch carries none of the flags that serve, write or show files
    (:data:`FILE_FLAGS`) but those the user's own config names in ``file_flags_allowed``."""

    allowed: bool = True
    served: bool = False
    file_flags_allowed: frozenset[str] = frozenset()

    def refusal(self, flags: Iterable[str]) -> str | None:
        """Why a launch with these words may not start here; None when it may."""
        if not self.allowed:
            return "read-only: this app starts, stops and follows no llama-server"
        if not self.served:
            return None
        for word in flags:
            name = canonical(word.split("=", 1)[0])
            if name in FILE_FLAGS and name not in self.file_flags_allowed:
                return (
                    f"{name} is refused from the browser view (llama-server would serve, write "
                    f"or show files as this user); allow it with serve_allow_flags in the "
                    "config file"
                )
        return None

    def check(self, flags: Iterable[str]) -> None:
        """:meth:`refusal` as a LaunchError."""
        why = self.refusal(flags)
        if why is not None:
            raise LaunchError(why, 1)


ANY_LAUNCH = LaunchPolicy()  # a terminal's own user: whatever is typed


# --- the spec ----------------------------------------------------------------------------


def _pairs(
    value: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), str(v)) for k, v in items)


# the settings only a launch has: lltui's launcher writes these flags itself
LAUNCH_KEYS: frozenset[str] = frozenset(f.key for f in FLAGS if f.launch_own)
_LAUNCH_FIELDS = ("host", "port", "api_key", "api_key_file", "hf_token", "log_verbosity", "metrics")


@dataclass(frozen=True)
class LaunchSpec:
    """One llama-server launch: its command line (``args``: the model and every other flag,
    as given, read by the one parser) and what only a launch has: the address, the secrets,
    the log level, the environment.

    ``visible_gpus``: GPU UUIDs (``GPU-...``) or indices for ``CUDA_VISIBLE_DEVICES`` (CUDA's
    indices, in the order ``CUDA_DEVICE_ORDER`` gives; UUIDs name a GPU in any order).
    """

    args: LlamaArgs
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: str | None = field(default=None, repr=False)
    api_key_file: str | None = None
    hf_token: str | None = field(default=None, repr=False)
    metrics: bool = True  # /metrics feeds tokens/s; it costs nothing when unused
    log_verbosity: int = PLACEMENT_LOG_VERBOSITY
    visible_gpus: tuple[str, ...] = ()
    nccl_env: tuple[tuple[str, str], ...] = ()
    cuda_p2p: bool = False
    env: tuple[tuple[str, str], ...] = ()
    # router mode: the models come from this preset file, and ``args`` holds no model
    models_preset: str | None = None

    def __post_init__(self) -> None:
        # checked and normalised in steps; each raises LaunchError with one line
        self._check_model()
        self._check_address()
        self._check_split()
        self._normalise_lists()
        self._check_secrets()
        self._normalise_environment()

    @classmethod
    def of(
        cls,
        model: str,
        flags: Sequence[str] = (),
        *,
        binary: BinaryFlags | None = None,
        **launch: Any,
    ) -> LaunchSpec:
        """A launch of ``model`` with llama-server ``flags`` as typed (read by the one parser;
        a flag no build lltui knows is kept for the binary to judge) and launch settings."""
        return cls.from_args(read_flags(flags, binary).with_model(model), **launch)

    @classmethod
    def from_args(cls, args: LlamaArgs, **launch: Any) -> LaunchSpec:
        """A launch of a command line already read: the launch settings among its flags
        (``--host``, ``--port``, ``--api-key``, ...) move out of ``args`` into the spec
        (``launch`` keywords win over them); the model and every other flag stay."""
        own = args.given & LAUNCH_KEYS - {"model_path"}
        taken = {name: getattr(args, name) for name in _LAUNCH_FIELDS if name in own}
        return cls(args=args.without(own), **(taken | launch))

    @property
    def model(self) -> str:
        return self.args.model_path or ""

    @property
    def given_launch(self) -> frozenset[str]:
        """The launch settings that differ from their defaults."""
        defaults = {f.name: f.default for f in fields(LaunchSpec)}
        return frozenset(n for n in _LAUNCH_FIELDS if getattr(self, n) != defaults[n])

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def _check_model(self) -> None:
        if not isinstance(self.args, LlamaArgs):
            raise LaunchError(f"args must be LlamaArgs, got {type(self.args).__name__}")
        if self.models_preset is not None:
            if self.model.strip():
                raise LaunchError("a router takes its models from the preset, not -m")
        elif not self.model.strip():
            raise LaunchError("no model given: pass MODEL.gguf (or -m MODEL.gguf)")
        if self.args.given & LAUNCH_KEYS - {"model_path"}:
            raise LaunchError("the launch settings are the spec's: use LaunchSpec.from_args")

    def _check_address(self) -> None:
        if not isinstance(self.host, str) or not self.host.strip():
            raise LaunchError("--host needs an address")
        try:
            check_listen_host(self.host)
        except AddressError as exc:
            raise LaunchError(str(exc)) from None
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise LaunchError(f"--port must be a whole number, got {self.port!r}")
        if not 0 <= self.port <= 65535:
            raise LaunchError(f"--port must be between 0 and 65535, got {self.port}")
        if self.log_verbosity < 0:
            raise LaunchError(f"log verbosity must be >= 0, got {self.log_verbosity}")

    def _check_split(self) -> None:
        a = self.args
        n_split = len(a.tensor_split) if "tensor_split" in a.given else None
        if "main_gpu" in a.given and n_split is not None and a.main_gpu >= n_split:
            raise LaunchError(
                f"main_gpu {a.main_gpu} is not one of the {n_split} device(s) in tensor_split"
            )
        for hostport in a.rpc:
            try:
                check_hostport(hostport)
            except AddressError as exc:
                raise LaunchError(str(exc)) from None

    def _normalise_lists(self) -> None:
        gpus = tuple(str(g).strip() for g in self.visible_gpus)
        for gpu in gpus:
            if not _GPU_ID.match(gpu):
                raise LaunchError(f"{gpu!r} is not a GPU UUID (GPU-...), MIG id or index")
        self._set("visible_gpus", gpus)

    def _check_secrets(self) -> None:
        if self.api_key is not None:
            if not isinstance(self.api_key, str) or not self.api_key.strip(","):
                raise LaunchError("the API key is empty")
            if "\n" in self.api_key or "\r" in self.api_key:
                raise LaunchError("the API key must be one line")
        if self.hf_token is not None:
            if not isinstance(self.hf_token, str) or not self.hf_token.strip():
                raise LaunchError("the Hugging Face token is empty")
            if "\n" in self.hf_token or "\r" in self.hf_token:
                raise LaunchError("the Hugging Face token must be one line")

    def _normalise_environment(self) -> None:
        nccl = _pairs(self.nccl_env)
        for name, _ in nccl:
            if not _NCCL_NAME.match(name):
                raise LaunchError(f"{name!r} is not an NCCL_* variable name")
        self._set("nccl_env", nccl)
        env = _pairs(self.env)
        for name, value in env:
            if not _ENV_NAME.match(name):
                raise LaunchError(f"{name!r} is not an environment variable name")
            if name in SECRET_ENV:
                raise LaunchError(
                    f"{name} holds a secret: give it as its flag ("
                    f"{', '.join(f.spellings[0] for f in BY_KEY.values() if f.secret_env == name)}"
                    ") or export it, so that it is passed on masked"
                )
            if name == P2P_ENV and value.strip().lower() in P2P_OFF_WORDS:
                raise LaunchError(
                    f"{P2P_ENV}={value} turns peer access on (llama.cpp enables it for any "
                    "value): leave it out to keep it off"
                )
        self._set("env", env)

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in SECRET_FIELDS:
                parts.append(f"{f.name}={MASK!r}" if value else f"{f.name}=None")
                continue
            if f.name == "args":
                value = [self.model, *self.args.to_argv()[2:]]
            parts.append(f"{f.name}={value!r}")
        return f"LaunchSpec({', '.join(parts)})"

    __str__ = __repr__

    @property
    def secrets(self) -> tuple[str, ...]:
        """Strings that must never be shown: the keys (each of a comma list too), the token."""
        found: list[str] = []
        if self.api_key:
            found += [self.api_key, *(p for p in self.api_key.split(",") if p)]
        if self.hf_token:
            found.append(self.hf_token)
        return tuple(dict.fromkeys(found))

    @property
    def url(self) -> str:
        """Where clients reach the server (the first address of a comma list)."""
        return server_url(self.host, self.port)


def read_flags(flags: Sequence[str], binary: BinaryFlags | None = None) -> LlamaArgs:
    """llama-server flags as typed, for a launch: the one parser, with a flag no build lltui
    knows kept (when no binary is at hand) for :func:`build_command` to judge; LaunchError
    (one line) for a flag or value llama-server refuses."""
    from lltui.core.cmdline.args import parse_llama_args

    try:
        return parse_llama_args(flags, binary=binary, keep_unknown=binary is None)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


@dataclass(frozen=True)
class LaunchCommand:
    """The exact process to start: argv, the variables set over the inherited environment and
    the ones removed from it. ``secrets`` are masked in every display form."""

    argv: tuple[str, ...]
    env_set: tuple[tuple[str, str], ...] = ()
    env_unset: tuple[str, ...] = ()
    secrets: tuple[str, ...] = field(default=(), repr=False)

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """The child's whole environment: ``base`` minus ``env_unset``, plus ``env_set``."""
        env = {k: v for k, v in base.items() if k not in self.env_unset}
        env.update(self.env_set)
        return env

    def mask(self, text: str) -> str:
        return mask_secrets(text, self.secrets)

    def display_argv(self) -> list[str]:
        return [self.mask(a) for a in self.argv]

    def display_env(self) -> dict[str, str]:
        return {k: self.mask(v) for k, v in self.env_set}

    def shell_line(self) -> str:
        """One line a user could paste into a shell (key masked)."""
        parts = [f"{k}={shlex.quote(v)}" for k, v in self.display_env().items()]
        if self.env_unset:
            parts = ["env", *(f"-u {shlex.quote(k)}" for k in self.env_unset), *parts]
        return " ".join([*parts, *(shlex.quote(a) for a in self.display_argv())])

    def __repr__(self) -> str:
        return (
            f"LaunchCommand(argv={self.display_argv()!r}, env_set={self.display_env()!r}, "
            f"env_unset={list(self.env_unset)!r})"
        )

    __str__ = __repr__


def mask_secrets(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret replaced by ``***``, longest first (a key list before its keys)."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def _pick(binary: BinaryFlags | None, spellings: Sequence[str]) -> str | None:
    """The first spelling this binary knows; the first of all when the binary is unknown."""
    if binary is None:
        return spellings[0]
    return next((s for s in spellings if binary.has(s)), None)


def _flag(binary: BinaryFlags | None, key: str, on: bool = True) -> str:
    f = BY_KEY[key]
    spellings = f.spellings if on else f.neg
    chosen = _pick(binary, spellings)
    if chosen is None:
        assert binary is not None
        raise LaunchError(f"{binary.describe()} has no {spellings[-1]} flag ({spellings[0]})")
    return chosen


def _load_mode_args(mode: str, binary: BinaryFlags | None) -> list[str]:
    if binary is None or binary.has("-lm") or binary.has("--load-mode"):
        return [_flag(binary, "load_mode"), mode]
    # Builds from before --load-mode: mmap is on by default and --mlock adds locking.
    wanted = {
        "auto": [],
        "mmap": [],
        "none": ["--no-mmap"],
        "mmap+mlock": ["--mlock"],
        "mlock": ["--no-mmap", "--mlock"],
    }.get(mode)
    if wanted is None or not all(binary.has(f) for f in wanted):
        raise LaunchError(
            f"{binary.describe()} has no --load-mode flag, so load mode {mode!r} cannot be set"
        )
    return wanted


def _flash_attn_args(value: str, binary: BinaryFlags | None) -> list[str]:
    flag = _flag(binary, "flash_attn")
    if binary is not None and binary.values_of(flag) == 0:
        # An older build where -fa is a switch: on is the switch, off/auto its absence.
        return [flag] if value == "on" else []
    return [flag, value]


def api_key_transport(spec: LaunchSpec, binary: BinaryFlags | None) -> str:
    """How the key reaches the server: ``env`` (LLAMA_API_KEY), ``file`` or ``none``.

    ``file`` means the binary does not read LLAMA_API_KEY but has ``--api-key-file``: the
    caller writes the key to a private file and passes its path to :func:`build_command`.
    """
    if not spec.api_key:
        return "none"
    if binary is None or not binary.env_vars or API_KEY_ENV in binary.env_vars:
        return "env"
    if binary.has("--api-key-file"):
        return "file"
    raise LaunchError(
        f"{binary.describe()} reads the API key only from its command line, where any user "
        "could see it in ps; use a build that knows LLAMA_API_KEY or --api-key-file"
    )


def build_command(
    spec: LaunchSpec,
    binary_path: str,
    binary: BinaryFlags | None = None,
    *,
    key_file: str | None = None,
) -> LaunchCommand:
    """The argv and environment for ``spec`` on this binary; see the module docstring.

    ``binary`` (its probed flags) maps each flag to the spelling the build knows and refuses
    flags it lacks; ``None`` composes the current llama-server spellings unchecked.
    ``key_file``: the private file holding the key when :func:`api_key_transport` says ``file``.
    """
    argv = [binary_path, *_launch_argv(spec, binary), *flags_argv(spec.args, binary)]
    if spec.api_key_file is not None:
        argv += [_flag(binary, "api_key_file"), spec.api_key_file]
    # CUDA_DEVICE_ORDER is the user's: lltui numbers CUDA devices (fit's plan, -ts, -dev CUDAn,
    # the monitor's CUDA index) as CUDA does in the environment the server inherits, so a
    # value set here alone would move the server's devices away from the plan on a mixed rig
    env_set: dict[str, str] = {}
    env_unset: list[str] = []
    argv += _pass_secrets(spec, binary, key_file, env_set, env_unset)
    _pass_environment(spec, env_set)
    env_unset = [n for n in env_unset if n not in env_set]
    return LaunchCommand(
        argv=tuple(argv),
        env_set=tuple(env_set.items()),
        env_unset=tuple(env_unset),
        secrets=spec.secrets,
    )


def _launch_argv(spec: LaunchSpec, binary: BinaryFlags | None) -> list[str]:
    """The flags the launcher sets itself: the log level first (placement lines need it),
    the model, the address, /metrics."""
    f = lambda key: _flag(binary, key)  # noqa: E731
    argv = [f("log_verbosity"), str(spec.log_verbosity)]
    if spec.models_preset is not None:
        if binary is not None and not binary.has(ROUTER_PRESET_FLAG):
            raise LaunchError(f"{binary.describe()} has no router mode ({ROUTER_PRESET_FLAG})")
        argv += [ROUTER_PRESET_FLAG, spec.models_preset]
    else:
        argv += [f("model_path"), first_split_part(spec.model)]  # (any part may be given)
    argv += [f("host"), spec.host, f("port"), str(spec.port)]
    if spec.metrics:
        argv.append(f("metrics"))
    return argv


def flags_argv(args: LlamaArgs, binary: BinaryFlags | None = None) -> list[str]:
    """The command line's flags in the order given, each spelled as this binary spells it
    (``--load-mode none`` or ``--no-mmap``; ``-fa`` as a switch on old builds), values as
    given; a flag the binary lacks (or, without one, no build lltui knows) is refused in
    one line, with what to write instead where lltui knows it."""
    argv: list[str] = []
    for g in args.given_args:
        f = BY_KEY.get(g.key) if g.key is not None else None
        if f is not None and f.launch_own:
            continue  # the launcher's own: written by _launch_argv
        if f is None:
            _check_unmodelled(g.flag, binary)
            argv += g.tokens
        elif f.key == "load_mode":
            argv += _load_mode_args(args.load_mode, binary)
        elif f.key == "flash_attn":
            argv += _flash_attn_args(str(f.parse(g.flag, g.values[0])) if f.parse else "on", binary)
        else:
            argv += [_flag(binary, f.key, g.on), *g.values]
    return argv


def _check_unmodelled(raw: str, binary: BinaryFlags | None) -> None:
    """A flag lltui does not read: the binary must know it (its --help decides, else the
    pinned table)."""
    token = canonical(raw)
    if binary is not None and is_flag_token(token) and not binary.has(token):
        shown, hint = raw, ""
        if "=" in token:
            name = token.split("=", 1)[0]
            hint = f" (write it as {name} VALUE)"
            if is_secret(name):  # (never a key or a token, even in an error)
                shown = f"{name}=..."
        elif token in REMOVED:
            hint = f" ({REMOVED[token]})"
        elif near := closest_flag(token, binary):
            hint = f"; did you mean {near}?"
        raise LaunchError(f"{binary.describe()} has no {shown} flag{hint}")
    if arity_of(token, binary) is None:
        raise LaunchError(unknown_flag_message(raw, binary))


def _pass_secrets(
    spec: LaunchSpec,
    binary: BinaryFlags | None,
    key_file: str | None,
    env_set: dict[str, str],
    env_unset: list[str],
) -> list[str]:
    """Secrets go in variables (``ps`` shows argv) or a private file; the flags that name it."""
    argv: list[str] = []
    transport = api_key_transport(spec, binary)
    if transport == "env":
        env_set[API_KEY_ENV] = spec.api_key or ""
    elif transport == "file":
        if key_file is None:
            raise LaunchError("this llama-server needs the API key in a file; none was given", 1)
        argv += [_flag(binary, "api_key_file"), key_file]
    if transport != "env":
        env_unset.append(API_KEY_ENV)  # an inherited key would lock lltui out of /metrics
    if spec.hf_token:
        env_set[BY_KEY["hf_token"].secret_env or ""] = spec.hf_token
    return argv


def _pass_environment(spec: LaunchSpec, env_set: dict[str, str]) -> None:
    """The variables the spec sets. GGML_CUDA_P2P exported by the user is theirs: the child
    inherits it and a dry run shows it."""
    if spec.visible_gpus:
        env_set["CUDA_VISIBLE_DEVICES"] = ",".join(spec.visible_gpus)
    env_set.update(spec.nccl_env)
    if spec.cuda_p2p:
        env_set[P2P_ENV] = "1"
    for name, value in spec.env:
        if name in SECRET_ENV:
            continue  # secrets go through their own fields, masked
        env_set[name] = value


def relevant_inherited_env(environ: Mapping[str, str], command: LaunchCommand) -> dict[str, str]:
    """Inherited variables that reach llama-server and change what it does (masked)."""
    own = {k for k, _ in command.env_set} | set(command.env_unset)
    out = {}
    for name in sorted(environ):
        if name in own or not (name.startswith(RELEVANT_ENV_PREFIXES) or name in SECRET_ENV):
            continue
        out[name] = MASK if name in SECRET_ENV else command.mask(environ[name])
    return out
