"""Everything of lltui the fuzz suite calls, in one place: when a module moves, change it here.

Most targets go through the CLI (``lltui.cli.main``). The parsers no subcommand reads (the
nvidia-smi ``--query-gpu`` CSV, llama-server logs and /metrics, the calibration store, which
lives at a path of its own) are called directly; each
entry names the function and the exceptions that count as a domain error (a refusal with a
message) rather than a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lltui.cli import main as cli_main


def _smi_csv(text: str, fields: list[str] | None = None) -> Any:
    from lltui.core.monitor.smi_csv import gpu_rows, parse_csv

    return gpu_rows(parse_csv(text, fields))


def _llama_log(text: str) -> Any:
    from lltui.core.llamalog.reader import parse_log

    return parse_log(text)


def _metrics(text: str) -> Any:
    from lltui.core.llama.metrics import parse_metrics

    return parse_metrics(text)


def _router_log(text: str) -> Any:
    from lltui.core.llamalog.router import parse_router_log

    return parse_router_log(text)


def _preset(text: str) -> Any:
    from lltui.core.cmdline.preset import parse_preset, section_words

    preset = parse_preset(text)
    # every section's flags too: what the router would pass each model's server
    return [section_words(s) for s in (preset.global_section, *preset.sections)]


def _calib_store(text: str) -> Any:
    """A calibration store file read as every fit, quant, launch and bench reads it; what it
    reads must write back as strict JSON (no NaN or infinity got through)."""
    from lltui.sources.gpu.rig_store import decode_store, encode_store

    record = decode_store(text)
    return encode_store(record)


def _dcgm(text: str) -> Any:
    from support.fuzz_classes import check_dcgm

    return check_dcgm(text)


def _domain_errors(name: str) -> tuple[type[BaseException], ...]:
    if name == "smi_csv":
        from lltui.core.monitor.smi_csv import SmiParseError

        return (SmiParseError,)
    if name == "metrics":
        from lltui.core.llama.metrics import MetricsFormatError

        return (MetricsFormatError,)
    if name == "preset":
        from lltui.core.cmdline.preset import PresetError

        return (PresetError,)
    if name == "calib_store":
        from lltui.sources.gpu.rig_store import StoreUnreadable

        return (StoreUnreadable,)
    return ()  # parse_log takes any text


# name -> the function called with the case's text (and its keyword arguments)
PARSERS: dict[str, Callable[..., Any]] = {
    "smi_csv": _smi_csv,
    "llama_log": _llama_log,
    "metrics": _metrics,
    "router_log": _router_log,
    "preset": _preset,
    "dcgm": _dcgm,
    "calib_store": _calib_store,
}


def domain_errors(name: str) -> tuple[type[BaseException], ...]:
    return _domain_errors(name)


__all__ = ["PARSERS", "cli_main", "domain_errors"]
