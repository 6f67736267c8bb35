"""DRA claims written before the Binding, as kube-scheduler's DynamicResources PreBind writes them, against kmock +
ApiSim over real HTTP: the finalizer, the allocation and reservedFor first, the Binding only then; never a claim
another scheduler allocated; Conflicts and lost answers settled by reading the claim again; the claims released
when the pod is not bound after all, or when an evicted pod is gone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kmock
import pytest
from kube_apisim import ApiSim, failure, json_copy
from live_env import NS, PODS_RES, bindings, bound_node, pod

from gpufleet.api.dra_need import ClaimResult
from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.live.binder import Binder, BindJob, BindResult, ClaimWrite, PodBind
from gpufleet.live.claims import FINALIZER, pod_claim_names
from gpufleet.live.evictor import Evictor, Victim
from gpufleet.live.recorder import Recorder
from gpufleet.scheduler_metrics import SchedulerMetrics

JsonDict = dict[str, Any]
CLAIMS_RES = kmock.resource("resource.k8s.io", "v1", "resourceclaims")
DRIVER = "gpu.nvidia.com"
NODE = "n0"
OPAQUE = {"driver": DRIVER, "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                                           "sharing": {"strategy": "TimeSlicing"}}}


def claim(name: str) -> JsonDict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}],
                                 "config": [{"requests": ["gpu"], "opaque": OPAQUE}]}}}


def results(claim_name: str, *devices: str) -> tuple[ClaimResult, ...]:
    return tuple(ClaimResult(f"{NS}/{claim_name}", "gpu", DRIVER, NODE, d) for d in devices)


def allocation(*devices: str, node: str = NODE) -> JsonDict:
    return {"devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": node, "device": d} for d in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


def dra_pod(name: str, *claims: str) -> JsonDict:
    obj = pod(name, gpus=0)
    obj["spec"]["resourceClaims"] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    return obj


@pytest.fixture
def dra(apisim: ApiSim) -> ApiSim:
    apisim.serve(r.RESOURCE_CLAIMS)
    return apisim


@pytest.fixture
def binder(dra: ApiSim, client: KubeClient) -> Binder:
    return Binder(client, Recorder(client, "gpufleet", "test"), SchedulerMetrics(), may_write=lambda: True,
                  retries=3, backoff=0.01, sleep=lambda _: None)


@pytest.fixture
def evictor(dra: ApiSim, client: KubeClient) -> Iterator[Evictor]:
    yield Evictor(client, Recorder(client, "gpufleet", "test"), SchedulerMetrics(), may_write=lambda: True)


def bind_of(created: JsonDict, *writes: ClaimWrite) -> PodBind:
    meta = created["metadata"]
    return PodBind(f"{NS}/{meta['name']}", meta["uid"], NODE, (), None, created, claims=writes)


def run(binder: Binder, *pods: PodBind) -> BindResult:
    return binder.run(BindJob(pods[0].key, pods), 1000.0)


def get_claim(apisim: ApiSim, name: str) -> JsonDict:
    obj = apisim.get(r.RESOURCE_CLAIMS, NS, name)
    assert obj is not None
    return obj


def claim_writes(apisim: ApiSim) -> list[kmock.Request]:
    return apisim.writes(r.RESOURCE_CLAIMS, "PUT") + apisim.writes(r.RESOURCE_CLAIMS, "PUT", "status")


def put_with_concurrency(apisim: ApiSim, request: kmock.Request) -> JsonDict:
    """ApiSim's own PUT (loop thread): 409 on a stale resourceVersion, else the write."""
    name = request.name or ""
    current = apisim.objects[r.RESOURCE_CLAIMS.key][(NS, name)]
    if request.data["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]:
        raise failure(409, "Conflict", "the object has been modified; please apply your changes to the latest "
                                       "version and try again")
    return apisim._replace(r.RESOURCE_CLAIMS, NS, name, request.data, request.subresource)


def test_the_claim_is_allocated_and_reserved_for_the_pod_before_its_binding(dra: ApiSim, binder: Binder) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))
    at_binding: list[JsonDict | None] = []

    async def bind(request: kmock.Request) -> Any:
        at_binding.append(json_copy(dra.objects[r.RESOURCE_CLAIMS.key].get((NS, "c1"))))
        return dra._bind(r.PODS, request.namespace, request.name or "", request.data)

    dra.harness.call(lambda: dra.kmock["post", PODS_RES, lambda q: q.subresource == "binding"] << bind)
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0", "gpu-1"))))

    assert result.bound == [f"{NS}/p1"] and not result.failed and bound_node(dra, "p1") == NODE
    # Written before the Binding went out: a pod with spec.nodeName set is never allocated by anyone.
    [seen] = at_binding
    assert seen is not None and seen == get_claim(dra, "c1")
    assert seen["metadata"]["finalizers"] == [FINALIZER]
    status = seen["status"]
    assert status["allocation"]["devices"]["results"] == allocation("gpu-0", "gpu-1")["devices"]["results"]
    assert status["allocation"]["nodeSelector"] == allocation()["nodeSelector"]
    # The claim's opaque configuration travels in the allocation: the driver's kubelet plugin reads it there.
    assert status["allocation"]["devices"]["config"] == [{"source": "FromClaim", "requests": ["gpu"],
                                                          "opaque": OPAQUE}]
    assert status["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": created["metadata"]["uid"]}]
    # The finalizer first (a normal update), then the status, each with the resourceVersion it read.
    puts = dra.writes(r.RESOURCE_CLAIMS, "PUT")
    status_puts = dra.writes(r.RESOURCE_CLAIMS, "PUT", "status")
    assert len(puts) == 1 and len(status_puts) == 1
    assert puts[0].data["metadata"]["resourceVersion"] != status_puts[0].data["metadata"]["resourceVersion"]


