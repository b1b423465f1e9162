"""Fit: a model on devices for one llama-server command line, the same for ``lltui fit``,
``lltui quant``, the fit view, the launch view and the API.

A :class:`FitRequest` says what to fit (the model as a path or reference, the settings read
once as :class:`~lltui.core.cmdline.args.LlamaArgs`, the devices as a ``--gpus`` spec or a rig
being watched, the margins). :func:`prepare` reads the header and resolves the devices into a
:class:`FitSetup`; :func:`fit` estimates it (and searches, checks against llama.cpp's own
fitter when asked) into a :class:`FitReport`; :func:`quant_table` and :func:`quant_best` do the
same for every quantization. Failures are :class:`FitFailed`: one line and an exit code.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lltui.core.cmdline.args import LlamaArgs
from lltui.core.gguf.model import GgufModel
from lltui.core.hardware.calibration import Calibration
from lltui.core.hardware.host import HostSpec
from lltui.core.memory.common import DEFAULT_MARGIN, FitError
from lltui.core.memory.devices import DeviceSpec, on_host_memory
from lltui.core.memory.results import FitOptions, FitResult
from lltui.core.units import MIB
from lltui.services.devices import DeviceSpecError, describe, resolve_devices, with_rpc
from lltui.sources.models.read import ModelChoice, ModelError

if TYPE_CHECKING:
    from pathlib import Path

    from lltui.core.fit.best import Candidate, Progress
    from lltui.core.fit.llama_fit import FitChoice
    from lltui.core.fit.planner import PlanResult
    from lltui.core.fit.quant_best import QuantChoice, QuantOption
    from lltui.core.fit.quant_table import QuantFit
    from lltui.core.fit.report import OracleComparison
    from lltui.core.gguf.refs import ModelFile
    from lltui.core.memory.parts import ExtraModels
    from lltui.core.memory.results import ModelSummary
    from lltui.core.monitor.models import RigInfo, RigSample
    from lltui.sources.gpu.rig_store import StoredPoint
    from lltui.sources.models.remote import RepoQuants

REMOTE_TTL_S = 300.0  # a remote model's header, kept this long for a view being edited


class FitFailed(Exception):
    """What the user asked cannot be fitted: ``str()`` is one line, ``code`` the exit code
    (2 bad input, 1 a failure of the network or a server). ``choice``: a repository's
    models to choose from, when the reference named none of them."""

    def __init__(self, message: str, code: int = 2, choice: ModelChoice | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.choice = choice


@dataclass(frozen=True)
class FitRequest:
    """What to fit. ``gpus``: a ``--gpus`` spec; None: this machine's GPUs, or with
    ``watch_rig`` the GPUs of the rig being watched as ``sample`` found them (none before its
    first sample). ``margin_mib`` None: ``-fitt``, else 1 GiB. ``host_free_bytes`` None: what
    this machine has available now."""

    model: str
    args: LlamaArgs
    gpus: str | None = None
    sample: RigSample | None = None
    watch_rig: bool = False
    margin_mib: float | None = None
    host_free_bytes: int | None = None
    host_free_read: bool = False  # host_free_bytes is this machine's, read once for a set
    cpu_profile: str = "x86"
    host: str | None = None  # --host: the CPU side (cores=16,mem=2xDDR5-5600); None: detected
    rpc_max_age_s: float = 0.0  # an --rpc server's answer this old stands (a view's edits)
    keep_remote: bool = False  # a remote header is kept a while (a view being edited)
    verb: str = "fit"  # what the user ran, for messages
    # gpus None: the rig in use (``rig_source``, a --source spec; None: auto), as the monitor
    # opens it and the fit view sizes it: NVML's GPUs, else the simulated rig, said so
    use_rig: bool = False
    rig_source: str | None = None

    @property
    def local(self) -> bool:
        """Estimated for this machine's own GPUs."""
        return self.gpus is None and not self.watch_rig


