"""Prometheus metrics out of lltui's snapshots. Pure: no HTTP, no exposition text.

:func:`rig_families` and :func:`llama_families` turn a :class:`RigSample` and what is known
of llama-servers into :class:`Family` records (Prometheus names and base units: bytes, watts,
celsius, hertz, ratios, joules); the exporter turns those into exposition text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lltui.core.monitor.alerts import Alert
from lltui.core.monitor.models import (
    ContainerRef,
    RigSample,
)
from lltui.core.monitor.plan_reality import PlanReality
from lltui.core.monitor.prom import (
    COMMAND_LABEL_MAX,
    DEFAULT_MAX_PROCESSES,
    GPU_INFO,
    GPU_LOST,
    GPU_METRICS,
    HOST_CPU,
    HOST_CPUS,
    HOST_LOAD1,
    HOST_MEM_TOTAL,
    HOST_MEM_USED,
    INFO_BOOL_LABELS,
    INFO_TEXT_LABELS,
    MIB,
    PROCESS_MEMORY,
    RIG_INFO,
    STATIC_METRICS,
    THROTTLE,
    THROTTLE_COUNT,
    XID_ERRORS,
    Family,
    LlamaExport,
)


def _labels(**kv: str | None) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in kv.items() if v is not None)


def _bool_label(value: bool | None) -> str | None:
    return None if value is None else "true" if value else "false"


def _finite(value: float | int | None) -> bool:
    return value is not None and not isinstance(value, bool) and math.isfinite(value)


def clean_command(name: str | None) -> str:
    """A process name fit for a label: the program's name only (never its arguments, which
    may hold keys), printable, and short."""
    if not name:
        return ""
    first = name.strip().split()[0] if name.strip() else ""
    base = first.rsplit("/", 1)[-1]
    text = "".join(c for c in base if c.isprintable())
    return text[:COMMAND_LABEL_MAX]


def clean_label(text: str) -> str:
    """Any text fit for a label value: printable and short."""
    return "".join(c for c in text if c.isprintable())[:COMMAND_LABEL_MAX]


_Labels = tuple[tuple[str, str], ...]


def rig_families(
    sample: RigSample,
    *,
    host: str,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    xid_counts: Mapping[str, int] | None = None,
) -> tuple[Family, ...]:
    """Every field of ``sample`` lltui knows, as families; a field that is ``None`` has no
    sample. GPUs carry ``gpu`` (NVML index), ``uuid``, ``name`` and ``host`` labels, and
    ``simulated="true"`` on a simulated rig.
    ``xid_counts``: XID errors seen per GPU UUID since the caller began counting (only
    GPUs whose XIDs are watched)."""
    info = sample.info
    rig = _labels(
        host=host,
        source=info.source,
        simulated="true" if info.simulated else "false",
        driver_version=info.driver_version,
        cuda_version=info.cuda_version,
        rocm_version=info.rocm_version,
    )
    # a simulated rig's GPUs say so on every series, so a Prometheus that scrapes one
    # cannot take its numbers for a real GPU's
    fake = "true" if info.simulated else None
    gpu_labels = {
        g.info.uuid: _labels(
            gpu=str(g.index), uuid=g.info.uuid, name=g.info.name, host=host, simulated=fake
        )
        for g in sample.gpus
    }
    return (
        Family(RIG_INFO, "gauge", "The source lltui samples; always 1.", samples=((rig, 1.0),)),
        *_gpu_identity(sample, gpu_labels),
        *_gpu_values(sample, gpu_labels, xid_counts),
        _process_memory(sample, gpu_labels, max_processes),
        *mig_families(sample, gpu_labels),
        *_host_families(sample, host),
    )


def _gpu_identity(sample: RigSample, gpu_labels: Mapping[str, _Labels]) -> tuple[Family, ...]:
    """Each GPU's identity (bus, CUDA index, compute capability, the text fields) and
    whether it is lost."""
    info_samples = []
    for g in sample.gpus:
        s = g.info
        cc = (
            f"{s.compute_capability[0]}.{s.compute_capability[1]}" if s.compute_capability else None
        )
        extra = _labels(
            pci_bus_id=s.pci_bus_id or None,
            cuda_index=str(s.cuda_index) if s.cuda_index is not None else None,
            compute_capability=cc,
            **{k: getattr(s, k) for k in INFO_TEXT_LABELS},
            **{k: _bool_label(getattr(s, k)) for k in INFO_BOOL_LABELS},
        )
        info_samples.append((gpu_labels[s.uuid] + extra, 1.0))
    lost = tuple((gpu_labels[g.info.uuid], 1.0 if g.lost else 0.0) for g in sample.gpus)
    return (
        Family(GPU_INFO, "gauge", "GPU identity; always 1.", samples=tuple(info_samples)),
        Family(GPU_LOST, "gauge", "1 when the GPU fell off the bus or stopped answering.",
               samples=lost),
    )  # fmt: skip


def _gpu_values(
    sample: RigSample, gpu_labels: Mapping[str, _Labels], xid_counts: Mapping[str, int] | None
) -> list[Family]:
    """The GPUs' numbers (the fixed ones of their info, then those of each sample), XID
    errors where counted, and the reasons each GPU's clocks are held down."""
    out = []
    for m, of_info in [(m, True) for m in STATIC_METRICS] + [(m, False) for m in GPU_METRICS]:
        rows = []
        for g in sample.gpus:
            v = getattr(g.info if of_info else g, m.attr)
            if _finite(v):
                rows.append((gpu_labels[g.info.uuid], float(v) * m.scale))
        out.append(Family(m.name, m.kind, m.help, m.unit, tuple(rows)))
    if xid_counts is not None:
        rows = [
            (gpu_labels[g.info.uuid], float(xid_counts[g.info.uuid]))
            for g in sample.gpus
            if g.info.uuid in xid_counts  # (GPUs whose XIDs are watched)
        ]
        out.append(
            Family(XID_ERRORS, "counter", "XID errors the driver reported since the exporter "
                   "started.", "", tuple(rows))
        )  # fmt: skip
    throttle, counts = [], []
    for g in sample.gpus:
        if g.throttle_reasons is None:
            continue
        counts.append((gpu_labels[g.info.uuid], float(len(g.throttle_reasons))))
        for reason in g.throttle_reasons:
            throttle.append((gpu_labels[g.info.uuid] + (("reason", reason),), 1.0))
    out.append(
        Family(THROTTLE, "gauge", "A reason the GPU's clocks are held down now; 1.", "",
               tuple(throttle))
    )  # fmt: skip
    out.append(
        Family(THROTTLE_COUNT, "gauge", "How many reasons hold the GPU's clocks down now "
               "(0: none does).", "", tuple(counts))
    )  # fmt: skip
    return out


