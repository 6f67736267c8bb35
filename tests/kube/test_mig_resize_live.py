"""The MIG resize after a GPU out-of-memory, live (gpufleet.live.mig_resize, gpufleet.admission.mig_resize): the
scheduler writes what the Job's next pods ask on the Job, the webhook rewrites each new pod of it, and the next pod
runs on the larger instance, charged to the quota of what it asks. Against the emulator over real HTTP."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest
from kube_apisim import ApiSim, status
from live_env import NS, bound_node, events, fast_settings, flavor, local_queue, wait_until
from workload_env import JOBS, job, job_pods

from gpufleet.admission.mig_resize import CacheResizeSource, Resized, resize_ops
from gpufleet.admission.webhook import WebhookPolicy, review
from gpufleet.api.mig_resized import RESIZE_ON_OOM_ANNOTATION, RESIZED_ANNOTATION
from gpufleet.k8s import resources as r
from gpufleet.live.gpu_oom import REASON
from gpufleet.live.scheduler import Scheduler

JsonDict = dict[str, Any]
ONE_G, TWO_G, THREE_G = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"
TORCH_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB."
# One A100 80GB split 1g.10gb x2, 2g.20gb, 3g.40gb (mixed strategy): instance UUIDs by profile
INSTANCES = (("1g.10gb", 0, "MIG-1g-a"), ("1g.10gb", 1, "MIG-1g-b"), ("2g.20gb", 2, "MIG-2g"), ("3g.40gb", 4, "MIG-3g"))


def mig_node(name: str = "m0") -> JsonDict:
    inventory = {"model": "A100-SXM4-80GB", "memoryMiB": 81920,
                 "sharing": {"migStrategy": "mixed", "timeSlicing": {}, "renameByDefault": False,
                             "failRequestsGreaterThanOne": False},
                 "gpus": [{"index": 0, "uuid": "GPU-m0", "mig": [{"profile": p, "start": s, "uuid": u}
                                                                 for p, s, u in INSTANCES]}], "nvlinks": []}
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", ONE_G: "2", TWO_G: "1", THREE_G: "1"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "A100-SXM4-80GB"},
                         "annotations": {"gpufleet.io/gpus": json.dumps(inventory)}},
            "status": {"capacity": resources, "allocatable": resources,
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def mig_queue(opt_in: str | None = "true") -> JsonDict:
    quota = [{"name": "cpu", "nominalQuota": "100"}, {"name": "memory", "nominalQuota": "1Ti"},
             {"name": ONE_G, "nominalQuota": 2}, {"name": TWO_G, "nominalQuota": 1}]
    meta: JsonDict = {"name": "cq"}
    if opt_in is not None:
        meta["annotations"] = {RESIZE_ON_OOM_ANNOTATION: opt_in}
    return {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ClusterQueue", "metadata": meta,
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["cpu", "memory", ONE_G, TWO_G],
                "flavors": [{"name": "gpu", "resources": quota}]}]}}


def mig_job(name: str = "train") -> JsonDict:
    owner = job(name, pods=1, gpus=0, queue="lq")
    [container] = owner["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"requests": {"cpu": "1", "memory": "1Gi", ONE_G: "1"}, "limits": {ONE_G: "1"}}
    return owner


def controlled(obj: JsonDict, owner: JsonDict, name: str) -> JsonDict:
    obj["metadata"]["name"] = name
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["metadata"]["name"],
                                           "uid": owner["metadata"]["uid"], "controller": True,
                                           "blockOwnerDeletion": True}]
    return obj


def admitted(pod: JsonDict, policy: WebhookPolicy) -> JsonDict:
    """``pod`` as the API server stores it after the mutating webhook answered (the review's JSON patch applied)."""
    answer = review({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
        "namespace": NS, "object": pod}}, policy)["response"]
    assert answer["allowed"], answer
    if "patch" not in answer:
        return pod
    ops = json.loads(base64.b64decode(answer["patch"]))
    return jsonpatch.apply_patch(pod, ops)  # type: ignore[no-any-return]


def devices(apisim: ApiSim, name: str) -> list[str]:
    obj = apisim.get(r.PODS, NS, name)
    assert obj is not None
    return list(json.loads(obj["metadata"]["annotations"]["gpufleet.io/devices"]))


