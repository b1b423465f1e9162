"""Real llama.cpp for tests: the built binaries, tiny GGUF models, and servers on loopback.

``llama_bins`` builds llama-server, ggml-rpc-server, llama-fit-params, llama-quantize and
llama-bench through :func:`lltui.sources.llama.build.build`, the code behind ``lltui llama
install``; the build lands in the user cache, so only the first run on a machine pays for it
(a cache built before llama-bench joined gets that one target added, not a rebuild).
Servers started here bind 127.0.0.1 on a free port, run in their own process group, are
waited for with a deadline, and are killed (the whole group) when the test ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from lltui.core.llamalog.models import LlamaLogSummary
from lltui.sources.llama import build as llama_build

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 15.0


def build_llama(config: pytest.Config | None = None) -> llama_build.BuildResult:
    """The cached build, building it first if needed. Its progress (a line at least once a
    minute) goes to the terminal past pytest's capture when ``config`` is given, so a first
    run that compiles for half an hour says so rather than looking hung."""
    capture = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    one_at_a_time = threading.Lock()  # the build's heartbeat speaks from a thread of its own

    def progress(message: str) -> None:
        with (
            one_at_a_time,
            capture.global_and_fixture_disabled() if capture else contextlib.nullcontext(),
        ):
            print(f"\n[llama build] {message}", file=sys.stderr, flush=True)

    done = llama_build.installed()
    if done is not None:
        return done
    try:
        llama_build.check_toolchain()
    except llama_build.BuildError as exc:
        pytest.skip(f"cannot build llama.cpp here: {exc}")
    # a fresh build, or only the targets an older cache lacks (llama-bench)
    return llama_build.build(progress=progress)


@pytest.fixture(scope="session")
def llama_bins(pytestconfig: pytest.Config) -> llama_build.BuildResult:
    return build_llama(pytestconfig)


# --- a tiny model -------------------------------------------------------------------------------

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_tiny_llama(
    path: Path,
    *,
    layers: int = 8,
    embd: int = 128,
    ff: int = 384,
    heads: int = 4,
    heads_kv: int = 2,
    ctx: int = 2048,
    seed: int = 0,
    tokenizer: str = "llama",
) -> Path:
    """A llama-architecture GGUF with random F16 weights and a small SPM vocabulary
    (``tokenizer``: another tokenizer model name makes a file llama.cpp refuses to load)."""
    gguf = pytest.importorskip("gguf")
    np = pytest.importorskip("numpy")
    tokens: list[str] = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    # SPM falls back to the 256 byte tokens for anything else, so any prompt tokenizes.
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    pieces = ["\u2581", *"abcdefghijklmnopqrstuvwxyz", *"ABCDEFGHIJKLMNOPQRSTUVWXYZ"]
    pieces += ["\u2581" + w for w in ("the", "gpu", "hello", "world", "layer", "cache")]
    tokens += pieces
    types += [gguf.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + [-100.0 + len(p) for p in pieces]
    n_vocab = len(tokens)
    head_dim = embd // heads
    rng = np.random.default_rng(seed)

    def weight(rows: int, cols: int) -> object:
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    def ones(n: int) -> object:
        return np.ones((n,), dtype=np.float32)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("lltui-test-llama")
    w.add_context_length(ctx)
    w.add_embedding_length(embd)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_head_count(heads)
    w.add_head_count_kv(heads_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model(tokenizer)
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_chat_template(CHATML)
    w.add_tensor("token_embd.weight", weight(n_vocab, embd))
    for i in range(layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(embd))
        w.add_tensor(p + "attn_q.weight", weight(embd, embd))
        w.add_tensor(p + "attn_k.weight", weight(head_dim * heads_kv, embd))
        w.add_tensor(p + "attn_v.weight", weight(head_dim * heads_kv, embd))
        w.add_tensor(p + "attn_output.weight", weight(embd, embd))
        w.add_tensor(p + "ffn_norm.weight", ones(embd))
        w.add_tensor(p + "ffn_gate.weight", weight(ff, embd))
        w.add_tensor(p + "ffn_up.weight", weight(ff, embd))
        w.add_tensor(p + "ffn_down.weight", weight(embd, ff))
    w.add_tensor("output_norm.weight", ones(embd))
    w.add_tensor("output.weight", weight(n_vocab, embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_llama(tmp_path_factory.mktemp("models") / "tiny-llama.gguf")


# --- processes ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    log_path: Path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")


def stop_group(proc: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM the process group, then SIGKILL it if it has not gone in time."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout_s)


@contextlib.contextmanager
def running(
    argv: Sequence[str],
    log_path: Path,
    port: int,
    ready: Callable[[Running], bool],
    timeout_s: float = START_TIMEOUT_S,
) -> Iterator[Running]:
    """Start ``argv`` in its own session, wait until ``ready``; always stop the group."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    run = Running(proc, log_path, port)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready(run):
            if proc.poll() is not None:
                raise AssertionError(
                    f"{Path(argv[0]).name} exited {proc.returncode} before it was ready:\n"
                    + "\n".join(run.log().splitlines()[-15:])
                )
            if time.monotonic() > deadline:
                raise AssertionError(f"{Path(argv[0]).name} not ready in {timeout_s:.0f} s")
            time.sleep(0.05)
        yield run
    finally:
        stop_group(proc)


