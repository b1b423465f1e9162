"""The settings a log ran with, recovered: a command line pasted with it, overridden by what
llama.cpp printed as it resolved them (n_ctx, n_seq_max, n_batch, flash attention, the KV
types, the layers offloaded), and the build's defaults for the rest, each named as assumed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from lltui.core.cmdline.args import LlamaArgs, parse_llama_args
from lltui.core.cmdline.flag_table import BY_KEY
from lltui.core.gguf.types import GGML_TYPES, type_from_name
from lltui.core.llama.builds import BuildRules
from lltui.core.llamalog.models import LogFacts
from lltui.core.llamalog.models import is_host_buffer as is_host_buffer  # explain's name for it
from lltui.core.memory.hparams import Hparams
from lltui.core.units import MIB

_Take = Callable[[Sequence[str], str], None]
# spellings of older builds, as the pinned parser reads them
_OLD_SPELLINGS = {
    "--no-mmap": ("-lm", "none"),
    "--mlock": ("-lm", "mmap+mlock"),
    "--mmap": ("-lm", "mmap"),
}
# flags that name the model, not a setting (the model is read from them separately)
_MODEL_FLAGS = ("-m", "--model", "-hf", "--hf-repo", "-hff", "--hf-file", "-mu", "--model-url")


@dataclass(frozen=True, slots=True)
class Recovered:
    """The settings of the logged run. ``from_log``: what the log printed and lltui took,
    ``assumed``: what it did not print (the build's default stands), ``ignored``: words of
    a pasted command line that lltui could not read."""

    args: LlamaArgs
    argv: tuple[str, ...]  # the memory flags, as llama-server spells them
    from_log: tuple[str, ...]
    assumed: tuple[str, ...]
    ignored: tuple[str, ...]
    model_ref: str | None = None  # -m / -hf of a pasted command line
    # the command line to build on (a fix): the pasted one, and what the log printed that
    # differs from the build's defaults
    command_args: LlamaArgs = field(default_factory=LlamaArgs)


def _modernise(words: Sequence[str]) -> tuple[list[str], str | None]:
    """Older spellings rewritten, the model flags taken out (their value returned)."""
    out: list[str] = []
    model = None
    i = 0
    while i < len(words):
        w = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else None
        if w in _MODEL_FLAGS and nxt is not None:
            model = model or nxt
            i += 2
            continue
        if w in _OLD_SPELLINGS:
            out += _OLD_SPELLINGS[w]
        elif w in ("-fa", "--flash-attn") and (nxt is None or nxt.startswith("-")):
            out += [w, "on"]  # older builds: a bare switch
        else:
            out.append(w)
        i += 1
    return out, model


def parse_pasted(words: Sequence[str]) -> tuple[LlamaArgs, list[str], str | None]:
    """A pasted command line read as far as it goes: a word the parser refuses (with its
    value) is dropped and named, the rest kept."""
    argv, model = _modernise(words)
    dropped: list[str] = []
    for _ in range(32):
        try:
            args = parse_llama_args(argv, keep_unknown=True)
        except ValueError as exc:
            bad = _offender(str(exc), argv)
            if bad is None:
                return LlamaArgs(), [*dropped, " ".join(argv)], model
            take = 2 if bad + 1 < len(argv) and not argv[bad + 1].startswith("-") else 1
            dropped.append(" ".join(argv[bad : bad + take]))
            argv = argv[:bad] + argv[bad + take :]
            continue
        return args, dropped + list(args.ignored), model
    return LlamaArgs(), [*dropped, " ".join(argv)], model


def _offender(message: str, argv: Sequence[str]) -> int | None:
    head = message.split(":", 1)[0].strip()
    return next((i for i, w in enumerate(argv) if head in (w, w.split("=", 1)[0])), None)


def _unrefused(words: Sequence[str], refused: Sequence[str]) -> tuple[list[str], list[str]]:
    """A pasted command line without the flags llama-server refused (each with its value):
    they never applied. The words kept, and those taken out, named."""
    kept: list[str] = []
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.split("=", 1)[0] in refused:
            take = (
                2 if "=" not in w and i + 1 < len(words) and not words[i + 1].startswith("-") else 1
            )
            out.append(" ".join(words[i : i + take]) + " (llama-server refused it)")
            i += take
            continue
        kept.append(w)
        i += 1
    return kept, out


def recover(facts: LogFacts, rules: BuildRules) -> Recovered:
    """The settings the logged run used, as far as the log says."""
    words, refused = _unrefused(facts.command, facts.refused)
    base, ignored, model = parse_pasted(words) if words else (LlamaArgs(), [], None)
    ignored = [*refused, *ignored]
    printed: list[str] = []
    plain: list[str] = []
    said: list[str] = []

    def take(flags: Sequence[str], why: str) -> None:
        try:  # a log is data: a value no llama.cpp would take is said, not taken
            parse_llama_args(list(flags))
        except ValueError as exc:
            ignored.append(f"{' '.join(flags)} ({why}: {exc})")
            return
        printed.extend(flags)
        if not _is_default(flags, rules):
            plain.extend(flags)
        said.append(f"{' '.join(flags)} ({why})")

    _context_flags(facts, take)
    _kv_flags(facts, take)
    _offload_flags(facts, take)
    if facts.threads is not None and "n_threads" not in base.given:
        t, tb = facts.threads
        take(("-t", str(t)), f"n_threads = {t}")
        if tb != t:
            take(("-tb", str(tb)), f"n_threads_batch = {tb}")
    args = base.then(parse_llama_args(printed)) if printed else base
    assumed = _assumed(args, rules, facts)
    return Recovered(
        args=args,
        argv=memory_argv(args),
        from_log=tuple(said),
        assumed=tuple(assumed),
        ignored=tuple(ignored),
        model_ref=model,
        command_args=base.then(parse_llama_args(plain)) if plain else base,
    )


PRINTED_MIB = 0.01  # a KV size is printed to this


def context_from_kv(facts: LogFacts, hp: Hparams, settings: Recovered) -> Recovered:
    """-c from the KV cache's size where the log did not print the context (a cut log, a
    wrapper such as ollama): the buffer holds ``cells`` rows of every attention layer's K
    and V, so ``cells = size / bytes per cell`` when that divides to a whole number within
    the print's rounding. Sliding-window, recurrent and MLA caches are left alone (their
    cells are not one size)."""
    if "n_ctx" in settings.args.given or hp.swa_any or any(hp.is_recurrent) or hp.mla:
        return settings
    kv = [k for k in facts.kv_sizes if not k.recurrent and k.cache is None and k.size_mib]
    if not kv:
        return settings
    line = kv[-1]
    k_type, v_type = settings.args.type_k, settings.args.type_v
    try:
        kt, vt = GGML_TYPES[type_from_name(k_type)], GGML_TYPES[type_from_name(v_type)]
    except (KeyError, ValueError):
        return settings
    per_cell = 0.0
    for il in range(hp.n_layer):
        if hp.has_kv(il):
            per_cell += hp.n_embd_k_gqa(il) * kt.type_size / kt.block_size
            per_cell += hp.n_embd_v_gqa(il) * vt.type_size / vt.block_size
    if per_cell <= 0:
        return settings
    size = line.size_mib * MIB
    cells = round(size / per_cell)
    if cells <= 0 or abs(cells * per_cell - size) > PRINTED_MIB * MIB / 2 + 1:
        return settings
    try:
        args = settings.args.then(parse_llama_args(["-c", str(cells)]))
    except ValueError:  # more cells than any context holds
        return settings
    said = f"-c {cells} (the KV buffer of {line.size_mib:.2f} MiB holds {cells} cells)"
    return replace(
        settings,
        args=args,
        argv=memory_argv(args),
        from_log=(*settings.from_log, said),
        assumed=tuple(a for a in settings.assumed if not a.startswith("-c:")),
        command_args=settings.command_args.then(parse_llama_args(["-c", str(cells)])),
    )


def memory_argv(args: LlamaArgs) -> tuple[str, ...]:
    """The memory flags of ``args``, in order, each in the flag table's spelling."""
    out: list[str] = []
    for g in args.given_args:
        f = BY_KEY.get(g.key) if g.key is not None else None
        if f is not None and f.memory:
            out += [f.spellings[0] if g.on or not f.neg else f.neg[0], *g.values]
    return tuple(out)


