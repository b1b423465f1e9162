"""The one reader of llama.cpp's output: its pattern table (one regular expression per line
shape, each reading the line it shows and no other shape of its function reading it), the two
formats a build is printed in, and the same buffer table through ``lltui explain`` and through
a launch that replays a log (the supervisor, its pipe and its reader, with ``cat`` as the
server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lltui.core.explain.failure import summarise
from lltui.core.explain.report import report_to_text
from lltui.core.llamalog import patterns
from lltui.core.llamalog.classify import read_line
from lltui.core.llamalog.events import Flag
from lltui.core.llamalog.exit_reason import exit_reason
from lltui.core.llamalog.lines import split_line
from lltui.core.llamalog.memory import PINNED_REFUSED
from lltui.core.llamalog.models import KINDS, AllocFailure, LogFacts, device_of_buffer
from lltui.core.llamalog.reader import parse_log, scan_lines
from lltui.core.units import MIB
from lltui.services.explain import ExplainRequest, explain
from lltui.services.launch.watch import load_steps
from lltui.sources.llama.supervisor import Supervisor

LOGS = Path(__file__).parent / "fixtures" / "llama-logs"
# logs laid out from llama.cpp's format strings, of devices no public log here shows whole
FORMAT_LOGS = Path(__file__).parent / "fixtures" / "llama-log-format"
SERVER_LOGS = Path(__file__).parent / "fixtures" / "llama-server"
PACKAGE = Path(patterns.__file__).parent
# what splits a line into its parts, not a shape of llama.cpp's lines: the colour codes,
# llama-server's time-and-level prefix, the function, a router's port, an RPC buffer's
# endpoint, and the numbers of a breakdown table row
LINE_PARTS = {
    "_ANSI",
    "_BARE_COLOUR",
    "_PREFIX",
    "_FUNC",
    "CHILD_LINE",
    "_RPC_BUFFER",
    "_BREAKDOWN_NUMS",
    "_BREAKDOWN_GPU",
    "_BREAKDOWN_OTHER",
}


def _reads(shape: patterns.Shape, line) -> bool:
    m = shape.match(line)
    return m is not None and shape.make(m, line) is not None


@pytest.mark.parametrize("shape", patterns.SHAPES, ids=lambda s: s.name)
def test_each_shape_reads_its_line_and_no_other_shape_does(shape: patterns.Shape):
    line = split_line(shape.sample)
    found, event, _ = read_line(line)
    assert found is shape and event is not None, found and found.name
    name = patterns.group(line.func) if line.func else ""
    tried = (*patterns.WHOLE_LINE, *patterns.BY_GROUP.get(name, patterns.ANY_FUNCTION))
    # a catch-all (a CUDA error, a load that failed) also takes the lines a precise shape
    # before it reads; no two precise shapes read one line
    others = [s.name for s in tried if s is not shape and not s.fallback and _reads(s, line)]
    assert others == []


def test_the_reader_s_regular_expressions_are_its_table_s():
    source = "\n".join(p.read_text() for p in sorted(PACKAGE.glob("*.py")))
    named = set(re.findall(r"^(\w+) = re\.compile\(", source, re.MULTILINE))
    assert named == LINE_PARTS
    # the table's shapes are compiled in one place, and no expression is written elsewhere
    assert source.count("re.compile(") == len(LINE_PARTS) + 1
    assert not re.search(r"\bre\.(?:search|match|fullmatch|sub|findall|finditer|split)\(", source)
    names = [s.name for s in patterns.SHAPES]
    assert len(names) == len(set(names)) == 107


@pytest.mark.parametrize(
    ("text", "event"),
    [
        # ggml-cuda's ggml_cuda_error (GGML_CUDA_NAME " error: %s"), with llama-server's
        # prefix (-lv 4) and without: the splitter took "error" for the line's function
        (
            "0.01.000.001 E CUDA error: an illegal memory access was encountered",
            AllocFailure(
                0, "CUDA error: an illegal memory access was encountered", "error", backend="CUDA"
            ),
        ),
        (
            "ROCm error: out of memory",
            AllocFailure(0, "ROCm error: out of memory", "oom", backend="ROCm"),
        ),
        # 2023's CUDA_CHECK: "CUDA error %d at %s:%d: %s"
        (
            "CUDA error 2 at ggml-cuda.cu:8555: out of memory",
            AllocFailure(
                0, "CUDA error 2 at ggml-cuda.cu:8555: out of memory", "oom", backend="CUDA"
            ),
        ),
        # ggml_abort's "FILE:LINE: message" behind journald's "ident[pid]: "
        (
            "Jan 01 00:00:00 host llama-server[123]: /src/ggml/src/ggml.c:1234: "
            "GGML_ASSERT(n_backends <= 16) failed",
            Flag("abort_at", "GGML_ASSERT(n_backends <= 16) failed"),
        ),
    ],
)
def test_ggml_s_own_error_lines_are_read(text, event):
    assert read_line(split_line(text))[1] == event


def test_a_build_is_read_in_both_formats():
    """``version: X.Y.Z (build N, commit C)`` of current llama.cpp (semantic versions), and
    the build number of the builds before it."""
    buffer = "load_tensors:        CUDA0 model buffer size =  1024.00 MiB"
    for text, build, commit in (
        ("version: 0.3.0-dev (build 10621, commit c1d0e7a00)", 10621, "c1d0e7a00"),
        (
            "build: 4202 (9f912511) with cc (Ubuntu 13.2.0) 13.2.0 for x86_64-linux-gnu",
            4202,
            "9f912511",
        ),
        ("main: build = 3726 (b34e0234)", 3726, "b34e0234"),
        (
            "cmn  common_param: common_params_print_info: build 6123 (abcdef0) with GNU",
            6123,
            "abcdef0",
        ),
        ("version: 4567 (abcdef0)", 4567, "abcdef0"),
    ):
        facts = scan_lines([text, buffer])
        assert (facts.build, facts.commit) == (build, commit), text
        assert facts.build_line == 1 and facts.build_note is None


def test_a_build_that_cannot_be_told_is_said():
    for text, said in (
        ("version: 0.6.0-dev (build 0, commit unknown)", "built without its git history"),
        ("main: build = 9 (f702a90)", "partial copy of the history"),
    ):
        facts = scan_lines([text, "load_tensors: CUDA0 model buffer size = 1.00 MiB"])
        assert facts.build is None and said in (facts.build_note or "")


def test_one_read_gives_the_server_state_and_the_memory_facts():
    s = parse_log((SERVER_LOGS / "server_lv4_full.log").read_text())
    assert s.ready and s.model_loaded and s.fit.status == "no_change"
    assert s.memory.tool == "server" and s.memory.loads == 1
    (cpu,) = s.placement()
    assert cpu.name == "CPU" and cpu.model_mib == 3.18


def _explained(path: Path) -> tuple[dict[tuple[str, str], float], tuple[AllocFailure, ...]]:
    """The per-device table ``lltui explain`` prints, by (device, kind), MiB; the failures."""
    report = explain(ExplainRequest(str(path), ask_binary=False))
    endpoints = {d.description: d.name for d in report.facts.devices if d.description}
    out: dict[tuple[str, str], float] = {}
    for row in report.device_rows():
        device = "CPU" if row.name == "host" else device_of_buffer(row.name, endpoints)
        for kind, n in (*row.logged, *row.parts):  # (a part: draft, lora, mmproj)
            out[(device, kind)] = out.get((device, kind), 0.0) + n / MIB
    return {k: round(v, 2) for k, v in out.items() if round(v, 2)}, report.facts.failures


def _replayed(path: Path) -> tuple[dict[tuple[str, str], float], LogFacts]:
    """The placement a launch keeps, its server replaying the log (``cat`` in its place);
    and the memory facts the launch read."""
    from lltui.core.cmdline.launch_spec import LaunchCommand

    with Supervisor(LaunchCommand(argv=("/bin/cat", str(path))), url=None) as sup:
        sup.start()
        assert sup.wait_exit(60) is not None
        summary = sup.summary()
    table = {
        (p.name, kind): getattr(p, f"{kind}_mib")
        for p in summary.placement()
        for kind in KINDS
        if getattr(p, f"{kind}_mib")
    }
    for device, parts in summary.memory.parts_mib().items():
        for part, mib in parts.items():
            table[(device, part)] = table.get((device, part), 0.0) + mib
    return table, summary.memory


@pytest.mark.parametrize(
    "path",
    [*sorted(LOGS.glob("*.log")), *sorted(FORMAT_LOGS.glob("*.log"))],
    ids=lambda p: p.name,
)
def test_explain_and_a_replayed_launch_give_the_same_buffer_table(path):
    launched, facts = _replayed(path)
    assert facts.lines == len(path.read_text(encoding="utf-8").splitlines())
    explained, failures = _explained(path)
    assert launched.keys() == explained.keys()
    for key, mib in explained.items():
        assert launched[key] == pytest.approx(mib, abs=0.011), key
    assert facts.failures == failures  # (and so what failed, on which device)


@pytest.mark.parametrize(
    ("lines", "stage"),
    [
        # llama-server b11434 (CPU build) refusing its flags, and llama-fit-params failing
        # (as captured in the project's shared llama-server fixtures, errors_exit_codes.txt
        # and llama_fit_params.txt)
        (
            ['error while handling argument "-dev": invalid device: CUDA0', "", "usage:"],
            "arguments",
        ),
        (["error: invalid argument: --no-mmap"], "arguments"),
        (
            [
                "0.00.453.522 W common_fit_params: failed to fit params to free device memory: "
                "was unable to fit model into system memory by reducing context, abort",
                "0.00.453.557 E llama_fit_params: failed to fit CLI arguments to free memory, "
                "exiting...",
            ],
            "fit",
        ),
    ],
)
def test_a_program_that_stopped_before_loading_is_a_failure(lines, stage):
    """explain said nothing of a server that refused its flags or a fit that gave up (its
    flags were shown as if they applied)."""
    facts = scan_lines(lines)
    assert [f.stage for f in facts.failures] == [stage]


@pytest.mark.parametrize(
    "line",
    [
        "sched_reserve:        CPU compute buffer size =     -nan MiB",
        "sched_reserve:        CPU compute buffer size =     5",  # a log cut mid-line
        "load_tensors:   CPU_Mapped model buffer size =      inf MiB",
    ],
)
def test_a_buffer_line_no_shape_reads_is_listed_as_not_read(line):
    """A buffer line in a group whose other lines are known (sched_reserve, load_tensors)
    was taken as known and left out of the table without a word."""
    facts = scan_lines([line])
    assert not facts.buffers and [text for _, text in facts.unparsed] == [line]


def test_the_moe_cache_is_a_device_buffer_of_its_own(tmp_path):
    """--moe-cache-mib (newer than b11434) keeps experts of host layers on the GPU. The line
    as b11739 prints it: llama_moe_cache::impl's LLAMA_LOG_INFO("%s: %10s MoE cache size =
    %8.2f MiB for %.2f MiB of host experts\\n", __func__, ...) in src/llama-moe-cache.cpp
    (ggml-org/llama.cpp b11739, 0ce8cd114). It was a line about memory not read, and the
    device's logged total left its 8 GiB out."""
    log = tmp_path / "moe-cache.log"
    log.write_text(
        "load_tensors:        CUDA0 model buffer size =  1500.00 MiB\n"
        "load_tensors:   CPU_Mapped model buffer size = 16000.00 MiB\n"
        "llama_kv_cache:      CUDA0 KV buffer size =   384.00 MiB\n"
        "impl:      CUDA0 MoE cache size =  8192.00 MiB for 16000.00 MiB of host experts\n"
        "impl: 48 layers, q4_K:  3940 slots (64.1%)\n"
        "sched_reserve:      CUDA0 compute buffer size =   300.75 MiB\n"
        "llama_moe_cache: small batches: hits = 10, misses = 2, hit rate = 83.33%, "
        "uploaded = 12.00 MiB\n"
    )
    facts = scan_lines(log.read_text().splitlines())
    assert not facts.unparsed
    assert [(b.device, b.kind, b.mib) for b in facts.buffers if b.kind == "moe_cache"] == [
        ("CUDA0", "moe_cache", 8192.0)
    ]
    r = explain(ExplainRequest(str(log), ask_binary=False))
    cuda0 = next(d for d in r.device_rows() if d.name == "CUDA0")
    assert sum(n for _, n in cuda0.logged) == round((1500 + 384 + 8192 + 300.75) * MIB)
    assert r.facts.build_range is not None and r.facts.build_range.first > 11434


