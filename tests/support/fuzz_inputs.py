"""Seeded inputs for the fuzz suite: seed files and the mutators that damage them.

Every case is a pure function of (target, seed, index): ``make_case`` draws it from a
``random.Random`` seeded with that triple, so a failure is reproduced by its three numbers.
A case is a list of input files plus a command line (CLI targets) or a parser call (the few
parsers no subcommand reads); ``Case.ops`` says in words what was done to the seed input.

Mutators:
- GGUF bytes: bit flips, byte overwrites, truncation, huge/negative/off-by-one length fields
  (string lengths, array counts, kv and tensor counts), bad value-type codes, nested arrays,
  duplicated and swapped keys, bad dimensions, ggml types, offsets and versions.
- GGUF key/values: files written by gguf's GGUFWriter (so the header stays valid) with
  hyperparameters replaced by strings, arrays, NaN, inf, huge or negative numbers, removed,
  or with another architecture.
- text (topo, NCCL logs, nccl-tests, nvidia-smi CSV, llama-server logs (a router's too),
  llama-server presets, /metrics, replay recordings, calibration stores (nested deep too)):
  line drops, duplications and swaps, byte flips, control characters, very long lines,
  CRLF, truncation, numbers replaced by NaN/inf/-1/1e308/huge ints, random unicode.
- llama-server flags: random flags from llama-server's own table with hostile values, read by
  ``lltui fit``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FIXTURES = TESTS / "fixtures"
SEEDS = TESTS / "fuzz_seeds"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

# -- cases -----------------------------------------------------------------------------------

INPUT = "{input}"  # in an argv: the path of the case's input file


@dataclass
class Case:
    """One fuzz input: ``data`` is written to a file named ``name``; ``argv`` is run through
    ``lltui.cli.main`` with ``{input}`` replaced by its path (``parser`` names a direct
    parser call instead, with ``extra`` as its keyword arguments)."""

    target: str
    name: str
    data: bytes
    argv: list[str] = field(default_factory=list)
    parser: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    ops: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "name": self.name,
            "argv": self.argv,
            "parser": self.parser,
            "extra": self.extra,
            "ops": self.ops,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any], data: bytes) -> Case:
        return cls(
            target=d["target"],
            name=d["name"],
            data=data,
            argv=list(d.get("argv") or []),
            parser=d.get("parser"),
            extra=dict(d.get("extra") or {}),
            ops=list(d.get("ops") or []),
        )


# -- interesting values ----------------------------------------------------------------------

U64_MAX = 2**64 - 1
HUGE_INTS = [2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, U64_MAX]
NUMBER_WORDS = [
    "NaN",
    "nan",
    "inf",
    "-inf",
    "Infinity",
    "-1",
    "0",
    "-0",
    "1e308",
    "1e309",
    "-1e308",
    "1e-320",
    "99999999999999999999999999",
    "18446744073709551616",
    "-9223372036854775809",
    "0x10",
    "1_000",
    "+4096",
    "٣",  # an Arabic-Indic digit: str.isdigit() says yes, many parsers say no
    "²",
    "",
]
CONTROL = ["\x00", "\x07", "\x08", "\x1b[2J", "\x1b]0;x\x07", "\r", "\x0b", "\x0c", "\x7f", "\x9b"]
UNICODE = ["\u2028", "\u2029", "\ufeff", "\u202e", "\ud7ff", "é", "鎖", "🚀", "\u0301", "\uffff"]


def random_unicode(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        r = rng.random()
        if r < 0.3:
            out.append(rng.choice(UNICODE))
        elif r < 0.5:
            out.append(chr(rng.randrange(0x20, 0x7F)))
        elif r < 0.6:
            out.append(rng.choice(CONTROL))
        else:
            cp = rng.randrange(0x80, 0x10FFFF)
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0xFFFD
            out.append(chr(cp))
    return "".join(out)


# -- text mutators ---------------------------------------------------------------------------

_NUM_RE = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def mutate_text(rng: random.Random, text: str, ops: list[str]) -> bytes:
    """Apply 1-4 random text mutations to ``text``; returns the bytes to write."""
    raw: bytes | None = None
    for _ in range(rng.choice((1, 1, 2, 2, 3, 4))):
        lines = _lines(text)
        k = rng.randrange(14)
        if k == 0 and lines:  # drop lines
            i = rng.randrange(len(lines))
            n = rng.choice((1, 1, 2, 5, 20))
            del lines[i : i + n]
            ops.append(f"drop lines {i}..{i + n}")
        elif k == 1 and lines:  # duplicate lines
            i = rng.randrange(len(lines))
            times = rng.choice((1, 2, 10, 200))
            lines[i:i] = [lines[i]] * times
            ops.append(f"duplicate line {i} x{times}")
        elif k == 2 and len(lines) > 1:  # swap lines
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
            ops.append(f"swap lines {i} {j}")
        elif k == 3 and lines:  # numbers replaced
            i = rng.randrange(len(lines))
            word = rng.choice([*NUMBER_WORDS, str(rng.choice(HUGE_INTS))])
            matches = list(_NUM_RE.finditer(lines[i]))
            if matches:
                m = rng.choice(matches)
                lines[i] = lines[i][: m.start()] + word + lines[i][m.end() :]
                ops.append(f"line {i}: number {m.group()!r} -> {word!r}")
        elif k == 4 and lines:  # every number of a line replaced
            i = rng.randrange(len(lines))
            word = rng.choice(NUMBER_WORDS)
            lines[i] = _NUM_RE.sub(lambda _m, w=word: w, lines[i])
            ops.append(f"line {i}: all numbers -> {word!r}")
        elif k == 5:  # control characters
            pos = rng.randrange(len(text) + 1)
            c = rng.choice(CONTROL)
            text = text[:pos] + c + text[pos:]
            ops.append(f"insert {c!r} at {pos}")
            continue
        elif k == 6:  # very long line
            pos = rng.randrange(len(text) + 1)
            n = rng.choice((5_000, 70_000, 300_000))
            piece = rng.choice(("A", " ", "0", "1 ", "NV12 ", "|", ",", "#", "-", "\t"))
            text = text[:pos] + piece * (n // len(piece)) + text[pos:]
            ops.append(f"insert {n} chars of {piece!r} at {pos}")
            continue
        elif k == 7:  # CRLF / CR line ends
            end = rng.choice(("\r\n", "\r", "\n\n"))
            text = text.replace("\r\n", "\n").replace("\n", end)
            ops.append(f"line ends -> {end!r}")
            continue
        elif k == 8:  # truncation
            pos = rng.randrange(len(text) + 1)
            text = text[:pos]
            ops.append(f"truncate at {pos}")
            continue
        elif k == 9:  # random unicode
            pos = rng.randrange(len(text) + 1)
            u = random_unicode(rng, rng.choice((1, 3, 40)))
            text = text[:pos] + u + text[pos:]
            ops.append(f"insert unicode {u!r} at {pos}")
            continue
        elif k == 10 and lines:  # a line's tokens shuffled / cut
            i = rng.randrange(len(lines))
            toks = lines[i].split()
            if toks:
                if rng.random() < 0.5:
                    rng.shuffle(toks)
                    ops.append(f"line {i}: tokens shuffled")
                else:
                    toks = toks[: rng.randrange(len(toks))]
                    ops.append(f"line {i}: tokens cut to {len(toks)}")
                lines[i] = " ".join(toks) + "\n"
        elif k == 11:  # byte flips (on the encoded text; invalid UTF-8 allowed)
            b = bytearray(text.encode("utf-8", "surrogatepass"))
            for _ in range(rng.choice((1, 4, 16))):
                if b:
                    p = rng.randrange(len(b))
                    b[p] ^= 1 << rng.randrange(8)
            raw = bytes(b)
            ops.append("byte flips")
            text = raw.decode("utf-8", "surrogateescape")
            continue
        elif k == 12 and lines:  # one line replaced by another's, with a column cut
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            cut = rng.randrange(len(lines[j]) + 1)
            lines[i] = lines[j][:cut] + lines[i][cut:]
            ops.append(f"line {i}: head of line {j} to column {cut}")
        elif k == 13:  # empty or whitespace-only
            text = rng.choice(("", "\n", " \n\t\n", "\x00"))
            ops.append(f"replaced by {text!r}")
            continue
        text = "".join(lines)
    return text.encode("utf-8", "surrogateescape")


# -- text seeds ------------------------------------------------------------------------------


def _read(p: Path) -> str:
    return p.read_bytes().decode("utf-8", "replace")


def _smi_fields(meta: Path) -> list[str] | None:
    if not meta.exists():
        return None
    m = re.search(r"Header \(omitted in file\) is: (.*?)\.\s*$", meta.read_text(), re.M)
    return [f.strip() for f in m.group(1).split(",")] if m else None


def text_seeds(target: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, text, parser keyword arguments) of every real input of ``target``."""
    real = FIXTURES / "real"
    out: list[tuple[str, str, dict[str, Any]]] = []
    if target == "topo":
        out = [(p.name, _read(p), {}) for p in sorted((real / "topo").glob("*.txt"))]
    elif target == "nccl-log":
        logs = sorted((real / "nccl").glob("N*.txt")) + sorted(SEEDS.glob("nccl-log-*.txt"))
        out = [(p.name, _read(p), {}) for p in logs] * 3  # logs weigh more than test tables
        out += [(p.name, _read(p), {}) for p in sorted((real / "nccl").glob("T*.txt"))]
    elif target == "nccl-tests":
        out = [(p.name, _read(p), {}) for p in sorted((real / "nccl").glob("*.txt"))]
    elif target == "smi-csv":
        for p in sorted((real / "smi").glob("C*.txt")):
            fields = _smi_fields(p.with_suffix(".meta"))
            out.append((p.name, _read(p), {"fields": fields}))
    elif target == "llama-log":
        d = FIXTURES / "llama-server"
        names = sorted(p.name for p in d.iterdir() if p.suffix in (".log", ".txt"))
        keep = [n for n in names if n.endswith(".log") or "fit" in n or "warnings" in n]
        out = [(n, _read(d / n), {}) for n in keep]
    elif target == "explain":  # users' logs of many builds, and the pinned server's
        logs = sorted((FIXTURES / "llama-logs").glob("*.log"))
        logs += sorted((FIXTURES / "llama-server").glob("*.log"))
        out = [(p.name, _read(p), {}) for p in logs]
    elif target == "metrics":
        d = FIXTURES / "llama-server"
        out = [(p.name, _read(p), {}) for p in sorted(d.glob("metrics_*.txt"))]
    elif target == "router-log":
        out = [(p.name, _read(p), {}) for p in sorted((FIXTURES / "router").glob("*.log"))]
    elif target == "preset":
        out = [(p.name, _read(p), {}) for p in sorted(SEEDS.glob("preset-*.ini"))]
    if not out:
        raise RuntimeError(f"no seed inputs for {target}")
    return out


