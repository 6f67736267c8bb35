"""Pods that exist (in a snapshot, or live) join the workload of the object that owns them, by the labels its
controller puts on them: counted once, in plan as in the live scheduler (``create_missing=False``)."""

from __future__ import annotations

from gpufleet.api.manifests import Manifests, load_manifest_text
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.workloads import Workload

JOB = """apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  parallelism: 3
  completions: 3
  completionMode: Indexed
  template:
    spec:
      restartPolicy: Never
      containers: [{name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]
"""


def pod(name: str, labels: str, *, node: str | None = None, annotations: str = "{}", phase: str = "Running") -> str:
    bound = f"\n  nodeName: {node}" if node else ""
    return f"""---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml, labels: {labels}, annotations: {annotations}}}
spec:{bound}
  restartPolicy: Never
  containers: [{{name: c, image: x, resources: {{limits: {{nvidia.com/gpu: 1}}}}}}]
status: {{phase: {phase}}}
"""


def load(text: str) -> Manifests:
    m = load_manifest_text(text, "snap.yaml")
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return m


def by_name(workloads: list[Workload]) -> dict[str, Workload]:
    return {w.name: w for w in workloads}


REAL = pod("train-2-abcde", "{batch.kubernetes.io/job-name: train, batch.kubernetes.io/job-completion-index: '2'}",
           node="gpu-1")


def test_a_jobs_running_pod_counts_once_in_its_own_place() -> None:
    (w,) = build_workloads(load(JOB + REAL))
    assert len(w.pods) == 3 and w.kind == "Job"
    real = w.pods[2]  # index 2, as its label says
    assert (real.key, real.node_name, real.phase) == ("ml/train-2-abcde", "gpu-1", "Running")
    assert [p.key.rsplit("-", 1)[0] for p in w.pods[:2]] == ["ml/train-0", "ml/train-1"]
    assert all(p.node_name is None for p in w.pods[:2])


def test_live_grouping_keeps_only_pods_that_exist_and_waits_for_the_gang() -> None:
    waiting = pod("train-2-abcde", "{batch.kubernetes.io/job-name: train, batch.kubernetes.io/job-completion-index: "
                                   "'2'}")
    (w,) = build_workloads(load(JOB + waiting), create_missing=False)
    assert [p.key for p in w.pods] == ["ml/train-2-abcde"]
    assert w.expected_pods == 3 and not w.complete and w.queue == "lq"
    assert w.size == 3  # quota is asked for the whole Job
    # A pod on a node: the gang was admitted already; its missing pods (being recreated) take nothing from it.
    (admitted,) = build_workloads(load(JOB + REAL), create_missing=False)
    assert [p.key for p in admitted.pods] == ["ml/train-2-abcde"]
    assert admitted.expected_pods is None and admitted.complete and admitted.size == 3


def test_finished_pods_fill_only_free_places() -> None:
    text = JOB + REAL + pod("train-2-old", "{batch.kubernetes.io/job-name: train, "
                                           "batch.kubernetes.io/job-completion-index: '2'}", phase="Failed")
    (w,) = build_workloads(load(text), create_missing=False)
    assert [p.key for p in w.pods] == ["ml/train-2-abcde"]  # the failed one lost its place to the running one


def test_a_jobset_pod_belongs_to_the_jobset_not_to_its_job() -> None:
    text = """apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js, namespace: ml}
spec:
  replicatedJobs:
  - name: workers
    replicas: 2
    template: {spec: {parallelism: 1, completions: 1, template: {spec: {containers: [{name: c, image: x}]}}}}
""" + pod("js-workers-1-0-xyzab", "{jobset.sigs.k8s.io/jobset-name: js, jobset.sigs.k8s.io/replicatedjob-name: workers,"
          " batch.kubernetes.io/job-name: js-workers-1}", node="n1")
    (w,) = build_workloads(load(text))
    assert w.kind == "JobSet" and len(w.pods) == 2
    assert "ml/js-workers-1-0-xyzab" in [p.key for p in w.pods]


