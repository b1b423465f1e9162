"""One llama-server command line, parsed once: :func:`parse_llama_args` -> :class:`LlamaArgs`.

The flags come from :mod:`lltui.core.cmdline.flag_table`. Settings lltui models become typed
fields with llama-server's defaults (what fit and quant read); :attr:`LlamaArgs.given` says
which of them the user set, and :attr:`LlamaArgs.given_args` keeps every flag as given, in
order (what launch passes on). Every other flag the build knows is accepted with its values
skipped; an unknown or removed flag, a missing value or a value that means nothing is one
line naming the flag (ValueError). :meth:`LlamaArgs.to_argv` and :func:`spell` write flags
back with the table's spellings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lltui.core.cmdline import flag_values as v
from lltui.core.cmdline.flag_table import (
    BY_KEY,
    BY_SPELLING,
    FLAGS,
    MASK,
    ROPE_SCALING,
    SECRET_FIELDS,
    UNKNOWN_ARITY,
    BinaryFlags,
    Flag,
    arity_of,
    canonical,
    is_flag_token,
    unknown_flag_message,
)
from lltui.core.cmdline.flag_values import NGL_ALL, NGL_AUTO, NP_AUTO
from lltui.core.llama.limits import MAX_LAYERS

# Regexes llama.cpp builds for --cpu-moe / --n-cpu-moe / --n-cpu-ffn (common/common.h).
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."


# settings whose flags add up rather than replace one another (-ot, --rpc, --lora, ...)
ADDING_KEYS: frozenset[str] = frozenset(
    {
        "overrides",
        "cpu_moe",
        "n_cpu_moe",
        "n_cpu_ffn",
        "rpc",
        "spec_types",
        "draft_overrides",
        "draft_cpu_moe",
        "draft_n_cpu_moe",
        "lora",
        "lora_scaled",
    }
)


@dataclass(frozen=True, slots=True)
class TensorOverride:
    """One ``-ot PATTERN=BUFT`` entry (or one made by --cpu-moe/--n-cpu-moe/--n-cpu-ffn).

    ``pattern`` is a regular expression searched in the tensor name (ECMAScript syntax in
    llama.cpp; the patterns people write read the same in Python); ``buft`` a buffer type
    name such as ``CPU`` or ``CUDA1``."""

    pattern: str
    buft: str


@dataclass(frozen=True, slots=True)
class GivenFlag:
    """One flag as the user gave it: its spelling, its values, and the setting it is for
    (``None`` for a flag lltui accepts and does not read)."""

    flag: str
    values: tuple[str, ...] = ()
    key: str | None = None
    on: bool = True  # False for the "off" spelling of an on/off pair (-no-kvu)

    @property
    def tokens(self) -> tuple[str, ...]:
        return (self.flag, *self.values)


@dataclass(frozen=True, slots=True)
class LlamaArgs:
    """The settings of one llama-server command line, with llama-server's defaults."""

    n_ctx: int = 0  # -c; 0: the model's training context (fit may lower it)
    n_parallel: int = NP_AUTO  # -np; -1: auto (4 slots, unified KV)
    kv_unified: bool | None = None  # -kvu/-no-kvu; None: on when -np is auto
    kv_unified_per_slot: int = 0
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"  # on, off, auto
    n_batch: int = 2048
    n_ubatch: int = 512
    n_gpu_layers: int = NGL_AUTO  # N, NGL_AUTO or NGL_ALL
    split_mode: str = "layer"
    tensor_split: tuple[float, ...] = ()
    main_gpu: int = 0
    devices: tuple[str, ...] | None = None  # -dev; None: all, (): none
    overrides: tuple[TensorOverride, ...] = ()  # -ot, --cpu-moe, --n-cpu-moe, in order
    kv_offload: bool = True
    swa_full: bool = False
    load_mode: str = "auto"
    repack: bool = True
    host_buffer: bool = True  # --no-host turns it off
    op_offload: bool = True
    rpc: tuple[str, ...] = ()  # HOST:PORT of each --rpc server, in order
    fit: bool = True
    fit_target_mib: tuple[int, ...] = (1024,)
    fit_ctx: int = 4096
    n_threads: int = -1  # -t; below 1: llama.cpp's default (the physical cores)
    n_threads_batch: int = -1  # -tb; below 1: as -t
    embedding: bool = False
    model_path: str | None = None  # -m
    draft_model: str | None = None  # -md: a second model and context (fit counts it)
    draft_hf_repo: str | None = None  # -hfd OWNER/REPO[:QUANT]: the draft downloaded
    draft_n_gpu_layers: int = NGL_AUTO  # -ngld
    spec_types: tuple[str, ...] = ()  # --spec-type, every one given (llama-server adds them up)
    spec_draft_n_max: int = 3  # --spec-draft-n-max: tokens drafted per step
    draft_devices: tuple[str, ...] | None = None  # -devd; None: the main model's
    draft_type_k: str = "f16"  # -ctkd
    draft_type_v: str = "f16"  # -ctvd
    draft_overrides: tuple[TensorOverride, ...] = ()  # -otd, -cmoed, -ncmoed, in order
    mmproj: str | None = None  # --mmproj: the multimodal projector (fit counts it)
    mmproj_url: str | None = None  # -mmu: a projector to download (then no -hf projector)
    mmproj_auto: bool = True  # -hf's repository's projector loaded too (--no-mmproj: not)
    mmproj_offload: bool = True  # --no-mmproj-offload keeps it on the host
    mmproj_device: str | None = None  # -mmdev; None: the first -dev, else the first GPU
    lora: tuple[str, ...] = ()  # --lora and --lora-scaled adapters, in order
    pooling: str | None = None  # --pooling; None: the model's own
    reranking: bool = False  # --rerank: embeddings with rank pooling
    host: str | None = None  # --host, --port, ...: what lltui's launcher sets itself
    port: int | None = None
    api_key: str | None = field(default=None, repr=False)
    hf_token: str | None = field(default=None, repr=False)
    api_key_file: str | None = None
    log_verbosity: int | None = None
    metrics: bool = False
    memory_args: tuple[str, ...] = ()  # the memory-relevant arguments as given, in order
    ignored: tuple[str, ...] = field(default=(), compare=False)  # accepted, changing nothing
    given: frozenset[str] = field(default=frozenset(), compare=False)  # settings set
    given_args: tuple[GivenFlag, ...] = field(default=(), compare=False, repr=False)
    from_env: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)

    @property
    def n_parallel_resolved(self) -> int:
        """Slots llama-server will create: -np, or 4 when it is auto."""
        return 4 if self.n_parallel < 0 else self.n_parallel

    @property
    def kv_unified_resolved(self) -> bool:
        """llama-server turns the unified KV cache on when -np is auto, whatever -kvu says."""
        if self.n_parallel < 0:
            return True
        return bool(self.kv_unified)

    @property
    def rope_scaling(self) -> tuple[str, ...]:
        """The RoPE scaling flags given, with their values: a context past the trained one
        is then what was asked for."""
        return tuple(
            w for g in self.given_args if canonical(g.flag) in ROPE_SCALING for w in g.tokens
        )

    @property
    def use_mmap(self) -> bool:
        """Weights mapped from the file, as asked: auto maps them but beside an integrated GPU
        (:func:`lltui.core.memory.placement.maps_weights` says where)."""
        return self.load_mode in ("auto", "mmap", "mmap+mlock")

    def to_argv(self, *, masked: bool = False) -> list[str]:
        """The flags given on the command line, in order, each in the table's spelling;
        ``masked``: a secret's value written as ``***`` (to be shown)."""
        out: list[str] = []
        for g in self.given_args:
            secret = masked and g.key in SECRET_FIELDS
            out += [_spelling(g), *((MASK,) * len(g.values) if secret else g.values)]
        return out

    def then(self, later: LlamaArgs) -> LlamaArgs:
        """These settings with ``later``'s command line after this one's, as llama-server
        reads two lists of flags one after the other (a later value wins; ``--rpc``, ``-ot``
        and the like add up). The environment of both applies first."""
        env = dict(self.from_env)
        env.update(later.from_env)
        # a setting given again replaces the earlier flag (llama-server takes the last)
        replaced = {g.key for g in later.given_args if g.key and g.key not in ADDING_KEYS}
        kept = tuple(g for g in self.given_args if g.key is None or g.key not in replaced)
        return _fold(env, (*kept, *later.given_args))

    def one_each(self) -> LlamaArgs:
        """These settings as llama-server's router holds one layer of them (its own command
        line, a preset section): one value an option, the last given, for the flags that add
        up on a server's own command line (``-ot A -ot B``) too."""
        last = {g.key: g for g in self.given_args if g.key in ADDING_KEYS}
        kept = tuple(g for g in self.given_args if g.key not in last or last[g.key] is g)
        return _fold(dict(self.from_env), kept)

    def without(self, keys: frozenset[str] | set[str]) -> LlamaArgs:
        """These settings with the flags for ``keys`` taken out (back to llama-server's
        defaults): what a launcher sets itself is not passed on twice."""
        env = {n: val for n, val in self.from_env if _env_key(n) not in keys}
        return _fold(env, tuple(g for g in self.given_args if g.key not in keys))

    def model_of(self, word: str | None) -> str | None:
        """The model a command names: its word (``lltui fit MODEL``), else ``-m`` (or
        LLAMA_ARG_MODEL, which a word overrides). ValueError where a word and ``-m`` both
        name one: one of them would be dropped without a word."""
        if word is not None and any(g.key == "model_path" for g in self.given_args):
            raise ValueError("the model is given twice (MODEL and -m)")
        return word or self.model_path

    def with_model(self, path: str) -> LlamaArgs:
        """These settings for the model ``path`` (``-m`` first, in place of any given)."""
        rest = tuple(g for g in self.given_args if g.key != "model_path")
        first = GivenFlag(BY_KEY["model_path"].spellings[0], (path,), "model_path")
        return _fold(dict(self.from_env), (first, *rest))


