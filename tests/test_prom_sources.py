"""``scrape:`` and ``prom:`` sources: other exporters' pages mapped onto lltui's samples,
bounded requests, one line for what goes wrong."""

from __future__ import annotations

import json
import time
from dataclasses import fields

import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry
from support.prom_helpers import PROM_FIXTURES, Stub, run_cli, stub_server

from lltui.core.monitor.gpus_report import rig_to_json
from lltui.core.monitor.models import GpuSample, GpuStatic, SourceUnavailable
from lltui.core.monitor.prom import MIB, Series
from lltui.core.monitor.prom_export import rig_families
from lltui.core.monitor.prom_import import rigs_from_series
from lltui.services.exporter import to_metric
from lltui.sources.gpu.kinds import parse_source_spec
from lltui.sources.gpu.prom import PromSource, ScrapeSource, parse_exposition, parse_query_result
from lltui.sources.gpu.sim import SimSource


def _rigs(name: str, default_host: str = "fallback") -> dict:
    series = parse_exposition((PROM_FIXTURES / name).read_text())
    return rigs_from_series(
        series, source="scrape:x", default_host=default_host, seq=1, t=0, wall=0
    )


def test_dcgm_exporter_payload_in_base_units() -> None:
    rigs = _rigs("dcgm-exporter-metriccontract.prom")
    assert list(rigs) == ["node-a"]  # the Hostname label
    (g,) = rigs["node-a"].gpus
    assert (g.index, g.info.uuid, g.info.name) == (0, "GPU-0", "NVIDIA B200")
    assert g.memory_used == 1024 * MIB and g.memory_free == 6604 * MIB
    assert g.memory_reserved == 372 * MIB
    assert g.memory_total == (1024 + 6604 + 372) * MIB
    assert (g.util_gpu, g.util_mem, g.power_w, g.temp_c) == (0.0, 37.0, 77.0, 41.0)
    assert (g.sm_clock_mhz, g.mem_clock_mhz) == (210, 405)
    assert g.energy_mj == 196764132  # a counter: the parser's _total suffix is not DCGM's name
    # what dcgm-exporter does not send stays unknown
    assert g.fan_pct is None and g.pcie_rx_kbs is None and g.power_limit_w is None
    assert g.xid is None and g.processes == ()
    assert g.mem_temp_c is None  # its DCGM_FI_DEV_MEMORY_TEMP is 0: no sensor


def test_a_gpu_whose_every_value_is_not_finite_is_listed_with_readings_unknown() -> None:
    series = [
        Series("DCGM_FI_DEV_GPU_TEMP", (("UUID", "GPU-a"), ("gpu", "0"), ("modelName", "L4")), 50),
        Series("DCGM_FI_DEV_POWER_USAGE", (("UUID", "GPU-b"), ("gpu", "1"), ("modelName", "L4")),
               float("nan")),
        Series("DCGM_FI_DEV_GPU_TEMP", (("UUID", "GPU-b"), ("gpu", "1")), float("-inf")),
    ]  # fmt: skip
    rig = rigs_from_series(series, source="s", default_host="h", seq=1, t=0, wall=0)["h"]
    assert [g.info.uuid for g in rig.gpus] == ["GPU-a", "GPU-b"]
    b = rig.gpus[1]
    assert (b.index, b.info.name, b.power_w, b.temp_c) == (1, "L4", None, None)


def test_dcgm_memory_temperature_is_read() -> None:
    """DCGM_FI_DEV_MEMORY_TEMP is the HBM temperature the memory-heat alert watches."""
    series = [Series("DCGM_FI_DEV_MEMORY_TEMP", (("UUID", "GPU-a"), ("gpu", "0")), 47)]
    rig = rigs_from_series(series, source="s", default_host="h", seq=1, t=0, wall=0)["h"]
    assert rig.gpus[0].mem_temp_c == 47.0


