"""``lltui exporter``: valid exposition text in base units, the labels a dashboard groups
by, loopback by default, scrapes that never sample, and followed llama-servers."""

from __future__ import annotations

import json
import os
import shutil
import threading
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.prom_helpers import (
    FIXTURES,
    Stub,
    exporter,
    get_text,
    http_body,
    run_cli,
    stub_server,
    wait_until,
)

from lltui.commands.exporter import parse_listen
from lltui.core.monitor.prom import GPU_METRICS, STATIC_METRICS
from lltui.services.exporter import LlamaFollow, Sampler, public_url
from lltui.sources.gpu.sim import SimSource

AMD_ONLY = {"gtt_used", "gtt_total", "hotspot_temp_c", "pcie_bw_kbs", "xgmi_active"}
AMD_ONLY |= {"xgmi_rx_kbs", "xgmi_tx_kbs"}


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_exporter_serves_every_gpu_field_in_base_units() -> None:
    with exporter("--source", "sim:2x3090-nvlink", "--host-label", "rig-a") as ex:
        assert "SIMULATED" in ex.first_line
        fams = _families(get_text(f"{ex.url}"))
    gauge_names = {m.name for m in (*GPU_METRICS, *STATIC_METRICS) if m.kind == "gauge"}
    present = {n for n in gauge_names if fams.get(n) and fams[n].samples}
    # the simulated 3090s report every field lltui samples but ECC, XID, retired pages and
    # the memory's own temperature (GDDR6X has no sensor NVML reads; HBM does)
    missing = gauge_names - present
    hbm_only = "lltui_gpu_memory_temperature_celsius"
    # AMD's own readings (GTT, junction, XGMI, PCIe as one sum): tests/test_amd_source.py
    amd_only = {m.name for m in GPU_METRICS if m.attr in AMD_ONLY}
    assert missing <= {"lltui_gpu_retired_pages", "lltui_gpu_last_xid", hbm_only} | amd_only, (
        missing
    )
    used = fams["lltui_gpu_memory_used_bytes"]
    assert used.type == "gauge" and len(used.samples) == 2
    for s in used.samples:
        assert set(s.labels) == {"gpu", "uuid", "name", "host", "simulated"}
        assert s.labels["simulated"] == "true"  # a scraper cannot take them for real GPUs
        assert s.labels["host"] == "rig-a" and s.labels["uuid"].startswith("GPU-")
        assert s.value > 1e9  # bytes, not MiB
    for s in fams["lltui_gpu_utilization_ratio"].samples:
        assert 0.0 <= s.value <= 1.0
    for s in fams["lltui_gpu_sm_clock_hertz"].samples:
        assert s.value > 1e8  # hertz, not MHz
    energy = fams["lltui_gpu_energy_joules"]  # the parser names a counter without _total
    assert energy.type == "counter" and energy.samples[0].name.endswith("_total")
    (rig,) = fams["lltui_rig_info"].samples
    assert rig.labels["simulated"] == "true" and rig.labels["source"] == "sim:2x3090-nvlink"
    procs = fams["lltui_gpu_process_memory_bytes"].samples
    assert procs and all(set(s.labels) >= {"pid", "command", "uuid"} for s in procs)
    assert all(" " not in s.labels["command"] for s in procs)  # the program, no arguments
    assert fams["lltui_exporter_source_up"].samples[0].value == 1.0


def test_openmetrics_when_asked() -> None:
    """Prometheus asks for OpenMetrics first: units and counters must hold there too."""
    import httpx
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )

    with exporter("--source", "sim:colab-t4") as ex:
        resp = httpx.get(
            ex.url,
            headers={"Accept": "application/openmetrics-text; version=1.0.0"},
            trust_env=False,
        )
    assert resp.headers["content-type"].startswith("application/openmetrics-text")
    fams = {f.name: f for f in openmetrics_families(resp.text)}
    assert fams["lltui_gpu_power_watts"].unit == "watts"
    assert fams["lltui_gpu_energy_joules"].type == "counter"
    assert fams["lltui_gpu_energy_joules"].unit == "joules"


