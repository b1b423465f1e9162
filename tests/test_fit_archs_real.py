"""More architectures against the real llama-server: a tiny generated model of each
(tests/support/gguf_factory.py ARCH_SPECS) runs in the pinned CPU build at ``-lv 4``; weights,
KV and compute buffers must equal the log at its 0.01 MiB resolution, on one device and split over
loopback rpc-servers. The compute graph of each is derived from its tensors and its recipe
(lltui/core/memory/arch_table.py); an architecture whose estimate is not exact fails here.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import pytest
from support import gguf_factory as gf
from support.llama_fixture import (
    SERVER_ARGS,
    llama_bins,
    logged_buffers,
    rpc_servers,
    served_log,
)

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import FitOptions, FitResult, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.llamalog.models import LlamaLogSummary
from lltui.core.llamalog.reader import parse_log
from lltui.core.memory.devices import DeviceSpec, rpc_device
from lltui.core.units import MIB

__all__ = ["llama_bins"]  # a session fixture used by name

pytestmark = pytest.mark.slow


Q8_KV = ["-ctk", "q8_0", "-ctv", "q8_0"]  # (MLA models refuse a K type different from V's)
ONE_DEVICE = {
    "fa": ["-c", "4096", "-fa", "on"],
    "no-fa-slots": ["-c", "4096", "-fa", "off", "-ub", "64", "-np", "2"],
    "split-kv-q8": ["-c", "5000", "-np", "3", "-no-kvu", "-ub", "256", "-fa", "on", *Q8_KV],
}
SPLITS = {
    "two": (2, ["-ts", "1,1"]),
    "three-partial": (3, ["-ts", "2,1,1", "-ngl", "3", "-fa", "off"]),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("arch-models")
    out = {}
    for name, spec in gf.ARCH_SPECS.items():
        path = root / f"{name}.gguf"
        gf.write_model(path, spec(), "Q8_0", name="tiny-model")
        out[name] = path
    return out


@pytest.fixture(scope="module")
def rpc_endpoints(llama_bins, tmp_path_factory):
    with rpc_servers(llama_bins, 3, tmp_path_factory.mktemp("rpc-logs")) as servers:
        yield [f"127.0.0.1:{s.port}" for s in servers]


def run(
    bins, model: Path, argv: list[str], log: Path, devices: Sequence[DeviceSpec] = ()
) -> tuple[LlamaLogSummary, FitResult]:
    flags = [*argv, "--no-warmup"]
    summary = parse_log(served_log(bins, model, log, flags))
    res = estimate(
        read_gguf(model),
        parse_llama_args([*SERVER_ARGS, *flags]),
        devices,
        FitOptions(search=False),
    )
    return summary, res


def ours(res: FitResult) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for name, kind, nbytes in res.buffers:
        if kind in ("model", "compute") and nbytes:
            out[(name, kind)] = round(nbytes / MIB, 2)
    for cache in res.kv:
        for name, nbytes in cache.buffers:
            out[(name, "KV")] = round(out.get((name, "KV"), 0.0) + nbytes / MIB, 2)
    return {k: v for k, v in out.items() if v}


def check(summary: LlamaLogSummary, res: FitResult) -> None:
    logged, est = logged_buffers(summary, ("model", "KV", "compute")), ours(res)
    assert res.compute_exact, res.compute_note
    assert est == logged


@pytest.mark.parametrize(("arch", "config"), list(itertools.product(gf.ARCH_SPECS, ONE_DEVICE)))
def test_one_device(llama_bins, models, tmp_path, arch, config):
    check(*run(llama_bins, models[arch], ONE_DEVICE[config], tmp_path / "s.log"))


@pytest.mark.parametrize(("arch", "split"), list(itertools.product(gf.ARCH_SPECS, SPLITS)))
def test_split_over_rpc_servers(llama_bins, models, rpc_endpoints, tmp_path, arch, split):
    n, extra = SPLITS[split]
    eps = rpc_endpoints[:n]
    argv = ["--rpc", ",".join(eps), "-c", "2048", "-np", "1", *extra]
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
    check(*run(llama_bins, models[arch], argv, tmp_path / "s.log", devices))


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
    scores, the rebuilt masks and each layer's zero rows are in the compute buffer."""
    path = tmp_path / "glm-dsa.gguf"
    gf.write_model(path, gf.glm_dsa_spec(), "Q8_0", name="tiny-model")
    summary, res = run(llama_bins, path, argv, tmp_path / "s.log")
    assert [c.indexer for c in res.kv] == [False, True]
    indexer = res.kv[1]
    assert indexer.k_bytes == 64 * 2 * res.resolved.n_ctx_seq * len(indexer.layers)  # F16
    check(summary, res)


@pytest.fixture(scope="module")
def six_rpc_endpoints(llama_bins, tmp_path_factory):
    with rpc_servers(llama_bins, 6, tmp_path_factory.mktemp("rpc6-logs")) as servers:
        yield [f"127.0.0.1:{s.port}" for s in servers]


MANY = {
    "llama-even": (gf.llama_spec(n_layer=26), ["-ts", "1,1,1,1,1,1"]),
    "qwen3moe-uneven-no-fa": (gf.qwen3moe_spec(n_layer=31), ["-ts", "1,2,2,2,2,1", "-fa", "off"]),
    "gpt-oss-slots": (gf.gpt_oss_spec(n_layer=20), ["-ts", "1,2,2,2,2,1", "-ub", "64", "-np", "2"]),
}


@pytest.mark.parametrize("case", list(MANY))
def test_six_devices_alike_middle_devices_planned_once(
    llama_bins, six_rpc_endpoints, tmp_path, case
):
    """Six rpc-servers: the middle devices hold alike layers and are planned once each run
    (compute_graph.fewer_devices); every device's buffer still equals the server's."""
    from lltui.core.memory import compute_graph as cg

    spec, extra = MANY[case]
    path = tmp_path / f"{case}.gguf"
    gf.write_model(path, spec, "Q8_0", name="tiny-model")
    eps = six_rpc_endpoints
    argv = ["--rpc", ",".join(eps), "-c", "2048", "-np", "1", *extra]
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
    cg.clear_plans()
    summary, res = run(llama_bins, path, argv, tmp_path / "s.log", devices)
    check(summary, res)
