"""The launch spec: flags read as typed, argv and environment per binary, secrets masked,
exit reasons from real llama-server logs, profiles on disk."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest

from lltui.core.cmdline.address import is_loopback, server_url
from lltui.core.cmdline.launch_profile import spec_from_dict, spec_to_dict
from lltui.core.cmdline.launch_spec import (
    API_KEY_ENV,
    MASK,
    P2P_ENV,
    BinaryFlags,
    LaunchError,
    LaunchSpec,
    api_key_transport,
    build_command,
    mask_secrets,
    read_flags,
    relevant_inherited_env,
)
from lltui.core.llamalog.exit_reason import exit_event, exit_reason
from lltui.sources.llama import profiles

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llama-server"  # see its README.md
KEY = "sk-secret-7f3a9c"


# Hand-written flag sets standing in for builds of other ages (the real binary is probed in
# test_launch_cli). Current: --load-mode, no --no-mmap/--mlock. Old: the reverse, no env key.
def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


CURRENT_FLAGS = BinaryFlags(
    flags=_words(
        "-lv --verbosity --log-verbosity -m --model --host --port --metrics -c --ctx-size -np "
        "--parallel -ngl --gpu-layers --n-gpu-layers -sm --split-mode -ts --tensor-split -mg "
        "--main-gpu -dev --device -ctk --cache-type-k -ctv --cache-type-v -fa --flash-attn -b "
        "--batch-size -ub --ubatch-size -lm --load-mode --rpc --api-key --api-key-file "
        "--no-warmup -nkvo --no-kv-offload --jinja --temp"
    ),
    env_vars=frozenset({"LLAMA_API_KEY", "LLAMA_ARG_PORT"}),
    arity={"--no-warmup": 0, "-nkvo": 0, "--jinja": 0, "-fa": 1},
    path="/opt/llama/llama-server",
    version="0.6.0-dev",
)
OLD_FLAGS = BinaryFlags(
    flags=_words(
        "-lv --log-verbosity -m --model --host --port --metrics -c --ctx-size -ngl "
        "--n-gpu-layers -fa --flash-attn --no-mmap --mlock --api-key --api-key-file"
    ),
    env_vars=frozenset({"LLAMA_ARG_PORT"}),
    arity={"-fa": 0, "--flash-attn": 0, "--no-mmap": 0, "--mlock": 0},
    path="/old/llama-server",
    version="b3000",
)


def spec_from(words: list[str], **launch: object) -> LaunchSpec:
    return LaunchSpec.of("m.gguf", words, **launch)


def unread(words: list[str]) -> list[str]:
    """The flags lltui passes on without reading them, in order."""
    return [t for g in read_flags(words).given_args if g.key is None for t in g.tokens]


# --- reading flags -----------------------------------------------------------------------


def test_memory_flags_become_fields_and_the_rest_stays_in_order():
    words = ["-c", "8192", "--jinja", "-ngl", "all", "-ts", "3/1", "--temp", "0.7", "-np", "2"]
    args = read_flags(words)
    assert args.n_ctx == 8192
    assert args.n_gpu_layers == -2
    assert args.tensor_split == (3.0, 1.0)
    assert args.n_parallel == 2
    assert unread(words) == ["--jinja", "--temp", "0.7"]
    argv = build_command(spec_from(words), "llama-server").argv
    assert list(argv[-len(words) :]) == words  # passed on in the order given


def test_negative_numbers_are_values_and_long_flags_take_underscores():
    args = read_flags(["-ngl", "-1", "--ctx_size", "512", "--main_gpu", "1", "-ts", "1,1"])
    assert args.n_gpu_layers == -1
    assert args.n_ctx == 512
    assert args.main_gpu == 1


@pytest.mark.parametrize(
    "flag", ["--ctx-size=4096", "--n-gpu-layers=10", "--tensor-split=3,1", "--cache-type-v=q8_0"]
)
def test_flag_equals_value_is_refused_as_llama_server_refuses_it(flag):
    # llama-server takes a value only as the next argument: it dies on --ctx-size=4096
    spec = spec_from([flag])
    with pytest.raises(LaunchError) as err:
        build_command(spec, "llama-server")
    name = flag.split("=")[0]
    assert f"takes the value of {name} as the next argument" in str(err.value)
    with pytest.raises(LaunchError, match=r"write it as"):
        build_command(spec, "x", CURRENT_FLAGS)


@pytest.mark.parametrize(
    ("flag", "instead"),
    [("--no-mmap", "-lm none"), ("--mlock", "-lm mlock"), ("--mmap", "-lm mmap")],
)
def test_removed_mmap_flags_are_refused_with_what_this_build_takes(flag, instead):
    # this llama-server has no --no-mmap/--mlock: it would die on them
    spec = spec_from([flag])
    with pytest.raises(LaunchError) as err:
        build_command(spec, "llama-server")
    assert flag in str(err.value) and instead in str(err.value)
    with pytest.raises(LaunchError, match=f"has no {flag} flag .*{instead}"):
        build_command(spec, "x", CURRENT_FLAGS)
    assert read_flags(["-lm", "dio"]).load_mode == "dio"


def test_flash_attn_takes_a_value_and_a_bare_switch_is_refused():
    # a bare -fa is from older llama.cpp; this one refuses it (and would take -c as its value)
    with pytest.raises(LaunchError, match=r"-fa: expected on, off or auto.*write -fa on"):
        read_flags(["-fa", "-c", "10"])
    with pytest.raises(LaunchError, match=r"write -fa on"):
        read_flags(["-fa"])
    assert read_flags(["-fa", "off"]).flash_attn == "off"
    assert read_flags(["--flash-attn", "1"]).flash_attn == "on"
    with pytest.raises(LaunchError, match="lower case"):
        read_flags(["-fa", "ON"])


@pytest.mark.parametrize(
    ("words", "needle"),
    [
        (["-c"], "-c: expected a value"),
        (["-c", "lots"], "-c: expected a whole number"),
        (["-sm", "diagonal"], "unknown split mode"),
        (["-sm", "ROW"], "lower case: row"),
        (["-ngl", "many"], "-ngl: expected a whole number"),
        (["-ctk", "q3_k"], "unsupported cache type"),
        (["-ctk", "Q8_0"], "lower case: q8_0"),
        (["-fa", "maybe"], "-fa: unknown value 'maybe'"),
        (["-ts", "a,b"], "-ts: 'a' is not a number"),
        (["-ts", "nan,1"], "-ts: proportions must be finite"),
        (["-ts", "inf"], "-ts: proportions must be finite"),
        (["-ts", "1e-320,1e-320"], "out of range"),
        (["-lm", "fast"], "-lm: invalid value 'fast'"),
    ],
)
def test_malformed_values_are_one_clear_line(words, needle):
    with pytest.raises(LaunchError) as err:
        spec_from(words)
    assert needle in str(err.value) and "\n" not in str(err.value)
    assert err.value.code == 2


def test_spec_checks_its_own_values():
    with pytest.raises(LaunchError, match="main_gpu 2 is not one of the 2"):
        spec_from(["-ts", "1,1", "-mg", "2"])
    with pytest.raises(LaunchError, match="expected HOST:PORT"):
        spec_from(["--rpc", "127.0.0.1"])
    with pytest.raises(LaunchError, match="not a GPU UUID"):
        LaunchSpec.of("m.gguf", visible_gpus=("my gpu",))
    with pytest.raises(LaunchError, match="NCCL_"):
        LaunchSpec.of("m.gguf", nccl_env={"P2P_LEVEL": "NVL"})
    with pytest.raises(LaunchError, match="between 0 and 65535"):
        LaunchSpec.of("m.gguf", port=70000)
    with pytest.raises(LaunchError, match="no model"):
        LaunchSpec.of("  ")


@pytest.mark.parametrize(
    ("host", "needle"),
    [
        ("256.1.1.1", "is not an IP address"),  # ended in "internal error" (the poll's URL)
        ("192.168.1.300", "is not an IP address"),
        ("[::1]", "without brackets (::1)"),  # a dry run took it, the real run refused it
        ("my host", "is not a host name"),
    ],
)
def test_a_listen_address_that_is_none_is_refused_before_anything_starts(host, needle):
    with pytest.raises(LaunchError, match=re.escape(needle)) as err:
        LaunchSpec.of("m.gguf", host=host)
    assert err.value.code == 2
    for good in ("::1", "localhost", "0.0.0.0", "127.0.0.1,::1", "/run/llama.sock", "gpu-1.lan"):
        assert LaunchSpec.of("m.gguf", host=good).host == good


# --- argv and environment ----------------------------------------------------------------


def test_verbosity_comes_first_and_every_setting_is_spelled_as_llama_server_does():
    spec = spec_from(
        [
            "-c", "4096", "-np", "1", "-ngl", "99", "-sm", "layer", "-ts", "3,1", "-mg", "0",
            "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "1024", "-ub", "256",
            "--rpc", "127.0.0.1:50052,127.0.0.1:50053", "--no-warmup",
        ],
        port=18181,
    )  # fmt: skip
    cmd = build_command(spec, "/opt/llama/llama-server", CURRENT_FLAGS)
    assert cmd.argv == (
        "/opt/llama/llama-server", "-lv", "4", "-m", "m.gguf", "--host", "127.0.0.1",
        "--port", "18181", "--metrics", "-c", "4096", "-np", "1", "-ngl", "99", "-sm", "layer",
        "-ts", "3,1", "-mg", "0", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on", "-b", "1024",
        "-ub", "256", "--rpc", "127.0.0.1:50052,127.0.0.1:50053", "--no-warmup",
    )  # fmt: skip
    env = dict(cmd.env_set)
    assert env == {}
    assert P2P_ENV not in cmd.env_unset  # what the user exported is theirs


def test_defaults_listen_on_loopback_only():
    spec = LaunchSpec.of("m.gguf")
    cmd = build_command(spec, "llama-server")
    i = cmd.argv.index("--host")
    assert cmd.argv[i + 1] == "127.0.0.1"
    assert is_loopback(spec.host)
    assert not is_loopback("0.0.0.0") and not is_loopback("127.0.0.1,10.0.0.5")
    assert is_loopback("::1,localhost")


def test_the_api_key_travels_in_the_environment_and_is_masked_everywhere():
    spec = spec_from(["--api-key", KEY, "-c", "512"])
    assert spec.api_key == KEY and "api_key" not in spec.args.given
    cmd = build_command(spec, "/opt/llama/llama-server", CURRENT_FLAGS)
    assert all(KEY not in a for a in cmd.argv)
    assert dict(cmd.env_set)[API_KEY_ENV] == KEY
    assert cmd.environ({"PATH": "/bin", API_KEY_ENV: "other"})[API_KEY_ENV] == KEY
    for shown in (repr(spec), str(spec), repr(cmd), str(cmd), cmd.shell_line()):
        assert KEY not in shown
    assert MASK in repr(spec) and MASK in cmd.shell_line()
    assert cmd.display_env()[API_KEY_ENV] == MASK
    assert cmd.mask(f"log line with {KEY} in it") == f"log line with {MASK} in it"


@pytest.mark.parametrize("flag", ["--api-key", "--hf-token", "-hft"])
def test_a_flag_written_with_equals_is_refused_without_its_value(flag):
    """--api-key=KEY is refused (llama-server takes values as the next argument); the line
    that says so names the flag, never what follows the '=' (a key, a token)."""
    for flags in (CURRENT_FLAGS, None):
        with pytest.raises(LaunchError) as err:
            build_command(spec_from([f"{flag}=sekrit-{KEY}"]), "x", flags)
        assert "sekrit" not in str(err.value) and KEY not in str(err.value)
        assert f"{flag} VALUE" in str(err.value)


def test_a_key_list_is_masked_key_by_key():
    spec = LaunchSpec.of("m.gguf", api_key="alpha-key,beta-key")
    text = "alpha-key,beta-key then beta-key alone"
    assert mask_secrets(text, spec.secrets) == f"{MASK} then {MASK} alone"


def test_an_inherited_key_is_removed_when_the_spec_has_none():
    cmd = build_command(LaunchSpec.of("m.gguf"), "llama-server")
    assert API_KEY_ENV in cmd.env_unset
    assert API_KEY_ENV not in cmd.environ({API_KEY_ENV: "stale"})


def test_a_build_without_the_env_key_gets_a_key_file_and_never_argv():
    spec = LaunchSpec.of("m.gguf", api_key=KEY)
    assert api_key_transport(spec, CURRENT_FLAGS) == "env"
    assert api_key_transport(spec, OLD_FLAGS) == "file"
    cmd = build_command(spec, "/old/llama-server", OLD_FLAGS, key_file="/run/k")
    assert cmd.argv[-2:] == ("--api-key-file", "/run/k")
    assert all(KEY not in a for a in cmd.argv)
    assert API_KEY_ENV not in dict(cmd.env_set)
    no_file = BinaryFlags(flags=OLD_FLAGS.flags - {"--api-key-file"}, env_vars=OLD_FLAGS.env_vars)
    with pytest.raises(LaunchError, match="ps"):
        build_command(spec, "/old/llama-server", no_file)


def test_gpu_environment_by_uuid_nccl_values_and_p2p_only_when_asked():
    uuids = ("GPU-1f2e3d4c-0000-1111-2222-333344445555", "GPU-aaaabbbb-cccc-dddd-eeee-ffff00001111")
    spec = LaunchSpec.of(
        "m.gguf",
        visible_gpus=uuids,
        nccl_env={"NCCL_P2P_LEVEL": "NVL", "NCCL_DEBUG": "WARN"},
        env={"OMP_NUM_THREADS": "4"},
    )
    env = dict(build_command(spec, "llama-server").env_set)
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(uuids)
    assert "CUDA_DEVICE_ORDER" not in env
    assert env["NCCL_P2P_LEVEL"] == "NVL" and env["NCCL_DEBUG"] == "WARN"
    assert env["OMP_NUM_THREADS"] == "4"
    # lltui sets GGML_CUDA_P2P only when asked, and never removes the user's own
    cmd = build_command(spec, "llama-server")
    assert P2P_ENV not in dict(cmd.env_set) and P2P_ENV not in cmd.env_unset
    assert cmd.environ({P2P_ENV: "1"})[P2P_ENV] == "1"
    assert relevant_inherited_env({P2P_ENV: "1"}, cmd) == {P2P_ENV: "1"}  # shown by a dry run
    on = build_command(LaunchSpec.of("m.gguf", cuda_p2p=True), "llama-server")
    assert dict(on.env_set)[P2P_ENV] == "1" and P2P_ENV not in on.env_unset
    asked = build_command(LaunchSpec.of("m.gguf", env={P2P_ENV: "1"}), "llama-server")
    assert dict(asked.env_set)[P2P_ENV] == "1"
    # any value turns peer access on in llama.cpp: a value that reads as "off" is refused
    with pytest.raises(LaunchError, match="turns peer access on"):
        LaunchSpec.of("m.gguf", env={P2P_ENV: "0"})


def test_load_mode_is_spelled_for_each_build():
    spec = spec_from(["-lm", "none"])
    assert build_command(spec, "x", CURRENT_FLAGS).argv[-2:] == ("-lm", "none")
    assert build_command(spec, "x", OLD_FLAGS).argv[-1:] == ("--no-mmap",)
    locked = spec_from(["-lm", "mlock"])
    assert build_command(locked, "x", OLD_FLAGS).argv[-2:] == ("--no-mmap", "--mlock")
    with pytest.raises(LaunchError, match="no --load-mode flag"):
        build_command(spec_from(["-lm", "dio"]), "x", OLD_FLAGS)


def test_flash_attn_on_an_old_build_is_the_bare_switch():
    assert build_command(spec_from(["-fa", "on"]), "x", OLD_FLAGS).argv[-1] == "-fa"
    assert "-fa" not in build_command(spec_from(["-fa", "auto"]), "x", OLD_FLAGS).argv


def test_a_flag_the_build_lacks_is_refused_in_one_line():
    with pytest.raises(LaunchError) as err:
        build_command(spec_from(["-ts", "1,1"]), "/old/llama-server", OLD_FLAGS)
    assert str(err.value) == "/old/llama-server (b3000) has no --tensor-split flag (-ts)"
    with pytest.raises(LaunchError, match="has no --no-such-flag flag"):
        build_command(spec_from(["--no-such-flag"]), "x", CURRENT_FLAGS)
    with pytest.raises(LaunchError, match=r"write it as --temp VALUE"):
        build_command(spec_from(["--temp=0.5"]), "x", CURRENT_FLAGS)


def test_a_launch_setting_among_the_flags_is_the_specs_and_written_once():
    spec = spec_from(["--port", "9000", "-c", "100", "--host", "127.0.0.2", "-lv", "2"])
    assert (spec.port, spec.host, spec.log_verbosity) == (9000, "127.0.0.2", 2)
    argv = build_command(spec, "x", CURRENT_FLAGS).argv
    assert argv.count("--port") == 1 and argv.count("--host") == 1 and argv.count("-lv") == 1
    assert argv[argv.index("--port") + 1] == "9000" and argv[-2:] == ("-c", "100")


def test_urls_for_wildcards_and_ipv6():
    assert server_url("127.0.0.1", 8080) == "http://127.0.0.1:8080"
    assert server_url("0.0.0.0", 1) == "http://127.0.0.1:1"
    assert server_url("::1", 2) == "http://[::1]:2"
    assert server_url("::", 3) == "http://[::1]:3"
    assert server_url("10.1.2.3,127.0.0.1", 4) == "http://10.1.2.3:4"
    # llama-server listens on a UNIX socket for a host ending .sock: no port (was
    # http:///tmp/s.sock:8080)
    assert server_url("/tmp/s.sock", 8080) == "unix:/tmp/s.sock"


def test_inherited_variables_that_matter_are_shown_with_the_key_masked():
    cmd = build_command(LaunchSpec.of("m.gguf", api_key=KEY), "x")
    shown = relevant_inherited_env(
        {"LLAMA_ARG_THREADS": "8", "HOME": "/root", "NCCL_DEBUG": "INFO", API_KEY_ENV: KEY}, cmd
    )
    assert shown == {"LLAMA_ARG_THREADS": "8", "NCCL_DEBUG": "INFO"}  # the key is lltui's own


# --- why it stopped, from real logs --------------------------------------------------------


def _sections(text: str) -> list[tuple[str, list[str], int]]:
    out = []
    for block in re.split(r"^=+$", text, flags=re.M):
        lines = [ln for ln in block.strip().splitlines() if ln.strip()]
        if not lines or not lines[0].startswith("$"):
            continue
        code = next(
            int(m.group(1)) for ln in lines if (m := re.match(r"\[exit code: (-?\d+)\]", ln))
        )
        out.append((lines[0], [ln for ln in lines[1:] if not ln.startswith("[exit")], code))
    return out


def test_every_captured_failure_gets_its_own_plain_reason():
    sections = _sections((FIXTURES / "errors_exit_codes.txt").read_text())
    assert len(sections) >= 9
    reasons = {cmd: exit_reason(code, lines) for cmd, lines, code in sections}
    by_flag = {cmd.split("18180", 1)[-1].strip(): r for cmd, r in reasons.items()}
    assert by_flag["--no-such-flag"] == "llama-server does not accept the flag --no-such-flag"
    assert by_flag["--no-mmap"] == "llama-server does not accept the flag --no-mmap"
    assert by_flag["-sm diagonal"] == "llama-server rejected the value of -sm: invalid value"
    assert "rejected the value of -fa" in by_flag["-fa maybe"]
    assert by_flag["-dev CUDA0"] == "llama-server rejected the value of -dev: invalid device: CUDA0"
    missing = next(r for c, r in reasons.items() if "does-not-exist" in c)
    assert missing == "model not found: models/does-not-exist.gguf"
    truncated = next(r for c, r in reasons.items() if "truncated" in c)
    assert truncated.startswith("the model file is damaged: tensor 'blk.4.ffn_down.weight'")
    port = next(r for c, r in reasons.items() if "port already taken" in c)
    assert port == "port 18180 on 127.0.0.1 is in use or cannot be bound"


def test_a_missing_projector_is_not_called_the_model():
    """--mmproj a file that is not there: the model loaded; the projector was not found."""
    lines = (FIXTURES / "error_mmproj_missing.log").read_text().splitlines()
    assert exit_reason(1, lines) == "projector not found: models/absent-mmproj.gguf"


def test_kv_cache_allocation_failure_reads_as_does_not_fit():
    lines = (FIXTURES / "error_alloc_failure_kv_cache.log").read_text().splitlines()
    reason = exit_reason(1, lines)
    assert reason == "the model does not fit in memory: failed to allocate buffer for kv cache"


def test_a_context_refused_for_its_settings_says_which_setting():
    vq = (FIXTURES / "error_context_quantized_v_fa_off.log").read_text().splitlines()
    assert exit_reason(1, vq) == (
        "llama-server could not load the model: quantized V cache requires flash_attn to be enabled"
    )
    mla = (FIXTURES / "error_context_mla_kv_types.log").read_text().splitlines()
    assert exit_reason(1, mla).endswith(
        ": model does not support different K (q8_0) and V (f16) cache types"
    )


def test_a_context_its_constructor_refused_says_why():
    """-np 300: "failed to initialize the context: n_seq_max must be <= 256", not the
    server's "exiting due to model loading error" after it."""
    lines = (FIXTURES / "error_context_n_seq_max.log").read_text().splitlines()
    assert exit_reason(1, lines) == (
        "llama-server could not load the model: failed to initialize the context: "
        "n_seq_max must be <= 256"
    )