def test_a_launch_counts_the_moe_cache_in_its_device_s_memory(tmp_path):
    """The launch's reader summed five kinds of buffer per device: the MoE cache (the line
    as b11739's src/llama-moe-cache.cpp prints it, see above) was left out of the device's
    total and of the ready event, while explain counted it."""
    from lltui.commands.launch_output import ready_lines
    from lltui.core.llamalog.exit_reason import ready_event

    log = tmp_path / "moe-cache.log"
    log.write_text(
        "load_tensors:        CUDA0 model buffer size =  1500.00 MiB\n"
        "load_tensors:   CPU_Mapped model buffer size = 16000.00 MiB\n"
        "llama_kv_cache:      CUDA0 KV buffer size =   384.00 MiB\n"
        "impl:      CUDA0 MoE cache size =  8192.00 MiB for 16000.00 MiB of host experts\n"
        "sched_reserve:      CUDA0 compute buffer size =   300.75 MiB\n"
        "sched_reserve: graph: nodes = 1030, splits = 3 (with bs=512), 3 (with bs=1)\n"
    )
    launched, _ = _replayed(log)
    assert launched == _explained(log)[0]
    assert launched[("CUDA0", "moe_cache")] == 8192.0
    s = parse_log(log.read_text())
    cuda0 = next(p for p in s.placement() if p.name == "CUDA0")
    assert cuda0.total_mib == 1500 + 384 + 300.75 + 8192
    devices = s.ready_devices()
    assert devices[0] == {
        "name": "CUDA0",
        "model_mib": 1500.0,
        "kv_mib": 384.0,
        "compute_mib": 300.75,
        "moe_cache_mib": 8192.0,
    }
    assert "moe_cache_mib" not in devices[1]  # (only where the device has one)
    (line,) = ready_lines(ready_event("http://127.0.0.1:8080", 1, [], devices))
    assert "CUDA0: model 1500.00 MiB, KV 384.00 MiB, compute 300.75 MiB, MoE cache 8192.00" in line


