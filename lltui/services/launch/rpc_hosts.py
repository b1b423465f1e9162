"""rpc-server on each ``--rpc-host`` for a launch, over ssh: the hosts read, what each exposes
said before anything starts, the servers started with the launch and stopped with it however
lltui leaves (:class:`RpcHosts`, a context)."""

from __future__ import annotations

from collections.abc import Sequence

from lltui.core.cmdline.rpc_hosts import RpcHost, RpcHostError, exposure_warning, parse_rpc_host
from lltui.sources.llama.rpc_hosts import RpcHosts as RpcHosts  # the launch holds the context
from lltui.sources.llama.rpc_hosts import RpcStartError as RpcStartError


def read_rpc_hosts(
    hosts: Sequence[str], *, bind: str | None, binary: str | None
) -> tuple[list[RpcHost], list[str]]:
    """The hosts' specs, and a warning for each that exposes an unauthenticated server;
    ValueError with one line for a host that cannot be read."""
    try:
        specs = [parse_rpc_host(h, bind=bind, binary=binary) for h in hosts]
    except RpcHostError as exc:
        raise ValueError(str(exc)) from None
    return specs, [w for w in map(exposure_warning, specs) if w]
