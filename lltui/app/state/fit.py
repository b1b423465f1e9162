"""The fit view's computation: read the GGUF header, place it on the chosen devices with the
form's flags, and run the quant table; pure data out, run on a worker thread."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lltui.core.cmdline.flag_table import BY_KEY
from lltui.core.monitor.models import RigSample

if TYPE_CHECKING:  # the estimator loads when the view first estimates, not with the app
    from lltui.core.fit.planner import PlanResult
    from lltui.core.fit.quant_table import QuantFit
    from lltui.core.memory.results import FitResult
    from lltui.services.fit import FitRequest as ServiceRequest
    from lltui.services.fit import FitSetup

LIVE = "live"  # the devices of the rig being monitored, with their free memory now

# form field -> llama-server setting; empty fields are left to llama-server's defaults
_FORM_FIELDS: tuple[tuple[str, str, str], ...] = (
    # (field id, LlamaArgs setting, label)
    ("ctx", "n_ctx", "context"),
    ("np", "n_parallel", "slots"),
    ("ngl", "n_gpu_layers", "GPU layers"),
    ("ctk", "type_k", "K type"),
    ("ctv", "type_v", "V type"),
    ("fa", "flash_attn", "flash attn"),
    ("b", "n_batch", "batch"),
    ("ub", "n_ubatch", "ubatch"),
    ("sm", "split_mode", "split"),
    ("ts", "tensor_split", "tensor split"),
    ("mg", "main_gpu", "main GPU"),
)
# (field id, flag as the flag table spells it, label)
FIELD_FLAGS: tuple[tuple[str, str, str], ...] = tuple(
    (ident, BY_KEY[key].spellings[0], label) for ident, key, label in _FORM_FIELDS
)


@dataclass(frozen=True)
class FitRequest:
    generation: int
    model_path: str
    fields: dict[str, str]
    extra: str
    devices: str  # LIVE, "sim:PROFILE", or a --gpus spec
    gpus: str = ""  # a --gpus spec typed in the view: over ``devices`` when given

    @property
    def gpus_spec(self) -> str | None:
        """The ``--gpus`` spec to fit for (None: the rig in view)."""
        typed = self.gpus.strip()
        if typed:
            return typed
        return None if self.devices == LIVE else self.devices


@dataclass
class FitOutcome:
    generation: int
    error: str | None = None
    result: FitResult | None = None
    quants: list[QuantFit] = field(default_factory=list)  # smallest first
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    device_label: str = ""
    no_model: bool = False  # nothing to estimate: no model given yet
    # what the quant table is worked out from, after the estimate (None: nothing to do)
    wanted: ServiceRequest | None = None
    setup: FitSetup | None = None
    quants_done: bool = False
    measured: list[str] = field(default_factory=list)  # this model measured on this rig
    # the planner's fastest command (decode) for the same model and rig, after the quants
    plan: PlanResult | None = None
    plan_done: bool = False


def form_flags(fields: dict[str, str], extra: str) -> list[str]:
    """llama-server flags from the form, in its own spellings."""
    flags: list[str] = []
    for ident, flag, _label in FIELD_FLAGS:
        value = fields.get(ident, "").strip()
        if value:
            flags += [flag, value]
    flags += shlex.split(extra)
    return flags


RPC_PROBE_MAX_AGE_S = 10.0  # an --rpc server's free memory, asked again after this long


def compute(request: FitRequest, sample: RigSample | None) -> FitOutcome:
    """The view's estimate and quant table, through the fit service (on a worker thread)."""
    out = compute_estimate(request, sample)
    out.quants, error = compute_quants(out)
    if error:
        out.notes.append(error)
    out.quants_done = True
    return out


def compute_estimate(request: FitRequest, sample: RigSample | None) -> FitOutcome:
    """The estimate alone (the quant table takes longer: :func:`compute_quants` after it)."""
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.core.speed.calibration import miss_text
    from lltui.services.fit import FitFailed, estimate_setup, prepare
    from lltui.services.fit import FitRequest as ServiceRequest

    out = FitOutcome(request.generation)
    if not request.model_path.strip():
        out.error = "choose a GGUF file: type its path or pick one from the list"
        out.no_model = True
        out.quants_done = True
        return out
    try:
        out.flags = form_flags(request.fields, request.extra)
        gpus = request.gpus_spec
        wanted = ServiceRequest(
            model=request.model_path.strip(),
            args=parse_llama_args(out.flags),
            gpus=gpus,
            sample=sample,
            watch_rig=gpus is None,
            rpc_max_age_s=RPC_PROBE_MAX_AGE_S,
            keep_remote=True,
        )
        setup = prepare(wanted)
        out.notes += list(setup.notes)
        out.measured = [
            f"measured here: {p.test} {p.measured_tps:.1f} t/s, "
            f"{miss_text(p.measured_tps, p.predicted_tps)} before calibrating "
            f"({p.predicted_tps:.1f}; {p.source}, {p.date})"
            for p in setup.measured[-4:]
        ]
        out.result = estimate_setup(setup)
        out.device_label = setup.device_label
        out.wanted, out.setup = wanted, setup
    except (ValueError, FitFailed) as exc:
        out.error = str(exc)
        out.quants_done = True
    return out


def compute_plan(outcome: FitOutcome) -> tuple[PlanResult | None, str | None]:
    """The planner's ranking for decode speed of an estimate :func:`compute_estimate` made
    (splits, GPU sets, -ub, host experts), or why there is none (on a worker thread)."""
    from lltui.services.fit import FitFailed, plan_setup

    if outcome.setup is None or outcome.result is None:
        return None, None
    try:
        return plan_setup(outcome.setup, outcome.result, "decode"), None
    except (ValueError, FitFailed) as exc:
        return None, f"fastest command: {exc}"


def plan_text(plan: PlanResult) -> list[str]:
    """The planner's answer in a few lines: its first choice's flags (added to those given,
    but for those it chooses itself, named, as ``fit --best`` prints them), speeds and
    memory, the other split's speed and why it lost."""
    best = plan.best
    if best is None:
        why = plan.options[0].why_not if plan.options else "nothing fits"
        return [f"fastest command: none fits ({why})"]
    lines = [
        f"fastest (decode): {shlex.join(best.flags) or 'as given'}: ~{best.decode_tps:.0f} t/s "
        f"decode, ~{best.prefill_tps:.0f} t/s prompt"
        + (f", {best.offload}" if best.offload else "")
    ]
    if plan.replaced:  # (not added to: the command goes without them, as fit --best says)
        lines.append(f"({' '.join(plan.replaced)} given: the planner chooses these itself)")
    kv = plan.kv_option
    if kv is not None:
        lines.append(
            f"faster with a {kv.kv} K/V cache ({kv.lost}): ~{kv.decode_tps:.0f} t/s decode"
            + (f", {kv.offload}" if kv.offload else "")
        )
    split = plan.split
    if split is not None:
        lines.append(split.why)
    elif plan.tensor_note:
        lines.append(f"-sm tensor not tried: {plan.tensor_note}")
    return lines


def compute_quants(outcome: FitOutcome) -> tuple[list[QuantFit], str | None]:
    """The quant table for an estimate :func:`compute_estimate` made, or why there is none
    (on a worker thread: the outcome, already shown, is only read)."""
    from lltui.services.fit import FitFailed, quant_table

    if outcome.wanted is None or outcome.setup is None:
        return [], None
    try:
        return list(quant_table(outcome.wanted, outcome.setup).rows), None
    except (ValueError, FitFailed) as exc:
        return [], f"quant table: {exc}"
