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
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))

import httpx  # noqa: E402
from llama_fixture import build_llama, write_tiny_llama  # noqa: E402

from lltui.core.llama.args import parse_llama_args  # noqa: E402
from lltui.services.launch.router import RouterSession  # noqa: E402
from lltui.services.launch.router_prep import RouterRequest  # noqa: E402
from lltui.services.plan import PlanEntry  # noqa: E402


def latency(router: str, proxy: str, n: int) -> tuple[list[float], list[float]]:
    body = {"model": "alpha", "content": "hello world"}
    direct, through = [], []
    with httpx.Client(timeout=30) as client:
        for i in range(n):
            pair = [(router, direct), (proxy, through)]
            for url, out in pair if i % 2 else reversed(pair):
                t0 = time.perf_counter()
                r = client.post(f"{url}/tokenize", json=body)
                out.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text
    return direct, through


def throughput(url: str, clients: int, seconds: float, tokens: int) -> float:
    body = {"model": "alpha", "prompt": "a", "max_tokens": tokens}
    done = [0] * clients
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        with httpx.Client(timeout=60) as client:
            while time.monotonic() < stop:
                r = client.post(f"{url}/v1/completions", json=body)
                assert r.status_code == 200, r.text
                done[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - t0)


def measure(router: str, proxy: str, opts: argparse.Namespace) -> dict[str, object]:
    """The client's side, in this process (``--client ROUTER PROXY``)."""
    latency(router, proxy, 20)  # warm both paths
    direct, through = latency(router, proxy, opts.requests)
    rates: dict[str, list[float]] = {"router": [], "proxy": []}
    for _ in range(2):
        rates["router"].append(throughput(router, opts.clients, opts.seconds, opts.tokens))
        rates["proxy"].append(throughput(proxy, opts.clients, opts.seconds, opts.tokens))
    return {"direct": direct, "through": through, "rates": rates}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--tokens", type=int, default=1, help="tokens per completion")
    ap.add_argument("--client", nargs=2, metavar=("ROUTER", "PROXY"), help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.client:
        print(json.dumps(measure(*opts.client, opts)))
        return 0
    import os

    bins = build_llama()
    os.environ["LLTUI_LLAMA_SERVER"] = str(bins.binaries["llama-server"])
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
            argv = [sys.executable, __file__, "--client", router, proxy]
            argv += ["--requests", str(opts.requests), "--clients", str(opts.clients)]
            argv += ["--seconds", str(opts.seconds), "--tokens", str(opts.tokens)]
            got = json.loads(subprocess.run(argv, capture_output=True, check=True).stdout)
            session.stop()
    direct, through, rates = got["direct"], got["through"], got["rates"]
    p50_direct = statistics.median(direct) * 1000
    p50_through = statistics.median(through) * 1000
    added = statistics.median(b - a for a, b in zip(direct, through, strict=True)) * 1000
    r_router, r_proxy = statistics.mean(rates["router"]), statistics.mean(rates["proxy"])
    print(f"latency /tokenize, {opts.requests} requests each, alternating:")
    print(f"  router alone   p50 {p50_direct:.2f} ms")
    print(f"  through proxy  p50 {p50_through:.2f} ms   (ratio {p50_through / p50_direct:.2f})")
    print(f"  added per request, p50 of paired differences: {added:.2f} ms")
    print(
        f"throughput /v1/completions ({opts.tokens} tokens), {opts.clients} clients, "
        f"{opts.seconds:.0f} s x2:"
    )
    print(f"  router alone   {r_router:.1f} req/s  {rates['router']}")
    print(f"  through proxy  {r_proxy:.1f} req/s  {rates['proxy']}")
    print(f"  ratio proxy/router: {r_proxy / r_router:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
