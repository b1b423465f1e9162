"""Fuzz targets for the classes of bug of hardening round 3 (issue 24), so each stays fixed:

- ``net``: ``lltui fit http://...`` against a server on 127.0.0.1 that misbehaves at random
  (drips its headers or its body a byte at a time, redirects nowhere or in a loop, lies
  about ranges and lengths, answers garbage): every case ends within the deadline
  (``LLTUI_NET_DEADLINE`` 1 s here) with a result or one line.
- ``inject``: models whose string metadata hold line breaks, NEL, line and paragraph
  separators, bidi overrides and escape sequences, and recordings whose GPU names, users,
  hosts and command lines do, through ``fit``, ``quant`` and ``gpus`` as text: nothing of
  it is printed raw, and no printed line starts with the forged marker.
- ``scale``: inputs far larger than real ones but small enough for a case (an NCCL log
  naming a new host on every line, nccl-tests with thousands of rows, GGUFs with hundreds
  of thousands of keys or tens of thousands of tensors): the oracle's time and memory
  bounds hold them to linear work.
- ``record``: a recording of processes whose command lines carry secrets, recorded again by
  ``lltui --record``: the file is 0600 and holds none of the secrets.
- ``dcgm``: dcgm-exporter pages with metrics dropped or damaged: a GPU's total memory is
  unknown (None), never 0, unless the page says 0.
- ``hooks``: ``lltui watch`` over a replayed rig that raises every alert, under a config
  whose ``[alerts]`` hooks and timeouts are hostile (NULs, control characters, huge or
  non-finite numbers, words of every type, programs that hang, ignore SIGTERM, stop
  themselves or leave children behind): a result or one line, nothing printed raw, and no
  process of a hook left once lltui has returned.

Cases are pure functions of (target, seed, index), like the others (tests/support/fuzz_inputs.py).
"""

from __future__ import annotations

import json
import random
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
FIXTURES = TESTS / "fixtures"
SERVER = "{server}"  # in an argv: the URL of the worker's misbehaving server
FORGED = "FORGED-LINE"
NET_DEADLINE_S = "1"
DRIP_S = 0.05

CLASS_TARGETS = ("net", "inject", "scale", "record", "dcgm", "hooks")

# -- net ---------------------------------------------------------------------------------------

BEHAVIOURS = (
    "ok", "drip-head", "drip-body", "redirect-dead", "redirect-loop", "redirect-ok",
    "no-range", "lie-range", "short", "huge-total", "garbage", "status-500", "status-416",
    "empty-206", "slow", "no-length", "keep-open",
)  # fmt: skip


