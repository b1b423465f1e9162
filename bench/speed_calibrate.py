"""The speed model against published llama-bench results, and the fit of its constants.

Reports, for the points of tests/fixtures/llama_bench_published.json (and this machine's own
CPU measurements, tests/fixtures/cpu_bench_measured.json), how many are within the target
(decode 20%, prompt 35%) and the median and worst relative error of decode and prompt speed,
in every group of tests/support/speed_published.py (on GPU / host experts / host layers / -nkvo /
CPU only; dense / MoE; one / several GPUs; -sm layer / tensor; depth 0 / deep; the GPU
family, or the vector unit for CPU-only runs), separately for the points the constants were
fitted to ("fit") and for those they never saw ("holdout": whole sources held out). Points
marked as exceptions (old builds, paths not modelled) are counted apart.

    PYTHONPATH=$PWD:tests python bench/speed_calibrate.py            # the report
    PYTHONPATH=$PWD:tests python bench/speed_calibrate.py --markdown # README's held-out table
    PYTHONPATH=$PWD:tests python bench/speed_calibrate.py --before REV  # and lltui at REV
    PYTHONPATH=$PWD:tests python bench/speed_calibrate.py --fit      # refit; print constants

``--fit``: coordinate descent on a log-error loss over the fit points only; it prints the
values to copy into lltui/core/speed/params.py.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
# --before's child process imports lltui as it was at that revision (LLTUI_AT): this tree's
# first on the path had made it report today's model under the old revision's name
sys.path[:0] = [str(HERE.parent / "tests"), os.environ.get("LLTUI_AT") or str(HERE.parent)]

from support import speed_published as sp  # noqa: E402

from lltui.core.speed.params import PARAMS, SpeedParams  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CPU_FIXTURE = ROOT / "tests" / "fixtures" / "cpu_bench_measured.json"
DECODE_TARGET, PREFILL_TARGET = 0.20, 0.35


@dataclass(frozen=True)
class Run:
    point: sp.Point
    model: object
    result: object


def runs() -> list[Run]:
    points = [*sp.load_points(), *sp.load_cpu_points(CPU_FIXTURE)]
    fitted = sp.fit_all(points)
    return [Run(p, *fitted[p.id]) for p in points]


def log_errors(rows: Iterable[Run], predict: Callable[[Run], float | None]) -> list[tuple]:
    out = []
    for r in rows:
        got = predict(r)
        out.append((r.point, None if not got or got <= 0 else math.log(got / r.point.tps)))
    return out


# --- the report ----------------------------------------------------------------------------------


def within(p: sp.Point, e: float | None) -> bool:
    """Whether a point's log error is within its target (decode 20%, prompt 35%)."""
    target = DECODE_TARGET if p.decode else PREFILL_TARGET
    return e is not None and abs(e) <= math.log(1 + target)


def grouped(errors: list[tuple], split: str, decode: bool) -> dict[str, list[tuple]]:
    """The points of one split and kind, by group, in the order groups first come."""
    out: dict[str, list[tuple]] = {}
    for p, e in errors:
        if p.split == split and p.decode == decode:
            for g in sp.groups(p):
                out.setdefault(g, []).append((p, e))
    return out


def report(errors: list[tuple], title: str) -> None:
    print(f"\n## {title}")
    for split in ("fit", "holdout"):
        for decode in (True, False):
            groups = grouped(errors, split, decode)
            if not groups:
                continue
            target = DECODE_TARGET if decode else PREFILL_TARGET
            what = "decode (tg)" if decode else "prompt (pp)"
            print(f"\n{split} points, {what}: within {target:.0%} / median / worst (n)")
            for g in sorted(groups, key=sp.group_rank):
                print("  " + _line(g, groups[g]))


def _line(group: str, items: list[tuple]) -> str:
    regular = [(p, e) for p, e in items if not p.exception]
    refused = sum(1 for _p, e in regular if e is None)
    errs = [abs(e) for _p, e in regular if e is not None]
    exc = sum(1 for p, _e in items if p.exception)
    extra = f", {exc} exception(s) apart" if exc else ""
    extra += f", {refused} refused" if refused else ""
    if not errs:
        return f"{group:16s} n={len(regular):3d}{extra}"
    med = math.exp(statistics.median(errs)) - 1
    worst = math.exp(max(errs)) - 1
    ok = sum(within(p, e) for p, e in regular)
    return (
        f"{group:16s} within {ok:3d}/{len(regular):3d} ({100 * ok / len(regular):3.0f}%)  "
        f"median {100 * med:5.1f}%  worst {100 * worst:6.1f}%{extra}"
    )


