"""The llama-server log parser on captured logs, on the source's line formats, and live."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from support.llama_fixture import llama_bins, llama_server, rpc_servers, stop_group, tiny_model

from lltui.core.llamalog.classify import classify
from lltui.core.llamalog.lines import split_line
from lltui.core.llamalog.models import LlamaLogSummary, device_of_buffer
from lltui.core.llamalog.patterns import parse_breakdown_row
from lltui.core.llamalog.reader import LogReader, parse_list_devices, parse_log
from lltui.core.llamalog.server import classify_problem
from lltui.sources.llama.binary import list_devices

# Fixtures used by the live tests below.
__all__ = ["llama_bins", "tiny_model"]

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llama-server"  # see its README.md


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def sections(text: str) -> list[str]:
    """The runs of a capture file, split at its ``=====`` separator lines."""
    return [s for s in re.split(r"^=+$", text, flags=re.MULTILINE) if s.strip()]


# --- line splitting ---------------------------------------------------------------------------


def test_split_line_reads_the_timestamp_and_level() -> None:
    line = split_line("1.02.003.004 W srv  llama_server: hello\n")
    assert line.level == "W"
    assert line.t_us == ((1 * 60 + 2) * 1000 + 3) * 1000 + 4
    assert line.message == "srv  llama_server: hello"
    assert line.prefixed


def test_split_line_leaves_unprefixed_lines_alone() -> None:
    line = split_line("error: invalid argument: --no-mmap")
    assert line.level is None and line.t_us is None and not line.prefixed
    assert line.message == "error: invalid argument: --no-mmap"


# --- captured logs ----------------------------------------------------------------------------


def test_lv4_log_gives_device_buffers_kv_and_readiness() -> None:
    s = parse_log(fixture("server_lv4_full.log"))
    m = s.memory
    assert [(d.name, d.description, d.total_mib, d.free_mib) for d in m.devices] == [
        ("CPU", "AMD EPYC", 24105, 24105)
    ]
    buffers = {b.name: b for b in s.buffers}
    assert buffers["CPU_Mapped"].model_mib == 3.18
    assert buffers["CPU"].output_mib == 0.01
    assert buffers["CPU"].kv_mib == 4.00
    assert buffers["CPU"].compute_mib == 5.52
    (kv,) = m.kv_sizes
    assert (kv.size_mib, kv.cells, kv.layers, kv.seqs) == (4.00, 2048, 8, "4/1")
    assert (kv.k_type, kv.k_mib, kv.v_type, kv.v_mib) == ("f16", 2.00, "f16", 2.00)
    assert m.context_int("n_ctx") == 2048
    assert m.context_value("flash_attn") == "auto"
    assert m.context_value("kv_unified") == "true"
    assert m.slots == (4, 2048, "true")
    assert m.build is None and "build 0" in (m.build_note or "")
    assert m.model_path == "models/tiny-llama.gguf"
    assert s.model_loaded and s.ready
    assert s.listening == ("http://127.0.0.1:18180",)
    assert s.shutting_down and s.exit_reason is None and not s.problems
    # Host buffers (CPU_Mapped, CPU) all belong to the CPU device.
    (cpu,) = s.placement()
    assert cpu.name == "CPU"
    assert (cpu.model_mib, cpu.kv_mib, cpu.compute_mib, cpu.output_mib) == (3.18, 4.0, 5.52, 0.01)
    assert s.ready_devices() == [
        {"name": "CPU", "model_mib": 3.18, "kv_mib": 4.0, "compute_mib": 5.52}
    ]


def test_lv4_log_fit_found_nothing_to_change() -> None:
    fit = parse_log(fixture("server_lv4_full.log")).fit
    assert fit.ran and fit.status == "no_change"
    assert (fit.projected_used_mib, fit.projected_of, fit.projected_free_mib) == (12, "host", 24105)
    assert fit.ctx_from is None and fit.reason is None


def test_memory_breakdown_table_rows() -> None:
    s = parse_log(fixture("server_lv4_full.log"))
    (host,) = s.memory_breakdown
    assert (host.kind, host.name) == ("host", "Host")
    assert (host.self_mib, host.model_mib, host.context_mib, host.compute_mib) == (12, 3, 4, 5)


def test_fit_that_reduced_the_context() -> None:
    s = parse_log(fixture("server_fit_reduces_ctx.log"))
    fit = s.fit
    assert fit.status == "changed"
    assert (fit.ctx_from, fit.ctx_to, fit.ctx_saved_mib) == (16777216, 1399040, 45053)
    assert (fit.target_mib, fit.reduce_by_mib) == (20000, 45053)
    assert (fit.projected_used_mib, fit.projected_free_mib) == (49158, 24105)
    assert fit.seconds == 0.64
    assert s.memory.context_int("n_ctx") == 1399040 and s.memory.slots is not None
    assert s.memory.slots[1] == 1399040
    cpu = {b.name: b for b in s.buffers}["CPU"]
    assert (cpu.kv_mib, cpu.compute_mib) == (2732.50, 1369.77)
    (kv,) = s.memory.kv_sizes
    assert (kv.cells, kv.k_mib, kv.v_mib) == (1399040, 1366.25, 1366.25)
    # The table printed at exit is the one kept, not the fit probe's.
    (host,) = s.memory_breakdown
    assert (host.self_mib, host.model_mib, host.context_mib, host.compute_mib) == (
        4105,
        3,
        2732,
        1369,
    )


@pytest.mark.parametrize(
    ("name", "why", "line"),
    [
        ("error_context_quantized_v_fa_off.log", "quantized V cache requires flash_attn", 114),
        ("error_context_mla_kv_types.log", "model does not support different K (q8_0)", 134),
    ],
)
def test_a_context_refused_for_its_settings_names_the_setting(name, why, line) -> None:
    """llama_init_from_model refuses -ctv q8_0 with -fa off, and -ctk without the same -ctv on
    an MLA model: the failure is that line, not the "failed to create context" after it."""
    from lltui.services.explain import ExplainRequest, explain

    s = parse_log(fixture(name))
    assert not s.ready and s.failed
    assert any(p.kind == "load" and why in p.message for p in s.problems)
    failed = explain(ExplainRequest(str(FIXTURES / name), ask_binary=False)).failed
    assert failed is not None and failed.line == line and why in failed.message


def test_a_model_file_that_cannot_be_opened_is_the_failure_with_its_reason(tmp_path) -> None:
    """The loader's "failed to load model from X" lines after it do not say why."""
    from lltui.services.explain import ExplainRequest, explain

    part = next(p for p in sections(fixture("errors_exit_codes.txt")) if "does-not-exist" in p)
    log = tmp_path / "missing.log"
    log.write_text(part.strip() + "\n")
    failed = explain(ExplainRequest(str(log), ask_binary=False)).failed
    assert failed is not None and failed.stage == "load" and failed.line == 6
    assert failed.message == (
        "gguf_init_from_file: failed to open GGUF file 'models/does-not-exist.gguf' "
        "(No such file or directory)"
    )


