"""The NCCL configuration files of this machine, read as NCCL would (lltui.core.nccl.conf)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace

from lltui.core.cmdline.secrets import REDACTED, secret_name
from lltui.core.nccl.conf import ConfFile, NcclSettings, apply_conf, conf_paths, parse_conf

MAX_CONF_BYTES = 1 << 20  # far past any real one; /dev/zero as a file ends here


def _passwd_home() -> str | None:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_dir
    except (ImportError, KeyError):
        return None


def read_conf_file(path: str, why: str, version: tuple[int, ...] | None) -> ConfFile:
    try:  # not blocking: a FIFO without a writer reads as empty instead of hanging lltui
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
            data = f.read(MAX_CONF_BYTES) or b""
    except FileNotFoundError:
        return ConfFile(path, why, "not found")
    except OSError as exc:  # NCCL skips a file it cannot read, as one that is not there
        return ConfFile(path, why, f"not read: {exc.strerror or exc}")
    return ConfFile(path, why, "read", tuple(parse_conf(path, data, version)))


def nccl_settings(environ: Mapping[str, str], version: tuple[int, ...] | None) -> NcclSettings:
    """``environ`` plus what NCCL ``version`` (None: the newest) adds from its files; a value
    whose name says it is a secret (a plugin's token), from either, is ``***`` here, so that
    nothing shown from them (text, JSON, findings) can hold it."""
    paths = conf_paths(environ, version, _passwd_home())
    files = [read_conf_file(p, why, version) for p, why in paths]
    masked = [
        replace(f, lines=tuple(replace(c, value=_masked(c.name, c.value)) for c in f.lines))
        for f in files
    ]
    return apply_conf({k: _masked(k, v) for k, v in environ.items()}, masked)


def _masked(name: str, value: str) -> str:
    return REDACTED if value and secret_name(name) else value