@pytest.mark.parametrize(
    ("name", "device", "owned"),
    [
        # b11434's ggml-metal: the device is MTL0, its mapped weights MTL0_Mapped
        ("metal-mtl0-server-lv4.log", "MTL0", ("MTL0_Mapped", "MTL0")),
        # builds before the MTL<i> names: ggml_metal_init, buffers Metal and Metal_Mapped
        ("metal-ggml_metal_init-cli-2025.log", "Metal", ("Metal_Mapped", "Metal")),
    ],
)
def test_a_metal_device_is_one_device_with_its_gpu_and_its_memory(name, device, owned):
    """A Metal load's weights (MTL0_Mapped) were a device of their own beside MTL0, the
    estimate placed layers on both, and the GPU line and its working-set size were not
    read: the device is one, named by its GPU, its total Metal's working set."""
    path = FORMAT_LOGS / name
    r = explain(ExplainRequest(str(path), ask_binary=False))
    assert r.devices.printed == (device,)
    rows = {row.name: row for row in r.device_rows()}
    assert list(rows) == [device, "host"]
    logged = {b.device for b in r.facts.buffers if not b.device.startswith("CPU")}
    assert logged == set(owned)
    assert dict(rows[device].logged)["model"] == round(4403.49 * MIB)
    seen = {d.name: d for d in r.facts.devices}[device]
    # recommendedMaxWorkingSetSize = 22906.50 MB (1e6 bytes): 21845 MiB
    assert (seen.description, seen.free_mib, seen.total_mib) == ("Apple M2 Max", 21845, 21845)
    (placed,) = [p for p in parse_log(path.read_text()).placement() if p.name != "CPU"]
    assert placed.name == device and set(placed.buffers) == set(owned)


