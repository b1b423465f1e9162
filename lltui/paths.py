"""Where lltui keeps its files, by the XDG base directory rules, in one place.

- config: ``$XDG_CONFIG_HOME/lltui`` (``~/.config/lltui``): config.toml, themes/, profiles/
- cache: ``$XDG_CACHE_HOME/lltui`` (``~/.cache/lltui``): llama.cpp builds, GGUF headers
- state: ``$XDG_STATE_HOME/lltui`` (``~/.local/state/lltui``): logs of servers left running
- data: ``$XDG_DATA_HOME/lltui`` (``~/.local/share/lltui``): what lltui measured on this rig
- runtime: ``$XDG_RUNTIME_DIR/lltui`` (or ``lltui-UID`` in the temporary folder): sockets

A relative ``XDG_*`` value is ignored, as the specification says. ``env`` defaults to the
process environment; tests pass their own.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

APP = "lltui"


def _base(name: str, default: tuple[str, ...], env: Mapping[str, str] | None) -> Path:
    env = os.environ if env is None else env
    value = env.get(name, "")
    if value and os.path.isabs(value):
        return Path(value)
    home = env.get("HOME") or os.path.expanduser("~")
    return Path(home, *default)


def config_home(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CONFIG_HOME``, else ``~/.config``."""
    return _base("XDG_CONFIG_HOME", (".config",), env)


def cache_home(env: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME``, else ``~/.cache`` (where other tools keep theirs too)."""
    return _base("XDG_CACHE_HOME", (".cache",), env)


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    return config_home(env) / APP


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    return cache_home(env) / APP


def state_dir(env: Mapping[str, str] | None = None) -> Path:
    return _base("XDG_STATE_HOME", (".local", "state"), env) / APP


def data_dir(env: Mapping[str, str] | None = None) -> Path:
    return _base("XDG_DATA_HOME", (".local", "share"), env) / APP


def themes_dir(env: Mapping[str, str] | None = None) -> Path:
    return config_dir(env) / "themes"


def profiles_dir(env: Mapping[str, str] | None = None) -> Path:
    return config_dir(env) / "profiles"


def default_config_path(env: Mapping[str, str] | None = None) -> Path:
    return config_dir(env) / "config.toml"


def runtime_dir() -> Path:
    """A private folder for sockets (ssh control masters): ``$XDG_RUNTIME_DIR/lltui``, or
    ``lltui-UID`` in the temporary folder; created mode 0700. OSError when it cannot be made
    private (an existing folder someone else owns)."""
    import tempfile

    base = os.environ.get("XDG_RUNTIME_DIR", "")
    if base and os.path.isabs(base) and os.path.isdir(base):
        path = Path(base) / APP
    else:
        path = Path(tempfile.gettempdir()) / f"{APP}-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(f"{path} is not a folder of this user")
    if st.st_mode & 0o077:
        path.chmod(0o700)
    return path


# -- files of lltui's own ------------------------------------------------------------------

PRIVATE_MODE = 0o600


def open_private(
    path: str | os.PathLike[str], *, binary: bool = False, newline: str | None = None
) -> IO[Any]:
    """``path`` opened for writing, created mode 0600 by ``os.open`` itself (never by
    changing the umask, which would change it for every thread of the process), for files
    that may hold another user's data: recordings, screenshots. A file already there is
    truncated and, where lltui owns it, narrowed to 0600."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, PRIVATE_MODE)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_mode & 0o077:
            with contextlib.suppress(OSError):  # someone else's file: not ours to change
                os.fchmod(fd, PRIVATE_MODE)
        if binary:
            return os.fdopen(fd, "wb")
        return os.fdopen(fd, "w", encoding="utf-8", newline=newline)
    except BaseException:
        os.close(fd)
        raise


SMALL_FILE_BYTES = 1024 * 1024  # a key, a token or a config: /dev/zero is none of them


class NotASmallFile(ValueError):
    """A file that cannot be what a key, token or config file is; ``str()`` says why."""


def read_small_file(path: str | os.PathLike[str], limit: int = SMALL_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes: NotASmallFile for anything
    else (a FIFO, which would hang the read, a device, a larger file); OSError where it
    cannot be opened."""
    if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: a FIFO's open blocks
        raise NotASmallFile("not a regular file")
    with open(path, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # replaced since the stat
            raise NotASmallFile("not a regular file")
        data = f.read(limit + 1)
    if len(data) > limit:
        raise NotASmallFile(f"over {limit // 1024} KiB")
    return data


def current_umask() -> int:
    """The process's umask, read from /proc rather than by setting it (``os.umask`` both
    sets and returns it: for a moment, a file another thread creates gets the new one).
    0o077 where it cannot be read: callers then keep a file private."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    return 0o077