def test_a_scrape_reads_the_last_sample_and_never_samples() -> None:
    with exporter("--source", "sim:colab-t4", "--interval", "3600") as ex:
        counts = []
        for _ in range(3):
            fams = _families(get_text(f"{ex.url}"))
            counts.append(fams["lltui_exporter_samples"].samples[0].value)
    assert counts == [1.0, 1.0, 1.0]


def test_only_the_metrics_path_serves_metrics() -> None:
    """A mistyped scrape path is a 404 (as node_exporter answers), not the metrics; the root
    says where they are."""
    import httpx

    with exporter("--source", "sim:colab-t4") as ex:
        assert ex.url.endswith("/metrics")
        base = ex.url.removesuffix("/metrics")
        nope = httpx.get(base + "/nope", timeout=10.0, trust_env=False)
        root = httpx.get(base + "/", timeout=10.0, trust_env=False)
        metrics = httpx.get(ex.url, timeout=10.0, trust_env=False)
    assert nope.status_code == 404 and "lltui_gpu" not in nope.text
    assert root.status_code == 200 and "/metrics" in root.text and "lltui_gpu" not in root.text
    assert metrics.status_code == 200 and "lltui_gpu_power_watts" in metrics.text


def test_head_is_gets_answer_without_content_and_other_methods_are_405() -> None:
    """HEAD /metrics was 405 (curl -I said the exporter was broken) and HEAD / sent the
    page; POST / was answered as GET."""
    import socket

    from lltui.services.exporter import make_registry, serve

    source = SimSource("colab-t4", seed=0)
    source.open()
    httpd, thread = serve(make_registry(Sampler(source, host="t")), "127.0.0.1", 0)

    def ask(method: str, path: str) -> tuple[str, dict[str, str], bytes]:
        with socket.create_connection(httpd.server_address, timeout=10) as s:
            s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
        head, _, body = raw.partition(b"\r\n\r\n")
        status, *lines = head.decode().split("\r\n")
        return status, {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines)}, body

    try:
        for path in ("/metrics", "/"):
            status, headers, body = ask("GET", path)
            assert " 200 " in status and len(body) == int(headers["content-length"]) > 0
            status, headers, body = ask("HEAD", path)
            assert " 200 " in status and body == b"", (path, status, body[:80])
            assert int(headers["content-length"]) > 0
        for method in ("POST", "DELETE", "OPTIONS"):
            status, headers, body = ask(method, "/")
            assert " 405 " in status and headers["allow"] == "GET, HEAD" and b"lltui" not in body
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_loopback_by_default() -> None:
    r = run_cli("exporter", "--listen", "0.0.0.0:9400", "--source", "sim:colab-t4")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "--allow-remote" in r.stderr
    assert parse_listen(":9400") == ("127.0.0.1", 9400)
    assert parse_listen("[::1]:9") == ("::1", 9)


@pytest.mark.parametrize("listen", ["nowhere", "127.0.0.1:99999", "[::1]"])
def test_bad_listen_is_usage(listen: str) -> None:
    r = run_cli("exporter", "--listen", listen, "--source", "sim:colab-t4")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


def test_port_in_use_is_one_line() -> None:
    with exporter("--source", "sim:colab-t4") as ex:
        port = ex.url.rsplit(":", 1)[1].split("/")[0]
        r = run_cli("exporter", "--listen", f"127.0.0.1:{port}", "--source", "sim:colab-t4")
    assert r.returncode == 1 and "cannot listen" in r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1


def test_a_dead_llama_server_does_not_break_the_exporter() -> None:
    from support.llama_fixture import free_port

    dead = f"http://user:hunter2@127.0.0.1:{free_port()}"
    with exporter("--source", "sim:colab-t4", "--llama", dead, "--interval", "0.25") as ex:
        fams = _families(get_text(ex.url))
        wait_until(
            lambda: _families(get_text(ex.url))["lltui_exporter_samples"].samples[0].value >= 3,
            what="three rounds",
        )
        text = get_text(ex.url)
    (up,) = fams["lltui_llama_up"].samples
    assert up.value == 0.0 and up.labels["server"].startswith("http://127.0.0.1:")
    assert "hunter2" not in text and "user" not in up.labels["server"]
    assert fams["lltui_gpu_memory_used_bytes"].samples