def _spelling(g: GivenFlag) -> str:
    if g.key is None:
        return canonical(g.flag)
    f = BY_KEY[g.key]
    return f.spellings[0] if g.on else f.neg[0]


# --- parsing -----------------------------------------------------------------------------


class _Builder:
    """The settings being read, in llama-server's order: environment first, then flags."""

    def __init__(self) -> None:
        self.fields: dict[str, Any] = {}  # field -> value, typed by the flag's parser
        self.overrides: list[TensorOverride] = []
        self.n_overrides = 0  # as llama.cpp counts them, before lltui drops impossible layers
        self.rpc: list[str] = []
        self.lora: list[str] = []
        self.draft_overrides: list[TensorOverride] = []
        self.memory: list[str] = []
        self.ignored: list[str] = []
        self.given: set[str] = set()
        self.given_args: list[GivenFlag] = []
        self.from_env: list[tuple[str, str]] = []

    def apply(self, f: Flag, on: bool, flag: str, values: Sequence[str]) -> None:
        """Read one flag (``flag`` as typed, for messages) into the settings."""
        self.given.add(f.key)
        if f.arity == 0:
            value: object = f.const if on else not f.const
        else:
            assert f.parse is not None
            value = f.parse(flag, values[0])
        if f.key == "overrides":
            self._add_overrides(flag, _tensor_overrides(flag, values[0]))
        elif f.key == "cpu_moe":
            self._add_overrides(flag, [TensorOverride(FFN_EXPS_REGEX, "CPU")])
        elif f.key in ("n_cpu_moe", "n_cpu_ffn"):
            assert isinstance(value, int)
            regex = FFN_EXPS_REGEX if f.key == "n_cpu_moe" else FFN_DENSE_REGEX
            self._add_overrides(flag, _ffn_overrides(value, regex), counted=value)
        elif f.key == "rpc":
            assert isinstance(value, tuple)
            self.rpc.extend(value)
        elif f.key == "spec_types":
            assert isinstance(value, tuple)
            self.fields["spec_types"] = (*self.fields.get("spec_types", ()), *value)
        elif f.key == "draft_overrides":
            self.draft_overrides.extend(_tensor_overrides(flag, values[0]))
        elif f.key == "draft_cpu_moe":
            self.draft_overrides.append(TensorOverride(FFN_EXPS_REGEX, "CPU"))
        elif f.key == "draft_n_cpu_moe":
            assert isinstance(value, int)
            self.draft_overrides.extend(_ffn_overrides(value, FFN_EXPS_REGEX))
        elif f.key in ("lora", "lora_scaled"):
            assert isinstance(value, tuple)
            self.lora.extend(value)
            self.given.add("lora")
        elif f.key == "reranking":
            self.fields["reranking"] = value
            self.fields["embedding"] = True
            self.fields["pooling"] = "rank"
        else:
            self.fields[f.key] = value

    def _add_overrides(
        self, flag: str, items: list[TensorOverride], counted: int | None = None
    ) -> None:
        self.n_overrides += len(items) if counted is None else counted
        if self.n_overrides > v.MAX_OVERRIDES:
            raise ValueError(
                f"{flag}: too many tensor overrides ({self.n_overrides}); llama.cpp holds at "
                f"most {v.MAX_OVERRIDES}"
            )
        self.overrides.extend(items)

    def build(self) -> LlamaArgs:
        return replace(
            LlamaArgs(),
            overrides=tuple(self.overrides),
            rpc=tuple(self.rpc),
            lora=tuple(self.lora),
            draft_overrides=tuple(self.draft_overrides),
            memory_args=tuple(self.memory),
            ignored=tuple(self.ignored),
            given=frozenset(self.given),
            given_args=tuple(self.given_args),
            from_env=tuple(self.from_env),
            **{k: val for k, val in self.fields.items() if k in _FIELDS},
        )


