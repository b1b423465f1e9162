"""``lltui fit MODEL.gguf [llama-server flags] [--gpus SPEC] [--json] [--oracle]``.

Reads the GGUF header (never the weights) and estimates, per device, what llama-server will
allocate with these flags: weights, KV cache, compute buffers, the host output buffer, and
whether it fits. Flags are llama-server's own, pasted as they are; the ones that do not
change memory are accepted and ignored.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError, print_json

if TYPE_CHECKING:
    from lltui.core.fit.report import OracleComparison

# lltui's own options, mixed freely with the llama-server flags
OWN_VALUE = ("--gpus", "--margin", "--host-free", "--cpu", "--best")
OWN_FLAGS = ("--json", "--oracle", "-h", "--help")

HELP = """\
usage: lltui fit MODEL.gguf [llama-server flags] [--gpus SPEC] [--json] [--oracle]

Estimate, per device, the memory llama-server will allocate for MODEL.gguf with these
flags: weights, KV cache, compute buffers and the host output buffer, and whether it fits;
and the speed it will run at: decode and prompt tokens/s, per device and for the split, and
what bounds them (memory bandwidth, compute, a link). The GGUF header is read; the weights
are not. MODEL.gguf may also be hf:OWNER/REPO[:FILE|QUANT][@REV] or an https URL (the header
read by range requests).

llama-server flags (its spellings and defaults; other flags are accepted and ignored):
  -c -np -kvu/-no-kvu -ctk -ctv -fa -b -ub -ngl -sm -ts -mg -dev -ot --cpu-moe --n-cpu-moe
  -nkvo --swa-full -lm -nr --no-host --rpc (long forms too)
  --rpc HOST:PORT servers are asked for their devices' free memory (llama.cpp's RPC
  protocol, 3 s at most); llama.cpp RPC has no authentication: private networks only

