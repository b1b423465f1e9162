"""The parts beside the model against the real llama-server: a draft model (-md), a
multimodal projector (--mmproj) and a LoRA adapter (--lora) on tiny generated files.

The pinned CPU build logs each part's buffers: the draft's context after ``loading draft
model`` (weights, KV and output must equal the estimate at the log's 0.01 MiB, compute be
within 10 %, on the host and on loopback RPC devices picked with -devd), the adapter's
``LoRA buffer size`` lines (exact), and the projector's worst-case memory
(``[mtmd] estimated worst-case memory usage``: weights and compute) and its
``reserve_compute_meta`` compute buffer, which lltui approximates.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import replace
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
from test_fit_real import (
    context_mismatches,
    expected_buffers,
    mismatches,
    printed,
)

from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import ExtraModels, FitOptions, FitResult, estimate
from lltui.core.gguf.reader import read_gguf
from lltui.core.llamalog.models import LlamaLogSummary
from lltui.core.llamalog.reader import parse_log
from lltui.core.memory.devices import rpc_device
from lltui.core.memory.results import PartEstimate
from lltui.core.units import MIB

__all__ = ["llama_bins"]  # a session fixture used by name

pytestmark = pytest.mark.slow

MAIN = gf.llama_spec()
DRAFT = gf.llama_spec(n_layer=2, n_embd=128, n_ff=256)
DRAFT_START = "loading draft model"
CLIP_START = "clip_model_loader"
COMPUTE_TOLERANCE = 0.10
_LORA_LINE = re.compile(r"llama_adapter_lora_init_impl:\s+(\S+) LoRA buffer size =\s+([\d.]+) MiB")
_MTMD_USAGE = re.compile(r"estimated worst-case memory usage of mmproj is ([\d.]+) MiB")
_CLIP_COMPUTE = re.compile(r"reserve_compute_meta:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("parts-real")
    out = {
        "main": root / "main.gguf",
        "q4": root / "main-q4.gguf",
        "draft": root / "draft.gguf",
        "draft-q8": root / "draft-q8.gguf",
        "mmproj": root / "mmproj.gguf",
        "lora": root / "lora.gguf",
    }
    gf.write_model(out["main"], MAIN, "Q8_0")
    gf.write_model(out["q4"], MAIN, "Q4_0")
    gf.write_model(out["draft"], DRAFT, "F16", seed=1)
    gf.write_model(out["draft-q8"], DRAFT, "Q8_0", seed=1)
    gf.write_mmproj(out["mmproj"], MAIN.n_embd)
    gf.write_lora(out["lora"], MAIN)
    return out


def ours(model: Path, flags: list[str], devices=()) -> FitResult:
    st = parse_llama_args([*SERVER_ARGS, *flags])
    extra = ExtraModels(
        draft=read_gguf(st.draft_model) if st.draft_model else None,
        mmproj=read_gguf(st.mmproj) if st.mmproj else None,
        loras=tuple(read_gguf(p) for p in st.lora),
    )
    return estimate(read_gguf(model), st, devices, FitOptions(search=False), extra)


def part(res: FitResult, name: str) -> PartEstimate:
    (p,) = [p for p in res.parts if p.part == name]
    return p


def draft_summary(summary: LlamaLogSummary) -> LlamaLogSummary:
    """The draft's context as a summary of its own (for the helpers that read one)."""
    m = summary.memory
    buffers = tuple(replace(b, part="model") for b in m.buffers if b.part == "draft")
    draft = replace(m, buffers=buffers, kv_sizes=m.draft_kv_sizes, context=m.draft_context)
    return replace(summary, memory=draft)


def part_mismatches(p: PartEstimate, logged: dict[tuple[str, str], float], check_compute: bool):
    """The draft's buffers against its own context's log lines."""
    want: dict[tuple[str, str], float] = {}
    for name, kind, nbytes in p.buffers:
        if not nbytes:
            continue
        value = nbytes / MIB if kind == "compute" else printed(nbytes)
        want[(name, kind)] = want.get((name, kind), 0.0) + value
    problems = []
    for key in sorted(set(want) | set(logged)):
        got, them = want.get(key, 0.0), logged.get(key, 0.0)
        if key[1] == "compute":
            if check_compute and abs(got - them) > max(COMPUTE_TOLERANCE * them, 0.011):
                problems.append(f"draft {key}: lltui {got:.2f} MiB, llama.cpp {them:.2f} MiB")
        elif round(abs(got - them), 3) > 0:
            problems.append(f"draft {key}: lltui {got:.2f} MiB, llama.cpp {them:.2f} MiB")
    return problems


