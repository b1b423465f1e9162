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

import os
from collections.abc import Mapping
from pathlib import Path

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
    import stat
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
