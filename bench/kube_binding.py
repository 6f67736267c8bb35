"""Live binding throughput: the ``gpufleet scheduler`` loop against the API emulator of the tests (kmock +
ApiSim over real HTTP on 127.0.0.1), with 1,000 GPU nodes.

N nodes × 8 whole A100-80GB; P pending single-GPU pods in one LocalQueue → ClusterQueue with quota for all of
them. The scheduler starts (informers list everything), then binds every pod: intent annotation, Binding,
Scheduled event, plus the queue statuses. Reported, from one run:

* pods bound per second (first cycle start → last pod bound);
* where the scheduling time went: *core* (rebuild the world from the cache, run the policy cycles) versus
  *API* (the writes, measured as wall time of the concurrent calls), and the rest (waiting for watch
  events between cycles).

The emulator runs in this process, so API time includes the emulator's own CPU under the same GIL: the API
share is an upper bound of what a real API server would cost the scheduler's process.

    .venv/bin/python bench/kube_binding.py [--nodes 1000] [--pods 4000] [--workers 16] [--profile gpufleet]
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "kube"))

import kmock
from kmock._internal import parsing as kmock_parsing
from kube_apisim import ApiSim, KmockThread, parse_path_with_namespaces
from live_env import FAST_INFORMERS, cluster_queue, fast_settings, flavor, local_queue, node, pod

from gpufleet.kube import resources as r
from gpufleet.kube.client import KubeClient
from gpufleet.kube.scheduler import Scheduler
from gpufleet.kube.settings import BindingSettings

SERVED = (r.NODES, r.PODS, r.NAMESPACES, r.PRIORITY_CLASSES, r.LEASES, r.EVENTS, r.RESOURCE_FLAVORS,
          r.CLUSTER_QUEUES, r.LOCAL_QUEUES, r.COHORTS, r.WORKLOAD_PRIORITY_CLASSES)


def populate(sim: ApiSim, nodes: int, pods: int) -> None:
    def fill(s: ApiSim) -> None:
        for i in range(nodes):
            s._create(r.NODES, node(f"node-{i:05d}", gpus=8), None)
        s._create(r.RESOURCE_FLAVORS, flavor(), None)
        s._create(r.CLUSTER_QUEUES, cluster_queue("all", gpus=nodes * 8, cpu=str(nodes * 64)), None)
        s._create(r.LOCAL_QUEUES, local_queue("team", "all"), None)
        for i in range(pods):
            s._create(r.PODS, pod(f"p-{i:06d}", gpus=1, queue="team"), None)

    sim.harness.call(lambda: fill(sim), timeout=600)


def bound(sim: ApiSim) -> int:
    return int(sim.harness.call(lambda: sum(1 for o in sim.objects[r.PODS.key].values()
                                            if (o.get("spec") or {}).get("nodeName"))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--profile", default="gpufleet")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--verbose", action="store_true", help="print the first cycles one by one")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    kmock_parsing.parse_path = parse_path_with_namespaces  # type: ignore[assignment]
    harness = KmockThread(kmock.KubernetesScaffold)
    harness.start()
    sim = ApiSim(harness, record_requests=False)
    sim.serve(*SERVED)
    t0 = time.perf_counter()
    populate(sim, args.nodes, args.pods)
    print(f"emulator: {args.nodes} nodes x 8 A100, {args.pods} pending 1-GPU pods "
          f"(created in {time.perf_counter() - t0:.1f}s)")

    settings = fast_settings(placement_profile=args.profile, binding=BindingSettings(
        workers=args.workers, retries=3, retry_backoff=0.01, gang_repair_timeout=60.0, assume_timeout=60.0))
    settings = dataclasses.replace(settings, round_budget=5.0)
    client = KubeClient(host=sim.url, timeout=30.0, max_connections=max(50, args.workers * 2))
    sched = Scheduler(client, settings, identity="bench", leader_elect=False, serve=False,
                      informer_options=FAST_INFORMERS)
    started = time.perf_counter()
    sched.start()
    assert sched.informers.wait_for_sync(120.0), "informers did not sync"
    synced = time.perf_counter()
    deadline = synced + args.timeout
    while bound(sim) < args.pods and time.perf_counter() < deadline:
        time.sleep(0.05)

    count = bound(sim)
    time.sleep(0.5)  # let the cycle that bound the last pods record its report
    sched.stop()
    client.close()
    sim.close()
    harness.stop()

    every = list(sched.reports)
    # From the first cycle's start (after the informers synced) to the end of the last cycle that bound pods.
    last = max((c.number for c in every if c.bound), default=0)
    reports = [c for c in every if c.number <= last]
    span = max(c.started + c.core_s + c.api_s for c in reports) - min(c.started for c in reports)
    core = sum(c.core_s for c in reports)
    world = sum(c.world_s for c in reports)
    policy = sum(c.policy_s for c in reports)
    api = sum(c.api_s for c in reports)
    bind_cpu = sum(c.bind_cpu_s for c in reports)
    cycles = len(reports)
    policy_cycles = sum(c.policy_cycles for c in reports)
    print(f"informer sync: {synced - started:.2f}s")
    print(f"bound {count}/{args.pods} pods in {span:.2f}s: {count / span:.0f} pods/s "
          f"({cycles} scheduler cycles, {policy_cycles} policy cycles, {args.workers} API workers)")
    print(f"  core  {core:7.2f}s  {100 * core / span:5.1f}%   (rebuild world {world:.2f}s, policy {policy:.2f}s)")
    print(f"  api   {api:7.2f}s  {100 * api / span:5.1f}%   (annotation + Binding + event per pod, queue statuses; "
          f"of which our client's CPU {bind_cpu:.2f}s summed over {args.workers} threads, the rest the emulator)")
    print(f"  other {span - core - api:7.2f}s  {100 * (span - core - api) / span:5.1f}%   "
          "(waiting for watch events between cycles)")
    if args.verbose:
        for c in reports[:40]:
            print(f"  cycle {c.number}: policy cycles {c.policy_cycles}, admitted {len(c.admitted)}, bound "
                  f"{len(c.bound)}, pending {c.pending}, core {c.core_s:.3f}s (world {c.world_s:.3f}s), "
                  f"api {c.api_s:.3f}s")
    return 0 if count == args.pods else 1


if __name__ == "__main__":
    sys.exit(main())
