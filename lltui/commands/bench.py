"""``lltui bench MODEL [llama-server flags] [--budget S] [--quick] [--json]``: measure this rig
with llama-bench, compare with the speed prediction, keep the calibration;
``lltui bench --show`` / ``--reset``: what this rig keeps, and clearing it."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

from lltui.commands import CliError, print_json
from lltui.commands.own_options import options_help, split_own
from lltui.core.jsonout import fields_of
from lltui.core.stop_signals import StopSignal, raised_on_stop, signal_exit_code
from lltui.core.text import counted

if TYPE_CHECKING:
    from lltui.services.bench import BenchProgress, BenchReport, StoredCalibration

HELP = f"""\
usage: lltui bench MODEL [llama-server flags] [--budget S] [--quick] [--no-store] [--busy-ok]
                   [--json]
       lltui bench --show [--json]      what this rig keeps: the scales, each point, where
       lltui bench --reset [--json]     forget this rig's calibration

Run llama-bench on this rig's GPUs (or its CPU) at a few prompt and decode points, set each
result beside the speed lltui predicts for the same command, and keep the calibration for
this rig (GPU models, driver, CPU; one file under ~/.local/share/lltui/bench, or
$XDG_DATA_HOME/lltui/bench): later `lltui fit`, `quant` and `launch` predictions on this rig
use it and say "calibrated on this rig from N points, DATE". A run during which other
processes took more than 10% of the CPUs' time, or on a GPU another process kept more than
10% busy (looked at just before and after llama-bench), is shown but left out (its speeds are
partly theirs; --busy-ok keeps it), and so is a toy model's decode (it times launches and
thread barriers, not the work the calibration scales). `lltui launch` adds a served request's
speed when the host was otherwise idle and the model large enough (several such points must
agree before the calibration moves; see --show).

MODEL is a GGUF file, or hf:OWNER/REPO[:FILE|QUANT][@REV] / an https URL of one not
downloaded: lltui then writes a GGUF of the same shape from its header (the real tensor
names, shapes and types; no weights; routing spread across the experts) and benches that.
llama-bench comes from `lltui llama install` or beside the llama-server on PATH.

The runs: the flags as given (default: everything on the GPUs) at pp512 and tg128, on an
empty and a 4096-token context; on a rig with GPUs also everything on the host (-ngl 0).
llama-server flags understood: -ngl -ot --cpu-moe --n-cpu-moe -fa -b -ub -ctk -ctv -nkvo -sm
-ts -mg -dev -t (others are accepted and ignored).

