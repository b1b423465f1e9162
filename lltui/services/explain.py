"""Explain a llama.cpp log: what it allocated per device, beside what lltui predicts for the
same flags and build, and, for a load that failed, which device ran out, by how much, and a
command line that fits. The same for ``lltui explain``, the launch view and ``lltui launch``.

:func:`explain` reads the file (bounded: :mod:`lltui.sources.llama.log_file`), scans it
(:mod:`lltui.core.llamalog`), finds the build (``--build``, the log's build line, its
line formats, the llama-server found here), recovers the settings, reads the model's header
(``--model``, a path or ``hf:``; the path the log names only when told: a log is data, and
what it names may be a URL, a FIFO, a file of someone else's), estimates under that build's rules
(:class:`~lltui.core.llama.builds.BuildRules` in the estimate's options) and compares.
Failures are :class:`ExplainFailed`: one line and an exit code.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lltui.core.cmdline.args import LlamaArgs, parse_llama_args
from lltui.core.explain.compare import compare
from lltui.core.explain.devices import LogDevices, infer_split, log_devices, logged_weights
from lltui.core.explain.failure import STAGE_KIND, Failed, earlier_failures, summarise
from lltui.core.explain.models import ExplainReport, Fix, LogSource
from lltui.core.explain.settings import (
    Recovered,
    context_from_kv,
    is_host_buffer,
    memory_argv,
    recover,
)
from lltui.core.gguf.model import GgufModel
from lltui.core.hardware.calibration import Calibration
from lltui.core.hardware.host import HostSpec
from lltui.core.llama.builds import PINNED_BUILD, BuildRules, rules_for
from lltui.core.llamalog.classify import classify
from lltui.core.llamalog.memory import MemoryFold
from lltui.core.llamalog.models import LogFacts, rpc_endpoint
from lltui.core.memory.common import FitError
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.hparams import Hparams, read_hparams
from lltui.core.memory.results import FitOptions, FitResult
from lltui.core.units import MIB
from lltui.sources.llama.log_file import LogFileError, LogRead, read_lines
from lltui.sources.models.read import ModelError

GIVE_UP_BYTES = 4 * 1024 * 1024  # this much text with no llama.cpp line: not a llama.cpp log
PROGRAMS = {
    "server": "llama-server",
    "cli": "llama-cli",
    "bench": "llama-bench",
    "mtmd": "llama-mtmd-cli",
}


class ExplainFailed(Exception):
    """The log cannot be explained: ``str()`` is one line, ``code`` the exit code."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ExplainRequest:
    """A log to explain. ``model``: the GGUF (a path, ``hf:OWNER/REPO[:QUANT]``, a URL);
    ``model_from_log``: read the model the log names (else it is named, not opened);
    ``build``: the llama.cpp build that wrote the log (else its build line, its formats, or
    the llama-server found here); ``args``: the server's own command line, where it can be
    read (a server of this machine); ``host``: the CPU it ran on, where known (a server of
    this machine: its own), for the predicted speed (else a desktop CPU is assumed), with
    ``calibration``: this rig's, where one is kept (the speed says so)."""

    log: str
    model: str | None = None
    build: int | None = None
    ask_binary: bool = True
    model_from_log: bool = False
    args: LlamaArgs | None = None
    host: HostSpec | None = None
    calibration: Calibration | None = None


def explain(request: ExplainRequest) -> ExplainReport:
    """The log read, scanned and compared with lltui's prediction. A model path given that
    is not there is ExplainFailed (a file that is there but cannot be read is a note)."""
    from lltui.core.gguf.refs import is_remote_ref

    given = request.model
    if given is not None and not is_remote_ref(given) and not os.path.lexists(given):
        raise ExplainFailed(f"explain: model {given}: no such file")
    read = LogRead(request.log)
    memory = MemoryFold()
    try:
        for line in read_lines(request.log, read):
            memory.take(classify(line))
            if memory.recognised == 0 and read.read_bytes > GIVE_UP_BYTES:
                break
    except LogFileError as exc:
        raise ExplainFailed(f"explain: {exc}", exc.code) from None
    facts = memory.facts()
    if facts.recognised == 0:
        raise ExplainFailed(
            f"explain: {request.log}: not a llama.cpp log (no line of llama.cpp's in its "
            f"first {read.lines} lines)"
        )
    source = LogSource(request.log, read.size_bytes, read.read_bytes, read.lines, tuple(read.notes))
    near = os.path.dirname(os.path.abspath(request.log)) if request.log != "-" else None
    return explain_facts(
        facts,
        source,
        model=request.model,
        build=request.build,
        ask_binary=request.ask_binary,
        near=near if request.model_from_log else None,
        from_log=request.model_from_log,
        args=request.args,
        host=request.host,
        calibration=request.calibration,
    )


