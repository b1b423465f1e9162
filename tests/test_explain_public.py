"""``lltui explain`` on the llama.cpp logs users posted (tests/fixtures/llama-logs, with their
provenance): every buffer line read with its line number whatever the prefix, the build or
its range, failures, and, for the logs whose model can be reconstructed (tests/
public_models.py), the prediction line by line under the log's build and under the newest
rules."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.public_models import BY_LOG, corpus_entry, write

from lltui.cli import main
from lltui.core.explain.report import report_to_json, report_to_text
from lltui.core.llamalog.reader import scan_lines
from lltui.core.memory.common import device_alloc_size, is_gpu
from lltui.core.memory.devices import DeviceSpec
from lltui.core.units import MIB
from lltui.services.explain import ExplainRequest, explain

LOGS = Path(__file__).parent / "fixtures" / "llama-logs"
ALL = sorted(p.name for p in LOGS.glob("*.log"))
_BUFFER_LINE = re.compile(r"buffer size\s*=\s*-?[\d.]+\s*MiB")


def facts(name: str):
    return scan_lines(LOGS.joinpath(name).read_text(encoding="utf-8").splitlines())


def run(name: str, **kw):
    return explain(ExplainRequest(str(LOGS / name), ask_binary=False, **kw))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("public-models")


@pytest.fixture(scope="module")
def headers(model_dir: Path) -> dict[str, str]:
    return {log: str(write(rec, model_dir)) for log, rec in BY_LOG.items()}


# -- reading ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
def test_every_buffer_line_is_read_or_listed(name):
    """A line that prints a buffer size is a buffer of the report or an unparsed line,
    with its number; none is dropped."""
    lines = LOGS.joinpath(name).read_text(encoding="utf-8").splitlines()
    f = scan_lines(lines)
    wanted = {i for i, line in enumerate(lines, 1) if _BUFFER_LINE.search(line)}
    found = {b.line for b in f.buffers} | {n for n, _ in f.unparsed}
    assert wanted <= found, sorted(wanted - found)
    for b in f.buffers:
        assert b.kind in ("model", "kv", "rs", "compute", "output")
        assert b.mib_text in lines[b.line - 1]


def test_colour_without_escape_and_timestamps():
    f = facts("14-llama27680-dsv4-colour-timestamps-2026.log")
    assert [(b.device, b.kind, b.mib_text) for b in f.buffers] == [
        ("CUDA_Host", "output", "0.49"),
        ("CUDA0", "kv", "182.75"),
    ]
    assert f.buffers[1].cache == "swa"
    assert f.kv_sizes[0].cells == 64000


def test_journald_prefix_and_cuda_devices():
    f = facts("25-ollama3711-journal-2gpu-cpu-offload-2024.log")
    assert [d.name for d in f.devices] == ["CUDA0", "CUDA1"]
    assert f.devices[0].description == "NVIDIA RTX A6000"
    assert f.offloaded == (39, 41)
    assert {b.device for b in f.buffers} == {"CPU", "CUDA0"}


def test_pid_prefix_and_levels_recurrent_state():
    f = facts("09-pr23792-tp-meta-recurrent-timestamps-2026.log")
    assert [(b.device, b.kind, b.mib_text) for b in f.buffers] == [("Meta()", "rs", "124.69")]
    assert f.kv_sizes[0].recurrent and f.kv_sizes[0].seqs == "2"


def test_interleaved_lines_of_another_program():
    f = facts("17-ollama9496-cpu-only-init_from_model-2025.log")
    assert [(b.kind, b.mib_text) for b in f.buffers] == [
        ("kv", "4048.00"),
        ("output", "2.02"),
        ("compute", "2119.26"),
    ]
    assert f.unparsed == ()


def test_build_lines_of_each_era():
    assert facts("16-llama10560-mistral-large-ngl1-header-2024.log").build == 4202
    assert facts("26-llama9426-rpc-16-servers-tinyllama-2024.log").build == 3726
    shallow = facts("27-llama8112-rpc-llamacli-deepseek-coder-v2-2024.log")
    assert shallow.build is None and "partial copy" in (shallow.build_note or "")


def test_pasted_command_line_is_read():
    f = facts("16-llama10560-mistral-large-ngl1-header-2024.log")
    assert f.tool == "server"
    assert f.command[:2] == ("-m", "models/Mistral-Large-Instruct-2411-Q8_0.gguf")
    r = run("16-llama10560-mistral-large-ngl1-header-2024.log")
    argv = r.settings.argv
    assert "-c" in argv and "4096" in argv
    assert (argv[argv.index("-fa")], argv[argv.index("-fa") + 1]) == ("-fa", "on")
    assert "-ctk" in argv and "q8_0" in argv
    assert r.settings.model_ref == "models/Mistral-Large-Instruct-2411-Q8_0.gguf"


def test_build_range_of_logs_without_a_build_line():
    assert facts("12-llama11807-cpu-only-aarch64-repack-2025.log").build_range.label == (
        "b4081-b4462"
    )
    assert facts("13-llama15463-rpc-kv-unified-2025.log").build_range.label == "b5262-b6232"
    r = run("12-llama11807-cpu-only-aarch64-repack-2025.log")
    assert r.build == 4462 and "line formats" in r.build_source


def test_two_runs_pasted_together_are_two_loads():
    f = facts("05-llama12728-vulkan-init-prefix-oom-2025.log")
    assert f.loads == 2
    assert [b.load for b in f.buffers] == [1, 2, 2, 2]


# -- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "device", "needed", "stage"),
    [
        ("03-ollama6860-5gpu-compute-oom-2024.log", "CUDA4", 150995968, "compute"),
        ("04-ollama4225-nkvo-compute-oom-2024.log", "CUDA0", 4725934080, "compute"),
        ("10-llama16725-apertus70b-rocm-compute-oom-2025.log", "ROCm0", 14822711296, "compute"),
        ("11-llama20431-model-load-oom-2026.log", "CUDA0", 151851674624, "weights"),
    ],
)
def test_failed_loads_name_the_device_and_the_size(name, device, needed, stage):
    r = run(name)
    assert r.failed is not None and r.failed.kind == "oom"
    assert (r.failed.device, r.failed.needed_bytes, r.failed.stage) == (device, needed, stage)
    data = report_to_json(r)["failed"]
    assert {"device", "needed_bytes", "free_bytes", "message"} <= set(data)
    assert data["message"]


def test_a_kv_cache_that_does_not_fit_is_not_called_weights(tmp_path):
    # llama.cpp allocates the KV cache through alloc_tensor_range, as it does the weights;
    # the line after says what the buffer was for
    log = tmp_path / "kv-oom.log"
    log.write_text(
        "load_tensors:        CUDA1 model buffer size = 18500.00 MiB\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 4992.00 MiB on device 1: "
        "cudaMalloc failed: out of memory\n"
        "alloc_tensor_range: failed to allocate CUDA1 buffer of size 5234491392\n"
        "llama_kv_cache_unified: failed to allocate buffer for kv cache\n"
    )
    r = explain(ExplainRequest(str(log), ask_binary=False))
    assert r.failed is not None
    assert (r.failed.device, r.failed.stage, r.failed.needed_bytes) == ("CUDA1", "kv", 5234491392)


def test_a_cuda_error_while_serving_names_its_device(tmp_path):
    # ggml-cuda's report: the error, then the device it was on
    log = tmp_path / "serving-oom.log"
    log.write_text(
        "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n"
        "CUDA error: out of memory\n"
        "  current device: 1, in function alloc at /llama.cpp/ggml/src/ggml-cuda/ggml-cuda.cu:399\n"
        "  cuMemCreate(&handle, reserve_size, &prop, 0)\n"
    )
    r = explain(ExplainRequest(str(log), ask_binary=False))
    assert r.failed is not None and (r.failed.kind, r.failed.device) == ("oom", "CUDA1")


def test_each_llama_bench_test_is_a_context_of_its_own(tmp_path):
    """llama-bench -v makes a context per test (pp16, then tg4 with n_batch = 4): the last
    is read with its own settings, not the first's, and matches to the byte."""
    from lltui.sources.models.demo import write_demo

    model = tmp_path / "lltui-demo.gguf"
    write_demo(model)
    log = Path(__file__).parent / "fixtures" / "llama-server" / "bench_v_two_contexts.log"
    r = explain(ExplainRequest(str(log), model=str(model), ask_binary=False))
    assert "-b" in r.settings.argv and r.settings.argv[r.settings.argv.index("-b") + 1] == "4"
    compared = [c for c in r.checks if c.predicted_bytes is not None]
    assert len(compared) == 3 and all(c.exact for c in compared)  # output, KV, compute