def test_dcgm_blank_value_is_no_reading() -> None:
    rigs = _rigs("dcgm-exporter-readme.prom", default_host="gpu-node")
    (g,) = rigs["gpu-node"].gpus  # no Hostname label: the host the URL names
    assert (g.sm_clock_mhz, g.mem_clock_mhz) == (139, 405)
    assert g.temp_c is None  # MEMORY_TEMP is DCGM's blank; and it is not the GPU temperature
    assert g.memory_used is None and g.memory_total is None  # unknown, never 0
    assert g.memory_pct is None


def test_a_payload_without_framebuffer_metrics_shows_total_memory_unknown() -> None:
    """dcgm-exporter with the FB fields left out of its counters file: the total is null in
    JSON and "-" on screen, never 0 (the host's sum too)."""
    page = (PROM_FIXTURES / "dcgm-exporter-readme.prom").read_bytes()
    with stub_server(Stub(routes={"/metrics": (200, "text/plain", page)})) as stub:
        out = run_cli("gpus", "--source", f"scrape:{stub.url}", "--json")
        assert out.returncode == 0, out.stderr
        (gpu,) = json.loads(out.stdout)["gpus"]
        assert gpu["memory_total"] is None and gpu["memory_used"] is None
        text = run_cli("gpus", "--source", f"scrape:{stub.url}")
        row = next(ln for ln in text.stdout.splitlines() if ln.lstrip().startswith("0 "))
        assert " - / - " in row and " 0 MiB" not in row
    from lltui.core.monitor.fleet import HostState, host_row

    rig = _rigs("dcgm-exporter-readme.prom")["fallback"]
    row = host_row(HostState("h", "scrape:x", rig, True, received_at=0.0), 0.0, 1.0)
    assert row.memory_total is None  # the host's sum: unknown too, not 0


def test_all_smi_template_payload() -> None:
    rigs = _rigs("all-smi-nvidia-template.prom")
    rig = rigs["node-0001"]
    assert rig.info.driver_version == "580.65.06" and rig.info.cuda_version == "13.0"
    assert [g.index for g in rig.gpus] == [0, 1]
    g0, g1 = rig.gpus
    assert g0.info.name == "NVIDIA H100 80GB HBM3"  # all-smi's gpu label is the name
    assert g0.info.uuid == "GPU-6f1c2a34-58b0-4d2e-9a7c-0e5b1d3c2f11"
    assert g0.memory_used == 41875931136 and g0.memory_total == 85899345920
    assert (g0.util_gpu, g0.temp_c, g0.power_w, g0.sm_clock_mhz) == (73.25, 61.0, 512.25, 1755)
    assert g1.util_gpu == 12.5 and g0.memory_free is None
    assert rig.host.cpu_pct == 34.56 and rig.host.mem_total == 1099511627776
    assert rig.host.cpu_count == 128


def test_all_smi_older_label_names() -> None:
    rig = _rigs("all-smi-metrics-parser-test.prom")["node-0058"]
    (g,) = rig.gpus
    assert (g.info.uuid, g.index) == ("GPU-12345", 0)
    assert g.memory_used == 8589934592 and g.power_w == 400.5


def test_series_of_one_gpu_grouped_by_uuid_across_label_sets() -> None:
    series = [
        Series("DCGM_FI_DEV_GPU_TEMP", (("UUID", "GPU-a"), ("gpu", "1"), ("modelName", "L4")), 50),
        Series("DCGM_FI_DEV_FB_USED", (("UUID", "GPU-a"), ("pod", "x")), 10),
        Series("DCGM_FI_DEV_GPU_TEMP", (("UUID", "GPU-b"), ("gpu", "0")), 40),
    ]
    rig = rigs_from_series(series, source="s", default_host="h", seq=1, t=0, wall=0)["h"]
    assert [g.info.uuid for g in rig.gpus] == ["GPU-b", "GPU-a"]  # index order
    a = rig.gpus[1]
    assert (a.index, a.temp_c, a.memory_used, a.info.name) == (1, 50.0, 10 * MIB, "L4")
    assert rig.gpus[0].memory_used is None