def explain_facts(
    facts: LogFacts,
    source: LogSource,
    *,
    model: str | None = None,
    build: int | None = None,
    ask_binary: bool = True,
    args: LlamaArgs | None = None,
    near: str | None = None,
    from_log: bool = False,
    host: HostSpec | None = None,
    calibration: Calibration | None = None,
) -> ExplainReport:
    """A scanned log explained. ``args``: the exact settings, when known (a launch);
    ``from_log``: read the model the log names (``near``: the log's folder, where a relative
    path is also looked for); ``host``: the CPU it ran on, for the speed (None: assumed),
    with ``calibration`` (this rig's) applied."""
    notes: list[str] = []
    found, build_source = _build(facts, build, ask_binary)
    rules = rules_for(found, facts.tool or "server")
    settings = recover(facts, rules)
    if args is not None:
        merged = args.then(settings.args)
        settings = replace(settings, args=merged, argv=memory_argv(merged))
    named = facts.model_path or settings.model_ref
    ref = model
    if ref is None and named is not None and from_log:
        ref = _beside(named, near) if near is not None else named
    gguf, hp, model_note = _header(ref, named, given=model is not None)
    ref = ref or named
    if hp is not None:
        notes += _other_model(facts, hp)
        settings = context_from_kv(facts, hp, settings)
    devs = log_devices(facts)
    notes += devs.notes
    run_args = settings.args
    if facts.meta_devices and "split_mode" not in run_args.given:
        run_args = replace(run_args, split_mode="tensor")  # the log's Meta device says so
    result = None
    if gguf is not None and hp is not None:
        result, run_args, devs, why, more = _estimate_split(facts, devs, gguf, hp, run_args, rules)
        notes += more
        if result is not None and host is not None:
            from lltui.core.fit.estimate import speed_of

            options = replace(_options(rules, facts), host=host, calibration=calibration)
            result = replace(result, speed=speed_of(gguf, result, devs.devices, options))
        if why:
            model_note = why
    comparison = compare(facts.buffers, result, devs, facts.loads, model_note or "no prediction")
    free = {
        p: d.free_bytes for d, p in zip(devs.devices, devs.printed, strict=True) if d.free_bytes
    }
    failed = summarise(facts, free)
    notes += earlier_failures(facts)
    if failed is not None and result is not None:
        failed = replace(failed, predicted_bytes=_predicted_failure(failed, result, devs))
    fix = None
    if failed is not None and gguf is not None and hp is not None and result is not None:
        fix = _fix(failed, facts, gguf, hp, run_args, settings, devs, rules, ref)
    return ExplainReport(
        source=source,
        facts=facts,
        build=found,
        build_source=build_source,
        rules=rules,
        settings=settings,
        model_ref=ref,
        model_read=gguf is not None,
        model_note=model_note,
        hparams=hp,
        tensor_types=_tensor_types(gguf) if gguf is not None else facts.type_counts,
        devices=devs,
        result=result,
        comparison=comparison,
        failed=failed,
        fix=fix,
        notes=tuple(dict.fromkeys([*notes, *facts.notes])),
    )


# --- the build ----------------------------------------------------------------------------------