def calib_stores() -> list[tuple[str, str, dict[str, Any]]]:
    """Calibration store files as lltui writes them: a GPU rig with llama-bench and served
    points, a CPU rig with one point, an empty one."""
    from lltui.core.speed.calibration import fit_calibration
    from lltui.sources.gpu.rig_store import RigIdentity, RigRecord, StoredPoint, encode_store

    gpu = RigIdentity(("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"), "575.57.08", "EPYC")
    day, m = "2026-01-02", "m.gguf"
    points = [
        StoredPoint(m, "as given", "tg128", True, 50.5, 60.25, 0.0151, 0.0, 0.0015, day),
        StoredPoint(m, "as given", "pp512 @ d4096", False, 3000.0, 2500.0, 3e-4, 0.0, 1e-5, day),
        StoredPoint(m, "-ngl 0", "tg32", True, 9.0, 11.0, 0.0, 0.09, 0.0, day),
        StoredPoint(m, "-c 8192", "served decode", True, 40, 60, 0.016, 0, 0, day, "llama-server"),
    ]
    out = []
    for name, rig, pts in (
        ("store-gpu.json", gpu, points),
        ("store-cpu.json", RigIdentity((), None, "AMD EPYC"), points[2:3]),
        ("store-empty.json", RigIdentity((), None, "x"), []),
    ):
        cal = fit_calibration(rig.describe(), "2026-01-05", [p.measured() for p in pts])
        out.append((name, encode_store(RigRecord(rig, "b1 (abc)", cal, tuple(pts))), {}))
    return out


