"""Live binding throughput: the ``gpufleet scheduler`` loop against the API emulator of the tests (kmock +
ApiSim over real HTTP on 127.0.0.1), each in a process of its own, with 1,000 GPU nodes.

N nodes × 8 whole A100-80GB; P pending single-GPU pods in one LocalQueue → ClusterQueue with quota for all of
them. Three processes: this one starts the emulator (which creates every object before the scheduler
starts), then the scheduler, waits until the emulator has bound every pod, and asks both for their figures.
The emulator has a process and a GIL of its own, so the figures measure the scheduler, not the emulator
sharing its interpreter; on a machine with few cores the two still compete for CPU (the load average is
printed with each run).

Each run reports:

* pods bound per second, from the moment the scheduler's informers synced (its first cycle starts) to the
  last Binding the emulator accepted; with ``--arrive-after-sync`` the pods are created a second after the
  scheduler synced, as a burst meets a running scheduler, and the span starts at the first creation;
* the scheduler process's CPU seconds over the same span, in all and per pod, and the share of them spent in
  the core (world rebuild and policy);
* the emulator's count of Bindings accepted and refused (a refused Binding is a scheduler asking to bind a pod
  that is already bound), and the checks made on its final state: no pod bound twice, no node holding more
  GPUs than it has, no GPU handed to two pods;
* Scheduled events written (the scheduler drops events when its queue is full, never a bind).

``--baseline REF`` (default: the code before the bind pipeline) runs the same scenario with the scheduler of
that git revision (``git archive`` of ``src/`` into a temporary directory, put first on the scheduler
process's PYTHONPATH), alternating with the current code run by run, and prints the ratio of the medians.

    .venv/bin/python bench/kube_binding.py [--nodes 1000] [--pods 4000] [--repeat 3] [--baseline REF|none]
                                           [--workers 16] [--qps Q] [--burst B] [--profile gpufleet]
                                           [--arrive-after-sync]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "kube"))
sys.path.append(str(ROOT / "bench"))

from revision_src import revision_src  # noqa: E402  (a sibling module of this script)

# The revision before the bind pipeline (issue 15 item 8): Bindings carry the annotations already, but each
# cycle waits for all of its writes and every Scheduled event is written inline by the bind worker.
BASELINE_REF = "ddba94f097024d09c33f8ec9703b061f70c7622b"

JsonDict = dict[str, Any]


# --- the emulator process ---------------------------------------------------------------------------------


def emulator_role(args: argparse.Namespace) -> int:
    from kmock._internal import parsing as kmock_parsing
    from kube_apisim import ApiSim, DirectWrites, Failure, KmockThread, parse_path_with_namespaces
    from live_env import cluster_queue, flavor, local_queue, node, pod

    from gpufleet.k8s import resources as r

    class CountingSim(ApiSim):
        """ApiSim that counts what it did with each Binding (called on the loop thread only)."""

        def __init__(self, harness: KmockThread) -> None:
            super().__init__(harness, record_requests=False)
            self.accepted: Counter[str] = Counter()  # pod -> Bindings that bound it
            self.refused: Counter[int] = Counter()  # HTTP status -> Bindings refused
            self.last_bind = 0.0
            self.events = 0

        def _bind(self, res: Any, ns: str | None, name: str, body: JsonDict) -> Any:
            try:
                out = super()._bind(res, ns, name, body)
            except Failure as e:
                self.refused[int(e.status)] += 1
                raise
            self.accepted[f"{ns}/{name}"] += 1
            self.last_bind = time.monotonic()
            return out

        def _create(self, res: Any, obj: JsonDict, namespace: str | None) -> JsonDict:
            if res.key == r.EVENTS.key:
                self.events += 1
            return super()._create(res, obj, namespace)

    kmock_parsing.parse_path = parse_path_with_namespaces  # type: ignore[assignment]
    # Bindings and Events straight to ApiSim, past kmock's routing (kube_apisim.DirectWrites): this emulator's
    # CPU per Binding, not the scheduler's, was the larger part of what bounded the burst on 2 cores.
    harness = KmockThread(DirectWrites)
    harness.start()
    sim = CountingSim(harness)
    sim.serve(r.NODES, r.PODS, r.NAMESPACES, r.PRIORITY_CLASSES, r.LEASES, r.EVENTS, r.RESOURCE_FLAVORS,
              r.CLUSTER_QUEUES, r.LOCAL_QUEUES, r.COHORTS, r.WORKLOAD_PRIORITY_CLASSES)

    def fill(s: ApiSim) -> None:
        for i in range(args.nodes):
            s._create(r.NODES, node(f"node-{i:05d}", gpus=8), None)
        s._create(r.RESOURCE_FLAVORS, flavor(), None)
        queue = cluster_queue("all", gpus=args.nodes * 8, cpu=str(args.nodes * 64))
        # quota for every pod: live_env's 10Ti of memory admits 10,240 pods of 1Gi, and the run stopped there
        for res in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
            if res["name"] == "memory":
                res["nominalQuota"] = f"{max(args.pods, 1)}Gi"
        s._create(r.CLUSTER_QUEUES, queue, None)
        s._create(r.LOCAL_QUEUES, local_queue("team", "all"), None)
        if not args.arrive_after_sync:
            create_pods(s)

    def create_pods(s: ApiSim) -> None:
        for i in range(args.pods):
            s._create(r.PODS, pod(f"p-{i:06d}", gpus=1, queue="team"), None)

    sim.harness.call(lambda: fill(sim), timeout=600)
    _emit({"url": sim.url})
    cpu0 = time.process_time()
    for line in sys.stdin:
        command = line.strip()
        if command == "create":  # --arrive-after-sync: the burst, into a scheduler that is running
            began = time.monotonic()
            sim.harness.call(lambda: create_pods(sim), timeout=600)
            _emit({"began": began, "created": time.monotonic()})
        elif command == "bound":
            _emit({"bound": len(sim.accepted)})  # an int read across threads: no need to go through the loop
        elif command == "report":
            _emit(sim.harness.call(lambda: _final_state(sim, r.PODS.key, r.NODES.key), timeout=120)
                  | {"accepted": sum(sim.accepted.values()), "refused": dict(sim.refused),
                     "last_bind": sim.last_bind, "events": sim.events, "cpu_s": time.process_time() - cpu0})
        elif command == "quit":
            break
    sim.close()
    harness.stop()
    return 0


def _final_state(sim: Any, pods_key: str, nodes_key: str) -> JsonDict:
    """Double binds and over-commitment, from the emulator's objects (run on its loop thread)."""
    double = sorted(k for k, n in sim.accepted.items() if n > 1)
    capacity = {name: int(o["status"]["allocatable"].get("nvidia.com/gpu", 0))
                for (_, name), o in sim.objects[nodes_key].items()}
    held: Counter[str] = Counter()
    devices: dict[str, list[str]] = {}
    for o in sim.objects[pods_key].values():
        node = (o.get("spec") or {}).get("nodeName")
        if not node or node not in capacity:
            continue  # (unbound, or left on a node that is gone until the pod garbage collector deletes it)
        for c in o["spec"]["containers"]:
            held[node] += int(((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu", 0))
        annotations = (o.get("metadata") or {}).get("annotations") or {}
        devices.setdefault(node, []).extend(json.loads(annotations.get("gpufleet.io/devices", "[]")))
    over = sorted(n for n, used in held.items() if used > capacity.get(n, 0))
    shared = sorted(n for n, ids in devices.items() if len(ids) != len(set(ids)))
    return {"double_bound": double, "overcommitted_nodes": over, "shared_gpus_nodes": shared}


# --- the scheduler process --------------------------------------------------------------------------------


def scheduler_role(args: argparse.Namespace) -> int:
    try:
        from gpufleet.k8s.client import KubeClient
        from gpufleet.k8s.informer import Backoff
        from gpufleet.live import settings as ks
        from gpufleet.live.scheduler import Scheduler
    except ImportError:  # a baseline revision from before gpufleet.kube was split (issue 27)
        from gpufleet.kube import settings as ks  # type: ignore[no-redef]
        from gpufleet.kube.client import KubeClient  # type: ignore[no-redef]
        from gpufleet.kube.informer import Backoff  # type: ignore[no-redef]
        from gpufleet.kube.scheduler import Scheduler  # type: ignore[no-redef]

    binding = ks.BindingSettings(workers=args.workers, retries=3, retry_backoff=0.01, gang_repair_timeout=60.0,
                                 assume_timeout=60.0)
    # The production defaults but for the binding's retry pace and assume timeout (and no HTTP endpoints).
    settings = ks.SchedulerSettings(placement_profile=args.profile, round_budget=args.round_budget, binding=binding,
                                    metrics_bind_address="127.0.0.1:0", health_probe_bind_address="127.0.0.1:0")
    known = {f.name for f in dataclasses.fields(ks.SchedulerSettings)}
    applied: dict[str, Any] = {}
    if "client_connection" in known and (args.qps is not None or args.burst is not None):
        cc = settings.client_connection  # type: ignore[attr-defined]
        cc = dataclasses.replace(cc, **{k: v for k, v in (("qps", args.qps), ("burst", args.burst))
                                        if v is not None})
        settings = dataclasses.replace(settings, client_connection=cc)  # type: ignore[call-arg]
        applied = dataclasses.asdict(cc)
    elif "client_connection" in known:
        applied = dataclasses.asdict(settings.client_connection)  # type: ignore[attr-defined]
    client = KubeClient(host=args.url, timeout=30.0, max_connections=max(50, args.workers * 2))
    # As the CLI makes it: the process is the scheduler's (its garbage collector set for it), where the code has that.
    own = {"own_process": True} if "own_process" in inspect.signature(Scheduler).parameters else {}
    sched = Scheduler(client, settings, identity="bench", leader_elect=False, serve=False,
                      informer_options={"backoff": Backoff(initial=0.05, maximum=0.2, jitter=0.0),
                                        "min_watch_seconds": 0.0}, **own)
    collections = CollectorTimer()
    sched.start()
    if not sched.informers.wait_for_sync(300.0):
        _emit({"error": "informers did not sync"})
        return 1
    synced, cpu0 = time.monotonic(), time.process_time()
    collections.reset()  # the burst's own, from here
    _emit({"synced": synced, "client_connection": applied})
    sys.stdin.readline()  # "stop": the emulator has bound every pod
    cpu = time.process_time() - cpu0
    reports = list(sched.reports)
    exposition = sched.metrics.exposition().decode()
    sched.stop()
    client.close()
    t0 = time.time() - (time.monotonic() - synced)  # the sync moment on the wall clock the reports use
    _emit({"cpu_s": cpu, "cycles": len(reports), "policy_cycles": sum(c.policy_cycles for c in reports),
           "per_cycle": [(c.number, round(c.started - t0, 3), c.policy_cycles, len(c.admitted), len(c.bound),
                          round(c.core_s, 3), round(c.world_s, 3), round(c.policy_s, 3)) for c in reports],
           "core_s": sum(c.core_s for c in reports), "world_s": sum(c.world_s for c in reports),
           "policy_s": sum(c.policy_s for c in reports), "bind_cpu_s": sum(c.bind_cpu_s for c in reports),
           "events_dropped": _metric(exposition, "gpufleet_events_dropped_total"),
           "gc": collections.figures()})
    return 0


class CollectorTimer:
    """The scheduler process's garbage collections (count per generation, wall seconds in all), through
    ``gc.callbacks``: a full collection walks everything alive, and at 20,000 pods that was a sixth of the CPU."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = 0.0
        self._started = 0.0
        gc.callbacks.append(self._on)

    def reset(self) -> None:
        self.counts, self.seconds = [0, 0, 0], 0.0

    def _on(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        self.counts[info["generation"]] += 1
        self.seconds += time.perf_counter() - self._started

    def figures(self) -> JsonDict:
        return {"collections": list(self.counts), "seconds": round(self.seconds, 3)}


def _metric(exposition: str, name: str) -> float | None:
    for line in exposition.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


# --- the orchestrator -------------------------------------------------------------------------------------


def _emit(obj: JsonDict) -> None:
    print(json.dumps(obj), flush=True)


def _ask(proc: subprocess.Popen[str], command: str | None = None) -> JsonDict:
    assert proc.stdin is not None and proc.stdout is not None
    if command is not None:
        proc.stdin.write(command + "\n")
        proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"{proc.args[3]} process ended without answering (exit {proc.wait()})")
    answer: JsonDict = json.loads(line)
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return answer


def _child(role: str, args: argparse.Namespace, extra: list[str], src: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(src), str(ROOT / "tests" / "kube")]))
    command = [sys.executable, str(Path(__file__).resolve()), "--role", role, "--nodes", str(args.nodes),
               "--pods", str(args.pods), *extra]
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                            cwd=ROOT)


def run_once(args: argparse.Namespace, src: Path, log: TextIO) -> JsonDict:
    load_before = os.getloadavg()
    emulator = _child("emulator", args, ["--arrive-after-sync"] if args.arrive_after_sync else [], ROOT / "src")
    scheduler: subprocess.Popen[str] | None = None
    try:
        url = _ask(emulator)["url"]
        extra = ["--url", url, "--workers", str(args.workers), "--profile", args.profile,
                 "--round-budget", str(args.round_budget)]
        for flag, value in (("--qps", args.qps), ("--burst", args.burst)):
            if value is not None:
                extra += [flag, str(value)]
        scheduler = _child("scheduler", args, extra, src)
        started = _ask(scheduler)
        begin = started["synced"]
        if args.arrive_after_sync:
            time.sleep(1.0)  # the scheduler's first cycles (on a cluster with nothing pending) are over
            begin = _ask(emulator, "create")["began"]
        deadline = time.monotonic() + args.timeout
        bound = 0
        while time.monotonic() < deadline:
            bound = int(_ask(emulator, "bound")["bound"])
            if bound >= args.pods:
                break
            time.sleep(0.05)
        figures = _ask(scheduler, "stop")
        state = _ask(emulator, "report")
        emulator.stdin.write("quit\n")  # type: ignore[union-attr]
        emulator.stdin.flush()  # type: ignore[union-attr]
    finally:
        for proc in (scheduler, emulator):
            if proc is not None:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    print(f"{proc.args[3]} process did not stop: killing it", file=log)
                    proc.kill()
    span = max(state["last_bind"] - begin, 1e-9)
    return {"bound": bound, "span_s": span, "pods_per_s": bound / span, "load": (load_before, os.getloadavg()),
            "client_connection": started.get("client_connection"), **figures,
            **{f"emulator_{k}": v for k, v in state.items()}}


def _line(label: str, run: JsonDict, pods: int) -> str:
    (b1, _, _), (a1, _, _) = run["load"]
    refused = sum(run["emulator_refused"].values())
    checks = "ok" if not (run["emulator_double_bound"] or run["emulator_overcommitted_nodes"]
                          or run["emulator_shared_gpus_nodes"]) else "VIOLATED"
    dropped = run.get("events_dropped")
    return (f"{label:9} {run['bound']:>5}/{pods} in {run['span_s']:6.2f}s  {run['pods_per_s']:6.0f} pods/s  "
            f"CPU {run['cpu_s']:6.2f}s ({1000 * run['cpu_s'] / max(run['bound'], 1):5.2f} ms/pod; binding threads "
            f"{run['bind_cpu_s']:5.2f}s; core wall {run['core_s']:5.2f}s)  emulator CPU "
            f"{run['emulator_cpu_s']:5.2f}s  cycles {run['cycles']:>3}  binds accepted {run['emulator_accepted']}, "
            f"refused {refused}  checks {checks}  events {run['emulator_events']}"
            f"{'' if dropped is None else f' (dropped {dropped:.0f})'}  load {b1:.2f}->{a1:.2f}"
            f"{_gc_text(run.get('gc'))}")


def _gc_text(figures: JsonDict | None) -> str:
    if figures is None:
        return ""
    counts = "/".join(str(n) for n in figures["collections"])
    return f"  gc {counts} collections (gen 0/1/2), {figures['seconds']:.2f}s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=("orchestrator", "emulator", "scheduler"), default="orchestrator",
                        help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=4000)
    parser.add_argument("--workers", type=int, default=16, help="binding.workers")
    parser.add_argument("--qps", type=float, default=None, help="clientConnection.qps (default: the setting's)")
    parser.add_argument("--burst", type=int, default=None, help="clientConnection.burst (default: the setting's)")
    parser.add_argument("--profile", default="gpufleet")
    parser.add_argument("--round-budget", type=float, default=2.0, help="roundBudget, seconds (the default)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each code")
    parser.add_argument("--baseline", default=BASELINE_REF,
                        help=f"git revision of the previous code (default {BASELINE_REF}); 'none' to skip")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for every pod to be bound")
    parser.add_argument("--verbose", action="store_true", help="print each run's first 40 cycles")
    parser.add_argument("--arrive-after-sync", action="store_true",
                        help="create the pods once the scheduler runs (a burst into a running scheduler), timed "
                             "from the first creation, instead of before it starts (a backlog met at start)")
    args = parser.parse_args()
    if args.role == "emulator":
        return emulator_role(args)
    if args.role == "scheduler":
        return scheduler_role(args)

    print(f"{args.nodes} nodes x 8 A100, {args.pods} "
          f"{'1-GPU pods created once the scheduler runs' if args.arrive_after_sync else 'pending 1-GPU pods'}, "
          f"{args.workers} API workers, "
          f"{os.cpu_count()} CPUs; emulator and scheduler in processes of their own", flush=True)
    with tempfile.TemporaryDirectory(prefix="gpufleet-baseline-") as tmp:
        codes: list[tuple[str, Path]] = [("current", ROOT / "src")]
        if args.baseline != "none":
            try:
                codes.insert(0, ("baseline", revision_src(args.baseline, Path(tmp))))
            except (OSError, subprocess.CalledProcessError) as e:
                print(f"NO BASELINE: cannot extract src/ of {args.baseline} with git ({e}); current code only")
        runs: dict[str, list[JsonDict]] = {label: [] for label, _ in codes}
        for i in range(args.repeat):
            for label, src in codes:
                run = run_once(args, src, sys.stdout)
                runs[label].append(run)
                print(f"run {i + 1}  " + _line(label, run, args.pods), flush=True)
                if args.verbose:
                    for number, at, policy_cycles, admitted, bound, core, world, policy in run["per_cycle"][:40]:
                        print(f"    cycle {number:>3} at {at:6.2f}s: {policy_cycles:>4} policy cycles, admitted "
                              f"{admitted:>4}, bound {bound:>4}, core {core:.2f}s (world {world:.2f}s, policy "
                              f"{policy:.2f}s)")
    failed = any(run["bound"] < args.pods or run["emulator_double_bound"] or run["emulator_overcommitted_nodes"]
                 or run["emulator_shared_gpus_nodes"] for rs in runs.values() for run in rs)
    medians = {label: statistics.median(r["pods_per_s"] for r in rs) for label, rs in runs.items()}
    cpu = {label: statistics.median(r["cpu_s"] / max(r["bound"], 1) for r in rs) for label, rs in runs.items()}
    for label in runs:
        print(f"median {label:9} {medians[label]:6.0f} pods/s, scheduler CPU {1000 * cpu[label]:.2f} ms/pod "
              f"({len(runs[label])} runs)")
    if "baseline" in medians:
        print(f"ratio current/baseline: {medians['current'] / medians['baseline']:.2f}x pods/s, "
              f"{cpu['current'] / cpu['baseline']:.2f}x CPU per pod")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
