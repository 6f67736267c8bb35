"""A pod that ran out of GPU memory, read from its termination message (gpufleet.live.gpu_oom): its workload's next
pod is kept off the shared GPU that ran out, in a cycle that carries on as in a full one, and what was learnt
outlives the policy that learnt it; on a MIG instance the next larger profile is named, never forced on a pod
that asks for the smaller one.

In process, as tests/kube/test_carried_cycles.py: an ObjectCache filled by hand, runners that never write."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from typing import Any

from kube_apisim import ApiSim
from live_env import NS, bound_node, events, gpu_uuid, pod, wait_until
from test_carried_cycles import JOBS, Cluster, first_cycle, runner, step
from test_observed_memory import NODE, _sliced_node
from workload_env import job as job_object
from workload_env import job_pods

from gpufleet.api.objects import GPU_MEMORY_USED_ANNOTATION
from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import intent_annotations
from gpufleet.live.gpu_oom import GPU_OOM, REASON, gpu_ooms
from gpufleet.live.scheduler import Scheduler

JsonDict = dict[str, Any]
TORCH_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 44.53 GiB of which 1.20 GiB is free.")


def _on(obj: JsonDict, gpu: int, replica: int) -> JsonDict:
    """``obj`` running on the node's GPU ``gpu``, time-slice replica ``replica``, as its Binding recorded it."""
    obj["spec"]["nodeName"] = NODE
    obj["metadata"].setdefault("annotations", {}).update(
        intent_annotations(NODE, (f"{gpu_uuid(NODE, gpu)}::{replica}",), 1_700_000_000.0, None))
    obj["status"] = {"phase": "Running"}
    return obj


def _terminated(message: str, *, reason: str = "Error", restarted: bool = False) -> JsonDict:
    ended = {"exitCode": 1, "reason": reason, "message": message, "finishedAt": "2026-01-02T00:00:00Z",
             "containerID": "containerd://abc"}
    if restarted:
        return {"name": "main", "restartCount": 1, "state": {"running": {}}, "lastState": {"terminated": ended}}
    return {"name": "main", "restartCount": 0, "state": {"terminated": ended}}


def test_what_frameworks_write_when_the_gpu_runs_out_of_memory() -> None:
    for text in (TORCH_OOM, "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB",
                 "RuntimeError: CUDA error: out of memory", "torch.cuda.OutOfMemoryError: CUDA out of memory.",
                 "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor",
                 "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate",
                 "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
                 "numba.cuda.cudadrv.driver.CudaAPIError: [2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY",
                 "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,024 bytes",
                 "ResourceExhaustedError: OOM when allocating tensor with shape[8] on /device:GPU:0"):
        assert GPU_OOM.search(text) and gpu_ooms(_failed(text)), text
    for text in ("java.lang.OutOfMemoryError: Java heap space", "MemoryError", "Killed", "",
                 "ResourceExhaustedError: OOM when allocating tensor with shape[8] on /job:w/device:CPU:0"):
        assert not GPU_OOM.search(text) and not gpu_ooms(_failed(text)), text
    # A container that exited 0 did not fail, whatever its log's end says; statuses not shaped as the API shapes
    # them are passed over.
    assert not gpu_ooms({"status": {"containerStatuses": [{"name": "m", "state": {"terminated": {
        "exitCode": 0, "message": TORCH_OOM}}}]}})
    for odd in ("x", {"containerStatuses": 5}, {"containerStatuses": [{"state": "running", "lastState": []}]},
                {"containerStatuses": ["x", {"state": {"terminated": "x"}}]}):
        assert gpu_ooms({"status": odd}) == frozenset()
    # The kubelet's OOMKilled is the node's memory cgroup: host memory, not the GPU's.
    host = {"status": {"containerStatuses": [_terminated("", reason="OOMKilled")]}}
    assert gpu_ooms(host) == frozenset()
    ran_out = {"status": {"containerStatuses": [_terminated(TORCH_OOM, restarted=True)]}}
    assert gpu_ooms(ran_out) == {"main@2026-01-02T00:00:00Z"}


