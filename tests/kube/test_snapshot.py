"""`gpufleet snapshot` against kmock + ApiSim over real HTTP, then `gpufleet plan` on what it wrote (issue 14
item 3): the snapshot round trip keeps running work where it is, counted once, and holds no secrets or noise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kube_apisim import ApiSim
from live_env import NS, cluster_queue, flavor, gpu_uuid, local_queue, node, pod
from typer.testing import CliRunner

from gpufleet.cli.main import app
from gpufleet.k8s import resources as r

runner = CliRunner()
JsonDict = dict[str, Any]
JOBS = r.ResourceType("batch", "v1", "jobs", "Job", namespaced=True)


def kubeconfig(tmp_path: Path, url: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u"}}]}))
    return str(path)


def running(name: str, node_name: str, devices: list[str], gpus: int, *, ns: str = NS,
            queue: str | None = "team") -> JsonDict:
    """A pod gpufleet bound: its node and devices recorded, as the Binding wrote them."""
    out = pod(name, gpus=gpus, ns=ns, queue=queue, node_name=node_name, annotations={
        "gpufleet.io/node": node_name, "gpufleet.io/devices": json.dumps(devices)})
    out["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}]
    out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{" + "x" * 4000 + "}"
    out["spec"]["containers"][0]["env"] = [{"name": "TOKEN", "value": "s3cret"}]
    out["spec"]["containers"][0]["command"] = ["train", "--password=s3cret"]
    out["spec"]["volumes"] = [{"name": "creds", "secret": {"secretName": "creds"}}]
    return out


def cluster(apisim: ApiSim) -> None:
    apisim.serve(JOBS, r.CONFIG_MAPS, r.CLUSTER_POLICIES, r.KUEUE_WORKLOADS)
    # NVIDIA's configuration: the ClusterPolicy names the device plugin's ConfigMap; mig-parted's is recognised by
    # its data; an application's ConfigMap is never taken.
    apisim.create(r.CLUSTER_POLICIES, {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
                                       "metadata": {"name": "cluster-policy"},
                                       "spec": {"mig": {"strategy": "mixed"},
                                                "devicePlugin": {"config": {"name": "dp-config", "default": "any"}}}})
    apisim.create(r.CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "dp-config", "namespace": "gpu-operator"},
                                  "data": {"any": "version: v1\nsharing: {timeSlicing: {resources: "
                                                  "[{name: nvidia.com/gpu, replicas: 2}]}}\n"}})
    apisim.create(r.CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "custom-mig", "namespace": "gpu-operator"},
                                  "data": {"config.yaml": "version: v1\nmig-configs:\n  all-disabled:\n"
                                                          "  - {devices: all, mig-enabled: false}\n"}})
    apisim.create(r.CONFIG_MAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                  "metadata": {"name": "app-settings", "namespace": NS},
                                  "data": {"db": "password: s3cret\nversion: 3\n"}})
    for name in ("n0", "n1", "n2"):
        obj = node(name, gpus=4)
        obj["status"]["images"] = [{"names": [f"registry/big-image:{i}"], "sizeBytes": 10**9} for i in range(50)]
        obj["status"]["nodeInfo"] = {"kubeletVersion": "v1.31.0"}
        apisim.create(r.NODES, obj)
    apisim.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    apisim.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("team", gpus=12))
    apisim.create(r.LOCAL_QUEUES, local_queue("team", "team"))
    # Running work: a 2-pod group on n0 (2 GPUs each, devices recorded), and a pod of another namespace on n1.
    for i, devices in enumerate(([gpu_uuid("n0", 0), gpu_uuid("n0", 3)], [gpu_uuid("n0", 1), gpu_uuid("n0", 2)])):
        member = running(f"train-{i}", "n0", devices, 2)
        member["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "train"
        member["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = "2"
        apisim.create(r.PODS, member)
    apisim.create(r.PODS, running("infer", "n1", [gpu_uuid("n1", 2)], 1, ns="other", queue=None))
    # A Job Kueue admitted: the Job, its Workload object and its two pods running on n2 are one workload.
    job = apisim.create(JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "bert", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "team"}},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    uid = job["metadata"]["uid"]
    apisim.create(r.KUEUE_WORKLOADS, {
        "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload",
        "metadata": {"name": "job-bert-5d1c2", "namespace": NS, "labels": {"kueue.x-k8s.io/job-uid": uid},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "bert", "uid": uid,
                                          "controller": True}]},
        "spec": {"queueName": "team", "podSets": [{"name": "main", "count": 2, "template": {"spec": {"containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}]},
        "status": {"admission": {"clusterQueue": "team", "podSetAssignments": [
            {"name": "main", "count": 2, "flavors": {"nvidia.com/gpu": "gpu"},
             "resourceUsage": {"nvidia.com/gpu": "2"}}]},
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "",
                            "lastTransitionTime": "2026-01-01T00:00:01Z"}]}})
    for i in range(2):
        member = running(f"bert-{i}x7k2p", "n2", [gpu_uuid("n2", i)], 1)
        member["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "bert"
        member["metadata"]["annotations"]["kueue.x-k8s.io/workload"] = "job-bert-5d1c2"
        member["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "bert",
                                                  "uid": uid, "controller": True}]
        apisim.create(r.PODS, member)
    # Waiting work: 3 GPUs fit only on n1 (n0 is full).
    apisim.create(r.PODS, pod("next", gpus=3, queue="team", created="2026-01-01T00:05:00Z"))
    # Finished: a pod that succeeded and a completed Job hold nothing and are left out.
    done = pod("done", gpus=4, queue="team", node_name="n1")
    done["status"]["phase"] = "Succeeded"
    apisim.create(r.PODS, done)
    apisim.create(JOBS, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "old", "namespace": NS},
                         "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
                         "status": {"conditions": [{"type": "Complete", "status": "True"}]}})


def documents(folder: Path) -> list[JsonDict]:
    return [d for f in sorted(folder.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def test_snapshot_writes_one_clean_document_per_object(apisim: ApiSim, tmp_path: Path) -> None:
    cluster(apisim)
    out = tmp_path / "snap"
    result = runner.invoke(app, ["snapshot", "-o", str(out), "--kubeconfig", kubeconfig(tmp_path, apisim.url)])
    assert result.exit_code == 0, result.output
    files = sorted(f.name for f in out.glob("*.yaml"))
    assert files == ["clusterpolicies.nvidia.com.yaml", "clusterqueues.gpufleet.io.yaml", "configmaps.yaml",
                     "jobs.batch.yaml", "localqueues.gpufleet.io.yaml", "namespaces.yaml", "nodes.yaml",
                     "pods.yaml", "resourceflavors.gpufleet.io.yaml", "workloads.kueue.x-k8s.io.yaml"]
    docs = documents(out)
    kinds = sorted((d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs)
    assert ("Pod", NS, "done") not in kinds and ("Job", NS, "old") not in kinds  # finished: left out
    assert ("Job", NS, "bert") in kinds and ("Workload", NS, "job-bert-5d1c2") in kinds
    assert ("Pod", NS, "next") in kinds and ("Pod", "other", "infer") in kinds
    assert [k for k in kinds if k[0] == "ConfigMap"] == [("ConfigMap", "gpu-operator", "custom-mig"),
                                                         ("ConfigMap", "gpu-operator", "dp-config")]
    text = "".join(f.read_text() for f in out.glob("*.yaml"))
    for noise in ("managedFields", "last-applied-configuration", "s3cret", "secretName", "big-image",
                  "kubeletVersion", "resourceVersion"):
        assert noise not in text, noise
    [n0] = [d for d in docs if d["kind"] == "Node" and d["metadata"]["name"] == "n0"]
    assert n0["status"]["allocatable"]["nvidia.com/gpu"] == "4" and "gpufleet.io/gpus" in n0["metadata"]["annotations"]
    [train] = [d for d in docs if d["metadata"]["name"] == "train-0"]
    assert train["spec"]["nodeName"] == "n0" and train["metadata"]["uid"]
    assert json.loads(train["metadata"]["annotations"]["gpufleet.io/devices"]) == [gpu_uuid("n0", 0), gpu_uuid("n0", 3)]
    assert train["spec"]["containers"][0] == {"name": "main", "image": "busybox", "resources": {
        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines() if "." in line.split(" ")[0]}
    assert rows["Pod.core"] == ["6", "1", "pods.yaml"]  # 6 written, the finished one left out
    assert rows["Job.batch"] == ["1", "1", "jobs.batch.yaml"]  # the completed Job left out


def test_snapshot_then_plan_keeps_running_work_where_it_is(apisim: ApiSim, tmp_path: Path) -> None:
    cluster(apisim)
    out = tmp_path / "snap"
    assert runner.invoke(app, ["snapshot", "-o", str(out), "--kubeconfig",
                               kubeconfig(tmp_path, apisim.url)]).exit_code == 0
    result = runner.invoke(app, ["plan", str(out), "--until-stable", "-o", "json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    admitted = {a["workload"]: a for c in plan["cycles"] for a in c["admitted"]}
    # Only the waiting pod is decided; the running group, the running Job (its Workload object and its pods are
    # one workload) and the other namespace's pod are not planned again.
    assert set(admitted) == {f"{NS}/next"}
    assert [(p["node"], sorted(p["devices"])) for p in admitted[f"{NS}/next"]["pods"]] == [
        ("n1", sorted(gpu_uuid("n1", i) for i in (0, 1, 3)))]  # n1's GPU 2 is held by "infer"
    assert not plan["cycles"][-1]["pending"]
    # The ClusterQueue counts the running group (4 GPUs) and the running Job (2) once each, plus the new pod (3).
    assert plan["usage"]["team"]["gpu"]["nvidia.com/gpu"] == "9"


def test_snapshot_of_one_namespace_keeps_what_others_hold(apisim: ApiSim, tmp_path: Path) -> None:
    cluster(apisim)
    result = runner.invoke(app, ["snapshot", "-n", "other", "-o", "-", "--kubeconfig",
                                 kubeconfig(tmp_path, apisim.url)])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    pods = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs if d["kind"] == "Pod"}
    # Its own pods whole; another namespace's bound pods as what they hold; another's waiting pod not at all.
    assert set(pods) == {("other", "infer"), (NS, "train-0"), (NS, "train-1"), (NS, "bert-0x7k2p"),
                         (NS, "bert-1x7k2p")}
    assert pods[(NS, "train-0")]["spec"]["nodeName"] == "n0"
    assert "labels" not in pods[(NS, "train-0")]["metadata"]  # reduced to its resources and recorded devices
    assert {d["kind"] for d in docs} >= {"Node", "Namespace", "ClusterQueue"}