@dataclass(frozen=True)
class FitSetup:
    """A request read: the header, the devices in llama.cpp's order, the options."""

    model_path: str
    model: GgufModel | None  # None: a repository to rank, not read (quant --best)
    args: LlamaArgs
    devices: tuple[DeviceSpec, ...]
    options: FitOptions
    extra: ExtraModels | None
    notes: tuple[str, ...]
    measured: tuple[StoredPoint, ...] = ()  # this model measured on this rig (lltui bench)
    rig: RigInfo | None = None  # the rig in use the devices are (``use_rig``)
    here: bool = False  # the devices are this machine's (its GPUs, or its CPU alone)

    @property
    def simulated(self) -> bool:
        """The devices are a simulated rig's, standing in for the rig in use."""
        return self.rig is not None and self.rig.simulated

    @property
    def gguf(self) -> GgufModel:
        if self.model is None:
            raise FitFailed(f"{self.model_path}: names a repository, not one model")
        return self.model

    @property
    def device_label(self) -> str:
        return describe(self.devices)


@dataclass(frozen=True)
class FitReport:
    setup: FitSetup
    result: FitResult
    best: tuple[Candidate, ...] | None = None  # with a goal: the command lines that fit
    oracle: OracleComparison | None = None  # llama-fit-params beside it, when asked
    llama_fit: FitChoice | None = None  # with a goal: what llama.cpp's --fit would run
    plan: PlanResult | None = None  # with a planner's goal (decode, prompt, ...): its choice
    fit_aborts: str | None = None  # why llama.cpp's --fit leaves the command given as it is


# --- reading a request ---------------------------------------------------------------------------


def prepare(
    request: FitRequest, *, whole_repo: bool = False, say: Callable[[str], None] | None = None
) -> FitSetup:
    """The header read and the devices resolved. ``whole_repo``: a reference to a repository
    (``hf:OWNER/REPO``) is left unread, for :func:`quant_best` to rank its files. ``say``:
    told too where a stored calibration is set aside (for a caller that shows no notes)."""
    from lltui.core.gguf.ref_kind import is_remote_ref
    from lltui.core.memory.parts import ExtraModels, is_projector
    from lltui.sources.gpu.meminfo import host_available, host_memory
    from lltui.sources.models.read import read_extra_models

    request, rig = on_rig(request)
    args = request.args
    notes = [f"{name}={value} from the environment" for name, value in args.from_env]
    margin = _margin(request)
    try:
        skip = False
        if whole_repo and is_remote_ref(request.model):  # (a file here is no repository)
            from lltui.core.gguf.refs import names_repo

            skip = names_repo(request.model)
        model = projector = sidecar = None
        if not skip:
            hf_mm = loads_hf_projector(request.model, args)
            hf_md = hf_draft_types(request.model, args)
            model, projector, sidecar = _read(
                request.model, request.verb, request.keep_remote, hf_mm, hf_md
            )
        devices, device_notes = _devices(request)
        extra = read_extra_models(args, request.verb)  # -md, --mmproj, --lora files
        if sidecar is not None:  # the draft -hf loads for --spec-type, counted as -md's
            extra = replace(extra or ExtraModels(), draft=sidecar)
            notes.append(sidecar_note(sidecar))
        if projector is not None:  # counted as --mmproj would count it
            if not is_projector(projector):  # (not the user's --mmproj: said as -hf's own)
                raise FitFailed(
                    f"{request.verb}: -hf also loads {_hf_name(projector)}, which is no "
                    "multimodal projector (no clip.* keys): llama-server fails to load it; "
                    "--no-mmproj leaves it out",
                    2,
                )
            extra = replace(extra or ExtraModels(), mmproj=projector)
            notes.append(projector_note(projector))
    except ModelChoice as exc:
        raise FitFailed(f"{request.verb}: {exc}", 2, choice=exc) from None
    except ModelError as exc:
        code = getattr(exc, "code", 2)
        msg = str(exc)
        said = msg if msg.startswith(request.model) else f"{request.verb}: {msg}"
        raise FitFailed(said, code) from None
    except DeviceSpecError as exc:
        raise FitFailed(f"{request.verb}: {exc}", 2) from None
    host_free = host_available() if request.host_free_bytes is None else request.host_free_bytes
    if request.gpus is not None:  # named, not read: an integrated GPU's memory is the host's
        given = request.host_free_bytes is not None and not request.host_free_read
        whose = "as given" if given else "this machine's; --host-free SIZE sets it"
        here = None if given else host_memory()
        total = here[0] if here is not None else None
        devices, host_notes = on_host_memory(devices, host_free, whose, total)
        notes.extend(host_notes)

    def told(line: str) -> None:
        notes.append(line)
        if say is not None:
            say(line)

    host, calibration, measured = speed_inputs(request, devices, say=told)
    options = FitOptions(
        margin_bytes=margin,
        host_free_bytes=host_free,
        repack_profile=request.cpu_profile,
        host=host,
        calibration=calibration,
    )
    return FitSetup(
        request.model,
        model,
        args,
        tuple(devices),
        options,
        extra,
        (*notes, *device_notes),
        measured,
        rig,
        _here(request),
    )


