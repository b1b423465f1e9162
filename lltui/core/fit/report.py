"""An estimate as ``fit --json`` (DESIGN.md's contract) and as text, and llama-fit-params'
own numbers beside it. JSON is made here and nowhere else in the estimator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lltui.core.fit.fewer import hint_heading
from lltui.core.jsonout import fields_of
from lltui.core.memory.common import CPU
from lltui.core.memory.devices import ROCM_PREFIX, DeviceSpec
from lltui.core.memory.results import DeviceEstimate, FitResult, ModelSummary, PartEstimate
from lltui.core.speed.model import speed_line, speed_to_json
from lltui.core.text import one_line
from lltui.core.units import MIB


def _runtime(devices: Sequence[DeviceEstimate]) -> str:
    """What the margin is kept for: the CUDA context and cuBLAS, or ROCm's (HIP, hipBLAS)."""
    rocm = {d.name.startswith(ROCM_PREFIX) for d in devices if d.kind != "cpu"}
    if rocm == {True}:
        return "HIP context, hipBLAS"
    if rocm == {True, False}:
        return "CUDA or HIP context, cuBLAS or hipBLAS"
    return "CUDA context, cuBLAS"


def _layer_ranges(layers: Sequence[int], n_layer_all: int) -> str:
    """``(0, 1, 2, 5, 28)`` with 28 layers -> ``0-2,5,out``."""
    body = [il for il in layers if il < n_layer_all]
    parts: list[str] = []
    run: list[int] = []
    for il in body:
        if run and il == run[-1] + 1:
            run.append(il)
            continue
        if run:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [il]
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    if n_layer_all in layers:
        parts.append("out")
    return ",".join(parts) or "-"


def model_to_json(m: ModelSummary) -> dict[str, Any]:
    """The ``model`` object of ``fit --json`` and ``quant --json``."""
    return fields_of(
        m,
        "path name architecture file_type file_bytes tensor_bytes n_params n_layer n_embd n_head "
        "n_head_kv head_dim n_ff n_vocab n_ctx_train n_expert n_expert_used sliding_window "
        "swa_layers recurrent_layers tied_embeddings split_files quantization_version causal "
        "pooling",
    )


def device_to_json(d: DeviceEstimate, n_layer_all: int) -> dict[str, Any]:
    return {
        "name": d.name,
        "kind": d.kind,
        "layers": [il for il in d.layers if il < n_layer_all],
        **fields_of(
            d,
            "output_layer weights_bytes kv_bytes compute_bytes output_bytes total_bytes "
            "unaccounted_bytes free_bytes fits description",
        ),
        **({"parts": {k: b for k, b in d.parts}} if d.parts else {}),
    }


def offered_to_json(devices: Sequence[DeviceSpec]) -> list[dict[str, Any]]:
    """The devices a what-if is placed on (``quant --json``), with what each offers."""
    return [fields_of(d, "name kind total_bytes free_bytes") for d in devices]


def part_to_json(p: PartEstimate) -> dict[str, Any]:
    """One file loaded beside the model: where its bytes go, per device (CPU: the host)."""
    return {
        "part": p.part,
        "path": p.path,
        "devices": [
            {
                "name": d.device,
                **fields_of(d, "weights_bytes kv_bytes compute_bytes output_bytes total_bytes"),
            }
            for d in p.devices
        ],
        "buffers": [{"name": n, "kind": k, "bytes": b} for n, k, b in p.buffers],
        "compute_exact": not p.approximate_compute,
        **({"n_ctx": p.n_ctx} if p.n_ctx is not None else {}),
        "notes": list(p.notes),
    }


def _embedding_line(res: FitResult) -> str:
    """What an embedding or reranking model does differently, in one line ('' for a chat
    model)."""
    m, st = res.model, res.settings
    if m.causal and not st.embedding:
        return ""
    pooling = st.pooling or m.pooling or "the model's default"
    what = "reranker" if pooling == "rank" else "embedding model"
    kv = "non-causal, no KV cache" if not m.causal else "causal, KV cache as above"
    return f"{what}: {kv}; pooling {pooling}; outputs hold embeddings"