lltui options:
{options_help("bench")}
"""

MISS_HEAD = "measured vs predicted"


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
    if "--show" in argv or "--reset" in argv:
        return _store_command(argv, as_json)
    try:
        request = _request(argv)
    except CliError as exc:
        raise CliError(str(exc), exc.code) from None
    if request is None:
        return 0
    show = sys.stderr.isatty() and not as_json
    signum: int = signal.SIGINT  # what stopped it, if anything: Ctrl-C unless a stop signal

    def stopped(by: int) -> BaseException:
        nonlocal signum
        signum = by
        return StopSignal(by)  # (before any test finished it ends lltui with its exit code)

    try:
        with raised_on_stop(stopped):  # llama-bench stops with lltui, however it is stopped
            report = run_bench(request, _progress if show else None)
    except BenchFailed as exc:
        raise CliError(str(exc), exc.code) from None
    except KeyboardInterrupt:  # before any test finished (after one, the report says so)
        raise CliError(
            "bench: stopped before any test finished: nothing was measured or kept",
            signal_exit_code(signum),
        ) from None
    finally:
        if show:
            sys.stderr.write("\r\x1b[K")
    if as_json:
        print_json(to_json(report))
    else:
        print(to_text(report))
    from lltui.services.bench import INTERRUPTED

    if report.stopped == INTERRUPTED:  # shown, not kept; exit 130 for Ctrl-C, 143 for SIGTERM
        return signal_exit_code(signum)
    if not report.points:  # nothing measured is no calibration: not a success
        why = report.stopped or "llama-bench printed no result lltui could read"
        sys.stderr.write(f"lltui: bench: no test finished ({why})\n")
        return 1
    return 0


def _store_command(argv: list[str], as_json: bool) -> int:
    from lltui.services.bench import reset_calibration, show_calibration

    rest = [a for a in argv if a not in ("--show", "--reset", "--json")]
    if rest or ("--show" in argv and "--reset" in argv):
        what = rest[0] if rest else "--show with --reset"
        raise CliError(f"bench: --show and --reset take no model or flags (got {what!r})", 2)
    if "--reset" in argv:
        from lltui.services.bench import BenchFailed

        try:
            shown = reset_calibration()
        except BenchFailed as exc:
            raise CliError(f"bench: {exc}", exc.code) from None
        if as_json:
            print_json({"path": shown.path, "removed": shown.record is not None})
        elif shown.record is not None:
            print(f"removed {shown.path}: predictions on this rig no longer use a calibration")
        else:
            print(f"no calibration kept for this rig ({shown.path})")
        return 0
    shown = show_calibration()
    if as_json:
        print_json(stored_to_json(shown))
    else:
        print(stored_to_text(shown))
    return 0


def stored_to_json(s: StoredCalibration) -> dict[str, Any]:
    from lltui.core.speed.calibration import miss

    rec = s.record
    return {
        "rig": {"gpus": list(s.rig.gpus), "driver": s.rig.driver, "cpu": s.rig.cpu},
        "path": s.path,
        "llama_build": rec.llama_build if rec else None,
        "calibration": _calibration_json(rec.calibration) if rec else None,
        "points": [
            {
                **fields_of(p, "model config test source date measured_tps predicted_tps"),
                "miss": _round(miss(p.measured_tps, p.predicted_tps)),
            }
            for p in (rec.points if rec else ())
        ],
        "skipped": rec.skipped if rec else 0,
        "set_aside": [aside for aside, _why in s.set_aside],
    }


def stored_to_text(s: StoredCalibration) -> str:
    from lltui.core.speed.calibration import miss_pct
    from lltui.core.text import one_line

    rec = s.record
    kept = (
        f"kept in: {s.path}" if rec is not None else f"none stored yet; would be kept in: {s.path}"
    )
    lines = [f"rig: {s.rig.describe()}", kept]
    if rec is None or not rec.points:
        lines.append("no calibration: predictions on this rig use the speed model as it is")
    else:
        lines += _scales_lines(rec.calibration)
        lines += ["", f"{'test':16s} {'source':12s} {'date':10s} {'measured':>9s} "
                  f"{'predicted':>9s} {MISS_HEAD}  run"]  # fmt: skip
        for p in rec.points:
            lines.append(
                f"{p.test[:16]:16s} {p.source[:12]:12s} {p.date[:10]:10s} "
                f"{p.measured_tps:9.1f} {p.predicted_tps:9.1f} "
                f"{miss_pct(p.measured_tps, p.predicted_tps):>{len(MISS_HEAD)}s}  "
                f"{one_line(p.config)} ({one_line(p.model)})"
            )
    if rec is not None and rec.skipped:
        lines.append(f"left out {rec.skipped} stored points that were no measurement")
    for aside, why in s.set_aside:
        lines.append(f"set aside ({why}): {aside}")
    if rec is not None:  # (a store to forget: --reset leaves what is set aside)
        lines.append("`lltui bench --reset` forgets it")
    return "\n".join(lines)


def _scales_lines(cal: Any) -> list[str]:
    from lltui.core.speed.calibration import MIN_AGREE

    said = cal.note() if cal.points else "not calibrated yet"
    out = [
        f"{said}: time measured / predicted: "
        f"GPU decode x{cal.gpu_decode:.2f}, prompt x{cal.gpu_prefill:.2f}; "
        f"host decode x{cal.host_decode:.2f}, prompt x{cal.host_prefill:.2f}; "
        f"copies from host memory x{cal.copy:.2f}; all-reduces x{cal.reduce:.2f}"
    ]
    if cal.held:
        out.append(
            f"held: {counted(cal.held, 'served request')}, until "
            f"{MIN_AGREE} of one kind of work agree"
        )
    return out


def _calibration_json(cal: Any) -> dict[str, Any]:
    return {
        **fields_of(
            cal, "date gpu_decode gpu_prefill host_decode host_prefill copy reduce points held"
        ),
        "note": cal.note() if cal.points else None,
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _request(argv: list[str]) -> Any:
    from lltui.core.cmdline.args import parse_llama_args
    from lltui.services.bench import BenchRequest

    words = split_own(argv, "bench")
    if words.help:
        sys.stdout.write(HELP)
        return None
    model, llama, stray = words.single()
    if stray is not None:
        raise CliError(f"bench: unexpected argument {stray!r} (one model only)", 2)
    try:
        args = parse_llama_args(llama)
    except ValueError as exc:
        raise CliError(f"bench: {exc}", 2) from None
    model = model or args.model_path
    if not model:
        raise CliError("bench: no model: give MODEL.gguf or hf:OWNER/REPO", 2)
    budget = _number(words.last("--budget") or "300", "--budget", 1.0)
    repeats = _number(words.last("-r") or "2", "-r", 1.0)
    if not repeats.is_integer():  # (1.5 ran once, as if 1 were asked)
        raise CliError(f"bench: -r: expected a whole number of repetitions, got {repeats:g}", 2)
    reps = int(repeats)
    return BenchRequest(
        model=model,
        args=args,
        budget_s=budget,
        repetitions=reps,
        quick="--quick" in words.switches,
        store="--no-store" not in words.switches,
        busy_ok="--busy-ok" in words.switches,
    )


MAX_NUMBER = 1e6  # repetitions, seconds, threads: past any run anyone waits for


def _number(text: str, flag: str, minimum: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise CliError(f"bench: {flag} expects a number, got {text!r}", 2) from None
    if not minimum <= value <= MAX_NUMBER:  # nan and inf too
        raise CliError(f"bench: {flag} must be from {minimum:g} to {MAX_NUMBER:g}", 2)
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
                "miss": _round(p.miss),
                "calibrated_tps": round(p.calibrated_tps, 2),
                "left_out": p.left_out,
            }
            for p in r.points
        ],
        "calibration": None if cal is None else _calibration_json(cal),
        "left_out": list(r.left_out),
        **fields_of(r, "stored not_stored skipped_rows store_skipped stopped"),
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
        f"{'run':30s} {'test':14s} {'measured':>10s} {'predicted':>10s} {MISS_HEAD}",
    ]
    for p in r.points:
        lines.append(
            f"{p.config[:30]:30s} {p.test:14s} {p.measured_tps:10.1f} {p.predicted_tps:10.1f} "
            f"{miss_pct(p.measured_tps, p.predicted_tps):>{len(MISS_HEAD)}s}"
        )
    if not r.points:
        lines.append("  (no test finished)")
    cal = r.calibration
    if cal is not None:
        lines += ["", *_scales_lines(cal)]
    if r.skipped_rows:
        lines.append(
            f"skipped {r.skipped_rows} llama-bench results with no usable speed "
            "(NaN, infinite, zero or negative)"
        )
    if r.store_skipped:
        lines.append(f"left out {r.store_skipped} stored points that were no measurement")
    lines += r.left_out
    if r.stored:
        lines.append(f"kept in {r.stored}: predictions on this rig now use it")
    if r.not_stored:
        lines.append(f"not kept: {r.not_stored}")
    if r.stopped:
        lines.append(f"stopped early: {r.stopped}")
    return "\n".join(lines)
