"""Input fidelity: nothing in the input is ignored in silence. Misspelt fields, unknown versions, kinds gpufleet
does not read, generateName, kubectl's Lists, Kueue features gpufleet does not implement, --strict; and the
limits on every new kind."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.manifests import Manifests, load_manifest_text
from gpufleet.api.workloadkinds import cron
from gpufleet.cli.main import app
from gpufleet.cli.plan import run_cycles
from gpufleet.cluster.build import build_workloads

QUEUES = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, nvidia.com/gpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 100}, {name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: lq, namespace: ml}
spec: {clusterQueue: cq}
"""


def job(name: str = "train", *, queue: str | None = "lq", parallelism: int = 2, extra: str = "") -> str:
    labels = f"\n  labels: {{kueue.x-k8s.io/queue-name: {queue}}}" if queue else ""
    return f"""---
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: ml{labels}
spec:
  parallelism: {parallelism}{extra}
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: 1}}}}}}]
"""


def load(text: str) -> Manifests:
    return load_manifest_text(text, "in.yaml")


def one(items: list, text: str):  # type: ignore[no-untyped-def, type-arg]
    found = [p for p in items if text in p.message]
    assert len(found) == 1, [str(p) for p in items]
    return found[0]


# ---- unknown fields -------------------------------------------------------------------------------------------

def test_a_misspelt_field_is_warned_with_file_line_and_the_field_meant() -> None:
    m = load(QUEUES.replace("  namespaceSelector: {}\n", "  namespaceSelector: {}\n  queueingStrategie: StrictFIFO\n"))
    w = one(m.problems.warnings, "queueingStrategie")
    assert (w.file, w.line, w.kind, w.name) == ("in.yaml", 10, "ClusterQueue", "cq")
    assert w.field == "spec.queueingStrategie" and w.fix == "did you mean queueingStrategy?"
    assert w.code == LEFT_OUT and "left out" in w.message
    assert m.cluster_queues[0].queueing_strategy == "BestEffortFIFO"  # ignored, as said


def test_unknown_fields_deep_in_a_workload_kind_and_its_pod_template() -> None:
    text = job(extra="\n  completionMod: Indexed").replace("      restartPolicy: Never\n",
                                                            "      restartPolicy: Never\n      nodeSelecter: {a: b}\n")
    m = load(QUEUES + text)
    assert one(m.problems.warnings, "completionMod").fix == "did you mean completionMode?"
    assert one(m.problems.warnings, "nodeSelecter").field == "spec.template.spec.nodeSelecter"
    assert not m.problems.errors


def test_kubeflow_replica_specs_are_checked_below_each_replica_type() -> None:
    text = """apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: p, namespace: ml}
spec:
  pytorchReplicaSpecs:
    Worker:
      replica: 2
      template: {spec: {containers: [{name: c, image: x}]}}
"""
    w = one(load(text).problems.warnings, "'replica'")
    assert w.field == "spec.pytorchReplicaSpecs.Worker.replica" and w.fix == "did you mean replicas?"


def test_scheduling_fields_gpufleet_does_not_honour_are_said_once_where_written() -> None:
    spread = ("      topologySpreadConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]\n"
              "      affinity:\n        podAntiAffinity: {requiredDuringSchedulingIgnoredDuringExecution: []}\n"
              "        podAffinity: {preferredDuringSchedulingIgnoredDuringExecution: [{weight: 1}]}\n")
    m = load(job().replace("      restartPolicy: Never\n", "      restartPolicy: Never\n" + spread))
    w = one(m.problems.warnings, "topologySpreadConstraints")
    assert w.field == "spec.template.spec.topologySpreadConstraints" and w.code == LEFT_OUT
    assert one(m.problems.warnings, "podAffinity is").field == "spec.template.spec.affinity.podAffinity"
    assert len(m.problems.warnings) == 3 and not m.problems.errors  # one each: spread, affinity, anti-affinity
    assert len(m.controllers.owners) == 1  # the Job is kept, planned without them


# ---- versions, kinds -------------------------------------------------------------------------------------------