def test_serving_pods_that_exist_are_workloads_of_their_deployment() -> None:
    text = """apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ml, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template: {metadata: {labels: {app: web}}, spec: {containers: [{name: c, image: x}]}}
""" + pod("web-5d8f7c9b4-aaaaa", "{app: web, pod-template-hash: 5d8f7c9b4}", node="n1") + pod(
        "web-5d8f7c9b4-bbbbb", "{app: web, pod-template-hash: 5d8f7c9b4}") + pod("other", "{app: other}")
    live = by_name(build_workloads(load(text), create_missing=False))
    assert set(live) == {"web-5d8f7c9b4-aaaaa", "web-5d8f7c9b4-bbbbb", "other"}
    assert live["web-5d8f7c9b4-aaaaa"].kind == "Deployment" and live["web-5d8f7c9b4-aaaaa"].queue == "lq"
    assert live["other"].kind == "Pod" and live["other"].queue is None
    planned = build_workloads(load(text))
    assert sum(1 for w in planned if w.kind == "Deployment") == 3  # two that exist, one more to come


def test_leader_worker_set_pods_join_their_group() -> None:
    text = """apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: lws, namespace: ml}
spec:
  replicas: 2
  leaderWorkerTemplate:
    size: 2
    workerTemplate: {spec: {containers: [{name: c, image: x}]}}
""" + pod("lws-1-1", "{leaderworkerset.sigs.k8s.io/name: lws, leaderworkerset.sigs.k8s.io/group-index: '1', "
          "leaderworkerset.sigs.k8s.io/worker-index: '1'}")
    groups = by_name(build_workloads(load(text)))
    assert [p.key for p in groups["lws-1"].pods] == ["ml/lws-1", "ml/lws-1-1"]
    assert [p.key for p in groups["lws-0"].pods] == ["ml/lws-0", "ml/lws-0-1"]


def test_pods_of_a_pod_group_the_input_lacks_wait_for_it() -> None:
    text = pod("a", "{}", annotations="{scheduling.k8s.io/group-name: pg}") + pod(
        "b", "{}", annotations="{scheduling.k8s.io/group-name: pg}")
    (w,) = build_workloads(load(text))
    assert w.kind == "PodGroup" and len(w.pods) == 2
    assert w.hold is not None and "Volcano PodGroup pg, which is not in the input" in w.hold


def test_pods_naming_an_owner_the_input_lacks_stay_plain_pods() -> None:
    text = pod("train-0-zzzzz", "{batch.kubernetes.io/job-name: train}")
    (w,) = build_workloads(load(text))
    assert (w.kind, w.name, w.gang) == ("Pod", "train-0-zzzzz", False)


