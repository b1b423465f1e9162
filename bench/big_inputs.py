"""Big inputs: wall time and peak memory of lltui on inputs far larger than any real one.

    .venv/bin/python bench/big_inputs.py [--only NAME,...] [--mb 10] [--keys 2000000]
                                         [--tensors 1000000] [--keep DIR]

Writes, in a temporary directory: a 10 MB NCCL_DEBUG=INFO log and a 10 MB nccl-tests output
(the real fixtures of tests/fixtures/real/nccl, repeated with a new host and pid each time),
a GGUF with 2 million metadata keys and one with a million tensors (a tiny llama plus the
extra keys or tensors, built with tests/support/gguf_factory.py's raw builders; tensor data is
a hole, so the files take no disk). Each command runs in its own process; its wall time and peak RSS
(os.wait4's ru_maxrss) are printed beside a baseline: the same command on the small input
(the fixture once, the tiny llama alone), run in the same process of this script. "x base"
is the ratio of the two; "MB/s" the input read per second above the baseline's time.
"""

from __future__ import annotations

import argparse
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import gguf_factory as gf  # noqa: E402

NCCL = ROOT / "tests" / "fixtures" / "real" / "nccl"
F32, UINT8, FLOAT32 = 0, 0, 6


def run(argv: list[str]) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB, exit code) of ``python -m lltui ARGV`` in its own process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LLTUI_DEBUG": "0"}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lltui", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    )
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    secs = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        tail = err.decode(errors="replace").strip().splitlines()[-1:]
        print(f"  ! {' '.join(argv[:2])}: exit {proc.returncode}: {tail}", file=sys.stderr)
    return secs, usage.ru_maxrss / 1024, proc.returncode


# -- inputs ----------------------------------------------------------------------------------


def _repeat_text(seeds: list[Path], mb: float, out: Path, rehost: bool) -> int:
    """``seeds`` concatenated, then again with a new host name and pid each round, until the
    file is ``mb`` MB: many hosts and many ranks, as a cluster's log has."""
    texts = [p.read_text(errors="replace") for p in seeds]
    target = int(mb * 1_000_000)
    size = 0
    with out.open("w") as f:
        i = 0
        while i == 0 or size < target:
            for t in texts:
                if rehost and i:
                    t = t.replace("dgxh100-", f"node{i % 997}-").replace(":460770:", f":{i}:")
                f.write(t if t.endswith("\n") else t + "\n")
                size += len(t) + 1
            i += 1
    return out.stat().st_size


def nccl_log(d: Path, mb: float) -> tuple[Path, Path]:
    seeds = sorted(NCCL.glob("N*.txt"))
    big, small = d / "nccl-big.log", d / "nccl-small.log"
    _repeat_text(seeds, mb, big, rehost=True)
    _repeat_text(seeds, 0, small, rehost=False)
    return big, small


def nccl_log_wide(d: Path, mb: float) -> tuple[Path, Path]:
    """A log of ``mb`` MB whose every line names a new host, pid, device and transport: what
    each kept set of the summary grows with."""
    big, small = d / "nccl-wide.log", d / "nccl-wide-small.log"
    for path, limit in ((big, int(mb * 1_000_000)), (small, 1)):
        with path.open("w") as f:
            size = i = 0
            while size < limit:
                line = (
                    f"host{i}:{100000 + i}:{100000 + i} [{i}] NCCL INFO Channel 00/0 : "
                    f"0[0] -> 1[1] via P2P/IPC/read{i}\n"
                )
                f.write(line)
                size += len(line)
                i += 1
    return big, small


def nccl_tests(d: Path, mb: float) -> tuple[Path, Path]:
    seeds = sorted(NCCL.glob("T*.txt"))
    big, small = d / "tests-big.txt", d / "tests-small.txt"
    _repeat_text(seeds, mb, big, rehost=True)
    _repeat_text(seeds, 0, small, rehost=False)
    return big, small


def _tiny_llama() -> tuple[list[bytes], list[tuple[str, tuple[int, ...]]]]:
    spec = gf.llama_spec(n_layer=2, n_embd=64, n_head=2, n_head_kv=1, head_dim=32, n_ff=128)
    spec = gf.replace(spec, n_vocab=256)
    a = "llama"
    kvs = [
        gf.raw_kv_str("general.architecture", a),
        gf.raw_kv_str("general.name", "big-inputs"),
        gf.raw_kv_u32(f"{a}.block_count", spec.n_layer),
        gf.raw_kv_u32(f"{a}.context_length", 4096),
        gf.raw_kv_u32(f"{a}.embedding_length", spec.n_embd),
        gf.raw_kv_u32(f"{a}.feed_forward_length", spec.n_ff),
        gf.raw_kv_u32(f"{a}.attention.head_count", spec.n_head),
        gf.raw_kv_u32(f"{a}.attention.head_count_kv", spec.n_head_kv),
        gf.raw_kv_u32(f"{a}.rope.dimension_count", spec.head_dim),
        gf.raw_kv(f"{a}.attention.layer_norm_rms_epsilon", FLOAT32, struct.pack("<f", 1e-6)),
        gf.raw_kv_u32(f"{a}.vocab_size", spec.n_vocab),
        gf.raw_kv_u32("general.file_type", 0),
    ]
    return kvs, gf.tensor_plan(spec)


