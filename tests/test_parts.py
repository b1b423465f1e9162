"""Every part of a run besides the model: the draft model (-md), the multimodal projector
(--mmproj) and LoRA adapters (--lora), counted where llama-server puts them; embedding and
reranking models recognised. tests/test_parts_real.py checks the buffers against the real
llama-server's log."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support import gguf_factory as gf

from lltui.cli import main
from lltui.core.cmdline.flags import parse_llama_args
from lltui.core.fit.estimate import ExtraModels, FitOptions, FitResult, estimate
from lltui.core.fit.report import result_to_json, result_to_text
from lltui.core.gguf.reader import read_gguf
from lltui.core.memory.allocate import NOT_COUNTED, estimate_once
from lltui.core.memory.common import CPU_ALIGNMENT, CUDA_ALIGNMENT, pad
from lltui.core.memory.context import select_devices
from lltui.core.memory.devices import DeviceSpec
from lltui.core.memory.parts import draft_settings, mmproj_compute_bytes
from lltui.core.memory.problem import FitProblem
from lltui.core.units import GIB, MIB

NO_SEARCH = FitOptions(search=False)
MAIN = gf.llama_spec()
DRAFT = gf.llama_spec(n_layer=2, n_embd=128, n_ff=256)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("parts")
    out = {
        "main": root / "main.gguf",
        "draft": root / "draft.gguf",
        "mmproj": root / "mmproj.gguf",
        "lora": root / "lora.gguf",
        "q4": root / "main-q4.gguf",
    }
    gf.write_model(out["main"], MAIN, "Q8_0")
    gf.write_model(out["q4"], MAIN, "Q4_0")
    gf.write_model(out["draft"], DRAFT, "F16", seed=1)
    gf.write_mmproj(out["mmproj"], MAIN.n_embd)
    gf.write_lora(out["lora"], MAIN)
    return out


def cuda(n: int, gib: float = 16) -> tuple[DeviceSpec, ...]:
    size = int(gib * GIB)
    return tuple(
        DeviceSpec(name=f"CUDA{i}", kind="cuda", total_bytes=size, free_bytes=size)
        for i in range(n)
    )


def run(
    files: dict[str, Path], argv: list[str], devices=(), options=NO_SEARCH, model="main"
) -> FitResult:
    st = parse_llama_args(argv)
    extra = ExtraModels(
        draft=read_gguf(st.draft_model) if st.draft_model else None,
        mmproj=read_gguf(st.mmproj) if st.mmproj else None,
        loras=tuple(read_gguf(p) for p in st.lora),
    )
    return estimate(read_gguf(files[model]), st, devices, options, extra)


def part(res: FitResult, name: str):
    (p,) = [p for p in res.parts if p.part == name]
    return p


# -- flags -------------------------------------------------------------------------------


def test_the_flags_of_every_part_are_read():
    st = parse_llama_args(
        [
            *("-md", "d.gguf", "-ngld", "3", "-devd", "CUDA1", "-ctkd", "q8_0", "-ctvd", "q4_0"),
            *("--mmproj", "m.gguf", "--no-mmproj-offload", "--lora", "a.gguf,b.gguf"),
            *("--lora-scaled", "c.gguf:0.5", "--pooling", "cls"),
        ]
    )
    assert st.draft_model == "d.gguf" and st.draft_n_gpu_layers == 3
    assert st.draft_devices == ("CUDA1",)
    assert (st.draft_type_k, st.draft_type_v) == ("q8_0", "q4_0")
    assert st.mmproj == "m.gguf" and st.mmproj_offload is False
    assert st.lora == ("a.gguf", "b.gguf", "c.gguf") and st.pooling == "cls"
    assert "-md" in st.memory_args and "--mmproj" in st.memory_args
    rerank = parse_llama_args(["--rerank"])
    assert rerank.embedding and rerank.pooling == "rank"


@pytest.mark.parametrize(
    "argv",
    [["--lora-scaled", "a.gguf"], ["--lora-scaled", "a.gguf:x"], ["--pooling", "max"]],
)
def test_bad_part_flags_are_one_line(argv):
    with pytest.raises(ValueError, match=argv[0]):
        parse_llama_args(argv)


def test_the_removed_draft_context_flag_is_refused():
    # this llama-server gives the draft the main context's size (llama_n_ctx of the target)
    with pytest.raises(ValueError, match="-cd"):
        parse_llama_args(["-cd", "4096"])


# -- the draft model -----------------------------------------------------------------------


def test_the_draft_is_a_second_context_with_the_main_context_size(files):
    argv = ["-c", "1024", "-np", "2", "-md", str(files["draft"]), "-ctkd", "q8_0"]
    res = run(files, argv)
    st = parse_llama_args(argv)
    dst = draft_settings(st, res.resolved.n_ctx)
    draft = read_gguf(files["draft"])
    alone = estimate_once(FitProblem.of(draft, dst, (), NO_SEARCH))
    d = part(res, "draft")
    assert d.buffers == alone.buffers and d.n_ctx == res.resolved.n_ctx == 1024
    assert alone.resolved.type_k == "q8_0" and alone.resolved.type_v == "f16"
    assert alone.resolved.n_outputs_max == 2  # -np outputs, no draft tokens of its own
    main_only = run(files, ["-c", "1024", "-np", "2"])
    (cpu,) = res.devices
    (cpu0,) = main_only.devices
    assert cpu.total_bytes == cpu0.total_bytes + d.bytes_on("CPU") == res.host.total_bytes
    assert dict(cpu.parts) == {
        "model": cpu0.total_bytes,
        "draft": cpu.total_bytes - cpu0.total_bytes,
    }
    assert res.host.output_bytes == main_only.host.output_bytes + alone.host.output_bytes
    assert NOT_COUNTED["draft"] not in res.warnings
    # without the file the estimate says what it left out
    assert NOT_COUNTED["draft"] in run_without_files(files, argv).warnings


def run_without_files(files: dict[str, Path], argv: list[str]) -> FitResult:
    return estimate(read_gguf(files["main"]), parse_llama_args(argv), (), NO_SEARCH)


def test_the_draft_goes_where_devd_and_ngld_put_it(files):
    devs = cuda(2)
    base = ["-c", "1024", "-np", "1", "-md", str(files["draft"])]
    on1 = part(run(files, [*base, "-devd", "CUDA1"], devs), "draft")
    assert {x.device for x in on1.devices if x.weights_bytes} == {"CUDA1", "CPU"}
    assert set(on1.layers) <= {"CUDA1", "CPU"} and on1.layers[-1] == "CUDA1"
    split = part(run(files, base, devs), "draft")
    assert set(split.layers) == {"CUDA0", "CUDA1"}  # the main model's split rules
    host = part(run(files, [*base, "-ngld", "0"], devs), "draft")
    assert all(x.weights_bytes == 0 and x.kv_bytes == 0 for x in host.devices if x.device != "CPU")
    assert set(host.layers) == {"CPU"}
    res = run(files, [*base, "-devd", "CUDA1"], devs)
    cuda1 = next(d for d in res.devices if d.name == "CUDA1")
    assert dict(cuda1.parts)["draft"] == on1.bytes_on("CUDA1")
    assert sum(b for _, b in cuda1.parts) == cuda1.total_bytes


def test_a_draft_that_does_not_fit_fails_the_verdict_and_shrinks_the_context(files):
    base = ["-c", "4096", "-np", "1", "-ngl", "all"]
    alone = run(files, base, cuda(1))
    need = alone.devices[0].total_bytes + alone.devices[0].unaccounted_bytes
    tight = (DeviceSpec("CUDA0", "cuda", total_bytes=need + MIB, free_bytes=need + MIB),)
    assert run(files, base, tight).fits
    with_draft = run(files, [*base, "-md", str(files["draft"])], tight, FitOptions())
    assert not with_draft.fits and not with_draft.devices[0].fits
    assert with_draft.max_ctx is not None and with_draft.max_ctx < 4096


# -- the projector -------------------------------------------------------------------------


def test_the_projector_goes_to_the_first_gpu_or_the_host(files):
    mm = read_gguf(files["mmproj"])
    base = ["-c", "1024", "--mmproj", str(files["mmproj"])]
    on_gpu = part(run(files, base, cuda(2)), "mmproj")
    want = sum(pad(t.nbytes, CUDA_ALIGNMENT) for t in mm.tensors)  # F16 rows of 64: no padding
    assert [(x.device, x.weights_bytes) for x in on_gpu.devices] == [("CUDA0", want), ("CPU", 0)]
    assert on_gpu.approximate_compute and on_gpu.devices[0].compute_bytes > 0
    host = part(run(files, [*base, "--no-mmproj-offload"], cuda(2)), "mmproj")
    assert [x.device for x in host.devices] == ["CPU"]
    assert host.devices[0].weights_bytes == sum(pad(t.nbytes, CPU_ALIGNMENT) for t in mm.tensors)
    # no GPU: the host, as on the CPU build the real-server test runs
    assert [x.device for x in part(run(files, base), "mmproj").devices] == ["CPU"]


def test_the_projector_compute_grows_with_the_image_and_without_flash_attention(tmp_path):
    small = read_gguf(gf.write_mmproj(tmp_path / "s.gguf", 256, image_size=32))
    big = read_gguf(gf.write_mmproj(tmp_path / "b.gguf", 256, image_size=64))
    assert mmproj_compute_bytes(big, True, True) > mmproj_compute_bytes(small, True, True)
    wide = read_gguf(gf.write_mmproj(tmp_path / "w.gguf", 256, image_size=336, patch_size=14))
    # 577 positions: the attention scores outgrow every other phase without flash attention
    assert mmproj_compute_bytes(wide, False, True) > mmproj_compute_bytes(wide, True, True)
    # offloaded, the image waits in a host buffer; on the host it is part of the one buffer
    _, host = mmproj_compute_bytes(small, True, True)
    assert host == 4 * 3 * 32 * 32 and mmproj_compute_bytes(small, True, False)[1] == 0


def test_a_projector_for_another_width_is_flagged(files, tmp_path):
    wrong = gf.write_mmproj(tmp_path / "w.gguf", 512)
    res = run(files, ["-c", "1024", "--mmproj", str(wrong)])
    assert any("refuses the pair" in w for w in res.warnings)


# -- LoRA adapters -------------------------------------------------------------------------


def test_lora_tensors_go_to_the_devices_of_their_layers(files):
    lora = read_gguf(files["lora"])
    argv = ["-c", "1024", "-ts", "1,1", "--lora", str(files["lora"])]
    res = run(files, argv, cuda(2))
    assert set(res.layer_devices[: MAIN.n_layer]) == {"CUDA0", "CUDA1"}
    want: dict[str, int] = {}
    for t in lora.tensors:
        dev = res.layer_devices[int(t.name.split(".")[1])]
        want[dev] = want.get(dev, 0) + pad(t.nbytes, CUDA_ALIGNMENT)
    p = part(res, "lora")
    assert {x.device: x.weights_bytes for x in p.devices} == want
    assert {b[0] for b in p.buffers} == {"CUDA0", "CUDA1"}


def test_lora_on_the_host_uses_the_weights_buffer_and_not_the_repacked_one(files):
    lora = read_gguf(files["lora"])
    total = sum(pad(t.nbytes, CPU_ALIGNMENT) for t in lora.tensors)
    mapped = part(run(files, ["-c", "1024", "--lora", str(files["lora"])]), "lora")
    assert mapped.buffers == (("CPU_Mapped", "LoRA", total),)
    # Q4_0 weights repacked on x86: the adapter falls back to a plain CPU buffer
    res = run(files, ["-c", "1024", "--lora", str(files["lora"])], model="q4")
    assert any(n == "CPU_REPACK" for n, _, _ in res.buffers)
    assert part(res, "lora").buffers == (("CPU", "LoRA", total),)


def test_adapter_tensors_of_another_model_are_noted(files, tmp_path):
    other = gf.write_lora(tmp_path / "o.gguf", replace(MAIN, n_layer=6), layers=(5,))
    res = run(files, ["-c", "1024", "--lora", str(other)])
    assert any("match no weight" in w for w in res.warnings)


# -- embedding and reranking models ----------------------------------------------------------


def test_embedding_and_reranking_are_said(tmp_path):
    spec = replace(MAIN, extra_kv={"llama.pooling_type": (1, gf.V.UINT32)})
    path = tmp_path / "e.gguf"
    gf.write_model(path, spec, "F16")
    res = estimate(read_gguf(path), parse_llama_args(["-c", "512", "--embedding"]), ())
    assert res.model.pooling == "mean" and res.model.causal
    assert "embedding model: causal" in result_to_text(res)
    rerank = estimate(read_gguf(path), parse_llama_args(["-c", "512", "--rerank"]), ())
    assert "reranker" in result_to_text(rerank) and "pooling rank" in result_to_text(rerank)
    data = result_to_json(res)["model"]
    assert data["causal"] is True and data["pooling"] == "mean"
    chat = estimate(read_gguf(path), parse_llama_args(["-c", "512"]), ())
    assert "embedding model" not in result_to_text(chat)


# -- the command line ------------------------------------------------------------------------


def test_fit_json_and_text_show_every_part(files, capsys):
    argv = ["fit", str(files["main"]), "-c", "1024", "--gpus", "24GiB,24GiB"]
    argv += ["-md", str(files["draft"]), "-devd", "CUDA1", "--mmproj", str(files["mmproj"])]
    argv += ["--lora", str(files["lora"])]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["part"] for p in data["parts"]] == ["draft", "mmproj", "lora"]
    cuda0, cuda1 = data["devices"][:2]
    assert set(cuda0["parts"]) == {"model", "mmproj", "lora"}
    assert set(cuda1["parts"]) == {"model", "draft", "lora"}
    for d in data["devices"]:
        assert sum(d["parts"].values()) == d["total_bytes"]
    assert data["parts"][1]["compute_exact"] is False
    assert not any("not included" in w for w in data["warnings"])
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "draft model" in text and "projector" in text and "LoRA" in text


def test_fit_with_a_missing_part_file_is_one_line_exit_2(files, tmp_path, capsys):
    missing = tmp_path / "nope.gguf"
    assert main(["fit", str(files["main"]), "-md", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"-md {missing}" in err and err.count("\n") == 1


def test_remote_parts_go_through_the_model_reader(files, monkeypatch):
    import lltui.sources.models.read as fd
    from lltui.sources.models.read import read_extra_models

    asked = []

    def fake_remote(text: str, verb: str):
        asked.append(text)
        return read_gguf(files["draft"] if "draft" in text else files["mmproj"])

    monkeypatch.setattr(fd, "_read_remote", fake_remote)
    st = parse_llama_args(["-md", "hf:o/draft:Q8_0", "--mmproj", "https://h.example/mm.gguf"])
    extra = read_extra_models(st, "fit")
    assert asked == ["hf:o/draft:Q8_0", "https://h.example/mm.gguf"]
    assert extra.draft is not None and extra.mmproj is not None


def test_select_devices_of_the_draft_refuses_an_unknown_devd(files):
    from lltui.core.fit.estimate import FitError

    with pytest.raises(FitError, match="CUDA7"):
        run(files, ["-c", "1024", "-md", str(files["draft"]), "-devd", "CUDA7"], cuda(2))
    none = draft_settings(parse_llama_args(["-devd", "none"]), 512)
    assert select_devices(cuda(2), none) == ()


def test_llama_fit_params_gets_none_of_the_part_flags():
    from lltui.sources.llama.fit_oracle import oracle_args

    given = parse_llama_args(
        [
            *("-c", "512", "-md", "d.gguf", "-ngld", "1", "-devd", "none", "-ctkd", "q8_0"),
            *("--mmproj", "m.gguf", "--no-mmproj-offload", "--lora", "a.gguf", "--rerank"),
            *("--embedding", "--pooling", "mean", "-np", "1"),
        ]
    )
    # the pinned llama-fit-params refuses -md, -ngld, -devd, --mmproj, --pooling, --rerank,
    # --embedding, and counts no draft, projector or adapter
    assert oracle_args(given) == ["-c", "512", "-np", "1"]


def test_the_projector_follows_mmdev_and_dev(files):
    base = ["-c", "1024", "--mmproj", str(files["mmproj"])]
    devs = cuda(2)

    def where(*flags: str) -> str:
        return part(run(files, [*base, *flags], devs), "mmproj").devices[0].device

    assert where() == "CUDA0"  # the first row; the image's host buffer is the second
    assert where("-mmdev", "CUDA1") == "CUDA1"
    assert where("-dev", "CUDA1,CUDA0") == "CUDA1"  # the first -dev (common/arg.cpp)
    assert where("-mmdev", "none") == "CPU"
    assert where("-dev", "none") == "CPU"
    from lltui.core.fit.estimate import FitError

    with pytest.raises(FitError, match="CUDA9"):
        where("-mmdev", "CUDA9")


def test_the_draft_takes_its_own_tensor_overrides(files):
    base = ["-c", "1024", "-ngl", "all", "-md", str(files["draft"]), "-ngld", "all"]
    plain = part(run(files, base, cuda(1)), "draft")
    moved = part(run(files, [*base, "-otd", "ffn_(up|down|gate)=CPU"], cuda(1)), "draft")
    assert moved.bytes_on("CPU") > plain.bytes_on("CPU")
    assert moved.bytes_on("CUDA0") < plain.bytes_on("CUDA0")
    st = parse_llama_args(["-cmoed", "-ncmoed", "1", "-otd", "a=CPU"])
    assert [o.pattern for o in st.draft_overrides][-1] == "a" and len(st.draft_overrides) == 3
    assert st.overrides == ()  # the main model's are untouched


def test_quant_rows_count_the_draft(files, capsys):
    argv = ["quant", str(files["main"]), "-c", "1024", "--gpus", "24GiB", "--json"]
    assert main(argv) == 0
    alone = {r["type"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert main([*argv, "-md", str(files["draft"])]) == 0
    both = {r["type"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    row = both["Q4_K_M"]
    (cuda0,) = [d for d in row["devices"] if d["name"] == "CUDA0"]
    assert cuda0["parts"]["draft"] > 0
    assert (
        cuda0["total_bytes"]
        == alone["Q4_K_M"]["devices"][0]["total_bytes"] + cuda0["parts"]["draft"]
    )


def test_the_fit_view_counts_the_parts_of_its_extra_flags(files):
    from lltui.app.state.fit import FitRequest, compute

    extra = f"-md {files['draft']} --mmproj {files['mmproj']}"
    out = compute(FitRequest(1, str(files["main"]), {"ctx": "1024"}, extra, "24GiB"), None)
    assert out.error is None and out.result is not None
    assert [p.part for p in out.result.parts] == ["draft", "mmproj"]
    assert all(q.result is None or q.result.parts for q in out.quants)
    from lltui.app.screens.fit import render_devices

    assert "of which draft" in render_devices(out)
    missing = compute(FitRequest(2, str(files["main"]), {}, "-md /nonexistent.gguf", "24GiB"), None)
    assert missing.error and "/nonexistent.gguf" in missing.error


def test_best_searches_in_what_the_parts_leave(files, capsys):
    base = ["fit", str(files["main"]), "-c", "4096", "-ngl", "all", "--margin", "0"]
    assert main([*base, "--gpus", "1GiB", "--json"]) == 0
    need = json.loads(capsys.readouterr().out)["devices"][0]["total_bytes"]
    argv = [*base, "--gpus", f"{(need + MIB) // MIB}MiB", "--best", "context", "--json"]
    assert main(argv) == 0
    alone = json.loads(capsys.readouterr().out)["best"]
    assert any(c["max_ctx"] == 4096 and c["gives_up"] == "nothing" for c in alone)
    assert main([*argv, "-md", str(files["draft"])]) == 0
    with_draft = json.loads(capsys.readouterr().out)["best"]
    # with the draft beside it, every command line gives something up
    assert with_draft and all(c["gives_up"] != "nothing" for c in with_draft)


def test_a_non_causal_model_keeps_its_batch_and_outputs_a_batch(tmp_path):
    model = read_gguf(gf.write_bert(tmp_path / "bert.gguf"))
    res = estimate(model, parse_llama_args(["-c", "256", "-np", "2", "--embedding"]), ())
    r = res.resolved
    # --embedding: n_batch = n_ubatch; non-causal: not cut to the 256-cell context
    assert (r.n_batch, r.n_ubatch, r.n_outputs_max) == (512, 512, 512)
    assert res.kv == () and not res.model.causal
    assert "embedding model: non-causal, no KV cache; pooling mean" in result_to_text(res)
    causal = estimate(
        read_gguf(gf.write_model(tmp_path / "l.gguf", MAIN)[0]),
        parse_llama_args(["-c", "256", "-np", "2"]),
        (),
    )
    assert (causal.resolved.n_batch, causal.resolved.n_outputs_max) == (256, 2)


def test_the_log_parser_keeps_the_draft_projector_and_adapter_apart():
    from lltui.core.llamalog.reader import parse_log

    text = (Path(__file__).parent / "fixtures/llama-server/parts_draft_mmproj_lora.log").read_text()
    s = parse_log(text)
    m = s.memory

    def sizes(part: str) -> dict[str, tuple[float, float, float]]:
        return {b.name: (b.model_mib, b.kv_mib, b.compute_mib) for b in m.sizes(part)}

    # the model's own buffers, not the draft's that come after them; its compute buffer
    # reserved again for the warm-up of its parts counts once
    assert sizes("model") == {"CPU_Mapped": (2.80, 0.0, 0.0), "CPU": (0.0, 2.0, 6.52)}
    assert [(c.cells, c.layers) for c in m.kv_sizes] == [(1024, 4)]
    assert m.offloaded == (5, 5)  # the model's, not the draft's 3/3 printed after it
    assert sizes("draft") == {"CPU_Mapped": (1.19, 0.0, 0.0), "CPU": (0.0, 1.0, 3.77)}
    assert [(c.cells, c.layers) for c in m.draft_kv_sizes] == [(1024, 2)]
    assert dict(m.draft_context)["n_ctx"] == "2048" and m.context_int("n_ctx") == 2048
    assert sizes("lora") == {"CPU_Mapped": (0.10, 0.0, 0.0)}
    assert (m.mmproj_backend, m.mmproj_estimate_mib, sizes("mmproj")) == (
        "CPU",
        0.38,
        {"CPU": (0.34, 0.0, 0.04)},  # its weights (load_hparams' model size) and compute
    )
    assert m.slots == (2, 1024, "false") and s.ready
    (cpu,) = s.ready_devices()  # launch's ready event: the model's numbers, the parts beside
    assert (cpu["model_mib"], cpu["kv_mib"]) == (2.80, 2.0)
    assert cpu["parts_mib"] == {
        "draft": round(1.19 + 1.0 + 3.77 + 0.01, 2),
        "lora": 0.10,
        "mmproj": 0.38,  # (llama-server's own estimate of the projector, above)
    }


def test_drafting_gives_the_model_an_output_per_drafted_token(files):
    base = ["-c", "2048", "-np", "2", "-md", str(files["draft"])]
    assert run(files, base).resolved.n_outputs_max == 2  # -md alone: no drafting type on
    on = run(files, [*base, "--spec-type", "draft-simple"])
    assert on.resolved.n_outputs_max == 2 * (1 + 3)  # --spec-draft-n-max defaults to 3
    five = run(files, [*base, "--spec-type", "draft-simple", "--spec-draft-n-max", "5"])
    assert five.resolved.n_outputs_max == 12
    assert part(five, "draft").buffers == part(on, "draft").buffers  # the draft outputs 1/slot
    ngram = run(files, [*base, "--spec-type", "ngram-mod,ngram-cache"])
    assert ngram.resolved.n_outputs_max == 2 * (1 + 64)  # ngram-mod drafts up to 64


@pytest.mark.parametrize(
    ("flag", "said"),
    [("--lora", "not a LoRA adapter"), ("--mmproj", "not a multimodal projector")],
)
def test_a_plain_model_as_an_adapter_or_projector_is_refused(files, capsys, flag, said):
    """llama-server refuses both ("expect general.type to be 'adapter'", "Failed to load
    CLIP model"): not "fits"."""
    assert main(["fit", str(files["main"]), flag, str(files["draft"]), "--gpus", "16GiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err


def test_an_architecture_llama_cpp_does_not_know_is_said(tmp_path):
    spec = replace(MAIN, arch="zzzzz")
    path = tmp_path / "new.gguf"
    gf.write_model(path, spec, "F16")
    res = estimate(read_gguf(path), parse_llama_args([]), cuda(1), NO_SEARCH)
    assert any("does not know the architecture 'zzzzz'" in w for w in res.warnings)


def test_estimates_leave_no_cycle_for_the_collector(tmp_path, capsys):
    """lltui fit and quant run with the collector off (lltui.cli.main): an estimate's
    placements held their plan, whose memo held them again (placement.tracked, the speed's
    weight sums), so every plan _routes' cache let go of lived to the exit (quant --best
    of a 235B MoE: 217 MB where 95 with the collector)."""
    import gc

    from lltui.core.memory import placement

    path = tmp_path / "moe.gguf"
    gf.write_sparse(path, gf.qwen3moe_spec(), "F16")
    gc.collect()
    gc.disable()
    try:
        assert main(["quant", str(path), "--gpus", "4090", "--best", "speed"]) == 0
        placement._routes.cache_clear()  # (as plans leave it in a long search)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = {
            type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("lltui.core")
        }
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    capsys.readouterr()
    assert not left, left