def test_label_values_reach_the_screen_with_their_controls_escaped() -> None:
    """A page's labels are GPU names, hosts and commands on the screen: an escape sequence
    in one (clear the screen, retitle the window) is shown as text, never sent."""
    series = [
        Series(
            "DCGM_FI_DEV_GPU_TEMP",
            (("Hostname", "n\x1b]0;pwned\x07"), ("UUID", "GPU-a"), ("modelName", "L4\x1b[2J")),
            50,
        ),
    ]
    rigs = rigs_from_series(series, source="s", default_host="h", seq=1, t=0, wall=0)
    ((host, rig),) = rigs.items()
    assert "\x1b" not in host and "\x07" not in host and "pwned" in host
    assert rig.gpus[0].info.name == "L4\\u001b[2J"


def test_hosts_from_prometheus_labels() -> None:
    # Prometheus renames a scraped `instance` label to `exported_instance`
    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [
                    {
                        "metric": {
                            "__name__": "all_smi_gpu_utilization",
                            "gpu": "A100",
                            "gpu_uuid": "GPU-1",
                            "gpu_index": "0",
                            "exported_instance": "box1",
                            "instance": "10.0.0.1:9090",
                        },
                        "value": [1700000000.0, "55"],
                    },
                    {
                        "metric": {
                            "__name__": "DCGM_FI_DEV_POWER_USAGE",
                            "UUID": "GPU-2",
                            "gpu": "0",
                            "instance": "10.0.0.2:9400",
                        },
                        "value": [1700000000.0, "NaN"],
                    },
                    {
                        "metric": {
                            "__name__": "DCGM_FI_DEV_GPU_TEMP",
                            "UUID": "GPU-2",
                            "gpu": "0",
                            "instance": "10.0.0.2:9400",
                        },
                        "value": [1700000000.0, "33"],
                    },
                ],
            },
        }
    ).encode()
    rigs = rigs_from_series(parse_query_result(body), source="p", default_host="x", seq=1,
                            t=0, wall=0)  # fmt: skip
    assert sorted(rigs) == ["10.0.0.2:9400", "box1"]
    assert rigs["box1"].gpus[0].util_gpu == 55.0
    g = rigs["10.0.0.2:9400"].gpus[0]
    assert g.temp_c == 33.0 and g.power_w is None  # NaN: no reading


def test_lltui_names_round_trip_through_the_text_format() -> None:
    src = SimSource("2x3090-nvlink", seed=3)
    src.open()
    sample = src.poll()
    registry = CollectorRegistry(auto_describe=False)

    class C:
        def collect(self):  # type: ignore[no-untyped-def]
            for f in rig_families(sample, host="rig-1"):
                yield to_metric(f)

    registry.register(C())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    rig = rigs_from_series(parse_exposition(text), source="scrape:x", default_host="x", seq=1,
                           t=0, wall=0)["rig-1"]  # fmt: skip
    assert rig.simulated and rig.info.driver_version == sample.info.driver_version
    for want, got in zip(sample.gpus, rig.gpus, strict=True):
        assert got.info.uuid == want.info.uuid and got.info.name == want.info.name
        assert got.info.pci_bus_id == want.info.pci_bus_id
        assert got.memory_total == want.memory_total
        for attr in ("memory_used", "memory_free", "energy_mj", "sm_clock_mhz", "pcie_gen",
                     "nvlink_active", "pstate"):  # fmt: skip
            assert getattr(got, attr) == getattr(want, attr), attr
        for attr in ("util_gpu", "util_mem", "power_w", "temp_c", "pcie_rx_kbs", "fan_pct"):
            assert getattr(got, attr) == pytest.approx(getattr(want, attr)), attr
        # a process whose memory the driver hides has no value to export
        known = {p.pid: p.used_memory for p in want.processes if p.used_memory is not None}
        assert {p.pid: p.used_memory for p in got.processes} == known
    assert rig.host.mem_total == sample.host.mem_total