_FIELDS = frozenset(LlamaArgs.__dataclass_fields__)


def _tensor_overrides(flag: str, value: str) -> list[TensorOverride]:
    out = []
    for item in value.split(","):
        pattern, sep, buft = item.partition("=")
        if not sep or not pattern or not buft:
            raise ValueError(f"{flag}: expected <tensor name pattern>=<buffer type>, got {item!r}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{flag}: bad pattern {pattern!r}: {exc}") from None
        out.append(TensorOverride(pattern, buft))
    return out


def cpu_moe_overrides(n: int) -> list[TensorOverride]:
    """The overrides ``--n-cpu-moe n`` makes: the experts of the first n layers on the CPU."""
    return _ffn_overrides(n, FFN_EXPS_REGEX)


def _ffn_overrides(n: int, ffn_regex: str) -> list[TensorOverride]:
    # layers past llama.cpp's last one do not exist: their overrides would match nothing
    return [TensorOverride(f"blk\\.{i}{ffn_regex}", "CPU") for i in range(min(n, MAX_LAYERS))]


def _apply_env(b: _Builder, env: Mapping[str, str]) -> None:
    """LLAMA_ARG_* variables, read as llama-server reads them before its command line."""
    for f in FLAGS:
        if f.env is None:
            continue
        neg_name = f.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1) if f.neg else None
        name = neg_name if neg_name is not None and neg_name in env else f.env
        if name not in env:
            continue
        value = env[name]
        where = f"{name}={value!r} (from the environment)"
        try:
            if f.arity == 0 and name == neg_name:
                b.apply(f, False, f.spellings[0], ())
            elif f.arity == 0 and f.neg:
                b.apply(f, v.on_off(f.spellings[0], value), f.spellings[0], ())
            elif f.arity == 0:
                if value not in v.TRUTHY:
                    continue  # llama-server ignores a switch variable that is not truthy
                b.apply(f, True, f.spellings[0], ())
            else:
                b.apply(f, True, f.spellings[0], (value,))
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
        b.from_env.append((name, value))