def _llama_stub() -> Stub:
    return Stub(
        routes={
            "/health": (200, "application/json", b'{"status":"ok"}'),
            "/metrics": (200, "text/plain; version=0.0.4", http_body("metrics_after.txt")),
            "/slots": (200, "application/json", http_body("slots_after.txt")),
            "/props": (200, "application/json", http_body("props.txt")),
        }
    )


def test_a_followed_llama_server_counters_slots_and_placement(tmp_path) -> None:
    log = FIXTURES / "llama-server" / "server_lv4_full.log"
    with stub_server(_llama_stub()) as stub:
        src = SimSource("colab-t4", seed=1)
        src.open()
        sampler = Sampler(src, host="h", llama=[LlamaFollow(stub.url, log=log)])
        sampler.sample_once()
        # the placement is the followed server's plan, read from its log on a thread of its
        # own (a poll never waits on a model's header)
        wait_until(lambda: sampler.poll_llama(0).placement, what="the log read")
        families = sampler.families()
        sampler.stop()
    fams = {f.name: f for f in families}
    lb = {"host": "h", "server": stub.url}
    (up,) = fams["lltui_llama_up"].samples
    assert dict(up[0]) == lb and up[1] == 1.0
    (gen,) = fams["lltui_llama_generated_tokens_total"].samples
    assert gen[1] > 0 and fams["lltui_llama_generated_tokens_total"].kind == "counter"
    slots = json.loads(http_body("slots_after.txt"))
    assert fams["lltui_llama_slots"].samples[0][1] == len(slots)
    assert fams["lltui_llama_slots_busy"].samples[0][1] == sum(
        1 for s in slots if s.get("is_processing")
    )
    placed = fams["lltui_llama_device_memory_bytes"].samples
    assert placed, "the log's buffers give per-device memory"
    kinds = {dict(labels)["kind"] for labels, _v in placed}
    assert {"model", "kv"} <= kinds
    assert all(v >= 0 and v == int(v) for _l, v in placed)


def test_a_serving_servers_log_is_not_parsed_again_as_it_grows(tmp_path, monkeypatch) -> None:
    from lltui.services import follow

    log = tmp_path / "server.log"
    log.write_bytes((FIXTURES / "llama-server" / "server_lv4_full.log").read_bytes())
    read = []
    real = follow.plan_of_log
    monkeypatch.setattr(
        follow, "plan_of_log", lambda path, **kw: read.append(path) or real(path, **kw)
    )
    with stub_server(_llama_stub()) as stub:
        src = SimSource("colab-t4", seed=1)
        src.open()
        sampler = Sampler(src, host="h", llama=[LlamaFollow(stub.url, log=log)])
        wait_until(lambda: sampler.poll_llama(0).placement, what="the log read")
        first = sampler.poll_llama(0)
        assert first.up and first.placement and len(read) == 1
        with log.open("a") as f:  # requests served: the log grows, the load stays
            f.write("srv  log_server_r: request: POST /completion 127.0.0.1 200\n" * 50)
        assert sampler.poll_llama(0).placement == first.placement and len(read) == 1
        log.write_text("main: a new server's log, shorter: it started over\n")
        assert sampler.poll_llama(0).placement == ()
        wait_until(lambda: len(read) == 2, what="the new log read")
        sampler.stop()


def test_llama_families_through_the_command(tmp_path) -> None:
    with (
        stub_server(_llama_stub()) as stub,
        exporter("--source", "sim:colab-t4", "--llama", stub.url) as ex,
    ):
        # its own thread polls the server: the first scrape may come before its first poll
        wait_until(
            lambda: _families(get_text(ex.url))["lltui_llama_up"].samples[0].value == 1.0,
            what="the llama-server polled",
        )
        fams = _families(get_text(ex.url))
    assert fams["lltui_llama_generated_tokens"].type == "counter"


def test_a_hanging_llama_server_holds_back_neither_the_gpus_nor_the_scrapes() -> None:
    with (
        stub_server(Stub(hang=True)) as stub,
        exporter("--source", "sim:colab-t4", "--llama", stub.url, "--interval", "0.25") as ex,
    ):
        wait_until(
            lambda: _families(get_text(ex.url))["lltui_exporter_samples"].samples[0].value >= 10,
            timeout=15,
            what="ten GPU rounds while the llama-server hangs",
        )
        fams = _families(get_text(ex.url))
    assert fams["lltui_llama_up"].samples[0].value == 0.0
    assert fams["lltui_gpu_memory_used_bytes"].samples