# -- GGUF: tiny models and their structure ---------------------------------------------------

TINY = {
    "llama": dict(n_embd=32, n_ff=64, n_vocab=272, n_head=4, n_head_kv=2, head_dim=8),
    "qwen3": dict(n_embd=32, n_ff=64, n_vocab=272, n_head=4, n_head_kv=2, head_dim=8),
    "gemma3": dict(n_embd=32, n_ff=64, n_vocab=272, n_head=4, n_head_kv=1, head_dim=8),
    "qwen3moe": dict(
        n_embd=32, n_ff=64, n_vocab=272, n_head=4, n_head_kv=2, head_dim=8, n_ff_exp=32
    ),
}
ARCHS = list(TINY)


def tiny_spec(arch: str) -> Any:
    from support import gguf_factory as gf

    return gf.SPECS[arch](**TINY[arch])


def base_kv(spec: Any, wtype: str = "F16") -> dict[str, tuple[Any, Any, Any]]:
    """The key/values gguf_factory writes for ``spec``: key -> (value, type, array item type)."""
    import gguf

    from support import gguf_factory as gf

    V = gguf.GGUFValueType
    a = spec.arch
    kv: dict[str, tuple[Any, Any, Any]] = {
        "general.architecture": (a, V.STRING, None),
        "general.name": (f"tiny-{a}", V.STRING, None),
        f"{a}.block_count": (spec.n_layer, V.UINT32, None),
        f"{a}.context_length": (spec.n_ctx_train, V.UINT32, None),
        f"{a}.embedding_length": (spec.n_embd, V.UINT32, None),
        f"{a}.feed_forward_length": (spec.n_ff, V.UINT32, None),
        f"{a}.attention.head_count": (spec.n_head, V.UINT32, None),
        f"{a}.attention.head_count_kv": (spec.n_head_kv, V.UINT32, None),
        f"{a}.attention.key_length": (spec.head_dim, V.UINT32, None),
        f"{a}.attention.value_length": (spec.head_dim, V.UINT32, None),
        f"{a}.rope.dimension_count": (spec.head_dim, V.UINT32, None),
        f"{a}.rope.freq_base": (10000.0, V.FLOAT32, None),
        f"{a}.attention.layer_norm_rms_epsilon": (1e-6, V.FLOAT32, None),
        f"{a}.vocab_size": (spec.n_vocab, V.UINT32, None),
        "general.quantization_version": (gguf.GGML_QUANT_VERSION, V.UINT32, None),
        "general.file_type": (gf.FILE_TYPE.get(wtype, 1), V.UINT32, None),
    }
    if spec.n_expert:
        kv[f"{a}.expert_count"] = (spec.n_expert, V.UINT32, None)
        kv[f"{a}.expert_used_count"] = (spec.n_expert_used, V.UINT32, None)
        kv[f"{a}.expert_feed_forward_length"] = (spec.n_ff_exp, V.UINT32, None)
    if spec.sliding_window:
        kv[f"{a}.attention.sliding_window"] = (spec.sliding_window, V.UINT32, None)
        kv[f"{a}.attention.sliding_window_pattern"] = (spec.swa_pattern, V.UINT32, None)
    tokens, scores, types = gf.spm_vocab(spec.n_vocab)
    kv["tokenizer.ggml.model"] = ("llama", V.STRING, None)
    kv["tokenizer.ggml.tokens"] = (tokens, V.ARRAY, V.STRING)
    kv["tokenizer.ggml.scores"] = (scores, V.ARRAY, V.FLOAT32)
    kv["tokenizer.ggml.token_type"] = (types, V.ARRAY, V.INT32)
    kv["tokenizer.ggml.bos_token_id"] = (1, V.UINT32, None)
    kv["tokenizer.ggml.eos_token_id"] = (2, V.UINT32, None)
    return kv