def _write_gguf(
    path: Path, kvs: list[bytes], plan: list[tuple[str, tuple[int, ...]]], extra: int
) -> int:
    """A GGUF of ``kvs`` and the F32 tensors of ``plan`` plus ``extra`` one-element tensors;
    the data section is a hole (truncate), so only the header takes disk."""
    infos = []
    offset = 0
    for name, dims in plan:
        infos.append(gf.raw_tensor_info(name, dims, F32, offset))
        n = 4
        for x in dims:
            n *= x
        offset += -(-n // 32) * 32
    for i in range(extra):
        infos.append(gf.raw_tensor_info(f"x.{i}", (1,), F32, offset))
        offset += 32
    head = gf.raw_gguf(kvs, infos)
    with path.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return len(head)


def gguf_keys(d: Path, n: int) -> tuple[Path, Path]:
    kvs, plan = _tiny_llama()
    junk = [gf.raw_kv(f"k{i:07d}", UINT8, b"\x01") for i in range(n)]
    big, small = d / "keys-big.gguf", d / "keys-small.gguf"
    _write_gguf(big, kvs + junk, plan, 0)
    _write_gguf(small, kvs, plan, 0)
    return big, small


def gguf_tensors(d: Path, n: int) -> tuple[Path, Path]:
    kvs, plan = _tiny_llama()
    big, small = d / "tensors-big.gguf", d / "tensors-small.gguf"
    _write_gguf(big, kvs, plan, n)
    _write_gguf(small, kvs, plan, 0)
    return big, small


# -- the cases -------------------------------------------------------------------------------

Case = tuple[str, str, Callable[[Path, argparse.Namespace], tuple[Path, Path]], list[str]]
CASES: list[Case] = [
    ("nccl-log", "nccl log", lambda d, a: nccl_log(d, a.mb), ["nccl", "log", "{}"]),
    ("nccl-log-json", "nccl log", lambda d, a: nccl_log(d, a.mb), ["nccl", "log", "{}", "--json"]),
    ("nccl-log-wide", "wide log", lambda d, a: nccl_log_wide(d, a.mb), ["nccl", "log", "{}"]),
    ("nccl-tests", "nccl tests", lambda d, a: nccl_tests(d, a.mb), ["nccl", "tests", "{}"]),
    ("keys-fit", "2M keys", lambda d, a: gguf_keys(d, a.keys), ["fit", "{}", "--gpus", "24GiB"]),
    ("keys-quant", "2M keys", lambda d, a: gguf_keys(d, a.keys),
     ["quant", "{}", "--gpus", "24GiB"]),
    ("tensors-fit", "1M tensors", lambda d, a: gguf_tensors(d, a.tensors),
     ["fit", "{}", "--gpus", "24GiB"]),
    ("tensors-quant", "1M tensors", lambda d, a: gguf_tensors(d, a.tensors),
     ["quant", "{}", "--gpus", "24GiB"]),
]  # fmt: skip


def make_inputs(label: str, d: Path, args: argparse.Namespace) -> tuple[Path, Path]:
    """The inputs of ``label``, written by a child process: Linux counts the RSS a process
    had when it called exec in the peak (ru_maxrss) of what it runs, so this process stays
    small rather than holding two million keys when it starts the commands it measures."""
    argv = [sys.executable, __file__, "--make", label, "--dir", str(d), "--mb", str(args.mb)]
    argv += ["--keys", str(args.keys), "--tensors", str(args.tensors)]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.split()
    return Path(out[0]), Path(out[1])


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--mb", type=float, default=10.0, help="size of the text inputs (MB)")
    ap.add_argument("--keys", type=int, default=2_000_000)
    ap.add_argument("--tensors", type=int, default=1_000_000)
    ap.add_argument("--keep", help="write the inputs here and keep them")
    ap.add_argument("--make", help=argparse.SUPPRESS)  # the child that writes one input
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.make:
        make = next(m for _, label, m, _ in CASES if label == args.make)
        big, small = make(Path(args.dir), args)
        print(big, small)
        return 0
    only = {c for c in args.only.split(",") if c}
    with tempfile.TemporaryDirectory(prefix="lltui-big-") as tmp:
        d = Path(args.keep or tmp)
        d.mkdir(parents=True, exist_ok=True)
        made: dict[str, tuple[Path, Path]] = {}
        print(f"{'case':<14}{'input':>11}{'MB':>7}{'s':>8}{'MiB':>8}{'base s':>8}{'base MiB':>9}"
              f"{'x base':>8}{'MB/s':>7}{'exit':>5}")  # fmt: skip
        for name, label, _, argv in CASES:
            if only and name not in only:
                continue
            if label not in made:
                made[label] = make_inputs(label, d, args)
            big, small = made[label]
            b_s, b_mib, _ = run([a.replace("{}", str(small)) for a in argv])
            s, mib, rc = run([a.replace("{}", str(big)) for a in argv])
            mb = big.stat().st_size / 1e6
            if big.suffix == ".gguf":  # the header is what is read, not the hole after it
                mb = _header_mb(big)
            rate = mb / max(s - b_s, 1e-3)
            print(f"{name:<14}{label:>11}{mb:>7.1f}{s:>8.2f}{mib:>8.0f}{b_s:>8.2f}{b_mib:>9.0f}"
                  f"{s / b_s:>8.1f}{rate:>7.1f}{rc:>5}")  # fmt: skip
    return 0


def _header_mb(path: Path) -> float:
    """Bytes before the data hole: the header lltui reads."""
    with path.open("rb") as f:
        data_start = os.lseek(f.fileno(), 0, os.SEEK_HOLE)
    return data_start / 1e6


if __name__ == "__main__":
    sys.exit(main())