def test_a_metal_device_s_mapped_weights_meet_their_prediction(tmp_path):
    """With the model's header, MTL0_Mapped's line is compared with MTL0's predicted
    weights (it was a device lltui predicted nothing on)."""
    from support.gguf_factory import llama_8b_spec, write_sparse

    model = write_sparse(tmp_path / "l8b.gguf", llama_8b_spec(n_vocab=128256), "Q4_K")
    path = FORMAT_LOGS / "metal-mtl0-server-lv4.log"
    r = explain(ExplainRequest(str(path), model=str(model), ask_binary=False))
    (mapped,) = [c for c in r.checks if c.line.device == "MTL0_Mapped"]
    assert mapped.predicted_bytes is not None and mapped.within(0.10)
    assert r.comparison.not_logged == ()


def test_a_projector_s_weights_and_buffers_show_on_their_devices():
    """llama-mtmd-cli's projector (clip.cpp) prints its weights as load_hparams' "model
    size" and its compute buffers per device: the weights were not read, and explain's
    device table left the projector out (an empty table for a projector-only log)."""
    path = LOGS / "29-pr22790-mtmd-cli-gemma3-4b-clip-2026.log"
    r = explain(ExplainRequest(str(path), ask_binary=False))
    weights = [b for b in r.facts.buffers if b.kind == "model"]
    assert [(b.line, b.device, b.mib_text, b.part) for b in weights] == [
        (25, "CUDA0", "811.79", "mmproj")
    ]
    rows = {row.name: dict(row.parts) for row in r.device_rows()}
    assert rows == {
        "CUDA0": {"mmproj": round(811.79 * MIB) + round(121.25 * MIB)},
        "host": {"mmproj": round(9.19 * MIB)},
    }
    parts = parse_log(path.read_text()).memory.parts_mib()
    assert parts == {"CUDA0": {"mmproj": 933.04}, "CPU": {"mmproj": 9.19}}
    text = report_to_text(r)
    assert "(+ mmproj 933.04 MiB)" in text