def on_rig(request: FitRequest) -> tuple[FitRequest, RigInfo | None]:
    """A request for the rig in use (``use_rig`` without --gpus) made as the fit view makes
    it for the rig it watches: a real rig's GPUs as sampled now, a simulated rig's empty
    (``sim:PROFILE``); with the rig's description (simulated or not, and why)."""
    if not request.use_rig or request.gpus is not None or request.sample is not None:
        return request, None
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.services.rig import RigRequest, profile_in_use, sample_once

    wanted = RigRequest(source=request.rig_source)
    if wanted.is_fleet:
        raise FitFailed(f"{request.verb}: a fleet is several rigs: give --gpus SPEC", 2)
    try:
        sample = sample_once(wanted, facts_only=True)  # (no rates: fit reads none)
    except ValueError as exc:
        raise FitFailed(f"{request.verb}: {exc}", 2) from None
    except SourceUnavailable as exc:
        raise FitFailed(f"{request.verb}: source {request.rig_source}: {exc}", 1) from None
    info = sample.info
    profile = profile_in_use(info)
    if profile is not None:
        return replace(request, gpus=profile), info
    return replace(request, sample=sample, watch_rig=True), info


def _here(request: FitRequest) -> bool:
    """Whether the estimate is for this machine: its own GPUs (directly or as the rig the
    app watches), or its CPU alone."""
    if request.local or (request.gpus or "").strip().lower() in ("cpu", "none"):
        return True
    sample = request.sample
    if not request.watch_rig or sample is None:
        return False
    from lltui.services.rig import pids_here  # a local driver's rig: this machine's GPUs

    return pids_here(sample.info.source)


def speed_inputs(
    request: FitRequest,
    devices: Sequence[DeviceSpec],
    say: Callable[[str], None] | None = None,
) -> tuple[HostSpec, Calibration | None, tuple[StoredPoint, ...]]:
    """The host CPU the speed of what it runs is predicted for, this rig's calibration and
    what ``lltui bench`` (or a launch) measured of this model here: this machine's own when
    the estimate is for its GPUs or its CPU alone; for other devices the default host, or
    ``--host``. ``say``: told where a stored calibration is set aside (unreadable, or of
    another speed model), with the estimate's notes, which the app shows too."""
    from lltui.core.hardware.host import default_host, parse_host_spec
    from lltui.sources.gpu.cpu import local_host

    here = _here(request)
    host = local_host() if here else default_host()
    if request.host:
        try:
            host = parse_host_spec(request.host, host)
        except ValueError as exc:
            raise FitFailed(f"{request.verb}: {exc}", 2) from None
    if not here:
        return host, None, ()
    from lltui.services.bench import calibration_model, local_rig
    from lltui.sources.gpu import rig_store

    record = rig_store.load(local_rig(devices, host), say=say)
    if record is None or not record.calibration.points:
        return host, None, ()
    if request.host:  # another CPU than the one measured: its scales would be this one's
        if say is not None:
            say("--host: this machine's calibration is not applied to the CPU it describes")
        return host, None, ()
    model = calibration_model(request.model)
    mine = tuple(p for p in record.points if p.model == model)
    return host, record.calibration, mine