def test_an_unknown_version_of_a_known_group_is_refused_and_the_rest_kept() -> None:
    m = load(QUEUES.replace("apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue",
                            "apiVersion: kueue.x-k8s.io/v2alpha9\nkind: LocalQueue"))
    e = one(m.problems.errors, "v2alpha9")
    assert e.field == "apiVersion" and e.line == 16 and "kueue.x-k8s.io/v1beta1" in (e.fix or "")
    assert not m.local_queues and len(m.cluster_queues) == 1
    assert one(load(job().replace("batch/v1", "batch/v2")).problems.errors, "batch/v2").kind == "Job"


def test_well_known_kinds_are_named_as_such_not_as_misspellings() -> None:
    m = load("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n---\n"
             "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: d}\n---\n"
             "apiVersion: apps/v1\nkind: Deploymnet\nmetadata: {name: x}\n---\n"
             "apiVersion: example.com/v1\nkind: Job\nmetadata: {name: y}\n")
    assert one(m.problems.warnings, "Service").message == "Service is not a workload kind gpufleet reads; left out"
    assert "does not read yet" in one(m.problems.warnings, "DaemonSet").message
    assert one(m.problems.warnings, "Deploymnet").fix == "did you mean kind: Deployment?"
    assert "check the apiVersion" in (one(m.problems.warnings, "example.com/v1 Job").fix or "")
    assert all(w.code == LEFT_OUT for w in m.problems.warnings)


def test_generate_name_gives_a_stable_name_and_says_so() -> None:
    pod = "---\napiVersion: v1\nkind: Pod\nmetadata: {generateName: sample-, namespace: ml}\n" \
          "spec: {containers: [{name: c, image: x}]}\n"
    m = load(pod * 2)
    first, second = (p.meta.name for p in m.pods)
    assert first != second and first.startswith("sample-") and len(first) == len("sample-") + 5
    assert [p.meta.name for p in load(pod * 2).pods] == [first, second]
    notes = [w for w in m.problems.warnings if "generateName" in w.message]
    assert len(notes) == 2 and first in notes[0].message and notes[0].field == "metadata.generateName"
    assert not m.problems.errors


def test_kubectl_lists_are_read_item_by_item() -> None:
    text = """apiVersion: v1
kind: List
items:
- apiVersion: batch/v1
  kind: Job
  metadata: {name: a, namespace: ml}
  spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}}
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: b, namespace: ml}
  spec:
    replicas: 2
    selector: {matchLabels: {app: b}}
    template: {metadata: {labels: {app: b}}, spec: {containers: [{name: c, image: x}]}}
metadata: {resourceVersion: ""}
"""
    m = load(text)
    assert not m.problems.errors and m.counts() == {"Job": 1, "StatefulSet": 1}
    assert [len(w.pods) for w in build_workloads(m)] == [1, 2]


