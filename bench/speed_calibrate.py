"""Fit the speed model's efficiencies to the published llama-bench points marked "fit"
(tests/fixtures/llama_bench_published.json) and report the error on those and on the
"holdout" points. Coordinate descent on a log-error loss over a few physical parameters;
prints the values to copy into lltui/core/speed/model.py. Run from the repository root:

    PYTHONPATH=$PWD:tests python bench/speed_calibrate.py [--fit]
"""

from __future__ import annotations

import math
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import speed_published as sp

from lltui.core.speed import model as speed

ARCHS = [(6, 1), (7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (12, 0)]
F16_DATA = [(7, 0), (8, 0), (8, 6), (8, 9)]  # archs with a published F16 (or Volta) prefill
SCALARS = [
    "LAYER_OVERHEAD_S",
    "PREFILL_LAYER_OVERHEAD_S",
    "MOE_LAYER_OVERHEAD_S",
    "MOE_TILE_TOKENS",
    "PCIE_HOP_S",
    "ACT_PASSES",
    "K_DECODE",
    "K_MMQ",
]


def runs():
    points = sp.load_points()
    cache: dict = {}
    with tempfile.TemporaryDirectory() as d:
        return [(p, *sp.fit_for(p, Path(d), cache)) for p in points]


def errors(rows, split=None):
    out = []
    for p, model, res in rows:
        if p.exception or (split and p.split != split):
            continue
        out.append((p, math.log(sp.predict(p, model, res) / p.tps)))
    return out


def loss(rows) -> float:
    # squared log error, plus a steep price beyond the targets (20% decode, 35% prefill)
    total = 0.0
    for p, e in errors(rows, "fit"):
        limit = math.log(1.2 if p.decode else 1.35)
        total += e * e + 10 * max(0.0, abs(e) - 0.8 * limit) ** 2
    return total


def get(name):
    if name in ("K_DECODE", "K_MMQ"):
        _tag, dec, mmq = next(q for q in speed.QUANT_SLOWDOWN if q[0] == "_k")
        return dec if name == "K_DECODE" else mmq
    if isinstance(name, tuple):
        arch, field = name
        return getattr(speed.ARCH_SPEED[arch], field)
    return getattr(speed, name)


def put(name, value):
    if name in ("K_DECODE", "K_MMQ"):
        dec, mmq = get("K_DECODE"), get("K_MMQ")
        dec, mmq = (value, mmq) if name == "K_DECODE" else (dec, value)
        speed.QUANT_SLOWDOWN = tuple(
            (t, dec, mmq) if t == "_k" else (t, d, m) for t, d, m in speed.QUANT_SLOWDOWN
        )
        speed._quant_factors.cache_clear()
        return
    if isinstance(name, tuple):
        arch, field = name
        speed.ARCH_SPEED[arch] = replace(speed.ARCH_SPEED[arch], **{field: value})
    else:
        setattr(speed, name, value)


def fit(rows) -> None:
    names: list = [*SCALARS, *[(a, f) for a in ARCHS for f in ("decode", "mmq")]]
    names += [(a, "f16") for a in F16_DATA]
    best = loss(rows)
    for _round in range(4):
        for name in names:
            base = get(name)
            for step in (0.7, 0.85, 0.93, 1.07, 1.15, 1.4):
                put(name, base * step)
                got = loss(rows)
                if got < best - 1e-9:
                    best, base = got, base * step
            put(name, base)
        print(f"round {_round}: loss {best:.4f}", file=sys.stderr)
    for name in names:
        print(name, round(get(name), 8))


def report(rows) -> None:
    for split in ("fit", "holdout", None):
        for decode in (True, False):
            for kind in ("dense", "moe", "split"):
                sel = [e for p, e in errors(rows, split) if p.decode == decode and p.kind == kind]
                if not sel:
                    continue
                med = math.exp(statistics.median(abs(e) for e in sel)) - 1
                worst = math.exp(max(abs(e) for e in sel)) - 1
                print(
                    f"{split or 'all':8s} {'tg' if decode else 'pp'} {kind:6s} n={len(sel):3d} "
                    f"median {100 * med:5.1f}%  worst {100 * worst:6.1f}%"
                )


if __name__ == "__main__":
    rows = runs()
    if "--fit" in sys.argv:
        fit(rows)
    report(rows)
