"""What starting llama-server needs before a process exists: the binary and its flags, and
the checks of the model and key file. Shared by ``lltui launch`` and the launch view."""

from __future__ import annotations

import os
from pathlib import Path

from lltui.core.cmdline.launch_spec import BinaryFlags, LaunchError, LaunchSpec
from lltui.paths import NotASmallFile, read_small_file


def find_binary(required: bool) -> tuple[str, BinaryFlags | None, str | None, str | None]:
    """The llama-server path, its probed flags, where it was found, and (when not found and
    not ``required``) why. Raises LaunchError (code 1) when it is required and missing."""
    from lltui.sources.llama.binary import LlamaBinaryError, find_llama_server, probe
    from lltui.sources.llama.supervisor import binary_flags

    try:
        found = find_llama_server()
        probed = probe(found.path)
    except LlamaBinaryError as exc:
        if required:
            raise LaunchError(str(exc), 1) from None
        return "llama-server", None, None, str(exc)
    return str(found.path), binary_flags(probed), found.origin, None


def check_inputs(spec: LaunchSpec) -> tuple[str, ...]:
    """Bad input caught before anything starts, as LaunchError (code 2).

    Returns the keys in the API key file (read as llama-server reads it), to be masked."""
    model = Path(spec.model)
    if not model.exists():
        raise LaunchError(f"model not found: {spec.model}", 2)
    if not model.is_file():
        raise LaunchError(f"the model is not a file: {spec.model}", 2)
    if not os.access(model, os.R_OK):
        raise LaunchError(f"the model is not readable: {spec.model}", 2)
    if spec.api_key_file is not None:
        return read_key_file(spec.api_key_file)
    return ()


def read_key_file(path: str) -> tuple[str, ...]:
    """The keys in an API key file, as llama-server reads them (one a line, ``#`` comments);
    a file that is not a regular file, or larger than any list of keys, is bad input."""
    try:
        data = read_small_file(path)
    except OSError as exc:
        raise LaunchError(f"cannot read the API key file {path}: {exc.strerror}", 2) from None
    except NotASmallFile as exc:
        raise LaunchError(f"the API key file {path} is {exc}: not a key list", 2) from None
    lines = data.decode("utf-8", errors="replace").split("\n")
    keys = [ln for ln in lines if ln and not ln.startswith("#")]
    if not keys:
        raise LaunchError(f"the API key file {path} holds no key", 2)
    return tuple(keys)
