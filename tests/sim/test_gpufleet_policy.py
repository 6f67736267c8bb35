"""The simulator under the colleague's Kueue core (the ``gpufleet`` policy), through the Policy protocol only."""

from __future__ import annotations

from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.metrics import kpis
from gpufleet.sim.policies import make_policy
from tests.sim.helpers import job, jobs_of, load, pool

QUEUES = """
apiVersion: v1
kind: Namespace
metadata: {name: team-a, labels: {team: a}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: gpus}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: gpus
      resources:
      - {name: cpu, nominalQuota: 1000}
      - {name: memory, nominalQuota: 10Ti}
      - {name: nvidia.com/gpu, nominalQuota: 16}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: q, namespace: team-a}
spec: {clusterQueue: cq}
---
"""


def test_gang_waits_for_room_and_runs_whole_under_gpufleet() -> None:
    m = load(pool("p", 4, 4) + QUEUES)
    label = "kueue.x-k8s.io/queue-name: q"
    jobs = jobs_of(job("small", gpus=4, duration="1h", labels=label)
                   + job("gang", pods=16, duration="2h", arrival="1m", labels=label))
    r = simulate_jobs(make_policy("gpufleet", m), jobs)
    gang = next(j for j in r.jobs if j.key == "team-a/gang")
    assert gang.outcome == "succeeded"
    assert gang.attempts[0].started == 3600.0 and gang.ended == 3600.0 + 7200.0
    k = kpis(r)
    assert k["failures"] == {}
    assert k["gpu_hours"] == 4 + 32  # no GPU held idle while waiting


def test_same_input_under_kube_default_fails_the_gang() -> None:
    m = load(pool("p", 4, 4) + QUEUES)
    jobs = jobs_of(job("small", gpus=4, duration="1h") + job("gang", pods=16, duration="2h", arrival="1m"))
    r = simulate_jobs(make_policy("kube-default", m), jobs)
    gang = next(j for j in r.jobs if j.key == "team-a/gang")
    assert gang.outcome == "failed" and gang.attempts[0].cause == "RendezvousTimeout"
    assert kpis(r)["gpu_hours"] == 4 + 12 * 0.5  # 12 GPUs idle for the 30-minute rendezvous