def write_gguf(
    path: Path, spec: Any, kv: dict[str, tuple[Any, Any, Any]], wtype: str = "F16"
) -> None:
    """A GGUF with exactly ``kv`` as its metadata and ``spec``'s tensors (zero weights)."""
    import gguf
    import numpy as np

    from support import gguf_factory as gf

    logging.getLogger("gguf").setLevel(logging.ERROR)  # no "duplicated key" warnings
    # the architecture is set again below like every other key (it may be fuzzed or removed)
    w = gguf.GGUFWriter(path, arch=kv.get("general.architecture", ("",))[0])
    w.kv_data[0].clear()
    for key, (value, vtype, sub) in kv.items():
        w.add_key_value(key, value, vtype, sub_type=sub)
    for name, dims in gf.tensor_plan(spec):
        shape = tuple(reversed(dims))
        if len(dims) == 1 or name.endswith("ffn_gate_inp.weight") or wtype == "F32":
            w.add_tensor(name, np.zeros(shape, np.float32))
        elif wtype == "Q8_0" and dims[0] % 32 == 0:
            raw = np.zeros((*shape[:-1], dims[0] // 32 * 34), np.uint8)
            w.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, np.zeros(shape, np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@dataclass
class GgufField:
    kind: str  # n_tensors n_kv key_len vtype str_len arr_type arr_count name_len n_dims dim ...
    offset: int
    size: int  # 4 or 8


@dataclass
class GgufLayout:
    data: bytes
    fields: list[GgufField]
    kv_spans: list[tuple[int, int]]
    header_end: int


def gguf_layout(data: bytes) -> GgufLayout:
    """Where every count, length and type code of a valid GGUF header lies."""
    fields: list[GgufField] = [GgufField("version", 4, 4)]
    fields += [GgufField("n_tensors", 8, 8), GgufField("n_kv", 16, 8)]
    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    pos = 24
    fixed = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def value(pos: int, vtype: int) -> int:
        if vtype in fixed:
            return pos + fixed[vtype]
        if vtype == 8:
            fields.append(GgufField("str_len", pos, 8))
            return pos + 8 + struct.unpack_from("<Q", data, pos)[0]
        assert vtype == 9
        fields.append(GgufField("arr_type", pos, 4))
        fields.append(GgufField("arr_count", pos + 4, 8))
        itype, count = struct.unpack_from("<IQ", data, pos)
        pos += 12
        for _ in range(count):
            pos = value(pos, itype)
        return pos

    spans = []
    for _ in range(n_kv):
        start = pos
        fields.append(GgufField("key_len", pos, 8))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        fields.append(GgufField("vtype", pos, 4))
        vtype = struct.unpack_from("<I", data, pos)[0]
        pos = value(pos + 4, vtype)
        spans.append((start, pos))
    for _ in range(n_tensors):
        fields.append(GgufField("name_len", pos, 8))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        fields.append(GgufField("n_dims", pos, 4))
        nd = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        for _ in range(nd):
            fields.append(GgufField("dim", pos, 8))
            pos += 8
        fields.append(GgufField("ggml_type", pos, 4))
        fields.append(GgufField("tensor_offset", pos + 4, 8))
        pos += 12
    return GgufLayout(data, fields, spans, pos)


def _nested_array(rng: random.Random, depth: int) -> bytes:
    """An array payload (item type, count, items) nested ``depth`` levels."""
    if depth <= 1:
        n = rng.choice((0, 1, 3))
        return struct.pack("<IQ", 4, n) + b"\1\0\0\0" * n
    inner = _nested_array(rng, depth - 1)
    n = rng.choice((1, 2)) if depth <= 6 else 1  # at most 2**6 copies of the innermost
    return struct.pack("<IQ", 9, n) + inner * n


def _raw_kv(key: bytes, vtype: int, payload: bytes) -> bytes:
    return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + payload


def _bump_kv_count(b: bytearray, delta: int) -> None:
    n = struct.unpack_from("<Q", b, 16)[0]
    struct.pack_into("<Q", b, 16, (n + delta) % 2**64)


LENGTH_KINDS = ("key_len", "str_len", "arr_count", "name_len", "n_tensors", "n_kv")


def _length_value(rng: random.Random, old: int, size: int, file_size: int) -> int:
    choice = rng.randrange(8)
    if choice == 0:
        v = rng.choice(HUGE_INTS)
    elif choice == 1:
        v = 2**64 - rng.choice((1, 2, 8, 1000))  # negative as a signed number
    elif choice == 2:
        v = old + rng.choice((-1, 1, -8, 8))
    elif choice == 3:
        v = rng.choice((0, 1))
    elif choice == 4:
        v = file_size + rng.choice((-1, 0, 1, 1000))
    elif choice == 5:
        v = old * rng.choice((2, 16, 1 << 20))
    else:
        v = rng.randrange(2 ** (8 * size))
    return v % 2 ** (8 * size)


def mutate_gguf_bytes(rng: random.Random, layout: GgufLayout, ops: list[str]) -> bytes:
    b = bytearray(layout.data)
    hdr = layout.header_end
    fields = layout.fields
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        k = rng.randrange(13)
        size = len(b)
        if k == 0:  # bit flips, mostly in the header
            for _ in range(rng.choice((1, 2, 8))):
                p = (
                    rng.randrange(min(hdr, size) or 1)
                    if rng.random() < 0.9
                    else rng.randrange(size or 1)
                )
                if p < len(b):
                    b[p] ^= 1 << rng.randrange(8)
                    ops.append(f"flip bit at {p}")
        elif k == 1:  # byte overwrite
            p = rng.randrange(min(hdr, size) or 1)
            n = rng.choice((1, 2, 4, 8))
            fill = bytes(rng.choice((0x00, 0xFF, 0x7F, 0x80, rng.randrange(256))) for _ in range(n))
            b[p : p + n] = fill
            ops.append(f"overwrite {n} bytes at {p} with {fill.hex()}")
        elif k == 2:  # truncation
            p = rng.randrange(size + 1) if rng.random() < 0.3 else rng.randrange(min(hdr, size) + 1)
            del b[p:]
            ops.append(f"truncate at {p}")
        elif k in (3, 4):  # a length or count field
            cands = [f for f in fields if f.kind in LENGTH_KINDS and f.offset + f.size <= len(b)]
            if cands:
                f = rng.choice(cands)
                fmt = "<Q" if f.size == 8 else "<I"
                old = struct.unpack_from(fmt, b, f.offset)[0]
                v = _length_value(rng, old, f.size, size)
                struct.pack_into(fmt, b, f.offset, v)
                ops.append(f"{f.kind} at {f.offset}: {old} -> {v}")
        elif k == 5:  # bad value-type code
            cands = [
                f for f in fields if f.kind in ("vtype", "arr_type") and f.offset + 4 <= len(b)
            ]
            if cands:
                f = rng.choice(cands)
                v = rng.choice((13, 14, 255, 2**31, 2**32 - 1, 9, 8, 7, 12, rng.randrange(13)))
                struct.pack_into("<I", b, f.offset, v)
                ops.append(f"{f.kind} at {f.offset} -> {v}")
        elif k == 6 and layout.kv_spans:  # duplicated key
            s, e = rng.choice(layout.kv_spans)
            if e <= len(b):
                b[e:e] = b[s:e]
                _bump_kv_count(b, 1)
                ops.append(f"duplicate kv bytes {s}..{e}")
                break  # later offsets moved
        elif k == 7:  # nested arrays
            depth = rng.choice((2, 3, 8, 9, 12, 40))
            kv = _raw_kv(b"fuzz.nested", 9, _nested_array(rng, depth))
            at = rng.choice(layout.kv_spans)[0] if layout.kv_spans else 24
            b[at:at] = kv
            _bump_kv_count(b, 1)
            ops.append(f"insert nested array kv depth {depth} at {at}")
            break
        elif k == 8 and len(layout.kv_spans) > 1:  # two keys swapped
            (s1, e1), (s2, e2) = sorted(rng.sample(layout.kv_spans, 2))
            if e2 <= len(b):
                b[s1:e2] = b[s2:e2] + b[e1:s2] + b[s1:e1]
                ops.append(f"swap kv {s1}..{e1} with {s2}..{e2}")
                break
        elif k == 9:  # tensor dims, types, offsets
            cands = [
                f
                for f in fields
                if f.kind in ("dim", "ggml_type", "tensor_offset", "n_dims")
                and f.offset + f.size <= len(b)
            ]
            if cands:
                f = rng.choice(cands)
                fmt = "<Q" if f.size == 8 else "<I"
                old = struct.unpack_from(fmt, b, f.offset)[0]
                if f.kind == "ggml_type":
                    v = rng.choice(
                        (4, 5, 13, 39, 40, 41, 100, 2**31 - 1, 2**32 - 1, rng.randrange(42))
                    )
                elif f.kind == "n_dims":
                    v = rng.choice((0, 1, 3, 4, 5, 255, 2**32 - 1))
                else:
                    v = _length_value(rng, old, f.size, size)
                    if f.kind == "tensor_offset" and rng.random() < 0.5:
                        v = old + rng.choice((1, 32, -32, 4096)) * rng.choice((1, 1000))
                        v %= 2**64
                struct.pack_into(fmt, b, f.offset, v)
                ops.append(f"{f.kind} at {f.offset}: {old} -> {v}")
        elif k == 10:  # version
            v = rng.choice((0, 1, 2, 4, 0x03000000, 2**32 - 1))
            struct.pack_into("<I", b, 4, v)
            ops.append(f"version -> {v}")
        elif k == 11:  # junk inserted in the header
            p = rng.randrange(min(hdr, len(b)) + 1)
            junk = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, 8, 100))))
            b[p:p] = junk
            ops.append(f"insert {len(junk)} junk bytes at {p}")
        elif k == 12:  # an extra general.alignment / split.count key of odd type or value
            key = rng.choice((b"general.alignment", b"split.count", b"split.no"))
            vtype = rng.choice((4, 4, 5, 10, 8, 6))
            if vtype == 8:
                payload = struct.pack("<Q", 2) + b"32"
            elif vtype == 6:
                payload = struct.pack("<f", rng.choice((32.0, float("nan"))))
            elif vtype == 10:
                payload = struct.pack("<Q", rng.choice((0, 2, 64, U64_MAX)))
            else:
                payload = struct.pack("<I", rng.choice((0, 1, 2, 3, 48, 64, 2**31, 2**32 - 1)))
            at = rng.choice(layout.kv_spans)[0] if layout.kv_spans else 24
            b[at:at] = _raw_kv(key, vtype, payload)
            _bump_kv_count(b, 1)
            ops.append(f"insert {key.decode()} type {vtype} value {payload.hex()}")
            break
    return bytes(b)