@pytest.mark.parametrize("flag", ["--no-such-flag", "-sm diagonal"])
def test_a_refused_command_line_is_not_told_to_raise_the_verbosity(tmp_path, flag) -> None:
    """It stopped before loading: -lv 4 would have printed no buffer line either."""
    from lltui.core.explain.report import report_to_text
    from lltui.services.explain import ExplainRequest, explain

    part = next(p for p in sections(fixture("errors_exit_codes.txt")) if f"18180 {flag}\n" in p)
    log = tmp_path / "refused.log"
    log.write_text(part.strip() + "\n")
    text = report_to_text(explain(ExplainRequest(str(log), ask_binary=False)))
    assert "llama-server refused its arguments, before loading" in text
    assert "-lv 4" not in text


def test_a_flag_llama_server_refused_is_not_taken_as_applied(tmp_path) -> None:
    """This build refuses --no-mmap (its spelling is -lm none): explain showed "flags: -lm
    none" and predicted a CPU model buffer, not the CPU_Mapped one it would map."""
    from support import gguf_factory as gf

    from lltui.core.explain.report import report_to_text
    from lltui.services.explain import ExplainRequest, explain

    part = next(p for p in sections(fixture("errors_exit_codes.txt")) if "18180 --no-mmap\n" in p)
    log = tmp_path / "refused.log"
    log.write_text(part.strip() + "\n")
    model = tmp_path / "tiny.gguf"
    gf.write_model(model, gf.llama_spec(), "Q8_0")
    report = explain(ExplainRequest(str(log), model=str(model), ask_binary=False))
    assert report.settings.args.use_mmap
    assert "--no-mmap (llama-server refused it)" in report.settings.ignored
    text = report_to_text(report)
    assert "-lm none" not in text and "CPU_Mapped" in text


@pytest.mark.parametrize(
    "name", ["error_context_n_seq_max.log", "error_context_quantized_v_fa_off.log"]
)
def test_fit_s_probe_failing_as_the_load_does_is_not_another_run(name) -> None:
    """--fit's probe fails on the same line before the load does: one run, not "a run
    before load 1 failed"."""
    from lltui.services.explain import ExplainRequest, explain

    r = explain(ExplainRequest(str(FIXTURES / name), ask_binary=False))
    assert r.failed is not None and r.failed.line == 114
    assert not [n for n in r.notes if "a run before" in n]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("error_not_gguf.log", "invalid magic characters: 'hell', expected 'GGUF'"),
        ("error_gguf_header_cut.log", "failed to read key-value pairs"),
    ],
)
def test_a_model_file_gguf_cannot_read_is_the_failure_with_its_reason(name, why) -> None:
    """-m a file that is not GGUF, or cut short in its header: gguf's line says why; the
    loader's "failed to load model from X" after it does not."""
    from lltui.core.llamalog.exit_reason import exit_reason
    from lltui.services.explain import ExplainRequest, explain

    failed = explain(ExplainRequest(str(FIXTURES / name), ask_binary=False)).failed
    assert failed is not None and failed.stage == "load" and failed.line == 6
    assert failed.message == f"gguf_init_from_reader: {why}"
    reason = exit_reason(1, fixture(name).splitlines())
    assert reason == f"llama-server could not load the model: {why}"