def test_metals_command_buffer_out_of_memory_reads_as_does_not_fit():
    # ggml-metal's words when a command buffer runs out of memory (ggml-metal-context.m)
    lines = [
        "ggml_metal_graph_compute: error: command buffer 0 failed with status 5",
        "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
        "graph_compute: ggml_backend_sched_graph_compute_async failed with error -1",
    ]
    assert exit_reason(1, lines) == (
        "the model does not fit in memory: "
        "Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)"
    )


def test_stops_are_told_apart_from_crashes():
    clean = (FIXTURES / "shutdown_sigterm_lv4.log").read_text().splitlines()
    assert exit_reason(0, clean, stopped=True) == "stopped"
    assert exit_reason(0, clean) == "llama-server exited"
    loading = (FIXTURES / "signal_during_loading.txt").read_text().splitlines()[:12]
    assert exit_reason(-15, loading, stopped=True).startswith("stopped by SIGTERM")
    assert exit_reason(-9, loading) == "llama-server was killed by SIGKILL"
    forced = ["0.00.1 I x", "Received second interrupt, terminating immediately."]
    reason = exit_reason(1, forced, stopped=True)  # (not "forced by a second signal": whose?)
    assert reason == "stopped (still busy after the first stop signal: a second one ended it)"
    aborted = ["0.01.000.000 E ggml_abort: CUDA error: an illegal memory access"]
    assert (
        exit_reason(-6, aborted)
        == "llama-server aborted: ggml_abort: CUDA error: an illegal memory access"
    )
    event = exit_event(-9, "x", ["a", "b"], pid=7)
    assert (
        event["event"] == "exit"
        and event["signal"] == "SIGKILL"
        and event["log_tail"] == ["a", "b"]
    )


