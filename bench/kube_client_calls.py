"""CPU per API call of the scheduler's client: Bindings through ``httpx.Client`` (how every call went before
gpufleet.k8s.direct) against ``KubeClient`` (httpcore's pool), to the API emulator in a process of its own.

Each round binds ``--pods`` pods from ``--threads`` threads, first with one client then with the other,
alternating, against a fresh emulator each time; reported: calls per second and this process's CPU per call
(the emulator's CPU is its own). The machine is shared: the load average is printed with each round.

    .venv/bin/python bench/kube_client_calls.py [--pods 2000] [--threads 16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from gpufleet.k8s.client import KubeClient

ROOT = Path(__file__).resolve().parents[1]
NOTES = {"gpufleet.io/node": "node-00000", "gpufleet.io/devices": '["GPU-node-00000-0"]'}


def _emulator(pods: int) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "kube")]))
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "kube_binding.py"), "--role", "emulator",
                             "--nodes", "1", "--pods", str(pods)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    return proc, str(json.loads(proc.stdout.readline())["url"])


def _via_httpx(url: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    # As KubeClient configured httpx before gpufleet.k8s.direct.
    client = httpx.Client(base_url=url, trust_env=False, headers={"Accept": "application/json"},
                          transport=httpx.HTTPTransport(retries=1, limits=httpx.Limits(
                              max_connections=50, max_keepalive_connections=20)))

    def bind(i: int) -> None:
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": f"p-{i:06d}", "namespace": "ml", "annotations": NOTES},
                "target": {"apiVersion": "v1", "kind": "Node", "name": "node-00000"}}
        response = client.post(f"/api/v1/namespaces/ml/pods/p-{i:06d}/binding", content=json.dumps(body).encode(),
                                headers={"Content-Type": "application/json"})
        if response.status_code >= 300:
            raise RuntimeError(response.text)
        response.json()

    return bind, client.close


def _via_kube_client(url: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    client = KubeClient(host=url, max_connections=50)

    def bind(i: int) -> None:
        client.bind("ml", f"p-{i:06d}", "node-00000", annotations=NOTES)

    return bind, client.close


def _round(name: str, make: Callable[[str], tuple[Callable[[int], None], Callable[[], None]]],
           args: argparse.Namespace) -> tuple[float, float]:
    proc, url = _emulator(args.pods)
    bind, close = make(url)
    load = os.getloadavg()[0]
    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(bind, range(args.pods)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    close()
    assert proc.stdin is not None
    proc.stdin.write("quit\n")
    proc.stdin.flush()
    proc.wait(30)
    print(f"  {name:12} {args.pods / wall:6.0f} calls/s  CPU {1000 * cpu / args.pods:.3f} ms/call  "
          f"(load {load:.2f})", flush=True)
    return args.pods / wall, cpu / args.pods


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.pods} Bindings from {args.threads} threads per round, emulator in a process of its own, "
          f"{os.cpu_count()} CPUs")
    cpu: dict[str, list[float]] = {"httpx.Client": [], "KubeClient": []}
    for i in range(args.repeat):
        print(f"round {i + 1}")
        cpu["httpx.Client"].append(_round("httpx.Client", _via_httpx, args)[1])
        cpu["KubeClient"].append(_round("KubeClient", _via_kube_client, args)[1])
    medians = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"median CPU per call: httpx.Client {1000 * medians['httpx.Client']:.3f} ms, KubeClient "
          f"{1000 * medians['KubeClient']:.3f} ms: {medians['KubeClient'] / medians['httpx.Client']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