MAX_MARGIN_MIB = 1024 * 1024  # a TiB kept per GPU: past any GPU there is


def _margin(request: FitRequest) -> int:
    if request.margin_mib is not None:
        if not 0 <= request.margin_mib <= MAX_MARGIN_MIB:  # (nan and inf are neither)
            raise FitFailed(
                f"{request.verb}: --margin must be 0 to {MAX_MARGIN_MIB} MiB (the room kept "
                "per GPU)"
            )
        return int(request.margin_mib * MIB)
    if request.args.fit_target_mib:
        return request.args.fit_target_mib[0] * MIB
    return DEFAULT_MARGIN


def _devices(request: FitRequest) -> tuple[list[DeviceSpec], list[str]]:
    rpc = request.args.rpc
    if request.gpus is None and request.watch_rig:
        from lltui.services.devices import devices_from_sample

        devices = devices_from_sample(request.sample) if request.sample is not None else []
        notes = [] if devices or rpc else ["no GPU on this rig: estimated for the host only"]
        devices, rpc_notes = with_rpc(devices, rpc, max_age_s=request.rpc_max_age_s)
        return devices, notes + rpc_notes
    return resolve_devices(request.gpus, rpc, rpc_max_age_s=request.rpc_max_age_s)


_remote: dict[str, tuple[float, tuple[GgufModel, GgufModel | None, GgufModel | None]]] = {}
_remote_lock = threading.Lock()


def model_roots() -> list[Path]:
    """The folders the fit view lists GGUF files from."""
    from lltui.sources.models.files import default_roots

    return default_roots()


def find_local_models(roots: Sequence[Path]) -> list[ModelFile]:
    """The GGUF files under ``roots`` (a split model as one file), bounded in number."""
    from lltui.sources.models.files import find_models

    return find_models(roots)


def read_model(path: str, verb: str = "fit", keep: bool = False) -> GgufModel:
    """The model's header (:class:`ModelError` with one line). ``keep``: a remote one
    (hf:..., a URL) is kept a while, so that editing a view does not ask the network again
    on every change."""
    return _read(path, verb, keep, False)[0]


def loads_hf_projector(model: str, args: LlamaArgs) -> bool:
    """Whether llama-server, given ``model`` as ``-hf``, also downloads and loads the
    repository's multimodal projector: unless ``--mmproj``, ``-mmu`` or ``--no-mmproj``
    says otherwise (common/arg.cpp's download_mmproj)."""
    from lltui.core.gguf.ref_kind import HF_PREFIX

    explicit = args.mmproj or args.mmproj_url
    return model.strip().startswith(HF_PREFIX) and args.mmproj_auto and not explicit


def hf_draft_types(model: str, args: LlamaArgs) -> tuple[str, ...]:
    """The ``--spec-type`` values whose sidecar (``mtp-...gguf``) llama-server, given
    ``model`` as ``-hf``, also downloads and loads as the draft: none where ``-md`` or
    ``-hfd`` names the draft (common/arg.cpp's download_mtp and the draft fallback)."""
    from lltui.core.gguf.ref_kind import HF_PREFIX

    if not model.strip().startswith(HF_PREFIX) or args.draft_model or args.draft_hf_repo:
        return ()
    from lltui.core.gguf.refs import DRAFT_SIDECARS

    return tuple(t for t in args.spec_types if t in DRAFT_SIDECARS)