def _part_line(p: PartEstimate) -> str:
    """``draft model PATH: CUDA1 7.46 (weights 0.94, KV 2.00, compute 4.52), ... MiB``."""
    where = []
    for d in p.devices:
        if not d.total_bytes:
            continue
        slots = [
            f"{label} {_mib(n)}"
            for label, n in (
                ("weights", d.weights_bytes),
                ("KV", d.kv_bytes),
                ("compute", d.compute_bytes),
                ("output", d.output_bytes),
            )
            if n
        ]
        detail = f" ({', '.join(slots)})" if len(slots) > 1 else f" ({slots[0].split()[0]})"
        where.append(f"{one_line(d.device)} {_mib(d.total_bytes)}{detail}")
    label = {"draft": "draft model", "mmproj": "projector", "lora": "LoRA"}.get(p.part, p.part)
    approx = " (compute approximate)" if p.approximate_compute else ""
    return f"{label} {one_line(p.path)}: {', '.join(where) or 'nothing'} MiB{approx}"


def result_to_json(res: FitResult) -> dict[str, Any]:
    """The ``fit --json`` contract (DESIGN.md), integer bytes, plus the details behind it."""
    r = res.resolved
    st = res.settings
    n_all = res.model.n_layer
    return {
        "model": model_to_json(res.model),
        "settings": {
            **fields_of(r, "n_ctx n_ctx_seq"),
            "n_parallel": r.n_seq_max,
            **fields_of(r, "kv_unified type_k type_v"),
            "flash_attn": r.flash_attn_mode,
            **fields_of(r, "n_batch n_ubatch n_gpu_layers split_mode"),
            "tensor_split": list(st.tensor_split) if any(st.tensor_split) else None,
            **fields_of(r, "n_stream n_outputs_max"),
            **fields_of(st, "load_mode kv_offload"),
            "pipeline_parallel": res.pipeline_parallel,
        },
        "devices": [device_to_json(d, n_all) for d in res.devices],
        "host": fields_of(
            res.host, "weights_bytes mapped_bytes kv_bytes output_bytes compute_bytes total_bytes"
        ),
        # null where some of it is on a device whose free memory is not known: those devices
        "fits": res.fits_told,
        **fields_of(res, "max_ctx compute_exact compute_note"),
        "fits_unknown_on": res.unknown_on,
        "buffers": [{"name": n, "kind": k, "bytes": b} for n, k, b in res.buffers],
        "kv_caches": [
            {
                **fields_of(c, "swa indexer cells"),
                "layers": len(c.layers),
                **fields_of(c, "k_bytes v_bytes"),
            }
            for c in res.kv
        ],
        "suggestions": [{"flags": list(s.flags), "reason": s.reason} for s in res.suggestions],
        # what fits as asked may also fit with less: the same on fewer GPUs
        "hints": [{"flags": list(s.flags), "reason": s.reason} for s in res.hints],
        "warnings": list(res.warnings),
        "speed": speed_to_json(res.speed) if res.speed else None,
        "parts": [part_to_json(p) for p in res.parts],
    }


def _mib(n: int | None) -> str:
    if n is None:
        return "?"
    v = n / MIB
    return f"{v:.0f}" if v >= 100 else f"{v:.2f}"


# the plan of several models (plan_report) writes its tables with the same words
layer_ranges = _layer_ranges
mib_text = _mib