def failed_with(apisim: ApiSim, name: str, message: str) -> None:
    apisim.modify(r.PODS, NS, name, {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "main", "restartCount": 0, "state": {"terminated": {
            "exitCode": 1, "reason": "Error", "message": message, "finishedAt": "2026-01-02T00:00:00Z"}}}]}})


def _setup(apisim: ApiSim, opt_in: str | None = "true") -> JsonDict:
    apisim.serve(JOBS)
    apisim.create(r.NODES, mig_node())
    apisim.create(r.CLUSTER_QUEUES, mig_queue(opt_in))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.LOCAL_QUEUES, local_queue("lq", "cq"))
    owner = apisim.create(JOBS, mig_job())  # (the server gives it its UID)
    [first] = job_pods(owner)
    apisim.create(r.PODS, controlled(first, owner, "train-a"))
    return owner


def test_an_oom_on_a_mig_instance_resizes_the_jobs_next_pod_through_the_webhook(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    owner = _setup(apisim)
    sched = live_scheduler(settings=fast_settings())
    wait_until(lambda: bound_node(apisim, "train-a") == "m0", what="the first pod bound")
    assert devices(apisim, "train-a")[0] in ("MIG-1g-a", "MIG-1g-b")

    failed_with(apisim, "train-a", TORCH_OOM)

    def written() -> str | None:
        job_now = apisim.get(JOBS, NS, "train")
        return None if job_now is None else (job_now["metadata"].get("annotations") or {}).get(RESIZED_ANNOTATION)

    wait_until(lambda: written() is not None, what="the resize written on the Job")
    assert written() == f"{ONE_G}={TWO_G}"
    wait_until(lambda: events(apisim, REASON), what="the GPUOutOfMemory event")
    [event] = events(apisim, REASON)
    assert event["type"] == "Warning" and event["regarding"]["name"] == "train-a"
    assert event["note"].startswith(f"ran out of GPU memory on {ONE_G}; its ClusterQueue offers {TWO_G}: the next "
                                    f"pods of Job {NS}/train ask for it")

    # The Job controller's next pod, through the webhook of this scheduler's process (its cache's Job).
    policy = WebhookPolicy("gpufleet", resizes=CacheResizeSource(sched.cache.get, sched.resources))
    wait_until(lambda: (sched.cache.get(JOBS, f"{NS}/train") or {}).get("metadata", {}).get(
        "annotations", {}).get(RESIZED_ANNOTATION) is not None, what="the cache's Job annotated")
    [template_pod] = job_pods(owner)
    retry = admitted(controlled(template_pod, owner, "train-b"), policy)
    [container] = retry["spec"]["containers"]
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "1Gi", TWO_G: "1"}, "limits": {TWO_G: "1"}}
    assert retry["metadata"]["annotations"][RESIZED_ANNOTATION] == f"{ONE_G}={TWO_G}"
    again = admitted(retry, policy)  # a reinvocation changes nothing
    assert again == retry

    apisim.create(r.PODS, retry)
    wait_until(lambda: bound_node(apisim, "train-b") == "m0", what="the resized pod bound")
    assert devices(apisim, "train-b") == ["MIG-2g"]

    # Charged what it asks: the queue's status counts one 2g.20gb admitted, no 1g.10gb.
    def usage() -> dict[str, Any]:
        cq = apisim.get(r.CLUSTER_QUEUES, None, "cq") or {}
        out: dict[str, Any] = {}
        for f in (cq.get("status") or {}).get("flavorsUsage") or []:
            for res in f.get("resources") or []:
                out[res["name"]] = res.get("total")
        return out

    wait_until(lambda: str(usage().get(TWO_G)) == "1", what="the queue charged a 2g.20gb")
    assert str(usage().get(ONE_G, "0")) == "0"

    # The 2g.20gb runs out too: the queue covers nothing larger, so nothing more is written.
    failed_with(apisim, "train-b", TORCH_OOM)
    wait_until(lambda: len(events(apisim, REASON)) == 2, what="the second event")
    second = [e for e in events(apisim, REASON) if e["regarding"]["name"] == "train-b"]
    assert second and "covers no larger MIG profile" in second[0]["note"]
    assert written() == f"{ONE_G}={TWO_G}"


