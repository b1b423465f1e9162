"""Header read time: lltui's GGUF reader against gguf-py's GGUFReader, in the same run.

A model with a 150k-token vocabulary (tokens, scores, token types, merges) and a few hundred
tensors is written to a temporary directory; both readers open it in alternation for several
rounds and the median times and their ratio are printed. Run: .venv/bin/python bench/gguf_read.py
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import gguf
from support import gguf_factory

from lltui.core.gguf.reader import read_gguf


def _time(fn: object, *args: object) -> float:
    t0 = time.perf_counter()
    fn(*args)  # type: ignore[operator]
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vocab", type=int, default=150_000)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    spec = gguf_factory.llama_spec(
        n_layer=args.layers,
        n_embd=64,
        n_head=2,
        n_head_kv=1,
        head_dim=32,
        n_ff=128,
        n_vocab=args.vocab,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench-vocab.gguf"
        gguf_factory.write_model(
            path,
            spec,
            "F16",
            vocab=gguf_factory.spm_vocab(args.vocab),
            merges=gguf_factory.bpe_merges(args.vocab),
        )
        model = read_gguf(path)
        print(
            f"model: {len(model.tensors)} tensors, vocab {model.vocab_size}, "
            f"{len(model.metadata)} keys, {path.stat().st_size / 2**20:.1f} MiB"
        )

        ours, theirs, ours_vocab = [], [], []
        for _ in range(args.rounds):
            ours.append(_time(read_gguf, path))
            theirs.append(_time(gguf.GGUFReader, path))
            ours_vocab.append(_time(lambda: read_gguf(path).tokens.values()))  # type: ignore[union-attr]

    o, t, ov = (statistics.median(x) for x in (ours, theirs, ours_vocab))
    print(f"lltui read_gguf (header, vocab lazy): {o * 1000:8.2f} ms")
    print(f"lltui read_gguf + all 150k tokens:    {ov * 1000:8.2f} ms")
    print(f"gguf-py GGUFReader:                   {t * 1000:8.2f} ms")
    print(f"ratio GGUFReader / read_gguf:         {t / o:8.1f}x")
    print(f"ratio GGUFReader / read_gguf+tokens:  {t / ov:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