def sidecar_note(draft: GgufModel, beside: str = "") -> str:
    """What the estimate says of the draft sidecar ``-hf`` loads by itself."""
    from lltui.core.gguf.refs import sidecar_type
    from lltui.core.units import fmt_bytes

    name = _hf_name(draft)
    return (
        f"-hf also loads {name} ({fmt_bytes(draft.file_size)}){beside} as the draft of --spec-type "
        f"{sidecar_type(name)}, counted as -md; -md or -hfd names another"
    )


def projector_note(projector: GgufModel, beside: str = "") -> str:
    """What the estimate says of the projector ``-hf`` loads by itself."""
    from lltui.core.units import fmt_bytes

    return (
        f"-hf also loads {_hf_name(projector)} ({fmt_bytes(projector.file_size)}){beside}, "
        "counted as --mmproj; --no-mmproj leaves it out"
    )


def _hf_name(projector: GgufModel) -> str:
    """The file's name in its repository (hf:OWNER/REPO:FILE[@REV], as the reader named it)."""
    from lltui.core.gguf.refs import HfRef, parse_ref

    ref = parse_ref(projector.path)
    return ref.selector if isinstance(ref, HfRef) and ref.selector else projector.path


def _read(
    path: str, verb: str, keep: bool, projector: bool, draft_types: tuple[str, ...] = ()
) -> tuple[GgufModel, GgufModel | None, GgufModel | None]:
    """The model's header and, with ``projector``, the one -hf loads beside it; with
    ``draft_types``, the draft sidecar -hf loads for them."""
    from lltui.core.gguf.ref_kind import is_remote_ref
    from lltui.sources.models.read import read_model as read_one
    from lltui.sources.models.read import read_model_and_projector

    def read() -> tuple[GgufModel, GgufModel | None, GgufModel | None]:
        if projector or draft_types:
            return read_model_and_projector(path, verb, projector, draft_types)
        return read_one(path, verb), None, None

    if not keep or not is_remote_ref(path):
        return read()
    now = time.monotonic()
    key = f"{os.environ.get('HF_ENDPOINT', '')} {projector} {','.join(draft_types)} {path}"
    with _remote_lock:
        hit = _remote.get(key)
    if hit is not None and now - hit[0] < REMOTE_TTL_S:
        return hit[1]
    got = read()
    with _remote_lock:
        if len(_remote) >= 8:
            _remote.clear()
        _remote[key] = (now, got)
    return got


# --- one model -----------------------------------------------------------------------------------


def estimate_setup(
    setup: FitSetup, options: FitOptions | None = None, verb: str = "fit"
) -> FitResult:
    """The estimate of a setup (FitFailed for settings llama.cpp itself refuses, the message
    led by ``verb``)."""
    from lltui.core.fit.estimate import estimate
    from lltui.core.memory.context import select_devices

    try:
        opts = options or setup.options
        # llama_prepare_model_devices refuses -sm tensor with no GPU; a launch leaves that to
        # llama-server, which may see GPUs lltui does not (Vulkan, Metal)
        tensor = verb == "fit" and setup.args.split_mode == "tensor"
        if tensor and not select_devices(setup.devices, setup.args):
            raise FitError("-sm tensor needs a GPU to split over (llama.cpp: >= 1 devices)")
        return estimate(setup.gguf, setup.args, setup.devices, opts, setup.extra)
    except FitError as exc:
        raise FitFailed(f"{verb}: {exc}", 2) from None


