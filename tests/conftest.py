import os

import pytest


@pytest.fixture(autouse=True)
def environment_put_back():
    """Code under test that sets variables itself (setup_nccl_environment) leaves none for
    the next test in the worker: monkeypatch puts back only what a test set through it."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True)
def isolated_config(tmp_path, monkeypatch):
    """No test reads the user's config, themes or caches by accident."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    # what lltui bench measured on the machine running the tests must not calibrate them
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    for var in ("LLTUI_CONFIG", "LLTUI_INTERVAL", "LLTUI_THEME", "LLTUI_SOURCE"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path / "config" / "lltui"


@pytest.fixture(autouse=True)
def no_rpc_probe_off_this_machine(monkeypatch):
    """Tests name RPC servers on other machines (10.0.0.x, a:1) to check what an unknown
    server's memory does; the probe must not send a packet there from a test. A loopback
    endpoint (a test's own server) is probed for real."""
    import functools
    import ipaddress

    from lltui.sources.llama import rpc_probe

    real = rpc_probe._connect

    @functools.wraps(real)  # a test of the probe itself takes the real one as __wrapped__
    def loopback_only(endpoint, host, port, timeout_s):
        try:
            loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise rpc_probe.RpcProbeError(f"rpc-server {endpoint}: cannot connect (a test)")
        return real(endpoint, host, port, timeout_s)

    monkeypatch.setattr(rpc_probe, "_connect", loopback_only)