def _env_key(name: str) -> str | None:
    """The setting a LLAMA_ARG_* variable sets (its NO_ form too)."""
    for f in FLAGS:
        if f.env is not None and name in (f.env, f.env.replace("LLAMA_ARG_", "LLAMA_ARG_NO_", 1)):
            return f.key
    return None


def _fold(env: Mapping[str, str], given: Sequence[GivenFlag]) -> LlamaArgs:
    """Settings from an environment and flags already read once (values checked): the one
    way LlamaArgs are combined, so that every field agrees with ``given_args``."""
    b = _Builder()
    _apply_env(b, env)
    for g in given:
        f = BY_KEY.get(g.key) if g.key is not None else None
        if f is None:
            b.ignored.append(g.flag)
            b.given_args.append(g)
            continue
        b.apply(f, g.on, g.flag, g.values)
        b.given_args.append(g)
        if f.memory:
            b.memory.extend(g.tokens)
        else:
            b.ignored.append(g.flag)
    return b.build()


def _missing_value(raw: str, f: Flag | None) -> str:
    if f is not None and f.key == "flash_attn":
        return (
            f"{raw}: expected on, off or auto (a bare {raw} is from older llama.cpp: "
            f"write {raw} on)"
        )
    return f"{raw}: expected a value"


def parse_llama_args(
    argv: Sequence[str],
    *,
    binary: BinaryFlags | None = None,
    env: Mapping[str, str] | None = None,
    keep_unknown: bool = False,
) -> LlamaArgs:
    """Parse llama-server flags; ValueError (one line) on an unknown flag or a bad value.

    ``binary``: the flags a probed llama-server lists in its --help decide which flags
    exist (else the pinned build's table). ``env``: LLAMA_ARG_* variables, applied first as
    llama-server does (a flag on the command line wins). ``keep_unknown``: a word no build
    lltui knows of is kept in :attr:`LlamaArgs.given_args` (with the word after it when that
    does not read as a flag), for a check against the binary found later.
    """
    b = _Builder()
    if env is not None:
        _apply_env(b, env)
    i, n = 0, len(argv)
    while i < n:
        raw = argv[i]
        arg = canonical(raw)
        nargs = arity_of(arg, binary)
        hit = BY_SPELLING.get(arg)
        if nargs is None and not keep_unknown:
            raise ValueError(unknown_flag_message(raw, binary))
        if nargs is None:
            nargs = UNKNOWN_ARITY
        f, on = hit if hit is not None else (None, True)
        if f is not None:
            nargs = f.arity  # lltui reads it: the table says what its values are
        elif nargs == UNKNOWN_ARITY:
            nargs = 1 if i + 1 < n and not is_flag_token(argv[i + 1]) else 0
        if i + nargs >= n:
            raise ValueError(_missing_value(raw, f))
        values = tuple(argv[i + 1 : i + 1 + nargs])
        i += 1 + nargs
        if f is None:
            b.ignored.append(raw)
            b.given_args.append(GivenFlag(raw, values))
            continue
        b.apply(f, on, raw, values)
        b.given_args.append(GivenFlag(raw, values, f.key, on))
        if f.memory:
            b.memory.extend([raw, *values])
        else:
            b.ignored.append(raw)
    return b.build()


