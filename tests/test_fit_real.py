"""lltui fit against the real llama-server: its own buffer lines are the expected values.

Tiny models of real architectures (llama, qwen3, gemma3 with sliding windows, qwen3moe) in
F16, Q8_0 and Q4_K run in the pinned llama-server CPU build at ``-lv 4``; weights, KV and
output buffers must equal the estimate at the log's 0.01 MiB resolution, compute buffers be
within 10 %. Loopback ggml-rpc-server processes give llama-server several devices, so the
per-device split (weights and KV) is checked for real without a GPU.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
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
from lltui.core.memory.devices import rpc_device
from lltui.core.units import MIB

__all__ = ["llama_bins"]  # a session fixture used by name

pytestmark = pytest.mark.slow

ARCHS = ("llama", "qwen3", "gemma3", "qwen3moe")
WEIGHT_TYPES = ("F16", "Q8_0", "Q4_K")
COMPUTE_TOLERANCE = 0.10
# the fixture starts every server with these; the estimate must see them too

CONFIGS = {
    "small-ctx": ["-c", "512", "-np", "1", "-fa", "on", "-lm", "mmap"],
    "fa-on": ["-c", "4096", "-np", "1", "-fa", "on"],
    "fa-off": ["-c", "4096", "-np", "1", "-fa", "off"],
    "split-kv-q8": ["-c", "4096", "-np", "4", "-no-kvu", "-ctk", "q8_0", "-ctv", "q8_0"],
    "unified-q4": ["-c", "4096", "-np", "4", "-kvu", "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "on"],
    "odd-ctx-no-mmap": ["-c", "5000", "-np", "3", "-no-kvu", "-ub", "256", "-lm", "none"],
    "big-ubatch": ["-c", "8192", "-np", "2", "-kvu", "-ctk", "q8_0", "-ub", "1024", "-nr"],
    "small-batch": ["-c", "2048", "-lm", "none", "-b", "1024", "-ub", "128"],
}


@pytest.fixture(scope="session")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    out = {}
    root = tmp_path_factory.mktemp("fit-models")
    for arch, wt in itertools.product(ARCHS, WEIGHT_TYPES):
        path = root / f"{arch}-{wt}.gguf"
        gf.write_model(path, gf.SPECS[arch](), wt)
        out[(arch, wt)] = path
    return out


def printed(nbytes: int) -> float:
    """A byte count as llama.cpp prints it: ``%8.2f`` MiB."""
    return float(f"{nbytes / MIB:.2f}")


def expected_buffers(res: FitResult) -> dict[tuple[str, str], float]:
    """Our buffers as the log would print them (a KV line per cache, summed by the parser)."""
    out: dict[tuple[str, str], float] = {}
    for name, kind, nbytes in res.buffers:
        if kind == "KV" or not nbytes:
            continue
        if kind == "compute":
            out[(name, kind)] = nbytes / MIB
        else:
            out[(name, kind)] = out.get((name, kind), 0.0) + printed(nbytes)
    for cache in res.kv:
        for name, nbytes in cache.buffers:
            out[(name, "KV")] = out.get((name, "KV"), 0.0) + printed(nbytes)
    return out


def mismatches(
    res: FitResult, summary: LlamaLogSummary, *, check_compute: bool = True
) -> list[str]:
    logged = logged_buffers(summary)
    ours = expected_buffers(res)
    problems = []
    for key in sorted(set(logged) | set(ours)):
        name, kind = key
        got, want = ours.get(key, 0.0), logged.get(key, 0.0)
        if kind == "compute":
            if check_compute and abs(got - want) > max(COMPUTE_TOLERANCE * want, 0.011):
                problems.append(f"{name} compute: lltui {got:.2f} MiB, llama.cpp {want:.2f} MiB")
            continue
        if round(abs(got - want), 3) > 0:
            problems.append(f"{name} {kind}: lltui {got:.2f} MiB, llama.cpp {want:.2f} MiB")
    return problems


def context_mismatches(res: FitResult, summary: LlamaLogSummary) -> list[str]:
    r = res.resolved
    problems = []
    for key, ours in (
        ("n_ctx", r.n_ctx),
        ("n_ctx_seq", r.n_ctx_seq),
        ("n_batch", r.n_batch),
        ("n_ubatch", r.n_ubatch),
        ("n_outputs_max", r.n_outputs_max),
        ("n_seq_max", r.n_seq_max),
    ):
        if summary.memory.context_int(key) != ours:
            problems.append(f"{key}: lltui {ours}, llama.cpp {summary.memory.context_int(key)}")
    logged = sorted((c.cells, c.layers) for c in summary.memory.kv_sizes)
    ours_kv = sorted((c.cells, len(c.layers)) for c in res.kv)
    if logged != ours_kv:
        problems.append(f"KV caches (cells, layers): lltui {ours_kv}, llama.cpp {logged}")
    return problems


def run_and_compare(
    bins, model: Path, argv: list[str], log: Path, devices=(), *, check_compute: bool = True
) -> list[str]:
    flags = [*argv, "--no-warmup"]
    summary = parse_log(served_log(bins, model, log, flags))
    assert summary.buffers, f"no buffer lines in the log:\n{summary.problems}"
    settings = parse_llama_args([*SERVER_ARGS, *flags])
    res = estimate(read_gguf(model), settings, devices, FitOptions(search=False))
    return mismatches(res, summary, check_compute=check_compute) + context_mismatches(res, summary)


@pytest.mark.parametrize(("arch", "wtype"), list(itertools.product(ARCHS, WEIGHT_TYPES)))
def test_every_architecture_and_weight_type(llama_bins, models, tmp_path, arch, wtype):
    problems = run_and_compare(
        llama_bins, models[(arch, wtype)], CONFIGS["fa-on"], tmp_path / "server.log"
    )
    assert not problems, problems


@pytest.mark.parametrize(
    ("arch", "wtype", "config"),
    [
        (arch, wtype, config)
        for arch, wtype in (("qwen3", "Q8_0"), ("gemma3", "Q4_K"))
        for config in CONFIGS
    ],
)
def test_contexts_slots_kv_types_and_load_modes(llama_bins, models, tmp_path, arch, wtype, config):
    problems = run_and_compare(
        llama_bins, models[(arch, wtype)], CONFIGS[config], tmp_path / "server.log"
    )
    assert not problems, problems


# -- several devices: loopback RPC servers ------------------------------------------------------


@pytest.fixture(scope="module")
def rpc_endpoints(llama_bins, tmp_path_factory) -> Iterator[list[str]]:
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(
            rpc_servers(llama_bins, 3, tmp_path_factory.mktemp("rpc-logs"))
        )
        yield [f"127.0.0.1:{s.port}" for s in servers]


RPC_CASES = {
    "uneven-partial": (("llama", "Q4_K"), 2, ["-ts", "3,1", "-ngl", "3"]),
    "three-devices": (("gemma3", "F16"), 3, ["-ts", "2,1,1"]),
    "no-mmap-partial": (("qwen3", "Q8_0"), 2, ["-ts", "1,2", "-ngl", "4", "-lm", "none"]),
    "split-kv": (("qwen3moe", "Q4_K"), 3, ["-ts", "1,1,2", "-np", "2", "-ctk", "q8_0"]),
    "main-gpu": (("llama", "F16"), 2, ["-sm", "none", "-mg", "1"]),
    "kv-on-host": (("gemma3", "Q8_0"), 2, ["-ts", "1,1", "-nkvo"]),
    "experts-on-host": (("qwen3moe", "Q8_0"), 2, ["-ts", "1,1", "--cpu-moe"]),
}


@pytest.mark.parametrize("case", list(RPC_CASES))
def test_rpc_devices_weights_and_kv(llama_bins, models, rpc_endpoints, tmp_path, case):
    key, n, extra = RPC_CASES[case]
    eps = rpc_endpoints[:n]
    argv = ["--rpc", ",".join(eps), "-c", "1024", "-np", "1", "-fa", "on", *extra]
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(eps)]
    problems = run_and_compare(
        llama_bins, models[key], argv, tmp_path / "server.log", devices, check_compute=False
    )
    assert not problems, problems


# -- llama-fit-params, llama.cpp's own dry run ----------------------------------------------------


def oracle_rows(bins, model: Path, memory_argv: list[str], monkeypatch) -> list[dict]:
    """llama-fit-params' rows beside our estimate under its rules, as ``fit --oracle`` makes
    them (the devices: the --rpc servers, asked, and the host)."""
    from lltui.core.fit.report import oracle_to_json
    from lltui.services.fit import FitRequest, fit

    monkeypatch.setenv("LLTUI_LLAMA_FIT_PARAMS", str(bins.binaries["llama-fit-params"]))
    request = FitRequest(str(model), parse_llama_args(memory_argv), gpus="cpu")
    report = fit(request, oracle=True)
    assert report.oracle is not None and report.oracle.available, report.oracle
    return oracle_to_json(report.oracle)["rows"]


# no -c: llama-fit-params --fit off keeps the trained context for all slots, where an unset
# --fit (on) would size it per slot
@pytest.mark.parametrize("ctx", [["-c", "4096"], []], ids=["c4096", "no-c"])
@pytest.mark.parametrize("arch", ARCHS)
def test_oracle_agrees_on_the_host(llama_bins, models, arch, ctx, monkeypatch):
    rows = oracle_rows(llama_bins, models[(arch, "Q4_K")], [*ctx, "-np", "2"], monkeypatch)
    (host,) = rows
    assert host["name"] == "Host"
    diff, theirs = host["diff_mib"], host["llama_fit_params_mib"]
    assert diff["model"] == 0 and diff["context"] == 0, host
    assert abs(diff["compute"]) <= max(1, COMPUTE_TOLERANCE * theirs["compute"]), host


def test_oracle_agrees_per_rpc_device(llama_bins, models, rpc_endpoints, monkeypatch):
    eps = rpc_endpoints[:2]
    argv = ["--rpc", ",".join(eps), "-c", "4096", "-ts", "3,1"]
    rows = oracle_rows(llama_bins, models[("qwen3", "F16")], argv, monkeypatch)
    assert [r["name"] for r in rows] == ["RPC0", "RPC1", "Host"]
    for row in rows:
        assert row["diff_mib"]["model"] == 0 and row["diff_mib"]["context"] == 0, row