def test_a_projector_with_vision_and_audio_counts_its_file_s_weights_once():
    """clip.cpp's loader sums every tensor of the file and load_hparams prints that sum once
    per modality: an omni projector's 1600 MiB were counted twice (3371.25 MiB, not 1771.25).
    A second projector file (its loader's lines) counts again."""
    one = [
        "clip_model_loader: n_tensors:    1220",
        "clip_model_loader: has vision encoder",
        "clip_model_loader: has audio encoder",
    ]
    for budget in ("121.25", "50.00"):
        one += [
            "clip_ctx: CLIP using CUDA0 backend",
            "load_hparams: projector:          qwen2.5o",
            "load_hparams: model size:         1600.00 MiB",
            "load_hparams: metadata size:      0.15 MiB",
            f"alloc_compute_meta:      CUDA0 compute buffer size =   {budget} MiB",
        ]
    assert parse_log(one).memory.parts_mib() == {"CUDA0": {"mmproj": 1771.25}}
    assert parse_log(one + one).memory.parts_mib() == {"CUDA0": {"mmproj": 3542.5}}


@pytest.mark.parametrize(
    ("name", "failed"),
    [
        # ggml_metal_buffer_init's MiB, then ggml-metal's "Metal buffer of N bytes" (the
        # device is MTL0 whatever it says) and the buffer type's line; the weights it holds
        # are MTL0_Mapped's
        ("metal-oom-kv-server-b11434.log", ("MTL0", 8589934592, "kv", 10922 - 4403.49)),
        # ggml-vulkan's two lines (no device), the allocator's, the context's
        ("vulkan-oom-compute-cli-b11434.log", ("Vulkan0", 4563402752, "compute", 3388.51)),
        # ggml-sycl's trace (no function) and buffer type (no device), the allocator's
        ("sycl-oom-weights-cli-b11434.log", ("SYCL0", 4617420800, "weights", 5928.0)),
    ],
)
def test_a_backend_s_allocation_failure_names_its_device_and_what_it_asked(name, failed):
    """Metal's, Vulkan's and SYCL's allocation failures name no device, and Metal's and
    SYCL's were not read: explain said a device ran out of "memory", or nothing."""
    r = explain(ExplainRequest(str(FORMAT_LOGS / name), ask_binary=False))
    f = r.failed
    assert f is not None and f.kind == "oom" and r.facts.unparsed == ()
    device, needed, stage, free_mib = failed
    assert (f.device, f.needed_bytes, f.stage) == (device, needed, stage)
    assert f.free_bytes == round(free_mib * MIB)
    assert f"{device} ran out allocating {stage} {needed / MIB:.2f} MiB" in report_to_text(r)