# --- writing flags -------------------------------------------------------------------------


def _value_text(key: str, value: object) -> str:
    if key == "n_gpu_layers" and value in (NGL_AUTO, NGL_ALL):
        return "auto" if value == NGL_AUTO else "all"
    if key == "devices" and value == ():
        return "none"
    if isinstance(value, tuple):
        return ",".join(_value_text(key, x) for x in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return v.number_text(value)
    return str(value)


def spell(key: str, value: object) -> tuple[str, ...]:
    """The flags that set ``key`` (a :class:`LlamaArgs` field, or ``cpu_moe``, ``n_cpu_moe``,
    ``n_cpu_ffn``) to ``value``, in the table's spelling: ``spell("n_gpu_layers", -2)`` ->
    ``("-ngl", "all")``, ``spell("tensor_split", (3, 1))`` -> ``("-ts", "3,1")``,
    ``spell("kv_unified", False)`` -> ``("-no-kvu",)``. The result is parsed back, so a
    value llama-server would refuse or that means nothing raises ValueError."""
    f = BY_KEY.get(key)
    if f is None:
        raise ValueError(f"no llama-server flag sets {key!r}")
    if f.arity == 0:
        if not isinstance(value, bool):
            raise ValueError(f"{f.spellings[0]}: expected True or False, got {value!r}")
        if value == f.const:
            out: tuple[str, ...] = (f.spellings[0],)
        elif f.neg:
            out = (f.neg[0],)
        else:
            return ()  # llama-server's default: no flag says it
    else:
        out = (f.spellings[0], _value_text(key, value))
    parse_llama_args(out)
    return out


def drop_flags(words: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``words`` without the flags named (each with its one value)."""
    out: list[str] = []
    rest = iter(words)
    for w in rest:
        if w in flags:
            next(rest, None)  # its value
        else:
            out.append(w)
    return out