def test_a_queue_that_does_not_opt_in_names_the_profile_and_writes_nothing(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    _setup(apisim, opt_in=None)
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "train-a") == "m0", what="the first pod bound")
    failed_with(apisim, "train-a", TORCH_OOM)
    wait_until(lambda: events(apisim, REASON), what="the GPUOutOfMemory event")
    [event] = events(apisim, REASON)
    assert f"does not resize ({RESIZE_ON_OOM_ANNOTATION} is not \"true\"): ask for {TWO_G}" in event["note"]
    assert RESIZED_ANNOTATION not in ((apisim.get(JOBS, NS, "train") or {})["metadata"].get("annotations") or {})
    assert not apisim.writes(JOBS, "PATCH")


def test_without_the_right_to_patch_the_job_the_event_says_what_to_do(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    """deploy/webhook/ grants the patch; a cluster without it gets 403, and the event names the fix."""
    import kmock

    _setup(apisim)
    patches = apisim.kmock[kmock.resource(JOBS.group, JOBS.version, JOBS.plural),
                           lambda req: str(req.method.value) == "PATCH"]
    apisim.harness.call(lambda: patches << 403 << status(403, "Forbidden", 'jobs.batch "train" is forbidden'))
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "train-a") == "m0", what="the first pod bound")
    failed_with(apisim, "train-a", TORCH_OOM)
    wait_until(lambda: events(apisim, REASON), what="the GPUOutOfMemory event")
    [event] = events(apisim, REASON)
    assert "nothing written on Job" in event["note"] and "apply deploy/webhook/" in event["note"]
    assert event["note"].endswith(f"ask for {TWO_G} in the pod template")


def test_the_webhook_resize_follows_the_chain_and_leaves_what_it_cannot_read() -> None:
    owner = mig_job()
    owner["metadata"]["annotations"] = {RESIZED_ANNOTATION: f"{ONE_G}={TWO_G}, {TWO_G}={THREE_G}"}
    store = {(JOBS.key, f"{NS}/train"): owner}
    source = CacheResizeSource(lambda res, key: store.get((res.key, key)), [JOBS])
    [template_pod] = job_pods(owner)
    pod = controlled(template_pod, owner, "train-b")
    pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {ONE_G: "1"}}}]
    ops, warnings = resize_ops(pod, NS, source)
    assert not warnings
    out = jsonpatch.apply_patch(pod, ops)
    assert out["spec"]["initContainers"][0]["resources"] == {"limits": {THREE_G: "1"}}
    assert out["spec"]["containers"][0]["resources"]["limits"] == {THREE_G: "1"}
    assert out["metadata"]["annotations"][RESIZED_ANNOTATION] == f"{ONE_G}={THREE_G}"
    # Another Job of the same name (another UID), a pod of its own, another scheduler's pod: untouched.
    stranger = copy.deepcopy(pod)
    stranger["metadata"]["ownerReferences"][0]["uid"] = "job-other"
    assert resize_ops(stranger, NS, source) == ([], [])
    alone = copy.deepcopy(pod)
    del alone["metadata"]["ownerReferences"]
    assert resize_ops(alone, NS, source) == ([], [])
    theirs = copy.deepcopy(pod)
    theirs["spec"]["schedulerName"] = "default-scheduler"
    assert admitted(theirs, WebhookPolicy("gpufleet", resizes=source)) == theirs
    # An annotation that does not read: the pod as it is, and a warning naming the Job.
    owner["metadata"]["annotations"][RESIZED_ANNOTATION] = "nvidia.com/gpu=nvidia.com/mig-2g.20gb"
    ops, warnings = resize_ops(pod, NS, source)
    assert ops == [] and len(warnings) == 1 and f"Job {NS}/train" in warnings[0]
    assert "'nvidia.com/gpu' is not a MIG resource name" in warnings[0]


@pytest.mark.parametrize("found", [None, Resized("Job x/y", f"{ONE_G}={TWO_G}")])
def test_a_pod_asking_no_mig_instance_is_not_looked_up(found: Resized | None) -> None:
    asked: list[str] = []

    def source(pod: Any, ns: str) -> Resized | None:
        asked.append(ns)
        return found

    plain = job_pods(job("plain", pods=1, gpus=1))[0]
    assert resize_ops(plain, NS, source) == ([], []) and not asked


