"""A real Prometheus server scraping two `lltui exporter` processes, read back through
``--source prom:``: the values Prometheus holds are the values the exporters served.

Needs Debian's ``prometheus`` package (``/usr/bin/prometheus``); scripts/test installs it
when it runs as root with apt. The server runs from this test, never as a service."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from support.llama_fixture import free_port
from support.prom_helpers import (
    PROM_FIXTURES,
    Exporter,
    Stub,
    exporter,
    run_cli,
    stub_server,
    wait_until,
)

from lltui.sources.gpu.prom import PromSource, ScrapeSource

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

pytestmark = pytest.mark.skipif(
    not os.access(PROMETHEUS, os.X_OK),
    reason="no Prometheus server: /usr/bin/prometheus is missing (apt-get install prometheus)",
)

FIELDS = ("memory_used", "memory_free", "util_gpu", "power_w", "temp_c", "energy_mj",
          "sm_clock_mhz", "pcie_rx_kbs", "fan_pct", "pstate")  # fmt: skip

CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: lltui
    static_configs:
      - targets: [{targets}]
"""


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=1.0, trust_env=False).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def _start_prometheus(tmp: Path, targets: list[str], extra_jobs: str = "") -> Iterator[str]:
    config = tmp / "prometheus.yml"
    config.write_text(CONFIG.format(targets=", ".join(f'"{t}"' for t in targets)) + extra_jobs)
    port = free_port()
    log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: proc.poll() is not None or _ready(url), timeout=60, what="Prometheus ready"
        )
        if proc.poll() is not None:
            raise AssertionError((tmp / "prometheus.log").read_text()[-2000:])
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        log.close()


@pytest.fixture
def two_exporters_and_prometheus(
    tmp_path: Path,
) -> Iterator[tuple[str, dict[str, str], dict[str, Exporter]]]:
    # one sample each (a long interval): what the exporter serves does not move
    with (
        exporter("--source", "sim:2x3090-nvlink", "--host-label", "rig-a",
                 "--interval", "3600") as a,
        exporter("--source", "sim:4xl4", "--host-label", "rig-b", "--interval", "3600") as b,
    ):  # fmt: skip
        targets = [a.url.split("//", 1)[1].split("/", 1)[0], b.url.split("//", 1)[1].split("/")[0]]
        with _start_prometheus(tmp_path, targets) as url:
            yield url, {"rig-a": a.url, "rig-b": b.url}, {"rig-a": a, "rig-b": b}


def _scraped_both(prom_url: str) -> bool:
    src = PromSource(prom_url)
    try:
        hosts = src.poll_hosts()
    except Exception:
        return False
    finally:
        src.close()
    return set(hosts) == {"rig-a", "rig-b"} and all(
        r.gpus and all(g.memory_used is not None for g in r.gpus) for r in hosts.values()
    )


def test_prometheus_holds_what_the_exporters_served(two_exporters_and_prometheus) -> None:
    prom_url, exporters, _procs = two_exporters_and_prometheus
    wait_until(lambda: _scraped_both(prom_url), timeout=60, what="Prometheus scraped both")
    src = PromSource(prom_url)
    from_prom = src.poll_hosts()
    src.close()
    for host, url in exporters.items():
        direct_src = ScrapeSource(url)
        direct = direct_src.poll_hosts()[host]
        direct_src.close()
        via = from_prom[host]
        assert via.simulated and via.info.driver_version == direct.info.driver_version
        assert [g.info.uuid for g in via.gpus] == [g.info.uuid for g in direct.gpus]
        for got, want in zip(via.gpus, direct.gpus, strict=True):
            assert got.info.name == want.info.name and got.memory_total == want.memory_total
            for attr in FIELDS:
                assert getattr(got, attr) == getattr(want, attr), (host, attr)
            assert got.processes == want.processes
        assert via.host.mem_total == direct.host.mem_total
    assert len(from_prom["rig-a"].gpus) == 2 and len(from_prom["rig-b"].gpus) == 4


def test_a_host_of_prometheus_as_the_monitor_source(two_exporters_and_prometheus) -> None:
    prom_url, exporters, procs = two_exporters_and_prometheus
    wait_until(lambda: _scraped_both(prom_url), timeout=60, what="Prometheus scraped both")
    r = run_cli("gpus", "--json", "--source", f"prom:{prom_url}#host=rig-b")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    direct = ScrapeSource(exporters["rig-b"])
    want = direct.poll()
    direct.close()
    assert [g["uuid"] for g in data["gpus"]] == [g.info.uuid for g in want.gpus]
    assert [g["memory_used"] for g in data["gpus"]] == [g.memory_used for g in want.gpus]
    assert data["simulated"] is True
    r = run_cli("gpus", "--source", f"prom:{prom_url}#host=nowhere")
    assert r.returncode == 1 and "nowhere" in r.stderr and r.stderr.count("\n") == 1

    # an exporter that stops: Prometheus marks its series stale, lltui says which target
    procs["rig-b"].proc.terminate()
    procs["rig-b"].proc.wait(timeout=10)

    def rig_b_error() -> str | None:
        src = PromSource(f"{prom_url}#host=rig-b")
        try:
            return src.poll().error
        finally:
            src.close()

    wait_until(
        lambda: "cannot scrape" in (rig_b_error() or ""),
        timeout=60,
        what="Prometheus saw rig-b down",
    )
    src = PromSource(f"{prom_url}#host=rig-a")
    assert src.poll().error is None
    src.close()


# Other exporters' pages, served as they publish them, scraped by the same Prometheus
OTHERS = {
    "/dcgm": "dcgm-exporter-metriccontract.prom",
    "/allsmi": "all-smi-metrics-parser-test.prom",
}
OTHER_JOBS = """\
  - job_name: dcgm
    metrics_path: /dcgm
    static_configs:
      - targets: ["{target}"]
  - job_name: allsmi
    metrics_path: /allsmi
    static_configs:
      - targets: ["{target}"]
"""


def test_dcgm_exporter_and_all_smi_through_prometheus(tmp_path: Path) -> None:
    routes = {
        path: (200, "text/plain; version=0.0.4", (PROM_FIXTURES / name).read_bytes())
        for path, name in OTHERS.items()
    }
    with stub_server(Stub(routes=routes)) as stub:
        target = stub.url.split("//", 1)[1]
        jobs = OTHER_JOBS.format(target=target)
        with _start_prometheus(tmp_path, [], extra_jobs=jobs) as prom_url:

            def hosts() -> dict:
                src = PromSource(prom_url)
                try:
                    return src.poll_hosts()
                except Exception:
                    return {}
                finally:
                    src.close()

            # DCGM's Hostname label; all-smi's instance label, which Prometheus renames
            found = wait_until(
                lambda: (h := hosts()) and {"node-a", "node-0058"} <= set(h) and h,
                timeout=60,
                what="Prometheus scraped both pages",
            )
        assert isinstance(found, dict)
        for path, host in (("/dcgm", "node-a"), ("/allsmi", "node-0058")):
            direct = ScrapeSource(f"{stub.url}{path}")
            want = direct.poll_hosts()[host]
            direct.close()
            got = found[host]
            assert [g.info.uuid for g in got.gpus] == [g.info.uuid for g in want.gpus]
            for a, b in zip(got.gpus, want.gpus, strict=True):
                assert a.info.name == b.info.name and a.memory_total == b.memory_total
                for attr in FIELDS:
                    assert getattr(a, attr) == getattr(b, attr), (host, attr)
    assert found["node-a"].gpus[0].energy_mj == 196764132  # a DCGM counter, as exposed
