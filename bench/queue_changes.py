"""What the kept policy pays to take a ClusterQueue's quota changed, at thousands of ClusterQueues.

A cycle that carries on after a ClusterQueue's or Cohort's quota changed reads the queue objects again
(``read_world_objects``, measured by bench/queue_reread.py) and tells the kept policy
(``KueuePolicy.queues_changed``). This bench times the second step alone: an informer cache holds N ClusterQueues
in cohorts of 500 (a LocalQueue each), read as a live cycle reads them; one queue's nominal quota is raised, the
objects read again, and ``queues_changed`` is timed. In the same process, on the same objects:

* ``reuse``: today's code: specs read again only for the objects that changed (the parse cache hands back the very
  objects of the others), the nomination memo brought up to date for the queues changed;
* ``remake``: the same call with both reuses turned off (every spec read again, the memo made again), which is
  what the code before 2026-12-07, evening, did;
* ``new policy``: the policy a full cycle builds from the same objects instead (``KueuePolicy(manifests)``).

    .venv/bin/python bench/queue_changes.py [--queues 1000,5000] [--changes 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "kube")]

from live_env import cluster_queue, flavor, local_queue  # noqa: E402

from gpufleet.k8s import resources as r  # noqa: E402
from gpufleet.k8s.informer import ObjectCache  # noqa: E402
from gpufleet.k8s.parsing import ParseCache  # noqa: E402
from gpufleet.live.decide import queue_kinds_read  # noqa: E402
from gpufleet.live.world import read_world_objects  # noqa: E402
from gpufleet.scheduling.kueue.memo import NominationMemo  # noqa: E402
from gpufleet.scheduling.kueue.policy import KueuePolicy  # noqa: E402

PER_COHORT = 500


class Cluster:
    def __init__(self, queues: int) -> None:
        self.cache = ObjectCache()
        self.version = 0
        self.parse = ParseCache()
        self.kinds = queue_kinds_read([res for res in r.SCHEDULER_RESOURCES if res.group == r.GROUP])
        self.put(r.RESOURCE_FLAVORS, flavor())
        for i in range(queues):
            self.put(r.CLUSTER_QUEUES, cluster_queue(f"cq{i}", 10, cohort=f"co{i // PER_COHORT}"))
            self.put(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"ns{i}"}})
            self.put(r.LOCAL_QUEUES, local_queue("lq", f"cq{i}", ns=f"ns{i}"))

    def put(self, res: r.ResourceType, obj: dict[str, Any], event: str = "ADDED") -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}")
        self.cache.apply(res, event, obj)

    def read(self) -> Any:
        return read_world_objects(self.cache.snapshot(), parse=self.parse, scheduler_name="gpufleet",
                                  queue_kinds=self.kinds).manifests

    def raise_quota(self, name: str, gpus: int) -> None:
        cq = json.loads(json.dumps(self.cache.get(r.CLUSTER_QUEUES, name)))
        for q in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
            if q["name"] == "nvidia.com/gpu":
                q["nominalQuota"] = gpus
        self.put(r.CLUSTER_QUEUES, cq, "MODIFIED")


def timed_changes(queues: int, changes: int, reuse: bool) -> list[float]:
    c = Cluster(queues)
    policy = KueuePolicy(c.read())
    if not reuse:
        policy._read_from = {}  # (no object known: every spec read again)
        NominationMemo.specs_changed = lambda self, cqs, names: False  # type: ignore[method-assign]
    out = []
    try:
        for k in range(changes):
            c.raise_quota(f"cq{k}", 11 + k)
            manifests = c.read()
            if not reuse:
                policy._read_from = {}
            started = time.perf_counter()
            assert policy.queues_changed(manifests, 0.0) is not None
            out.append(time.perf_counter() - started)
    finally:
        NominationMemo.specs_changed = SPECS_CHANGED  # type: ignore[method-assign]
    return out


def new_policy(queues: int, changes: int) -> list[float]:
    c = Cluster(queues)
    out = []
    for k in range(changes):
        c.raise_quota(f"cq{k}", 11 + k)
        manifests = c.read()
        started = time.perf_counter()
        KueuePolicy(manifests)
        out.append(time.perf_counter() - started)
    return out


SPECS_CHANGED = NominationMemo.specs_changed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", default="1000,5000", help="comma-separated ClusterQueue counts")
    parser.add_argument("--changes", type=int, default=7, help="quota changes timed per variant")
    args = parser.parse_args()
    print("ClusterQueues | queues_changed, reuse: median (all) | remake: median | remake / reuse | "
          "new policy: median | new policy / reuse")
    for n in (int(x) for x in args.queues.split(",")):
        reuse = timed_changes(n, args.changes, reuse=True)
        remake = timed_changes(n, args.changes, reuse=False)
        fresh = new_policy(n, args.changes)
        m_reuse, m_remake, m_fresh = (statistics.median(v) * 1000 for v in (reuse, remake, fresh))
        print(f"{n:>6,} | {m_reuse:6.1f} ms ({', '.join(f'{v * 1000:.0f}' for v in reuse)}) | {m_remake:6.1f} ms | "
              f"{m_remake / m_reuse:5.1f}x | {m_fresh:6.1f} ms | {m_fresh / m_reuse:5.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