@pytest.mark.parametrize(
    ("lines", "device", "needed", "stage"),
    [
        # b11434's ggml-metal, nothing else of the load: the device is Metal's
        (
            [
                "load_tensors: offloaded 33/33 layers to GPU",
                "ggml_backend_metal_buffer_type_alloc_buffer: failed to allocate Metal buffer "
                "of 4617420800 bytes (out of memory)",
                "ggml_metal_buffer_init: error: failed to allocate buffer, size =  4403.49 MiB",
            ],
            "Metal",
            4617420800,
            "weights",
        ),
        # ggml_metal_add_buffer of 2023 ("MB" for MiB)
        (
            [
                "ggml_metal_add_buffer: error: failed to allocate 'data            ' buffer, "
                "size =  4403.49 MB"
            ],
            "Metal",
            round(4403.49 * MIB),
            "weights",
        ),
        # ggml-vulkan before b5000: the limit in other words; its one device named above
        (
            [
                "ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) (radv) | uma: 0 | fp16: 1",
                "ggml_vulkan: Device memory allocation of size 2166360064 failed.",
                "ggml_vulkan: Requested buffer size exceeds device memory allocation limit: "
                "ErrorOutOfDeviceMemory",
            ],
            "Vulkan0",
            2166360064,
            "weights",
        ),
        # ggml-sycl before b4000 (no newline: the allocator's line runs on)
        (
            [
                "ggml_backend_sycl_buffer_type_alloc_buffer: can't malloc 3278637056 Bytes "
                "memory on deviceggml_gallocr_reserve_n: failed to allocate SYCL0 buffer of "
                "size 3278637056"
            ],
            "SYCL0",
            3278637056,
            "weights",
        ),
        # llama_context's output buffer (MiB, not a device), then the host's
        (
            [
                "output_reserve: failed to allocate output buffer of size 27.82 MiB",
                "llama_init_from_model: failed to initialize the context: failed to reserve "
                "initial output buffer",
            ],
            None,
            round(27.82 * MIB),
            "output",
        ),
        # a recurrent model's state cache
        (
            [
                "ggml_backend_buft_alloc_buffer_n_default: failed to allocate CUDA0 buffer of size "
                "67108864",
                "llama_init_from_model: failed to initialize the context: failed to allocate "
                "buffer for rs cache",
            ],
            "CUDA0",
            67108864,
            "rs",
        ),
    ],
)
def test_an_allocation_failure_of_any_build_is_read(lines, device, needed, stage):
    facts = scan_lines(lines)
    f = summarise(facts)
    assert facts.unparsed == () and f is not None and f.kind == "oom"
    assert (f.device, f.needed_bytes, f.stage) == (device, needed, stage)


@pytest.mark.parametrize(
    "name",
    [
        "cuda-pinned-nkvo-2024.log",
        "vulkan-pinned-cli-2025.log",
        "vulkan-pinned-nkvo-cli-b11434.log",
    ],
)
def test_pinned_memory_refused_is_a_note_not_a_failed_load(name):
    """A host buffer that could not have pinned memory falls back to pageable memory and the
    load goes on: explain said FAILED ('a device ran out allocating kv memory'), and a launch
    whose server then ended said 'the model does not fit in memory'."""
    from lltui.core.cmdline.launch_spec import LaunchCommand

    path = FORMAT_LOGS / name
    r = explain(ExplainRequest(str(path), ask_binary=False))
    assert r.failed is None and r.facts.failures == () and r.facts.unparsed == ()
    assert PINNED_REFUSED in r.notes
    assert "FAILED" not in report_to_text(r)
    with Supervisor(LaunchCommand(argv=("/bin/cat", str(path))), url=None) as sup:
        sup.start()
        ended = sup.wait_exit(60)
        summary = sup.summary()
    assert ended is not None and ended.reason == "llama-server exited"
    assert summary.memory.failures == () and summary.problems == ()
    assert load_steps(summary)["pinned"] == PINNED_REFUSED


