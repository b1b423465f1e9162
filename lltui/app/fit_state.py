"""The fit view's computation: read the GGUF header, place it on the chosen devices with the
form's flags, and run the quant table; pure data out, run on a worker thread."""

from __future__ import annotations

import os
import shlex
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lltui.core.llama.flag_table import BY_KEY
from lltui.core.monitor.models import RigSample

if TYPE_CHECKING:  # the estimator loads when the view first estimates, not with the app
    from lltui.core.fit.quant_table import QuantFit
    from lltui.core.memory.results import FitResult

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


@dataclass
class FitOutcome:
    generation: int
    error: str | None = None
    result: FitResult | None = None
    quants: list[QuantFit] = field(default_factory=list)  # smallest first
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    device_label: str = ""


def form_flags(fields: dict[str, str], extra: str) -> list[str]:
    """llama-server flags from the form, in its own spellings."""
    flags: list[str] = []
    for ident, flag, _label in FIELD_FLAGS:
        value = fields.get(ident, "").strip()
        if value:
            flags += [flag, value]
    flags += shlex.split(extra)
    return flags


REMOTE_TTL_S = 300.0  # a remote model's header is asked for again after this long
RPC_PROBE_MAX_AGE_S = 10.0  # an --rpc server's free memory, asked again after this long
_remote: dict[str, tuple[float, Any]] = {}
_remote_lock = threading.Lock()


def _read_model(path: str) -> Any:
    """The model's header; a remote one (hf:..., a URL) is kept for a while, so that editing
    the form does not ask the network again on every change."""
    from lltui.core.gguf.refs import is_remote_ref
    from lltui.sources.fit_devices import read_model

    if not is_remote_ref(path):
        return read_model(path)
    now = time.monotonic()
    key = f"{os.environ.get('HF_ENDPOINT', '')} {path}"
    with _remote_lock:
        hit = _remote.get(key)
    if hit is not None and now - hit[0] < REMOTE_TTL_S:
        return hit[1]
    model = read_model(path)
    with _remote_lock:
        if len(_remote) >= 8:
            _remote.clear()
        _remote[key] = (now, model)
    return model


def compute(request: FitRequest, sample: RigSample | None) -> FitOutcome:
    from lltui.core.fit.estimate import FitError, FitOptions, estimate
    from lltui.core.fit.quant_table import quant_table
    from lltui.core.llama.flags import parse_llama_args
    from lltui.sources.fit_devices import (
        DeviceSpecError,
        describe,
        devices_from_sample,
        host_available,
        read_extra_models,
        resolve_devices,
        with_rpc,
    )

    out = FitOutcome(request.generation)
    if not request.model_path.strip():
        out.error = "choose a GGUF file: type its path or pick one from the list"
        return out
    try:
        out.flags = form_flags(request.fields, request.extra)
        settings = parse_llama_args(out.flags)
        model = _read_model(request.model_path.strip())
        if request.devices == LIVE:
            devices = devices_from_sample(sample) if sample is not None else []
            if not devices and not settings.rpc:
                out.notes.append("no GPU on this rig: estimated for the host only")
            # --rpc in the flags field; asked again at most every few seconds, not on each edit
            devices, rpc_notes = with_rpc(devices, settings.rpc, max_age_s=RPC_PROBE_MAX_AGE_S)
            out.notes += rpc_notes
        else:
            devices, notes = resolve_devices(
                request.devices, settings.rpc, rpc_max_age_s=RPC_PROBE_MAX_AGE_S
            )
            out.notes += notes
        extra = read_extra_models(settings)  # -md, --mmproj, --lora in the extra flags
        opts = FitOptions(host_free_bytes=host_available())
        out.result = estimate(model, settings, devices, opts, extra)
        out.quants = quant_table(model, settings, devices, FitOptions(search=True), extra)
        out.device_label = describe(devices)
    except (ValueError, DeviceSpecError, FitError) as exc:
        out.error = str(exc)
    return out