DRAFT_CASES = {
    "f16-draft": ("draft", ["-c", "1024", "-np", "2", "-fa", "on"]),
    "q8-kv-and-slots": ("draft-q8", ["-c", "2048", "-np", "3", "-ctkd", "q8_0", "-ctvd", "q8_0"]),
    "unified-no-mmap": ("draft", ["-c", "1536", "-np", "2", "-kvu", "-lm", "none", "-fa", "off"]),
    "auto-slots": ("draft", ["-c", "4096"]),
    "small-ubatch": ("draft-q8", ["-np", "1", "-ub", "256"]),
    "drafting-5": (
        "draft",
        ["-c", "2048", "-np", "2", "--spec-type", "draft-simple", "--spec-draft-n-max", "5"],
    ),
    "drafting-default": ("draft", ["-c", "1024", "-np", "3", "--spec-type", "draft-simple"]),
    "ngram-and-draft": ("draft", ["-c", "1024", "-np", "2", "--spec-type", "ngram-mod"]),
}


@pytest.mark.parametrize("case", list(DRAFT_CASES))
def test_draft_buffers_on_the_host(llama_bins, files, tmp_path, case):
    draft, extra = DRAFT_CASES[case]
    flags = [*extra, "-md", str(files[draft]), "--no-warmup"]
    text = served_log(llama_bins, files["main"], tmp_path / "server.log", flags)
    assert DRAFT_START in text, "the server did not load the draft"
    summary = parse_log(text)  # the model's buffers, and the draft's apart
    res = ours(files["main"], flags)
    assert not mismatches(res, summary), mismatches(res, summary)
    # the model's outputs: one per slot, and one per drafted token when drafting is on
    assert not context_mismatches(res, summary), context_mismatches(res, summary)
    d = part(res, "draft")
    problems = part_mismatches(d, logged_buffers(draft_summary(summary)), check_compute=True)
    assert not problems, problems
    assert draft_summary(summary).memory.context_int("n_ctx") == d.n_ctx == res.resolved.n_ctx
    # the same split by hand: the reader keeps the two contexts apart
    cut = text.index(DRAFT_START)
    assert logged_buffers(parse_log(text[cut:])) == logged_buffers(draft_summary(summary))
    assert logged_buffers(parse_log(text[:cut])) == logged_buffers(summary)


@pytest.fixture(scope="module")
def rpc_endpoints(llama_bins, tmp_path_factory) -> Iterator[list[str]]:
    with contextlib.ExitStack() as stack:
        servers = stack.enter_context(
            rpc_servers(llama_bins, 2, tmp_path_factory.mktemp("rpc-logs"))
        )
        yield [f"127.0.0.1:{s.port}" for s in servers]


@pytest.mark.parametrize(
    "draft_flags",
    [["-devd", "RPC1"], ["-ngld", "1"], [], ["-otd", "ffn_(up|down)=CPU"]],
    ids=["devd-rpc1", "ngld-1", "split-like-main", "otd-ffn-on-host"],
)
def test_draft_buffers_on_rpc_devices(llama_bins, files, rpc_endpoints, tmp_path, draft_flags):
    argv = ["--rpc", ",".join(rpc_endpoints), "-ts", "1,1", "-c", "1024", "-np", "1", "-fa", "on"]
    flags = [*argv, "-md", str(files["draft"]), *draft_flags, "--no-warmup"]
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(rpc_endpoints)]
    summary = parse_log(served_log(llama_bins, files["main"], tmp_path / "server.log", flags))
    res = ours(files["main"], flags, devices)
    d = part(res, "draft")
    problems = part_mismatches(d, logged_buffers(draft_summary(summary)), check_compute=False)
    problems += mismatches(res, summary, check_compute=False)
    assert not problems, problems
    if draft_flags == ["-devd", "RPC1"]:
        assert {x.device for x in d.devices if x.weights_bytes} <= {devices[1].name, "CPU"}


def test_lora_buffers(llama_bins, files, tmp_path):
    for model, lm in (("main", "mmap"), ("main", "none"), ("q4", "mmap")):
        flags = ["-c", "1024", "-np", "1", "-lm", lm, "--lora", str(files["lora"]), "--no-warmup"]
        text = served_log(llama_bins, files[model], tmp_path / f"{model}-{lm}.log", flags)
        logged = {b.name: b.model_mib for b in parse_log(text).memory.sizes("lora")}
        assert logged == {m[1]: float(m[2]) for m in _LORA_LINE.finditer(text)}
        p = part(ours(files[model], flags), "lora")
        want: dict[str, float] = {}
        for name, _, nbytes in p.buffers:
            want[name] = want.get(name, 0.0) + printed(nbytes)
        assert want == logged, (model, lm, want, logged)