# -- GGUF key/value mutations -----------------------------------------------------------------

ARCH_SUFFIXES = [
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "attention.layer_norm_rms_epsilon",
    "attention.kv_lora_rank",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.factor",
    "rope.scaling.type",
    "vocab_size",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_count",
    "nextn_predict_layers",
    "full_attention_interval",
    "ssm.state_size",
    "shortconv.l_cache",
    "wkv.head_size",
    "token_shift_count",
]
GENERAL_KEYS = [
    "general.architecture",
    "general.file_type",
    "general.alignment",
    "general.name",
    "general.quantization_version",
    "split.count",
    "split.no",
    "split.tensors.count",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.model",
]
OTHER_ARCHS = [
    "gpt-oss",
    "falcon",
    "mamba",
    "rwkv6",
    "qwen3next",
    "deepseek2",
    "gemma3n",
    "gemma4",
    "llama4",
    "bert",
    "lfm2",
    "granite_swa",
    "",
    "no-such-arch",
    "llama\x00",
]


def hostile_value(rng: random.Random, n_layer: int) -> tuple[Any, Any, Any, str]:
    """A value of the wrong kind for a number: (value, type, item type, words)."""
    import gguf

    V = gguf.GGUFValueType
    k = rng.randrange(16)
    if k == 0:
        s = rng.choice(("", "4096", "NaN", "-1", "lots", "\x00", "4096\n", "é"))
        return s, V.STRING, None, f"string {s!r}"
    if k == 1:
        f = rng.choice((math.nan, math.inf, -math.inf))
        t = rng.choice((V.FLOAT32, V.FLOAT64))
        return f, t, None, f"{t.name} {f}"
    if k == 2:
        f = rng.choice((1e308, -1e308, 1e38, 3.5, -0.0, 1e-320, 0.5))
        t = (
            V.FLOAT64
            if abs(f) > 3e38 or (f and abs(f) < 1e-38)
            else rng.choice((V.FLOAT32, V.FLOAT64))
        )
        return f, t, None, f"{t.name} {f}"
    if k == 3:
        v = rng.choice(HUGE_INTS[:6])
        t = V.UINT64 if v >= 2**63 else V.INT64
        return v, t, None, f"{t.name} {v}"
    if k == 4:
        v = U64_MAX
        return v, V.UINT64, None, f"UINT64 {v}"
    if k == 5:
        v = rng.choice((-1, -2, -(2**31), -4096))
        t = V.INT32
        return v, t, None, f"INT32 {v}"
    if k == 6:
        v = -(2**63)
        return v, V.INT64, None, f"INT64 {v}"
    if k == 7:
        v = rng.choice((True, False))
        return v, V.BOOL, None, f"BOOL {v}"
    if k == 8:
        v = rng.choice((0, 1, 2, 3, 7, 513, 4097, 65536, 10**6, 2**31))
        return v, V.UINT32, None, f"UINT32 {v}"
    if k == 9:  # per-layer array of ints, of a wrong or right length
        n = rng.choice((1, n_layer - 1, n_layer, n_layer + 1, 2 * n_layer, 513, 600))
        n = max(n, 1)
        items = [rng.choice((0, 1, 2, 4, 8, 32, 2**31 - 1)) for _ in range(n)]
        return items, V.ARRAY, V.INT32, f"INT32 array of {n}"
    if k == 10:  # per-layer array of floats with NaN
        n = max(1, rng.choice((n_layer, n_layer + 1, 1)))
        items = [rng.choice((1.0, math.nan, math.inf, -1.0, 0.5)) for _ in range(n)]
        return items, V.ARRAY, V.FLOAT32, f"FLOAT32 array {items[:4]}"
    if k == 11:  # array of strings
        items = [rng.choice(("1", "a", "")) for _ in range(max(1, n_layer))]
        return items, V.ARRAY, V.STRING, f"string array of {len(items)}"
    if k == 12:  # array of bools
        items = [rng.random() < 0.5 for _ in range(max(1, n_layer))]
        return items, V.ARRAY, V.BOOL, f"bool array {items}"
    if k == 13:  # negative per-layer values
        items = [rng.choice((-1, 4, -(2**31))) for _ in range(max(1, n_layer))]
        return items, V.ARRAY, V.INT32, f"INT32 array {items}"
    if k == 14:  # huge per-layer values
        items = [rng.choice((2**63 - 1, U64_MAX, 4)) for _ in range(max(1, n_layer))]
        return items, V.ARRAY, V.UINT64, f"UINT64 array {items}"
    v = rng.choice((0, 1, 2, 5, 8, 16, 64, 4096))
    return v, V.UINT32, None, f"UINT32 {v}"


