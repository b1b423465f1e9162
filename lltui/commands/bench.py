"""``lltui bench MODEL [llama-server flags] [--budget S] [--quick] [--json]``: measure this rig
with llama-bench, compare with the speed prediction, keep the calibration."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError, print_json

if TYPE_CHECKING:
    from lltui.services.bench import BenchProgress, BenchReport

HELP = """\
usage: lltui bench MODEL [llama-server flags] [--budget S] [--quick] [--no-store] [--json]

Run llama-bench on this rig's GPUs (or its CPU) at a few prompt and decode points, set each
result beside the speed lltui predicts for the same command, and keep the calibration for
this rig (GPU models, driver, CPU; under ~/.local/share/lltui/bench): later `lltui fit`,
`quant` and `launch` predictions on this rig use it and say "calibrated on this rig, DATE".

MODEL is a GGUF file, or hf:OWNER/REPO[:FILE|QUANT][@REV] / an https URL of one not
downloaded: lltui then writes a GGUF of the same shape from its header (the real tensor
names, shapes and types; no weights; routing spread across the experts) and benches that.
llama-bench comes from `lltui llama install` or beside the llama-server on PATH.

The runs: the flags as given (default: everything on the GPUs) at pp512 and tg128, on an
empty and a 4096-token context; on a rig with GPUs also everything on the host (-ngl 0).
llama-server flags understood: -ngl -ot --cpu-moe --n-cpu-moe -fa -b -ub -ctk -ctv -nkvo -sm
-ts -mg -dev -t (others are accepted and ignored).

lltui options:
  --budget S   stop llama-bench after S seconds in all (default 300); what ran counts
  --quick      one run per point, no filled-context point
  -r N         llama-bench repetitions per point (default 2)
  --no-store   measure and compare, keep nothing
  --json       print JSON (a failure: {"error": ...})
