"""Remote header reads: requests, bytes and time for a 150k-token vocabulary model served over
HTTP on 127.0.0.1 (the tests' hub), cold and from the header cache, against reading the same
file locally, in the same run. Run: .venv/bin/python bench/remote_header.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support import gguf_factory
from support.hub_server import Hub, HubServer, Repo

from lltui.core.gguf.reader import read_gguf
from lltui.sources.models.remote import read_remote


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--vocab", type=int, default=151_936)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()

    spec = gguf_factory.qwen3_spec(
        n_vocab=args.vocab, n_embd=4096, n_layer=36, n_ff=12288, n_head=32, n_head_kv=8
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.gguf"
        gguf_factory.write_model(
            path,
            spec,
            "Q4_K",
            vocab=gguf_factory.spm_vocab(args.vocab),
            merges=gguf_factory.bpe_merges(args.vocab),
            sparse=True,
        )
        size = path.stat().st_size
        header = read_gguf(path).files[0].header_nbytes
        hub = Hub(repos={"bench/Big-GGUF": Repo(files={"Big-Q4_K_M.gguf": path})})
        with HubServer(hub) as url:
            os.environ["HF_ENDPOINT"] = url
            hub.files["big.gguf"] = path
            ref = f"{url}/files/big.gguf"
            cold, warm, local = [], [], []
            stats = None
            for i in range(args.rounds):
                os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / f"cache{i}")
                t0 = time.perf_counter()
                stats = read_remote(ref).stats
                cold.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                read_remote(ref)
                warm.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                read_gguf(path)
                local.append(time.perf_counter() - t0)
    assert stats is not None
    c, w, lo = (statistics.median(x) for x in (cold, warm, local))
    print(f"file {size / 2**30:.2f} GiB, header {header / 2**20:.2f} MiB, vocab {args.vocab}")
    print(
        f"cold: {stats.requests} requests, {stats.bytes_read / 2**20:.2f} MiB read "
        f"({100 * stats.bytes_read / size:.2f}% of the file, "
        f"{stats.bytes_read / header:.2f}x the header)"
    )
    print(f"cold read (ranges):     {c * 1000:8.1f} ms")
    print(f"warm read (cache+HEAD): {w * 1000:8.1f} ms")
    print(f"local read_gguf:        {lo * 1000:8.1f} ms")
    print(f"ratio cold / local:     {c / lo:8.1f}x")
    print(f"ratio warm / local:     {w / lo:8.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
