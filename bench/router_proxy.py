"""What lltui's on-demand proxy adds to a request: the router alone against the router
behind the proxy, in the same run, on the pinned llama-server CPU build (``lltui llama
install``) with a tiny generated model loaded.

- latency: one client, requests alternating between the two addresses (so drift hits both
  alike); p50 of each and of the paired differences. ``/tokenize`` names the model, so it
  takes the proxy's model path and the router's forwarding to the model's server, while
  the model itself does almost nothing;
- throughput: CLIENTS clients at once sending ``/v1/completions`` (TOKENS tokens) for a fixed
  time to one address, then the other, twice in turn; requests per second and the ratio.

The clients run in a process of their own (in lltui's process their threads would share
its interpreter lock with the proxy).

    python bench/router_proxy.py [--requests 400] [--clients 4] [--seconds 5] [--tokens 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

import httpx  # noqa: E402
from support.llama_fixture import build_llama, write_tiny_llama  # noqa: E402

from lltui.core.cmdline.args import parse_llama_args  # noqa: E402
from lltui.services.launch.router import RouterSession  # noqa: E402
from lltui.services.launch.router_prep import RouterRequest  # noqa: E402
from lltui.services.plan import PlanEntry  # noqa: E402


def post(client: httpx.Client, url: str, body: dict[str, Any]) -> httpx.Response:
    """A request, sent again once if the server had closed the kept-alive connection
    (llama-server closes one after its 100th request; httpx may race that)."""
    try:
        return client.post(url, json=body)
    except httpx.RemoteProtocolError:
        return client.post(url, json=body)


def latency(router: str, proxy: str, n: int) -> tuple[list[float], list[float]]:
    body = {"model": "alpha", "content": "hello world"}
    direct, through = [], []
    with httpx.Client(timeout=30) as client:
        for i in range(n):
            pair = [(router, direct), (proxy, through)]
            for url, out in pair if i % 2 else reversed(pair):
                t0 = time.perf_counter()
                r = post(client, f"{url}/tokenize", body)
                out.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
    return direct, through


def throughput(url: str, clients: int, seconds: float, tokens: int) -> tuple[int, float]:
    """Requests answered and the seconds they took."""
    body = {"model": "alpha", "prompt": "a", "max_tokens": tokens}
    done = [0] * clients
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        with httpx.Client(timeout=60) as client:
            while time.monotonic() < stop:
                r = post(client, f"{url}/v1/completions", body)
                assert r.status_code == 200, r.text
                done[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done), time.monotonic() - t0


def client_side(opts: argparse.Namespace) -> object:
    """The clients' side, in a process of their own (``--client WHAT URL [URL]``)."""
    what, *urls = opts.client
    if what == "latency":
        latency(urls[0], urls[1], 20)  # warm both paths
        return latency(urls[0], urls[1], opts.requests)
    return throughput(urls[0], opts.clients, opts.seconds, opts.tokens)


def cpu_s(pids: list[int]) -> float:
    """User and system seconds the processes have used."""
    import psutil

    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tokens", type=int, default=1, help="tokens per completion")
    ap.add_argument("--client", nargs="+", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.client:
        print(json.dumps(client_side(opts)))
        return 0

    def client(*words: str) -> Any:
        argv = [sys.executable, __file__, "--client", *words, "--requests", str(opts.requests)]
        argv += ["--clients", str(opts.clients), "--seconds", str(opts.seconds)]
        argv += ["--tokens", str(opts.tokens)]
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"the clients failed: {done.stderr.strip()[-2000:]}")
        return json.loads(done.stdout)

    bins = build_llama()
    os.environ["LLTUI_LLAMA_SERVER"] = str(bins.binaries["llama-server"])
    rows: dict[str, list[tuple[float, float, float]]] = {"router": [], "proxy": []}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_STATE_HOME"] = tmp
        model = write_tiny_llama(Path(tmp) / "alpha.gguf", layers=4, seed=1)
        flags = ["-c", "512", "-t", "1", "-np", str(opts.clients), "--no-warmup"]
        entry = PlanEntry(str(model), parse_llama_args(flags), name="alpha")
        request = RouterRequest(entries=(entry,), words=("--port", "0"), on_demand=True)
        with RouterSession(request) as session:
            session.prepare()
            session.start()
            assert session.supervisor and session.supervisor.wait_ready(60)
            router, proxy = session.url, session.prepared.url
            assert httpx.post(f"{proxy}/tokenize", json={"model": "alpha", "content": "a"},
                              timeout=120).status_code == 200  # fmt: skip  # loads it
            direct, through = client("latency", router, proxy)
            servers = _group(session.pid or 0)
            for _ in range(2):
                for name, url in (("router", router), ("proxy", proxy)):
                    own0, srv0 = cpu_s([os.getpid()]), cpu_s(servers)
                    n, secs = client("throughput", url)
                    own, srv = cpu_s([os.getpid()]) - own0, cpu_s(servers) - srv0
                    rows[name].append((n / secs, own / n * 1000, srv / n * 1000))
            session.stop()
    report(opts, direct, through, rows)
    return 0


def _group(pgid: int) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p.pid)
        except OSError:
            continue
    return out


def report(
    opts: argparse.Namespace,
    direct: list[float],
    through: list[float],
    rows: dict[str, list[tuple[float, float, float]]],
) -> None:
    p50_direct = statistics.median(direct) * 1000
    p50_through = statistics.median(through) * 1000
    added = statistics.median(b - a for a, b in zip(direct, through, strict=True)) * 1000
    print(f"latency /tokenize, {opts.requests} requests each, alternating:")
    print(f"  router alone   p50 {p50_direct:.2f} ms")
    print(f"  through proxy  p50 {p50_through:.2f} ms   (ratio {p50_through / p50_direct:.2f})")
    print(f"  added per request, p50 of paired differences: {added:.2f} ms")
    print(
        f"throughput /v1/completions ({opts.tokens} tokens), {opts.clients} clients, "
        f"{opts.seconds:.0f} s per run, router and proxy in turn, twice:"
    )
    for name, got in rows.items():
        rates = ", ".join(f"{r:.1f}" for r, _, _ in got)
        own = statistics.mean(o for _, o, _ in got)
        srv = statistics.mean(s for _, _, s in got)
        print(
            f"  {name:<6} {statistics.mean(r for r, _, _ in got):7.1f} req/s ({rates}); CPU per "
            f"request: lltui {own:.2f} ms, llama-server (router + model) {srv:.2f} ms"
        )
    rate = statistics.mean(r for r, _, _ in rows["proxy"]) / statistics.mean(
        r for r, _, _ in rows["router"]
    )
    proxy_cpu = statistics.mean(o for _, o, _ in rows["proxy"]) - statistics.mean(
        o for _, o, _ in rows["router"]
    )
    server_cpu = statistics.mean(s for _, _, s in rows["router"])
    print(f"  ratio proxy/router: {rate:.3f}")
    print(
        f"  the proxy's CPU per request: {proxy_cpu:.2f} ms, {proxy_cpu / server_cpu:.1%} of "
        "llama-server's (on a machine short of cores, throughput loses about that share)"
    )


if __name__ == "__main__":
    sys.exit(main())
