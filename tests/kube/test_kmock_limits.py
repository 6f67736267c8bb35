"""What kmock 0.8's own KubernetesEmulator does and does not emulate, pinned through gpufleet's client.

These justify ApiSim (kube_apisim.py). If kmock grows a feature, the matching test fails: then ApiSim's
workaround can go.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import kmock
import pytest
from kube_apisim import KmockThread

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient, PatchType
from gpufleet.k8s.errors import NotFound, ServerError


@pytest.fixture
def emu(kube_emulator: KmockThread) -> Iterator[KubeClient]:
    with KubeClient(host=kube_emulator.url, timeout=5.0) as c:
        yield c


def pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": "main", "image": "a"}, {"name": "side", "image": "b"}]}}


def test_keeps_object_state_for_create_get_patch_list_delete(emu: KubeClient) -> None:
    emu.create(r.PODS, pod("p1"))
    emu.patch(r.PODS, "p1", {"metadata": {"annotations": {"a": "1"}}}, "ml")
    got = emu.get(r.PODS, "p1", "ml")
    assert got["metadata"]["annotations"] == {"a": "1"}
    assert [p["metadata"]["name"] for p in emu.list(r.PODS).items] == ["p1"]
    emu.delete(r.PODS, "p1", "ml")
    with pytest.raises(NotFound):
        emu.get(r.PODS, "p1", "ml")


def test_has_no_resource_versions(emu: KubeClient) -> None:
    created = emu.create(r.PODS, pod("p1"))
    assert "resourceVersion" not in created["metadata"] and "uid" not in created["metadata"]
    assert emu.list(r.PODS).resource_version == "..."


def test_watch_ignores_resource_version_and_replays_everything(emu: KubeClient) -> None:
    emu.create(r.PODS, pod("p1"))
    with emu.watch(r.PODS, resource_version="999999", timeout_seconds=5) as stream:
        first = next(stream)  # a real server would send nothing (or 410), never a replay
    assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "p1")


def test_patch_is_a_plain_dict_merge_whatever_the_content_type(emu: KubeClient) -> None:
    emu.create(r.PODS, pod("p1"))
    emu.patch(r.PODS, "p1", {"spec": {"containers": [{"name": "side", "image": "c"}]}}, "ml",
              patch_type=PatchType.STRATEGIC)
    # Strategic merge on a real server merges containers by name (2 remain); kmock replaces the list.
    assert emu.get(r.PODS, "p1", "ml")["spec"]["containers"] == [{"name": "side", "image": "c"}]


def test_subresources_and_put_are_not_served(emu: KubeClient) -> None:
    emu.create(r.PODS, pod("p1"))
    with pytest.raises(NotFound) as binding:
        emu.bind("ml", "p1", "n1")
    assert binding.value.reason == "Endpoint Not Found"
    with pytest.raises(NotFound):
        emu.replace(r.PODS, {"metadata": {"name": "p1", "namespace": "ml", "resourceVersion": "1"}})


def test_namespace_collection_url_crashes_the_unpatched_parser() -> None:
    harness = KmockThread(kmock.KubernetesEmulator)  # no kmock_namespaces_fix here
    harness.start()
    try:
        with KubeClient(host=harness.url, timeout=5.0) as c, pytest.raises(ServerError, match="ValueError"):
            c.list(r.NAMESPACES)
    finally:
        harness.stop()


def test_a_response_returned_by_a_callback_leaks_its_status_into_later_answers() -> None:
    harness = KmockThread(kmock.RawHandler)
    harness.start()
    calls = [0]

    def react(_: kmock.Request) -> object:
        calls[0] += 1
        return kmock.Response(status=409, payload={"n": 1}) if calls[0] == 1 else {"n": calls[0]}

    try:
        harness.call(lambda: harness.handler["get /x"] << react)
        with httpx.Client(base_url=harness.url) as c:
            assert [c.get("/x").status_code for _ in range(2)] == [409, 409]  # the second should be 200
    finally:
        harness.stop()