# --- profiles ------------------------------------------------------------------------------


def test_spec_survives_the_trip_through_plain_data():
    spec = spec_from(
        ["-c", "2048", "-ts", "3,1", "-sm", "layer", "--rpc", "h:1", "--jinja"],
        api_key=KEY,
        visible_gpus=("GPU-abc",),
        nccl_env={"NCCL_DEBUG": "INFO"},
        cuda_p2p=True,
    )
    data = spec_to_dict(spec)
    assert data["flags"] == ["-c", "2048", "-ts", "3,1", "-sm", "layer", "--rpc", "h:1", "--jinja"]
    assert "port" not in data  # defaults are left out
    assert spec_from_dict(data) == spec
    assert "api_key" not in spec_to_dict(spec, include_secret=False)


def test_a_profile_of_an_earlier_version_reads_as_the_same_launch():
    # one key per setting, named as its long flag (--parallel and --device are the two that
    # are not), the rest of the flags in extra_args
    old = {
        "model": "m.gguf",
        "ctx_size": 2048,
        "n_parallel": 1,
        "n_gpu_layers": -2,
        "tensor_split": [3.0, 1.0],
        "devices": ["CUDA0", "CUDA1"],
        "cache_type_k": "q8_0",
        "extra_args": ["--jinja"],
        "port": 9000,
    }
    spec = spec_from_dict(old)
    a = spec.args
    assert (a.n_ctx, a.n_parallel, a.n_gpu_layers, a.tensor_split) == (2048, 1, -2, (3.0, 1.0))
    assert a.devices == ("CUDA0", "CUDA1") and a.type_k == "q8_0" and spec.port == 9000
    assert "--jinja" in a.ignored


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"model": "m", "ctx": 5}, "unknown key 'ctx'"),
        ({"model": "m", "port": "80"}, "port has the wrong type"),
        ({"model": "m", "metrics": 1}, "metrics has the wrong type"),
        # a table of the right type with a value that is not: 'env has the wrong type (dict)'
        ({"model": "m", "env": {"X": 5}}, "env.X must be a string (quote it)"),
        ({"model": "m", "visible_gpus": [0]}, "visible_gpus must be a list of strings"),
        ({"model": "m", "rpc": [1]}, "--rpc: expected HOST:PORT"),
        ({"model": "m", "flags": "-c 5"}, "flags must be a list"),
        ({"ctx_size": 5}, "no model"),
        ({"model": "m", "split_mode": "sideways"}, "unknown split mode"),
    ],
)
def test_bad_profile_data_names_the_key(data, needle):
    with pytest.raises(LaunchError) as err:
        spec_from_dict(data, where="p.toml")
    assert needle in str(err.value) and str(err.value).startswith("p.toml: ")