class _NetState:
    data = b""
    dead_port = 9  # discard: nothing listens there on a test machine
    stop = threading.Event()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, code: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _drip(self, data: bytes) -> None:
        for i in range(len(data)):
            if _NetState.stop.wait(DRIP_S):
                return
            try:
                self.wfile.write(data[i : i + 1])
                self.wfile.flush()
            except OSError:
                return

    def _range(self) -> tuple[int, int]:
        m = re.match(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        data = _NetState.data
        if not m:
            return 0, len(data) - 1
        a = int(m.group(1))
        b = int(m.group(2)) if m.group(2) else len(data) - 1
        return a, min(b, len(data) - 1)

    def do_HEAD(self) -> None:
        self._send(405, {"Content-Length": "0"})

    def do_GET(self) -> None:
        parts = self.path.split("/")
        how = parts[1] if len(parts) > 1 else "ok"
        data = _NetState.data
        a, b = self._range()
        part = data[a : b + 1]
        cr = {"Content-Range": f"bytes {a}-{b}/{len(data)}", "Content-Length": str(len(part))}
        if how == "drip-head":
            self.wfile.write(b"HTTP/1.1 206 Partial Content\r\n")
            self.wfile.flush()
            self._drip(b"X-Pad: " + b"y" * 4000 + b"\r\n")
        elif how == "drip-body":
            self._send(206, cr)
            self._drip(part)
        elif how == "redirect-dead":
            self._send(302, {"Location": f"http://127.0.0.1:{_NetState.dead_port}/m.gguf",
                             "Content-Length": "0"})  # fmt: skip
        elif how == "redirect-loop":
            self._send(302, {"Location": self.path, "Content-Length": "0"})
        elif how == "redirect-ok":
            self._send(301, {"Location": "/ok/" + "/".join(parts[2:]), "Content-Length": "0"})
        elif how == "no-range":
            self._send(200, {"Content-Length": str(len(data))}, data)
        elif how == "lie-range":
            self._send(206, {**cr, "Content-Range": f"bytes {a + 7}-{b}/{len(data)}"}, part)
        elif how == "short":
            self._send(206, {**cr, "Content-Length": str(len(part) + 1000)}, part[: len(part) // 2])
            self.close_connection = True
        elif how == "huge-total":
            self._send(206, {**cr, "Content-Range": f"bytes {a}-{b}/{2**62}"}, part)
        elif how == "garbage":
            self.wfile.write(b"\x00\xffNOT HTTP AT ALL\r\n\r\n" + data[:100])
            self.close_connection = True
        elif how == "status-500":
            self._send(500, {"Content-Length": "4"}, b"oops")
        elif how == "status-416":
            self._send(416, {"Content-Length": "0"})
        elif how == "empty-206":
            self._send(206, {**cr, "Content-Length": "0"})
        elif how == "slow":
            _NetState.stop.wait(0.3)
            self._send(206, cr, part)
        elif how == "no-length":
            self._send(206, {"Content-Range": f"bytes {a}-{b}/*"}, part)
            self.close_connection = True
        elif how == "keep-open":  # the answer, then the connection held open, silent
            self._send(206, {**cr, "Content-Length": str(len(part) + 1)}, part)
            _NetState.stop.wait(5)
        else:
            self._send(206, cr, part)


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer is expected here: nothing on stderr (which is
        the case's, being judged)."""


_server: ThreadingHTTPServer | None = None


def server_url(data: bytes) -> str:
    """The worker's misbehaving server, started once, serving ``data`` from now on."""
    global _server
    _NetState.data = data
    if _server is None:
        _server = _QuietServer(("127.0.0.1", 0), _Handler)
        threading.Thread(target=_server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{_server.server_address[1]}"


# -- inject ------------------------------------------------------------------------------------

HOSTILE_PIECES = (
    f"\n{FORGED} verdict: fits", f"\r\n{FORGED}", f"\x85{FORGED}", f"\u2028{FORGED}",
    f"\u2029{FORGED}", f"\u202e{FORGED}", f"\u2066{FORGED}\u2069", f"\x1b[2J{FORGED}",
    f"\x0b{FORGED}", f"\x0c{FORGED}", f"\u200f{FORGED}", f"\u061c{FORGED}", "\x1b]0;x\x07",
)  # fmt: skip
RAW_FORBIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
STRING_KEYS = (
    "general.name", "general.basename", "general.finetune", "general.license",
    "general.organization", "general.size_label", "tokenizer.ggml.pre",
)  # fmt: skip


def hostile(rng: random.Random) -> str:
    return "".join(
        rng.choice(("x", "model ", "", *HOSTILE_PIECES)) for _ in range(rng.randint(1, 4))
    )


def judge_text(out: str, err: str) -> dict[str, Any] | None:
    """A failure when text output prints a control, separator or bidi character raw, or a
    line that data began (the forged marker at the start of a line); None when clean."""
    for name, text in (("stdout", out), ("stderr", err)):
        m = RAW_FORBIDDEN.search(text)
        if m:
            at = text[max(0, m.start() - 30) : m.start() + 10]
            return {"status": "bad-text", "message": f"{name} prints {m.group()!r} raw: {at!r}"}
        for line in text.split("\n"):
            if line.lstrip(" |=").startswith(FORGED):
                return {"status": "bad-text", "message": f"{name} has a forged line: {line[:80]!r}"}
    return None


def _poison_recording(text: str, rng: random.Random, secrets: list[str] | None = None) -> str:
    lines = []
    for raw in text.splitlines():
        obj = json.loads(raw)
        lines.append(json.dumps(_poison(obj, rng, secrets)))
    return "\n".join(lines) + "\n"


def _poison(obj: Any, rng: random.Random, secrets: list[str] | None) -> Any:
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if secrets is not None and k == "command" and isinstance(v, str):
                out[k] = secret_command(rng, secrets)
            elif secrets is None and k in ("name", "command", "user", "hostname", "driver_version"):
                out[k] = hostile(rng)
            else:
                out[k] = _poison(v, rng, secrets)
        return out
    if isinstance(obj, list):
        return [_poison(v, rng, secrets) for v in obj]
    return obj


# -- record ------------------------------------------------------------------------------------

SECRET_FORMS = (
    "--api-key {s}", "--api-key={s}", "-hft {s}", "--hf-token {s}", "--openai-api-key {s}",
    "--db-password {s}", "--auth-token={s}", "HF_TOKEN={s}", "AWS_SECRET_ACCESS_KEY={s}",
    "--url https://user:{s}@example.com/x", "--src https://h.example/f?token={s}&x=1",
    "hf_{s}", "sk-{s}",
)  # fmt: skip


def secret_command(rng: random.Random, secrets: list[str]) -> str:
    words = [rng.choice(("llama-server", "python", "/usr/bin/env", "vllm"))]
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.6:
            s = "".join(
                rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789") for _ in range(24)
            )
            secrets.append(s)
            words.append(rng.choice(SECRET_FORMS).format(s=s))
        else:
            words.append(rng.choice(("-m /m.gguf", "-ngl 99", "--port 8080", "-c 4096", "x y")))
    return " ".join(words)


def judge_record(path: Path, secrets: list[str]) -> dict[str, Any] | None:
    import stat

    try:
        st = path.stat()
        text = path.read_text(errors="replace")
    except OSError as exc:
        return {"status": "bad-record", "message": f"no recording written: {exc}"}
    if stat.S_IMODE(st.st_mode) & 0o077:
        return {"status": "bad-record", "message": f"recording mode {stat.S_IMODE(st.st_mode):o}"}
    leaked = [s for s in secrets if s in text]
    if leaked:
        return {"status": "bad-record", "message": f"secret {leaked[0]!r} written"}
    return None


# -- scale -------------------------------------------------------------------------------------


def _scale_case(rng: random.Random, ops: list[str]) -> tuple[str, bytes, list[str]]:
    from support import gguf_factory as gf

    kind = rng.choice(("log-hosts", "log-warns", "tests-rows", "gguf-keys", "gguf-tensors"))
    if kind == "log-hosts":
        n = rng.choice((1000, 20_000, 60_000))
        lines = [
            f"h{i}:{i}:{i} [{i}] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/x{i}"
            for i in range(n)
        ]
        ops.append(f"NCCL log naming {n} hosts, pids, devices and transports")
        return "input.txt", ("\n".join(lines) + "\n").encode(), ["nccl", "log", "{input}", "--json"]
    if kind == "log-warns":
        n = rng.choice((1000, 20_000, 40_000))
        lines = [f"h:1:1 [0] NCCL INFO misc/socket.cc:{i} -> {i % 7}" for i in range(n)]
        lines += [
            f"h:1:1 [0] NCCL WARN Got completion with error {i}, {'x' * 70}" for i in range(n)
        ]
        ops.append(f"NCCL log of {n} distinct error traces and {n} WARN lines")
        return "input.txt", ("\n".join(lines) + "\n").encode(), ["nccl", "log", "{input}"]
    if kind == "tests-rows":
        n = rng.choice((500, 20_000, 40_000))
        head = (
            "#       size         count      type   redop    root     time   algbw   busbw #wrong"
        )
        row = "        {s}           256     float     sum      -1    10.00    0.10    0.15      0"
        lines = [head] + [row.format(s=1024 + i) for i in range(n)] + ["# Avg bus bandwidth : 1"]
        ops.append(f"nccl-tests table of {n} rows")
        return (
            "input.txt",
            ("\n".join(lines) + "\n").encode(),
            ["nccl", "tests", "{input}", "--json"],
        )
    a = "llama"
    kvs = [gf.raw_kv_str("general.architecture", a), gf.raw_kv_u32(f"{a}.block_count", 1),
           gf.raw_kv_u32(f"{a}.embedding_length", 32), gf.raw_kv_u32(f"{a}.context_length", 64),
           gf.raw_kv_u32(f"{a}.attention.head_count", 4),
           gf.raw_kv_u32(f"{a}.feed_forward_length", 64)]  # fmt: skip
    infos: list[bytes] = []
    if kind == "gguf-keys":
        n = rng.choice((10_000, 100_000, 300_000))
        kvs += [gf.raw_kv(f"k{i}", 0, b"\x01") for i in range(n)]
        ops.append(f"GGUF with {n} more metadata keys")
    else:
        n = rng.choice((1000, 10_000, 20_000))
        infos = [gf.raw_tensor_info(f"x.{i}", (1,), 0, 32 * i) for i in range(n)]
        ops.append(f"GGUF with {n} one-element tensors")
    data = gf.raw_gguf(kvs, infos, data=b"\0" * (32 * len(infos)))
    verb = "quant" if kind == "gguf-keys" and rng.random() < 0.3 else "fit"
    return "model.gguf", data, [verb, "{input}", "--gpus", "cpu"]


# -- dcgm --------------------------------------------------------------------------------------


class InvariantBroken(Exception):
    """A property that must hold whatever the input (a crash to the oracle)."""


def check_dcgm(text: str) -> Any:
    """Parse a dcgm-exporter page; a GPU with total memory 0 must have a page that says 0."""
    from lltui.core.monitor.models import SourceUnavailable
    from lltui.core.monitor.prom_import import rigs_from_series
    from lltui.sources.gpu.prom import parse_exposition

    try:
        series = parse_exposition(text)
    except SourceUnavailable:
        return None
    rigs = rigs_from_series(series, source="scrape:x", default_host="h", seq=1, t=0, wall=0)
    zero = re.search(r"^DCGM_FI_DEV_FB_\w+(\{[^}]*\})?\s+[-+]?0*\.?0*(e[-+]?\d+)?\s*$", text, re.M)
    for rig in rigs.values():
        for g in rig.gpus:
            if g.info.memory_total == 0 and not zero:
                raise InvariantBroken("memory_total 0 though the page gives no 0 reading")
    return rigs


def _dcgm_case(rng: random.Random, ops: list[str]) -> bytes:
    from support.fuzz_inputs import mutate_text

    names = ["dcgm-exporter-metriccontract.prom", "dcgm-exporter-readme.prom"]
    name = rng.choice(names)
    text = (FIXTURES / "prom" / name).read_text()
    ops.append(f"seed {name}")
    lines = text.splitlines()
    drop = rng.choice(("fb", "fb-total", "fb-used", "none", "random"))
    if drop == "fb":
        lines = [ln for ln in lines if "DCGM_FI_DEV_FB_" not in ln]
    elif drop in ("fb-total", "fb-used"):
        key = "FB_TOTAL" if drop == "fb-total" else "FB_USED"
        lines = [ln for ln in lines if key not in ln]
    elif drop == "random":
        lines = [ln for ln in lines if rng.random() < 0.7]
    ops.append(f"dropped {drop}")
    text = "\n".join(lines) + "\n"
    if rng.random() < 0.5:
        return mutate_text(rng, text, ops)
    return text.encode()


# -- making a case -----------------------------------------------------------------------------


def make_class_case(seeds: Any, target: str, rng: random.Random, ops: list[str]) -> Any:
    from support.fuzz_inputs import ARCHS, INPUT, Case, base_kv, tiny_spec, write_gguf

    if target == "net":
        arch = rng.choice(ARCHS)
        data = seeds.gguf(arch, "F16").data
        how = rng.choice(BEHAVIOURS)
        verb = "quant" if rng.random() < 0.2 else "fit"
        ops.append(f"seed tiny {arch} F16 served by a server that does {how!r}")
        argv = [verb, f"{SERVER}/{how}/{rng.randrange(1 << 30)}.gguf", "--gpus", "cpu", "--json"]
        return Case(target, "model.gguf", data, argv, extra={"net": True}, ops=ops)
    if target == "inject":
        if rng.random() < 0.7:
            arch = rng.choice(ARCHS)
            spec = tiny_spec(arch)
            kv = base_kv(spec)
            import gguf

            for key in rng.sample(STRING_KEYS, rng.randint(1, 3)):
                kv[key] = (hostile(rng), gguf.GGUFValueType.STRING, None)
                ops.append(f"{key} = {kv[key][0]!r}")
            path = seeds.workdir / f"inject-{rng.randrange(1 << 40)}.gguf"
            try:
                write_gguf(path, spec, kv)
                data = path.read_bytes()
            finally:
                path.unlink(missing_ok=True)
            verb = rng.choice(("fit", "fit", "quant"))
            gpus = rng.choice(("cpu", "1MiB", "24GiB,24GiB"))
            argv = [verb, INPUT, "--gpus", gpus]
            return Case(target, "model.gguf", data, argv, extra={"text": True}, ops=ops)
        name, text, _ = rng.choice(seeds.text("replay"))
        ops.append(f"seed {name}, names, users, hosts and commands made hostile")
        data = _poison_recording(text, rng).encode()
        argv = ["gpus", "--source", "replay:" + INPUT]
        return Case(target, "input.jsonl", data, argv, extra={"text": True}, ops=ops)
    if target == "scale":
        name, data, argv = _scale_case(rng, ops)
        return Case(target, name, data, argv, ops=ops)
    if target == "record":
        name, text, _ = rng.choice(seeds.text("replay"))
        secrets: list[str] = []
        data = _poison_recording(text, rng, secrets).encode()
        ops.append(f"seed {name}, every command line with secrets")
        argv = ["--source", "replay:" + INPUT, "--record", INPUT + ".out", "gpus", "--json"]
        return Case(target, "input.jsonl", data, argv, extra={"secrets": secrets}, ops=ops)
    if target == "dcgm":
        data = _dcgm_case(rng, ops)
        return Case(target, "input.txt", data, parser="dcgm", ops=ops)
    if target == "hooks":
        return _hooks_case(seeds, rng, ops)
    raise ValueError(f"unknown target {target!r}")


# -- hooks -------------------------------------------------------------------------------------

HOOK_MARK = "LLTUI_FUZZ_HOOK_MARK"  # in the environment of the case, so of every hook process
HOOK_SCRIPTS = (
    "exit 0",
    "exit 7",
    "sleep 30 & exit 0",  # leaves a child behind
    "sleep 30 & sleep 30",
    "trap '' TERM; sleep 30",  # ignores SIGTERM
    "(trap '' TERM; exec sleep 30) & sleep 30",
    "kill -STOP $$",  # stops itself: only SIGKILL ends it
    'printf %s "$LLTUI_ALERT_JSON" > /dev/null',
)
HOOK_PROGRAMS = ("true", "false", "/nonexistent/hook", "", "./relative hook", "/", "/dev/null")
HOOK_TIMEOUTS = ("0.3", "1", "2", "nan", "inf", "-inf", "-1", "0", "1e308", '"10"', "true",
                 "3601", "[1]", "0.000001", "18446744073709551616")  # fmt: skip


def _hook_word(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.3:
        return hostile(rng)
    if r < 0.4:
        return "x" * rng.choice((1000, 100_000))
    if r < 0.55:
        return rng.choice(("\0", "a\0b", "\x1b[2J", "\n", "$(id)", "`id`", "-c", "--", "é"))
    return rng.choice(("hi", "lltui", "30", "inf", "-1", "1e9"))


def _hook_argv(rng: random.Random) -> list[Any]:
    r = rng.random()
    if r < 0.5:
        argv: list[Any] = ["sh", "-c", rng.choice(HOOK_SCRIPTS)]
    elif r < 0.65:
        argv = ["sleep", rng.choice(("30", "inf", "-1", "1e9", "0.01", "x"))]
    elif r < 0.85:
        argv = [rng.choice(HOOK_PROGRAMS)]
    else:
        argv = [_hook_word(rng)]
    argv += [_hook_word(rng) for _ in range(rng.choice((0, 0, 1, 3)))]
    if rng.random() < 0.05:
        argv = rng.choice(([], [1, 2], [["sh"]], [None], [True]))  # not words at all
    return argv


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # JSON string escapes are TOML's (a lone surrogate is not)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return '""'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def _hooks_case(seeds: Any, rng: random.Random, ops: list[str]) -> Any:
    from lltui.core.monitor.alert_settings import KINDS
    from support.alert_rig import CONFIG, write_alert_recording
    from support.fuzz_inputs import INPUT, Case

    recording = seeds.workdir / "hooks-alerts.jsonl"
    if not recording.exists():
        write_alert_recording(recording)
    lines = [CONFIG.rstrip("\n")]
    if rng.random() < 0.8:
        argv = _hook_argv(rng)
        lines.append(f"hook = {_toml_value(argv) if rng.random() < 0.95 else repr(str(argv))}")
        ops.append(f"hook = {argv!r}"[:300])
    timeout = rng.choice(HOOK_TIMEOUTS[:3]) if rng.random() < 0.6 else rng.choice(HOOK_TIMEOUTS)
    lines.append(f"hook_timeout_s = {timeout}")
    ops.append(f"hook_timeout_s = {timeout}")
    per_kind = rng.sample(list(KINDS), rng.randint(0, 3))
    if rng.random() < 0.1:
        per_kind.append(hostile(rng))
    if per_kind:
        lines.append("[alerts.hooks]")
        for kind in per_kind:
            argv = _hook_argv(rng)
            lines.append(f"{json.dumps(kind)} = {_toml_value(argv)}")
            ops.append(f"hooks.{kind!r} = {argv!r}"[:300])
    data = ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")
    mark = f"lltui-fuzz-hooks-{rng.randrange(1 << 62)}"
    argv = ["--config", INPUT, "watch", "--source", f"replay:{recording}", "--replay-step"]
    argv += ["--interval", "0.01"]  # text: what a hook's failure prints is judged too
    extra = {"text": True, "env": {HOOK_MARK: mark}, "hooks": mark}
    return Case("hooks", "config.toml", data, argv, extra=extra, ops=ops)


def _hook_processes(mark: str) -> list[int]:
    """Processes (but this one) whose environment holds the case's mark: a hook's, or one
    a hook started; a zombie no longer counts."""
    import os

    needle = f"{HOOK_MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes():
                continue
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def judge_hooks(mark: str, wait_s: float = 2.0) -> dict[str, Any] | None:
    """A failure when a hook's process outlived ``lltui watch`` (a SIGKILL just sent may
    take a moment to land: looked at again for ``wait_s``)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        left = _hook_processes(mark)
        if not left:
            return None
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    cmdlines = []
    for pid in left[:3]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        cmdlines.append(cmd.decode("utf-8", "replace")[:80])
    return {"status": "orphan", "message": f"{len(left)} hook processes outlived lltui: {cmdlines}"}


def run_net(argv: list[str], data: bytes) -> tuple[list[str], dict[str, str]]:
    """The argv with the server's URL, and the environment a net case runs under."""
    url = server_url(data)
    return [a.replace(SERVER, url) for a in argv], {"LLTUI_NET_DEADLINE": NET_DEADLINE_S}