def _process_memory(
    sample: RigSample, gpu_labels: Mapping[str, _Labels], max_processes: int
) -> Family:
    """The ``max_processes`` processes holding the most memory on each GPU, with the model
    each serves and its container where known."""
    procs = []
    for g in sample.gpus:
        known = [p for p in g.processes if p.used_memory is not None]
        known.sort(key=lambda p: -(p.used_memory or 0))
        for p in known[: max(0, max_processes)]:
            labels = gpu_labels[g.info.uuid] + (
                ("pid", str(p.pid)),
                ("command", clean_command(p.name or p.command)),
            )
            if (model := p.served) is not None:  # which model holds this memory
                labels += (("model", clean_label(model)),)
            labels += container_labels(p.container)
            procs.append((labels, float(p.used_memory or 0)))
    return Family(
        PROCESS_MEMORY,
        "gauge",
        f"GPU memory a process holds (the {max_processes} largest per GPU).",
        "bytes",
        tuple(procs),
    )


def _host_families(sample: RigSample, host: str) -> list[Family]:
    h = sample.host
    hl = (("host", host),)
    out = []
    for name, value, scale, unit, text in (
        (HOST_CPU, h.cpu_pct, 0.01, "ratio", "Host CPU busy share."),
        (HOST_MEM_TOTAL, h.mem_total, 1.0, "bytes", "Host memory in all."),
        (HOST_MEM_USED, h.mem_used, 1.0, "bytes", "Host memory in use."),
        (HOST_LOAD1, h.load_1m, 1.0, "", "Host load average over one minute."),
        (HOST_CPUS, h.cpu_count, 1.0, "", "Host logical CPUs."),
    ):
        rows_h = ((hl, float(value) * scale),) if value is not None and _finite(value) else ()
        out.append(Family(name, "gauge", text, unit, rows_h))
    return out


