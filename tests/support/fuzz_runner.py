"""The fuzz oracle and the worker processes that apply it.

A case passes when it ends in a result or a domain error: exit code 0, 1 or 2, a one-line
message on stderr when the code is not 0, no "internal error" and no traceback, strict JSON
on stdout for ``--json`` (no NaN or Infinity), within ``timeout`` seconds and without the
process's peak memory growing by more than ``mem_mib``. Direct parser calls pass when they
return or raise their own domain error.

Cases run in a worker subprocess (``python tests/support/fuzz_runner.py``), in-process there for
speed: the parent sends one request per line on the worker's stdin and waits for its answer
with a deadline; a worker that does not answer in time is killed (the case is a hang) and a
fresh one is started. The worker runs with LLTUI_DEBUG=1, so an exception lltui would turn
into "internal error" reaches the oracle with its traceback. Its address space is limited
(RLIMIT_AS), so a runaway allocation is a MemoryError, not a dead machine.
"""

from __future__ import annotations

import base64
import contextlib
import faulthandler
import gzip
import hashlib
import io
import json
import os
import re
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
CORPUS = TESTS / "fuzz_corpus"

OK_STATUSES = ("ok", "domain")
DEFAULT_TIMEOUT = 5.0
DEFAULT_MEM_MIB = 512

# -- the oracle (runs in the worker) ------------------------------------------------------------


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_mib(field: str) -> float:
    """VmRSS or VmHWM (the peak since the last reset) of this process, in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def _reset_peak() -> bool:
    """Start VmHWM again from the current RSS (Linux 4.0+); False where that is refused."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _reject_constant(word: str) -> Any:
    raise ValueError(f"{word} in JSON output")


def _where(tb: Any) -> str:
    """The innermost frame of the traceback inside lltui/ (else the innermost one)."""
    frames = traceback.extract_tb(tb)
    inside = [f for f in frames if f"{os.sep}lltui{os.sep}" in f.filename]
    f = (inside or frames)[-1] if frames else None
    if f is None:
        return "?"
    name = f.filename
    if f"{os.sep}lltui{os.sep}" in name:
        name = "lltui" + name.rsplit(f"{os.sep}lltui", 1)[1]
    return f"{name}:{f.lineno} in {f.name}"


def _crash(status: str, exc: BaseException) -> dict[str, Any]:
    return {
        "status": status,
        "exc": f"{type(exc).__name__}: {str(exc)[:300]}",
        "exc_type": type(exc).__name__,
        "where": _where(exc.__traceback__),
        "traceback": "".join(traceback.format_exception(exc))[-4000:],
    }


def run_case(case: Any, workdir: Path) -> dict[str, Any]:
    """Run one case in this process and judge it (the timeout is the parent's job)."""
    from support.fuzz_inputs import INPUT
    from support.fuzz_targets import PARSERS, cli_main, domain_errors

    path = workdir / case.name
    path.write_bytes(case.data)
    t0 = time.perf_counter()
    res: dict[str, Any]
    try:
        if case.parser:
            text = case.data.decode("utf-8", "replace")
            try:
                PARSERS[case.parser](text, **case.extra)
                res = {"status": "ok"}
            except domain_errors(case.parser) as exc:
                res = {"status": "domain", "message": str(exc)[:300]}
            except MemoryError as exc:
                res = _crash("memory", exc)
            except RecursionError as exc:
                res = _crash("crash", exc)
            except Exception as exc:
                res = _crash("crash", exc)
        else:
            from support import fuzz_classes

            argv = [a.replace(INPUT, str(path)) for a in case.argv]
            env: dict[str, str] = {}
            if case.extra.get("net"):
                argv, env = fuzz_classes.run_net(argv, case.data)
            env |= case.extra.get("env", {})
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            out, err = io.StringIO(), io.StringIO()
            rc: Any = None
            exc_res: dict[str, Any] | None = None
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    try:
                        rc = cli_main(argv)
                    except SystemExit as exc:
                        rc = exc.code
                    except MemoryError as exc:
                        exc_res = _crash("memory", exc)
                    except Exception as exc:
                        exc_res = _crash("crash", exc)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            res = exc_res or _judge_cli(rc, out.getvalue(), err.getvalue(), argv)
            if res["status"] in OK_STATUSES and case.extra.get("text"):
                res = fuzz_classes.judge_text(out.getvalue(), err.getvalue()) or res
            if res["status"] in OK_STATUSES and case.extra.get("hooks"):
                res = fuzz_classes.judge_hooks(case.extra["hooks"]) or res
            if res["status"] in OK_STATUSES and case.extra.get("secrets") is not None:
                recorded = Path(str(path) + ".out")
                res = fuzz_classes.judge_record(recorded, case.extra["secrets"]) or res
                recorded.unlink(missing_ok=True)
            res["stderr"] = err.getvalue()[-600:]
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    res["secs"] = round(time.perf_counter() - t0, 4)
    return res