def _failed(message: str) -> JsonDict:
    return {"status": {"phase": "Failed", "containerStatuses": [_terminated(message)]}}


def _cluster_with_a_job(neighbour_used: str | None = None) -> tuple[Cluster, JsonDict]:
    """A Job's pod on GPU 0 beside a neighbour (what it uses: ``neighbour_used``, the node agent's observation, else
    unknown); GPU 1 holds two pods whose memory nobody knows."""
    c = Cluster()
    c.put(r.NODES, _sliced_node())
    owner = job_object("train", pods=1, queue="lq")
    c.put(JOBS, owner)
    [first] = job_pods(owner)
    c.put(r.PODS, _on(first, 0, 0))
    neighbour = _on(pod("n", queue="lq"), 0, 1)
    if neighbour_used is not None:
        neighbour["metadata"]["annotations"][GPU_MEMORY_USED_ANNOTATION] = neighbour_used
    c.put(r.PODS, neighbour)
    for name, replica in (("c", 0), ("d", 1)):
        c.put(r.PODS, _on(pod(name, queue="lq"), 1, replica))
    return c, first


def _retry(first: JsonDict) -> JsonDict:
    """The Job controller's next pod: the first one's template, pending, a name and UID of its own."""
    obj = copy.deepcopy(first)
    obj["metadata"]["name"] = "train-retry"
    obj["metadata"]["uid"] = "uid-train-retry"
    obj["metadata"]["annotations"] = {}
    obj["metadata"].pop("resourceVersion", None)
    del obj["spec"]["nodeName"]
    obj["status"] = {"phase": "Pending"}
    return obj


def _gpu_of(d: Any, key: str) -> str:
    [device] = [dev for job in d.jobs for p in job.pods if p.key == key for dev in p.devices]
    return str(device).partition("::")[0]


def test_the_jobs_next_pod_is_kept_off_the_gpu_that_ran_out() -> None:
    c, first = _cluster_with_a_job()
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    failed = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/{first['metadata']['name']}")))
    failed["status"] = {"phase": "Failed", "containerStatuses": [_terminated(TORCH_OOM)]}
    c.put(r.PODS, failed, "MODIFIED")
    d, _ = step(run, now + 1)
    [(told, lesson)] = d.ooms
    assert told["metadata"]["name"] == first["metadata"]["name"]
    # The neighbour's memory is unknown, so what was free is too: GPU 0 is avoided, no memory is expected.
    assert lesson.gpus == (f"{NODE}/0",) and lesson.needs_more_than == 0
    assert lesson.text() == f"ran out of GPU memory on the shared GPU {NODE}/0: it is not placed there again"
    c.put(r.PODS, _retry(first))
    d, _ = step(run, now + 2)
    assert not d.ooms  # told once
    # GPU 0 holds one pod now and GPU 1 two: without the lesson, the retry would go back to GPU 0.
    assert _gpu_of(d, f"{NS}/train-retry") == gpu_uuid(NODE, 1)
    # A full cycle's new policy is given what the last one learnt.
    run.kept = None
    c.put(r.PODS, pod("other", queue="lq"))
    d, carried = step(run, now + 3)
    assert not carried and not d.ooms
    assert d.plan.policy.memory is not None and d.plan.policy.memory.avoid(f"{NS}/train") == {f"{NODE}/0"}


def test_a_container_restarted_in_place_is_learnt_by_a_full_cycle_from_its_last_state() -> None:
    c, first = _cluster_with_a_job(neighbour_used="30Gi")
    key = f"{NS}/{first['metadata']['name']}"
    obj = json.loads(json.dumps(c.cache.get(r.PODS, key)))
    obj["status"]["containerStatuses"] = [_terminated(TORCH_OOM, restarted=True)]
    c.put(r.PODS, obj, "MODIFIED")
    run = runner(c)
    d = first_cycle(run, time.time())
    [(_, lesson)] = d.ooms
    # Beside a neighbour seen using 30 GiB of the L40S's 45: it needs more than the rest.
    assert lesson.workload == f"{NS}/train" and lesson.gpus == (f"{NODE}/0",)
    assert lesson.needs_more_than == 46068 - 30 * 1024
    assert f"expected to need more than {46068 - 30 * 1024} MiB" in lesson.text()