def random_kv_edits(rng: random.Random, spec: Any) -> list[list[Any]]:
    """1-3 edits of a model's key/values, as JSON-able lists (so a case can be cut down):
    ["set", key, value, type name, item type name], ["del", key], ["arch", new, rename]."""
    import gguf

    edits: list[list[Any]] = []
    arch = spec.arch
    keys = list(base_kv(spec))
    for _ in range(rng.choice((1, 1, 2, 3))):
        r = rng.random()
        if r < 0.72:
            key = f"{arch}.{rng.choice(ARCH_SUFFIXES)}"
        elif r < 0.8:
            key = rng.choice(GENERAL_KEYS)
        elif r < 0.9:
            edits.append(["del", rng.choice([k for k in keys if k != "general.architecture"])])
            continue
        else:
            edits.append(["arch", rng.choice(OTHER_ARCHS), rng.random() < 0.5])
            continue
        if key == "general.architecture" and rng.random() < 0.5:
            value, vtype, sub = rng.choice(OTHER_ARCHS), gguf.GGUFValueType.STRING, None
        else:
            value, vtype, sub, _ = hostile_value(rng, spec.n_layer)
        edits.append(["set", key, value, vtype.name, sub.name if sub is not None else None])
    return edits


def apply_kv_edits(spec: Any, wtype: str, edits: list[list[Any]]) -> dict[str, Any]:
    """The key/values of ``spec`` with ``edits`` applied (keys of an edit that names the
    model's architecture follow a rename)."""
    import gguf

    V = gguf.GGUFValueType
    kv = base_kv(spec, wtype)
    arch = spec.arch
    for e in edits:
        if e[0] == "del":
            key = (
                e[1].replace(spec.arch + ".", arch + ".", 1)
                if e[1].startswith(spec.arch + ".")
                else e[1]
            )
            kv.pop(key, None)
        elif e[0] == "arch":
            new, rename = e[1], e[2]
            if rename and new:
                kv = {
                    (new + k[len(arch) :] if k.startswith(arch + ".") else k): v
                    for k, v in kv.items()
                }
                arch = new
            kv["general.architecture"] = (new, V.STRING, None)
        else:
            _, key, value, tname, sname = e
            if key.startswith(spec.arch + "."):
                key = arch + key[len(spec.arch) :]
            kv[key] = (value, V[tname], V[sname] if sname else None)
    return kv


def describe_edit(e: list[Any]) -> str:
    if e[0] == "del":
        return f"remove {e[1]}"
    if e[0] == "arch":
        return f"general.architecture -> {e[1]!r}" + (" (keys renamed)" if e[2] else "")
    value = e[2]
    if isinstance(value, list) and len(value) > 6:
        value = f"{value[:6]}... ({len(value)} items)"
    return f"{e[1]} = {e[3]}{'[' + e[4] + ']' if e[4] else ''} {value!r}"


def gguf_kv_bytes(workdir: Path, arch: str, wtype: str, edits: list[list[Any]]) -> bytes:
    spec = tiny_spec(arch)
    path = workdir / f"kv-{random.randrange(1 << 40)}.gguf"
    try:
        write_gguf(path, spec, apply_kv_edits(spec, wtype, edits), wtype)
        return path.read_bytes()
    finally:
        path.unlink(missing_ok=True)


# -- llama-server flags -----------------------------------------------------------------------

