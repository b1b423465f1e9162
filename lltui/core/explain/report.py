"""An explained log as ``explain --json`` and as text.

The JSON contract: ``build`` (int or null), ``failed`` (null or ``{device, needed_bytes,
free_bytes, message}``), ``buffers`` (one object per buffer line the log printed:
``{device, kind, logged_bytes, predicted_bytes}``, ``device`` as llama.cpp names it,
``kind`` model, kv, rs, compute or output, ``predicted_bytes`` null without a header; a
split model's weights lines of one device are compared as their sum, on the first, with
``summed_lines`` naming the others),
``unparsed`` (``[{line, text}]``) and ``case``: the comparison as data a user attaches to a
bug report (hparams, tensor types, flags, devices, free memory, every buffer line, build).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from lltui.core.explain.compare import BufferCheck
from lltui.core.explain.failure import Failed
from lltui.core.explain.models import ExplainReport
from lltui.core.jsonout import fields_of
from lltui.core.llama.builds import BuildRules
from lltui.core.memory.hparams import Hparams
from lltui.core.units import MIB

CASE_FORMAT = 1


def _mib(n: int | None) -> str:
    return "-" if n is None else f"{n / MIB:.2f}"


def build_note(r: ExplainReport) -> str | None:
    """Why the log's own build cannot be told (None: the log or --build says it): its
    figures then follow a build taken from elsewhere, and the answer says so."""
    if r.build_source == "--build" or r.facts.build is not None:
        return None
    return r.facts.build_note or "the log prints no build line"


def failed_to_json(f: Failed | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        **fields_of(
            f,
            "device needed_bytes free_bytes message line kind stage short_bytes "
            "free_at_load_bytes held_bytes predicted_bytes",
        ),
        "free_below_bytes": f.free_below_bytes if f.free_bytes is None else None,
    }


def check_to_json(c: BufferCheck) -> dict[str, Any]:
    b = c.line
    out: dict[str, Any] = {
        **fields_of(b, "line device kind logged_bytes"),
        "predicted_bytes": c.predicted_bytes,
        "logged_mib": b.mib_text,
        "diff_bytes": c.diff_bytes,
        "exact": c.exact if c.predicted_bytes is not None else None,
        **fields_of(b, "part load"),
    }
    if b.cache is not None:
        out["cache"] = b.cache
    if c.why is not None:
        out["note"] = c.why
    if c.also:  # a split model's other files: their lines add to this one's logged bytes
        out["summed_lines"] = [a.line for a in c.also]
    return out


def rules_to_json(rules: BuildRules) -> dict[str, Any]:
    values = {
        f.name: getattr(rules, f.name)
        for f in fields(rules)
        if f.name not in ("build", "tool", "notes")
    }
    return {
        "follows": rules.build,
        **fields_of(rules, "tool label"),
        "values": values,
        "not_modelled": [n for n in rules.notes if n.startswith("not modelled")],
        "notes": [n for n in rules.notes if not n.startswith("not modelled")],
    }


def hparams_to_json(hp: Hparams) -> dict[str, Any]:
    return {
        "arch": hp.arch,
        "n_layer": hp.n_layer_all,
        **fields_of(hp, "n_embd n_vocab n_ctx_train"),
        "n_head": hp.n_head[0] if hp.n_head else 0,
        "n_head_kv": hp.n_head_kv[0] if hp.n_head_kv else 0,
        **fields_of(hp, "head_k head_v"),
        "n_ff": max(hp.n_ff) if hp.n_ff else 0,
        **fields_of(hp, "n_expert n_expert_used n_swa"),
        "swa_layers": sum(hp.is_swa),
        "recurrent_layers": sum(hp.is_recurrent),
        **fields_of(hp, "mla kv_lora_rank"),
    }


def case_to_json(r: ExplainReport) -> dict[str, Any]:
    """Everything needed to redo the comparison elsewhere, and nothing of this machine."""
    f = r.facts
    return {
        "format": CASE_FORMAT,
        **fields_of(r, "build build_source"),
        "tool": r.rules.tool,
        "rules": rules_to_json(r.rules)["values"],
        "model": r.model_ref,
        "hparams": hparams_to_json(r.hparams) if r.hparams is not None else None,
        "hparams_printed": dict(f.model_info),
        "metadata_printed": dict(f.model_kv),
        "tensor_types": dict(r.tensor_types),
        "flags": list(r.settings.argv),
        "flags_from_log": list(r.settings.from_log),
        "flags_assumed": list(r.settings.assumed),
        "command": list(f.command),
        "context": dict(f.context),
        "devices": [fields_of(d, "name description free_mib total_mib source") for d in f.devices],
        "kv_sizes": [
            fields_of(k, "line size_mib cells layers seqs k_type v_type k_mib v_mib cache")
            for k in f.kv_sizes
        ],
        "buffers": [
            {
                **fields_of(b, "line device kind"),
                "mib": b.mib_text,
                **fields_of(b, "part load cache"),
            }
            for b in f.buffers
        ],
        "offloaded": list(f.offloaded) if f.offloaded else None,
        "failed": failed_to_json(r.failed),
    }


def summary_counts(r: ExplainReport) -> dict[str, int]:
    compared = r.compared()
    return {
        "lines": len(r.checks),
        "compared": len(compared),
        "exact": sum(c.exact for c in compared),
        "within_1pct": sum(c.within(0.01) for c in compared),
        "within_10pct": sum(c.within(0.10) for c in compared),
    }


def report_to_json(r: ExplainReport) -> dict[str, Any]:
    f = r.facts
    return {
        "log": {
            "path": r.source.path,
            "size_bytes": r.source.size_bytes,
            "read_bytes": r.source.read_bytes,
            "lines": r.source.lines,
            "notes": list(r.source.notes),
        },
        **fields_of(r, "build build_source"),
        "build_note": build_note(r),
        "build_range": f.build_range.label if f.build_range is not None else None,
        "rules": rules_to_json(r.rules),
        "tool": f.tool,
        "model": {"ref": r.model_ref, "header_read": r.model_read, "note": r.model_note},
        "flags": {
            "argv": list(r.settings.argv),
            "from_log": list(r.settings.from_log),
            "assumed": list(r.settings.assumed),
            "ignored": list(r.settings.ignored),
        },
        "failed": failed_to_json(r.failed),
        "fix": None
        if r.fix is None
        else {"argv": list(r.fix.argv), "flags": list(r.fix.flags), "reason": r.fix.reason},
        "devices": [
            {
                **fields_of(d, "name description free_bytes"),
                "layers": list(d.layers),
                "logged": dict(d.logged),
                "predicted": dict(d.predicted) if d.predicted is not None else None,
                "parts": dict(d.parts),
            }
            for d in r.device_rows()
        ],
        "buffers": [check_to_json(c) for c in r.checks],
        "buffers_dropped": f.buffers_dropped,
        "not_logged": [
            {"device": d, "kind": k, "predicted_bytes": n} for d, k, n in r.comparison.not_logged
        ],
        "summary": summary_counts(r),
        "unparsed": [{"line": n, "text": t} for n, t in f.unparsed],
        "unparsed_dropped": f.unparsed_dropped,
        "notes": list(r.notes),
        "case": case_to_json(r),
    }


# --- text -------------------------------------------------------------------------------------


def report_to_text(r: ExplainReport) -> str:
    f = r.facts
    out = [f"{r.source.path}: {r.source.lines} lines" + (f" ({f.tool})" if f.tool else "")]
    build = f"b{r.build}" if r.build is not None else "unknown"
    out.append(f"build: {build} ({r.build_source}); figures follow the rules of {r.rules.label}")
    if (note := build_note(r)) is not None:
        out.append(f"  the log's own build cannot be told: {note}")
    missing = [n for n in r.rules.notes if n.startswith("not modelled")]
    out += [f"  {n}" for n in r.rules.notes if not n.startswith("not modelled")]
    out.append(f"model: {r.model_ref or '-'}" + ("" if r.model_read else f" ({r.model_note})"))
    if r.model_read and r.model_note:
        out.append(f"  {r.model_note}")
    if r.settings.argv:
        out.append("flags: " + " ".join(r.settings.argv))
    out += [f"  from the log: {s}" for s in r.settings.from_log]
    out += [f"  assumed: {s}" for s in r.settings.assumed]
    if r.settings.ignored:
        out.append("  not read: " + " ".join(r.settings.ignored))
    out.append("")
    out += _device_table(r)
    out.append("")
    out += _buffer_table(r)
    counts = summary_counts(r)
    if counts["compared"]:
        out.append(
            f"{counts['compared']} buffer lines compared: {counts['exact']} exact, "
            f"{counts['within_1pct']} within 1%, {counts['within_10pct']} within 10%"
        )
    if r.comparison.not_logged:
        out.append("predicted, not in the log:" if r.checks else "predicted:")
    for dev, kind, n in r.comparison.not_logged:
        out.append(f"  {dev:<24} {kind:<8} {_mib(n):>11} MiB")
    if r.failed is not None:
        out.append("")
        out += _failed_text(r)
    if f.unparsed:
        out.append("")
        out.append(f"lines about memory not read ({len(f.unparsed) + f.unparsed_dropped}):")
        out += [f"  {n}: {t[:120]}" for n, t in f.unparsed[:10]]
    notes = [*r.source.notes, *r.notes]
    if notes:
        out.append("")
        out += [f"note: {n}" for n in notes]
    if missing:
        out.append("")
        out.append(f"{r.rules.label} changes lltui does not model:")
        out += [f"  {n.removeprefix('not modelled: ')}" for n in missing]
    return "\n".join(out)


def _device_table(r: ExplainReport) -> list[str]:
    rows = r.device_rows()
    if not r.checks:
        if r.failed is not None and r.failed.stage == "arguments":
            return [
                "no buffer lines in the log: llama-server refused its arguments, before loading"
            ]
        return [
            "no buffer lines in the log: llama-server prints them at -lv 4 (or -v); "
            "older builds and the other tools at their default verbosity"
        ]
    out = [f"{'device':<24} {'free MiB':>10} {'logged MiB':>11} {'predicted':>11}  layers"]
    for d in rows:
        logged = sum(n for _, n in d.logged) if d.logged else None  # nothing logged: -
        pred = sum(n for _, n in d.predicted) if d.predicted is not None else None
        n_layer = r.hparams.n_layer_all if r.hparams is not None else None
        layers = _ranges(d.layers, n_layer)
        cells = f"{_mib(d.free_bytes):>10} {_mib(logged):>11} {_mib(pred):>11}"
        beside = ", ".join(f"{part} {_mib(n)}" for part, n in d.parts)
        out.append(
            f"{d.name[:24]:<24} {cells}  {layers}" + (f"  (+ {beside} MiB)" if beside else "")
        )
    return out


def _ranges(all_layers: tuple[int, ...], n_layer: int | None = None) -> str:
    """``0-3,out``: the output layer (index n_layer) by name."""
    layers = tuple(il for il in all_layers if il != n_layer)
    out = ",out" if n_layer is not None and n_layer in all_layers else ""
    if not layers:
        return out[1:] or "-"
    parts = []
    start = prev = layers[0]
    for il in layers[1:]:
        if il != prev + 1:
            parts.append(f"{start}-{prev}" if prev > start else str(start))
            start = il
        prev = il
    parts.append(f"{start}-{prev}" if prev > start else str(start))
    return ",".join(parts) + out


def _buffer_table(r: ExplainReport) -> list[str]:
    if not r.checks:
        return []
    out = [
        f"{'line':>6}  {'buffer':<24} {'kind':<8} {'logged MiB':>11} {'predicted':>11} {'diff':>9}"
    ]
    for c in r.checks[:200]:
        b = c.line
        kind = b.kind + (f"/{b.cache}" if b.cache else "")
        if c.predicted_bytes is None:
            tail = f"{'-':>11} {'':>9}  {c.why or ''}"
        else:
            diff = c.diff_bytes or 0
            said = f"{'exact':>9}" if c.exact else f"{diff / MIB:>+9.2f}"
            tail = f"{_mib(c.predicted_bytes):>11} {said}" + (f"  {c.why}" if c.why else "")
        out.append(f"{b.line:>6}  {b.device[:24]:<24} {kind:<8} {b.mib_text:>11} {tail}")
    if len(r.checks) > 200:
        out.append(f"  ... {len(r.checks) - 200} more lines (--json lists them all)")
    return out


def _failed_text(r: ExplainReport) -> list[str]:
    f = r.failed
    assert f is not None
    out = [f"FAILED (line {f.line}): {f.message}"]
    if f.kind == "oom":
        serving = f.stage == "serving"
        what = f"{f.stage} " if f.stage and not serving else ""
        needed = f"{_mib(f.needed_bytes)} MiB" if f.needed_bytes is not None else "memory"
        line = f"{f.device or 'a device'} ran out allocating {what}{needed}"
        if serving:
            line += " while serving, after the model loaded (not the load's buffers)"
        if f.free_bytes is not None:
            line += f" with {_mib(f.free_bytes)} MiB free"
            if f.short_bytes is not None:
                line += f": {_mib(f.short_bytes)} MiB short"
            elif f.needed_bytes is not None:  # it had room: the limit was not the device's
                line += (
                    " (more than it asked: a limit other than the device's memory refused"
                    " it, such as ulimit -v, a container's or the driver's largest allocation)"
                )
        elif f.free_below_bytes is not None:
            line += (
                f": less than {_mib(f.free_below_bytes)} MiB was free at load (the log does "
                f"not print it; {_mib(f.held_bytes)} MiB it held in the lines above, plus "
                "the request)"
            )
        out.append(line)
        if f.predicted_bytes is not None:
            out.append(f"  lltui predicts that buffer at {_mib(f.predicted_bytes)} MiB")
    if r.fix is not None:
        out.append("a command that fits: " + " ".join(r.fix.argv))
        out.append(f"  ({r.fix.reason})")
    elif f.kind == "oom" and not r.model_read:
        out.append("give --model (the GGUF or hf:...) for a command line that fits")
    return out