def markdown(errors: list[tuple]) -> str:
    """The held-out points per group, as README's speed section shows them."""
    dec, pre = grouped(errors, "holdout", True), grouped(errors, "holdout", False)
    rows = [
        "| held out | decode within 20% | median | prompt within 35% | median |",
        "|---|---|---|---|---|",
    ]
    for g in sorted(dict.fromkeys([*dec, *pre]), key=sp.group_rank):
        rows.append(f"| {g} | {_cell(dec.get(g, []))} | {_cell(pre.get(g, []))} |")
    return "\n".join(rows)


def _cell(items: list[tuple]) -> str:
    regular = [(p, e) for p, e in items if not p.exception]
    errs = [abs(e) for _p, e in regular if e is not None]
    if not errs:
        return "none | "
    ok = sum(within(p, e) for p, e in regular)
    med = math.exp(statistics.median(errs)) - 1
    return f"{ok}/{len(regular)} ({100 * ok / len(regular):.0f}%) | {100 * med:.0f}%"


# --- the model at another revision ---------------------------------------------------------------


def predictions_at(rev: str) -> dict[int, float | None]:
    """Every point's prediction by lltui as it was at ``rev`` (its whole package, run in a
    process of its own on today's points): tokens/s by point id, None where it refused."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "archive", rev, "lltui"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        env = {**os.environ, "LLTUI_AT": tmp}
        run = subprocess.run(
            [sys.executable, __file__, "--predictions"], env=env, capture_output=True, text=True
        )
        if run.returncode != 0:  # today's point reader against that revision's lltui
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            raise SystemExit(f"--before {rev}: this bench cannot run lltui at {rev}: {last}")
        out = run.stdout
    return {int(k): v for k, v in json.loads(out).items()}


def print_predictions(rows: list[Run]) -> None:
    """The ``--predictions`` of this process's lltui, as JSON (for --before)."""
    out: dict[int, float | None] = {}
    for r in rows:
        try:
            out[r.point.id] = sp.predict(r.point, r.model, r.result)
        except (ZeroDivisionError, ValueError, TypeError):
            out[r.point.id] = None  # that revision refused the run
    print(json.dumps(out))


# --- fitting ---------------------------------------------------------------------------------

SCALARS = [
    "layer_s",
    "moe_layer_s",
    "no_graph_layer_s",
    "prefill_layer_s",
    "tile_tokens",
    "act_passes",
    "fa_eff",
    "pcie_hop_s",
    "host_hop_s",
    "host_bw_eff",
    "host_lpddr_eff",
    "host_core_gbs",
    "host_layer_s",
    "host_op_layer_s",
    "host_attn_eff",
]
ARCHS = [(6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0), (12, 0)]
F16_DATA = [(7, 0), (8, 0), (8, 6), (8, 9), (9, 0)]


def get(p: SpeedParams, name):
    if isinstance(name, tuple) and name[0] in ("hd", "hp"):
        return (p.host_decode_eff if name[0] == "hd" else p.host_prefill_eff)[name[1]]
    if isinstance(name, tuple) and name[0] == "q":
        tag, which = name[1], name[2]
        row = next(q for q in p.quant_slowdown if q[0] == tag)
        return row[1] if which == "dec" else row[2]
    if isinstance(name, tuple):
        arch, field = name
        return getattr(p.arch[arch], field)
    return getattr(p, name)


EFFICIENCIES = {
    "host_bw_eff",
    "host_lpddr_eff",
    "host_attn_eff",
    "pcie_eff",
    "pageable_eff",
    "fa_eff",
}


# physical floors: flash attention runs on the tensor cores at a good part of their rate
FLOORS = {"fa_eff": 0.2}
# and ceilings: ~20 ops a layer, a barrier of a few microseconds each
CEILINGS = {
    "host_layer_s": 100e-6,
    "host_op_layer_s": 30e-6,
    "host_bw_eff": 0.8,
    "host_lpddr_eff": 0.8,
}


def _capped(name, value: float) -> float:
    """Fractions of a datasheet rate stay fractions (and above a floor where physics sets
    one)."""
    is_eff = name in EFFICIENCIES or (isinstance(name, tuple) and name[0] in ("hd", "hp"))
    is_eff = is_eff or (isinstance(name, tuple) and name[-1] in ("decode", "mmq", "f16"))
    if isinstance(name, str):
        value = min(max(value, FLOORS.get(name, 0.0)), CEILINGS.get(name, math.inf))
    return min(value, 1.0) if is_eff else value