def test_a_claim_another_scheduler_allocated_is_never_written_and_the_pod_not_bound(
    dra: ApiSim, binder: Binder
) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    before = dra.modify(r.RESOURCE_CLAIMS, NS, "c1", {"metadata": {"finalizers": [FINALIZER]}, "status": {
        "allocation": allocation("gpu-3"), "reservedFor": [{"resource": "pods", "name": "other", "uid": "u-other"}]}})
    created = dra.create(r.PODS, dra_pod("p1", "c1"))

    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert result.bound == [] and f"{NS}/p1" not in result.uncertain
    why = result.failed[f"{NS}/p1"]
    assert "claim ml/c1 already allocated to other devices" in why and "gpu.nvidia.com/n0/gpu-3" in why
    assert bindings(dra) == [] and bound_node(dra, "p1") is None
    assert claim_writes(dra) == [] and get_claim(dra, "c1") == before  # untouched, not even released


def test_a_claim_reserved_for_another_pod_with_the_same_devices_is_not_shared(dra: ApiSim, binder: Binder) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    before = dra.modify(r.RESOURCE_CLAIMS, NS, "c1", {"status": {
        "allocation": allocation("gpu-0"), "reservedFor": [{"resource": "pods", "name": "other", "uid": "u-other"}]}})
    created = dra.create(r.PODS, dra_pod("p1", "c1"))

    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert "reserved for other consumers (pods/other)" in result.failed[f"{NS}/p1"]
    assert bindings(dra) == [] and claim_writes(dra) == [] and get_claim(dra, "c1") == before


def test_a_missing_claim_keeps_the_pod_unbound_and_releases_the_claims_reserved_before_it(
    dra: ApiSim, binder: Binder
) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1", "c2"))

    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0")),
                                 ClaimWrite(NS, "c2", results("c2", "gpu-1"))))

    assert result.failed == {f"{NS}/p1": "claim ml/c2 does not exist (yet)"} and not result.uncertain
    assert bindings(dra) == []
    # c1 was reserved first; given back whole: no consumer, no allocation, and the finalizer this attempt added.
    released = get_claim(dra, "c1")
    assert released.get("status") == {} and released["metadata"].get("finalizers") == []


def test_a_lost_answer_to_the_status_write_is_settled_by_reading_the_claim_and_the_pod_binds(
    dra: ApiSim, binder: Binder
) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))
    answered: list[str] = []

    async def put_status(request: kmock.Request) -> Any:
        out = put_with_concurrency(dra, request)  # written...
        answered.append("lost" if not answered else "ok")
        if answered[-1] == "lost":
            raise failure(500, "InternalError", "connection to etcd lost after the write")  # ...answer lost
        return out

    dra.harness.call(lambda: dra.kmock["put", CLAIMS_RES, lambda q: q.subresource == "status"] << put_status)
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert result.bound == [f"{NS}/p1"] and bound_node(dra, "p1") == NODE
    assert answered == ["lost"]  # the re-read found it reserved for the pod: not written twice
    assert get_claim(dra, "c1")["status"]["reservedFor"] == [
        {"resource": "pods", "name": "p1", "uid": created["metadata"]["uid"]}]


def test_a_claim_already_reserved_for_the_pod_by_an_earlier_attempt_is_not_written_again(
    dra: ApiSim, binder: Binder
) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))
    uid = created["metadata"]["uid"]
    dra.modify(r.RESOURCE_CLAIMS, NS, "c1", {"metadata": {"finalizers": [FINALIZER]}, "status": {
        "allocation": allocation("gpu-1", "gpu-0"), "reservedFor": [{"resource": "pods", "name": "p1", "uid": uid}]}})

    # The same devices in another order: the order of results carries no meaning.
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0", "gpu-1"))))

    assert result.bound == [f"{NS}/p1"] and bound_node(dra, "p1") == NODE
    assert claim_writes(dra) == []


