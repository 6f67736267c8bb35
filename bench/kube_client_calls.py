"""CPU per API call of the scheduler's client: Bindings through ``httpx.Client`` (how every call went before
gpufleet.k8s.direct) and through ``KubeClient`` (gpufleet.k8s.direct) of this tree and of earlier revisions, to
the API emulator in a process of its own.

Each round binds ``--pods`` pods from ``--threads`` threads with each client in turn, alternating, against a
fresh emulator each time; the client runs in a process of its own (so that another revision's ``src/`` can be
first on its PYTHONPATH: ``--baseline REF``, ``git archive``, repeatable). Reported: calls per second and the
client process's CPU per call over the binding only (the emulator's CPU is its own). The machine is shared:
the load average is printed with each round.

    .venv/bin/python bench/kube_client_calls.py [--pods 2000] [--threads 16] [--repeat 3] [--baseline REF]...
                                                [--no-httpx]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "bench"))

from revision_src import revision_src  # noqa: E402  (a sibling module of this script)

NOTES = {"gpufleet.io/node": "node-00000", "gpufleet.io/devices": '["GPU-node-00000-0"]'}


def _emulator(pods: int) -> tuple[subprocess.Popen[str], str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "kube")]))
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "kube_binding.py"), "--role", "emulator",
                             "--nodes", "1", "--pods", str(pods)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    return proc, str(json.loads(proc.stdout.readline())["url"])


def _via_httpx(url: str) -> tuple[Callable[[int], None], Callable[[], None]]:
    import httpx

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
    from gpufleet.k8s.client import KubeClient

    client = KubeClient(host=url, max_connections=50)

    def bind(i: int) -> None:
        client.bind("ml", f"p-{i:06d}", "node-00000", annotations=NOTES)

    return bind, client.close


def client_role(args: argparse.Namespace) -> int:
    """In the child: bind, then print the binding's wall and CPU seconds as JSON."""
    bind, close = (_via_httpx if args.how == "httpx" else _via_kube_client)(args.url)
    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(bind, range(args.pods)))
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    close()
    print(json.dumps({"wall": wall, "cpu": cpu}))
    return 0


def _round(name: str, how: str, src: Path, args: argparse.Namespace) -> float:
    proc, url = _emulator(args.pods)
    load = os.getloadavg()[0]
    try:
        env = dict(os.environ, PYTHONPATH=str(src))
        out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--role", "client", "--how", how,
                              "--url", url, "--pods", str(args.pods), "--threads", str(args.threads)],
                             env=env, cwd=ROOT, check=True, capture_output=True, text=True).stdout
    finally:
        assert proc.stdin is not None
        proc.stdin.write("quit\n")
        proc.stdin.flush()
        proc.wait(30)
    measured = json.loads(out.strip().splitlines()[-1])
    print(f"  {name:22} {args.pods / measured['wall']:6.0f} calls/s  CPU {1000 * measured['cpu'] / args.pods:.3f} "
          f"ms/call  (load {load:.2f})", flush=True)
    return float(measured["cpu"]) / args.pods


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["bench", "client"], default="bench", help=argparse.SUPPRESS)
    parser.add_argument("--how", choices=["httpx", "kube"], default="kube", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", action="append", default=[], metavar="REF",
                        help="also KubeClient of this git revision (its src/, git archive); repeatable")
    parser.add_argument("--no-httpx", action="store_true", help="leave out the httpx.Client rounds")
    args = parser.parse_args()
    if args.role == "client":
        return client_role(args)
    print(f"{args.pods} Bindings from {args.threads} threads per round, emulator and client in processes of their "
          f"own, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="gpufleet-baseline-") as tmp:
        codes: list[tuple[str, str, Path]] = [] if args.no_httpx else [("httpx.Client", "httpx", ROOT / "src")]
        for ref in args.baseline:
            try:
                codes.append((f"KubeClient@{ref}", "kube", revision_src(ref, Path(tmp) / ref)))
            except (OSError, subprocess.CalledProcessError) as e:
                print(f"NO BASELINE {ref}: cannot extract its src/ with git ({e})")
        codes.append(("KubeClient", "kube", ROOT / "src"))
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in codes}
        for i in range(args.repeat):
            print(f"round {i + 1}", flush=True)
            for name, how, src in codes:
                cpu[name].append(_round(name, how, src, args))
    medians = {k: statistics.median(v) for k, v in cpu.items()}
    current = medians["KubeClient"]
    print("median CPU per call: " + ", ".join(
        f"{k} {1000 * v:.3f} ms ({current / v:.2f}x)" if k != "KubeClient" else f"{k} {1000 * v:.3f} ms"
        for k, v in medians.items()) + "  (x: KubeClient's CPU over that one's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