def test_without_a_header_a_failure_says_what_to_give():
    r = run("04-ollama4225-nkvo-compute-oom-2024.log")
    text = report_to_text(r)
    assert "CUDA0 ran out allocating compute 4507.00 MiB" in text
    assert "--model" in text
    assert all(c.predicted_bytes is None for c in r.checks)


# -- predictions with reconstructed headers ---------------------------------------------------


def checks(r):
    return {(c.line.line, c.line.device, c.line.kind): c for c in r.checks}


def test_tinyllama_over_16_rpc_servers_matches_every_weights_line(headers):
    """b3726, llama-cli over 16 RPC servers (their addresses masked as x and y), no free
    memory printed: llama.cpp's even split of 23 layers over 16 devices (2,1,2,1,...) is what
    the log shows, and every line, the CPU's input layer and the last server's output layer
    too, is exact without recovering anything from the lines."""
    name = "26-llama9426-rpc-16-servers-tinyllama-2024.log"
    r = run(name, model=headers[name])
    assert r.build == 3726
    assert len(r.devices.devices) == 16
    assert all(c.exact for c in r.checks), [(c.line.line, c.predicted_bytes) for c in r.checks]
    assert not any("recovered from the weights' lines" in n for n in r.notes)


def test_r1_distill_qwen_32b_q4_k_m_weights_are_exact(headers):
    name = "28-llama11861-r1-distill-qwen32b-fa-2025.log"
    r = run(name, model=headers[name])
    got = {(c.line.device, c.line.mib_text): c.exact for c in r.checks}
    assert got == {("CUDA0", "18508.35"): True, ("CPU_Mapped", "417.66"): True}