def test_kv_allocation_failure_is_an_oom_and_a_failed_start() -> None:
    s = parse_log(fixture("error_alloc_failure_kv_cache.log"))
    assert not s.ready and s.failed
    assert s.exit_reason == "model loading error"
    assert s.fit.status == "failed"
    assert s.fit.reason == "was unable to fit model into system memory by reducing context, abort"
    assert (s.fit.target_mib, s.fit.reduce_by_mib) == (1024, 94112)
    kinds = [p.kind for p in s.problems]
    assert kinds[0] == "fit"
    assert "oom" in kinds
    oom = [p for p in s.problems if p.kind == "oom"]
    assert any("attempted to allocate 78125.00 MB" in p.message for p in oom)
    assert any("failed to allocate buffer for kv cache" in p.message for p in oom)
    (host,) = s.memory_breakdown
    assert (host.self_mib, host.context_mib, host.compute_mib) == (117194, 78125, 39066)
    assert s.memory.context_int("n_ctx") == 40000000
    # The KV buffer never got allocated; the weights did.
    (cpu,) = s.placement()
    assert (cpu.model_mib, cpu.kv_mib, cpu.output_mib) == (3.18, 0.0, 0.01)


def test_verbose_log_keeps_the_real_load_not_the_fit_probe() -> None:
    s = parse_log(fixture("server_verbose_v_full.log"))
    assert s.memory.loads == 2  # the fit probe and the real load
    buffers = {b.name: b for b in s.buffers}
    # The probe printed "CPU model buffer size = 0.00" and "KV buffer size = 0.00".
    assert buffers["CPU_Mapped"].model_mib == 3.18
    assert buffers["CPU"].model_mib == 0.0
    assert buffers["CPU"].kv_mib == 4.00
    assert s.memory.layer_devices == tuple((i, "CPU") for i in range(9))  # 8 layers + output
    (cpu,) = s.placement()
    assert cpu.layers == tuple(range(9))
    assert s.ready


def test_jsonl_log_parses_like_the_text_log() -> None:
    text = parse_log(fixture("server_lv4_full.log"))
    jsonl = parse_log(fixture("server_jsonl_lv4_full.log"))
    assert jsonl.ready and jsonl.listening == text.listening
    assert jsonl.buffers == text.buffers
    assert [replace(k, line=0) for k in jsonl.memory.kv_sizes] == [
        replace(k, line=0) for k in text.memory.kv_sizes
    ]
    assert jsonl.memory_breakdown == text.memory_breakdown
    assert jsonl.fit.status == text.fit.status
    assert jsonl.memory.devices == text.memory.devices


def test_default_verbosity_has_no_placement_but_readiness() -> None:
    s = parse_log(fixture("server_default_verbosity_full.log"))
    assert s.buffers == () and s.placement() == () and s.memory_breakdown == ()
    assert s.ready and s.memory.slots is not None and s.memory.slots[:2] == (4, 2048)


def test_startup_log_is_ready_and_not_shutting_down() -> None:
    s = parse_log(fixture("startup_lv4.log"))
    assert s.ready and not s.shutting_down


@pytest.mark.parametrize("name", ["shutdown_sigint_lv4.log", "shutdown_sigterm_lv4.log"])
def test_shutdown_logs(name: str) -> None:
    s = parse_log(fixture(name))
    assert s.shutting_down and not s.problems
    (host,) = s.memory_breakdown
    assert (host.model_mib, host.context_mib, host.compute_mib) == (3, 4, 5)


def test_signal_during_loading_log_stops_before_ready() -> None:
    for part in fixture("signal_during_loading.txt").split("=== sent")[1:]:
        s = parse_log(part)
        assert not s.ready and not s.shutting_down
        assert {b.name: b for b in s.buffers}["CPU"].kv_mib == 256.00


def test_error_exits_are_classified() -> None:
    parts = sections(fixture("errors_exit_codes.txt"))
    by_cmd = {p.strip().splitlines()[0]: parse_log(p) for p in parts}

    def find(fragment: str) -> LlamaLogSummary:
        return next(s for cmd, s in by_cmd.items() if fragment in cmd)

    unknown = find("--no-such-flag")
    assert [(p.kind, p.message) for p in unknown.problems] == [
        ("argument", "error: invalid argument: --no-such-flag")
    ]
    bad_sm = find("-sm diagonal")
    assert bad_sm.problems[0].kind == "argument"
    assert 'argument "-sm"' in bad_sm.problems[0].message
    missing = find("does-not-exist")
    assert missing.exit_reason == "model loading error"
    assert missing.fit.status == "error"
    assert "load" in {p.kind for p in missing.problems}
    truncated = find("truncated.gguf")
    assert any("not within the file bounds" in p.message for p in truncated.problems)
    port = find("port already taken")
    assert port.exit_reason == "HTTP server error"
    assert [p.kind for p in port.problems] == ["bind", "error"]
    assert not any(s.ready for s in by_cmd.values())


def test_warnings_before_the_log_starts_are_kept() -> None:
    s = parse_log(fixture("cpu_build_gpu_flag_warnings.txt"))
    assert "warning: no usable GPU found, --gpu-layers option will be ignored" in s.warnings
    assert s.ready
    env = parse_log(fixture("env_vars_precedence.txt"))
    assert any(
        w.startswith("warn: LLAMA_ARG_PORT environment variable is set") for w in env.warnings
    )
    assert env.memory.slots is not None and env.memory.slots[0] == 2
    assert env.memory.context_value("kv_unified") is None


def test_list_devices_on_a_cpu_build_is_empty() -> None:
    for part in fixture("list_devices.txt").split("$ ")[1:]:
        assert "Available devices" in part
        assert parse_list_devices(part) == ()


