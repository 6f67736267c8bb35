"""The webhook and the dashboard under slow clients (issue 30): 200 clients that open a connection, send the start
of a request and then one header byte every 2 seconds, never finishing, and connect again whenever the server
closes them; meanwhile one ordinary client sends a request every quarter second. Measured: the share of ordinary
requests answered within 1 second (the goal: 95 % or more), and their latencies, beside a baseline of the same
ordinary requests with no slow clients, against the same server in the same process.

The servers run in this process, as the scheduler and ``gpufleet dashboard`` run them (the webhook over TLS with
the test certificate); the slow clients run in a process of their own (tests/slow_clients.py, one asyncio loop),
as a hostile user's would, so their cost is not the server's. Loopback only.

Run: .venv/bin/python bench/slow_clients.py [--seconds 30] [--slow 200] [--server webhook|dashboard]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import ssl
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.slow_clients import SlowClients  # noqa: E402

from gpufleet.admission.webhook import WebhookPolicy  # noqa: E402
from gpufleet.admission.webhook_server import WebhookServer  # noqa: E402
from gpufleet.api.manifests import load_manifests  # noqa: E402
from gpufleet.web.server import Dashboard  # noqa: E402
from gpufleet.web.source_files import FilesSource  # noqa: E402

TLS = ROOT / "tests" / "kube" / "webhook_tls"
WITHIN = 1.0  # seconds: an ordinary request answered later than this counts as not answered
INTERVAL = 0.25  # seconds between the ordinary client's requests
PACE = 2.0  # seconds between a slow client's bytes


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    port: int
    tls: bool
    slow_start: bytes  # what a slow client sends before it trickles
    ask: Callable[[httpx.Client], int]  # one ordinary request: its status


@dataclass(frozen=True, slots=True)
class Run:
    latencies: list[float]  # seconds, one per ordinary request; inf where it failed or took over 5 s
    slow: dict[str, int]  # the slow clients' counts (connections opened, cut by the server), empty for baselines

    @property
    def answered(self) -> int:
        return sum(1 for t in self.latencies if t <= WITHIN)

    def row(self) -> str:
        done = [t for t in self.latencies if t != float("inf")]
        share = 100.0 * self.answered / max(1, len(self.latencies))
        p50 = statistics.median(done) * 1000 if done else float("nan")
        p95 = (sorted(done)[int(0.95 * (len(done) - 1))] * 1000) if done else float("nan")
        worst = max(self.latencies, default=float("nan")) * 1000
        slow = (f"   slow: {self.slow['connections']:,} connections, {self.slow['cut']:,} cut by the server, "
                f"{self.slow['holding']} holding a connection at the end") if self.slow else ""
        return (f"{self.answered:>4}/{len(self.latencies):<4} within {WITHIN:g}s ({share:5.1f} %)   p50 {p50:6.1f} ms  "
                f"p95 {p95:6.1f} ms  max {worst:8.1f} ms{slow}")


def trust() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(TLS / "tls.crt"))


def review() -> bytes:
    pod = {"metadata": {"name": "p", "annotations": {"gpufleet.io/gpu-fraction": "0.5"}},
           "spec": {"schedulerName": "gpufleet", "containers": [{"name": "main", "image": "busybox"}]}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "operation": "CREATE", "object": pod}}).encode()


def ordinary(target: Target, seconds: float) -> list[float]:
    """One request every INTERVAL for ``seconds``, each on a new connection (both servers close after an
    answer); its latency, or inf when it failed."""
    latencies: list[float] = []
    ends = time.monotonic() + seconds
    with httpx.Client(verify=trust() if target.tls else True, timeout=5.0) as client:
        while time.monotonic() < ends:
            started = time.monotonic()
            try:
                ok = target.ask(client) == 200
            except httpx.HTTPError:
                ok = False
            took = time.monotonic() - started
            latencies.append(took if ok else float("inf"))
            time.sleep(max(0.0, INTERVAL - took))
    return latencies


def _slow_process(port: int, count: int, tls: bool, start: bytes, ready: Event, stop: Event,
                  out: multiprocessing.Queue[dict[str, int]]) -> None:
    clients = SlowClients(port, count, pace=PACE, tls=trust if tls else None, start=start)
    clients.start(timeout=120.0, holding=False)  # a server that refuses them must be measurable too
    ready.set()
    stop.wait()
    holding = clients.holding
    clients.stop()
    out.put({"connections": clients.connections, "cut": clients.cut, "holding": holding})


def under_slow_clients(target: Target, count: int, seconds: float) -> Run:
    mp = multiprocessing.get_context("spawn")  # not fork: this process runs the server's threads
    ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
    child = mp.Process(target=_slow_process, args=(target.port, count, target.tls, target.slow_start, ready, stop,
                                                    out), daemon=True)
    child.start()
    if not ready.wait(180.0):
        child.kill()
        raise SystemExit(f"{target.name}: the {count} slow clients did not all connect")
    try:
        latencies = ordinary(target, seconds)
    finally:
        stop.set()
    slow = out.get(timeout=60.0)
    child.join(timeout=30.0)
    return Run(latencies, slow)


def webhook() -> tuple[Any, Target]:
    server = WebhookServer("127.0.0.1:0", str(TLS / "tls.crt"), str(TLS / "tls.key"), WebhookPolicy("gpufleet"))
    body = review()

    def ask(client: httpx.Client) -> int:
        return client.post(f"https://localhost:{server.port}/mutate-pods", content=body,
                           headers={"Content-Type": "application/json"}).status_code

    start = b"POST /mutate-pods HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
    return server, Target("webhook (HTTPS, POST /mutate-pods)", server.port, True, start, ask)


def dashboard() -> tuple[Any, Target]:
    files = [str(ROOT / "examples" / "casestudy"), str(ROOT / "examples" / "plan" / "snapshot.yaml")]
    server = Dashboard(FilesSource(load_manifests(files), "the case study"), "127.0.0.1", 0)

    def ask(client: httpx.Client) -> int:
        return client.get(f"{server.url}/api/overview").status_code

    start = b"GET /api/overview HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
    return server, Target("dashboard (HTTP, GET /api/overview)", server.port, False, start, ask)


SERVERS = {"webhook": webhook, "dashboard": dashboard}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=30.0, help="each run's length (default 30)")
    parser.add_argument("--slow", type=int, default=200, help="slow clients (default 200)")
    parser.add_argument("--server", choices=sorted(SERVERS), action="append", help="default: both")
    args = parser.parse_args()
    print(f"{args.slow} slow clients (a header byte every {PACE:g}s, reconnecting), {args.seconds:g}s per run, "
          f"an ordinary request every {INTERVAL:g}s; loopback")
    worst = 100.0
    for name in args.server or list(SERVERS):
        server, target = SERVERS[name]()
        server.start()
        try:
            base = Run(ordinary(target, args.seconds), {})
            loaded = under_slow_clients(target, args.slow, args.seconds)
        finally:
            server.stop()
        print(f"\n{target.name}")
        print(f"  {'baseline, no slow clients':<28}{base.row()}")
        print(f"  {f'beside {args.slow} slow clients':<28}{loaded.row()}")
        worst = min(worst, 100.0 * loaded.answered / max(1, len(loaded.latencies)))
    print(f"\ngoal: >= 95 % within {WITHIN:g}s beside the slow clients: {'met' if worst >= 95.0 else 'NOT met'} "
          f"(lowest {worst:.1f} %)")


if __name__ == "__main__":
    main()