def test_tinyllama_q4_0_repacked_on_the_cpu(headers):
    name = "12-llama11807-cpu-only-aarch64-repack-2025.log"
    r = run(name, model=headers[name])
    c = checks(r)
    assert c[(4, "CPU_AARCH64", "model")].exact  # the repacked weights
    assert c[(15, "CPU", "kv")].exact and c[(17, "CPU", "output")].exact
    assert c[(18, "CPU", "compute")].within(0.05)
    # the mapped span depends on the order of the tensors in the user's file
    assert not c[(3, "CPU_Mapped", "model")].exact


def test_an_old_logs_default_slots_under_the_newest_rules(headers):
    """An old log explained under its build's rules and under the newest: it does not print
    its slots, so the build's default stands: one (b2413-b4462), four with -np auto (b7433
    on). The output buffer, sized by the slots, differs four times over; the KV cache (its
    context printed) is the same and exact under both."""
    name = "04-ollama4225-nkvo-compute-oom-2024.log"
    old = checks(run(name, model=headers[name]))[(9, "CUDA_Host", "output")]
    new = checks(run(name, model=headers[name], build=11434))[(9, "CUDA_Host", "output")]
    assert new.predicted_bytes == 4 * old.predicted_bytes == 4 * 4 * 128256
    kv_old = checks(run(name, model=headers[name]))[(7, "CUDA_Host", "kv")]
    kv_new = checks(run(name, model=headers[name], build=11434))[(7, "CUDA_Host", "kv")]
    assert kv_old.exact and kv_new.exact