def _build(facts: LogFacts, given: int | None, ask_binary: bool) -> tuple[int | None, str]:
    """The build whose rules apply, and where it came from."""
    if given is not None:
        return given, "--build"
    if facts.build is not None:
        return facts.build, f"the log's build line (line {facts.build_line})"
    rng = facts.build_range
    binary = _binary_build() if ask_binary else None
    if binary is not None:
        build, where = binary
        if rng is None or rng.first <= build <= (rng.last or build):
            return build, where
    if rng is not None:
        return rng.representative, (
            f"the log's line formats ({rng.label}: {', '.join(rng.because)}); the newest "
            "build of that range"
        )
    return None, "unknown (no build line, and no llama-server found here says)"


def _binary_build() -> tuple[int, str] | None:
    """The build of the llama-server this machine would run (lltui's own is the pinned one)."""
    from lltui.sources.llama.binary import LlamaBinaryError, find_llama_server, probe

    try:
        found = find_llama_server()
    except LlamaBinaryError:
        return None
    if found.origin.startswith("cache:"):
        return PINNED_BUILD, f"lltui's own llama-server build ({found.path})"
    try:
        version = probe(found.path).version
    except LlamaBinaryError:
        return None
    if version is None or not version.build:
        return None
    return version.build, f"llama-server --version ({found.path})"


# --- the model ----------------------------------------------------------------------------------


def _beside(ref: str, near: str) -> str:
    """A relative path the log names (relative to where the server ran), found beside the
    log when it is not where lltui runs."""
    from lltui.core.gguf.refs import is_remote_ref

    if is_remote_ref(ref) or os.path.isabs(ref) or os.path.exists(ref):
        return ref
    there = os.path.join(near, ref)
    return there if os.path.exists(there) else ref


def _header(
    ref: str | None, named: str | None, given: bool = False
) -> tuple[GgufModel | None, Hparams | None, str | None]:
    """The model's header, or why none was read. ``given``: ``ref`` is the user's --model
    (a hub that cannot be reached leaves the log explained, said without telling them to
    give what they gave)."""
    from lltui.services.fit import read_model

    if ref is None and named is not None:
        return None, None, "not opened: give --model-from-log to read it, or --model PATH"
    if ref is None:
        return None, None, "the log does not name its model file: give --model PATH (or hf:...)"
    try:
        gguf = read_model(ref, verb="explain")
    except ModelError as exc:
        hint = "" if given else " (give --model PATH or hf:OWNER/REPO)"
        return None, None, f"no header read: {exc}{hint}"
    try:
        return gguf, read_hparams(gguf), None
    except FitError as exc:
        return gguf, None, f"no prediction: {exc}"


# what print_info says of the model, and the header's value for it
_PRINTED = (
    ("arch", lambda hp: hp.arch),
    ("n_layer", lambda hp: str(hp.n_layer)),
    ("n_embd", lambda hp: str(hp.n_embd)),
    ("n_vocab", lambda hp: str(hp.n_vocab)),
    ("n_head_kv", lambda hp: str(hp.n_head_kv[0]) if hp.n_head_kv else "0"),
)


def _other_model(facts: LogFacts, hp: Hparams) -> list[str]:
    """The header read and the model the log loaded disagree (another file was given)."""
    out = []
    for key, value in _PRINTED:
        printed = facts.info(key)
        if printed is not None and printed.split()[0] != value(hp):
            out.append(f"{key}: the log printed {printed}, the header read says {value(hp)}")
    if out:
        return ["the header read is not the model the log loaded: " + "; ".join(out)]
    return []


def _tensor_types(gguf: GgufModel) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(Counter(t.type_name for t in gguf.tensors).items()))


# --- the estimate -------------------------------------------------------------------------------


def _options(rules: BuildRules, facts: LogFacts, search: bool = False) -> FitOptions:
    return FitOptions(
        server=rules.tool == "server",
        search=search,
        suggest=search,
        repack_profile=facts.cpu or "x86",
        rules=rules,
    )


