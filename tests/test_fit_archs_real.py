"""More architectures against the real llama-server: tiny generated models of each run in
the pinned CPU build at ``-lv 4``; weights, KV and output buffers must equal the log at its
0.01 MiB resolution, and the compute buffers too where the estimate calls them exact (else
within the formula's tolerance)."""

from __future__ import annotations

from pathlib import Path

import gguf_factory as gf
import pytest
from llama_fixture import llama_bins, llama_server

from lltui.core.fit.estimate import FitOptions, FitResult, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.llama.flags import parse_llama_args
from lltui.core.llama.log import LlamaLogSummary, parse_log
from lltui.core.units import MIB

__all__ = ["llama_bins"]  # a session fixture used by name

FIXTURE_ARGS = ["-t", "1", "-c", "512"]  # what the fixture starts every server with
FORMULA_TOLERANCE = 0.10


def run(bins, model: Path, argv: list[str], log: Path) -> tuple[LlamaLogSummary, FitResult]:
    flags = [*argv, "--no-warmup"]
    with llama_server(bins, model, log, flags) as server:
        summary = parse_log(server.log())
    res = estimate(
        read_gguf(model), parse_llama_args([*FIXTURE_ARGS, *flags]), (), FitOptions(search=False)
    )
    return summary, res


def by_kind(summary: LlamaLogSummary) -> dict[tuple[str, str], float]:
    out = {}
    for b in summary.buffers:
        for kind, mib in (("model", b.model_mib), ("KV", b.kv_mib), ("compute", b.compute_mib)):
            if mib:
                out[(b.name, kind)] = mib
    return out


def ours(res: FitResult) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for name, kind, nbytes in res.buffers:
        if kind in ("model", "compute") and nbytes:
            key = (name, kind)
            out[key] = out.get(key, 0.0) + (nbytes / MIB if kind == "compute" else 0.0)
            if kind == "model":
                out[key] = float(f"{nbytes / MIB:.2f}")
    for cache in res.kv:
        for name, nbytes in cache.buffers:
            out[(name, "KV")] = out.get((name, "KV"), 0.0) + float(f"{nbytes / MIB:.2f}")
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["-c", "4096", "-fa", "on"],
        ["-c", "8192", "-fa", "off", "-ub", "256"],
    ],
)
def test_sparse_attention_keeps_an_indexer_key_cache(llama_bins, tmp_path, argv):
    """glm-dsa: besides the MLA cache, the lightning indexer's keys (one head of
    indexer.key_length per cell, in the K type) have a cache of their own; its context-sized
    scores are in the compute buffer."""
    path = tmp_path / "glm-dsa.gguf"
    gf.write_model(path, gf.glm_dsa_spec(), "Q8_0", name="tiny-model")
    summary, res = run(llama_bins, path, argv, tmp_path / "s.log")
    logged, est = by_kind(summary), ours(res)
    assert [c.indexer for c in res.kv] == [False, True]
    assert est[("CPU", "KV")] == logged[("CPU", "KV")]
    got, want = est[("CPU", "compute")], logged[("CPU", "compute")]
    if res.compute_exact:
        assert round(got, 2) == want
    else:
        assert abs(got - want) <= FORMULA_TOLERANCE * want