"""

OWN_VALUE = ("--budget", "-r")
OWN_FLAGS = ("--json", "--quick", "--no-store", "-h", "--help")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bench",
        help="measure this rig with llama-bench and calibrate the speed predictions",
        description=HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        prefix_chars="\x00",
    )
    p.add_argument("argv", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lltui.services.bench import BenchFailed, run_bench

    argv = list(args.argv)
    as_json = "--json" in argv
    try:
        request = _request(argv)
    except CliError as exc:
        raise CliError(str(exc), exc.code) from None
    if request is None:
        return 0
    show = sys.stderr.isatty() and not as_json
    try:
        report = run_bench(request, _progress if show else None)
    except BenchFailed as exc:
        raise CliError(str(exc), exc.code) from None
    finally:
        if show:
            sys.stderr.write("\r\x1b[K")
    if as_json:
        print_json(to_json(report))
    else:
        print(to_text(report))
    return 0


def _request(argv: list[str]) -> Any:
    from lltui.commands.fit import split_args
    from lltui.core.llama.args import parse_llama_args
    from lltui.services.bench import BenchRequest

    words = _split(argv)
    if words is None:
        sys.stdout.write(HELP)
        return None
    llama, values, switches = words
    parsed = split_args(llama, "bench")
    if parsed.stray is not None:
        raise CliError(f"bench: unexpected argument {parsed.stray!r} (one model only)", 2)
    try:
        args = parse_llama_args(parsed.llama)
    except ValueError as exc:
        raise CliError(f"bench: {exc}", 2) from None
    model = parsed.model or args.model_path
    if not model:
        raise CliError("bench: no model: give MODEL.gguf or hf:OWNER/REPO", 2)
    budget = _number(values.get("--budget", "300"), "--budget", 1.0)
    reps = int(_number(values.get("-r", "2"), "-r", 1.0))
    return BenchRequest(
        model=model,
        args=args,
        budget_s=budget,
        repetitions=reps,
        quick="--quick" in switches,
        store="--no-store" not in switches,
    )


def _split(argv: list[str]) -> tuple[list[str], dict[str, str], set[str]] | None:
    llama: list[str] = []
    values: dict[str, str] = {}
    switches: set[str] = set()
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            return None
        if a in OWN_FLAGS:
            switches.add(a)
        elif a in OWN_VALUE:
            if i + 1 >= len(argv):
                raise CliError(f"bench: {a} expects a value", 2)
            values[a] = argv[i + 1]
            i += 1
        else:
            llama.append(a)
        i += 1
    return llama, values, switches


def _number(text: str, flag: str, minimum: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"bench: {flag} expects a number, got {text!r}", 2) from None
    if not value >= minimum or value > 1e6:
        raise CliError(f"bench: {flag} must be at least {minimum:g}", 2)
    return value


def _progress(p: BenchProgress) -> None:
    width = 24
    filled = int(width * p.done / p.total) if p.total else 0
    bar = "#" * filled + "-" * (width - filled)
    line = f"[{bar}] {p.done}/{p.total} {p.elapsed_s:4.0f}/{p.budget_s:.0f} s  {p.label}"
    sys.stderr.write("\r\x1b[K" + line[:120])
    sys.stderr.flush()


def to_json(r: BenchReport) -> dict[str, Any]:
    cal = r.calibration
    return {
        "model": r.model,
        "benched": r.benched_path,
        "same_shape": r.same_shape,
        "rig": {"gpus": list(r.rig.gpus), "driver": r.rig.driver, "cpu": r.rig.cpu},
        "host": r.host,
        "llama_build": r.llama_build,
        "points": [
            {
                "config": p.config,
                "test": p.test,
                "measured_tps": round(p.measured_tps, 2),
                "stddev_tps": round(p.stddev_tps, 2),
                "predicted_tps": round(p.predicted_tps, 2),
                "miss": None if p.miss is None else round(p.miss, 4),
                "calibrated_tps": round(p.calibrated_tps, 2),
            }
            for p in r.points
        ],
        "calibration": None
        if cal is None
        else {
            "date": cal.date,
            "gpu_decode": cal.gpu_decode,
            "gpu_prefill": cal.gpu_prefill,
            "host_decode": cal.host_decode,
            "host_prefill": cal.host_prefill,
            "points": cal.points,
        },
        "stored": r.stored,
        "not_stored": r.not_stored,
        "skipped_rows": r.skipped_rows,
        "store_skipped": r.store_skipped,
        "stopped": r.stopped,
        "seconds": round(r.elapsed_s, 1),
    }


def to_text(r: BenchReport) -> str:
    from lltui.core.speed.calibration import miss_pct

    what = "a same-shape GGUF written from its header" if r.same_shape else r.benched_path
    lines = [
        f"bench: {r.model} ({what})",
        f"rig: {r.rig.describe()}; llama.cpp {r.llama_build}",
        f"host: {r.host}",
        "",
        f"{'run':30s} {'test':14s} {'measured':>10s} {'predicted':>10s}  measured vs predicted",
    ]
    for p in r.points:
        lines.append(
            f"{p.config[:30]:30s} {p.test:14s} {p.measured_tps:10.1f} {p.predicted_tps:10.1f} "
            f"{miss_pct(p.measured_tps, p.predicted_tps):>8s}"
        )
    if not r.points:
        lines.append("  (no test finished)")
    cal = r.calibration
    if cal is not None:
        lines += [
            "",
            f"calibration ({cal.points} points on this rig): time measured / predicted: "
            f"GPU decode x{cal.gpu_decode:.2f}, prompt x{cal.gpu_prefill:.2f}; "
            f"host decode x{cal.host_decode:.2f}, prompt x{cal.host_prefill:.2f}",
        ]
    if r.skipped_rows:
        lines.append(
            f"skipped {r.skipped_rows} llama-bench results with no usable speed "
            "(NaN, infinite, zero or negative)"
        )
    if r.store_skipped:
        lines.append(f"left out {r.store_skipped} stored points that were no measurement")
    if r.stored:
        lines.append(f"kept in {r.stored}: predictions on this rig now use it")
    if r.not_stored:
        lines.append(f"not kept: {r.not_stored}")
    if r.stopped:
        lines.append(f"stopped early: {r.stopped}")
    return "\n".join(lines)