def _is_default(flags: Sequence[str], rules: BuildRules) -> bool:
    """A printed value that only says the build's default (left out of a command line)."""
    value = flags[1] if len(flags) > 1 else None
    return (
        (flags[0] == "-b" and value == str(rules.n_batch_default))
        or (flags[0] == "-ub" and value == "512")
        or (flags[0] in ("-ctk", "-ctv") and value == "f16")
        or (flags[0] == "-fa" and value == rules.fa_default)
        or flags[0] in ("-t", "-tb")  # (a log cannot tell -t given from llama.cpp's own count)
    )


def _context_flags(facts: LogFacts, take: _Take) -> None:
    n_ctx = facts.context_int("n_ctx")
    slots = facts.slots
    slot_unified = slots is not None and slots[2] == "true"
    if n_ctx:
        take(("-c", str(n_ctx)), f"n_ctx = {n_ctx}")
    elif slots is not None:
        total = slots[1] if slot_unified else slots[0] * slots[1]
        take(("-c", str(total)), f"n_slots = {slots[0]}, n_ctx_slot = {slots[1]}")
    seqs = _seqs(facts)
    n_seq = facts.context_int("n_seq_max") or (seqs[0] if seqs else None)
    if n_seq:
        take(("-np", str(n_seq)), f"n_seq_max = {n_seq}")
    elif slots is not None:
        take(("-np", str(slots[0])), f"n_slots = {slots[0]}")
    unified = facts.context_value("kv_unified")
    if unified is None and slots is not None and slots[2] in ("true", "false"):
        unified = slots[2]
    if unified in ("true", "false"):
        take(("-kvu",) if unified == "true" else ("-no-kvu",), f"kv_unified = {unified}")
    elif seqs and seqs[0] > 1:
        one = seqs[1] == 1
        take(("-kvu",) if one else ("-no-kvu",), f"{seqs[0]}/{seqs[1]} seqs")
    for key, flag in (("n_batch", "-b"), ("n_ubatch", "-ub")):
        value = facts.context_int(key)
        if value:
            take((flag, str(value)), f"{key} = {value}")
    fa = _flash_attn(facts)
    if fa is not None:
        take(("-fa", fa[0]), fa[1])