def test_a_conflict_on_the_status_write_reads_the_claim_again_and_retries(dra: ApiSim, binder: Binder) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))
    seen: list[str] = []

    async def put_status(request: kmock.Request) -> Any:
        if not seen:  # another writer (a driver's label, say) gets in between the binder's read and its write
            dra._patch(r.RESOURCE_CLAIMS, NS, "c1", {"metadata": {"labels": {"touched": "yes"}}})
        seen.append(request.data["metadata"]["resourceVersion"])
        return put_with_concurrency(dra, request)

    dra.harness.call(lambda: dra.kmock["put", CLAIMS_RES, lambda q: q.subresource == "status"] << put_status)
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert result.bound == [f"{NS}/p1"]
    assert len(seen) == 2 and seen[0] != seen[1]  # the second write carries the version read after the 409
    final = get_claim(dra, "c1")
    assert final["metadata"]["labels"] == {"touched": "yes"} and final["metadata"]["finalizers"] == [FINALIZER]
    assert final["status"]["allocation"] == {**allocation("gpu-0"), "devices": {
        **allocation("gpu-0")["devices"], "config": [{"source": "FromClaim", "requests": ["gpu"], "opaque": OPAQUE}]}}
    assert len(dra.writes(r.RESOURCE_CLAIMS, "PUT")) == 1  # the finalizer, once: the re-read found it there


@pytest.mark.parametrize("stale", [False, True])
def test_the_claim_is_read_from_the_cache_first_and_a_stale_copy_costs_a_conflict_and_a_fresh_read(
        dra: ApiSim, client: KubeClient, stale: bool) -> None:
    # kube-scheduler's allocator writes from its informer's copy: one request fewer per claim before the Binding.
    # Every write carries the resourceVersion read, so a copy older than the claim is refused (409) and read again.
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))
    cached = json_copy(get_claim(dra, "c1"))
    if stale:  # another writer (a driver's label, say) changed it since the cache's copy
        dra.harness.call(lambda: dra._patch(r.RESOURCE_CLAIMS, NS, "c1", {"metadata": {"labels": {"touched": "yes"}}}))
    dra.harness.call(lambda: dra.kmock["put", CLAIMS_RES] << (lambda q: put_with_concurrency(dra, q)))
    binder = Binder(client, Recorder(client, "gpufleet", "test"), SchedulerMetrics(), may_write=lambda: True,
                    retries=3, backoff=0.01, sleep=lambda _: None, cached_claim=lambda ns, name: cached)
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert result.bound == [f"{NS}/p1"] and bound_node(dra, "p1") == NODE
    final = get_claim(dra, "c1")
    assert final["metadata"]["finalizers"] == [FINALIZER]
    assert final["status"]["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": created["metadata"]["uid"]}]
    reads = dra.requests(r.RESOURCE_CLAIMS, "FETCH")
    puts = dra.writes(r.RESOURCE_CLAIMS, "PUT")
    if stale:
        assert len(reads) == 1 and len(puts) == 2  # the refused write, then the one after the fresh read
        assert final["metadata"]["labels"] == {"touched": "yes"}
    else:
        assert not reads and len(puts) == 1


def test_a_cached_copy_saying_reserved_is_confirmed_by_the_server_before_the_binding(
        dra: ApiSim, client: KubeClient) -> None:
    # Only a write is guarded by the version read: a cache lagging behind our own Unreserve still shows the claim
    # reserved for the pod. Trusted, the Binding went out with the claim unallocated on the server (found by review).
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))
    stale = json_copy(get_claim(dra, "c1"))
    stale["status"] = {"allocation": allocation("gpu-0"),
                       "reservedFor": [{"resource": "pods", "name": "p1", "uid": created["metadata"]["uid"]}]}
    binder = Binder(client, Recorder(client, "gpufleet", "test"), SchedulerMetrics(), may_write=lambda: True,
                    retries=3, backoff=0.01, sleep=lambda _: None, cached_claim=lambda ns, name: stale)
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert result.bound == [f"{NS}/p1"]
    status = get_claim(dra, "c1")["status"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "p1", "uid": created["metadata"]["uid"]}]
    assert status["allocation"]["devices"]["results"] == allocation("gpu-0")["devices"]["results"]


def test_a_refused_binding_unreserves_and_deallocates_the_claim(dra: ApiSim, binder: Binder) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))
    at_binding: list[JsonDict] = []

    async def bind(request: kmock.Request) -> Any:
        at_binding.append(json_copy(dra.objects[r.RESOURCE_CLAIMS.key][(NS, "c1")]))
        raise failure(403, "Forbidden", "pods/binding is forbidden")  # refused outright: certainly not bound

    dra.harness.call(lambda: dra.kmock["post", PODS_RES, lambda q: q.subresource == "binding"] << bind)
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert "binding refused" in result.failed[f"{NS}/p1"] and not result.uncertain
    assert at_binding[0]["status"]["reservedFor"]  # it had been reserved when the Binding went out
    released = get_claim(dra, "c1")
    assert released["status"] == {}  # no consumer, no allocation: the next cycle may allocate it anew
    assert released["metadata"]["finalizers"] == []