def result_to_text(res: FitResult) -> str:
    """A readable table: one row per device, then the host, the verdict and what would fit."""
    m = res.model
    r = res.resolved
    st = res.settings
    n_all = m.n_layer
    # what the file says (its name, its architecture) is data: one line each, escaped
    name = one_line(m.name or m.path)
    lines = [
        f"{name}: {one_line(m.architecture)} {one_line(m.file_type or '')}, {n_all} layers, "
        f"{_mib(m.file_bytes)} MiB on disk, trained context {m.n_ctx_train}".replace("  ", " "),
        f"context {r.n_ctx} ({r.n_stream} stream(s) of {r.n_ctx_seq}), {r.n_seq_max} slot(s)"
        f"{' unified' if r.kv_unified else ''}, KV {r.type_k}/{r.type_v}, "
        f"flash attention {r.flash_attn_mode}, batch {r.n_batch}/{r.n_ubatch}, "
        f"GPU layers {r.n_gpu_layers}/{n_all + 1}, split {r.split_mode}"
        + (f" {','.join(f'{x:g}' for x in st.tensor_split)}" if any(st.tensor_split) else ""),
        "",
        f"{'device':<26} {'layers':<12} {'weights':>9} {'KV':>9} {'compute':>9} "
        f"{'total':>9} {'margin':>8} {'free':>9}  fits",
    ]
    for d in res.devices:
        label = one_line(d.name) if d.kind != "cpu" else "CPU (host)"
        if d.description and d.kind == "cuda":
            card, mig, profile = d.description.replace("NVIDIA ", "").partition(" MIG ")
            # a MIG slice's profile first: the column is cut at 26 characters
            label = f"{label} {one_line(f'{mig.strip()} {profile} {card}' if mig else card)}"
        fits = "-" if d.fits is None else ("yes" if d.fits else "NO")
        margin = _mib(d.unaccounted_bytes) if d.unaccounted_bytes else "-"
        lines.append(
            f"{label[:26]:<26} {_layer_ranges(d.layers, n_all)[:12]:<12} "
            f"{_mib(d.weights_bytes):>9} {_mib(d.kv_bytes):>9} {_mib(d.compute_bytes):>9} "
            f"{_mib(d.total_bytes):>9} {margin:>8} "
            f"{_mib(d.free_bytes) if d.free_bytes is not None else '-':>9}  {fits}"
        )
    margined = [d for d in res.devices if d.kind != "cpu" and d.unaccounted_bytes]
    if margined:
        lines.append(f"(MiB; margin: kept per GPU for the {_runtime(margined)} and the pool)")
    elif any(d.kind != "cpu" for d in res.devices):  # rpc-servers on the CPU backend
        lines.append("(MiB; no margin kept on these devices)")
    else:
        lines.append("(MiB; margin: kept free on the host, as llama.cpp's fit does without a GPU)")
    if not res.compute_exact:
        lines.append(f"compute buffers: approximate ({res.compute_note or 'not modelled'})")
    h = res.host
    lines.append(
        f"host: weights {_mib(h.weights_bytes)} MiB"
        + (f" ({_mib(h.mapped_bytes)} mapped from the file)" if h.mapped_bytes else "")
        + f", KV {_mib(h.kv_bytes)}, output buffer {_mib(h.output_bytes)}, "
        f"compute {_mib(h.compute_bytes)}; total {_mib(h.total_bytes)} MiB"
    )
    embed = _embedding_line(res)
    if embed:
        lines.append(embed)
    for p in res.parts:
        lines.append(_part_line(p))
    if res.parts:
        lines.append("(the rows above include every part; the model's own share is the rest)")
    if res.pipeline_parallel:
        lines.append("pipeline parallelism: on (compute buffers hold 4 copies of their inputs)")
    verdict = "fits" if res.fits else "does NOT fit"
    if res.fits_told is None:  # (an RPC server that did not answer, a device of no size)
        unknown = ", ".join(one_line(name) for name in res.unknown_on)
        verdict = f"unknown: the free memory of {unknown} is not known (fits on the rest)"
    lines.append("")
    # the search stops at the trained context per slot (a multiple of 256 a stream): said
    # where the context asked is past it, or the largest is past one slot's
    unit = 256 * r.n_stream
    cap = r.slots_ctx(m.n_ctx_train) // unit * unit
    largest = 0 if st.rope_scaling or m.n_ctx_train <= 0 else res.max_ctx or 0
    capped = 0 < cap <= largest and max(r.n_ctx_seq, largest) > m.n_ctx_train
    why = "the trained context, which caps a slot" if capped else ""
    if r.n_seq_max > 1 and (capped or largest > m.n_ctx_train):
        # the largest is over every slot, each capped at the trained context
        why = (
            f"{'the trained context per slot x ' if capped else ''}{r.n_seq_max} slots: "
            f"llama-server caps each slot at {m.n_ctx_train}"
        )
    lines.append(
        f"verdict: {verdict}"
        + (f"; largest context that fits: {res.max_ctx}" if res.max_ctx else "")
        + (f" ({why})" if why else "")
    )
    for s in res.suggestions:
        lines.append(f"  try {' '.join(s.flags)}: {s.reason}")
    for s in res.hints:
        lines.append(f"  {hint_heading(s)}: {' '.join(s.flags)}: {s.reason}")
    if res.speed is not None:
        lines.append(speed_line(res.speed, fits=res.fits))
        if res.speed.host and any(d.name == "CPU" for d in res.speed.devices):
            lines.append(f"  host: {res.speed.host}")
        lines += [f"  speed note: {n}" for n in res.speed.notes]
    for w in res.warnings:
        lines.append(f"warning: {one_line(w)}")
    return "\n".join(lines)


# -- llama-fit-params beside the estimate ----------------------------------------------------


class OracleRowLike(Protocol):
    """One ``--fit-print`` row (sources.llama.fit_oracle.OracleRow)."""

    @property
    def name(self) -> str: ...
    @property
    def model_mib(self) -> int: ...
    @property
    def context_mib(self) -> int: ...
    @property
    def compute_mib(self) -> int: ...