def test_a_failed_run_above_a_working_one_is_an_earlier_load_not_the_verdict():
    """Fixture 05 is two runs: -ctk q8_0 ran out of compute memory, the default loaded. The
    verdict and the comparison are the last load's; the failure was paired with its numbers."""
    r = run("05-llama12728-vulkan-init-prefix-oom-2025.log")
    assert r.failed is None
    assert {f.load for f in r.facts.failures} == {1}
    said = "load 1 of 2 ran out of memory on Vulkan0 (line 3: ggml_vulkan: Device memory"
    assert any(n.startswith(said) for n in r.notes), r.notes


def test_llama3_kv_on_the_host_and_the_failed_compute_buffer(headers):
    name = "04-ollama4225-nkvo-compute-oom-2024.log"
    r = run(name, model=headers[name])
    assert checks(r)[(7, "CUDA_Host", "kv")].exact  # -nkvo: 65536 cells on the host
    assert r.failed is not None and r.failed.device == "CUDA0"


def test_deepseek_v2_before_mla_caches_full_heads(headers):
    """A DeepSeek-V2 GGUF converted before MLA: K 128 x 192 and V 128 x 128 per token."""
    name = "05-llama12728-vulkan-init-prefix-oom-2025.log"
    r = run(name, model=headers[name])
    c = checks(r)
    assert c[(9, "Vulkan0", "kv")].exact
    assert c[(1, "Vulkan0", "kv")].predicted_bytes is None  # the first run of the two
    # Vulkan's compute buffer by CUDA's graph rules: within 10% on this log (1216 vs 1174 MiB)
    assert c[(11, "Vulkan0", "compute")].within(0.10)
    assert any("ggml-vulkan sizes them" in n for n in r.notes)