def test_fit_params_tool_output() -> None:
    text = fixture("llama_fit_params.txt")
    runs = {p.splitlines()[0]: parse_log(p) for p in text.split("\n$ ")}
    user_ctx = next(s for cmd, s in runs.items() if "-c 16777216" in cmd)
    assert user_ctx.fit.status == "failed"
    assert user_ctx.fit.reason is not None and user_ctx.fit.reason.endswith("abort")
    reduced = next(s for cmd, s in runs.items() if "--fit-target 20000" in cmd)
    assert (reduced.fit.ctx_from, reduced.fit.ctx_to) == (16777216, 1399040)
    default_long = next(
        s for cmd, s in runs.items() if cmd.strip() == "llama-fit-params -m tiny-longctx.gguf -lv 4"
    )
    assert default_long.fit.ctx_to == 7876096


# --- GPU and RPC lines, written with the source's own printf formats ---------------------------


def c_format(fmt: str, *args: object) -> str:
    """Apply a C printf format (the subset llama.cpp uses here) the way the server does."""
    return fmt.replace("%zu", "%d").replace("%" + "PRId64", "%d") % args


def gpu_log() -> list[str]:
    t = "0.00.001.000 I "
    lines = [
        t + "ggml_cuda_init: found 2 CUDA devices (Total VRAM: 48160 MiB):",
        t
        + c_format(
            "  Device %d: %s, compute capability %d.%d, VMM: %s, VRAM: %zu MiB",
            0,
            "NVIDIA GeForce RTX 4090",
            8,
            9,
            "yes",
            24080,
        ),
        t
        + c_format(
            "  Device %d: %s, compute capability %d.%d, VMM: %s, VRAM: %zu MiB",
            1,
            "NVIDIA GeForce RTX 3090",
            8,
            6,
            "no",
            24080,
        ),
        t + "cmn  common_param: device_info:",
        t
        + c_format(
            "cmn  common_param:   - %-8s: %s (%zu MiB, %zu MiB free)",
            "CUDA0",
            "NVIDIA GeForce RTX 4090",
            24080,
            23500,
        ),
        t
        + c_format(
            "cmn  common_param:   - %-8s: %s (%zu MiB, %zu MiB free)",
            "CUDA1",
            "NVIDIA GeForce RTX 3090",
            24080,
            23000,
        ),
        t + "cmn  common_param:   - CPU     : AMD EPYC (64000 MiB, 60000 MiB free)",
        t
        + c_format(
            "llama_model_load_from_file_impl: using device %s (%s) (%s) - %zu MiB free",
            "CUDA0",
            "NVIDIA GeForce RTX 4090",
            "0000:01:00.0",
            23400,
        ),
        t
        + c_format(
            "llama_model_load_from_file_impl: using device %s (%s) (%s) - %zu MiB free",
            "CUDA1",
            "NVIDIA GeForce RTX 3090",
            "0000:02:00.0",
            22900,
        ),
        t + "load_tensors: loading model tensors, this can take a while... (load_mode = mmap)",
        t + "load_tensors: offloading output layer to GPU",
        t + c_format("load_tensors: offloading %d repeating layers to GPU", 32),
        t + c_format("load_tensors: offloaded %d/%d layers to GPU", 33, 33),
    ]
    for name, mib in (("CUDA0", 9300.25), ("CUDA1", 8100.5), ("CPU_Mapped", 410.0)):
        lines.append(t + c_format("load_tensors: %12s model buffer size = %8.2f MiB", name, mib))
    lines.append(t + "llama_context: pipeline parallelism enabled")
    lines.append(
        t + c_format("llama_context: %10s  output buffer size = %8.2f MiB", "CUDA_Host", 0.98)
    )
    # An SWA model has two KV caches; each prints its buffers.
    for name, mib in (("CUDA0", 512.0), ("CUDA1", 480.0), ("CUDA0", 64.0), ("CUDA1", 60.0)):
        lines.append(t + c_format("llama_kv_cache: %10s KV buffer size = %8.2f MiB", name, mib))
    for name, mib in (("CUDA0", 300.01), ("CUDA1", 290.0), ("CUDA_Host", 40.02)):
        lines.append(t + c_format("sched_reserve: %10s compute buffer size = %8.2f MiB", name, mib))
    lines.append(t + "sched_reserve: graph: nodes = 1030, splits = 3 (with bs=512), 3 (with bs=1)")
    lines.append(
        t + "common_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   "
        "model   context   compute    unaccounted |"
    )
    lines.append(
        t
        + c_format(
            "common_memory_breakdown_print: | %s | %s = %s + (%s = %s + %s + %s) + %s |",
            "  - CUDA0 (RTX 4090)",
            "24080",
            " 1200",
            "21000",
            "18000",
            "   2500",
            "    500",
            "       1880",
        )
    )
    lines.append(
        t
        + c_format(
            "common_memory_breakdown_print: | %s | %s = %s + (%s = %s + %s + %s) + %s |",
            "  - CUDA1 (RTX 3090)",
            "24080",
            " 5000",
            "19000",
            "17000",
            "   1500",
            "    500",
            "        -20",
        )
    )
    lines.append(
        t + "common_memory_breakdown_print: |   - Host               |"
        "                  450 =   410 +       0 +      40                |"
    )
    lines.append(t + "srv  llama_server: model loaded")
    lines.append(t + "srv  llama_server: listening on http://127.0.0.1:8181")
    return lines


