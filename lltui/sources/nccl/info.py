"""The seed API's NCCL helpers, with the signatures and defaults users know:
``is_nccl_available``, ``get_nccl_version``, ``get_nccl_info``, ``print_nccl_info``,
``setup_nccl_environment``, ``kaggle_nccl_config``."""

from __future__ import annotations

import os
import socket
import warnings
from typing import Any

from lltui.core.api_args import check_arg
from lltui.core.nccl.findings import socket_ifname_matches
from lltui.core.nccl.variables import DEBUG_LEVELS, ib_disabled, p2p_disabled
from lltui.sources.nccl.errors import NcclUnavailable
from lltui.sources.nccl.finder import NCCL_SONAME, lib_path_arg
from lltui.sources.nccl.library import load_nccl, probe_nccl


def is_nccl_available(lib_path: str | os.PathLike[str] | None = NCCL_SONAME) -> bool:
    """Whether libnccl can be loaded here (no GPU needed)."""
    try:
        load_nccl(lib_path_arg(lib_path))
    except NcclUnavailable:
        return False
    return True


def get_nccl_version(lib_path: str | os.PathLike[str] | None = NCCL_SONAME) -> str | None:
    """The NCCL version ("2.18.5"), or None when NCCL cannot be loaded."""
    try:
        return load_nccl(lib_path_arg(lib_path)).version
    except NcclUnavailable:
        return None


def get_nccl_info() -> dict[str, Any]:
    """Availability, version, library path and the NCCL environment, as a dict."""
    probe = probe_nccl()
    env = os.environ
    return {
        "available": probe.available,
        "version": probe.version,
        "lib_path": probe.path or NCCL_SONAME,
        "path": probe.path,
        "found_by": probe.found_by,
        "nccl_p2p_disable": env.get("NCCL_P2P_DISABLE", "0"),
        "nccl_ib_disable": env.get("NCCL_IB_DISABLE", "0"),
        "nccl_socket_ifname": env.get("NCCL_SOCKET_IFNAME"),
        "nccl_debug": env.get("NCCL_DEBUG"),
        "env": {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")},
        "reason": probe.reason,
    }


def print_nccl_info() -> None:
    """Print NCCL's availability, version and P2P/IB settings."""
    info = get_nccl_info()
    # as NCCL reads them (P2P off for 1 only, IB off for any number but 0), as lltui nccl says
    p2p_off, ib_off = p2p_disabled(info["env"]), ib_disabled(info["env"])
    print("NCCL Info")
    print("---------")
    print(f"Available : {info['available']}")
    print(f"Version   : {info['version'] or '-'}")
    print(f"Library   : {info['path'] or info['reason'] or '-'}")
    print(f"P2P       : {'disabled' if p2p_off else 'enabled'}")
    print(f"IB        : {'disabled' if ib_off else 'enabled'}")


def local_interfaces() -> list[str]:
    """Network interface names on this host; empty when the OS will not say."""
    try:
        return [name for _idx, name in socket.if_nameindex()]
    except OSError:
        return []


def setup_nccl_environment(
    disable_p2p: bool = False,
    disable_ib: bool = True,
    socket_ifname: str | None = "eth0",
    debug: str | None = None,
) -> dict[str, str]:
    """Set NCCL_* variables in this process (before NCCL starts; it reads them once).

    NCCL_SOCKET_IFNAME is set only when it names an interface this host has: an interface
    that does not exist stops NCCL from starting at all, so a missing one is skipped with a
    warning. Returns what was set. A ``debug`` level NCCL does not know is a ValueError
    (NCCL would log nothing extra), set nothing; an argument of another type a TypeError.
    """
    check_arg("disable_p2p", disable_p2p, (bool,), "True or False")
    check_arg("disable_ib", disable_ib, (bool,), "True or False")
    check_arg("socket_ifname", socket_ifname, (str, type(None)), "a string, or None")
    check_arg("debug", debug, (str, type(None)), "a string, or None")
    level = (debug or "").strip().upper()
    if level and level not in DEBUG_LEVELS:  # NCCL logs nothing extra for it
        raise ValueError(
            f"debug: {debug!r} is not a level NCCL knows (use {', '.join(DEBUG_LEVELS)})"
        )
    applied = {
        "NCCL_P2P_DISABLE": "1" if disable_p2p else "0",
        "NCCL_IB_DISABLE": "1" if disable_ib else "0",
    }
    if socket_ifname:
        have = local_interfaces()
        if not have or socket_ifname_matches(socket_ifname, have):
            applied["NCCL_SOCKET_IFNAME"] = socket_ifname
        else:
            warnings.warn(
                f"NCCL_SOCKET_IFNAME={socket_ifname} not set: no such interface here "
                f"(have: {', '.join(have)})",
                RuntimeWarning,
                stacklevel=2,
            )
    if level:
        applied["NCCL_DEBUG"] = level
    os.environ.update(applied)
    return applied


def kaggle_nccl_config() -> dict[str, str]:
    """The NCCL environment for Kaggle's two T4s on PCIe."""
    return {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "WARN",
    }