def test_mmproj_memory(llama_bins, files, tmp_path):
    flags = ["-c", "1024", "-np", "1", "-fa", "on", "--mmproj", str(files["mmproj"])]
    text = served_log(llama_bins, files["main"], tmp_path / "server.log", flags)
    usage = _MTMD_USAGE.search(text)
    compute = _CLIP_COMPUTE.search(text)
    assert usage and compute, "no mmproj memory lines in the log"
    res = ours(files["main"], flags)
    mm = part(res, "mmproj")
    (dev,) = mm.devices
    assert dev.device == compute[1] == "CPU"
    # llama-server's own worst case: the weights buffer and the compute buffer
    assert printed(dev.weights_bytes + dev.compute_bytes) == pytest.approx(float(usage[1]))
    assert abs(dev.compute_bytes / MIB - float(compute[2])) <= max(
        COMPUTE_TOLERANCE * float(compute[2]), 0.011
    )
    # the text model's buffers are the same with the projector loaded
    main_log = parse_log(text[: text.index(CLIP_START)])
    assert not mismatches(res, main_log), mismatches(res, main_log)
    assert expected_buffers(res) == expected_buffers(ours(files["main"], flags[:-2]))


@pytest.mark.parametrize("flags", [[], ["-mmdev", "RPC1"], ["--no-mmproj-offload"]])
def test_mmproj_on_rpc_devices(llama_bins, files, rpc_endpoints, tmp_path, flags):
    argv = ["--rpc", ",".join(rpc_endpoints), "-c", "1024", "-np", "1", "-fa", "on"]
    argv += ["--mmproj", str(files["mmproj"]), *flags]
    devices = [rpc_device(ep, None, i, backend="cpu") for i, ep in enumerate(rpc_endpoints)]
    summary = parse_log(served_log(llama_bins, files["main"], tmp_path / "server.log", argv))
    log = summary.memory
    assert log.mmproj_backend and log.mmproj_estimate_mib, "no projector lines"
    mm = part(ours(files["main"], argv, devices), "mmproj")
    assert mm.devices[0].device == log.mmproj_backend
    total = sum(d.weights_bytes + d.compute_bytes for d in mm.devices)
    assert printed(total) == pytest.approx(log.mmproj_estimate_mib)
    logged = {b.name: b.compute_mib for b in log.sizes("mmproj")}
    for name, kind, nbytes in mm.buffers:
        if kind == "compute":
            want = logged.get(name, 0.0)
            assert abs(nbytes / MIB - want) <= max(COMPUTE_TOLERANCE * want, 0.011), (name, want)


BERT_CASES = {
    "embedding": ["--embedding", "-np", "1"],
    "slots-short-context": ["--embedding", "-np", "2", "-c", "256"],
    "rerank": ["--rerank", "-np", "1"],
    "pooling-small-ubatch": ["--pooling", "cls", "-np", "1", "-ub", "128"],
}


@pytest.mark.parametrize("case", list(BERT_CASES))
def test_embedding_models_have_no_kv_cache(llama_bins, tmp_path, case):
    model = gf.write_bert(tmp_path / "bert.gguf")
    flags = [*BERT_CASES[case], "--no-warmup"]
    summary = parse_log(served_log(llama_bins, model, tmp_path / "server.log", flags))
    res = ours(model, flags)
    assert not res.model.causal and res.model.pooling == "mean"
    assert res.kv == () and not summary.memory.kv_sizes
    # non-causal: the batch is not cut to the context; outputs: a batch of them
    assert not context_mismatches(res, summary), context_mismatches(res, summary)
    # weights and output exact; the compute buffer is the compute model's (not checked here)
    problems = mismatches(res, summary, check_compute=False)
    assert not problems, problems


PROJECTOR_SHAPES = {  # image, patch, n_embd, n_ff, heads, projection (= the text model's n_embd)
    "clip-224": (224, 14, 256, 1024, 4, 256),
    "clip-336-8-heads": (336, 14, 256, 1024, 8, 256),
    "narrow-448": (448, 14, 128, 512, 4, 256),
    "wide-projection": (224, 14, 128, 512, 4, 1024),
}
PROJECTOR_TOLERANCE = 0.15  # an approximation fitted to these shapes (README)


@pytest.mark.parametrize("fa", ["on", "off"])
@pytest.mark.parametrize("shape", list(PROJECTOR_SHAPES))
def test_projector_compute_approximation(llama_bins, tmp_path, shape, fa):
    image, patch, n_embd, n_ff, heads, proj = PROJECTOR_SHAPES[shape]
    text = gf.write_model(tmp_path / "m.gguf", gf.llama_spec(n_embd=proj), "Q8_0")[0]
    mm = gf.write_mmproj(
        tmp_path / "mm.gguf",
        proj,
        image_size=image,
        patch_size=patch,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=heads,
    )
    flags = ["-np", "1", "-fa", fa, "--mmproj", str(mm)]
    summary = parse_log(served_log(llama_bins, text, tmp_path / "server.log", flags))
    theirs = {b.name: b.compute_mib for b in summary.memory.sizes("mmproj")}["CPU"]
    (dev,) = part(ours(text, flags), "mmproj").devices
    assert abs(dev.compute_bytes / MIB - theirs) <= PROJECTOR_TOLERANCE * theirs, (
        dev.compute_bytes / MIB,
        theirs,
    )