@pytest.mark.parametrize(
    "line",
    [
        # b11434's ggml-cuda (a debug line: -lv 4) and its host registration
        "0.01.234.567 D ggml_cuda_host_malloc: failed to allocate 1024.00 MiB of pinned memory: "
        "out of memory",
        "0.01.234.567 D ggml_backend_cuda_register_host_buffer: failed to register 4403.49 MiB "
        "of pinned memory: out of memory",
        # ggml-sycl's two (the older at the error level), ggml-cann's, ggml-vulkan's host
        # memory that is not host-visible
        "0.01.234.567 E WARNING: failed to allocate 1024.00 MB of pinned memory: "
        "syclGetErrorString is not supported",
        "0.01.234.567 W ggml_backend_sycl_host_malloc: failed to allocate 1024.00 MiB of pinned "
        "memory",
        "0.01.234.567 W ggml_backend_cann_host_malloc: failed to allocate 1024.00 MiB of pinned "
        "memory: EL0004: Failed to allocate memory.",
        "WARNING: failed to allocate 1024.00 MB of pinned memory",
        "ggml_vulkan: Failed to allocate pinned memory (vk::Device::allocateMemory: "
        "ErrorOutOfDeviceMemory)",
    ],
)
def test_every_backend_s_pinned_memory_warning_is_a_warning(line):
    summary = parse_log(["0.00.001.000 I srv  llama_server: initializing ...", line])
    assert summary.memory.failures == () and summary.memory.unparsed == ()
    assert summary.problems == () and summary.memory.notes == (PINNED_REFUSED,)
    assert exit_reason(1, [line]) == "llama-server exited with code 1"


def test_a_load_that_runs_out_after_a_pinned_memory_warning_still_failed():
    """The warning (and ggml-vulkan's reason line under it) is passed over, not the failure
    after it: its device, its size, what it was for."""
    cuda = [
        "ggml_cuda_host_malloc: failed to allocate 0.98 MiB of pinned memory: out of memory",
        "load_tensors:        CUDA0 model buffer size =  4403.49 MiB",
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 16384.00 MiB on device 0: "
        "cudaMalloc failed: out of memory",
        "alloc_tensor_range: failed to allocate CUDA0 buffer of size 17179869184",
        "llama_init_from_model: failed to initialize the context: failed to allocate buffer for "
        "kv cache",
    ]
    f = summarise(scan_lines(cuda))
    assert f is not None and f.kind == "oom" and f.line == 3
    assert (f.device, f.needed_bytes, f.stage) == ("CUDA0", 17179869184, "kv")
    assert exit_reason(1, cuda).endswith(
        "does not fit in memory: failed to allocate buffer for kv cache"
    )
    vulkan = [
        "ggml_vulkan: 0 = AMD Radeon RX 7900 XTX (RADV NAVI31) (radv) | uma: 0 | fp16: 1",
        "ggml_vulkan: Failed to allocate pinned memory.",
        "ggml_vulkan: Requested buffer size exceeds device memory allocation limit: "
        "ErrorOutOfDeviceMemory",
        "ggml_vulkan: Device memory allocation of size 2166360064 failed.",
        "ggml_vulkan: Requested buffer size exceeds device memory allocation limit: "
        "ErrorOutOfDeviceMemory",
        "ggml_gallocr_reserve_n: failed to allocate Vulkan0 buffer of size 2166360064",
    ]
    facts = scan_lines(vulkan)
    f = summarise(facts)
    assert [x.line for x in facts.failures] == [4, 5, 6]
    assert f is not None and (f.device, f.needed_bytes) == ("Vulkan0", 2166360064)
