"""A small model to try lltui on, offline: a GGUF of llama.cpp's ``llama`` architecture (the
tensor names, shapes and metadata its loader wants, a SentencePiece-style vocabulary), F16
weights with random values (seeded: the same file every time). llama-server loads and
serves it; what it says is noise. The tests' generator writes the same file with the
``gguf`` package (a test checks the two agree)."""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lltui.core.gguf import writer
from lltui.core.gguf.types import GgmlType
from lltui.core.gguf.values import ValueType
from lltui.paths import current_umask
from lltui.sources.models.same_shape import ones_row, random_row

DEMO_FILE = "lltui-demo.gguf"
DEMO_NAME = "lltui-demo"  # its general.name: a file lltui may write over
DISTINCT_ROWS = 61  # random rows of each width before they repeat (prime: neighbours differ)
F16_FILE_TYPE = 1  # llama_ftype MOSTLY_F16, general.file_type
QUANTIZATION_VERSION = 2


@dataclass(frozen=True)
class LlamaShape:
    """The hyperparameters of a llama model, as its GGUF metadata says them."""

    n_layer: int = 4
    n_embd: int = 256
    n_head: int = 8
    n_head_kv: int = 2
    head_dim: int = 32
    n_ff: int = 512
    n_vocab: int = 1024
    n_ctx_train: int = 4096


DEMO = LlamaShape()


class DemoError(OSError):
    """The file cannot be written; ``str()`` is one line."""


def spm_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """A SentencePiece-style vocabulary llama.cpp accepts: specials, 256 byte tokens, fillers."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    i = 0
    while len(tokens) < n_vocab:
        tokens.append(f"\u2581t{i}")
        types.append(1)
        i += 1
    tokens, types = tokens[:n_vocab], types[:n_vocab]
    scores = [-float(k) for k in range(len(tokens))]
    return tokens, scores, types


def llama_tensors(shape: LlamaShape) -> list[tuple[str, tuple[int, ...]]]:
    """(name, ggml dims with ne0 first) of every tensor llama.cpp's llama loader wants."""
    e, hd = shape.n_embd, shape.head_dim
    plan: list[tuple[str, tuple[int, ...]]] = [
        ("token_embd.weight", (e, shape.n_vocab)),
        ("output_norm.weight", (e,)),
        ("output.weight", (e, shape.n_vocab)),
    ]
    for i in range(shape.n_layer):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (e,)),
            (b + "attn_q.weight", (e, hd * shape.n_head)),
            (b + "attn_k.weight", (e, hd * shape.n_head_kv)),
            (b + "attn_v.weight", (e, hd * shape.n_head_kv)),
            (b + "attn_output.weight", (hd * shape.n_head, e)),
            (b + "ffn_norm.weight", (e,)),
            (b + "ffn_gate.weight", (e, shape.n_ff)),
            (b + "ffn_down.weight", (shape.n_ff, e)),
            (b + "ffn_up.weight", (e, shape.n_ff)),
        ]
    return plan


def _metadata(shape: LlamaShape, name: str) -> list[bytes]:
    a = "llama"
    tokens, scores, types = spm_vocab(shape.n_vocab)
    return [
        writer.kv_str("general.architecture", a),
        writer.kv_str("general.name", name),
        writer.kv_u32(f"{a}.block_count", shape.n_layer),
        writer.kv_u32(f"{a}.context_length", shape.n_ctx_train),
        writer.kv_u32(f"{a}.embedding_length", shape.n_embd),
        writer.kv_u32(f"{a}.feed_forward_length", shape.n_ff),
        writer.kv_u32(f"{a}.attention.head_count", shape.n_head),
        writer.kv_u32(f"{a}.attention.head_count_kv", shape.n_head_kv),
        writer.kv_u32(f"{a}.attention.key_length", shape.head_dim),
        writer.kv_u32(f"{a}.attention.value_length", shape.head_dim),
        writer.kv_u32(f"{a}.rope.dimension_count", shape.head_dim),
        writer.kv_f32(f"{a}.rope.freq_base", 10000.0),
        writer.kv_f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6),
        writer.kv_u32(f"{a}.vocab_size", shape.n_vocab),
        writer.kv_u32("general.quantization_version", QUANTIZATION_VERSION),
        writer.kv_u32("general.file_type", F16_FILE_TYPE),
        writer.kv_str("tokenizer.ggml.model", "llama"),
        writer.kv_str("tokenizer.ggml.pre", "default"),
        writer.kv_strings("tokenizer.ggml.tokens", tokens),
        writer.kv_numbers("tokenizer.ggml.scores", ValueType.FLOAT32, "f", scores),
        writer.kv_numbers("tokenizer.ggml.token_type", ValueType.INT32, "i", types),
        writer.kv_u32("tokenizer.ggml.bos_token_id", 1),
        writer.kv_u32("tokenizer.ggml.eos_token_id", 2),
        writer.kv_u32("tokenizer.ggml.unknown_token_id", 0),
    ]


def _layout(shape: LlamaShape) -> list[tuple[str, tuple[int, ...], int, int, int]]:
    """Each tensor: name, dims, type (norms F32, the rest F16), offset, bytes."""
    out: list[tuple[str, tuple[int, ...], int, int, int]] = []
    offset = 0
    for name, dims in llama_tensors(shape):
        type_id = GgmlType.F32 if len(dims) == 1 else GgmlType.F16
        n = 1
        for d in dims:
            n *= d
        nbytes = n * (4 if type_id == GgmlType.F32 else 2)
        out.append((name, dims, type_id, offset, nbytes))
        offset += nbytes + (-nbytes % writer.ALIGNMENT)
    return out


def _data(dims: tuple[int, ...], type_id: int, rng: random.Random) -> Iterator[bytes]:
    """A tensor's data, row by row: ones for a norm, else random rows from a small pool."""
    width, rows = dims[0], 1
    for d in dims[1:]:
        rows *= d
    if len(dims) == 1:
        yield ones_row(width, type_id)
        return
    pool = [random_row(rng, type_id, width) for _ in range(min(rows, DISTINCT_ROWS))]
    for r in range(rows):
        yield pool[(r * 7) % len(pool)]


def is_demo(path: Path) -> bool:
    """True where ``path`` holds a model this module wrote (its ``general.name``)."""
    from lltui.core.gguf.reader import read_gguf_file

    try:
        return read_gguf_file(path).metadata.get("general.name") == DEMO_NAME
    except (OSError, ValueError):
        return False


def write_demo(path: Path, shape: LlamaShape = DEMO, seed: int = 0) -> int:
    """Write the model to ``path`` (whole, or not at all); the bytes written."""
    rng = random.Random(seed)
    layout = _layout(shape)
    infos = [writer.tensor_info(n, dims, t, off) for n, dims, t, off, _ in layout]
    header = writer.gguf_header(_metadata(shape, DEMO_NAME), infos)
    tmp: str | None = None
    try:
        # a name of its own, created here (O_EXCL): a file or link already beside the model
        # (someone's download.part) is never followed or written over
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            for _name, dims, type_id, _off, nbytes in layout:
                for row in _data(dims, type_id, rng):
                    f.write(row)
                f.write(bytes(-nbytes % writer.ALIGNMENT))
            size = f.tell()
        os.chmod(tmp, 0o666 & ~current_umask())  # as open() would have made it
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise DemoError(f"{path}: cannot write it: {exc.strerror or exc}") from None
    return size