def fit(
    request: FitRequest,
    *,
    best: str | None = None,
    oracle: bool = False,
    progress: Progress | None = None,
) -> FitReport:
    """What llama-server will allocate on each device, whether it fits, how fast it runs;
    ``best``: the command lines that fit, ranked for that goal (``progress`` told how the
    search goes); ``oracle``: llama-fit-params run beside it."""
    planned = False
    if best is not None:  # the searches load only when asked for
        from lltui.core.fit.best import GOALS
        from lltui.core.fit.planner import PLAN_GOALS

        if best not in GOALS + PLAN_GOALS:
            goals = ", ".join(GOALS + PLAN_GOALS)
            raise FitFailed(f"fit: --best: expected one of {goals}, got {best!r}", 2)
        if best == "speed":  # the fastest command: the planner's, which tries -sm tensor,
            best = "decode"  # sets of GPUs and -ub too (quant --best speed ranks by best's)
        planned = best in PLAN_GOALS
    setup = prepare(request)
    result = estimate_setup(setup)
    plan = plan_setup(setup, result, best, progress) if best is not None and planned else None
    found = _best(setup, result, best, progress) if best is not None and not planned else None
    checked = _oracle(setup, setup.here) if oracle else None
    fit_choice = aborts = None
    if best is not None:
        from lltui.core.fit.llama_fit import fit_aborts, llama_fit_choice
        from lltui.core.fit.planner import PROMPT_TOKENS
        from lltui.core.memory.parts import less_free

        room = list(less_free(setup.devices, result.parts))
        # priced at the planner's prompt where its options are held to it
        tokens = PROMPT_TOKENS if plan is not None else None
        fit_choice = llama_fit_choice(setup.gguf, setup.args, room, setup.options, tokens)
        aborts = fit_aborts(setup.args, fit_choice)
    return FitReport(setup, result, found, checked, fit_choice, plan, aborts)


def plan_setup(
    setup: FitSetup, result: FitResult, goal: str = "decode", progress: Progress | None = None
) -> PlanResult:
    """The planner's ranking of a setup already estimated (``fit --best decode`` and the
    fit view): splits, GPU sets, -ub and host experts, for ``goal``."""
    from lltui.core.fit.planner import plan_best
    from lltui.core.memory.parts import less_free

    try:
        # searched in what the draft, projector and adapters leave
        room = list(less_free(setup.devices, result.parts))
        return plan_best(setup.gguf, setup.args, room, setup.options, goal, progress=progress)
    except ValueError as exc:
        raise FitFailed(f"fit: {exc}", 2) from None


def _best(
    setup: FitSetup, result: FitResult, goal: str, progress: Progress | None
) -> tuple[Candidate, ...]:
    from lltui.core.fit.best import best_configs
    from lltui.core.memory.parts import less_free

    try:
        # the command lines are searched in what the draft, projector and adapters leave
        room = list(less_free(setup.devices, result.parts))
        found = best_configs(setup.gguf, setup.args, room, setup.options, goal, progress=progress)
        return tuple(found)
    except ValueError as exc:
        raise FitFailed(f"fit: {exc}", 2) from None


def _oracle(setup: FitSetup, local: bool) -> OracleComparison:
    """llama-fit-params' numbers beside an estimate made under its rules."""
    from lltui.core.fit.estimate import estimate
    from lltui.core.fit.report import oracle_compare, oracle_unavailable
    from lltui.sources.llama.fit_oracle import OracleError, run_oracle

    if not local and any(d.kind == "cuda" for d in setup.devices):
        others = "a simulated rig's" if setup.simulated else "--gpus ones"
        return oracle_unavailable(f"llama-fit-params measures this machine's devices, not {others}")
    st = setup.args
    np_ = st.n_parallel_resolved
    # llama-fit-params: no unified KV, weights not mapped, outputs sized by n_batch, no fit
    # (each marked given: an unset --fit is the build's default, which sizes an unset -c
    # per stream, where llama-fit-params --fit off keeps the trained context in all)
    changed = frozenset({"kv_unified", "n_parallel", "load_mode", "fit"})
    same_rules = replace(
        st, kv_unified=False, n_parallel=np_, load_mode="none", fit=False, given=st.given | changed
    )
    opts = replace(setup.options, server=False, search=False)
    try:
        ours = estimate(setup.gguf, same_rules, setup.devices, opts)
    except FitError as exc:
        return oracle_unavailable(str(exc))
    try:
        res = run_oracle(setup.model_path, st)
    except OracleError as exc:
        return oracle_unavailable(str(exc))
    return oracle_compare(ours, res)