@pytest.mark.parametrize("profile", ["4xl4", "8xmi300x", "2x4090-2x7900xtx"])
def test_a_readback_gives_the_json_of_the_sample_it_exported(profile: str) -> None:
    # a scrape of the exporter said null for no throttle reason (the contract's list: []),
    # 28.000000000000004 for 28 %, and null for persistence mode and unified memory
    src = SimSource(profile, seed=3)
    src.open()
    sample = src.poll()
    series = [
        Series(f.name, labels, value)
        for f in rig_families(sample, host="h")
        for labels, value in f.samples
    ]
    (back,) = rigs_from_series(series, source="x", default_host="x", seq=1, t=0, wall=0).values()
    ints = {
        f.name for f in (*fields(GpuSample), *fields(GpuStatic)) if str(f.type).startswith("int")
    }
    # what the exporter does not serve: a process's user and command line, XID events
    # (counted instead), MIG and vGPU instances (families of their own), virtualization
    unserved = {"processes", "xid_events", "xid_dropped", "mig", "vgpus", "virtualization"}
    for want, got in zip(rig_to_json(sample)["gpus"], rig_to_json(back)["gpus"], strict=True):
        for key, value in want.items():
            if key in unserved:
                continue
            if isinstance(value, float) and value != round(value, 6):
                assert got[key] == pytest.approx(value, rel=1e-9), key
            else:
                assert got[key] == value, key
            if key in ints and value is not None:
                assert type(got[key]) is int, key
        assert got["throttle_reasons"] == []


def test_every_gpu_names_its_vendor_in_json_and_on_its_info_series() -> None:
    # an NVIDIA GPU said vendor null in gpus --json and "" on lltui_gpu_info, an AMD one "amd"
    src = SimSource("2x4090-2x7900xtx", seed=3)
    src.open()
    sample = src.poll()
    want = ["nvidia", "nvidia", "amd", "amd"]
    assert [g["vendor"] for g in rig_to_json(sample)["gpus"]] == want
    (info,) = [f for f in rig_families(sample, host="h") if f.name == "lltui_gpu_info"]
    assert [dict(labels).get("vendor") for labels, _ in info.samples] == want


# --- sources over HTTP ------------------------------------------------------------------------


def test_scrape_source_reads_a_page_and_picks_a_host() -> None:
    page = (PROM_FIXTURES / "dcgm-exporter-metriccontract.prom").read_bytes()
    with stub_server(Stub(routes={"/metrics": (200, "text/plain", page)})) as stub:
        src = ScrapeSource(stub.url)  # /metrics added
        info = src.open()
        assert info.hostname == "node-a" and info.gpus[0].name == "NVIDIA B200"
        s1, s2 = src.poll(), src.poll()
        assert s2.seq == s1.seq + 1 and s1.gpus[0].power_w == 77.0
        assert set(src.poll_hosts()) == {"node-a"}
        src.close()
        missing = ScrapeSource(f"{stub.url}/metrics#host=elsewhere")
        with pytest.raises(SourceUnavailable, match="elsewhere"):
            missing.open()
        missing.close()


def test_prom_source_queries_the_api() -> None:
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {
                    "metric": {"__name__": "lltui_gpu_power_watts", "gpu": "0", "uuid": "GPU-x",
                               "name": "T4", "host": h, "instance": "i", "job": "j"},
                    "value": [1.0, str(w)],
                }
                for h, w in (("a", 30), ("b", 40))
            ],
        },
    }  # fmt: skip
    route = (200, "application/json", json.dumps(answer).encode())
    with stub_server(Stub(routes={"/api/v1/query": route})) as stub:
        src = PromSource(f"{stub.url}#host=b")
        assert src.open().hostname == "b"
        assert src.poll().gpus[0].power_w == 40.0
        assert set(src.poll_hosts()) == {"a", "b"}
        assert any("query=" in r for r in stub.requests)
        src.close()


def test_bad_answers_are_one_line() -> None:
    html = (200, "text/html", b"<html><body>login</body></html>\n{{{")
    with stub_server(Stub(routes={"/metrics": html, "/api/v1/query": html})) as stub:
        with pytest.raises(SourceUnavailable) as e1:
            ScrapeSource(stub.url).open()
        with pytest.raises(SourceUnavailable) as e2:
            PromSource(stub.url).open()
    for exc in (e1.value, e2.value):
        assert "\n" not in str(exc) and stub.url in str(exc)