MEMORY_FLAGS_1 = [
    "-c", "--ctx-size", "-np", "--parallel", "-ctk", "-ctv", "--cache-type-k", "-fa",
    "--flash-attn", "-b", "--batch-size", "-ub", "--ubatch-size", "-ngl", "--n-gpu-layers",
    "--gpu-layers", "-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu",
    "-dev", "--device", "-ot", "--override-tensor", "-ncmoe", "--n-cpu-moe", "-ncffn",
    "--n-cpu-ffn", "-lm", "--load-mode", "--rpc", "--kv-unified-per-slot", "-fit", "-fitt",
    "--fit-target", "-fitc", "-m", "-md", "-mm", "--override-kv", "--rope-scaling",
    "--rope-freq-scale", "--yarn-orig-ctx", "-n", "--keep", "--swa-checkpoints",
    "--cache-ram", "-ctxcp", "--draft-max", "-ngld", "-devd", "-otd", "-ctkd",
]  # fmt: skip
MEMORY_FLAGS_0 = [
    "-kvu", "-no-kvu", "--kv-unified", "--cpu-moe", "-cmoe", "-nkvo", "--no-kv-offload",
    "-kvo", "--swa-full", "-nr", "--no-repack", "--repack", "--no-host", "--op-offload",
    "--no-op-offload", "--embedding", "--mlock", "--no-mmap", "--jinja", "-cb", "--metrics",
    "--help", "-h", "--version", "--list-devices", "--completion-bash",
]  # fmt: skip
ODD_FLAGS = [
    "--ctx_size", "-c=4096", "--no-such-flag", "-", "--", "---c", "-C",
    "--control-vector-layer-range",
    "--gpus", "--margin", "--host-free", "--cpu", "--json", "--oracle",
]  # fmt: skip
FLAG_VALUES = [
    "", " ", "0", "1", "-1", "-2", "-3", "4096", "+4096", "1e-320", "NaN", "nan", "inf", "-inf",
    "1e308", "99999999999999999999", "18446744073709551616", "-9223372036854775809", "0x10",
    "4_096", "٣", "²", "all", "auto", "on", "off", "none", "row", "layer", "tensor", "q4_0",
    "q8_0", "f32", "bf16", "Q4_0", "mmap", "dio", "3,1", "1,0", "0,0", ",,,", "1/1", "NaN,1",
    "inf,inf", "-1,2", "1e308,1e308", "CUDA0", "CUDA0,CUDA1", "none", "CPU", "RPC0",
    "(.*)*X=CPU", "blk\\.(0|1)\\.ffn=CPU", ".*=CUDA0", "=CPU", "ffn_up=", "(=CPU", "[=CPU",
    "a=b,c=d,", "x=CUDA9", "(a+)+$=CPU", ".*" * 200 + "=CPU", "10.0.0.9:50052", "host:0",
    "host:70000", "[::1]:50052", ":1", "a:1,b:2,c:3", "1024,2048", "1024/2048", "-5",
    "\n", "4096\n", "a\nb", "\x1b[2J", "é", "🚀", "512MiB", "24GiB", "cpu", "T4,T4",
    "2xA100-80GB", "sim:4xl4", "sim:no-such", "rpc:10.0.0.1:50052", "rpc:h:1=8GiB",
    "24GiB,24GiB", "0GiB", "-1GiB", "1e30GiB", "NaNGiB", "x86", "arm", "x86-avx512",
]  # fmt: skip
GPU_SPECS = [
    "cpu", "cpu", "cpu", "24GiB", "24GiB,24GiB", "T4,T4", "2xA100-80GB", "sim:4xl4",
    "sim:8xh100-sxm", "rpc:10.0.0.1:50052", "rpc:h:1:cpu=8GiB", "0GiB", "1GiB,1TiB",
    "9999999xT4", "", "NaNGiB", "-1GiB", "1e308GiB", "cpu,cpu", "T4,,T4", "16xT4",
]  # fmt: skip


def random_flags(rng: random.Random) -> list[str]:
    out: list[str] = []
    for _ in range(rng.choice((1, 2, 3, 4, 6, 10))):
        r = rng.random()
        if r < 0.6:
            out += [rng.choice(MEMORY_FLAGS_1), rng.choice(FLAG_VALUES)]
        elif r < 0.8:
            out.append(rng.choice(MEMORY_FLAGS_0))
        elif r < 0.9:
            flag = rng.choice(ODD_FLAGS)
            out.append(flag)
            if rng.random() < 0.7:
                out.append(rng.choice(FLAG_VALUES))
        else:  # a flag missing its value at the end, or a stray value
            out.append(rng.choice(FLAG_VALUES if rng.random() < 0.5 else MEMORY_FLAGS_1))
    if "--gpus" not in out and rng.random() < 0.9:
        out += ["--gpus", rng.choice(GPU_SPECS) if rng.random() < 0.3 else "cpu"]
    return out


# -- the targets ------------------------------------------------------------------------------

TEXT_TARGETS = (
    "topo",
    "nccl-log",
    "nccl-tests",
    "smi-csv",
    "llama-log",
    "metrics",
    "replay",
    "router-log",
    "preset",
    "explain",
    "calib-store",
)
GGUF_TARGETS = ("gguf-bytes", "gguf-kv", "flags")
# the classes of hardening round 3: network deadlines, forged lines, scale, secrets, unknowns
from support.fuzz_classes import CLASS_TARGETS, make_class_case  # noqa: E402

TARGETS = GGUF_TARGETS + TEXT_TARGETS + CLASS_TARGETS

CLI_ARGV = {
    "topo": ["topo", "--file", INPUT, "--json"],
    "nccl-log": ["nccl", "log", INPUT, "--json"],
    "nccl-tests": ["nccl", "tests", INPUT, "--json"],
    "replay": ["gpus", "--source", "replay:" + INPUT, "--json"],
    "explain": ["explain", INPUT, "--json"],
}
DIRECT = {
    "smi-csv": "smi_csv",
    "llama-log": "llama_log",
    "metrics": "metrics",
    "router-log": "router_log",
    "preset": "preset",
    "calib-store": "calib_store",
}