def test_gpu_lines_give_devices_offload_and_per_device_buffers() -> None:
    s = parse_log(gpu_log())
    m = s.memory
    # ggml_cuda_init names them, device_info gives their size, "using device" what the load
    # found free
    assert [(d.name, d.description, d.total_mib, d.free_mib, d.source) for d in m.devices] == [
        ("CUDA0", "NVIDIA GeForce RTX 4090", 24080, 23400, "using device"),
        ("CUDA1", "NVIDIA GeForce RTX 3090", 24080, 22900, "using device"),
        ("CPU", "AMD EPYC", 64000, 60000, "device_info"),
    ]
    assert m.offloaded == (33, 33)
    assert m.pipeline_parallel
    placement = {p.name: p for p in s.placement()}
    assert list(placement) == ["CUDA0", "CUDA1", "CPU"]
    assert (placement["CUDA0"].model_mib, placement["CUDA0"].kv_mib) == (9300.25, 576.0)
    assert (placement["CUDA1"].model_mib, placement["CUDA1"].kv_mib) == (8100.5, 540.0)
    assert placement["CUDA0"].compute_mib == 300.01 and placement["CUDA0"].free_mib == 23400
    # CUDA_Host (pinned host memory) counts with the CPU.
    assert placement["CPU"].buffers == ("CPU_Mapped", "CUDA_Host")
    assert (placement["CPU"].model_mib, placement["CPU"].output_mib) == (410.0, 0.98)
    assert placement["CPU"].compute_mib == 40.02
    rows = {r.name: r for r in s.memory_breakdown}
    assert (rows["CUDA0"].description, rows["CUDA0"].total_mib, rows["CUDA0"].free_mib) == (
        "RTX 4090",
        24080,
        1200,
    )
    assert (rows["CUDA0"].self_mib, rows["CUDA0"].model_mib, rows["CUDA0"].unaccounted_mib) == (
        21000,
        18000,
        1880,
    )
    assert rows["CUDA1"].unaccounted_mib == -20
    assert rows["Host"].kind == "host" and rows["Host"].model_mib == 410
    assert s.ready and s.listening == ("http://127.0.0.1:8181",)


# ggml/src/ggml-cuda/ggml-cuda.cu, ggml_cuda_init (pinned b11434), under GGML_USE_HIP
HIP_DEVICE = "  Device %d: %s, %s (0x%x), VMM: %s, Wave Size: %d, VRAM: %zu MiB"


def test_hip_device_lines_name_rocm_devices_like_cuda_ones() -> None:
    """HIP's ggml_cuda_init line names the gcnArchName where CUDA's names the compute
    capability: its devices are named, sized and dated as CUDA's are."""
    from lltui.core.llamalog.classify import classify
    from lltui.core.llamalog.events import Gpu

    t = "0.00.001.000 I "
    lines = [
        t + "ggml_cuda_init: found 2 ROCm devices (Total VRAM: 163824 MiB):",
        t
        + c_format(HIP_DEVICE, 0, "AMD Radeon 8060S Graphics", "gfx1151", 0x1151, "no", 32, 131072),
        # an Instinct's gcnArchName carries its target features
        t
        + c_format(
            HIP_DEVICE, 1, "AMD Instinct MI100", "gfx908:sramecc+:xnack-", 0x908, "no", 64, 32752
        ),
        t + "load_tensors:        ROCm0 model buffer size =  4403.49 MiB",
    ]
    facts = parse_log(lines).memory
    assert [(d.name, d.description, d.total_mib, d.source) for d in facts.devices] == [
        ("ROCm0", "AMD Radeon 8060S Graphics", 131072, "ggml_cuda_init"),
        ("ROCm1", "AMD Instinct MI100", 32752, "ggml_cuda_init"),
    ]
    assert facts.unparsed == ()  # (the lines were listed as memory lines not read)
    assert facts.build_range is not None and facts.build_range.first == 8205
    event = classify(lines[2]).event
    assert event == Gpu(1, "AMD Instinct MI100", 32752, None, "gfx908:sramecc+:xnack-")
    # before the VRAM was printed (and before the wave size): the same device, undated
    older = "  Device %d: %s, %s (0x%x), VMM: %s"
    for text in (
        c_format(older, 0, "AMD Radeon RX 7900 XTX", "gfx1100", 0x1100, "no"),
        c_format(
            older + ", Wave Size: %d", 0, "AMD Radeon RX 7900 XTX", "gfx1100", 0x1100, "no", 32
        ),
    ):
        old = parse_log(["ggml_cuda_init: found 1 ROCm devices:", text]).memory
        assert [(d.name, d.description, d.total_mib) for d in old.devices] == [
            ("ROCm0", "AMD Radeon RX 7900 XTX", None)
        ]
        assert old.build_range is None


def test_cuda_device_lines_give_their_vram() -> None:
    """``VRAM: M MiB`` (and, for a few builds, ``(F MiB free)``) after the compute capability."""
    cuda = "  Device %d: %s, compute capability %d.%d, VMM: %s, VRAM: %zu MiB"
    facts = parse_log(gpu_log()[:3]).memory
    assert [(d.name, d.total_mib) for d in facts.devices] == [("CUDA0", 24080), ("CUDA1", 24080)]
    # llama.cpp #20185's form, before #20595 dropped the free memory
    text = c_format(
        cuda + " (%zu MiB free)", 0, "NVIDIA GeForce RTX 4070 Laptop GPU", 8, 9, "yes", 7805, 7546
    )
    facts = parse_log(["ggml_cuda_init: found 1 CUDA devices (Total VRAM: 7805 MiB):", text]).memory
    assert [(d.name, d.total_mib, d.free_mib) for d in facts.devices] == [("CUDA0", 7805, 7546)]
    assert facts.build_range is not None
    assert (facts.build_range.first, facts.build_range.last) == (8205, 8820)