def _judge_cli(rc: Any, out: str, err: str, argv: list[str]) -> dict[str, Any]:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if "internal error" in err or "Traceback" in err:
        return {"status": "crash", "exc": lines[-1] if lines else err[:300], "where": "?"}
    if rc not in (0, 1, 2):
        return {"status": "bad-exit", "rc": rc, "message": err[:300]}
    if rc != 0:
        if len(lines) != 1:
            return {"status": "bad-stderr", "rc": rc, "message": err[:300]}
        return {"status": "domain", "rc": rc, "message": lines[0][:300]}
    # --json may have been eaten as the value of a flag before it: check what is JSON
    if "--json" in argv and out.lstrip()[:1] in ("{", "["):
        try:
            json.loads(out, parse_constant=_reject_constant)
        except ValueError as exc:
            return {"status": "bad-json", "rc": 0, "message": str(exc)[:300]}
    return {"status": "ok", "rc": 0}


def signature(target: str, res: dict[str, Any]) -> str:
    """What makes two failures the same bug: status, exception type, lltui frame, or the
    shape of the message (digits and quoted values blanked)."""
    status = res["status"]
    if status == "hang":
        where = re.sub(r":\d+ in ", " in ", res.get("where") or "?")
        return f"hang|{where}" if where != "?" else f"{target}|hang"
    if res.get("where") and res["where"] != "?":
        where = re.sub(r":\d+ in ", " in ", res["where"])
        return f"{status}|{res.get('exc_type', '')}|{where}"
    msg = res.get("exc") or res.get("message") or ""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", msg)
    msg = re.sub(r"\d+(\.\d+)?", "N", msg)
    return f"{target}|{status}|{msg[:120]}"