# ---- --strict --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["validate", "plan", "simulate"])
def test_strict_turns_what_is_left_out_into_an_error(command: str, tmp_path: Path) -> None:
    path = tmp_path / "in.yaml"
    node = ("---\napiVersion: v1\nkind: Node\nmetadata: {name: n}\n"
            "status: {allocatable: {cpu: '8', memory: 8Gi, pods: '10'}}\n")
    path.write_text(QUEUES + node + job() + "---\napiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    extra = ["--duration", "1h"] if command == "simulate" else []
    runner = CliRunner()
    lenient = runner.invoke(app, [command, str(path), *extra])
    assert lenient.exit_code == 0, lenient.output
    strict = runner.invoke(app, [command, str(path), *extra, "--strict"])
    assert strict.exit_code == 1, strict.output
    assert "Service is not a workload kind gpufleet reads; left out" in strict.output


# ---- Kueue features gpufleet does not run --------------------------------------------------------------------

def _checks(controller: str, workload_status: str = "") -> str:
    cq = QUEUES.replace("  namespaceSelector: {}\n", "  namespaceSelector: {}\n  admissionChecks: [chk]\n")
    return cq + f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: AdmissionCheck
metadata: {{name: chk}}
spec: {{controllerName: {controller}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: Workload
metadata: {{name: wl, namespace: ml}}
spec:
  queueName: lq
  podSets:
  - {{name: main, count: 1, template: {{spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 1}}}}}}]}}}}}}
{workload_status}""" + job()


def _plan(text: str) -> tuple[set[str], dict[str, str]]:
    m = load(text)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    result = run_cycles(m, 1, until_stable=True)
    admitted = {a.workload for c in result.cycles for a in c.decisions.admitted}
    return admitted, {p.workload: p.reason for p in result.cycles[-1].pending}


def test_pending_admission_checks_keep_workloads_pending_with_the_reason() -> None:
    admitted, pending = _plan(_checks("kueue.x-k8s.io/provisioning-request"))
    assert not admitted
    assert "waiting for admission check(s) chk (kueue.x-k8s.io/provisioning-request)" in pending["ml/train"]
    assert "chk" in pending["ml/wl"]
    w = one(load(_checks("x")).problems.warnings, "admission checks chk")
    assert w.kind == "ClusterQueue" and w.code is None  # honoured, not left out


def test_a_workload_whose_checks_are_ready_is_admitted() -> None:
    ready = "status:\n  admissionChecks: [{name: chk, state: Ready, lastTransitionTime: '2025-01-01T00:00:00Z'}]\n"
    admitted, pending = _plan(_checks("kueue.x-k8s.io/provisioning-request", ready))
    assert "ml/wl" in admitted and "ml/train" in pending


def test_multikueue_workloads_are_left_out_and_gpufleets_own_check_holds_nothing() -> None:
    _, pending = _plan(_checks("kueue.x-k8s.io/multikueue"))
    assert "MultiKueue" in pending["ml/train"]
    admitted, pending = _plan(_checks("gpufleet.io/placement"))
    assert {"ml/train", "ml/wl"} <= admitted and not pending


def test_admission_scope_and_fair_sharing_are_reported_left_out() -> None:
    m = load(QUEUES.replace("  namespaceSelector: {}\n", "  namespaceSelector: {}\n  admissionScope:\n"
                            "    admissionMode: UsageBasedAdmissionFairSharing\n")
             .replace("spec: {clusterQueue: cq}", "spec: {clusterQueue: cq, fairSharing: {weight: 2}}"))
    assert one(m.problems.warnings, "admissionScope").code == LEFT_OUT
    assert one(m.problems.warnings, "fairSharing").code == LEFT_OUT


# ---- limits on every kind --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "expect"), [
    ("""apiVersion: apps/v1
kind: Deployment
metadata: {name: d, namespace: ml}
spec:
  replicas: 1000000000
  selector: {matchLabels: {a: b}}
  template: {metadata: {labels: {a: b}}, spec: {containers: [{name: c, image: x}]}}
""", "is too large"),
    ("""apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata: {name: l, namespace: ml}
spec:
  replicas: 10000
  leaderWorkerTemplate: {size: 10000, workerTemplate: {spec: {containers: [{name: c, image: x}]}}}
""", "too many for one object"),
    ("""apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: j, namespace: ml}
spec:
  replicatedJobs:
  - name: w
    replicas: 10000
    template: {spec: {parallelism: 10000, completions: 10000, template: {spec: {containers: [{name: c}]}}}}
""", "pods in one workload is too many"),
    ("apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: j, namespace: ml}\nspec:\n"
     "  replicatedJobs:\n" + "".join(f"  - name: r{i}\n    template: {{spec: {{template: {{spec: {{containers: "
                                       f"[{{name: c}}]}}}}}}}}\n" for i in range(9)), "at most 8"),
    ("""apiVersion: ray.io/v1
kind: RayCluster
metadata: {name: r, namespace: ml}
spec:
  headGroupSpec: {template: {spec: {containers: [{name: h}]}}}
  workerGroupSpecs:
  - {groupName: g, replicas: 10000, numOfHosts: 64, template: {spec: {containers: [{name: w}]}}}