def _health_ok(run: Running) -> bool:
    import httpx

    try:
        return httpx.get(f"{run.url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


# what every llama-server started here runs with besides its model and address: a fit of the
# same command line is given these too
SERVER_ARGS = ("-t", "1", "-c", "512")
# a log's buffer lines by kind, as the tests compare them with a plan
BUFFER_KINDS = ("model", "KV", "output", "compute", "RS")


def logged_buffers(
    summary: LlamaLogSummary, kinds: Sequence[str] = BUFFER_KINDS, part: str = "model"
) -> dict[tuple[str, str], float]:
    """The MiB of each (device, kind) buffer a log gave one part (the model, its draft), for
    the kinds asked."""
    fields = {
        "model": "model_mib",
        "KV": "kv_mib",
        "output": "output_mib",
        "compute": "compute_mib",
        "RS": "rs_mib",
    }
    out = {}
    for b in summary.memory.sizes(part):
        for kind in kinds:
            mib = getattr(b, fields[kind])
            if mib:
                out[(b.name, kind)] = mib
    return out


@contextlib.contextmanager
def llama_server(
    bins: llama_build.BuildResult,
    model: Path,
    log_path: Path,
    extra: Sequence[str] = (),
    ready: Callable[[Running], bool] = _health_ok,
) -> Iterator[Running]:
    """llama-server on a free loopback port with ``-lv 4`` (placement lines) and ``extra``."""
    port = free_port()
    argv = [
        str(bins.binaries["llama-server"]),
        "-lv",
        "4",
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SERVER_ARGS,
        *extra,
    ]
    with running(argv, log_path, port, ready) as run:
        yield run


def served_log(
    bins: llama_build.BuildResult, model: Path, log_path: Path, extra: Sequence[str] = ()
) -> str:
    """llama-server's whole log for a load: started as :func:`llama_server` starts it, stopped
    once it answers /health, read after it has exited. llama.cpp writes its log from a thread
    of its own, so a line printed while loading can reach the file after /health answers (a
    buffer line once did, on a loaded machine); once the process is gone every line is in."""
    with llama_server(bins, model, log_path, extra):
        pass
    return log_path.read_text(encoding="utf-8", errors="replace")


@contextlib.contextmanager
def rpc_servers(
    bins: llama_build.BuildResult, count: int, log_dir: Path
) -> Iterator[list[Running]]:
    """``count`` ggml-rpc-server processes on loopback; llama-server sees each as a device."""
    with contextlib.ExitStack() as stack:
        servers = []
        for i in range(count):
            port = free_port()
            argv = [
                str(bins.binaries["ggml-rpc-server"]),
                "-H",
                "127.0.0.1",
                "-p",
                str(port),
                "-t",
                "1",
            ]
            servers.append(
                stack.enter_context(
                    running(argv, log_dir / f"rpc{i}.log", port, lambda r: port_open(r.port))
                )
            )
        yield servers


def token_bytes(model) -> int:
    """What one token takes in the caches, from the GGUF's own shapes: every layer's K and
    V rows (n_embd / n_head * n_head_kv values each), F16."""
    from gguf import GGUFReader

    reader = GGUFReader(str(model))

    def value(key: str) -> int:
        field = reader.fields[key]
        return int(field.parts[field.data[0]][0])

    heads, heads_kv = value("llama.attention.head_count"), value("llama.attention.head_count_kv")
    n_embd_gqa = value("llama.embedding_length") // heads * heads_kv
    return value("llama.block_count") * 2 * n_embd_gqa * 2