MIG_MEMORY_USED = "lltui_mig_memory_used_bytes"
MIG_MEMORY_TOTAL = "lltui_mig_memory_total_bytes"
MIG_INFO = "lltui_mig_info"
VGPU_MEMORY_USED = "lltui_vgpu_memory_used_bytes"


def container_labels(c: ContainerRef | None) -> tuple[tuple[str, str], ...]:
    """A process's container as labels: ``container`` (its short label, as the monitor shows
    it), ``container_runtime``, and ``pod`` and ``namespace`` for Kubernetes."""
    if c is None:
        return ()
    return _labels(
        container=c.label[:COMMAND_LABEL_MAX],
        container_runtime=c.runtime,
        pod=c.pod,
        namespace=c.namespace,
    )


def mig_families(
    sample: RigSample, gpu_labels: Mapping[str, tuple[tuple[str, str], ...]]
) -> tuple[Family, ...]:
    """MIG instances as devices under their GPU: the GPU's labels plus ``mig_uuid``,
    ``profile``, ``gpu_instance`` and ``compute_instance``."""
    info, used, total = [], [], []
    for g in sample.gpus:
        for m in g.mig:
            labels = gpu_labels[g.info.uuid] + (
                ("mig_uuid", m.uuid),
                ("profile", m.profile),
                ("gpu_instance", str(m.gpu_instance_id)),
                ("compute_instance", str(m.compute_instance_id)),
            )
            info.append((labels, 1.0))
            total.append((labels, float(m.memory_total)))
            if m.memory_used is not None:
                used.append((labels, float(m.memory_used)))
    vgpu_used = []
    for g in sample.gpus:
        for v in g.vgpus:
            if v.memory_used is not None:
                labels = gpu_labels[g.info.uuid] + _labels(
                    vgpu=str(v.instance), vgpu_type=v.type_name, vm=v.vm
                )
                vgpu_used.append((labels, float(v.memory_used)))
    return (
        Family(
            VGPU_MEMORY_USED,
            "gauge",
            "Framebuffer a vGPU (served to a VM) uses.",
            "bytes",
            tuple(vgpu_used),
        ),
        Family(MIG_INFO, "gauge", "A MIG instance of a GPU; always 1.", "", tuple(info)),
        Family(MIG_MEMORY_TOTAL, "gauge", "Memory of a MIG instance.", "bytes", tuple(total)),
        Family(MIG_MEMORY_USED, "gauge", "Memory in use in a MIG instance.", "bytes", tuple(used)),
    )


ALERT_ACTIVE = "lltui_alert_active"
ALERT_SINCE = "lltui_alert_since_timestamp_seconds"


def alert_families(alerts: Sequence[Alert], *, host: str) -> tuple[Family, ...]:
    """The alerts raised now: ``lltui_alert_active`` (1) and when each was raised, labelled
    by ``kind``, ``severity`` and what it is about (``gpu`` and ``uuid``, ``server``, or the
    fleet ``host`` it names)."""
    active, since = [], []
    for a in alerts:
        labels = _labels(
            host=a.host or host,
            kind=a.kind,
            severity=a.severity,
            gpu=None if a.gpu_index is None else str(a.gpu_index),
            uuid=a.gpu_uuid,
            server=a.server,
        )
        active.append((labels, 1.0))
        since.append((labels, float(a.since)))
    return (
        Family(ALERT_ACTIVE, "gauge", "An alert raised now (thresholds as lltui's config "
               "sets them); 1.", "", tuple(active)),
        Family(ALERT_SINCE, "gauge", "When the alert was raised, seconds since the epoch.",
               "seconds", tuple(since)),
    )  # fmt: skip