def test_profile_with_a_key_is_private_and_round_trips(tmp_path):
    spec = spec_from(["-c", "1024", "--rpc", "127.0.0.1:5"], api_key=KEY, env={"A": 'q"uote\\'})
    path = profiles.save_profile("big-model", spec, tmp_path)
    assert path == tmp_path / "big-model.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert profiles.load_profile("big-model", tmp_path) == spec
    assert [p.name for p in tmp_path.iterdir()] == ["big-model.toml"]  # no temp file left
    assert profiles.list_profiles(tmp_path) == ["big-model"]


def test_profile_without_a_key_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = profiles.save_profile("plain", LaunchSpec.of("m.gguf"), tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "api_key" not in path.read_text()


def test_saving_again_replaces_the_whole_file(tmp_path):
    profiles.save_profile("p", spec_from(["-c", "1", "--jinja"]), tmp_path)
    profiles.save_profile("p", LaunchSpec.of("other.gguf"), tmp_path)
    assert profiles.load_profile("p", tmp_path) == LaunchSpec.of("other.gguf")


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "", "x.toml", "a" * 65])
def test_profile_names_are_plain_file_names(name, tmp_path):
    with pytest.raises(profiles.ProfileError, match="profile name"):
        profiles.save_profile(name, LaunchSpec.of("m.gguf"), tmp_path)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"model = ", "Invalid"),
        (b"\xff\xfe", "not UTF-8"),
        (b'model = "m"\nbogus = 1\n', "unknown key 'bogus'"),
        (b"# " + b"x" * (profiles.MAX_PROFILE_BYTES + 10), "too large"),
    ],
)
def test_broken_profiles_are_one_line(tmp_path, content, needle):
    (tmp_path / "bad.toml").write_bytes(content)
    with pytest.raises(profiles.ProfileError) as err:
        profiles.load_profile("bad", tmp_path)
    assert needle in str(err.value) and str(tmp_path / "bad.toml") in str(err.value)