# What `kubectl get job,pod -o yaml` returns for a running Indexed Job (Kubernetes 1.31): every field the API server
# fills in is one gpufleet knows, so a snapshot reads without a warning.
LIVE = """apiVersion: v1
kind: List
items:
- apiVersion: batch/v1
  kind: Job
  metadata:
    creationTimestamp: "2025-03-01T10:00:00Z"
    generation: 1
    labels: {kueue.x-k8s.io/queue-name: lq}
    name: live
    namespace: ml
    resourceVersion: "4242"
    uid: 0f4a7c1e-1111-2222-3333-444455556666
  spec:
    backoffLimit: 6
    completionMode: Indexed
    completions: 2
    manualSelector: false
    parallelism: 2
    podReplacementPolicy: TerminatingOrFailed
    selector: {matchLabels: {batch.kubernetes.io/controller-uid: 0f4a7c1e-1111-2222-3333-444455556666}}
    suspend: false
    template:
      metadata:
        creationTimestamp: null
        labels: {batch.kubernetes.io/job-name: live, job-name: live}
      spec:
        containers:
        - image: busybox
          imagePullPolicy: Always
          name: c
          resources: {limits: {nvidia.com/gpu: "1"}, requests: {nvidia.com/gpu: "1"}}
          terminationMessagePath: /dev/termination-log
          terminationMessagePolicy: File
        dnsPolicy: ClusterFirst
        restartPolicy: Never
        schedulerName: gpufleet
        securityContext: {}
        terminationGracePeriodSeconds: 30
  status: {active: 1, ready: 1, startTime: "2025-03-01T10:00:05Z", terminating: 0, uncountedTerminatedPods: {}}
- apiVersion: v1
  kind: Pod
  metadata:
    annotations: {batch.kubernetes.io/job-completion-index: "1"}
    creationTimestamp: "2025-03-01T10:00:01Z"
    finalizers: [batch.kubernetes.io/job-tracking]
    generateName: live-1-
    labels:
      batch.kubernetes.io/controller-uid: 0f4a7c1e-1111-2222-3333-444455556666
      batch.kubernetes.io/job-completion-index: "1"
      batch.kubernetes.io/job-name: live
      controller-uid: 0f4a7c1e-1111-2222-3333-444455556666
      job-name: live
    name: live-1-7x9kq
    namespace: ml
    ownerReferences:
    - {apiVersion: batch/v1, blockOwnerDeletion: true, controller: true, kind: Job, name: live,
       uid: 0f4a7c1e-1111-2222-3333-444455556666}
    resourceVersion: "4240"
    uid: 9a8b7c6d-0000-1111-2222-333344445555
  spec:
    containers:
    - image: busybox
      imagePullPolicy: Always
      name: c
      resources: {limits: {nvidia.com/gpu: "1"}, requests: {nvidia.com/gpu: "1"}}
      terminationMessagePath: /dev/termination-log
      terminationMessagePolicy: File
      volumeMounts:
      - {mountPath: /var/run/secrets/kubernetes.io/serviceaccount, name: kube-api-access-abcde, readOnly: true}
    dnsPolicy: ClusterFirst
    enableServiceLinks: true
    hostname: live-1
    nodeName: gpu-1
    preemptionPolicy: PreemptLowerPriority
    priority: 0
    restartPolicy: Never
    schedulerName: gpufleet
    securityContext: {}
    serviceAccount: default
    serviceAccountName: default
    subdomain: live
    terminationGracePeriodSeconds: 30
    tolerations:
    - {effect: NoExecute, key: node.kubernetes.io/not-ready, operator: Exists, tolerationSeconds: 300}
    volumes:
    - name: kube-api-access-abcde
      projected: {defaultMode: 420, sources: [{serviceAccountToken: {expirationSeconds: 3607, path: token}}]}
  status: {phase: Running, qosClass: BestEffort, startTime: "2025-03-01T10:00:02Z"}
metadata: {resourceVersion: ""}
"""


def test_a_live_snapshot_reads_without_warnings_and_its_pod_keeps_its_place() -> None:
    m = load_manifest_text(LIVE, "live.yaml")
    assert not m.problems.all, [str(p) for p in m.problems.all]
    (w,) = build_workloads(m, create_missing=False)
    assert [p.key for p in w.pods] == ["ml/live-1-7x9kq"] and w.pods[0].node_name == "gpu-1"
    assert w.expected_pods is None and w.size == 2  # running: admitted already, with quota for both pods
    (planned,) = build_workloads(m)
    assert planned.pods[1].key == "ml/live-1-7x9kq" and planned.pods[0].key.startswith("ml/live-0-")


def test_a_stateful_set_is_admitted_with_the_pods_that_exist_live() -> None:
    text = """apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: ml, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  replicas: 3
  selector: {matchLabels: {app: db}}
  template: {metadata: {labels: {app: db}}, spec: {containers: [{name: c, image: x}]}}
""" + pod("db-0", "{app: db}")
    (w,) = build_workloads(load(text), create_missing=False)
    # OrderedReady: db-1 is created once db-0 is ready; waiting for all three would never end (Kueue's fast admission)
    assert [p.key for p in w.pods] == ["ml/db-0"] and w.expected_pods is None and w.complete and w.size == 3