def test_a_failed_connection_names_its_cause() -> None:
    """TLS to a plain-HTTP port is no "connection refused" (every failure was called that)."""
    with stub_server(Stub(routes={})) as stub, pytest.raises(SourceUnavailable) as tls:
        ScrapeSource(stub.url.replace("http://", "https://")).open()
    text = str(tls.value)
    assert "not reachable" in text and "refused" not in text and "Errno" not in text, text


def _dcgm_page(rx_kb: int, tx_kb: int, xid: int) -> bytes:
    labels = 'gpu="0",UUID="GPU-c",Hostname="n"'
    return (
        "# TYPE DCGM_FI_DEV_PCIE_RX_THROUGHPUT counter\n"
        f"DCGM_FI_DEV_PCIE_RX_THROUGHPUT{{{labels}}} {rx_kb}\n"
        "# TYPE DCGM_FI_DEV_PCIE_TX_THROUGHPUT counter\n"
        f"DCGM_FI_DEV_PCIE_TX_THROUGHPUT{{{labels}}} {tx_kb}\n"
        f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid}\n"
    ).encode()


def test_dcgm_counters_become_rates_between_polls() -> None:
    now = [100.0]
    stub = Stub(routes={"/metrics": (200, "text/plain", _dcgm_page(1000, 50, 0))})
    with stub_server(stub):
        src = ScrapeSource(stub.url, clock=lambda: now[0])
        first = src.open()
        assert first.gpus[0].uuid == "GPU-c"
        s0 = src.poll()
        (g,) = s0.gpus
        assert g.pcie_rx_kbs is None and g.xid is None  # one reading; XID 0 is none seen
        now[0] += 2.0
        stub.routes["/metrics"] = (200, "text/plain", _dcgm_page(5000, 250, 79))
        (g,) = src.poll().gpus
        assert g.pcie_rx_kbs == 2000.0 and g.pcie_tx_kbs == 100.0 and g.xid == 79
        now[0] += 1.0
        stub.routes["/metrics"] = (200, "text/plain", _dcgm_page(10, 10, 79))  # reset
        assert src.poll().gpus[0].pcie_rx_kbs is None
        src.close()


def test_a_target_prometheus_cannot_scrape_marks_its_host() -> None:
    def vector(result: list) -> tuple[int, str, bytes]:
        body = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return 200, "application/json", json.dumps(body).encode()

    gpu = {"__name__": "lltui_gpu_temperature_celsius", "gpu": "0", "uuid": "GPU-z",
           "host": "h1", "instance": "10.0.0.9:9400"}  # fmt: skip
    up = {"__name__": "up", "instance": "10.0.0.9:9400", "job": "lltui"}
    import httpx

    up_path = str(httpx.URL("/api/v1/query", params={"query": "up"}))
    routes = {
        "/api/v1/query": vector([{"metric": gpu, "value": [1, "50"]}]),
        up_path: vector([{"metric": up, "value": [1, "0"]}]),
    }
    with stub_server(Stub(routes=routes)) as stub:
        src = PromSource(stub.url)
        sample = src.poll_hosts()["h1"]
        src.close()
    assert sample.gpus[0].temp_c == 50.0
    assert sample.error and "cannot scrape 10.0.0.9:9400" in sample.error


def test_prom_pointed_at_an_exporter_says_so() -> None:
    page = (PROM_FIXTURES / "dcgm-exporter-readme.prom").read_bytes()
    stub = Stub(routes={"/metrics": (200, "text/plain", page)})
    with stub_server(stub), pytest.raises(SourceUnavailable, match="scrape:URL") as exc:
        PromSource(stub.url).open()
    assert "404" in str(exc.value)


def test_hanging_server_gives_up_within_its_deadline() -> None:
    with stub_server(Stub(hang=True)) as stub:
        src = ScrapeSource(stub.url, timeout_s=0.5)
        start = time.monotonic()
        with pytest.raises(SourceUnavailable, match="did not answer in time"):
            src.open()
        assert time.monotonic() - start < 5
        src.close()