def test_the_vulkan_device_line_names_the_device_without_its_driver() -> None:
    """ggml/src/ggml-vulkan/ggml-vulkan.cpp (pinned b11434) prints the device's name and then
    its driver's; the device's description (ggml_vk_get_device_description, and the "using
    device" line) is the name alone, and explain showed the driver's name as part of it."""
    vulkan = (
        "ggml_vulkan: %zu = %s (%s) | uma: %d | fp16: %s | bf16: %d | fp4: %d | warp size: %zu"
        " | shared memory: %d | int dot: %d | matrix cores: %s"
    )
    text = c_format(
        vulkan,
        0,
        "AMD Radeon Graphics (RADV GFX1151)",
        "radv",
        1,
        "1",
        0,
        0,
        64,
        65536,
        1,
        "KHR_coopmat",
    )
    facts = parse_log(["ggml_vulkan: Found 1 Vulkan devices:", text]).memory
    assert [(d.name, d.description, d.total_mib) for d in facts.devices] == [
        ("Vulkan0", "AMD Radeon Graphics (RADV GFX1151)", None)  # (shared memory: a workgroup's)
    ]


def test_fit_lines_for_several_devices() -> None:
    t = "0.00.001.000 I "
    lines = [
        t + "cmn  common_init_: fitting params to device memory ...",
        t + "common_params_fit_impl: getting device memory data for initial parameters:",
        t + "common_params_fit_impl: projected memory use with initial parameters [MiB]:",
    ]
    fmt_proj = "common_params_fit_impl:   - %s: %6d total, %6d used, %6d free vs. target of %6d"
    lines.append(t + c_format(fmt_proj, "CUDA0 (RTX 4090)", 24080, 26000, -2500, 1024))
    lines.append(t + c_format(fmt_proj, "CUDA1 (RTX 3090)", 24080, 20000, 3000, 1024))
    lines.append(
        t + "common_params_fit_impl: projected to use 46000 MiB of device memory vs. "
        "46500 MiB of free device memory"
    )
    lines.append(
        t + "common_params_fit_impl: cannot meet free memory target of 1024 MiB, need to reduce "
        "device memory by 1548 MiB"
    )
    fmt_dense = "common_params_fit_impl:   - %s: %2d layers, %6d MiB used, %6d MiB free"
    fmt_moe = (
        "common_params_fit_impl:   - %s: %2d layers (%2d overflowing), %6d MiB used, %6d MiB free"
    )
    lines.append(t + c_format(fmt_dense, "CUDA0 (RTX 4090)", 30, 22000, 1400))
    lines.append(t + c_format(fmt_dense, "CUDA1 (RTX 3090)", 33, 22800, 200))
    lines.append(t + c_format(fmt_moe, "CUDA0 (RTX 4090)", 31, 1, 22500, 900))
    lines.append(t + "common_fit_params: successfully fit params to free device memory")
    lines.append(t + "common_fit_params: fitting params to free memory took 1.25 seconds")
    fit = parse_log(lines).fit
    assert fit.status == "changed" and fit.seconds == 1.25
    assert [(p.device, p.used_mib, p.free_mib, p.target_mib) for p in fit.projections] == [
        ("CUDA0 (RTX 4090)", 26000, -2500, 1024),
        ("CUDA1 (RTX 3090)", 20000, 3000, 1024),
    ]
    assert (fit.projected_used_mib, fit.projected_of, fit.reduce_by_mib) == (46000, "device", 1548)
    # The last plan printed for a device wins.
    assert [(d.device, d.layers, d.overflowing, d.used_mib) for d in fit.device_layers] == [
        ("CUDA1 (RTX 3090)", 33, None, 22800),
        ("CUDA0 (RTX 4090)", 31, 1, 22500),
    ]


def test_fit_abort_reason_when_the_user_set_layers() -> None:
    lines = [
        "0.00.001.000 I cmn  common_init_: fitting params to device memory ...",
        "0.00.002.000 W common_fit_params: failed to fit params to free device memory: "
        "n_gpu_layers already set by user to 99, abort",
    ]
    s = parse_log(lines)
    assert s.fit.status == "failed"
    assert s.fit.reason == "n_gpu_layers already set by user to 99, abort"
    assert s.problems[0].kind == "fit" and s.problems[0].level == "W"


def test_cuda_oom_lines_name_the_failure() -> None:
    lines = [
        "0.00.001.000 E ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9300.25 MiB on "
        "device 1: cudaMalloc failed: out of memory",
        "0.00.001.100 E llama_model_load: error loading model: unable to allocate CUDA1 buffer",
        "0.00.001.200 E srv  llama_server: exiting due to model loading error",
    ]
    s = parse_log(lines)
    assert [p.kind for p in s.problems] == ["oom", "oom", "error"]
    assert s.failed and s.exit_reason == "model loading error"


def test_runtime_cuda_error_after_ready() -> None:
    parser = LogReader()
    assert "ready" in parser.feed(
        "0.00.001.000 I srv  llama_server: listening on http://127.0.0.1:1"
    )
    events = parser.feed("/src/ggml-cuda.cu:110: CUDA error")
    assert events == ["error"]
    assert parser.summary().problems[-1].kind == "cuda"