class OracleLike(Protocol):
    """A llama-fit-params run (sources.llama.fit_oracle.OracleResult)."""

    @property
    def path(self) -> str: ...
    @property
    def argv(self) -> Sequence[str]: ...
    @property
    def rows(self) -> Sequence[OracleRowLike]: ...


@dataclass(frozen=True, slots=True)
class MibTriple:
    """Model, context and compute MiB of one device, as ``--fit-print`` counts them."""

    model: int
    context: int
    compute: int

    def minus(self, other: MibTriple) -> MibTriple:
        return MibTriple(
            self.model - other.model, self.context - other.context, self.compute - other.compute
        )

    def to_json(self) -> dict[str, int]:
        return {"model": self.model, "context": self.context, "compute": self.compute}


@dataclass(frozen=True, slots=True)
class OracleDeviceRow:
    """One device: llama-fit-params' numbers and ours (None: a device we do not have)."""

    name: str
    theirs: MibTriple
    ours: MibTriple | None

    @property
    def diff(self) -> MibTriple | None:
        return None if self.ours is None else self.ours.minus(self.theirs)


@dataclass(frozen=True, slots=True)
class OracleComparison:
    """llama-fit-params' rows beside the estimate, or why there are none."""

    available: bool
    path: str = ""
    argv: tuple[str, ...] = ()
    rows: tuple[OracleDeviceRow, ...] = ()
    error: str | None = None


def oracle_unavailable(error: str) -> OracleComparison:
    return OracleComparison(available=False, error=error)


def oracle_compare(ours: FitResult, oracle: OracleLike) -> OracleComparison:
    """Our numbers (under llama-fit-params' rules) beside its ``--fit-print`` rows, in MiB."""
    by_name: dict[str, DeviceEstimate] = {}
    for d in ours.devices:
        by_name[d.device_name or d.name] = d
        by_name[d.name] = d
    rows = []
    for row in oracle.rows:
        dev = by_name.get(CPU if row.name == "Host" else row.name)
        est: tuple[int, int, int] | None
        if dev is None:
            est = None
        elif dev.kind == "cpu":
            # its Host row leaves out extra buffer types such as CPU_REPACK (rows of their own)
            repack = ours.buffer_bytes("CPU_REPACK", "model")
            est = (ours.host.weights_bytes - repack, ours.host.kv_bytes, ours.host.compute_bytes)
        else:
            est = (dev.weights_bytes, dev.kv_bytes, dev.compute_bytes)
        mine = None if est is None else MibTriple(*(b // MIB for b in est))
        theirs = MibTriple(row.model_mib, row.context_mib, row.compute_mib)
        rows.append(OracleDeviceRow(row.name, theirs, mine))
    return OracleComparison(True, oracle.path, tuple(oracle.argv), tuple(rows))


def oracle_to_json(cmp: OracleComparison) -> dict[str, Any]:
    if not cmp.available:
        return {"available": False, "error": cmp.error}
    rows = []
    for row in cmp.rows:
        diff = row.diff
        rows.append(
            {
                "name": row.name,
                "llama_fit_params_mib": row.theirs.to_json(),
                "lltui_mib": None if row.ours is None else row.ours.to_json(),
                "diff_mib": None if diff is None else diff.to_json(),
            }
        )
    return {"available": True, "path": cmp.path, "argv": list(cmp.argv), "rows": rows}


def oracle_to_text(cmp: OracleComparison) -> str:
    if not cmp.available:
        return f"llama-fit-params: {one_line(cmp.error or 'not available')}"
    lines = [
        "llama-fit-params (its rules: weights not mapped, outputs = n_batch, no unified KV);",
        "each cell: lltui's estimate under those rules / llama-fit-params', MiB (context: the",
        "KV cache and the output buffer; compute: the compute buffers)",
        f"{'device':<14} {'model':>16} {'context':>16} {'compute':>16}",
    ]
    for row in cmp.rows:
        them = row.theirs.to_json()
        us: dict[str, int] = row.ours.to_json() if row.ours is not None else {}

        def cell(k: str, us: dict[str, int] = us, them: dict[str, int] = them) -> str:
            return f"{us.get(k, '?')} / {them[k]}"

        lines.append(
            f"{one_line(row.name):<14} {cell('model'):>16} {cell('context'):>16} "
            f"{cell('compute'):>16}"
        )
    return "\n".join(lines)
