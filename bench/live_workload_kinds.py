"""What grouping pods by their owners costs the live scheduler's world rebuild (assemble + finish), in one process.

J JobSets of ours (one replicated job of 4 one-GPU pods each, all pods created), D Deployments of another
scheduler (watched, never parsed), 100 nodes of 8 GPUs. Each measured cycle one JobSet's status changes (a new
resourceVersion), as its controller does while its pods come and go. Three worlds on the same objects:

* ``pods only``: the world without the workload kinds (the scheduler before issue 14's live grouping);
* ``owners, memoised``: with them, each object parsed once per resourceVersion (gpufleet.k8s.parsing);
* ``owners, not memoised``: the same with the per-object memo emptied before each cycle (every object of ours
  parsed again, and every foreign one judged again): what the memo saves.

Prints the median of R cycles and the ratios.

    .venv/bin/python bench/live_workload_kinds.py [--jobsets 500] [--deployments 2000] [--repeat 7]
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
sys.path.insert(0, str(ROOT / "tests" / "kube"))

from live_env import node  # noqa: E402
from workload_env import DEPLOYMENTS, JOBSETS, deployment, jobset, jobset_pods  # noqa: E402

from gpufleet.api.objects import SchedulerConfig  # noqa: E402
from gpufleet.k8s import resources as r  # noqa: E402
from gpufleet.k8s.informer import CacheSnapshot  # noqa: E402
from gpufleet.k8s.parsing import ParseCache  # noqa: E402
from gpufleet.live.assumed import AssumedPods  # noqa: E402
from gpufleet.live.world import assemble, finish  # noqa: E402

JsonDict = dict[str, Any]


def objects(jobsets: int, deployments: int) -> dict[str, dict[str, JsonDict]]:
    out: dict[str, dict[str, JsonDict]] = {"nodes": {}, "pods": {}, JOBSETS.key: {}, DEPLOYMENTS.key: {}}
    rv = 0

    def put(key: str, res: r.ResourceType, obj: JsonDict) -> None:
        nonlocal rv
        rv += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(rv)
        out[key][res.object_key(obj)] = obj

    for i in range(100):
        put("nodes", r.NODES, node(f"n{i}", gpus=8))
    for j in range(jobsets):
        owner = jobset(f"train-{j}", jobs=1, pods_per_job=4, gpus=1)
        put(JOBSETS.key, JOBSETS, owner)
        for p in jobset_pods(owner):
            put("pods", r.PODS, p)
    for d in range(deployments):
        theirs = deployment(f"web-{d}", replicas=2, gpus=0)
        theirs["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
        put(DEPLOYMENTS.key, DEPLOYMENTS, theirs)
    return out


def cycle_times(base: dict[str, dict[str, JsonDict]], repeat: int, *, owners: bool, memo: bool) -> list[float]:
    parse = ParseCache()
    objs = {k: dict(v) for k, v in base.items() if owners or k in ("nodes", "pods")}
    times = []
    for i in range(repeat + 1):  # the first cycle parses everything: not counted
        if owners:
            key = f"ml/train-{i % len(objs[JOBSETS.key])}"
            changed = dict(objs[JOBSETS.key][key])
            changed["metadata"] = {**changed["metadata"], "resourceVersion": f"s{i}"}
            objs[JOBSETS.key][key] = changed
        if not memo:
            parse._alone.clear()
            parse._ours.clear()
        snap = CacheSnapshot(i, {k: dict(v) for k, v in objs.items()})
        started = time.perf_counter()
        world = assemble(snap, scheduler_name="gpufleet", kueue=SchedulerConfig(), parse=parse,
                         assumed=AssumedPods(), now=time.time())
        finish(world)
        if i:
            times.append(time.perf_counter() - started)
        if owners:
            assert len(world.workloads) == len(objs[JOBSETS.key]), "every JobSet one workload"
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobsets", type=int, default=500)
    ap.add_argument("--deployments", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    base = objects(args.jobsets, args.deployments)
    pods_only = statistics.median(cycle_times(base, args.repeat, owners=False, memo=True))
    memoised = statistics.median(cycle_times(base, args.repeat, owners=True, memo=True))
    parsed_again = statistics.median(cycle_times(base, args.repeat, owners=True, memo=False))
    print(f"{args.jobsets} JobSets ({4 * args.jobsets} pods), {args.deployments} foreign Deployments, 100 nodes; "
          f"median of {args.repeat} cycles, one JobSet's status changed in each")
    print(f"  pods only               {pods_only * 1000:8.1f} ms")
    print(f"  owners, memoised        {memoised * 1000:8.1f} ms   {memoised / pods_only:5.2f}x pods only")
    print(f"  owners, not memoised    {parsed_again * 1000:8.1f} ms   {parsed_again / memoised:5.2f}x memoised")


if __name__ == "__main__":
    main()