def test_dead_url_on_the_command_line_is_one_line_with_no_secret() -> None:
    from support.llama_fixture import free_port

    port = free_port()
    for kind in ("scrape", "prom"):
        r = run_cli("gpus", "--source", f"{kind}:http://user:hunter2@127.0.0.1:{port}")
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "not reachable" in lines[0], r.stderr
        assert "hunter2" not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "spec", ["prom:", "scrape:", "prom:ftp://x", "scrape:not a url", "prom:http://h:port"]
)
def test_bad_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError):
        parse_source_spec(spec)


def test_good_specs() -> None:
    assert str(parse_source_spec("prom:http://127.0.0.1:9090#host=a")) == (
        "prom:http://127.0.0.1:9090#host=a"
    )
    assert parse_source_spec("scrape:https://h/metrics").kind == "scrape"


def test_dcgm_labels_and_profiling_ratios() -> None:
    lb = (("UUID", "GPU-p"), ("gpu", "2"), ("pci_bus_id", "00000000:3B:00.0"),
          ("DCGM_FI_DRIVER_VERSION", "580.126.09"), ("Hostname", "n9"))  # fmt: skip
    series = [
        Series("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lb, 0.25),
        Series("DCGM_FI_PROF_DRAM_ACTIVE", lb, 0.5),
        Series("DCGM_FI_PROF_PCIE_RX_BYTES", lb, 2048.0),
        Series("DCGM_FI_DEV_FB_TOTAL", lb, 81559.0),
        Series("DCGM_FI_DEV_RETIRED_SBE", lb, 1),
        Series("DCGM_FI_DEV_RETIRED_DBE", lb, 2),
        Series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lb, 3),
    ]
    rig = rigs_from_series(series, source="s", default_host="x", seq=1, t=0, wall=0)["n9"]
    assert rig.info.driver_version == "580.126.09"
    (g,) = rig.gpus
    assert g.info.pci_bus_id == "00000000:3B:00.0" and g.index == 2
    assert g.util_gpu == 25.0 and g.util_mem == 50.0  # ratios stand in for the utilisations
    assert g.pcie_rx_kbs == 2.0 and g.memory_total == 81559 * MIB
    assert g.retired_pages == 3 and g.ecc_uncorrected == 3 and g.ecc_corrected is None
    with_util = [*series, Series("DCGM_FI_DEV_GPU_UTIL", lb, 90)]
    rig = rigs_from_series(with_util, source="s", default_host="x", seq=1, t=0, wall=0)["n9"]
    assert rig.gpus[0].util_gpu == 90.0  # the NVML-style reading wins where present


def test_all_smi_processes_join_their_gpu_by_uuid() -> None:
    gpu = (("gpu", "H100"), ("instance", "node-7"), ("gpu_uuid", "GPU-q"), ("gpu_index", "0"))
    proc = (("pid", "4242"), ("name", "llama-server"), ("user", "ana"), ("device_id", "0"),
            ("gpu_index", "0"), ("device_uuid", "GPU-q"),
            ("command", "llama-server --api-key s3cret"))  # fmt: skip
    series = [
        Series("all_smi_gpu_memory_used_bytes", gpu, 5e9),
        Series("all_smi_process_memory_used_bytes", proc, 4e9),
        Series("all_smi_process_memory_used_bytes", (("pid", "1"), ("device_uuid", "GPU-o")), 1),
    ]
    rig = rigs_from_series(series, source="s", default_host="10.0.0.7", seq=1, t=0, wall=0)
    assert list(rig) == ["node-7"]  # the process series has no host label: no second host
    (p,) = rig["node-7"].gpus[0].processes
    assert (p.pid, p.name, p.user, p.used_memory) == (4242, "llama-server", "ana", 4_000_000_000)
    assert p.command is None  # a command line may hold a key: not taken


def test_throttle_reasons_and_a_lost_gpu_round_trip() -> None:
    from dataclasses import replace

    src = SimSource("kaggle-2xt4", seed=5)
    src.open()
    sample = src.poll()
    g0 = replace(sample.gpus[0], throttle_reasons=("power cap", "thermal"))
    g1 = replace(sample.gpus[1], lost=True, memory_used=None, power_w=None)
    sample = replace(sample, gpus=(g0, g1))
    series = [
        Series(f.name, labels, value)
        for f in rig_families(sample, host="k")
        for labels, value in f.samples
    ]
    rig = rigs_from_series(series, source="x", default_host="x", seq=1, t=0, wall=0)["k"]
    a, b = rig.gpus
    assert a.throttle_reasons == ("power cap", "thermal") and not a.lost
    assert b.lost and b.memory_used is None and b.power_w is None
    assert b.throttle_reasons == g1.throttle_reasons


