"""What to launch: a llama-server command line and environment, built from a frozen spec.

A :class:`LaunchSpec` holds the settings lltui understands (model, split, context, KV types,
batch sizes, RPC hosts, address, API key, environment) plus any other llama-server flags as
they were typed. :func:`build_command` turns it into the exact argv and environment for one
binary, spelling each flag the way that binary does (``--load-mode none`` or ``--no-mmap``),
and refusing, in one line, a flag the binary lacks.

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

from lltui.core.llama import flag_values
from lltui.core.llama.address import DEFAULT_HOST, AddressError, check_hostport, server_url
from lltui.core.llama.flag_table import (
    BY_KEY,
    REMOVED,
    SECRET_ENV,
    SECRET_FIELDS,
    UNKNOWN_ARITY,
    BinaryFlags,
    arity_of,
    canonical,
    is_flag_token,
    unknown_flag_message,
)
from lltui.core.llama.flag_values import KV_CACHE_TYPES, LOAD_MODES
from lltui.core.llama.multigpu import MultiGPUConfig, SplitMode
from lltui.core.llama.spec_flags import SPEC_FLAGS, SPELLING_TO_FIELD

DEFAULT_PORT = 8080
# Level 4 is where llama.cpp prints device, layer and buffer lines; the default (3) hides them.
PLACEMENT_LOG_VERBOSITY = 4
MASK = "***"

FLASH_ATTN_VALUES: tuple[str, ...] = flag_values.FLASH_ATTN_MODES

API_KEY_ENV = "LLAMA_API_KEY"
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


# --- the spec ----------------------------------------------------------------------------


def _pairs(
    value: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    return tuple((str(k), str(v)) for k, v in items)


@dataclass(frozen=True)
class LaunchSpec:
    """One llama-server launch. ``None`` means "llama-server's own default": the flag is left out.

    ``n_gpu_layers``: a count, or -1 for ``auto``, -2 for ``all``. ``n_parallel``: slots, or -1
    for auto. ``tensor_split``: proportions as given (``(3, 1)``), not necessarily summing to 1.
    ``extra_args``: other llama-server flags, passed on in order after a check against the binary.
    ``visible_gpus``: GPU UUIDs (``GPU-...``) or indices for ``CUDA_VISIBLE_DEVICES``.
    """

    model: str
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    ctx_size: int | None = None
    n_parallel: int | None = None
    n_gpu_layers: int | None = None
    split_mode: SplitMode | None = None
    main_gpu: int | None = None
    tensor_split: tuple[float, ...] | None = None
    devices: tuple[str, ...] = ()
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    flash_attn: str | None = None
    batch_size: int | None = None
    ubatch_size: int | None = None
    load_mode: str | None = None
    rpc: tuple[str, ...] = ()
    api_key: str | None = field(default=None, repr=False)
    api_key_file: str | None = None
    hf_token: str | None = field(default=None, repr=False)
    metrics: bool = True  # /metrics feeds tokens/s; it costs nothing when unused
    log_verbosity: int = PLACEMENT_LOG_VERBOSITY
    extra_args: tuple[str, ...] = ()
    visible_gpus: tuple[str, ...] = ()
    nccl_env: tuple[tuple[str, str], ...] = ()
    cuda_p2p: bool = False
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        # checked and normalised in steps; each raises LaunchError with one line
        self._check_address()
        self._check_counts()
        self._normalise_split()
        self._normalise_modes()
        self._normalise_lists()
        self._check_secrets()
        self._normalise_environment()

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)

    def _check_address(self) -> None:
        if not isinstance(self.model, str) or not self.model.strip():
            raise LaunchError("no model given: pass MODEL.gguf (or -m MODEL.gguf)")
        if not isinstance(self.host, str) or not self.host.strip():
            raise LaunchError("--host needs an address")
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise LaunchError(f"--port must be a whole number, got {self.port!r}")
        if not 0 <= self.port <= 65535:
            raise LaunchError(f"--port must be between 0 and 65535, got {self.port}")

    def _check_counts(self) -> None:
        for name in ("ctx_size", "batch_size", "ubatch_size", "main_gpu"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise LaunchError(f"{name} must be a whole number, got {value!r}")
            if value is not None and value < 0:
                raise LaunchError(f"{name} must not be negative, got {value}")
        for name in ("batch_size", "ubatch_size"):
            if getattr(self, name) == 0:
                raise LaunchError(f"{name} must be at least 1")
        if self.n_parallel is not None and (self.n_parallel == 0 or self.n_parallel < -1):
            raise LaunchError(f"n_parallel must be >= 1 (or -1 for auto), got {self.n_parallel}")
        if self.n_gpu_layers is not None and self.n_gpu_layers < -2:
            raise LaunchError(
                f"n_gpu_layers must be >= 0, -1 (auto) or -2 (all), got {self.n_gpu_layers}"
            )
        if self.log_verbosity < 0:
            raise LaunchError(f"log verbosity must be >= 0, got {self.log_verbosity}")

    def _normalise_split(self) -> None:
        if self.split_mode is not None:
            try:
                self._set("split_mode", SplitMode.parse(self.split_mode))
            except ValueError as exc:
                raise LaunchError(str(exc)) from None
        if self.tensor_split is not None:
            try:
                split = tuple(float(x) for x in self.tensor_split)
            except (TypeError, ValueError):
                raise LaunchError(
                    f"tensor_split must be numbers, got {self.tensor_split!r}"
                ) from None
            if not split or any(x < 0 for x in split) or sum(split) <= 0:
                raise LaunchError(
                    f"tensor_split needs non-negative proportions, not all zero: {list(split)}"
                )
            try:
                flag_values.check_proportions("tensor_split", split)
            except ValueError as exc:
                raise LaunchError(str(exc)) from None
            self._set("tensor_split", split)
        n_split = len(self.tensor_split) if self.tensor_split is not None else None
        if self.main_gpu is not None and n_split is not None and self.main_gpu >= n_split:
            raise LaunchError(
                f"main_gpu {self.main_gpu} is not one of the {n_split} device(s) in tensor_split"
            )

    def _normalise_modes(self) -> None:
        for name in ("cache_type_k", "cache_type_v"):
            value = getattr(self, name)
            if value is not None:
                value = str(value).lower()
                if value not in KV_CACHE_TYPES:
                    raise LaunchError(
                        f"{name} {value!r} is not one of: {', '.join(KV_CACHE_TYPES)}"
                    )
                self._set(name, value)
        if self.flash_attn is not None:
            value = str(self.flash_attn).lower()
            if value not in FLASH_ATTN_VALUES:
                raise LaunchError(
                    f"flash_attn must be one of on, off, auto; got {self.flash_attn!r}"
                )
            self._set("flash_attn", value)
        if self.load_mode is not None and self.load_mode not in LOAD_MODES:
            raise LaunchError(
                f"load_mode must be one of {', '.join(LOAD_MODES)}; got {self.load_mode!r}"
            )

    def _normalise_lists(self) -> None:
        self._set("devices", tuple(str(d) for d in self.devices))
        rpc = tuple(str(h).strip() for h in self.rpc)
        for hostport in rpc:
            try:
                check_hostport(hostport)
            except AddressError as exc:
                raise LaunchError(str(exc)) from None
        self._set("rpc", rpc)
        self._set("extra_args", tuple(str(a) for a in self.extra_args))
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

    @property
    def multigpu(self) -> MultiGPUConfig:
        """These split settings as the seed API's :class:`MultiGPUConfig`.

        ``n_gpu`` is what the spec implies (tensor_split entries, main_gpu, RPC hosts); an auto
        ``-np`` reads as 1 and ``-ngl auto/all`` as ``None`` (all that fit).
        """
        n_gpu = max(
            len(self.tensor_split or ()),
            (self.main_gpu or 0) + 1,
            len(self.devices),
            len(self.visible_gpus) + len(self.rpc),
            1,
        )
        split = None
        if self.tensor_split is not None and len(self.tensor_split) == n_gpu and n_gpu > 1:
            total = sum(self.tensor_split)
            split = tuple(x / total for x in self.tensor_split)
        mode = self.split_mode or SplitMode.LAYER
        if mode is SplitMode.NONE:
            split = None
        return MultiGPUConfig(
            n_gpu=n_gpu,
            split_mode=mode,
            main_gpu=self.main_gpu or 0,
            tensor_split=split,
            gpu_layers=self.n_gpu_layers
            if self.n_gpu_layers is not None and self.n_gpu_layers >= 0
            else None,
            n_parallel=self.n_parallel if self.n_parallel and self.n_parallel > 0 else 1,
        )

    @classmethod
    def from_multigpu(cls, model: str, config: MultiGPUConfig, **kwargs: Any) -> LaunchSpec:
        """A spec whose split settings come from a :class:`MultiGPUConfig`; ``-np`` is always
        passed so one slot means one slot (llama-server's own default is 4)."""
        return cls(
            model=model,
            n_gpu_layers=config.gpu_layers,
            split_mode=config.split_mode,
            main_gpu=config.main_gpu if config.main_gpu else None,
            tensor_split=tuple(config.tensor_split)
            if config.tensor_split is not None and config.n_gpu > 1
            else None,
            n_parallel=config.n_parallel,
            **kwargs,
        )


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


def _flag(binary: BinaryFlags | None, name: str) -> str:
    spellings, _ = SPEC_FLAGS[name]
    chosen = _pick(binary, spellings)
    if chosen is None:
        assert binary is not None
        raise LaunchError(f"{binary.describe()} has no {spellings[-1]} flag ({spellings[0]})")
    return chosen


def _fmt_number(x: float) -> str:
    return flag_values.number_text(x)


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
    argv = [binary_path, *_settings_argv(spec, binary)]
    env_set: dict[str, str] = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    env_unset: list[str] = []
    argv += _pass_secrets(spec, binary, key_file, env_set, env_unset)
    _check_extra(spec.extra_args, binary)
    argv += spec.extra_args
    _pass_environment(spec, env_set)
    env_unset = [n for n in env_unset if n not in env_set]
    return LaunchCommand(
        argv=tuple(argv),
        env_set=tuple(env_set.items()),
        env_unset=tuple(env_unset),
        secrets=spec.secrets,
    )


def _settings_argv(spec: LaunchSpec, binary: BinaryFlags | None) -> list[str]:
    """The flags of the settings the spec holds, each spelled as this binary spells it."""
    f = lambda name: _flag(binary, name)  # noqa: E731
    argv: list[str] = [f("log_verbosity"), str(spec.log_verbosity)]
    argv += [f("model"), spec.model, f("host"), spec.host, f("port"), str(spec.port)]
    if spec.metrics:
        argv.append(f("metrics"))
    if spec.ctx_size is not None:
        argv += [f("ctx_size"), str(spec.ctx_size)]
    if spec.n_parallel is not None:
        argv += [f("n_parallel"), str(spec.n_parallel)]
    if spec.n_gpu_layers is not None:
        words = {-1: "auto", -2: "all"}
        argv += [f("n_gpu_layers"), words.get(spec.n_gpu_layers, str(spec.n_gpu_layers))]
    if spec.split_mode is not None:
        argv += [f("split_mode"), spec.split_mode.flag]
    if spec.tensor_split is not None:
        argv += [f("tensor_split"), ",".join(_fmt_number(x) for x in spec.tensor_split)]
    if spec.main_gpu is not None:
        argv += [f("main_gpu"), str(spec.main_gpu)]
    if spec.devices:
        argv += [f("devices"), ",".join(spec.devices)]
    if spec.cache_type_k is not None:
        argv += [f("cache_type_k"), spec.cache_type_k]
    if spec.cache_type_v is not None:
        argv += [f("cache_type_v"), spec.cache_type_v]
    if spec.flash_attn is not None:
        argv += _flash_attn_args(spec.flash_attn, binary)
    if spec.batch_size is not None:
        argv += [f("batch_size"), str(spec.batch_size)]
    if spec.ubatch_size is not None:
        argv += [f("ubatch_size"), str(spec.ubatch_size)]
    if spec.load_mode is not None:
        argv += _load_mode_args(spec.load_mode, binary)
    if spec.rpc:
        argv += [f("rpc"), ",".join(spec.rpc)]
    if spec.api_key_file is not None:
        argv += [f("api_key_file"), spec.api_key_file]
    return argv


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


def _check_extra(extra: Sequence[str], binary: BinaryFlags | None) -> None:
    """Refuse extra flags the build lacks (the binary's --help decides, else the pinned
    table), values llama-server would refuse or that mean nothing, and flags the spec sets
    itself (llama-server would take the last of two and warn)."""
    from lltui.core.llama.args import parse_llama_args

    i = 0
    while i < len(extra):
        raw = extra[i]
        token = canonical(raw)
        if token in SPELLING_TO_FIELD:
            raise LaunchError(f"{raw} is a launch setting: give it once, not among the extra flags")
        if binary is not None and is_flag_token(token) and not binary.has(token):
            hint = ""
            if "=" in token:
                hint = f" (write it as {token.split('=', 1)[0]} VALUE)"
            elif token in REMOVED:
                hint = f" ({REMOVED[token]})"
            raise LaunchError(f"{binary.describe()} has no {raw} flag{hint}")
        n = arity_of(token, binary)
        if n is None:
            raise LaunchError(unknown_flag_message(raw, binary))
        if n == UNKNOWN_ARITY:
            n = 1 if i + 1 < len(extra) and not is_flag_token(extra[i + 1]) else 0
        i += 1 + n
    try:
        parse_llama_args(extra, binary=binary)
    except ValueError as exc:
        raise LaunchError(str(exc)) from None


def relevant_inherited_env(environ: Mapping[str, str], command: LaunchCommand) -> dict[str, str]:
    """Inherited variables that reach llama-server and change what it does (masked)."""
    own = {k for k, _ in command.env_set} | set(command.env_unset)
    out = {}
    for name in sorted(environ):
        if name in own or not (name.startswith(RELEVANT_ENV_PREFIXES) or name in SECRET_ENV):
            continue
        out[name] = MASK if name in SECRET_ENV else command.mask(environ[name])
    return out