def put(p: SpeedParams, name, value) -> SpeedParams:
    value = _capped(name, value)
    if isinstance(name, tuple) and name[0] in ("hd", "hp"):
        key = "host_decode_eff" if name[0] == "hd" else "host_prefill_eff"
        table = dict(getattr(p, key))
        table[name[1]] = value
        return replace(p, **{key: table})
    if isinstance(name, tuple) and name[0] == "q":
        tag, which = name[1], name[2]
        rows = tuple(
            (t, value if which == "dec" else d, value if which == "pre" else m)
            if t == tag
            else (t, d, m)
            for t, d, m in p.quant_slowdown
        )
        return replace(p, quant_slowdown=rows)
    if isinstance(name, tuple):
        arch, field = name
        table = dict(p.arch)
        table[arch] = replace(table[arch], **{field: value})
        return replace(p, arch=table)
    return replace(p, **{name: value})


def predictor(params: SpeedParams) -> Callable[[Run], float | None]:
    def predict(r: Run) -> float | None:
        return sp.predict(r.point, r.model, r.result, params)

    return predict


def loss(rows: list[Run], params: SpeedParams) -> float:
    # squared log error, plus a steep price beyond the targets (20% decode, 35% prompt)
    total = 0.0
    for p, e in log_errors(rows, predictor(params)):
        if e is None:
            total += 100.0
            continue
        limit = math.log(1 + (DECODE_TARGET if p.decode else PREFILL_TARGET))
        total += e * e + 10 * max(0.0, abs(e) - 0.8 * limit) ** 2
    return total


def fit(rows: list[Run], params: SpeedParams, only_host: bool = False) -> SpeedParams:
    fit_rows = [r for r in rows if r.point.split == "fit" and not r.point.exception]
    names: list = [*SCALARS, *[(a, f) for a in ARCHS for f in ("decode", "mmq")]]
    names += [(a, "f16") for a in F16_DATA]
    names += [("q", "_k", "dec"), ("q", "_k", "pre"), ("q", "mxfp4", "pre")]
    names += [("hd", k) for k in params.host_decode_eff]
    names += [("hp", k) for k in params.host_prefill_eff]
    if only_host:
        names = [n for n in names if (isinstance(n, str) and n.startswith("host_"))]
        names += [("hd", k) for k in params.host_decode_eff]
        names += [("hp", k) for k in params.host_prefill_eff]
        fit_rows = [r for r in fit_rows if r.point.offload]
    best = loss(fit_rows, params)
    for rnd in range(4):
        for name in names:
            base = get(params, name)
            for step in (0.7, 0.85, 0.93, 1.07, 1.15, 1.4):
                trial = put(params, name, base * step)
                got = loss(fit_rows, trial)
                if got < best - 1e-9:
                    best, params = got, trial
            # keep the best step found for this name
        print(f"round {rnd}: loss {best:.4f}", file=sys.stderr)
    for name in names:
        print(name, round(get(params, name), 8))
    return params


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--before", metavar="REV", help="also report the model as it was at REV")
    ap.add_argument("--points", action="store_true", help="print every point's ratio")
    ap.add_argument("--only-host", action="store_true", help="--fit: the host's constants only")
    ap.add_argument("--markdown", action="store_true", help="print the held-out table only")
    ap.add_argument("--predictions", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.predictions:
        print_predictions(runs())
        return 0
    rows = runs()
    if args.markdown:
        print(markdown(log_errors(rows, predictor(PARAMS))))
        return 0
    print(
        f"{len(rows)} points: {sum(r.point.split == 'fit' for r in rows)} fit, "
        f"{sum(r.point.split == 'holdout' for r in rows)} holdout"
    )
    if args.before:
        before = predictions_at(args.before)
        report(log_errors(rows, lambda r: before.get(r.point.id)), f"the model at {args.before}")
    params = fit(rows, PARAMS, only_host=args.only_host) if args.fit else PARAMS
    errors = log_errors(rows, predictor(params))
    report(errors, "this model")
    if args.points:
        for p, e in errors:
            ratio = "refused" if e is None else f"{math.exp(e):5.2f}"
            print(
                f"{p.id:4d} {p.split:7s} {p.family:16s} {sp.path_group(p):12s} {p.n_gpus} "
                f"{p.model:22s} {p.quant:9s} {p.test:16s} {ratio}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
