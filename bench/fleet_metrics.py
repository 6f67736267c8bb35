"""What the fleet metrics cost a live scheduling cycle: :meth:`FleetMetrics.observe` against the cycle's core
(world rebuild from the cache snapshot and the policy run) on the same world, in the same process.

N nodes of 8 whole A100-80GB in four node pools; about 75% of the GPUs held by bound pods of two
ClusterQueues (1, 2, 4 or 8 GPUs each), and P pending pods of mixed shapes, some of which fit nowhere, so the
fragmentation check looks at every node. Prints the median times of R repeats and their ratio.

    .venv/bin/python bench/fleet_metrics.py [--nodes 1000] [--pending 200] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kube"))

from live_env import cluster_queue, flavor, local_queue, node, pod  # noqa: E402

from gpufleet.api.objects import SchedulerConfig  # noqa: E402
from gpufleet.k8s import resources as r  # noqa: E402
from gpufleet.k8s.informer import CacheSnapshot  # noqa: E402
from gpufleet.k8s.parsing import ParseCache  # noqa: E402
from gpufleet.live import planner  # noqa: E402
from gpufleet.live.assumed import AssumedPods  # noqa: E402
from gpufleet.live.fleet_metrics import FleetMetrics  # noqa: E402
from gpufleet.live.world import assemble, finish  # noqa: E402
from gpufleet.scheduler_metrics import SchedulerMetrics  # noqa: E402

JsonDict = dict[str, Any]


def objects(nodes: int, pending: int, seed: int = 1) -> dict[str, list[JsonDict]]:
    rng = random.Random(seed)
    out: dict[str, list[JsonDict]] = {
        "nodes": [node(f"n{i}", gpus=8, labels={"gpufleet.io/node-pool": f"pool{i % 4}"}) for i in range(nodes)],
        "resourceflavors.gpufleet.io": [flavor("gpu")],
        "clusterqueues.gpufleet.io": [cluster_queue(q, nodes * 4, cpu="100000") for q in ("a", "b")],
        "localqueues.gpufleet.io": [local_queue(q, q) for q in ("a", "b")], "pods": []}
    for i in range(nodes):
        free = 8
        j = 0
        while free > 2:
            size = min(rng.choice((1, 2, 4, 8)), free - 2)
            out["pods"].append(pod(f"b{i}-{j}", gpus=size, queue=rng.choice("ab"), node_name=f"n{i}"))
            free -= size
            j += 1
    for k in range(pending):
        out["pods"].append(pod(f"w{k}", gpus=rng.choice((1, 3, 8, 8)), queue=rng.choice("ab")))
    return out


def snapshot(objs: dict[str, list[JsonDict]]) -> CacheSnapshot:
    out: dict[str, dict[str, JsonDict]] = {}
    for i, (key, items) in enumerate(objs.items()):
        res = next(t for t in r.SCHEDULER_RESOURCES if t.key == key)
        bucket = out.setdefault(key, {})
        for j, o in enumerate(items):
            o = json.loads(json.dumps(o))
            o["metadata"]["resourceVersion"] = f"{i}.{j}"
            bucket[res.object_key(o)] = o
    return CacheSnapshot(1, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pending", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    snap = snapshot(objects(args.nodes, args.pending))
    parse = ParseCache()
    core: list[float] = []
    observe: list[float] = []
    fleet = FleetMetrics(SchedulerMetrics(), refresh=0.0)  # every call computes everything: its full cost
    pods = len(snap.objects["pods"])
    for _ in range(args.repeat):
        started = time.perf_counter()
        world = assemble(snap, scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=parse,
                         assumed=AssumedPods(), now=time.time())
        finish(world)
        plan = planner.run(planner.make_policy(world, "gpufleet", set()), world.now, max_cycles=50)
        core.append(time.perf_counter() - started)
        started = time.perf_counter()
        fleet.observe(world, plan)
        observe.append(time.perf_counter() - started)
    c, o = statistics.median(core), statistics.median(observe)
    print(f"{args.nodes} nodes, {pods} pods ({len(plan.pending)} pending after the cycle), {args.repeat} repeats")
    print(f"cycle core (rebuild + policy), median: {c * 1000:.1f} ms")
    print(f"fleet metrics (observe), median:       {o * 1000:.1f} ms")
    print(f"observe / core:                        {o / c:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
