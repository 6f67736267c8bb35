"""KubeClient against kmock over real HTTP: URLs, bodies, content types, and typed errors."""

from __future__ import annotations

import socket
import threading
import time

import kmock
import pytest
from kube_apisim import ApiSim, status

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient, PatchType, make_event
from gpufleet.k8s.errors import (
    AlreadyExists,
    ApiConnectionError,
    Conflict,
    Gone,
    NotFound,
    ServerError,
    TooManyRequests,
)


def _pod(name: str, ns: str = "team-a", **spec: object) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": ns}, "spec": {"containers": [{"name": "c"}], **spec}}


def test_create_get_list_carry_resource_versions(apisim: ApiSim, client: KubeClient) -> None:
    created = client.create(r.PODS, _pod("p1"))
    assert created["metadata"]["namespace"] == "team-a"
    assert client.get(r.PODS, "p1", "team-a")["metadata"]["uid"] == created["metadata"]["uid"]
    listed = client.list(r.PODS, "team-a")
    assert [p["metadata"]["name"] for p in listed.items] == ["p1"]
    assert listed.resource_version == created["metadata"]["resourceVersion"]
    # The server strips kind/apiVersion from list items; the client puts them back for the cache.
    assert listed.items[0]["kind"] == "Pod" and listed.items[0]["apiVersion"] == "v1"
    [post] = apisim.requests(r.PODS, "CREATE")
    assert post.url.path == "/api/v1/namespaces/team-a/pods"
    assert post.data["kind"] == "Pod" and post.data["apiVersion"] == "v1"


def test_cluster_scoped_custom_resource_paths(apisim: ApiSim, client: KubeClient) -> None:
    client.create(r.CLUSTER_QUEUES, {"metadata": {"name": "cq"}, "spec": {"cohort": "all"}})
    assert client.get(r.CLUSTER_QUEUES, "cq")["spec"] == {"cohort": "all"}
    [post] = apisim.requests(r.CLUSTER_QUEUES, "CREATE")
    assert post.url.path == "/apis/gpufleet.io/v1alpha1/clusterqueues"
    assert post.data["apiVersion"] == "gpufleet.io/v1alpha1"


def test_patch_sends_the_chosen_content_type(apisim: ApiSim, client: KubeClient) -> None:
    client.create(r.PODS, _pod("p1"))
    out = client.patch(r.PODS, "p1", {"metadata": {"annotations": {"gpufleet.io/gpus": "0,1"}}}, "team-a",
                       patch_type=PatchType.STRATEGIC)
    assert out["metadata"]["annotations"] == {"gpufleet.io/gpus": "0,1"}
    client.create(r.CLUSTER_QUEUES, {"metadata": {"name": "cq"}, "spec": {"cohort": "a", "stopPolicy": "Hold"}})
    out = client.patch(r.CLUSTER_QUEUES, "cq", {"spec": {"stopPolicy": None}})
    assert out["spec"] == {"cohort": "a"}
    pod_patch, cq_patch = apisim.writes(r.PODS, "PATCH") + apisim.writes(r.CLUSTER_QUEUES, "PATCH")
    assert pod_patch.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert pod_patch.url.path == "/api/v1/namespaces/team-a/pods/p1"
    assert cq_patch.headers["Content-Type"] == "application/merge-patch+json"
    with pytest.raises(ValueError, match="custom resources"):
        client.patch(r.CLUSTER_QUEUES, "cq", {}, patch_type=PatchType.STRATEGIC)


def test_update_status_uses_the_subresource_and_optimistic_concurrency(apisim: ApiSim, client: KubeClient) -> None:
    cq = client.create(r.CLUSTER_QUEUES, {"metadata": {"name": "cq"}, "spec": {"cohort": "a"}})
    cq["status"] = {"pendingWorkloads": 3, "admittedWorkloads": 1}
    cq["spec"] = {"cohort": "changed-by-mistake"}
    updated = client.update_status(r.CLUSTER_QUEUES, cq)
    assert updated["status"] == {"pendingWorkloads": 3, "admittedWorkloads": 1}
    assert updated["spec"] == {"cohort": "a"}  # the status subresource leaves spec alone
    [put] = apisim.writes(r.CLUSTER_QUEUES, "PUT", "status")
    assert put.url.path == "/apis/gpufleet.io/v1alpha1/clusterqueues/cq/status"
    # Writing again with the now stale resourceVersion is a lost race.
    with pytest.raises(Conflict):
        client.update_status(r.CLUSTER_QUEUES, cq)