def test_vulkan_takes_a_tensors_plain_size_where_cuda_pads_its_rows():
    """ggml-vulkan's get_alloc_size is ggml_nbytes; ggml-cuda adds what pads a quantized
    row of 768 (not a multiple of 512) to 1024 elements, 256 / 32 blocks of 18 bytes, and
    aligns to 128."""
    q4_0, dims = 2, (768, 4096)
    nbytes = 768 // 32 * 18 * 4096
    cuda = DeviceSpec("CUDA0", "cuda")
    rocm = DeviceSpec("ROCm0", "cuda")
    vulkan = DeviceSpec("Vulkan0", "cuda", backend="vulkan")
    assert device_alloc_size(vulkan, q4_0, dims, nbytes) == nbytes
    padded = (nbytes + 256 // 32 * 18 + 127) // 128 * 128
    assert device_alloc_size(cuda, q4_0, dims, nbytes) == padded > nbytes
    assert device_alloc_size(rocm, q4_0, dims, nbytes) == padded
    assert is_gpu(vulkan) and is_gpu(cuda)


# -- the JSON contract and the command line ---------------------------------------------------


def test_json_contract(headers, capsys):
    name = "28-llama11861-r1-distill-qwen32b-fa-2025.log"
    assert main(["explain", str(LOGS / name), "--model", headers[name], "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["build"] is None or isinstance(data["build"], int)
    assert data["failed"] is None
    for b in data["buffers"]:
        assert {"device", "kind", "logged_bytes", "predicted_bytes"} <= set(b)
        assert b["kind"] in ("model", "kv", "rs", "compute", "output")
        assert isinstance(b["logged_bytes"], int)
    assert data["buffers"][0]["device"] == "CUDA0"
    assert (
        data["buffers"][0]["predicted_bytes"] == round(18508.35 * MIB, -4)
        or abs(data["buffers"][0]["predicted_bytes"] - 18508.35 * MIB) < 0.005 * MIB
    )
    assert isinstance(data["unparsed"], list)
    case = data["case"]
    for key in ("hparams", "tensor_types", "flags", "devices", "buffers", "build", "rules"):
        assert key in case
    assert case["hparams"]["n_layer"] == 64 and case["tensor_types"]["q4_K"] > 0


def test_json_without_a_header_has_null_predictions(capsys):
    name = "13-llama15463-rpc-kv-unified-2025.log"
    assert main(["explain", str(LOGS / name), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(b["predicted_bytes"] is None for b in data["buffers"])
    assert data["build_range"] == "b5262-b6232"
    assert data["rules"]["follows"] == 6232


def test_text_names_the_rules_followed_and_what_is_not_modelled(capsys):
    name = "26-llama9426-rpc-16-servers-tinyllama-2024.log"
    assert main(["explain", str(LOGS / name)]) == 0
    out = capsys.readouterr().out
    assert "figures follow the rules of b3726 cli" in out
    assert "b3726 cli changes lltui does not model:" in out
    assert "compute buffers follow the pinned build's graph" in out


def test_the_header_by_an_hf_reference(headers, tmp_path, monkeypatch):
    """``--model hf:OWNER/REPO:QUANT``: the header read by ranged requests (a local hub)."""
    from support.hub_server import Hub, HubServer, Repo

    from lltui.sources.models import hf_hub

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(hf_hub, "token", lambda: None)
    name = "28-llama11861-r1-distill-qwen32b-fa-2025.log"
    files = {"R1-Distill-Qwen-32B-Q4_K_M.gguf": Path(headers[name])}
    with HubServer(Hub(repos={"acme/R1-GGUF": Repo(files=files)})) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        r = run(name, model="hf:acme/R1-GGUF:Q4_K_M")
    assert r.model_read and all(c.exact for c in r.checks)


def test_a_llama_bench_run_with_its_load_log(tmp_path):
    """llama-bench -v: the load lines, its table, and the build line it prints after it."""
    body = (LOGS / "12-llama11807-cpu-only-aarch64-repack-2025.log").read_text()
    table = (
        "| model                          |       size |     params | backend    | threads "
        "|          test |                  t/s |\n"
        "| ------------------------------ | ---------: | ---------: | ---------- | ------: "
        "| ------------: | -------------------: |\n"
        "| llama 1B Q4_0                  | 606.53 MiB |     1.10 B | CPU        |       4 "
        "|         pp512 |        123.45 ± 0.50 |\n\n"
        "build: 8e672efe (4402)\n"
    )
    path = tmp_path / "bench.log"
    path.write_text(body + table)
    r = explain(ExplainRequest(str(path), ask_binary=False))
    assert r.facts.tool == "bench" and r.build == 4402
    assert r.rules.tool == "bench" and r.rules.label == "b4402 bench"
    assert len(r.checks) == 5


@pytest.mark.parametrize("name", ALL)
def test_the_corpus_of_cases_is_what_explain_says_now(name, model_dir):
    """tests/fixtures/llama-logs/cases holds each log's case and line-by-line predictions
    (scripts/explain_cases.py writes them): a change in the log reader, the rules or the
    estimate shows here as a difference to look at, and to regenerate when it is right."""
    kept = json.loads((LOGS / "cases" / f"{Path(name).stem}.json").read_text())
    now = json.loads(json.dumps(corpus_entry(LOGS / name, model_dir)))
    assert now == kept


def test_a_default_verbosity_server_log_gives_its_slots_and_says_how_to_see_buffers(tmp_path):
    """The pinned llama-server at its default verbosity prints no buffer line, but its slots:
    -c, -np and -kvu come from there; the prediction stands alone, and the report says how
    to have the buffers printed."""
    from support.llama_fixture import write_tiny_llama

    log = Path(__file__).parent / "fixtures" / "llama-server" / "server_default_verbosity_full.log"
    model = write_tiny_llama(tmp_path / "tiny.gguf")
    r = explain(ExplainRequest(str(log), model=str(model), ask_binary=False))
    assert r.settings.argv == ("-c", "2048", "-np", "4", "-kvu")
    assert not r.checks
    assert {k for _, k, _ in r.comparison.not_logged} == {"model", "kv", "output", "compute"}
    assert "-lv 4" in report_to_text(r)


def test_a_logs_thread_count_is_the_estimates_t(tmp_path):
    """system_info's ``n_threads = 2`` is the -t the server ran with: a log explained alone
    is predicted at it, as with -t 2 given (it was at the assumed CPU's own count)."""
    from support.llama_fixture import write_tiny_llama

    from lltui.core.cmdline.args import parse_llama_args

    log = Path(__file__).parent / "fixtures" / "llama-server" / "server_lv4_full.log"
    model = str(write_tiny_llama(tmp_path / "tiny.gguf"))
    alone = explain(ExplainRequest(str(log), model=model, ask_binary=False))
    given = parse_llama_args(["-t", "2"])
    with_t = explain(ExplainRequest(str(log), model=model, ask_binary=False, args=given))
    assert "-t 2 (n_threads = 2)" in alone.settings.from_log
    assert alone.result is not None and with_t.result is not None
    assert alone.result.speed == with_t.result.speed


def test_a_header_of_another_model_is_said(headers):
    """Log 24 loaded DeepSeek-V3 (129280 tokens); TinyLlama's header is not its model."""
    r = run(
        "24-ollama9782-deepseek-8gpu-model-buffers-2025.log",
        model=headers["26-llama9426-rpc-16-servers-tinyllama-2024.log"],
    )
    assert any("not the model the log loaded" in n and "129280" in n for n in r.notes)


def test_the_context_an_ollama_log_does_not_print_comes_from_its_kv_size(model_dir):
    """ollama's log is cut before llama.cpp's context lines: the KV buffer (4048 MiB of a
    32-layer, 8-KV-head model in f16: 128 KiB a cell) says 32384 cells, not the build's
    default 4096; the compute buffer follows it (KQ of 32384 cells)."""
    name = "17-ollama9496-cpu-only-init_from_model-2025.log"
    entry = corpus_entry(LOGS / name, model_dir)
    case = entry["case"]
    assert case["flags"][-2:] == ["-c", "32384"]
    assert not any(a.startswith("-c:") for a in case["flags_assumed"])
    lines = {line["kind"]: line for line in entry["lines"]}
    assert lines["kv"]["exact"]
    compute = lines["compute"]
    assert (
        abs(compute["predicted_bytes"] - compute["logged_bytes"]) < 0.01 * compute["logged_bytes"]
    )


def test_the_host_row_has_the_device_lists_free_memory(tmp_path):
    """llama-server (b11434, CPU build) lists the host as ``- CPU : AMD EPYC (24105 MiB,
    24105 MiB free)``: the host row said "-" free where the failure line used that figure
    (lines from the project's shared fixture error_alloc_failure_kv_cache.log)."""
    log = tmp_path / "server.log"
    log.write_text(
        "0.00.002.270 I cmn  common_param: device_info:\n"
        "0.00.002.278 I cmn  common_param:   - CPU     : AMD EPYC (24105 MiB, 24105 MiB free)\n"
        "0.00.013.954 I load_tensors:   CPU_Mapped model buffer size =     3.18 MiB\n"
    )
    r = explain(ExplainRequest(str(log), ask_binary=False))
    (host,) = [d for d in report_to_json(r)["devices"] if d["name"] == "host"]
    assert host["free_bytes"] == 24105 * MIB and host["description"] == "AMD EPYC"