def test_a_pod_made_before_the_resize_reached_the_webhook_runs_as_it_asks(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    """The Job controller made the next pod before the resize was written (or without the webhook): it asks the
    1g.10gb of its template, and is placed on one, not left waiting for the 2g.20gb its Job now names."""
    owner = _setup(apisim)
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "train-a") == "m0", what="the first pod bound")
    apisim.modify(JOBS, NS, "train", {"metadata": {"annotations": {RESIZED_ANNOTATION: f"{ONE_G}={TWO_G}"}}})
    failed_with(apisim, "train-a", "Error: segmentation fault")
    [template_pod] = job_pods(owner)
    apisim.create(r.PODS, controlled(template_pod, owner, "train-b"))
    wait_until(lambda: bound_node(apisim, "train-b") == "m0", what="the unresized pod bound")
    assert devices(apisim, "train-b")[0] in ("MIG-1g-a", "MIG-1g-b")


def test_a_busy_job_is_written_after_its_status_changes_under_the_patch(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    """The Job controller writes the Job's status as its pod fails: the patch, guarded by the resourceVersion the
    scheduler read, meets a conflict or two, and is written once it has read the Job again."""
    import kmock

    _setup(apisim)
    patches = apisim.kmock[kmock.resource(JOBS.group, JOBS.version, JOBS.plural),
                           lambda req: str(req.method.value) == "PATCH"]
    conflict = status(409, "Conflict", "the object has been modified; please apply your changes to the latest version")
    apisim.harness.call(lambda: patches[:3] << 409 << conflict)
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "train-a") == "m0", what="the first pod bound")
    failed_with(apisim, "train-a", TORCH_OOM)
    wait_until(lambda: events(apisim, REASON), what="the GPUOutOfMemory event")
    assert (apisim.get(JOBS, NS, "train") or {})["metadata"]["annotations"][RESIZED_ANNOTATION] == f"{ONE_G}={TWO_G}"
    assert len(apisim.writes(JOBS, "PATCH")) == 4


def test_the_workload_is_named_after_the_highest_owner_and_only_the_job_kinds_are_written() -> None:
    """A TrainJob's pods: pod -> Job -> JobSet (named as the TrainJob) -> TrainJob. The workload is the TrainJob's,
    whose pods come from its runtime's templates, so nothing is written; the event says what to do."""
    from gpufleet.api.mig_resized import Resize
    from gpufleet.k8s.client import KubeClient
    from gpufleet.live.mig_resize import MigResizer, owner_of
    from gpufleet.scheduling.memory import OomLesson

    types = {res.kind: res for res in r.WORKLOAD_RESOURCES if res.group in ("batch", "jobset.x-k8s.io",
                                                                             "trainer.kubeflow.org")}
    chain = [("TrainJob", "trainer.kubeflow.org/v1alpha1", "tj", None),
             ("JobSet", "jobset.x-k8s.io/v1alpha2", "tj", ("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj")),
             ("Job", "batch/v1", "tj-node-0", ("jobset.x-k8s.io/v1alpha2", "JobSet", "tj"))]
    store: dict[tuple[str, str], JsonDict] = {}
    for kind, api_version, name, parent in chain:
        meta: JsonDict = {"name": name, "namespace": NS, "uid": f"uid-{kind}"}
        if parent is not None:
            meta["ownerReferences"] = [{"apiVersion": parent[0], "kind": parent[1], "name": parent[2],
                                        "uid": f"uid-{parent[1]}", "controller": True}]
        store[(types[kind].key, f"{NS}/{name}")] = {"apiVersion": api_version, "kind": kind, "metadata": meta}
    pod = {"metadata": {"name": "tj-node-0-0", "namespace": NS, "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "tj-node-0", "uid": "uid-Job", "controller": True}]}}

    def lookup(res: r.ResourceType, key: str) -> JsonDict | None:
        return store.get((res.key, key))

    found = owner_of(pod, f"{NS}/tj", list(types.values()), lookup)
    assert found is not None and found[0].kind == "TrainJob"
    resizer = MigResizer(KubeClient(host="http://127.0.0.1:9"), list(types.values()), lookup)  # (never called)
    lesson = OomLesson(f"{NS}/tj", mig=Resize(ONE_G, TWO_G), mig_from=ONE_G, offered=True)
    text = resizer.resize(pod, lesson)
    assert f"not made from TrainJob {NS}/tj's own templates" in text and text.endswith(
        f"ask for {TWO_G} in its pod template")
    # The Job's own workload (a Job of its own): named after the Job, written there.
    found = owner_of(pod, f"{NS}/tj-node-0", list(types.values()), lookup)
    assert found is not None and found[0].kind == "Job"
