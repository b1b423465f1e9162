"""Find llama-server and learn what it can do before composing a command line for it.

Where it looks, in order: ``$LLTUI_LLAMA_SERVER`` (a path; when set it must work), ``PATH``,
then lltui's own builds in the user cache (CUDA first, then CPU). The tools that go with a
server (``ggml-rpc-server``, ``llama-fit-params``, ``llama-quantize``, ``llama-bench``) are looked
for next to it.

Flags change between llama.cpp builds (``--no-mmap`` and ``--mlock`` are gone from recent
ones), so :func:`probe` runs ``--version`` and ``--help`` once per binary and remembers the
answer by path, size and mtime, in memory and in a small JSON file in the user cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lltui.core.llamalog.models import DeviceSeen
from lltui.core.llamalog.reader import parse_list_devices
from lltui.core.text import is_digits
from lltui.paths import cache_dir
from lltui.sources.llama import build_cache

ENV_VAR = "LLTUI_LLAMA_SERVER"
SERVER = "llama-server"
# Tool role -> binary names, newest first (the RPC server was renamed ggml-rpc-server).
TOOL_NAMES: dict[str, tuple[str, ...]] = {
    "llama-server": ("llama-server",),
    "rpc-server": ("ggml-rpc-server", "rpc-server", "llama-rpc-server"),
    "llama-fit-params": ("llama-fit-params",),
    "llama-quantize": ("llama-quantize",),
    "llama-bench": ("llama-bench",),
}
PROBE_CACHE_NAME = "llama-server-probes.json"
PROBE_FORMAT = 1
PROBE_TIMEOUT_S = 30.0


class LlamaBinaryError(Exception):
    """No usable llama-server, or it does not answer. ``str()`` is one actionable line."""


@dataclass(frozen=True, slots=True)
class LlamaBinary:
    """A llama-server found on this machine and its sibling tools (None where absent)."""

    path: Path
    origin: str  # "env", "path", "cache:cuda" or "cache:cpu"
    tools: Mapping[str, Path | None] = field(default_factory=dict)

    def tool(self, role: str) -> Path | None:
        return self.tools.get(role)

    @property
    def version(self) -> str | None:
        """The ``--version`` text (probed once per binary, see :func:`probe`); None if unknown."""
        try:
            probed = probe(self.path)
        except LlamaBinaryError:
            return None
        return probed.version.text if probed.version is not None else None


@dataclass(frozen=True, slots=True)
class LlamaVersion:
    """``--version`` output: ``version: 0.6.0-dev (build 0, commit unknown)`` or ``4567 (abc)``."""

    text: str
    version: str | None = None
    build: int | None = None
    commit: str | None = None
    compiler: str | None = None
    target: str | None = None


@dataclass(frozen=True, slots=True)
class HelpInfo:
    """What ``--help`` lists: every flag spelling, and the env var of each where printed."""

    flags: frozenset[str]
    env_vars: tuple[tuple[str, str], ...] = ()  # (first spelling, LLAMA_ARG_...)


@dataclass(frozen=True, slots=True)
class ServerProbe:
    """What one llama-server binary is and accepts."""

    path: str
    size: int
    mtime_ns: int
    version: LlamaVersion | None
    flags: frozenset[str]
    env_vars: tuple[tuple[str, str], ...] = ()
    from_cache: bool = False

    def supports(self, flag: str) -> bool:
        """Whether this build accepts ``flag`` (any spelling: ``-ngl`` or ``--gpu-layers``)."""
        return flag.split("=", 1)[0] in self.flags


# --- finding -------------------------------------------------------------------------------


def _is_exe(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def sibling_tools(server: Path) -> dict[str, Path | None]:
    """The tools next to a llama-server binary (same directory)."""
    tools: dict[str, Path | None] = {}
    for role, names in TOOL_NAMES.items():
        tools[role] = next((server.parent / n for n in names if _is_exe(server.parent / n)), None)
    tools["llama-server"] = server
    return tools


def candidates(env: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """Where llama-server may be, in the order it is looked for."""
    env = os.environ if env is None else env
    found: list[tuple[str, Path]] = []
    explicit = env.get(ENV_VAR)
    if explicit:
        found.append(("env", Path(explicit).expanduser()))
    on_path = shutil.which(SERVER, path=env.get("PATH"))
    if on_path:
        found.append(("path", Path(on_path)))
    # a GPU build before the CPU one: CUDA, then AMD's ROCm, then Vulkan
    for cuda, backend in ((True, ""), (False, "rocm"), (False, "vulkan"), (False, "")):
        result = build_cache.installed(cuda=cuda, env=env, backend=backend)
        if result is not None:
            found.append((f"cache:{result.flavor}", result.binaries[SERVER]))
    return found


def find_llama_server(env: Mapping[str, str] | None = None) -> LlamaBinary:
    """The llama-server to use here, or :class:`LlamaBinaryError` saying where it looked."""
    env = os.environ if env is None else env
    explicit = env.get(ENV_VAR)
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_dir():
            path = path / SERVER
        if not _is_exe(path):
            raise LlamaBinaryError(f"${ENV_VAR} is {explicit!r}, which is not an executable file")
        return LlamaBinary(path=path, origin="env", tools=sibling_tools(path))
    for origin, path in candidates(env):
        if _is_exe(path):
            return LlamaBinary(path=path, origin=origin, tools=sibling_tools(path))
    cache = build_cache.flavor_root(False, env=env).parent
    raise LlamaBinaryError(
        f"no llama-server found (${ENV_VAR} unset, not on PATH, no build in {cache}); "
        f"run `{install_command()}` to build one"
    )


# where the NVIDIA driver lists the GPUs it drives (one folder each), and its device files
NVIDIA_PROC_GPUS = Path("/proc/driver/nvidia/gpus")
NVIDIA_DEVICE = Path("/dev/nvidia0")


def nvidia_gpu_present() -> bool:
    """Whether the NVIDIA driver drives a GPU here (read from the files it makes: no NVML
    needed, nothing loaded)."""
    try:
        if NVIDIA_PROC_GPUS.is_dir() and any(NVIDIA_PROC_GPUS.iterdir()):
            return True
    except OSError:
        pass
    return NVIDIA_DEVICE.exists()


def install_command() -> str:
    """How to build llama-server here: with CUDA where an NVIDIA GPU is present."""
    return "lltui llama install --cuda" if nvidia_gpu_present() else "lltui llama install"


# --- parsing --version and --help -------------------------------------------------------------

_VERSION = re.compile(
    r"version:\s*(?P<version>\S+)(?:\s+\((?:build\s+(?P<build>\d+),\s*commit\s+(?P<commit>[^)]+)"
    r"|(?P<commit2>[0-9a-fA-F]+|unknown))\))?"
)
_BUILT = re.compile(r"built with (?P<compiler>.+?) for (?P<target>.+?)\s*$", re.MULTILINE)


def parse_version(text: str) -> LlamaVersion | None:
    """The version lines of ``llama-server --version`` (printed on stderr)."""
    m = _VERSION.search(text)
    if not m:
        return None
    build = m.group("build")
    version = m.group("version")
    if build is None and is_digits(version):
        build = version  # older builds: "version: 4567 (abcdef0)"
    commit = m.group("commit") or m.group("commit2")
    b = _BUILT.search(text)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(("version:", "built"))]
    return LlamaVersion(
        text="; ".join(lines) or m.group(0),
        version=version,
        build=int(build) if build is not None else None,
        commit=commit.strip() if commit else None,
        compiler=b.group("compiler") if b else None,
        target=b.group("target") if b else None,
    )


_FLAG_TOKEN = re.compile(r"^(-{1,2}[A-Za-z0-9][\w-]*)")
_ENV = re.compile(r"\(env:\s*([A-Z0-9_]+)\)")


def parse_help(text: str) -> HelpInfo:
    """Flags in llama-server's ``--help``: lines that start with ``-``, spellings before the gap.

    ``-ngl,  --gpu-layers, --n-gpu-layers N   description`` gives all three spellings.
    """
    flags: set[str] = set()
    env_vars: list[tuple[str, str]] = []
    current: str | None = None
    for raw in text.splitlines():
        if raw.startswith("-") and not raw.startswith("----"):
            # The gap before the description is 2+ spaces not right after a comma.
            head = re.split(r"(?<![,\s])\s{2,}", raw.rstrip(), maxsplit=1)[0]
            spellings = []
            for part in head.split(","):
                m = _FLAG_TOKEN.match(part.strip())
                if m:
                    spellings.append(m.group(1))
            flags.update(spellings)
            current = spellings[0] if spellings else None
        if current and (e := _ENV.search(raw)):
            env_vars.append((current, e.group(1)))
            current = None
    return HelpInfo(flags=frozenset(flags), env_vars=tuple(env_vars))


# --- probing ----------------------------------------------------------------------------------

_memory_cache: dict[tuple[str, int, int], ServerProbe] = {}
_memory_lock = threading.Lock()


def default_probe_cache(env: Mapping[str, str] | None = None) -> Path:
    return cache_dir(env) / PROBE_CACHE_NAME


def _run(
    path: Path,
    args: list[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    said: str | None = None,  # the flag its errors name (else all of args)
) -> subprocess.CompletedProcess[str]:
    from lltui.sources.proc_group import run_group

    try:
        return run_group([str(path), *args], timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise LlamaBinaryError(
            f"{path} {said or ' '.join(args)} did not answer in {timeout_s:.0f} s"
        ) from None
    except OSError as exc:
        raise LlamaBinaryError(f"{path} cannot be run: {exc.strerror or exc}") from None


def _probe_to_json(p: ServerProbe) -> dict[str, Any]:
    return {
        "size": p.size,
        "mtime_ns": p.mtime_ns,
        "version": None if p.version is None else asdict(p.version),
        "flags": sorted(p.flags),
        "env_vars": [list(e) for e in p.env_vars],
    }


def _probe_from_json(path: str, obj: Any) -> ServerProbe | None:
    if not isinstance(obj, dict):
        return None
    try:
        v = obj.get("version")
        version = (
            LlamaVersion(
                text=str(v["text"]),
                version=v.get("version"),
                build=v.get("build"),
                commit=v.get("commit"),
                compiler=v.get("compiler"),
                target=v.get("target"),
            )
            if isinstance(v, dict)
            else None
        )
        flags = obj["flags"]
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            return None
        env_vars = tuple((str(a), str(b)) for a, b in obj.get("env_vars", []) if isinstance(a, str))
        return ServerProbe(
            path=path,
            size=int(obj["size"]),
            mtime_ns=int(obj["mtime_ns"]),
            version=version,
            flags=frozenset(flags),
            env_vars=env_vars,
            from_cache=True,
        )
    except (KeyError, TypeError, ValueError):
        return None


def _read_probe_file(cache_file: Path) -> dict[str, Any]:
    try:
        data = json.loads(cache_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != PROBE_FORMAT:
        return {}
    entries = data.get("binaries")
    return entries if isinstance(entries, dict) else {}


def _write_probe_file(cache_file: Path, key: str, probe: ServerProbe) -> None:
    entries = _read_probe_file(cache_file)
    entries[key] = _probe_to_json(probe)
    # Forget binaries that are gone so the file does not grow forever.
    entries = {k: v for k, v in entries.items() if os.path.exists(k)}
    with contextlib.suppress(OSError):
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache_file.with_name(f".{cache_file.name}.{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({"format": PROBE_FORMAT, "binaries": entries}, indent=1), encoding="utf-8"
        )
        os.replace(tmp, cache_file)


def probe(
    path: Path | str,
    *,
    cache_file: Path | None = None,
    use_cache: bool = True,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> ServerProbe:
    """Version and accepted flags of one llama-server, run at most once per (path, size, mtime)."""
    exe = Path(path)
    try:
        real = exe.resolve(strict=True)
        st = real.stat()
    except OSError as exc:
        raise LlamaBinaryError(f"{exe}: {exc.strerror or exc}") from None
    key = (str(real), st.st_size, st.st_mtime_ns)
    cache_path = cache_file if cache_file is not None else default_probe_cache()
    if use_cache:
        with _memory_lock:
            hit = _memory_cache.get(key)
        if hit is not None:
            return hit
        stored = _probe_from_json(str(real), _read_probe_file(cache_path).get(str(real)))
        if stored is not None and (stored.size, stored.mtime_ns) == (st.st_size, st.st_mtime_ns):
            with _memory_lock:
                _memory_cache[key] = stored
            return stored
    ver = _run(real, ["--version"], timeout_s)
    version = parse_version(ver.stderr + "\n" + ver.stdout)
    helped = _run(real, ["--help"], timeout_s)
    if helped.returncode != 0:
        last = (helped.stderr or helped.stdout).strip().splitlines()
        raise LlamaBinaryError(
            f"{real} --help exited {helped.returncode}: {last[-1] if last else 'no output'}"
        )
    info = parse_help(helped.stdout + "\n" + helped.stderr)
    if not info.flags:
        raise LlamaBinaryError(f"{real} --help lists no flags; is it llama-server?")
    result = ServerProbe(
        path=str(real),
        size=st.st_size,
        mtime_ns=st.st_mtime_ns,
        version=version,
        flags=info.flags,
        env_vars=info.env_vars,
    )
    with _memory_lock:
        _memory_cache[key] = result
    if use_cache:
        _write_probe_file(cache_path, str(real), result)
    return result


def list_devices(
    path: Path | str,
    *,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
) -> tuple[DeviceSeen, ...]:
    """The devices this llama-server sees now (``--list-devices``; never cached: free memory).

    ``extra_args`` such as ``--rpc HOST:PORT`` add devices that are not local.
    """
    exe = Path(path)
    proc = _run(exe, [*extra_args, "--list-devices"], timeout_s, env, "--list-devices")
    if proc.returncode != 0:
        last = (proc.stderr or proc.stdout).strip().splitlines()
        raise LlamaBinaryError(
            f"{exe} --list-devices exited {proc.returncode}: {last[-1] if last else 'no output'}"
        )
    if "Available devices" not in proc.stdout:
        raise LlamaBinaryError(f"{exe} --list-devices printed no device list")
    return parse_list_devices(proc.stdout)