def test_a_missing_profile_lists_the_known_ones(tmp_path):
    profiles.save_profile("one", LaunchSpec.of("m.gguf"), tmp_path)
    with pytest.raises(profiles.ProfileError, match=r"no launch profile 'two'.*known: one"):
        profiles.load_profile("two", tmp_path)


def test_profiles_live_in_the_config_dir(isolated_config):
    path = profiles.save_profile("cfg", LaunchSpec.of("m.gguf"))
    assert path == isolated_config / "profiles" / "cfg.toml"


def test_values_keep_their_underscores():
    got = read_flags(
        ["--model", "/models/my_model.gguf", "--api_key", "abc_def", "--ctx_size", "512"]
    )
    assert got.model_path == "/models/my_model.gguf"
    assert got.api_key == "abc_def"
    assert got.n_ctx == 512
    with pytest.raises(LaunchError) as err:
        build_command(spec_from(["--model=/models/my_model.gguf"]), "llama-server")
    assert "write --model /models/my_model.gguf" in str(err.value)


@pytest.mark.parametrize("order", [None, "PCI_BUS_ID", "FASTEST_FIRST"])
def test_server_numbers_cuda_devices_as_the_plan_does(order):
    """A mixed rig (a 3090 on the lower bus, a 4090 above it): lltui plans CUDA0, -ts and -dev
    in the CUDA order of its own environment, so the server must inherit that order; a
    CUDA_DEVICE_ORDER set for the server alone put the 3090 at CUDA0 while the plan had the
    4090 there."""
    from lltui.core.monitor.cuda_order import CudaCandidate, cuda_indices_from_env

    rig = [
        CudaCandidate("GPU-3090", "00000000:01:00.0", (8, 6)),
        CudaCandidate("GPU-4090", "00000000:41:00.0", (8, 9)),
    ]
    env = {"PATH": "/usr/bin"} | ({"CUDA_DEVICE_ORDER": order} if order else {})
    cmd = build_command(LaunchSpec.of("m.gguf", ("-ts", "3,1")), "llama-server")
    planned = cuda_indices_from_env(rig, env)
    assert cuda_indices_from_env(rig, cmd.environ(env)) == planned
    if order is None:
        assert planned == [1, 0]  # CUDA's default puts the faster card first


def test_a_load_failure_names_the_loaders_reason_not_the_exit_line():
    """The E lines after the loader's own ("failed to load model", "exiting due to model
    loading error") say only that it failed; the reason was one of them."""
    log = [
        "E llama_model_load: error loading model: error loading model vocabulary: "
        "unknown tokenizer: 'no-such-tokenizer'",
        "E llama_model_load_from_file_impl: failed to load model",
        "E srv    load_model: failed to load model, '/m/faulty.gguf'",
        "E srv   operator(): operator(): cleaning up before exit...",
        "E main: exiting due to model loading error",
    ]
    assert exit_reason(1, log) == (
        "llama-server could not load the model: error loading model vocabulary: "
        "unknown tokenizer: 'no-such-tokenizer'"
    )