def test_a_binding_that_may_still_land_keeps_the_claim_reserved(dra: ApiSim, binder: Binder) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    created = dra.create(r.PODS, dra_pod("p1", "c1"))

    async def bind(request: kmock.Request) -> Any:
        raise failure(504, "Timeout", "the server did not answer in time")  # silence: it may still be applied

    dra.harness.call(lambda: dra.kmock["post", PODS_RES, lambda q: q.subresource == "binding"] << bind)
    result = run(binder, bind_of(created, ClaimWrite(NS, "c1", results("c1", "gpu-0"))))

    assert result.uncertain == {f"{NS}/p1"}
    # The pod would start without its devices if the late Binding landed on a released claim.
    assert get_claim(dra, "c1")["status"]["reservedFor"][0]["name"] == "p1"


def reserve_for(apisim: ApiSim, claim_name: str, *pods: JsonDict) -> None:
    apisim.modify(r.RESOURCE_CLAIMS, NS, claim_name, {"metadata": {"finalizers": [FINALIZER]}, "status": {
        "allocation": allocation("gpu-0"),
        "reservedFor": [{"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
                        for p in pods]}})


def test_an_evicted_pod_that_is_gone_releases_its_claims(dra: ApiSim, evictor: Evictor) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    dra.create(r.RESOURCE_CLAIMS, claim("p1-gpu-x7k2"))  # generated from a template
    victim = dra_pod("p1", "c1")
    victim["spec"]["nodeName"] = NODE
    victim["spec"]["resourceClaims"].append({"name": "tmpl", "resourceClaimTemplateName": "gpu-template"})
    victim["status"]["resourceClaimStatuses"] = [{"name": "tmpl", "resourceClaimName": "p1-gpu-x7k2"}]
    created = dra.create(r.PODS, victim)
    assert pod_claim_names(created) == ["c1", "p1-gpu-x7k2"]
    reserve_for(dra, "c1", created)
    reserve_for(dra, "p1-gpu-x7k2", created)

    outcome = evictor.evict(Victim(f"{NS}/p1", f"{NS}/urgent", "priority", (created,)))

    assert outcome.outcome == "evicted" and dra.get(r.PODS, NS, "p1") is None
    for name in ("c1", "p1-gpu-x7k2"):
        released = get_claim(dra, name)
        assert released["status"] == {} and released["metadata"]["finalizers"] == [], name


def test_an_evicted_pod_leaves_a_claim_other_pods_still_use_allocated(dra: ApiSim, evictor: Evictor) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("shared"))
    victim = dra.create(r.PODS, dra_pod("p1", "shared"))
    other = dra.create(r.PODS, dra_pod("p2", "shared"))
    reserve_for(dra, "shared", victim, other)

    assert evictor.evict(Victim(f"{NS}/p1", f"{NS}/urgent", "priority", (victim,))).outcome == "evicted"

    kept = get_claim(dra, "shared")
    assert kept["status"]["reservedFor"] == [{"resource": "pods", "name": "p2", "uid": other["metadata"]["uid"]}]
    assert kept["status"]["allocation"] == allocation("gpu-0") and kept["metadata"]["finalizers"] == [FINALIZER]


def test_an_evicted_pod_still_terminating_keeps_its_claims_until_it_is_gone(dra: ApiSim, evictor: Evictor) -> None:
    dra.create(r.RESOURCE_CLAIMS, claim("c1"))
    victim = dra_pod("p1", "c1")
    victim["spec"]["nodeName"] = NODE
    created = dra.create(r.PODS, victim)
    reserve_for(dra, "c1", created)
    before = get_claim(dra, "c1")

    async def evict(request: kmock.Request) -> Any:
        # A real API server marks the pod for deletion; its containers run on until the grace period ends.
        if "All" not in ((request.data.get("deleteOptions") or {}).get("dryRun") or []):
            dra._patch(r.PODS, NS, request.name or "", {"metadata": {"deletionTimestamp": "2026-01-01T00:00:30Z"}})
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    dra.harness.call(lambda: dra.kmock["post", PODS_RES, lambda q: q.subresource == "eviction"] << evict)
    assert evictor.evict(Victim(f"{NS}/p1", f"{NS}/urgent", "priority", (created,))).outcome == "evicted"

    # Released now, its devices would go to the preemptor while the victim still runs on them.
    assert get_claim(dra, "c1") == before and claim_writes(dra) == []
