"""llama.cpp's own dry run, ``llama-fit-params --fit-print on``, as a second opinion for fit.

It loads the model with no allocations on the real backends of this machine and prints, per
device and for the host, the model, context and compute MiB it would allocate (integers).
Its rules differ from llama-server's in two known ways (research/llama-server.md): it sizes
compute for n_batch outputs and host weights as if not mapped; it also refuses
``--kv-unified``. The caller compares it with an estimate made under the same rules.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lltui.core.cmdline.args import LlamaArgs, spell
from lltui.core.cmdline.flag_table import BY_KEY

TIMEOUT_S = 120.0
ENV_VAR = "LLTUI_LLAMA_FIT_PARAMS"
# llama-server flags llama-fit-params does not take
# settings llama-fit-params refuses (it has no unified KV cache)
# memory flags llama-fit-params refuses, or that name files it does not count (the oracle is
# compared with the model alone)
_SERVER_ONLY = frozenset(
    {
        "kv_unified",
        "kv_unified_per_slot",
        "embedding",
        "pooling",
        "reranking",
        "draft_model",
        "draft_hf_repo",
        "spec_types",
        "spec_draft_n_max",
        "draft_n_gpu_layers",
        "draft_devices",
        "draft_type_k",
        "draft_type_v",
        "draft_overrides",
        "draft_cpu_moe",
        "draft_n_cpu_moe",
        "mmproj",
        "mmproj_device",
        "mmproj_offload",
        "lora",
        "lora_scaled",
    }
)


class OracleError(Exception):
    """llama-fit-params is missing or failed; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class OracleRow:
    """One ``--fit-print`` line: a device (``CUDA0``, ``RPC1``) or ``Host``, in MiB."""

    name: str
    model_mib: int
    context_mib: int
    compute_mib: int


@dataclass(frozen=True, slots=True)
class OracleResult:
    path: str
    argv: tuple[str, ...]
    rows: tuple[OracleRow, ...]


def find_fit_params() -> Path | None:
    """``$LLTUI_LLAMA_FIT_PARAMS``, the one next to the llama-server lltui finds, or PATH."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env) if os.access(env, os.X_OK) else None
    try:
        from lltui.sources.llama.binary import LlamaBinaryError, find_llama_server

        try:
            tool = find_llama_server().tool("llama-fit-params")
        except LlamaBinaryError:
            tool = None
        if tool is not None:
            return tool
    except ImportError:  # a trimmed install without the launcher parts
        pass
    found = shutil.which("llama-fit-params")
    return Path(found) if found else None


def oracle_args(args: LlamaArgs) -> list[str]:
    """The memory flags of ``args`` as given, those llama-fit-params accepts, and the slots
    llama-server would make when none were given (llama-fit-params' own default is one)."""
    out: list[str] = []
    for g in args.given_args:
        if g.key is None or g.key in _SERVER_ONLY or not BY_KEY[g.key].memory:
            continue
        out += g.tokens
    if "n_parallel" not in args.given:
        out += spell("n_parallel", args.n_parallel_resolved)
    return out


def parse_fit_print(text: str) -> tuple[OracleRow, ...]:
    """Rows of ``--fit-print on`` stdout; lines that are not ``NAME int int int`` are skipped."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        try:
            model, ctx, comp = (int(x) for x in parts[1:])
        except ValueError:
            continue
        rows.append(OracleRow(parts[0], model, ctx, comp))
    return tuple(rows)


def run_oracle(
    model: str,
    args: LlamaArgs,
    *,
    binary: Path | None = None,
    timeout_s: float = TIMEOUT_S,
) -> OracleResult:
    """Run llama-fit-params with the same memory flags; OracleError on any failure."""
    from lltui.core.gguf.refs import is_remote_ref

    if is_remote_ref(model):
        raise OracleError("llama-fit-params reads the whole file: download the model first")
    exe = binary or find_fit_params()
    if exe is None:
        from lltui.sources.llama.binary import install_command

        raise OracleError(
            f"llama-fit-params not found (run `{install_command()}`, put it on PATH, "
            f"or set {ENV_VAR})"
        )
    from lltui.core.llama.limits import first_split_part

    part1 = first_split_part(model)  # (it refuses a later part)
    argv = [str(exe), "-m", part1, *oracle_args(args), "--fit", "off", "--fit-print", "on"]
    from lltui.sources.proc_group import run_group

    try:
        proc = run_group(argv, timeout_s)
    except subprocess.TimeoutExpired:
        raise OracleError(f"llama-fit-params did not finish in {timeout_s:.0f} s") from None
    except OSError as exc:
        raise OracleError(f"cannot run {exe}: {exc.strerror or exc}") from None
    rows = parse_fit_print(proc.stdout)
    if proc.returncode != 0 or not rows:
        raise OracleError(f"llama-fit-params failed (exit {proc.returncode}): {_why(proc.stderr)}")
    return OracleResult(path=str(exe), argv=tuple(argv), rows=rows)


_SAYS_WHY = re.compile(r"GGML_ASSERT|error|failed|abort", re.IGNORECASE)


def _why(stderr: str) -> str:
    """The line of a failed run's output that says why: the last error, assert or abort
    (a crash prints its backtrace after it, whose last line is a libc source path), else
    the last line."""
    said = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    told = [ln for ln in said if _SAYS_WHY.search(ln) and not ln.startswith("#")]
    return (told or said or ["no output"])[-1]