def _worker_main() -> None:
    """Answer requests on stdin, one JSON line each, on the original stdout."""
    sys.path.insert(0, str(TESTS))
    sys.path.insert(0, str(ROOT))
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # what lltui writes to the fd itself goes nowhere
    os.dup2(devnull, 2)
    os.environ["LLTUI_DEBUG"] = "1"
    from support import (
        fuzz_inputs,
        fuzz_targets,  # noqa: F401  (imports lltui before the baseline is taken)
    )

    workdir = Path(tempfile.mkdtemp(prefix="lltui-fuzz-"))
    os.environ["XDG_CONFIG_HOME"] = str(workdir / "config")
    for var in ("LLTUI_CONFIG", "LLTUI_INTERVAL", "LLTUI_THEME", "LLTUI_SOURCE"):
        os.environ.pop(var, None)
    seeds = fuzz_inputs.Seeds(workdir)
    mem_mib = float(os.environ.get("LLTUI_FUZZ_MEM_MIB", DEFAULT_MEM_MIB))
    hang_path = os.environ.get("LLTUI_FUZZ_HANG_FILE")
    hang_file = open(hang_path, "w+") if hang_path else None  # noqa: SIM115
    hang_after = max(0.5, float(os.environ.get("LLTUI_FUZZ_TIMEOUT", DEFAULT_TIMEOUT)) - 0.5)
    # warm up: seed files and one case of each kind, so the baseline includes them
    for target in fuzz_inputs.TARGETS:
        with contextlib.suppress(Exception):
            run_case(fuzz_inputs.make_case(seeds, target, 0, 0), workdir)
    baseline = _maxrss_mib()
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * resource.getpagesize()
    limit = vm_bytes + int(mem_mib * 4) * 1024 * 1024
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        proto.write(json.dumps({"ready": True, "baseline_mib": baseline}) + "\n")
        for line in sys.stdin:
            req = json.loads(line)
            case = None
            try:
                if req["op"] == "gen":
                    case = fuzz_inputs.make_case(seeds, req["target"], req["seed"], req["index"])
                else:
                    data = base64.b64decode(req["data"])
                    case = fuzz_inputs.Case.from_json(req["case"], data)
                if req.get("rebuild"):  # a gguf-kv case cut down: write it from its edits
                    ex = case.extra
                    case.data = fuzz_inputs.gguf_kv_bytes(
                        workdir, ex["arch"], ex["wtype"], ex["edits"]
                    )
                before = _maxrss_mib()
                per_case = _reset_peak()
                rss0 = _status_mib("VmRSS")
                if hang_file is not None:  # where it was, should the parent give up on it
                    hang_file.seek(0)
                    hang_file.truncate()
                    faulthandler.dump_traceback_later(hang_after, file=hang_file)
                res = run_case(case, workdir)
                faulthandler.cancel_dump_traceback_later()
                res["rss_step_mib"] = round(_maxrss_mib() - before, 1)
                if per_case:  # this case's own peak, whatever the process did before it
                    res["case_peak_mib"] = round(_status_mib("VmHWM") - rss0, 1)
            except Exception as exc:  # the generator itself failed: say so, never hide it
                res = _crash("generator", exc)
            growth = _maxrss_mib() - baseline
            res["rss_growth_mib"] = round(growth, 1)
            # the case's own peak where Linux can reset it, else the rise of the process's
            case_mib = res.get("case_peak_mib", res.get("rss_step_mib", 0.0))
            restart = res["status"] == "memory" or growth > 4 * mem_mib
            if case_mib > mem_mib and res["status"] in OK_STATUSES:
                res["status"] = "memory"
                res["exc"] = f"the case's peak memory was {case_mib:.0f} MiB (limit {mem_mib:.0f})"
                restart = True
            if case is not None and (res["status"] not in OK_STATUSES or req.get("want_case")):
                res["case"] = case.to_json()
                res["data"] = base64.b64encode(case.data).decode()
            proto.write(json.dumps(res) + "\n")
            if restart:
                break
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# -- the parent side ---------------------------------------------------------------------------