# the llama-server series: kind, help and unit, in the order they are written
LLAMA_SERIES: dict[str, tuple[str, str, str]] = {
    "lltui_llama_up": ("gauge", "1 when the server answers /health as ready.", ""),
    "lltui_llama_prompt_tokens_total": ("counter", "Prompt tokens processed.", ""),
    "lltui_llama_prompt_seconds_total": ("counter", "Time spent on prompts.", "seconds"),
    "lltui_llama_generated_tokens_total": ("counter", "Tokens generated.", ""),
    "lltui_llama_generation_seconds_total": (
        "counter", "Time spent generating.", "seconds"),
    "lltui_llama_decode_calls_total": ("counter", "llama_decode calls.", ""),
    "lltui_llama_requests_processing": ("gauge", "Requests being processed.", ""),
    "lltui_llama_requests_deferred": ("gauge", "Requests waiting for a slot.", ""),
    "lltui_llama_generation_tokens_per_second": (
        "gauge", "Tokens generated per second over the last interval.", ""),
    "lltui_llama_decode_tokens_per_second": (
        "gauge", "Decode speed of requests finished in the last interval.", ""),
    "lltui_llama_prompt_tokens_per_second": (
        "gauge", "Prompt speed of requests finished in the last interval.", ""),
    "lltui_llama_slots": ("gauge", "Slots the server has.", ""),
    "lltui_llama_slots_busy": ("gauge", "Slots processing a request.", ""),
    "lltui_llama_slot_context_tokens": ("gauge", "Context size of one slot.", ""),
    "lltui_llama_model_info": ("gauge", "The model served; always 1.", ""),
    "lltui_llama_device_memory_bytes": (
        "gauge", "Memory the server placed on a device, by kind.", "bytes"),
    "lltui_llama_device_layers": ("gauge", "Layers the server placed on a device.", ""),
    "lltui_llama_kv_tokens": ("gauge", "Tokens the server's slots hold in its KV cache.", ""),
    "lltui_llama_kv_used_bytes": (
        "gauge", "KV cache bytes the slots' tokens take on a device.", "bytes"),
    "lltui_llama_kv_capacity_bytes": ("gauge", "KV cache bytes of a device.", "bytes"),
    "lltui_llama_prompt_cache_bytes": (
        "gauge", "Host memory the server's prompt cache held at its last task.", "bytes"),
    "lltui_llama_prompt_cache_limit_bytes": (
        "gauge", "The prompt cache's limit (--cache-ram).", "bytes"),
    "lltui_llama_prompt_cache_prompts": ("gauge", "Prompts the prompt cache holds.", ""),
    "lltui_llama_kv_seconds_to_full": (
        "gauge", "Seconds until a device's KV cache is full at the current rate.", "seconds"),
}  # fmt: skip