def test_scrape_sources_in_a_fleet_show_no_password() -> None:
    dcgm = (200, "text/plain", (PROM_FIXTURES / "dcgm-exporter-metriccontract.prom").read_bytes())
    allsmi = (200, "text/plain", (PROM_FIXTURES / "all-smi-metrics-parser-test.prom").read_bytes())
    with (
        stub_server(Stub(routes={"/metrics": dcgm})) as a,
        stub_server(Stub(routes={"/metrics": allsmi})) as b,
    ):
        secret_url = a.url.replace("http://", "http://ana:hunter2@")
        r = run_cli("gpus", "--json", "--source", f"scrape:{secret_url},scrape:{b.url}#host=n58")
    assert r.returncode == 0, r.stderr
    assert "hunter2" not in r.stdout + r.stderr
    data = json.loads(r.stdout)
    names = [h["name"] for h in data["hosts"]]
    assert names == [a.url.split("//", 1)[1], "n58"]
    first = data["hosts"][0]
    assert first["reachable"] and first["gpus"][0]["name"] == "NVIDIA B200"
    # all-smi's host is node-0058, not n58: that host is down, with a line that says why
    assert not data["hosts"][1]["reachable"]


def test_a_prometheus_of_several_hosts_says_how_to_pick_one() -> None:
    result = [
        {"metric": {"__name__": "lltui_gpu_power_watts", "gpu": "0", "uuid": f"GPU-{h}",
                    "host": h}, "value": [1.0, "10"]}
        for h in ("alpha", "beta", "gamma")
    ]  # fmt: skip
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    route = (200, "application/json", json.dumps(body).encode())
    with stub_server(Stub(routes={"/api/v1/query": route})) as stub:
        src = PromSource(stub.url)
        info = src.open()
        sample = src.poll()
        src.close()
        picked = PromSource(f"{stub.url}#host=beta")
        assert picked.open().hints == ()
        picked.close()
    assert info.hostname == "alpha" and sample.info.hostname == "alpha"
    (hint,) = sample.info.hints
    assert "beta, gamma" in hint and f"prom:{stub.url}#host=NAME" in hint
    assert f"prom:{stub.url}#host=*" in hint


def test_every_host_of_a_prometheus_is_a_fleet() -> None:
    from lltui.sources.gpu.fleet import Fleet, fleet_specs
    from lltui.sources.gpu.kinds import is_fleet

    result = [
        {"metric": {"__name__": "lltui_gpu_power_watts", "gpu": "0", "uuid": f"GPU-{h}",
                    "host": h}, "value": [1.0, str(10 * (i + 1))]}
        for i, h in enumerate(("beta", "alpha", "rig 3"))
    ]  # fmt: skip
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    route = (200, "application/json", json.dumps(body).encode())
    with stub_server(Stub(routes={"/api/v1/query": route})) as stub:
        spec = f"prom:{stub.url}#host=*"
        assert is_fleet(spec) and not is_fleet(f"prom:{stub.url}#host=alpha")
        specs = fleet_specs(f"{spec},sim:kaggle-2xt4", None)
        assert specs == [
            f"prom:{stub.url}#host=alpha",
            f"prom:{stub.url}#host=beta",
            f"prom:{stub.url}#host=rig%203",
            "sim:kaggle-2xt4",
        ]
        fleet = Fleet(specs, interval=1.0, timeout=5.0)
        try:
            got = fleet.poll_once()
        finally:
            fleet.close()
    powers = {h.label: h.sample.gpus[0].power_w for h in got.hosts[:3] if h.sample}
    assert powers == {"alpha": 20.0, "beta": 10.0, "rig 3": 30.0}
    # a server that cannot be read stays one host, shown down with why
    dead = "prom:http://127.0.0.1:9#host=*"
    assert fleet_specs(dead, None) == [dead]