def test_bind_posts_a_binding_with_uid_precondition(apisim: ApiSim, client: KubeClient) -> None:
    pod = client.create(r.PODS, _pod("trainer-0"))
    client.bind("team-a", "trainer-0", "gpu-node-7", pod_uid=pod["metadata"]["uid"])
    [post] = apisim.writes(r.PODS, "POST", "binding")
    assert post.url.path == "/api/v1/namespaces/team-a/pods/trainer-0/binding"
    assert post.data == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "trainer-0", "namespace": "team-a", "uid": pod["metadata"]["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "gpu-node-7"},
    }
    assert client.get(r.PODS, "trainer-0", "team-a")["spec"]["nodeName"] == "gpu-node-7"
    # Binding an already bound pod is a Conflict, as on a real server.
    with pytest.raises(Conflict, match="already assigned"):
        client.bind("team-a", "trainer-0", "gpu-node-8")


def test_binding_409_and_500_injected_with_kmock_are_typed(apisim: ApiSim, client: KubeClient) -> None:
    client.create(r.PODS, _pod("p1"))
    binding = apisim.kmock["post", kmock.subresource("binding")]
    # One-shot faults (kmock slices): first a 500, then a 409, then the simulator answers.
    apisim.harness.call(lambda: binding[:1] << 500 << status(500, "InternalError", "etcdserver: leader changed"))
    apisim.harness.call(lambda: binding[1:2] << 409 << status(409, "Conflict", "Operation cannot be fulfilled"))
    with pytest.raises(ServerError) as server_error:
        client.bind("team-a", "p1", "n1")
    assert server_error.value.status == 500 and "leader changed" in server_error.value.message
    with pytest.raises(Conflict) as conflict:
        client.bind("team-a", "p1", "n1")
    assert conflict.value.status == 409 and conflict.value.reason == "Conflict"
    client.bind("team-a", "p1", "n1")
    assert len(apisim.writes(r.PODS, "POST", "binding")) == 3


def test_eviction_blocked_by_a_disruption_budget_is_too_many_requests(apisim: ApiSim, client: KubeClient) -> None:
    client.create(r.PODS, _pod("victim"))
    pdb = status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    pdb["details"] = {"causes": [{"reason": "DisruptionBudget", "message": "needs 2 healthy pods"}]}
    apisim.harness.call(lambda: apisim.kmock["post", kmock.subresource("eviction")] << 429
                        << {"Retry-After": "7"} << pdb)
    with pytest.raises(TooManyRequests) as blocked:
        client.evict("team-a", "victim", pod_uid="u-1", grace_period_seconds=30)
    assert blocked.value.retry_after == 7.0
    assert blocked.value.details["causes"][0]["reason"] == "DisruptionBudget"
    [post] = apisim.writes(r.PODS, "POST", "eviction")
    assert post.url.path == "/api/v1/namespaces/team-a/pods/victim/eviction"
    assert post.data == {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": "victim", "namespace": "team-a"},
        "deleteOptions": {"preconditions": {"uid": "u-1"}, "gracePeriodSeconds": 30},
    }


def test_not_found_and_already_exists(client: KubeClient) -> None:
    with pytest.raises(NotFound):
        client.get(r.PODS, "nope", "team-a")
    client.create(r.NAMESPACES, {"metadata": {"name": "team-a"}})
    with pytest.raises(AlreadyExists) as exists:
        client.create(r.NAMESPACES, {"metadata": {"name": "team-a"}})
    assert isinstance(exists.value, Conflict)  # one `except Conflict` handles both


def test_list_all_follows_continue_tokens_and_keeps_the_first_snapshot_version(
    apisim: ApiSim, client: KubeClient
) -> None:
    for i in range(5):
        apisim.create(r.NODES, {"metadata": {"name": f"n{i}"}})
    result = client.list_all(r.NODES, page_size=2)
    assert [n["metadata"]["name"] for n in result.items] == [f"n{i}" for i in range(5)]
    lists = apisim.requests(r.NODES, "LIST")
    assert [(q.params.get("limit"), q.params.get("continue")) for q in lists] == [
        ("2", None), ("2", "2"), ("2", "4")]
    assert result.resource_version == str(apisim.rv)


def test_watch_streams_events_and_bookmarks_from_a_resource_version(apisim: ApiSim, client: KubeClient) -> None:
    rv = client.list(r.PODS).resource_version
    with client.watch(r.PODS, resource_version=rv, timeout_seconds=30) as stream:
        apisim.create(r.PODS, _pod("p1"))
        added = next(stream)
        apisim.bookmark(r.PODS)
        bookmark = next(stream)
    assert (added.type, added.object["metadata"]["name"]) == ("ADDED", "p1")
    assert bookmark.type == "BOOKMARK" and bookmark.resource_version == str(apisim.rv)
    [watch] = apisim.requests(r.PODS, "WATCH")
    assert watch.params["resourceVersion"] == rv
    assert watch.params["allowWatchBookmarks"] == "true"
    assert watch.params["timeoutSeconds"] == "30"


