"""How close `lltui fit` is for the parts beside the model (a draft model, a multimodal
projector, LoRA adapters), and what counting them costs.

Runs the pinned llama-server CPU build (`lltui llama install`) at `-lv 4` on tiny generated
files (tests/support/gguf_factory.py) and compares with the estimate:

- the draft's context (weights, KV, output exact to the log's 0.01 MiB; compute error %),
  with several draft flags;
- the LoRA adapter's buffer lines (exact);
- the projector: llama-server's own worst case (`[mtmd] estimated worst-case memory usage`,
  weights + compute) and clip.cpp's compute buffer, which lltui approximates (error %).

Time: an estimate with the parts against one without, in the same run, as a ratio.

    .venv/bin/python bench/fit_parts.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

from support import gguf_factory as gf  # noqa: E402
from support.llama_fixture import build_llama, llama_server  # noqa: E402

from lltui.core.cmdline.flags import parse_llama_args  # noqa: E402
from lltui.core.fit.estimate import ExtraModels, FitOptions, FitResult, estimate  # noqa: E402
from lltui.core.gguf.reader import read_gguf  # noqa: E402
from lltui.core.llamalog.reader import parse_log  # noqa: E402
from lltui.core.memory.results import PartEstimate  # noqa: E402
from lltui.core.units import MIB  # noqa: E402

FIXTURE = ["-t", "1", "-c", "512"]
DRAFT_FLAGS = {
    "draft f16, -np 2, -fa on": ["-c", "1024", "-np", "2", "-fa", "on"],
    "draft q8 KV, -np 3": ["-c", "2048", "-np", "3", "-ctkd", "q8_0", "-ctvd", "q8_0"],
    "draft, -kvu, no mmap, -fa off": [
        "-c",
        "1536",
        "-np",
        "2",
        "-kvu",
        "-lm",
        "none",
        "-fa",
        "off",
    ],
    "draft, auto slots": ["-c", "4096"],
}


def ours(model: Path, flags: list[str]) -> FitResult:
    st = parse_llama_args([*FIXTURE, *flags])
    extra = ExtraModels(
        draft=read_gguf(st.draft_model) if st.draft_model else None,
        mmproj=read_gguf(st.mmproj) if st.mmproj else None,
        loras=tuple(read_gguf(p) for p in st.lora),
    )
    return estimate(read_gguf(model), st, (), FitOptions(search=False), extra)


def part(res: FitResult, name: str) -> PartEstimate:
    return next(p for p in res.parts if p.part == name)


def main() -> int:
    bins = build_llama()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        main_model = root / "main.gguf"
        gf.write_model(main_model, gf.llama_spec(), "Q8_0")
        draft = root / "draft.gguf"
        gf.write_model(draft, gf.llama_spec(n_layer=2, n_embd=128, n_ff=256), "F16", seed=1)
        mmproj = gf.write_mmproj(root / "mmproj.gguf", 256)
        lora = gf.write_lora(root / "lora.gguf", gf.llama_spec())

        print(f"{'case':<34} {'exact buffers':>14} {'compute err %':>14}")
        for label, extra in DRAFT_FLAGS.items():
            flags = [*extra, "-md", str(draft), "--no-warmup"]
            with llama_server(bins, main_model, root / "s.log", flags) as s:
                log = parse_log(s.log()).memory
            d = part(ours(main_model, flags), "draft")
            logged = {
                (b.name, k): v
                for b in log.sizes("draft")
                for k, v in (("model", b.model_mib), ("KV", b.kv_mib), ("output", b.output_mib))
                if v
            }
            want: dict[tuple[str, str], float] = {}
            for name, kind, nbytes in d.buffers:
                if kind != "compute" and nbytes:
                    key = (name, kind)
                    want[key] = round(want.get(key, 0.0) + float(f"{nbytes / MIB:.2f}"), 2)
            exact = sum(round(abs(want.get(k, 0) - v), 3) == 0 for k, v in logged.items())
            theirs = sum(b.compute_mib for b in log.sizes("draft"))
            mine = sum(b for _, k, b in d.buffers if k == "compute") / MIB
            err = 100 * (mine - theirs) / theirs if theirs else 0.0
            print(f"{label:<34} {exact:>7}/{len(logged):<6} {err:>+13.1f}")

        flags = ["-c", "1024", "-np", "1", "--lora", str(lora), "--mmproj", str(mmproj)]
        with llama_server(bins, main_model, root / "s.log", flags) as s:
            log = parse_log(s.log()).memory
        res = ours(main_model, flags)
        lo = {n: round(b / MIB, 2) for n, _, b in part(res, "lora").buffers}
        logged = {b.name: b.model_mib for b in log.sizes("lora")}
        print(f"{'LoRA buffers':<34} {'exact' if lo == logged else 'DIFFERENT':>14}")
        mm = part(res, "mmproj")
        total = sum(x.weights_bytes + x.compute_bytes for x in mm.devices) / MIB
        clip = {b.name: b.compute_mib for b in log.sizes("mmproj")}.get("CPU", 0.0)
        mm_compute = sum(x.compute_bytes for x in mm.devices) / MIB
        print(
            f"{'projector worst case (MiB)':<34} lltui {total:.2f}, "
            f"llama-server {log.mmproj_estimate_mib:.2f}"
        )
        print(
            f"{'projector compute (approximate)':<34} lltui {mm_compute:.3f} MiB, clip.cpp "
            f"{clip:.2f} MiB ({100 * (mm_compute - clip) / clip:+.0f} % at its 0.01 MiB print)"
        )

        flags = ["-c", "1024", "-md", str(draft), "--mmproj", str(mmproj), "--lora", str(lora)]
        st = parse_llama_args(flags)
        model = read_gguf(main_model)
        extra = ExtraModels(read_gguf(draft), read_gguf(mmproj), (read_gguf(lora),))
        opts = FitOptions(search=False)
        n = 30

        def timed(with_parts: bool) -> float:
            t0 = time.perf_counter()
            for _ in range(n):
                estimate(model, st, (), opts, extra if with_parts else None)
            return (time.perf_counter() - t0) / n

        timed(True)
        base, withp = min(timed(False) for _ in range(3)), min(timed(True) for _ in range(3))
        print(
            f"time: {withp * 1000:.1f} ms with the three parts, {base * 1000:.1f} ms without "
            f"(x{withp / base:.2f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