def test_multiline_message_continuations_are_not_parsed_as_lines() -> None:
    lines = [
        "0.00.001.000 I srv          init: init: chat template, example_format: '<|im_start|>",
        "listening on http://evil:1",  # a continuation that happens to look like a line
        "0.00.002.000 I srv  llama_server: model loaded",
    ]
    s = parse_log(lines)
    assert s.listening == () and not s.ready and s.model_loaded


def test_breakdown_rows_from_the_templates() -> None:
    row = parse_breakdown_row(
        "|   - RPC0[127.0.0.1:50052] (RPC)   | 24000 = 20000 + (3000 = 2000 + 900 + 100) + 1000 |"
    )
    assert row is not None
    assert (row.kind, row.name, row.description) == ("device", "RPC0[127.0.0.1:50052]", "RPC")
    other = parse_breakdown_row("|   - CPU_REPACK   |     10 =     10 +       0 +       0    |")
    assert other is not None and other.kind == "buffer_type" and other.model_mib == 10
    assert parse_breakdown_row("| memory breakdown [MiB] | total free |") is None
    assert parse_breakdown_row("garbage") is None


def test_older_builds_readiness_and_names() -> None:
    lines = [
        "main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 3",
        "llama_kv_cache_unified:      CUDA0 KV buffer size =   256.00 MiB",
        "llama_context:      CUDA0 compute buffer size =   100.00 MiB",
        "main: model loaded",
    ]
    parser = LogReader()
    for line in lines:
        parser.feed(line)
    s = parser.summary()
    assert not s.ready  # the old "HTTP server is listening" comes before the model loads
    assert s.listening == ("http://127.0.0.1:8080",)
    events = parser.feed(
        "main: server is listening on http://127.0.0.1:8080 - starting the main loop"
    )
    assert "ready" in events
    cuda = {p.name: p for p in parser.summary().placement()}["CUDA0"]
    assert (cuda.kv_mib, cuda.compute_mib) == (256.0, 100.0)


def test_device_of_buffer() -> None:
    assert device_of_buffer("CUDA_Host") == "CPU"
    assert device_of_buffer("CPU_REPACK") == "CPU"
    assert device_of_buffer("CUDA1") == "CUDA1"
    assert device_of_buffer("RPC0[127.0.0.1:50052]") == "RPC0[127.0.0.1:50052]"


def test_classify_problem() -> None:
    said = {
        "couldn't bind HTTP server socket, hostname: h, port: 1": "bind",
        "ggml/src/ggml.c:1234: GGML_ASSERT(x) failed": "abort",
        "ggml/src/ggml-cuda/ggml-cuda.cu:88: ROCm error": "cuda",
        "ROCm error: an illegal memory access was encountered": "cuda",
        "CUDA error: out of memory": "oom",
        "something else went wrong": "error",
        "common_fit_params: encountered an error while trying to fit params to free device "
        "memory: failed to load model": "load",
        "common_fit_params: encountered an error while trying to fit params to free device "
        "memory: out of range": "fit",
    }
    for line, kind in said.items():
        assert classify_problem(classify(line).event) == kind, line


def test_a_dying_process_s_last_words_are_problems() -> None:
    """The raw stderr lines of a process that aborts, with llama-server's prefixes on: a
    ROCm build's error, and the abort behind journald's prefix."""
    lines = [
        "0.00.001.000 I srv  llama_server: listening on http://127.0.0.1:1",
        "ROCm error: an illegal memory access was encountered",
        "Jan 01 00:00:00 host llama-server[123]: /src/ggml/src/ggml.c:1234: fatal error",
    ]
    s = parse_log(lines)
    assert [(p.kind, p.message) for p in s.problems] == [
        ("cuda", "ROCm error: an illegal memory access was encountered"),
        (
            "abort",
            "Jan 01 00:00:00 host llama-server[123]: /src/ggml/src/ggml.c:1234: fatal error",
        ),
    ]


def test_older_builds_fit_end_is_read() -> None:
    """Builds 7407-9150 print --fit's end from llama_params_fit (common_fit_params since):
    its error line was no event, its summary said nothing of how the fit ended."""
    lines = [
        "0.00.001.000 I llama_params_fit_impl: projected to use 11602 MiB of device memory vs. "
        "10874 MiB of free device memory",
        "0.00.002.000 E llama_params_fit: encountered an error while trying to fit params to "
        "free device memory: failed to create llama_context from model",
        "0.00.003.000 I llama_params_fit: fitting params to free memory took 0.44 seconds",
    ]
    s = parse_log(lines)
    assert (s.fit.status, s.fit.reason) == ("error", "failed to create llama_context from model")
    assert s.fit.seconds == 0.44
    assert [p.kind for p in s.problems] == ["fit"]
    failed = parse_log(
        [
            "llama_params_fit: failed to fit params to free device memory: n_gpu_layers already "
            "set by user to 26, abort",
        ]
    )
    assert (failed.fit.status, failed.fit.reason) == (
        "failed",
        "n_gpu_layers already set by user to 26, abort",
    )
    ok = parse_log(["llama_params_fit: successfully fit params to free device memory"])
    assert ok.fit.status == "changed"


