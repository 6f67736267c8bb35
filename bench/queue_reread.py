"""What a cycle that carries on pays to read the queue objects again after a Namespace or a LocalQueue changed.

Since 2026-12-07 a Namespace created, relabelled or deleted, or a LocalQueue created, is carried on
(``gpufleet.live.increment.read_queue_changes``): the queue kinds are read again as a full cycle reads them
(``read_world_objects``: every Namespace, LocalQueue, ClusterQueue... parsed again, then cross-checked), and the kept
policy is told. That read grows with the number of queue objects. This bench fills an informer cache with N
namespaces, a LocalQueue in each and 100 ClusterQueues, reads them once (the full cycle's first read, the
baseline), then creates namespaces one at a time and times each read after it, in the same process.

    .venv/bin/python bench/queue_reread.py [--namespaces 200,2000,5000] [--changes 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "kube")]

from live_env import cluster_queue, flavor, local_queue  # noqa: E402

from gpufleet.k8s import resources as r  # noqa: E402
from gpufleet.k8s.informer import ObjectCache  # noqa: E402
from gpufleet.k8s.parsing import ParseCache  # noqa: E402
from gpufleet.live.decide import queue_kinds_read  # noqa: E402
from gpufleet.live.world import read_world_objects  # noqa: E402

JsonDict = dict[str, object]


def run(namespaces: int, changes: int) -> tuple[float, list[float]]:
    cache = ObjectCache()
    version = 0

    def put(res: r.ResourceType, obj: dict) -> None:  # type: ignore[type-arg]
        nonlocal version
        version += 1
        obj["metadata"]["resourceVersion"] = str(version)
        obj["metadata"].setdefault("uid", f"uid-{version}")
        cache.apply(res, "ADDED", obj)

    put(r.RESOURCE_FLAVORS, flavor())
    for i in range(100):
        put(r.CLUSTER_QUEUES, cluster_queue(f"cq{i}", 10))
    for i in range(namespaces):
        put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                           "metadata": {"name": f"ns{i}", "labels": {"team": str(i % 10)}}})
        put(r.LOCAL_QUEUES, local_queue("lq", f"cq{i % 100}", ns=f"ns{i}"))
    parse = ParseCache()
    kinds = queue_kinds_read([res for res in r.SCHEDULER_RESOURCES if res.group == r.GROUP])

    def read() -> float:
        started = time.perf_counter()
        read_world_objects(cache.snapshot(), parse=parse, scheduler_name="gpufleet", queue_kinds=kinds)
        return time.perf_counter() - started

    first = read()
    after = []
    for k in range(changes):
        put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ci-{k}"}})
        after.append(read())
    return first, after


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--namespaces", default="200,2000,5000", help="comma-separated counts")
    parser.add_argument("--changes", type=int, default=5, help="namespaces created, each read after")
    args = parser.parse_args()
    print("namespaces (a LocalQueue each; 100 ClusterQueues) | first read (a full cycle's) | read after a namespace "
          "created: median (all) | ratio")
    for n in (int(x) for x in args.namespaces.split(",")):
        first, after = run(n, args.changes)
        median = statistics.median(after)
        print(f"{n:>6,} | {first * 1000:7.1f} ms | {median * 1000:7.1f} ms ("
              f"{', '.join(f'{a * 1000:.0f}' for a in after)}) | {median / first:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