# --- every quantization --------------------------------------------------------------------------


@dataclass(frozen=True)
class QuantReport:
    setup: FitSetup
    summary: ModelSummary
    rows: tuple[QuantFit, ...]  # smallest file first
    skipped: tuple[tuple[str, str], ...]  # (type, why) the table leaves out
    warnings: tuple[str, ...] = ()  # the estimates' (of the settings and model: fit's own)


def quant_table(
    request: FitRequest,
    setup: FitSetup | None = None,
    on_row: Progress | None = None,
) -> QuantReport:
    """Every llama-quantize type of the model: its file size, whether it fits these devices
    with these flags, its largest context and its speed (``on_row(done, total)`` told after
    each type)."""
    from lltui.core.fit.quant_table import quant_table as table
    from lltui.core.fit.quant_table import skipped_types
    from lltui.core.memory.hparams import read_hparams
    from lltui.core.memory.results import model_summary

    setup = setup or prepare(request)
    model = setup.gguf
    try:
        # a header whose hyperparameters cannot be read has no quant to list: one line
        summary = model_summary(model, read_hparams(model))
        # settings llama.cpp refuses are refused for every type alike: one line, as fit's
        rows = table(model, setup.args, setup.devices, setup.options, setup.extra, on_row=on_row)
    except FitError as exc:
        raise FitFailed(f"{request.verb}: {exc}", 2) from None
    said = dict.fromkeys(w for q in rows if q.result is not None for w in q.result.warnings)
    return QuantReport(setup, summary, tuple(rows), tuple(skipped_types(model)), tuple(said))


@dataclass(frozen=True)
class QuantBest:
    setup: FitSetup
    goal: str
    repo: RepoQuants | None  # the repository ranked, or None: llama-quantize's types
    choices: tuple[QuantChoice, ...]
    warnings: tuple[str, ...] = ()  # the estimate's (of the model and settings), as quant's

    def model_flags(self, choice: QuantChoice) -> tuple[str, ...]:
        """How llama-server names the model: -hf REPO:QUANT where -hf's tag picks this file,
        else the repository and file."""
        if self.repo is None:
            return ()
        from lltui.core.gguf.refs import hf_tag, select_file

        entries = [q.entry for q in self.repo.quants]
        entry = select_file(entries, choice.option.file)
        if entry is not None and (tag := hf_tag(entries, entry)):
            return ("-hf", f"{self.repo.ref.repo}:{tag}")
        return ("-hf", self.repo.ref.repo, "-hff", choice.option.file)


def quant_best(
    request: FitRequest,
    goal: str,
    setup: FitSetup | None = None,
    progress: Progress | None = None,
) -> QuantBest:
    """The quantizations ranked by the best command line each has for ``goal``: for
    ``hf:OWNER/REPO`` the GGUF files the repository offers (each header read by ranged
    requests), else llama-quantize's types of the model."""
    from lltui.core.fit.best import check_goal
    from lltui.core.fit.quant_best import computed_options, rank_quants

    try:
        goal = check_goal(goal)
    except ValueError as exc:
        raise FitFailed(f"{request.verb}: {exc}", 2) from None
    setup = setup or prepare(request, whole_repo=True)
    repo = None
    if setup.model is None:
        repo = _read_repo(
            setup.model_path,
            loads_hf_projector(setup.model_path, setup.args),
            hf_draft_types(setup.model_path, setup.args),
        )
        options = _repo_options(repo)
        if all(o.model is None for o in options):
            raise FitFailed(
                f"{request.verb}: no model of the repository could be read: {options[0].error}", 1
            )
        setup, options = _with_hf_extras(setup, repo, options, request.verb)
    else:
        from lltui.core.memory.hparams import read_hparams

        try:  # a header with no model's hyperparameters: one line, as the table's
            read_hparams(setup.model)
        except FitError as exc:
            raise FitFailed(f"{request.verb}: {exc}", 2) from None
        options = computed_options(setup.model)
    room, warnings = _first_estimate(setup, options, request.verb)
    try:
        choices = rank_quants(options, setup.args, room, setup.options, goal, progress=progress)
    except ValueError as exc:  # an unknown goal
        raise FitFailed(f"{request.verb}: {exc}", 2) from None
    return QuantBest(setup, goal, repo, tuple(choices), warnings)