def _seqs(facts: LogFacts) -> tuple[int, int] | None:
    for kv in facts.kv_sizes:
        if kv.seqs and not kv.recurrent:
            a, _, b = kv.seqs.partition("/")
            if a.isdecimal():
                return int(a), int(b) if b.isdecimal() else 1
    return None


def _flash_attn(facts: LogFacts) -> tuple[str, str] | None:
    if facts.flash_attn is not None:
        on = facts.flash_attn == "enabled"
        return ("on" if on else "off"), f"flash attention auto: {facts.flash_attn}"
    value = facts.context_value("flash_attn")
    if value in ("1", "true", "enabled", "on"):
        return "on", f"flash_attn = {value}"
    if value in ("0", "false", "disabled", "off"):
        return "off", f"flash_attn = {value}"
    if value == "auto":
        return "auto", "flash_attn = auto"
    return None


def _kv_flags(facts: LogFacts, take: _Take) -> None:
    init = dict(facts.kv_init)
    kv = next((k for k in facts.kv_sizes if not k.recurrent and k.k_type), None)
    k_type = kv.k_type if kv is not None else init.get("type_k")
    v_type = kv.v_type if kv is not None else init.get("type_v")
    if k_type:
        take(("-ctk", k_type.lower()), f"K ({k_type})")
    if v_type:
        take(("-ctv", v_type.lower()), f"V ({v_type})")
    if init.get("offload") == "0" or _kv_only_on_host(facts):
        take(("-nkvo",), "the KV cache is in host memory")
    cells = {k.cache: k.cells for k in facts.kv_sizes if k.cells}
    base_cells = cells.get("base")
    if base_cells is not None and cells.get("swa") == base_cells:
        take(("--swa-full",), "the SWA cache is as large as the full one")


def _kv_only_on_host(facts: LogFacts) -> bool:
    last = facts.last_load()
    kv = [b for b in last if b.kind == "kv" and b.part == "model"]
    offloaded = any(b.kind == "model" and not is_host_buffer(b.device) for b in last)
    return bool(kv) and offloaded and all(is_host_buffer(b.device) for b in kv)


def _offload_flags(facts: LogFacts, take: _Take) -> None:
    last = facts.last_load()
    if facts.offloaded is not None:
        n, m = facts.offloaded
        take(("-ngl", str(n)), f"offloaded {n}/{m} layers")
    elif (weights := [b for b in last if b.kind == "model"]) and all(
        is_host_buffer(b.device) for b in weights
    ):
        take(("-ngl", "0"), "every weight is in host memory")
    elif (
        not weights
        and (kv := [b for b in last if b.kind == "kv"])
        and all(not is_host_buffer(b.device) for b in kv)
    ):
        # the KV cache follows its layers: on the devices only, every layer went there
        take(("-ngl", "all"), "no offload line; the KV cache is on the devices only")
    host_model = {b.device for b in last if b.kind == "model" and is_host_buffer(b.device)}
    if "CPU" in host_model and not host_model & {"CPU_Mapped"} and _mapped_names(facts):
        take(("-lm", "none"), "weights in a CPU buffer, not mapped")
    if any(b.device.endswith("_Split") for b in last):
        take(("-sm", "row"), "a _Split buffer")


def _mapped_names(facts: LogFacts) -> bool:
    """Whether the build names mapped weights CPU_Mapped (b3990 on): else CPU is mapped."""
    if facts.build is not None:
        return facts.build >= 3990
    return facts.build_range is not None and facts.build_range.first >= 3990


def _assumed(args: LlamaArgs, rules: BuildRules, facts: LogFacts) -> list[str]:
    out = []
    given = args.given
    if "n_ctx" not in given:
        ctx = rules.ctx_default
        out.append(f"-c: not printed; the build's default ({ctx or 'the training context'})")
    if "n_parallel" not in given:
        out.append(f"-np: not printed; the build's default ({_np_default(rules)})")
    if "flash_attn" not in given:
        out.append(f"-fa: not printed; the build's default ({rules.fa_default})")
    if "n_gpu_layers" not in given and any(not is_host_buffer(d.name) for d in facts.devices):
        out.append(f"-ngl: not printed; the build's default ({rules.ngl_default})")
    if "n_batch" not in given:
        out.append(f"-b: not printed; the build's default ({rules.n_batch_default})")
    if "type_k" not in given:
        out.append("-ctk/-ctv: not printed; f16")
    return out


def _np_default(rules: BuildRules) -> str:
    if rules.tool != "server":
        return "1"
    return {"one": "1", "one-is-four": "1, which means 4 with a unified cache"}.get(
        rules.np_default, "auto: 4 with a unified cache"
    )