def test_watch_gone_as_error_event_and_as_http_status(apisim: ApiSim, client: KubeClient) -> None:
    apisim.create(r.PODS, _pod("p1"))
    old = str(apisim.rv - 1)
    apisim.compact(r.PODS)
    stream = client.watch(r.PODS, resource_version=old)
    with pytest.raises(Gone) as expired:
        next(stream)
    assert expired.value.reason == "Expired"
    apisim.harness.call(lambda: apisim.kmock[kmock.action.WATCH, kmock.resource("v1/nodes")] << 410
                        << status(410, "Gone", "too old"))
    with pytest.raises(Gone):
        client.watch(r.NODES, resource_version="1")


def test_broken_watch_stream_is_a_connection_error(apisim: ApiSim, client: KubeClient) -> None:
    stream = client.watch(r.PODS, resource_version=str(apisim.rv))
    assert apisim.open_watches(r.PODS) == 1
    apisim.drop_watches(r.PODS)
    with pytest.raises(ApiConnectionError, match="broke"):
        next(stream)


def test_close_wakes_a_reader_blocked_on_a_silent_watch(apisim: ApiSim, client: KubeClient) -> None:
    stream = client.watch(r.PODS, resource_version=str(apisim.rv), timeout_seconds=60)
    result: list[object] = []
    reader = threading.Thread(target=lambda: result.extend(stream))
    reader.start()
    time.sleep(0.2)  # let it block in recv()
    started = time.monotonic()
    stream.close()
    reader.join(3.0)
    assert not reader.is_alive()
    assert time.monotonic() - started < 1.0
    assert result == []


def test_create_event_body(apisim: ApiSim, client: KubeClient) -> None:
    pod = client.create(r.PODS, _pod("p1"))
    event = make_event(pod, reason="Scheduled", note="Assigned team-a/p1 to n1 (2x A100)", action="Binding",
                       reporting_controller="gpufleet.io/scheduler", reporting_instance="gpufleet-0")
    client.create_event(event)
    [post] = apisim.requests(r.EVENTS, "CREATE")
    assert post.url.path == "/apis/events.k8s.io/v1/namespaces/team-a/events"
    body = post.data
    assert body["regarding"] == {"apiVersion": "v1", "kind": "Pod", "name": "p1", "namespace": "team-a",
                                 "uid": pod["metadata"]["uid"],
                                 "resourceVersion": pod["metadata"]["resourceVersion"]}
    assert (body["reason"], body["type"], body["action"]) == ("Scheduled", "Normal", "Binding")
    assert body["metadata"]["name"].startswith("p1.")
    assert body["eventTime"].endswith("Z") and "." in body["eventTime"]  # MicroTime
    long = make_event(pod, reason="R", note="x" * 5000, action="A", reporting_controller="c",
                      reporting_instance="i")
    assert len(long["note"]) == 1024


def test_event_names_are_client_gos_and_never_repeat() -> None:
    # <object>.<hex nanoseconds>, as client-go names them; made faster than the clock ticks, still all different.
    pod = _pod("p1")
    before = time.time_ns()
    names = [make_event(pod, reason="R", note="n", action="A", reporting_controller="c",
                        reporting_instance="i")["metadata"]["name"] for _ in range(2000)]
    assert len(set(names)) == len(names)
    stamps = [int(n.split(".", 1)[1], 16) for n in names]
    assert all(n.startswith("p1.") for n in names) and stamps == sorted(stamps) and stamps[0] >= before


def test_a_request_and_its_body_go_out_in_one_write(apisim: ApiSim, client: KubeClient,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # One system call per request, not http.client's two (head, then body): each is a release of the GIL that the
    # scheduler's cycle then waits to get back.
    import http.client

    writes: list[bytes] = []
    real = http.client.HTTPConnection.send

    def send(self: http.client.HTTPConnection, data: bytes) -> None:
        writes.append(bytes(data))
        real(self, data)

    monkeypatch.setattr(http.client.HTTPConnection, "send", send)
    pod = client.create(r.PODS, _pod("p2"))
    client.bind("team-a", "p2", "n1", pod_uid=pod["metadata"]["uid"])
    assert len(writes) == 2
    assert all(w.startswith(b"POST ") and w.rstrip().endswith(b"}") and b"\r\n\r\n{" in w for w in writes)
    assert client.get(r.PODS, "p2", "team-a")["spec"]["nodeName"] == "n1"


def test_unreachable_server_is_a_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connection refused
        with KubeClient(host=f"http://127.0.0.1:{port}", timeout=2.0) as c, pytest.raises(ApiConnectionError):
            c.list(r.PODS)