def test_sampler_keeps_going_when_the_source_fails() -> None:
    from lltui.core.monitor.models import SourceUnavailable

    class Broken:
        name = "broken"

        def poll(self):  # type: ignore[no-untyped-def]
            raise SourceUnavailable("ssh dropped")

        def close(self) -> None:
            pass

    errors: list[str] = []
    sampler = Sampler(Broken(), host="h", interval_s=0.05, on_error=errors.append)  # type: ignore[arg-type]
    sampler.start()
    try:
        wait_until(lambda: sampler.snapshot.samples_total >= 3, what="three rounds")
    finally:
        sampler.stop()
    snap = sampler.snapshot
    assert not snap.source_up and snap.errors_total >= 3 and snap.families == ()
    assert errors == ["source broken: ssh dropped"]  # said once, not every round


def test_public_url_hides_credentials() -> None:
    assert public_url("http://u:p@127.0.0.1:8080/x/?k=v#f") == "http://127.0.0.1:8080/x"
    assert public_url("http://[::1]:9/") == "http://[::1]:9"


def test_scrapes_in_parallel_with_sampling() -> None:
    """Scrapes and the sampling thread never see half a snapshot."""
    src = SimSource("8xh100-sxm", seed=2)
    src.open()
    sampler = Sampler(src, host="h", interval_s=0.01)
    sampler.start()
    seen: list[int] = []

    def scrape() -> None:
        for _ in range(50):
            snap = sampler.snapshot
            fams = {f.name: f for f in snap.families}
            seen.append(len(fams["lltui_gpu_memory_used_bytes"].samples))

    threads = [threading.Thread(target=scrape) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sampler.stop()
    assert set(seen) == {8}


def test_prometheus_client_loads_only_where_used() -> None:
    """The CLI's parser, the registry and the prom: source spec leave prometheus_client
    (about 50 ms to import) unloaded; only serving or parsing loads it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from lltui.sources.gpu.prom import host_label, public_spec\n"
        "host_label('http://h:1'); public_spec('scrape:http://h:1')\n"
        "print('httpx' in sys.modules)\n"  # a fleet names its hosts without HTTP
        "from lltui.cli import build_parser\n"
        "build_parser()\n"
        "from lltui.sources.gpu.kinds import make_source, parse_source_spec\n"
        "make_source(parse_source_spec('prom:http://127.0.0.1:1'))\n"
        "import lltui.core.monitor.prom_export, lltui.core.monitor.prom_import\n"
        "print('prometheus_client' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize(
    "args",
    [
        ["--source", "bogus"],
        ["--source", "sim:colab-t4", "--llama", "127.0.0.1:8080"],
        ["--source", "sim:colab-t4", "--interval", "0"],
        ["--source", "sim:colab-t4", "--llama-log", "x.log"],
        ["--source", "prom:ftp://h"],
        ["--source", "sim:colab-t4,sim:4xl4"],
    ],
)
def test_bad_exporter_arguments_are_one_line(args: list[str]) -> None:
    r = run_cli("exporter", "--listen", "127.0.0.1:0", *args)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU may be here")
def test_without_a_gpu_the_exporter_serves_no_simulated_numbers_unasked() -> None:
    r = run_cli("exporter", "--listen", "127.0.0.1:0")
    assert r.returncode == 1 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("lltui: nothing to export:") and "--source sim:" in r.stderr
    assert r.stdout == ""


def test_a_replay_of_a_simulated_rig_is_served_as_asked(tmp_path) -> None:
    from lltui.sources.gpu.replay import Recorder

    path = tmp_path / "sim.jsonl"
    source = SimSource("colab-t4")
    info = source.open()
    with Recorder(path) as rec:
        rec.start(info)
        for _ in range(3):
            rec.write(source.poll())
    with exporter("--source", f"replay:{path}", "--replay-loop") as ex:
        fams = _families(get_text(ex.url))
    assert "lltui_gpu_power_watts" in fams


def test_the_serving_line_hides_a_source_password() -> None:
    page = (FIXTURES / "prom" / "dcgm-exporter-readme.prom").read_bytes()
    with stub_server(Stub(routes={"/metrics": (200, "text/plain", page)})) as stub:
        secret = stub.url.replace("http://", "http://ana:hunter2@")
        with exporter("--source", f"scrape:{secret}") as ex:
            fams = _families(get_text(ex.url))
    assert "hunter2" not in ex.first_line and "scrape:http://127.0.0.1:" in ex.first_line
    (rig,) = fams["lltui_rig_info"].samples
    assert "hunter2" not in rig.labels["source"]


def test_an_unreachable_source_is_one_line() -> None:
    from support.llama_fixture import free_port

    r = run_cli("exporter", "--listen", "127.0.0.1:0", "--source",
                f"scrape:http://127.0.0.1:{free_port()}")  # fmt: skip
    assert r.returncode == 1 and "not reachable" in r.stderr and r.stderr.count("\n") == 1


def test_xid_errors_are_counted_across_rounds() -> None:
    """NVML's events report XIDs; a source that cannot see them has no count (its 0 read as
    "no XID errors" on dashboards)."""
    from dataclasses import replace

    from lltui.core.monitor.models import XidEvent

    class WithXids:
        name = "nvml"

        def __init__(self) -> None:
            self.sim = SimSource("colab-t4", seed=1)
            self.sim.open()
            self.polls = 0

        def poll(self):  # type: ignore[no-untyped-def]
            sample = self.sim.poll()
            sample = replace(sample, info=replace(sample.info, source=self.name))
            self.polls += 1
            if self.polls == 2:
                g = replace(sample.gpus[0], xid_events=(XidEvent(79, 0.0, "off the bus"),),
                            xid_dropped=2, xid=79)  # fmt: skip
                sample = replace(sample, gpus=(g, *sample.gpus[1:]))
            return sample

        def close(self) -> None:
            pass

    sampler = Sampler(WithXids(), host="h")  # type: ignore[arg-type]
    counts = []
    for _ in range(3):
        fams = {f.name: f for f in sampler.sample_once().families}
        counts.append(fams["lltui_gpu_xid_errors_total"].samples[0][1])
    assert counts == [0.0, 3.0, 3.0]
    assert fams["lltui_gpu_xid_errors_total"].kind == "counter"
    sim = SimSource("colab-t4", seed=1)
    sim.open()
    blind = {f.name: f for f in Sampler(sim, host="h").sample_once().families}
    assert (
        "lltui_gpu_xid_errors_total" not in blind or not blind["lltui_gpu_xid_errors_total"].samples
    )


def test_error_lines_never_show_url_credentials() -> None:
    from lltui.commands.output import error_line

    line = error_line("source scrape:http://ana:s3cret@10.0.0.1:9400/metrics: refused")
    assert "s3cret" not in line and "ana" not in line
    assert "http://***@10.0.0.1:9400/metrics" in line


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_stops_the_exporter_cleanly(sig: str) -> None:
    import signal

    with exporter("--source", "sim:colab-t4") as ex:
        get_text(ex.url)
        ex.proc.send_signal(getattr(signal, sig))
        assert ex.proc.wait(timeout=20) == 0
        assert ex.proc.stderr is not None
        assert "Traceback" not in ex.proc.stderr.read()


@pytest.mark.skipif(
    not (shutil.which("promtool") or os.access("/usr/bin/promtool", os.X_OK)),
    reason="no promtool (it comes with the prometheus package)",
)
def test_promtool_finds_nothing_to_lint() -> None:
    """Prometheus's own linter: names, units, counters' _total, label case, HELP text."""
    import subprocess

    with (
        stub_server(_llama_stub()) as stub,
        exporter("--source", "sim:2x3090-nvlink", "--llama", stub.url) as ex,
    ):
        wait_until(
            lambda: _families(get_text(ex.url))["lltui_llama_up"].samples[0].value == 1.0,
            what="the llama-server polled",
        )
        text = get_text(ex.url)
    promtool = shutil.which("promtool") or "/usr/bin/promtool"
    r = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


def test_the_listen_backlog_holds_a_burst_of_scrapers() -> None:
    """With the server not accepting (as when its thread is busy), connections wait in the
    listen backlog rather than being dropped: 300 at once all connect (http.server's
    default backlog of 5 let about six through; the rest waited seconds for a retry)."""
    import socket

    from lltui.services.exporter import LISTEN_BACKLOG, make_registry, serve

    source = SimSource("colab-t4", seed=0)
    source.open()
    server, thread = serve(make_registry(Sampler(source, host="t")), "127.0.0.1", 0)
    assert server.request_queue_size == LISTEN_BACKLOG >= 1024
    server.shutdown()  # no more accepting; the socket still listens
    thread.join(5)
    conns = []
    try:
        for _ in range(300):
            conns.append(socket.create_connection(server.server_address, timeout=2.0))
    finally:
        for c in conns:
            c.close()
        server.server_close()
    assert len(conns) == 300


def test_scrapes_between_two_rounds_share_one_rendering() -> None:
    from lltui.services.exporter import cached_app

    calls: list[str] = []
    version = [1]

    def app(environ: dict, start_response: Any) -> list[bytes]:
        calls.append(environ.get("HTTP_ACCEPT", ""))
        status = "404 Not Found" if environ["PATH_INFO"] == "/nope" else "200 OK"
        start_response(status, [("Content-Type", "text/plain")])
        return [f"v{version[0]}".encode()]

    cached = cached_app(app, lambda: version[0])
    said: list[str] = []

    def get(path: str = "/metrics", accept: str = "") -> bytes:
        env = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "HTTP_ACCEPT": accept}
        return b"".join(cached(env, lambda status, headers, *_: said.append(status)))

    assert get() == b"v1" and get() == b"v1" and len(calls) == 1
    assert get(accept="application/openmetrics-text") == b"v1" and len(calls) == 2
    version[0] = 2
    assert get() == b"v2" and len(calls) == 3
    get("/nope"), get("/nope")
    assert len(calls) == 5 and said[-1] == "404 Not Found"  # errors are not kept
    threads = [threading.Thread(target=get) for _ in range(20)]
    version[0] = 3
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 6  # twenty at once after a new round: one rendering


def test_a_request_sent_a_byte_at_a_time_is_let_go_without_a_traceback(monkeypatch, capfd) -> None:
    """The timeout was per read: a client that sent a byte a second held its connection (and
    a thread) for ever, and 256 of them kept every scrape out; one that sent nothing had a
    traceback printed once its read timed out. The whole request now has the timeout, and a
    client let go is said nowhere."""
    import socket
    import time

    from prometheus_client import CollectorRegistry

    from lltui.services.exporter import _QuietHandler, serve

    monkeypatch.setattr(_QuietHandler, "timeout", 1.0)
    httpd, thread = serve(CollectorRegistry(), "127.0.0.1", 0)
    port = httpd.server_address[1]
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 40
    try:
        with socket.create_connection(("127.0.0.1", port)) as idle:
            idle.settimeout(10)
            assert idle.recv(1) == b""  # nothing sent: let go
        with socket.create_connection(("127.0.0.1", port)) as drip:
            drip.settimeout(0.2)  # a byte every 0.2 s, each well within the timeout
            start = time.monotonic()
            closed = False
            for byte in request:
                try:
                    drip.send(bytes([byte]))
                    closed = drip.recv(1) == b""
                except TimeoutError:
                    continue
                except OSError:
                    closed = True
                if closed:
                    break
            assert closed and time.monotonic() - start < 5
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)
    assert "Traceback" not in capfd.readouterr().err


def test_past_the_cap_the_oldest_idle_connection_is_let_go_for_a_scrape(monkeypatch) -> None:
    """Past the cap it was the new connection that was closed unanswered, so idle ones kept
    every scrape out; now the oldest connection still sending its request is let go."""
    import socket

    import httpx
    from prometheus_client import CollectorRegistry

    from lltui.services.exporter import MetricsServer, serve

    monkeypatch.setattr(MetricsServer, "max_connections", 2)
    httpd, thread = serve(CollectorRegistry(), "127.0.0.1", 0)
    port = httpd.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        wait_until(lambda: httpd._slots._value == 0)  # both taken by their threads
        url = f"http://127.0.0.1:{port}/metrics"
        assert httpx.get(url, timeout=10.0, trust_env=False).status_code == 200
        idle[0].settimeout(10)
        assert idle[0].recv(1) == b""  # the oldest, let go
        wait_until(lambda: httpd._slots._value == 1)  # the scrape's slot back; one idle left
    finally:
        for s in idle:
            s.close()
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_a_hung_collection_does_not_stall_accepting(monkeypatch) -> None:
    """Every slot held by a scrape being answered (a collection that hangs): each new
    connection waited SLOT_WAIT_S for a slot that shutting the oldest scrape could not free
    (its thread is in the collection, not reading), one after another, 2 s a connection. Now
    the new connection is closed at once and the oldest scrape cut."""
    import socket
    import time

    import httpx
    from prometheus_client import CollectorRegistry
    from prometheus_client.registry import Collector

    from lltui.services.exporter import SLOT_WAIT_S, MetricsServer, serve

    release = threading.Event()

    class Hung(Collector):
        def collect(self) -> list:
            release.wait(60)
            return []

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Hung())
    monkeypatch.setattr(MetricsServer, "max_connections", 3)
    httpd, thread = serve(registry, "127.0.0.1", 0)
    port = httpd.server_address[1]
    scrapes = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
    try:
        for s in scrapes:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: len(httpd._open) == 3 and all(httpd._open.values()), what="3 in")
        n = 10
        began = time.monotonic()
        for _ in range(n):
            with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
                assert c.recv(1) == b""  # closed unanswered
        assert time.monotonic() - began < n * SLOT_WAIT_S / 4
        assert scrapes[0].recv(1) == b""  # the oldest scrape, cut
        release.set()
        assert scrapes[1].recv(64).startswith(b"HTTP/1.")  # the others answered at last
        url = f"http://127.0.0.1:{port}/metrics"
        assert httpx.get(url, timeout=10.0, trust_env=False).status_code == 200
    finally:
        release.set()
        for s in scrapes:
            s.close()
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_a_flood_of_slow_connections_keeps_neither_a_scrape_out_nor_threads_unbounded() -> None:
    """300 connections that send nothing or half a request line, against a real exporter:
    past its 256 threads every scrape was closed unanswered until they timed out; now a
    scrape is answered at once and the exporter's threads stay at the cap."""
    import socket
    import time
    from pathlib import Path

    import httpx

    from lltui.services.exporter import MAX_CONNECTIONS

    with exporter("--source", "sim:colab-t4") as ex:
        port = int(ex.url.rsplit(":", 1)[1].split("/")[0])
        tasks = Path(f"/proc/{ex.proc.pid}/task")
        slow = []
        try:
            for i in range(MAX_CONNECTIONS + 44):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                if i % 2:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHo")
                slow.append(s)
            # all accepted: every slot taken (the first 44 let go for the last)
            wait_until(lambda: len(list(tasks.iterdir())) >= MAX_CONNECTIONS, what="the flood")
            began = time.monotonic()
            resp = httpx.get(ex.url, timeout=15.0, trust_env=False)
            assert resp.status_code == 200 and "lltui_gpu" in resp.text
            assert time.monotonic() - began < 15.0
            assert len(list(tasks.iterdir())) <= MAX_CONNECTIONS + 16  # (main, sampler, http...)
        finally:
            for s in slow:
                s.close()


def test_a_servers_recurrent_state_and_moe_cache_are_exported_where_held() -> None:
    """A recurrent model's state (rs) and a --moe-cache-mib cache are part of what a device
    holds: the exporter's per-kind memory left them out, so its kinds did not sum to it."""
    from lltui.core.llamalog.models import DevicePlacement
    from lltui.core.monitor.prom import LlamaExport
    from lltui.core.monitor.prom_export import llama_families

    placement = (
        DevicePlacement("CUDA0", model_mib=100.0, kv_mib=10.0, rs_mib=5.0, moe_cache_mib=64.0),
        DevicePlacement("CUDA1", model_mib=100.0, kv_mib=10.0),
    )
    (fam,) = [
        f
        for f in llama_families([LlamaExport("http://s", True, placement=placement)], host="h")
        if f.name == "lltui_llama_device_memory_bytes"
    ]
    got = {(dict(lb)["device"], dict(lb)["kind"]): v for lb, v in fam.samples}
    for d in placement:
        held = sum(v for (dev, _k), v in got.items() if dev == d.name)
        assert held == round(d.total_mib * 2**20)
    assert ("CUDA1", "rs") not in got and got[("CUDA0", "moe_cache")] == 64 * 2**20