def _split(
    facts: LogFacts, devs: LogDevices, gguf: GgufModel, hp: Hparams, args: LlamaArgs
) -> tuple[LlamaArgs, str | None]:
    """The layers each device took, recovered from the log's weights lines (a -ts that
    reproduces them): for a split the log does not print (a -ts, fit's choice, devices
    whose free memory it does not say)."""
    logged = logged_weights(facts, devs)
    if logged is None:
        return args, "the layer split is not in the log and could not be recovered"
    ngl = facts.offloaded[0] if facts.offloaded else hp.n_layer_all + 1
    counts = infer_split(gguf, hp, args, devs.devices, logged, ngl, facts.cpu or "x86")
    if counts is None:
        return args, "the layer split could not be recovered from the weights' lines"
    # set directly: a -ts of more devices than this build's parser takes still places layers
    split = replace(args, tensor_split=tuple(float(c) for c in counts))
    return split, (
        f"layers per device recovered from the weights' lines: -ts {','.join(map(str, counts))}"
    )


def _printed_split(
    facts: LogFacts, devs: LogDevices, hp: Hparams, args: LlamaArgs
) -> LlamaArgs | None:
    """The split a -v log printed (``layer N assigned to device X``), as a -ts."""
    if not facts.layer_devices or len(devs.devices) < 2:
        return None
    counts = [0] * len(devs.devices)
    index = {d.device_name: i for i, d in enumerate(devs.devices)}
    index.update({p: i for i, p in enumerate(devs.printed)})
    last = -1
    for _, dev in facts.layer_devices:
        i = index.get(dev)
        if i is not None:
            counts[i] += 1
            last = i
    if last < 0:
        return None
    if facts.offloaded is not None and facts.offloaded[0] > sum(counts):
        counts[last] += facts.offloaded[0] - sum(counts)  # the output layer, not listed
    return replace(args, tensor_split=tuple(float(c) for c in counts))


def _weights_agree(result: FitResult, facts: LogFacts, devs: LogDevices) -> bool:
    """Whether the estimate put on each device the weights the log printed for it."""
    if result.meta_devices:
        return _meta_weights_agree(result, facts)
    logged = logged_weights(facts, devs)
    if logged is None:
        return True  # nothing to hold it against
    for d, want in zip(devs.devices, logged, strict=True):
        got = result.buffer_bytes(d.name, "model")
        if f"{got / MIB:.2f}" != f"{want / MIB:.2f}":  # as llama.cpp prints it
            return False
    return True


def _meta_weights_agree(result: FitResult, facts: LogFacts) -> bool:
    """-sm tensor: whether the largest device's weights are the log's Meta() line."""
    from lltui.core.memory.tensor_parallel import META, fold_meta

    lines = [b for b in facts.last_load() if b.part == "model" and b.kind == "model"]
    logged = [b.logged_bytes for b in lines if b.device == META]
    if not logged:
        return True  # nothing to hold it against
    folded = fold_meta(result.buffers, result.meta_devices)
    got = sum(n for name, kind, n in folded if name == META and kind == "model")
    return f"{got / MIB:.2f}" == f"{logged[0] / MIB:.2f}"  # as llama.cpp prints it


def _estimate_split(
    facts: LogFacts,
    devs: LogDevices,
    gguf: GgufModel,
    hp: Hparams,
    args: LlamaArgs,
    rules: BuildRules,
) -> tuple[FitResult | None, LlamaArgs, LogDevices, str | None, list[str]]:
    """(result, settings, devices, why none, notes): llama.cpp's own split (free memory, or
    -ts given) with RPC servers taken as CUDA ones first. Where the weights per device
    disagree with the log's lines, what the log does not print is recovered from them: RPC
    servers on the CPU backend (their padding differs), then the layers each device took."""
    result, why = _estimate(gguf, hp, args, devs.devices, rules, facts)
    if result is None or _weights_agree(result, facts, devs):
        return result, args, devs, why, []
    variants: list[tuple[LogDevices, list[str]]] = [(devs, [])]
    if any(d.kind == "rpc" for d in devs.devices):
        cpu = tuple(replace(d, backend="cpu") if d.kind == "rpc" else d for d in devs.devices)
        rpc_note = "the RPC servers run the CPU backend (their weights' padding says so)"
        variants.append((replace(devs, devices=cpu), [rpc_note]))
    tries: list[tuple[LogDevices, LlamaArgs, list[str]]] = [(v, args, n) for v, n in variants[1:]]
    printed = _printed_split(facts, devs, hp, args)
    if printed is not None:
        for v, n in variants:
            tries.insert(0, (v, printed, [*n, "layers per device as the log printed them (-v)"]))
    split_notes: list[str] = []
    if result.meta_devices and "tensor_split" not in args.given:
        # one Meta() line per kind, the largest device's: no split to recover a -ts from
        split_notes = [
            "-sm tensor: each device's share assumes an even split: the log does not record "
            "-ts, and the Meta() weights line (the largest device's share) does not match an "
            "even split's"
        ]
    elif len(devs.devices) > 1 and "tensor_split" not in args.given:
        for v, n in variants:
            split, note = _split(facts, v, gguf, hp, args)
            if split is not args:
                tries.append((v, split, [*n, note or ""]))
            elif note:
                split_notes = [note]
    for v, settings, notes in tries:
        again, why2 = _estimate(gguf, hp, settings, v.devices, rules, facts)
        if again is not None and _weights_agree(again, facts, v):
            return again, settings, v, why2, [n for n in notes if n]
    return result, args, devs, why, split_notes


