"""``lltui doctor``: what works here and what to do about what does not."""

from __future__ import annotations

import argparse
from typing import Any

from lltui.commands import print_json


def register(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="what works here: driver, NVML, CUDA, nvidia-smi, libnccl, llama-server, config",
        description="Exit code 0 when a real GPU can be monitored here, 1 when it cannot.",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from lltui.core.doctor import checks_ok, checks_to_json, checks_to_text
    from lltui.services.doctor import run_checks

    checks = run_checks(getattr(args, "config", None))
    if args.json:
        print_json(checks_to_json(checks))
    else:
        import shutil

        print(checks_to_text(checks, shutil.get_terminal_size(fallback=(0, 0)).columns))
    return 0 if checks_ok(checks) else 1