def test_a_fleet_of_one_servers_hosts_asks_it_once_a_round(monkeypatch) -> None:
    from lltui.sources.gpu import prom
    from lltui.sources.gpu.fleet import Fleet, fleet_specs

    monkeypatch.setattr(prom, "SHARE_MAX_AGE_S", 60.0)  # a loaded machine's round is slow

    hosts = [f"h{i}" for i in range(6)]
    page = "".join(
        f'lltui_gpu_power_watts{{gpu="0",uuid="GPU-{h}",host="{h}"}} {i + 1}\n'
        for i, h in enumerate(hosts)
    ).encode()
    with stub_server(Stub(routes={"/metrics": (200, "text/plain", page)})) as stub:
        specs = fleet_specs(f"scrape:{stub.url}#host=*", None)
        assert len(specs) == 6
        fleet = Fleet(specs, interval=1.0, timeout=10.0)
        stub.requests.clear()
        try:
            rounds = [fleet.poll_once() for _ in range(3)]
        finally:
            fleet.close()
        asked = len(stub.requests)
    # one page a round, that the opens took too, where each
    # host fetched the page for itself (6 hosts, 4 requests each in three rounds)
    assert asked == 3, asked
    last = {h.label: h.sample.gpus[0].power_w for h in rounds[-1].hosts if h.sample}
    assert last == {h: float(i + 1) for i, h in enumerate(hosts)}
    assert all(h.reachable for h in rounds[-1].hosts)


def test_a_dead_server_of_a_fleet_is_asked_once_a_round(monkeypatch) -> None:
    from lltui.sources.gpu import prom
    from lltui.sources.gpu.fleet import Fleet

    with stub_server(Stub(hang=True)) as stub:
        specs = [f"scrape:{stub.url}#host=h{i}" for i in range(4)]
        monkeypatch.setattr(prom, "SHARE_MAX_AGE_S", 60.0)
        fleet = Fleet(specs, interval=1.0, timeout=10.0)
        try:
            got = fleet.poll_once()
        finally:
            fleet.close()
            stub.stopped.set()
        asked = len(stub.requests)
    assert not any(h.reachable for h in got.hosts)
    assert asked == 1, asked


def test_a_page_past_its_size_limit_is_one_line(monkeypatch) -> None:
    from lltui.sources.gpu import prom

    monkeypatch.setattr(prom.ScrapeSource, "max_body", 1000)
    page = b"# a comment line\n" * 200
    with stub_server(Stub(routes={"/metrics": (200, "text/plain", page)})) as stub:
        src = ScrapeSource(stub.url)
        with pytest.raises(SourceUnavailable, match="more than"):
            src.open()
        src.close()


def test_a_hosts_samples_never_go_back_when_another_host_fetches_meanwhile(monkeypatch):
    """Two hosts of one page: b's "no metrics this time" sample took a number after the
    answer a fetched meanwhile, so b's next real sample looked older and was dropped."""
    from lltui.sources.gpu import prom

    monkeypatch.setattr(prom, "SHARE_MAX_AGE_S", 60.0)
    line = 'lltui_gpu_power_watts{{gpu="0",uuid="GPU-{h}",host="{h}"}} 1\n'
    only_a, both = line.format(h="a").encode(), (line.format(h="a") + line.format(h="b")).encode()
    with stub_server(Stub(routes={"/metrics": (200, "text/plain", only_a)})) as stub:
        a, b = ScrapeSource(f"{stub.url}#host=a"), ScrapeSource(f"{stub.url}#host=b")
        pick = b._pick

        def a_fetches_meanwhile(hosts):
            got = pick(hosts)
            stub.routes["/metrics"] = (200, "text/plain", both)
            a.poll()  # takes the answer b took
            a.poll()  # fetches the next, with b in it
            return got

        monkeypatch.setattr(b, "_pick", a_fetches_meanwhile)
        missing = b.poll()
        monkeypatch.setattr(b, "_pick", pick)
        found = b.poll()
        a.close()
        b.close()
    assert missing.error and not missing.gpus
    assert found.gpus and found.seq > missing.seq