def test_what_the_agent_saw_in_the_same_batch_is_read_before_the_oom() -> None:
    """The neighbour's observation and the OOM arrive together: what was free beside it is worked out with the
    observation, in a cycle that carries on as in a full one."""
    c, first = _cluster_with_a_job()
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    neighbour = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/n")))
    neighbour["metadata"]["annotations"][GPU_MEMORY_USED_ANNOTATION] = "30Gi"
    c.put(r.PODS, neighbour, "MODIFIED")
    failed = json.loads(json.dumps(c.cache.get(r.PODS, f"{NS}/{first['metadata']['name']}")))
    failed["status"] = {"phase": "Failed", "containerStatuses": [_terminated(TORCH_OOM)]}
    c.put(r.PODS, failed, "MODIFIED")
    d, carried = step(run, now + 1)
    assert carried
    [(_, lesson)] = d.ooms
    assert lesson.needs_more_than == 46068 - 30 * 1024


def _owned(obj: JsonDict, uid: str) -> JsonDict:
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
                                           "controller": True}]
    return obj


def test_a_job_made_again_under_its_name_learns_afresh() -> None:
    c, first = _cluster_with_a_job()
    key = f"{NS}/{first['metadata']['name']}"
    c.put(r.PODS, _owned(json.loads(json.dumps(c.cache.get(r.PODS, key))), "job-train"), "MODIFIED")
    run = runner(c)
    now = time.time()
    first_cycle(run, now)
    failed = json.loads(json.dumps(c.cache.get(r.PODS, key)))
    failed["status"] = {"phase": "Failed", "containerStatuses": [_terminated(TORCH_OOM)]}
    c.put(r.PODS, failed, "MODIFIED")
    d, _ = step(run, now + 1)
    assert d.ooms
    # The Job and its pod deleted, and a Job of the same name created: other UIDs, a workload of its own.
    c.put(r.PODS, c.cache.get(r.PODS, key), "DELETED")
    old_job = c.cache.get(JOBS, f"{NS}/train")
    c.put(JOBS, old_job, "DELETED")
    again = json.loads(json.dumps(old_job).replace("job-train", "job-train-2"))
    again["metadata"].pop("resourceVersion", None)
    c.put(JOBS, again)
    [fresh_pod] = job_pods(again)
    fresh_pod["metadata"]["name"] = "train-2nd"
    c.put(r.PODS, _owned(fresh_pod, "job-train-2"))
    run.kept = None
    d, carried = step(run, now + 2)
    assert not carried
    assert d.plan.policy.memory is not None and d.plan.policy.memory.avoid(f"{NS}/train") == frozenset()
    assert _gpu_of(d, f"{NS}/train-2nd") == gpu_uuid(NODE, 0)  # the emptier GPU, as for any new workload


def test_the_live_scheduler_says_what_it_learnt_in_one_warning_event(
        apisim: ApiSim, live_scheduler: Callable[..., Scheduler]) -> None:
    """Against the emulator over HTTP: a running pod whose container restarted after a CUDA out-of-memory gets one
    GPUOutOfMemory Warning event naming the GPU it is kept off, however many cycles run after."""
    apisim.create(r.NODES, _sliced_node())
    restarted = _on(pod("a", queue=None), 0, 0)
    restarted["status"]["containerStatuses"] = [_terminated(TORCH_OOM, restarted=True)]
    apisim.create(r.PODS, restarted)
    apisim.create(r.PODS, _on(pod("neighbour", queue=None), 0, 1))
    live_scheduler()
    wait_until(lambda: events(apisim, REASON), what="the GPUOutOfMemory event")
    [event] = events(apisim, REASON)
    assert event["type"] == "Warning" and event["regarding"]["name"] == "a"
    assert event["note"] == f"ran out of GPU memory on the shared GPU {NODE}/0: it is not placed there again"
    apisim.create(r.PODS, pod("later", queue=None))  # more cycles: the termination is not told again
    wait_until(lambda: bound_node(apisim, "later") is not None, what="a later pod bound")
    assert len(events(apisim, REASON)) == 1