class Seeds:
    """The seed inputs, built once per process (tiny GGUFs, recordings, fixtures)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._gguf: dict[tuple[str, str], GgufLayout] = {}
        self._text: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}

    def gguf(self, arch: str, wtype: str) -> GgufLayout:
        key = (arch, wtype)
        if key not in self._gguf:
            spec = tiny_spec(arch)
            path = self.workdir / f"seed-{arch}-{wtype}.gguf"
            write_gguf(path, spec, base_kv(spec, wtype), wtype)
            self._gguf[key] = gguf_layout(path.read_bytes())
        return self._gguf[key]

    def text(self, target: str) -> list[tuple[str, str, dict[str, Any]]]:
        if target not in self._text:
            if target == "replay":
                self._text[target] = self._recordings()
            elif target == "calib-store":
                self._text[target] = calib_stores()
            else:
                self._text[target] = text_seeds(target)
        return self._text[target]

    def _recordings(self) -> list[tuple[str, str, dict[str, Any]]]:
        import contextlib
        import io

        from support.fuzz_targets import cli_main

        out = []
        for profile in ("4xl4", "mixed-4090-3090", "2x3090-nvlink"):
            path = self.workdir / f"rec-{profile}.jsonl"
            with contextlib.redirect_stdout(io.StringIO()):
                rc = cli_main(["--source", f"sim:{profile}", "--record", str(path), "gpus"])
            assert rc == 0, f"recording sim:{profile} failed"
            text = path.read_text()
            lines = text.splitlines(keepends=True)
            # three samples: the one recorded, repeated with later times
            samples = []
            for k, line in enumerate(lines[1:2] * 3):
                obj = json.loads(line)
                if isinstance(obj.get("t"), (int, float)):
                    obj["t"] = obj["t"] + k
                samples.append(json.dumps(obj) + "\n")
            out.append((path.name, lines[0] + "".join(samples), {}))
        return out


def make_case(seeds: Seeds, target: str, seed: int, index: int) -> Case:
    rng = random.Random(f"{target}:{seed}:{index}")
    ops: list[str] = []
    if target == "gguf-bytes":
        arch, wtype = rng.choice(ARCHS), rng.choice(("F16", "F16", "Q8_0"))
        layout = seeds.gguf(arch, wtype)
        ops.append(f"seed tiny {arch} {wtype}")
        data = mutate_gguf_bytes(rng, layout, ops)
        verb = "quant" if rng.random() < 0.15 else "fit"
        return Case(target, "model.gguf", data, [verb, INPUT, "--gpus", "cpu", "--json"], ops=ops)
    if target == "gguf-kv":
        arch, wtype = rng.choice(ARCHS), rng.choice(("F16", "F16", "Q8_0"))
        edits = random_kv_edits(rng, tiny_spec(arch))
        ops.append(f"seed tiny {arch} {wtype}")
        ops += [describe_edit(e) for e in edits]
        data = gguf_kv_bytes(seeds.workdir, arch, wtype, edits)
        verb = "quant" if rng.random() < 0.15 else "fit"
        flags: list[str] = []
        if rng.random() < 0.3:
            flags = rng.choice(
                (["-c", "0"], ["-fa", "on"], ["-np", "4"], ["-ctk", "q8_0", "-fa", "on"],
                 ["--swa-full"], ["-cmoe"], ["-c", "1000000"], ["-ub", "1", "-b", "1"])
            )  # fmt: skip
        argv = [verb, INPUT, *flags, "--gpus", rng.choice(("cpu", "cpu", "2xA100-80GB")), "--json"]
        extra = {"arch": arch, "wtype": wtype, "edits": edits}
        return Case(target, "model.gguf", data, argv, extra=extra, ops=ops)
    if target == "flags":
        arch = rng.choice(ARCHS)
        data = seeds.gguf(arch, "F16").data
        flags = random_flags(rng)
        ops.append(f"seed tiny {arch} F16")
        ops.append("flags " + " ".join(repr(f) for f in flags))
        verb = "quant" if rng.random() < 0.1 else "fit"
        argv = [verb, INPUT, *flags]
        if "--json" not in flags and rng.random() < 0.8:
            argv.append("--json")
        return Case(target, "model.gguf", data, argv, ops=ops)
    if target in CLASS_TARGETS:
        return make_class_case(seeds, target, rng, ops)
    if target in TEXT_TARGETS:
        pool = seeds.text(target)
        name, text, extra = rng.choice(pool)
        if rng.random() < 0.1 and len(pool) > 1:  # spliced with another seed
            _, other, _ = rng.choice(pool)
            cut = rng.randrange(len(text) + 1)
            text = text[:cut] + other[rng.randrange(len(other) + 1) :]
            ops.append(f"spliced at {cut}")
        ops.insert(0, f"seed {name}")
        data = mutate_text(rng, text, ops)
        if target == "calib-store" and rng.random() < 0.15:  # JSON nested past any sense
            n = rng.choice((9, 1000, 100_000))
            data = b"[" * n + data + b"]" * rng.choice((0, n))
            ops.append(f"nested {n} deep")
        if target in DIRECT:
            return Case(target, "input.txt", data, parser=DIRECT[target], extra=extra, ops=ops)
        argv = list(CLI_ARGV[target])
        if target == "explain" and rng.random() < 0.3:  # a header: the estimate runs too
            arch = rng.choice(ARCHS)
            seeds.gguf(arch, "F16")
            argv += ["--model", str(seeds.workdir / f"seed-{arch}-F16.gguf")]
            ops.append(f"--model tiny {arch}")
        return Case(target, "input.txt", data, argv, ops=ops)
    raise ValueError(f"unknown target {target!r}")
