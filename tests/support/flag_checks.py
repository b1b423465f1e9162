"""How fit, launch and the API answer one command line from tests/support/flag_cases.py: each check
returns ``None`` (accepted, with the case's settings) or the one-line error."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from lltui.cli import main
from lltui.core.cmdline.flags import BinaryFlags, LlamaArgs, parse_llama_args
from lltui.core.cmdline.launch_spec import LaunchError, LaunchSpec, build_command
from lltui.core.cmdline.multigpu import MultiGPUConfig
from support.flag_cases import Case

# what fit --json reports as given, for the settings it passes through unchanged
FIT_JSON_KEYS = ("type_k", "type_v", "split_mode", "load_mode", "kv_offload")


def settings_of(args: LlamaArgs) -> dict[str, Any]:
    return asdict(args)


def check_parser(case: Case) -> str | None:
    try:
        args = parse_llama_args(case.argv)
    except ValueError as exc:
        return str(exc)
    got = settings_of(args)
    for key, want in case.settings.items():
        assert got[key] == want, (case.id, key, got[key], want)
    return None


def check_launch(case: Case, model: str, binary: BinaryFlags | None = None) -> str | None:
    """The launch path: the flags read into a spec, then the exact command for the build."""
    try:
        spec = LaunchSpec.of(model, case.argv)
        argv = build_command(spec, "llama-server", binary).argv
    except LaunchError as exc:
        return str(exc)
    same_settings(case, list(argv[1:]))
    return None


def same_settings(case: Case, server_argv: list[str]) -> None:
    """What launch hands llama-server reads back as the settings the user gave."""
    want = parse_llama_args(case.argv)
    got = parse_llama_args(server_argv)
    for key in (*case.settings, "overrides", "rpc", "devices"):
        assert getattr(got, key) == getattr(want, key), (case.id, key)


def check_fit(case: Case, model: Path, capsys: pytest.CaptureFixture[str]) -> str | None:
    # the host alone, but -sm tensor, which llama.cpp loads only with a GPU to split over
    # (its parser takes it either way: the flag's verdict is the parser's)
    tensor = parse_llama_args(case.argv).split_mode == "tensor" if case.lltui == "ok" else False
    gpus = "2x24GiB" if tensor else "cpu"
    rc = main(["fit", str(model), *case.argv, "--gpus", gpus, "--json"])
    out, err = capsys.readouterr()
    if rc != 0:
        assert rc == 2 and "Traceback" not in err, (case.id, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1, (case.id, err)
        return lines[0]
    data = json.loads(out)["settings"]
    want = parse_llama_args(case.argv)
    for key in FIT_JSON_KEYS:
        assert data[key] == getattr(want, key), (case.id, key)
    if any(want.tensor_split):
        assert data["tensor_split"] == list(want.tensor_split), case.id
    return None


def check_api(case: Case) -> str | bool | None:
    """MultiGPUConfig for the -ts and -mg cases (``False``: the API has nothing to say)."""
    if case.argv[0] in ("-ts", "--tensor-split") and len(case.argv) == 2:
        parts = case.argv[1].replace("/", ",").split(",")
        if "" in parts:
            return False  # the API takes numbers, not text with holes
        try:
            raw = [float(p) for p in parts]
        except ValueError:
            return False
        if case.lltui == "ok":
            total = sum(raw)
            raw = [x / total for x in raw]
        try:
            cfg = MultiGPUConfig(n_gpu=len(raw), tensor_split=raw)
        except ValueError as exc:
            return str(exc)
        flags = cfg.to_llama_args()
        written = parse_llama_args(flags).tensor_split
        assert all(math.isclose(a, b) for a, b in zip(written, raw, strict=True)), case.id
        return None
    if case.argv[0] in ("-mg", "--main-gpu") and len(case.argv) == 2:
        try:
            index = int(case.argv[1])
        except ValueError:
            return False
        try:
            cfg = MultiGPUConfig(n_gpu=max(index + 1, 2), main_gpu=index)
        except ValueError as exc:
            return str(exc)
        assert parse_llama_args(cfg.to_llama_args()).main_gpu == index
        return None
    return False


def names_the_flag(case: Case, message: str) -> bool:
    flag = case.flag.split("=", 1)[0]
    return flag in message or flag.replace("_", "-") in message