""", "pods in one workload is too many"),
])
def test_every_kind_is_held_to_gpufleets_limits(text: str, expect: str) -> None:
    m = load(text)
    assert any(expect in e.message for e in m.problems.errors), [str(e) for e in m.problems.all]
    assert not m.controllers.owners


def test_ten_thousand_pods_of_one_job_have_ten_thousand_names() -> None:
    (w,) = build_workloads(load(job(parallelism=10_000)))
    assert len({p.key for p in w.pods}) == 10_000


# ---- kinds with something to say -------------------------------------------------------------------------------

def test_a_train_job_without_its_runtime_is_an_error_that_says_how_to_get_it() -> None:
    m = load("""apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: t, namespace: ml}
spec: {runtimeRef: {name: torch-distributed}}
""")
    e = one(m.problems.errors, "torch-distributed")
    assert e.kind == "TrainJob" and "kubectl get clustertrainingruntime torch-distributed -o yaml" in (e.fix or "")


def test_a_ray_job_on_an_existing_cluster_is_left_out() -> None:
    m = load("""apiVersion: ray.io/v1
kind: RayJob
metadata: {name: r, namespace: ml}
spec: {entrypoint: python x.py, clusterSelector: {ray.io/cluster: c}}
""")
    assert "left out" in one(m.problems.warnings, "clusterSelector").message
    assert build_workloads(m) == []


def test_kubeflow_priority_class_of_the_run_policy_wins() -> None:
    text = """apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: p, namespace: ml}
spec:
  runPolicy: {schedulingPolicy: {priorityClass: high}}
  pytorchReplicaSpecs:
    Master: {template: {spec: {containers: [{name: c, image: x}]}}}
"""
    (w,) = build_workloads(load(text))
    assert (w.priority, w.priority_class) == (1000, "high")


def test_a_queue_label_on_a_cron_job_itself_is_said_to_be_lost() -> None:
    m = load("""apiVersion: batch/v1
kind: CronJob
metadata: {name: c, namespace: ml, labels: {kueue.x-k8s.io/queue-name: lq}}
spec:
  schedule: "@hourly"
  jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: x}]}}}}
""")
    assert "jobTemplate.metadata.labels" in (one(m.problems.warnings, "does not copy it").fix or "")
    (w,) = build_workloads(m)
    assert w.queue is None


@pytest.mark.parametrize(("schedule", "tz", "after", "expect"), [
    ("*/5 * * * *", None, "2025-01-01T00:00:00+00:00", "2025-01-01T00:05:00+00:00"),
    ("0 9 * * mon-fri", None, "2025-01-03T10:00:00+00:00", "2025-01-06T09:00:00+00:00"),  # Friday -> Monday
    ("0 0 13 * 5", None, "2025-01-01T00:00:00+00:00", "2025-01-03T00:00:00+00:00"),  # day 13 OR a Friday
    ("0 0 29 2 *", None, "2025-01-01T00:00:00+00:00", "2028-02-29T00:00:00+00:00"),
    ("@daily", "Europe/Paris", "2025-01-01T00:00:00+00:00", "2025-01-01T23:00:00+00:00"),
])
def test_cron_schedules_as_kubernetes_reads_them(schedule: str, tz: str | None, after: str, expect: str) -> None:
    start = dt.datetime.fromisoformat(after).timestamp()
    got = cron.next_run(cron.parse_schedule(schedule), start, cron.zone(tz))
    assert got == dt.datetime.fromisoformat(expect).timestamp()


@pytest.mark.parametrize("schedule", ["* * * *", "61 * * * *", "0 0 31 2 *", "TZ=UTC 0 * * * *", "@sometimes",
                                      "5-1 * * * *"])
def test_bad_cron_schedules_are_errors_at_the_schedule(schedule: str) -> None:
    m = load(f"""apiVersion: batch/v1
kind: CronJob
metadata: {{name: c, namespace: ml}}
spec:
  schedule: "{schedule}"
  jobTemplate: {{spec: {{template: {{spec: {{restartPolicy: Never, containers: [{{name: c, image: x}}]}}}}}}}}
""")
    (e,) = m.problems.errors
    assert e.field == "spec.schedule" and e.line == 5