def _estimate(
    gguf: GgufModel,
    hp: Hparams,
    args: LlamaArgs,
    devices: Sequence[DeviceSpec],
    rules: BuildRules,
    facts: LogFacts,
) -> tuple[FitResult | None, str | None]:
    from lltui.core.fit.estimate import estimate

    try:
        return estimate(gguf, args, devices, _options(rules, facts), hparams=hp), None
    except (FitError, ValueError) as exc:
        return None, f"no prediction: {exc}"


# --- a failed load ------------------------------------------------------------------------------


def _predicted_failure(failed: Failed, result: FitResult, devs: LogDevices) -> int | None:
    """lltui's size of the buffer that could not be allocated."""
    kind = STAGE_KIND.get(failed.stage or "")
    if kind is None or failed.device is None:
        return None
    names = [d.name for d, p in zip(devs.devices, devs.printed, strict=True) if p == failed.device]
    name = names[0] if names else failed.device
    wanted = {"model": "model", "kv": "KV", "compute": "compute", "output": "output"}[kind]
    total = sum(n for b, k, n in result.buffers if b == name and k == wanted)
    return total or None


def _fix(
    failed: Failed,
    facts: LogFacts,
    gguf: GgufModel,
    hp: Hparams,
    args: LlamaArgs,
    settings: Recovered,
    devs: LogDevices,
    rules: BuildRules,
    ref: str | None,
) -> Fix | None:
    """A command line that fits the devices as the log found them (the fit search)."""
    from lltui.core.fit.estimate import estimate

    if failed.kind != "oom" or failed.device is None:
        return None
    devices = []
    for d, printed in zip(devs.devices, devs.printed, strict=True):
        free = d.free_bytes
        if printed == failed.device and free is None and failed.free_below_bytes is not None:
            free = failed.free_below_bytes - MIB  # it could not find this much
        devices.append(replace(d, free_bytes=free if free is not None else d.total_bytes))
    options = _options(rules, facts, search=True)
    if is_host_buffer(failed.device):
        # the host ran out: what it had (the log's device_info), else what it could not find
        host = failed.free_at_load_bytes
        if host is None and failed.free_below_bytes is not None:
            host = failed.free_below_bytes - MIB
        options = replace(options, host_free_bytes=host)
    try:
        res = estimate(gguf, args, devices, options, hparams=hp)
    except (FitError, ValueError):
        return None
    if res.fits or not res.suggestions:
        return None
    best = res.suggestions[0]
    fixed = settings.command_args.then(parse_llama_args(list(best.flags)))
    rpc = [e for d in devices if (e := rpc_endpoint(d.name)) is not None]
    if rpc and not fixed.rpc:  # the log's rpc-servers, where no pasted command named them
        fixed = fixed.then(parse_llama_args(["--rpc", ",".join(dict.fromkeys(rpc))]))
    program = PROGRAMS.get(facts.tool or "server", "llama-server")
    model = ["-m", ref] if ref else []
    return Fix(argv=(program, *model, *fixed.to_argv()), flags=best.flags, reason=best.reason)
