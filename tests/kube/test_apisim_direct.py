"""kube_apisim.DirectWrites: the benchmark's emulator serves Bindings and creates straight from ApiSim, past kmock's
routing; what a Binding does must stay what ApiSim does through kmock (validated, refused twice, sent to watches)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kube_apisim import ApiSim, DirectWrites, serving
from live_env import pod

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient, make_event
from gpufleet.k8s.errors import Conflict, NotFound


@pytest.fixture
def direct(kmock_namespaces_fix: None) -> Iterator[ApiSim]:
    with serving(DirectWrites, r.PODS, r.NODES, r.EVENTS) as sim:
        yield sim


@pytest.fixture
def kube(direct: ApiSim) -> Iterator[KubeClient]:
    with KubeClient(host=direct.url, timeout=5.0) as c:
        yield c


def test_paths_handed_over_are_bindings_and_creates_only(direct: ApiSim) -> None:
    assert direct.direct_target("/api/v1/namespaces/ml/pods/p1/binding") == (r.PODS, "ml", "p1", "binding")
    assert direct.direct_target("/api/v1/namespaces/ml/pods") == (r.PODS, "ml", None, None)
    assert direct.direct_target("/apis/events.k8s.io/v1/namespaces/ml/events") == (r.EVENTS, "ml", None, None)
    assert direct.direct_target("/api/v1/nodes") == (r.NODES, None, None, None)
    for other in ("/api/v1/namespaces/ml/pods/p1", "/api/v1/namespaces/ml/pods/p1/eviction",
                  "/api/v1/namespaces/ml/pods/p1/status", "/api/v1/pods", "/api/v1/namespaces/ml/nodes",
                  "/apis/kueue.x-k8s.io/v1beta1/clusterqueues", "/version"):
        assert direct.direct_target(other) is None, other


def test_binding_binds_once_and_reaches_the_watch(direct: ApiSim, kube: KubeClient) -> None:
    created = kube.create(r.PODS, pod("p1"))
    uid = created["metadata"]["uid"]
    with kube.watch(r.PODS, resource_version=created["metadata"]["resourceVersion"], timeout_seconds=5) as stream:
        kube.bind("ml", "p1", "node-a", pod_uid=uid, annotations={"gpufleet.io/devices": '["GPU-0"]'})
        event = next(stream)  # waits for the event, no sleep
    assert event.type == "MODIFIED"
    assert event.object["spec"]["nodeName"] == "node-a"
    assert event.object["metadata"]["annotations"]["gpufleet.io/devices"] == '["GPU-0"]'
    with pytest.raises(Conflict, match="already assigned"):
        kube.bind("ml", "p1", "node-b", pod_uid=uid)
    assert kube.get(r.PODS, "p1", "ml")["spec"]["nodeName"] == "node-a"
    # served by ApiSim directly: kmock logged the create and the get, not the Bindings
    assert not direct.writes(r.PODS, "POST", "binding")


def test_binding_refused_for_another_uid_or_a_missing_pod(kube: KubeClient) -> None:
    kube.create(r.PODS, pod("p1"))
    with pytest.raises(Conflict, match="UID"):
        kube.bind("ml", "p1", "node-a", pod_uid="not-its-uid")
    with pytest.raises(NotFound):
        kube.bind("ml", "gone", "node-a")
    assert not kube.get(r.PODS, "p1", "ml")["spec"].get("nodeName")


def test_create_stores_the_object_and_refuses_a_second(direct: ApiSim, kube: KubeClient) -> None:
    regarding = kube.create(r.PODS, pod("p1"))
    event = make_event(regarding, reason="Scheduled", note="bound", action="Binding",
                       reporting_controller="gpufleet", reporting_instance="t")
    stored = kube.create_event(event)
    assert stored["metadata"]["resourceVersion"] and stored["metadata"]["namespace"] == "ml"
    assert direct.get(r.EVENTS, "ml", stored["metadata"]["name"]) is not None
    with pytest.raises(Conflict):
        kube.create(r.PODS, pod("p1"))