lltui options:
  --gpus SPEC      devices to estimate for instead of the local GPUs: 24GiB,24GiB | T4,T4 |
                   2xA100-80GB | "NVIDIA GeForce RTX 4090" | cpu | sim:PROFILE |
                   rpc:HOST:PORT[:cpu][=SIZE],...
  --margin MIB     memory kept per GPU for what llama.cpp does not count (CUDA context,
                   cuBLAS, the pool); default: -fitt, else 1024
  --host-free SIZE host memory available (default: what this machine has free)
  --cpu PROFILE    CPU weight repacking rules: x86 (default), x86-avx512, arm, none
  --oracle         also run llama-fit-params with the same flags and show its numbers
  --best GOAL      also rank command lines that fit, searched over -ngl, --n-cpu-moe (MoE:
                   experts first), -ctk/-ctv, -ub, -c and on several GPUs -ts (each GPU's
                   layers sized to its memory after fixed costs, shown where it fits more
                   than llama.cpp's default split): context (the largest context), speed
                   (the fastest decode at -c) or gpu-only (nothing on the CPU)
  --json           print JSON
"""


def register(sub: Any) -> None:
    p = sub.add_parser(
        "fit",
        help="per-device memory llama-server will use for a GGUF, and whether it fits",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        prefix_chars="\x00",  # no option prefix: every word, -c or +5, reaches run() as typed
    )
    p.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def split_args(argv: list[str], verb: str = "fit") -> tuple[str | None, list[str], dict[str, Any]]:
    """(model path, llama-server flags, lltui options) from the fit command line.

    A llama-server flag takes as many values as the flag table says; one it does not know
    is refused here, naming the flag (its value would otherwise read as a second model)."""
    from lltui.core.llama.flag_table import is_flag_token, pinned_arity, unknown_flag_message

    model: str | None = None
    llama: list[str] = []
    own: dict[str, Any] = {"json": False, "oracle": False, "help": False}
    own_words = (*OWN_VALUE, *OWN_FLAGS)
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            own["help"] = True
            i += 1
            continue
        if a in ("--json", "--oracle"):
            own[a[2:]] = True
            i += 1
            continue
        if a in OWN_VALUE:
            if i + 1 >= len(argv):
                raise CliError(f"{verb}: {a} expects a value", 2)
            own[a[2:].replace("-", "_")] = argv[i + 1]
            i += 2
            continue
        if is_flag_token(a):
            n = pinned_arity(a)
            if n is None:
                raise CliError(f"{verb}: {unknown_flag_message(a)}", 2)
            values = argv[i + 1 : i + 1 + n]
            if any(w in own_words for w in values):
                values = []  # lltui's own option is not this flag's value: the parser says so
            llama += [a, *values]
            i += 1 + len(values)
            continue
        if model is not None:
            # reported after the flags are read: a flag's bad value may be why it is here
            own.setdefault("stray", a)
            i += 1
            continue
        model = a
        i += 1
    return model, llama, own


@dataclass
class FitInputs:
    """What ``fit`` and ``quant`` read from their command line, checked."""

    model_path: str
    model: Any  # GgufModel
    settings: Any  # LlamaArgs
    devices: list[Any]  # DeviceSpec, in llama.cpp's order
    notes: list[str]
    own: dict[str, Any]
    options: Any  # FitOptions
    extra: Any = None  # ExtraModels: the draft, projector and adapters the flags name


def read_inputs(
    argv: list[str], verb: str, help_text: str, rank_repo: bool = False
) -> FitInputs | None:
    """Parse and check the command line shared by ``fit`` and ``quant``; None after --help.
    Bad input raises CliError (exit 2) with one line. ``rank_repo``: with --best, a
    repository reference (hf:OWNER/REPO) is left unread (``model`` None) for the caller."""
    from lltui.core.fit.estimate import FitOptions

    # a local model must not import the HTTP client: parsing the reference is pure
    from lltui.core.gguf.refs import names_repo
    from lltui.core.llama.flags import parse_llama_args
    from lltui.core.units import MIB, parse_size
    from lltui.sources.fit_devices import (
        DeviceSpecError,
        host_available,
        read_extra_models,
        read_model,
        resolve_devices,
    )

    model_path, llama_argv, own = split_args(argv, verb)
    if own["help"]:
        sys.stdout.write(help_text)
        return None
    try:
        # LLAMA_ARG_* variables set llama-server's defaults: read them as it does
        settings = parse_llama_args(llama_argv, env=os.environ)
    except ValueError as exc:
        raise CliError(f"{verb}: {exc}", 2) from None
    if own.get("stray") is not None:
        raise CliError(f"{verb}: unexpected argument {own['stray']!r} (one model file only)", 2)
    env_notes = [f"{name}={value} from the environment" for name, value in settings.from_env]
    model_path = model_path or settings.model_path
    if not model_path:
        raise CliError(f"{verb}: no model: give MODEL.gguf (or -m MODEL.gguf)", 2)

    margin = 1024 * MIB
    if own.get("margin") is not None:
        try:
            margin = int(float(own["margin"]) * MIB)
        except (ValueError, OverflowError):
            raise CliError(f"{verb}: --margin expects MiB, got {own['margin']!r}", 2) from None
        if margin < 0:
            raise CliError(f"{verb}: --margin must not be negative", 2)
    elif settings.fit_target_mib:
        margin = settings.fit_target_mib[0] * MIB
    host_free: int | None = None
    if own.get("host_free") is not None:
        try:
            host_free = parse_size(own["host_free"])
        except ValueError as exc:
            raise CliError(f"{verb}: --host-free: {exc}", 2) from None
    from lltui.commands.progress import Progress

    try:
        whole_repo = rank_repo and own.get("best") is not None and names_repo(model_path)
        with Progress(f"{verb}: reading {model_path}"):
            model = None if whole_repo else read_model(model_path, verb)
        devices, notes = resolve_devices(own.get("gpus"), settings.rpc)
        extra = read_extra_models(settings, verb)  # -md, --mmproj, --lora files
    except DeviceSpecError as exc:
        from lltui.commands.remote import show_choices

        if show_choices(exc, verb, own["json"]):
            return None  # a repository's models listed: the answer asked for
        msg = str(exc)
        code = getattr(exc, "code", 2)
        raise CliError(msg if msg.startswith(model_path) else f"{verb}: {msg}", code) from None
    options = FitOptions(
        margin_bytes=margin,
        host_free_bytes=host_available() if host_free is None else host_free,
        repack_profile=own.get("cpu") or "x86",
    )
    return FitInputs(model_path, model, settings, devices, env_notes + notes, own, options, extra)


def run(args: argparse.Namespace) -> int:
    from lltui.core.fit.estimate import FitError, estimate

    inputs = read_inputs(list(args.argv), "fit", HELP)
    if inputs is None:
        return 0
    model_path, model, settings = inputs.model_path, inputs.model, inputs.settings
    devices, notes, own, opts = inputs.devices, inputs.notes, inputs.own, inputs.options
    local = own.get("gpus") is None
    from lltui.commands.progress import Progress

    try:
        with Progress("fit: placing the model"):
            result = estimate(model, settings, devices, opts, inputs.extra)
    except FitError as exc:
        raise CliError(f"fit: {exc}", 2) from None

    best = None
    if own.get("best") is not None:
        from lltui.core.fit.best import best_configs

        try:
            from lltui.core.memory.parts import less_free

            # the command lines are searched in what the draft, projector and adapters leave
            room = list(less_free(devices, result.parts))
            best = best_configs(model, settings, room, opts, own["best"])
        except ValueError as exc:
            raise CliError(f"fit: {exc}", 2) from None

    oracle: OracleComparison | None = None
    if own["oracle"]:
        oracle = _oracle(model, model_path, settings, devices, opts, local)

    if own["json"]:
        from lltui.core.fit.report import oracle_to_json, result_to_json

        data = result_to_json(result)
        if notes:
            data["notes"] = notes
        if oracle is not None:
            data["oracle"] = oracle_to_json(oracle)
        if best is not None:
            data["best"] = [
                {
                    "flags": list(c.flags),
                    "max_ctx": c.max_ctx,
                    "decode_tps": round(c.decode_tps, 1),
                    "prefill_tps": round(c.prefill_tps, 1),
                    "gives_up": c.gives_up,
                    "gains": c.gains or None,
                }
                for c in best
            ]
        print_json(data)
    else:
        from lltui.core.fit.report import oracle_to_text, result_to_text
        from lltui.core.text import one_line

        text = result_to_text(result)
        for n in notes:
            text += f"\nnote: {one_line(n)}"
        if oracle is not None:
            text += "\n\n" + oracle_to_text(oracle)
        if best is not None:
            text += f"\n\nbest for {own['best']} (added to the flags given):"
            if not best:
                text += "\n  nothing this search tried fits"
            for i, c in enumerate(best, 1):
                text += (
                    f"\n  {i}. {' '.join(c.flags)}\n     context {c.max_ctx}, "
                    f"decode ~{c.decode_tps:.0f} t/s, prompt ~{c.prefill_tps:.0f} t/s; "
                    f"gives up: {c.gives_up}"
                )
                if c.gains:
                    text += f"\n     gives: {c.gains}"
        print(text)
    return 0


def _oracle(
    model: Any, path: str, settings: Any, devices: list[Any], opts: Any, local: bool
) -> OracleComparison:
    """llama-fit-params' numbers beside an estimate made under its rules."""
    from dataclasses import replace

    from lltui.core.fit.estimate import FitError, estimate
    from lltui.core.fit.report import oracle_compare, oracle_unavailable
    from lltui.sources.llama.fit_oracle import OracleError, run_oracle

    if not local and any(d.kind == "cuda" for d in devices):
        return oracle_unavailable(
            "llama-fit-params measures this machine's devices, not --gpus ones"
        )
    np_ = settings.n_parallel_resolved
    # llama-fit-params: no unified KV, weights not mapped, outputs sized by n_batch, no fit
    same_rules = replace(settings, kv_unified=False, n_parallel=np_, load_mode="none", fit=False)
    try:
        ours = estimate(model, same_rules, devices, replace(opts, server=False, search=False))
    except FitError as exc:
        return oracle_unavailable(str(exc))
    try:
        res = run_oracle(path, settings)
    except OracleError as exc:
        return oracle_unavailable(str(exc))
    return oracle_compare(ours, res)
