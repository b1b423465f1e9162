"""The CLI's output on a golden set of command lines, this checkout against another revision.

    .venv/bin/python scripts/golden.py --base REV [--jobs 2] [--show 5] [--only WORD]

A change that only moves code (one reader, services as the door, a module split) must not
change what a user sees. Each command line runs as a fresh ``python -m lltui`` process in
this working tree and in REV's (a temporary git worktree), with the same inputs: tiny
real-architecture GGUFs and real-size sparse ones written by the tests' factory, every log,
topology matrix, NCCL log and nccl-tests output under tests/fixtures, simulated rigs; fit,
quant (text and --json, over flag sets and device specs), explain, topo, nccl, and bad input.
Exit code, standard output and standard error are compared byte for byte; the differing
command lines are listed with the start of their diff. Exit 1 where any differ.

Where a difference is a bug fixed on purpose, the commit says so: this script only finds them.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(ROOT / "tests"))

FLAG_SETS: tuple[tuple[str, ...], ...] = (
    (),
    ("-c", "32768", "-np", "4"),
    ("-ngl", "3"),
    ("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on"),
    ("-sm", "row"),
    ("-ts", "3,1"),
    ("--n-cpu-moe", "2"),
    ("-sm", "tensor"),
    ("-nkvo",),
    ("-ub", "256", "-b", "1024"),
    ("-ot", r"blk\.1\.ffn_(up|down)=CPU", "-ot", r"ffn_up=CUDA1", "-ot", r"(\w)\1=CPU"),
)
DEVICE_SPECS = ("4090,4090", "3x24GiB", "cpu")
HOST = ("--host-free", "64GiB")  # the host's free memory as given, not this machine's now
EDGE_MOE = "qwen3moe-30b-F16.gguf"  # a MoE at --best's edges (a sparse file)


def write_models(into: Path) -> list[Path]:
    """Tiny models of several architectures (real tensors), and two real-size shapes whose
    weights are a hole in a sparse file."""
    from support import gguf_factory as gf

    tiny = {
        "llama": gf.llama_spec(),
        "qwen3moe": gf.qwen3moe_spec(),
        "gemma3": gf.gemma3_spec(),
        "gpt-oss": gf.gpt_oss_spec(),
        "deepseek2": gf.deepseek2_spec(),
    }
    paths = [gf.write_model(into / f"{name}.gguf", spec)[0] for name, spec in tiny.items()]
    paths.append(gf.write_sparse(into / "llama-8b-Q4_0.gguf", gf.llama_8b_spec(), "Q4_0"))
    paths.append(gf.write_sparse(into / "qwen3moe-30b-Q4_0.gguf", gf.qwen3moe_30b_a3b_spec()))
    gf.write_sparse(into / EDGE_MOE, gf.qwen3moe_30b_a3b_spec(), "F16")  # --best's edges only
    return paths


def command_lines(models: list[Path]) -> list[list[str]]:
    out: list[list[str]] = []
    for log in sorted((FIXTURES / "llama-logs").glob("*.log")):
        out += [["explain", str(log)], ["explain", str(log), "--json"]]
    for topo in sorted((FIXTURES / "real" / "topo").glob("*.txt")):
        out += [["topo", "--file", str(topo)], ["topo", "--file", str(topo), "--json"]]
    for log in sorted((FIXTURES / "real" / "nccl").glob("*.txt")):
        verb = "tests" if log.name.startswith("T") else "log"
        out += [["nccl", verb, str(log)], ["nccl", verb, str(log), "--json"]]
    for profile in ("kaggle-2xt4", "2x3090-nvlink", "8xh100-sxm", "mixed-4090-3090", "8xmi300x"):
        out += [
            ["topo", "--source", f"sim:{profile}"],
            ["topo", "--source", f"sim:{profile}", "--json"],
        ]
    for model in models:
        for flags in FLAG_SETS:
            for gpus in DEVICE_SPECS:
                line = ["fit", str(model), *flags, "--gpus", gpus, *HOST]
                out += [line, [*line, "--json"]]
        for gpus in DEVICE_SPECS[:2]:
            line = ["quant", str(model), "--gpus", gpus, *HOST]
            out += [line, [*line, "--json"]]
    for model in models[:2]:
        for goal in ("context", "speed", "decode", "prompt"):
            out.append(
                ["fit", str(model), "-c", "8192", "--gpus", "4090,3090", *HOST, "--best", goal]
            )
    for goal in ("context", "decode"):  # a MoE whose experts the host must take in part
        out.append(["fit", str(models[-1]), "--gpus", "8GiB,8GiB", *HOST, "--best", goal])
    # the search's edges (a F16 MoE): GPUs short of one unit of context, a host that binds
    f16 = models[-1].parent / EDGE_MOE
    for gpus, host in (
        ("24GiB,12GiB,12GiB", "16GiB"),
        ("24GiB,12GiB,12GiB", "64GiB"),
        ("16GiB,8GiB", "16GiB"),
    ):
        for goal in ("context", "speed", "gpu-only"):
            line = ["fit", str(f16), "-c", "8192", "--gpus", gpus, "--host-free", host]
            out.append([*line, "--best", goal])
    missing = str(models[0].parent / "missing.gguf")
    out += [
        ["fit", missing],
        ["fit", str(models[0]), "--bogus-flag"],
        ["fit", str(models[0]), "--gpus", "nonsense"],
        ["explain", str(models[0])],
        ["topo", "--file", missing],
        ["quant", missing, "--json"],
    ]
    return out


def run(tree: Path, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", "lltui", *argv],
        cwd=tree,  # python -m imports this tree's lltui (the working directory comes first)
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def environment(home: Path) -> dict[str, str]:
    keep = ("PATH", "LANG", "SYSTEMROOT", "PYTHONPYCACHEPREFIX")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), COLUMNS="100", LINES="40", TZ="UTC", NO_COLOR="1")
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the revision to compare with (e.g. main~3)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--show", type=int, default=5, help="diffs shown")
    ap.add_argument("--only", help="only the command lines whose first word is this")
    ap.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="REGEX",
        help="(repeatable) text to take out of both outputs before comparing (a change said "
        "in a commit); a line left empty goes, and trailing commas with it (a JSON key added)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lltui-golden-") as tmp_text:
        tmp = Path(tmp_text)
        base = tmp / "base"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(base), args.base],
            check=True,
        )
        try:
            return compare(tmp, base, args)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)])


def compare(tmp: Path, base: Path, args: argparse.Namespace) -> int:
    inputs = tmp / "inputs"
    inputs.mkdir()
    lines = command_lines(write_models(inputs))
    if args.only:
        lines = [line for line in lines if line[0] == args.only]
    home = tmp / "home"
    home.mkdir()
    env = environment(home)
    for tree in (ROOT, base):  # each tree's own lltui is the one run
        where = subprocess.run(
            [sys.executable, "-c", "import lltui; print(lltui.__file__)"],
            cwd=tree, env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert Path(where).is_relative_to(tree), f"{tree} imports lltui from {where}"

    def both(argv: list[str]) -> tuple[list[str], tuple[int, str, str], tuple[int, str, str]]:
        return argv, run(base, argv, env), run(ROOT, argv, env)

    ignored = [re.compile(p) for p in args.ignore]

    def seen(out: tuple[int, str, str]) -> tuple[int, str, str]:
        if not ignored:
            return out
        return out[0], _without(out[1], ignored), _without(out[2], ignored)

    differ = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for argv, old, new in pool.map(both, lines):
            old, new = seen(old), seen(new)
            if old != new:
                differ.append((argv, old, new))
    print(f"{len(lines)} command lines: {len(lines) - len(differ)} identical, {len(differ)} differ")
    for argv, old, new in differ[: args.show]:
        shown = " ".join(a.replace(str(tmp), "$TMP").replace(str(ROOT), "$ROOT") for a in argv)
        print(f"\n$ lltui {shown}   (exit {old[0]} -> {new[0]})")
        for name, a, b in (("stdout", old[1], new[1]), ("stderr", old[2], new[2])):
            diff = list(
                difflib.unified_diff(a.splitlines(), b.splitlines(), name, name, lineterm="")
            )
            print("\n".join(diff[:30]))
    shutil.rmtree(home, ignore_errors=True)
    return 1 if differ else 0


def _without(text: str, ignored: list[re.Pattern[str]]) -> str:
    kept = []
    for line in text.splitlines():
        for pattern in ignored:
            line = pattern.sub("", line)
        line = line.rstrip().rstrip(",")
        if line.strip():
            kept.append(line)
    return "\n".join(kept)


if __name__ == "__main__":
    sys.exit(main())