def test_garbage_never_raises_and_memory_stays_bounded() -> None:
    parser = LogReader()
    junk = [
        "\x00\x01\x02",
        "{not json",
        '{"type": "log", "msg": 5}',
        '{"type": "fit_memory_breakdown", "data": {"rows": [1, {"name": 2}]}}',
        "| - | |",
        "load_tensors: offloaded x/y layers to GPU",
        "llama_kv_cache: size = lots",
    ]
    for line in junk * 5:
        parser.feed(line)
    for i in range(1000):
        parser.feed(f"0.00.001.000 E something failed {i}")
        parser.feed(f"0.00.001.000 W unauthorized {i}")
    s = parser.summary()
    assert len(s.problems) == 100 and s.problems_dropped == 900
    assert len(s.warnings) == 100 and s.warnings_dropped == 900
    assert s.buffers == () and not s.ready


# --- live: a real llama-server, alone and with RPC devices --------------------------------------


@pytest.mark.slow
def test_live_server_log_matches_its_exit_breakdown(llama_bins, tiny_model, tmp_path) -> None:
    with llama_server(llama_bins, tiny_model, tmp_path / "server.log") as run:
        # llama.cpp writes its log from a thread of its own: the ready line may reach the
        # file a moment after /health answers
        deadline = time.monotonic() + 10.0
        while True:
            streaming = LogReader()
            events = [e for line in run.log().splitlines() for e in streaming.feed(line)]
            if "ready" in events or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert "ready" in events
        assert streaming.summary().listening == (run.url,)
        stop_group(run.proc)
        assert run.proc.returncode == 0
    s = parse_log(run.log())
    assert s.ready and s.shutting_down and not s.problems
    (cpu,) = s.placement()
    (host,) = [r for r in s.memory_breakdown if r.kind == "host"]
    # The table prints whole MiB of the same buffers the load lines print to 2 decimals.
    assert int(cpu.model_mib) == host.model_mib
    assert int(cpu.kv_mib + cpu.output_mib) == host.context_mib
    assert int(cpu.compute_mib) == host.compute_mib
    assert s.memory.context_int("n_ctx") == 512


@pytest.mark.slow
def test_live_rpc_devices_share_the_layers(llama_bins, tiny_model, tmp_path) -> None:
    with rpc_servers(llama_bins, 2, tmp_path) as rpcs:
        endpoints = [f"127.0.0.1:{r.port}" for r in rpcs]
        rpc_arg = ",".join(endpoints)
        devices = list_devices(llama_bins.binaries["llama-server"], extra_args=["--rpc", rpc_arg])
        assert [(d.name, d.description) for d in devices] == [
            (f"RPC{i}", ep) for i, ep in enumerate(endpoints)
        ]
        assert all(d.total_mib > 0 and 0 < d.free_mib <= d.total_mib for d in devices)
        with llama_server(
            llama_bins, tiny_model, tmp_path / "server.log", extra=["--rpc", rpc_arg, "-ngl", "all"]
        ) as run:
            stop_group(run.proc)  # a clean stop prints the memory breakdown table
            assert run.proc.returncode == 0
    s = parse_log(run.log())
    assert s.ready
    used = [d for d in s.memory.devices if d.source == "using device"]
    assert [(u.name, u.description) for u in used] == [(d.name, d.description) for d in devices]
    # Buffers are named per server ("RPC0[ep]" twice); placement joins them to RPC0, RPC1.
    assert {b.name for b in s.buffers} >= {f"RPC0[{ep}]" for ep in endpoints}
    assert s.memory.offloaded == (9, 9)  # 8 layers + output
    placement = {p.name: p for p in s.placement()}
    rpc = [placement[d.name] for d in devices]
    assert all(p.model_mib > 0 and p.kv_mib > 0 for p in rpc)
    # Each device holds KV for its own layers: the shares add up to the whole cache.
    kv = sum(k.size_mib for k in s.memory.kv_sizes)
    assert round(sum(p.kv_mib for p in rpc), 2) == round(kv, 2)
    assert s.fit.status == "no_change"
    assert [p.device for p in s.fit.projections] == [f"{d.name} ({d.description})" for d in devices]
    # The ready event lists each RPC device in llama.cpp's order, then the host.
    assert [d["name"] for d in s.ready_devices()] == [*(d.name for d in devices), "CPU"]
    # The exit table agrees with the load lines, device by device (whole MiB there).
    rows = {r.name: r for r in s.memory_breakdown if r.kind == "device"}
    for p in rpc:
        assert rows[p.name].model_mib == int(p.model_mib)
        assert rows[p.name].compute_mib == int(p.compute_mib)
        assert rows[p.name].description == devices[int(p.name[3:])].description


def test_a_run_of_one_message_is_shown_once_with_its_count():
    from lltui.core.llamalog.router import RepeatFolder

    folder = RepeatFolder()
    shown: list[str] = []
    lines = [
        "0.01.000.001 I srv  update_slots: all slots are idle",
        *(f"0.01.{i:03d}.001 I srv  update_slots: all slots are idle" for i in range(1, 120)),
        "0.03.000.000 I srv  log_server_r: request: GET /health 127.0.0.1 200",
        "0.03.000.001 I srv  log_server_r: request: GET /health 127.0.0.1 200",
    ]
    for line in lines:
        shown += folder.feed(line)
    shown += folder.flush()
    assert shown == [
        lines[0],
        "    (the line above 119 more times)",
        lines[-2],
        "    (the line above 1 more time)",
    ]