class Worker:
    """A worker subprocess with a deadline on every answer."""

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, mem_mib: float = DEFAULT_MEM_MIB) -> None:
        self.timeout = timeout
        self.mem_mib = mem_mib
        self.proc: subprocess.Popen[str] | None = None
        self.baseline_mib = 0.0
        self._buf = b""
        fd, self._hang_path = tempfile.mkstemp(prefix="lltui-fuzz-hang-", suffix=".txt")
        os.close(fd)

    def _start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(TESTS), env.get("PYTHONPATH", "")])
        env["LLTUI_FUZZ_MEM_MIB"] = str(self.mem_mib)
        env["LLTUI_FUZZ_TIMEOUT"] = str(self.timeout)
        env["LLTUI_FUZZ_HANG_FILE"] = self._hang_path
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(ROOT),
        )
        self._buf = b""
        hello = self._read_line(120.0)
        if hello is None:
            self.close()
            raise RuntimeError("the fuzz worker did not start")
        self.baseline_mib = json.loads(hello)["baseline_mib"]

    def _read_line(self, timeout: float) -> str | None:
        assert self.proc is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def request(self, req: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        assert self.proc is not None and self.proc.stdin is not None
        t0 = time.monotonic()
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            self.close()
            return {"status": "worker-died", "exc": "the worker went away"}
        line = self._read_line(self.timeout if timeout is None else timeout)
        if line is None:
            died = self.proc.poll() is not None
            self.close()
            if died:
                return {"status": "crash", "exc": "the worker process died (signal or abort)"}
            res = {"status": "hang", "secs": round(time.monotonic() - t0, 2)}
            res.update(_hang_where(self._hang_path))
            return res
        res = json.loads(line)
        if self.proc.poll() is None and res.get("status") == "memory":
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        return res

    def close(self, final: bool = False) -> None:
        if final:
            with contextlib.suppress(OSError):
                os.unlink(self._hang_path)
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(Exception):
                    stream.close()  # type: ignore[union-attr]
            self.proc = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(final=True)


def _hang_where(path: str) -> dict[str, Any]:
    """The innermost lltui frame of the stack faulthandler wrote before the deadline."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', text)
    inside = [f for f in frames if f"{os.sep}lltui{os.sep}" in f[0]]
    if not inside:
        return {"traceback": text[-3000:]} if text else {}
    # faulthandler lists the most recent call first; a generator expression is named by
    # the function it runs in
    named = [f for f in inside if not f[2].startswith("<")]
    name, line, func = (named or inside)[0]
    name = "lltui" + name.rsplit(f"{os.sep}lltui", 1)[1]
    return {"where": f"{name}:{line} in {func}", "traceback": text[-3000:]}


def gen(worker: Worker, target: str, seed: int, index: int, **kw: Any) -> dict[str, Any]:
    res = worker.request({"op": "gen", "target": target, "seed": seed, "index": index, **kw})
    return res


def run_given(
    worker: Worker,
    case: dict[str, Any],
    data: bytes,
    *,
    rebuild: bool = False,
    timeout: float | None = None,
) -> dict[str, Any]:
    req = {"op": "run", "case": case, "data": base64.b64encode(data).decode(), "rebuild": rebuild}
    return worker.request(req, timeout)


# -- reduction ---------------------------------------------------------------------------------


@dataclass
class Reduced:
    case: dict[str, Any]
    data: bytes
    result: dict[str, Any]
    tries: int = 0
    notes: list[str] = field(default_factory=list)


def reduce_case(
    worker: Worker,
    case: dict[str, Any],
    data: bytes,
    result: dict[str, Any],
    *,
    budget_s: float = 60.0,
) -> Reduced:
    """Cut a failing case down while it fails the same way: input lines, then characters
    (text), llama-server flags (argv), key/value edits (gguf-kv)."""
    target = case["target"]
    want = signature(target, result)
    best = Reduced(dict(case), data, result)
    deadline = time.monotonic() + budget_s
    hang = result["status"] == "hang"
    timeout = worker.timeout

    def fails(c: dict[str, Any], d: bytes, rebuild: bool = False) -> dict[str, Any] | None:
        if time.monotonic() > deadline:
            return None
        best.tries += 1
        r = run_given(worker, c, d, rebuild=rebuild, timeout=timeout)
        return r if r["status"] not in OK_STATUSES and signature(target, r) == want else None

    # key/value edits of a gguf-kv case
    if target == "gguf-kv" and case.get("extra", {}).get("edits"):
        edits = list(case["extra"]["edits"])
        i = 0
        while i < len(edits) and len(edits) > 1:
            trial = edits[:i] + edits[i + 1 :]
            c = dict(best.case, extra={**best.case["extra"], "edits": trial})
            if (r := fails(c, b"", rebuild=True)) is not None:
                edits = trial
                best.case, best.data, best.result = c, base64.b64decode(r["data"]), r
            else:
                i += 1
    # argv: drop llama-server flags (with their value) one at a time
    argv = list(best.case.get("argv") or [])
    if argv and target in ("flags", "gguf-kv"):
        i = 2
        while i < len(argv):
            for n in (2, 1):
                trial = argv[:i] + argv[i + n :]
                if len(trial) < 2 or _own_options(trial) != _own_options(argv):
                    continue
                c = dict(best.case, argv=trial)
                if (r := fails(c, best.data)) is not None:
                    argv = trial
                    best.case, best.result = c, r
                    break
            else:
                i += 1
    # text: ddmin on lines, then on characters of small inputs
    if best.case.get("name", "").endswith(".txt") and not hang:
        best.data = _ddmin(best, fails, unit="line")
        if len(best.data) <= 400_000:
            best.data = _ddmin(best, fails, unit="char")
    return best


def _own_options(argv: list[str]) -> tuple[bool, bool]:
    """What must survive a cut: --json, and --gpus with a value (not the local machine)."""
    has_gpus = any(a == "--gpus" and i + 1 < len(argv) for i, a in enumerate(argv))
    return "--json" in argv, has_gpus


def _ddmin(best: Reduced, fails: Any, unit: str) -> bytes:
    data = best.data
    parts: list[bytes] = (
        data.splitlines(keepends=True) if unit == "line" else [bytes([b]) for b in data]
    )
    n = 2
    while len(parts) >= 2:
        chunk = max(1, len(parts) // n)
        reduced = False
        for start in range(0, len(parts), chunk):
            trial = parts[:start] + parts[start + chunk :]
            r = fails(best.case, b"".join(trial))
            if r is not None:
                parts, best.result = trial, r
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(parts), n * 2)
    return b"".join(parts)


# -- the corpus --------------------------------------------------------------------------------

_EXT = {
    "gguf-bytes": ".gguf",
    "gguf-kv": ".gguf",
    "flags": ".gguf",
    "replay": ".jsonl",
    "net": ".gguf",
    "record": ".jsonl",
    "calib-store": ".json",
    "hooks": ".toml",
}


def corpus_entries(directory: Path = CORPUS) -> list[Path]:
    """The note (.json) of every saved input."""
    return sorted(directory.glob("*.json")) if directory.is_dir() else []


def load_entry(note_path: Path) -> tuple[dict[str, Any], bytes]:
    note = json.loads(note_path.read_text())
    data = (note_path.parent / note["input"]).read_bytes()
    if note["input"].endswith(".gz"):
        data = gzip.decompress(data)
    return note, data


def save_entry(
    case: dict[str, Any],
    data: bytes,
    result: dict[str, Any],
    *,
    seed: int | None,
    index: int | None,
    directory: Path = CORPUS,
    xfail: str | None = None,
) -> Path:
    """Keep a failing input: the bytes in a file and a note on what failed and how to run it."""
    directory.mkdir(parents=True, exist_ok=True)
    target = case["target"]
    digest = hashlib.sha1(data + json.dumps(case.get("argv")).encode()).hexdigest()[:10]
    stem = f"{target}-{digest}"
    ext = _EXT.get(target, ".txt")
    if ext == ".gguf":  # tiny models of zero weights: kept compressed
        ext += ".gz"
        (directory / (stem + ext)).write_bytes(gzip.compress(data, 9, mtime=0))
    else:
        (directory / (stem + ext)).write_bytes(data)
    note = {
        "input": stem + ext,
        "case": {k: v for k, v in case.items() if k != "name"} | {"name": case["name"]},
        "seed": seed,
        "index": index,
        "failure": {
            k: result.get(k)
            for k in ("status", "exc", "where", "message", "rc", "secs")
            if result.get(k) is not None
        },
        "signature": signature(target, result),
        "xfail": xfail,
        "reproduce": reproduce_line(case, stem + ext),
    }
    path = directory / (stem + ".json")
    path.write_text(json.dumps(note, indent=2, ensure_ascii=True) + "\n")
    return path


def reproduce_line(case: dict[str, Any], input_name: str) -> str:
    path = f"tests/fuzz_corpus/{input_name}"
    prefix = ""
    if path.endswith(".gz"):
        prefix = f"gunzip -k {path} && "
        path = path[: -len(".gz")]
    if case.get("parser"):
        extra = case.get("extra") or {}
        args = "".join(f", {k}={v!r}" for k, v in extra.items())
        read = f"open({path!r}, encoding='utf-8', errors='replace').read()"
        return f"fuzz_targets.PARSERS[{case['parser']!r}]({read}{args})"
    from shlex import quote

    argv = [a.replace("{input}", path) for a in case.get("argv") or []]
    return prefix + "lltui " + " ".join(quote(a) for a in argv)


if __name__ == "__main__":
    _worker_main()