def llama_families(servers: Sequence[LlamaExport], *, host: str) -> tuple[Family, ...]:
    """Counters, slots and placement of the llama-servers lltui follows."""
    rows: dict[str, list[tuple[tuple[tuple[str, str], ...], float]]] = {}

    def add(name: str, labels: tuple[tuple[str, str], ...], value: float | int | None) -> None:
        if _finite(value):
            rows.setdefault(name, []).append((labels, float(value)))  # type: ignore[arg-type]

    for s in servers:
        lb = (("host", host), ("server", s.server))
        add("lltui_llama_up", lb, 1.0 if s.up else 0.0)
        m = s.metrics
        if m is not None:
            add("lltui_llama_prompt_tokens_total", lb, m.prompt_tokens_total)
            add("lltui_llama_prompt_seconds_total", lb, m.prompt_seconds_total)
            add("lltui_llama_generated_tokens_total", lb, m.tokens_predicted_total)
            add("lltui_llama_generation_seconds_total", lb, m.tokens_predicted_seconds_total)
            add("lltui_llama_decode_calls_total", lb, m.n_decode_total)
            add("lltui_llama_requests_processing", lb, m.requests_processing)
            add("lltui_llama_requests_deferred", lb, m.requests_deferred)
        tp = s.throughput
        if tp is not None:
            add("lltui_llama_generation_tokens_per_second", lb, tp.generation_tps)
            add("lltui_llama_decode_tokens_per_second", lb, tp.decode_tps)
            add("lltui_llama_prompt_tokens_per_second", lb, tp.prompt_tps)
        if s.slots is not None:
            add("lltui_llama_slots", lb, len(s.slots))
            add("lltui_llama_slots_busy", lb, sum(1 for x in s.slots if x.is_processing))
        elif s.props is not None:
            add("lltui_llama_slots", lb, s.props.total_slots)
        if s.props is not None:
            add("lltui_llama_slot_context_tokens", lb, s.props.n_ctx)
            model = s.props.model_alias or (
                s.props.model_path.rsplit("/", 1)[-1] if s.props.model_path else None
            )
            if model:
                add("lltui_llama_model_info", (*lb, ("model", model)), 1.0)
        for d in s.placement:
            for kind, mib in (
                ("model", d.model_mib),
                ("kv", d.kv_mib),
                ("compute", d.compute_mib),
                ("output", d.output_mib),
                ("rs", d.rs_mib),  # a recurrent model's state; the two below only where held
                ("moe_cache", d.moe_cache_mib),  # (they were left out of the device's sum)
            ):
                if mib or kind not in ("rs", "moe_cache"):
                    add("lltui_llama_device_memory_bytes",
                        (*lb, ("device", d.name), ("kind", kind)), round(mib * MIB))  # fmt: skip
            if d.layers:
                add("lltui_llama_device_layers", (*lb, ("device", d.name)), len(d.layers))
        add("lltui_llama_kv_tokens", lb, s.kv_tokens)
        if s.prompt_cache is not None:
            pc = s.prompt_cache.to_json()
            add("lltui_llama_prompt_cache_bytes", lb, pc["bytes"])
            add("lltui_llama_prompt_cache_limit_bytes", lb, pc["limit_bytes"])
            add("lltui_llama_prompt_cache_prompts", lb, pc["prompts"])
        for g in s.kv:
            dl = (*lb, ("device", g.device))
            add("lltui_llama_kv_used_bytes", dl, g.used_bytes)
            add("lltui_llama_kv_capacity_bytes", dl, g.capacity_bytes)
            add("lltui_llama_kv_seconds_to_full", dl, g.seconds_to_full)
    return tuple(
        Family(name, kind, text, unit, tuple(rows.get(name, ())))
        for name, (kind, text, unit) in LLAMA_SERIES.items()
    )


def plan_families(plans: Sequence[PlanReality], *, host: str) -> tuple[Family, ...]:
    """Each server's plan per GPU beside what its process holds there now (a GPU the plan
    gave nothing has no planned sample; a driver that hides the process's memory, no held)."""
    planned: list[tuple[tuple[tuple[str, str], ...], float]] = []
    held: list[tuple[tuple[tuple[str, str], ...], float]] = []
    for plan in plans:
        for r in plan.rows:
            lb = (("host", host), ("server", plan.server), ("pid", str(plan.pid)),
                  ("gpu", str(r.gpu_index)))  # fmt: skip
            if r.planned_bytes is not None:
                planned.append(((*lb, ("device", r.device or "")), float(r.planned_bytes)))
            if r.held_bytes is not None:
                held.append((lb, float(r.held_bytes)))
    return (
        Family("lltui_llama_gpu_planned_bytes", "gauge",
               "Memory a llama-server's load planned on a GPU (its log, else lltui's "
               "prediction).", "bytes", tuple(planned)),
        Family("lltui_llama_gpu_held_bytes", "gauge",
               "Memory a llama-server's process holds on a GPU now.", "bytes", tuple(held)),
    )  # fmt: skip