def _read_repo(ref: str, projector: bool, draft_types: tuple[str, ...]) -> RepoQuants:
    from lltui.sources.models.remote import read_repo_quants
    from lltui.sources.models.remote_gguf import RemoteError

    try:
        return read_repo_quants(ref, projector=projector, draft_types=draft_types)
    except RemoteError as exc:
        raise FitFailed(str(exc), exc.code) from None


def _repo_options(repo: RepoQuants) -> list[QuantOption]:
    from lltui.core.fit.quant_best import QuantOption

    return [
        QuantOption(
            q.entry.quant or q.entry.path, q.entry.path, q.entry.size, q.model, q.error or ""
        )
        for q in repo.quants
    ]


def _first_estimate(
    setup: FitSetup, options: Sequence[QuantOption], verb: str
) -> tuple[list[DeviceSpec], tuple[str, ...]]:
    """One estimate of the first quantization read, with the flags given (what holds for it
    holds for every type): settings llama.cpp refuses are refused here, in one line
    (FitFailed, exit 2) as plain quant refuses them, not on every row; its warnings (an
    architecture llama.cpp does not know, a context past the trained one); and the devices
    less what the draft, projector and adapters take (they hardly depend on the type), as
    ``fit --best`` searches."""
    from lltui.core.memory.parts import less_free

    first = next((o.model for o in options if o.model is not None), None)
    if first is None:
        return list(setup.devices), ()
    res = estimate_setup(replace(setup, model=first), replace(setup.options, search=False), verb)
    room = setup.devices if setup.extra is None else less_free(setup.devices, res.parts)
    return list(room), res.warnings


def _with_hf_extras(
    setup: FitSetup, repo: RepoQuants, options: list[QuantOption], verb: str
) -> tuple[FitSetup, list[QuantOption]]:
    """Each file ranked in the room its -hf projector and draft sidecar leave (llama.cpp
    picks them per file: the nearest in bits, the tag's own sidecar), and a note for each."""
    from lltui.core.memory.parts import ExtraModels

    pairs: dict[tuple[str, str], list[int]] = {}  # (projector, sidecar) -> the options beside
    projectors: dict[str, tuple[GgufModel, list[int]]] = {}  # each -hf adds, and beside whom
    sidecars: dict[str, tuple[GgufModel, list[int]]] = {}
    for i, q in enumerate(repo.quants):
        if options[i].model is None or (q.projector is None and q.draft is None):
            continue
        pairs.setdefault((_path(q.projector), _path(q.draft)), []).append(i)
        for extra_file, found in ((q.projector, projectors), (q.draft, sidecars)):
            if extra_file is not None:
                found.setdefault(extra_file.path, (extra_file, []))[1].append(i)
    for users in pairs.values():
        q = repo.quants[users[0]]
        extra = setup.extra or ExtraModels()
        extra = replace(extra, mmproj=q.projector or extra.mmproj, draft=q.draft or extra.draft)
        room = tuple(_first_estimate(replace(setup, extra=extra), [options[users[0]]], verb)[0])
        for i in users:
            options[i] = replace(options[i], room=room)
    notes = list(setup.notes)
    for found, note in ((projectors, projector_note), (sidecars, sidecar_note)):
        for extra_file, users in found.values():
            named = ", ".join(options[i].quant for i in users)
            notes.append(note(extra_file, "" if len(found) == 1 else f" beside {named}"))
    return replace(setup, notes=tuple(notes)), options


def _path(model: GgufModel | None) -> str:
    return model.path if model is not None else ""
