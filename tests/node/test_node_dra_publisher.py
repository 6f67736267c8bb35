"""The DRA publisher against ApiSim (kmock over real HTTP): it creates the pool's slices, raises the generation
only when the devices change, deletes slices beyond the count, leaves other publishers' slices alone, and
withdraws everything it wrote."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
from agent_env import node_object
from kube_apisim import ApiSim
from machines import WHOLE_8, write_machine
from test_node_dra_slices import MIG_140

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.node.contract import Machine
from gpufleet.node.dra_publisher import DraPublisher
from gpufleet.node.dra_slices import devices
from gpufleet.node.nvml_fake import FakeNvml

JsonDict = dict[str, Any]
SLICES = r.RESOURCE_SLICES


@pytest.fixture
def client(apisim: ApiSim) -> Iterator[KubeClient]:
    apisim.serve(SLICES)
    with KubeClient(host=apisim.url, timeout=5.0) as c:
        yield c


def fake(folder: Path, text: str) -> tuple[str, Machine]:
    nvml = FakeNvml(str(write_machine(folder, text)))
    return nvml.spec.node_name, nvml.machine()


def stored(apisim: ApiSim) -> dict[str, JsonDict]:
    return apisim.atomically(lambda sim: {name: obj for (_, name), obj in sim.objects[SLICES.key].items()})


def requests(apisim: ApiSim) -> list[tuple[str, str | None]]:
    """(method, object name) of every request for ResourceSlices, in the order they were served."""
    view = apisim.kmock[kmock.resource(SLICES.group, SLICES.version, SLICES.plural)]
    return apisim.harness.call(lambda: [(str(q.method.value), q.name) for q in view])


def writes(apisim: ApiSim) -> int:
    return sum(len(apisim.writes(SLICES, method)) for method in ("POST", "PUT", "PATCH", "DELETE"))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_pool_is_created_owned_by_the_node_and_not_rewritten_while_nothing_changes(
        apisim: ApiSim, client: KubeClient, tmp_path: Path) -> None:
    node, machine = fake(tmp_path, WHOLE_8)
    apisim.create(r.NODES, node_object(node))
    uid = apisim.get(r.NODES, None, node)["metadata"]["uid"]  # type: ignore[index]
    publisher = DraPublisher(client, node)
    assert publisher.sync(devices(machine)) is True
    [one] = stored(apisim).values()
    assert one["metadata"]["name"] == f"{node}-gpu.nvidia.com-0"
    assert one["metadata"]["ownerReferences"][0]["uid"] == uid
    assert one["spec"]["pool"] == {"name": node, "generation": 1, "resourceSliceCount": 1}
    assert len(one["spec"]["devices"]) == 8 and publisher.generation == 1
    before = writes(apisim)
    assert publisher.sync(devices(machine)) is False
    # A restarted agent reads the pool back, finds it already right, and keeps its generation.
    again = DraPublisher(client, node)
    assert again.sync(devices(machine)) is False and again.generation == 1
    assert writes(apisim) == before


def test_a_change_of_devices_raises_the_generation_once(apisim: ApiSim, client: KubeClient, tmp_path: Path) -> None:
    node, machine = fake(tmp_path, WHOLE_8)
    publisher = DraPublisher(client, node)
    publisher.sync(devices(machine))
    assert publisher.sync(devices(machine, unhealthy={machine.gpus[5].uuid})) is True
    [one] = stored(apisim).values()
    assert one["spec"]["pool"]["generation"] == 2 == publisher.generation
    assert "gpu-5" not in [d["name"] for d in one["spec"]["devices"]]
    before = writes(apisim)
    assert publisher.sync(devices(machine, unhealthy={machine.gpus[5].uuid})) is False
    assert writes(apisim) == before and stored(apisim)[one["metadata"]["name"]]["spec"]["pool"]["generation"] == 2


def test_slices_beyond_the_new_count_are_deleted_after_the_rest_is_rewritten(
        apisim: ApiSim, client: KubeClient, tmp_path: Path) -> None:
    node, machine = fake(tmp_path, MIG_140)
    publisher = DraPublisher(client, node)
    publisher.sync(devices(machine))
    assert sorted(stored(apisim)) == [f"{node}-gpu.nvidia.com-0", f"{node}-gpu.nvidia.com-1"]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in stored(apisim).values()} == {2}
    # Twelve GPUs break: 56 devices are left, one slice.
    broken = {g.uuid for g in machine.gpus[:12]}
    publisher.sync(devices(machine, unhealthy=broken))
    [one] = stored(apisim).values()
    assert one["metadata"]["name"] == f"{node}-gpu.nvidia.com-0"
    assert one["spec"]["pool"] == {"name": node, "generation": 2, "resourceSliceCount": 1}
    assert len(one["spec"]["devices"]) == 56
    # Slice 0 is rewritten at generation 2 before slice 1 (generation 1) is deleted: the pool is never left
    # without a complete generation.
    order = [(m, n) for m, n in requests(apisim) if m in ("PUT", "DELETE")]
    assert order == [("PUT", f"{node}-gpu.nvidia.com-0"), ("DELETE", f"{node}-gpu.nvidia.com-1")]


def test_a_slice_deleted_behind_its_back_is_written_again_at_the_next_resync(
        apisim: ApiSim, client: KubeClient, tmp_path: Path) -> None:
    node, machine = fake(tmp_path, WHOLE_8)
    clock = Clock()
    publisher = DraPublisher(client, node, resync_period=60.0, clock=clock)
    publisher.sync(devices(machine))
    apisim.delete(SLICES, None, f"{node}-gpu.nvidia.com-0")
    assert publisher.sync(devices(machine)) is False  # not read again before the resync is due
    clock.now += 61.0
    assert publisher.sync(devices(machine)) is True
    [one] = stored(apisim).values()
    # The pool starts over: nothing of it was left to go on from.
    assert one["spec"]["pool"]["generation"] == 1 and len(one["spec"]["devices"]) == 8


def test_withdraw_deletes_its_own_slices_and_leaves_other_publishers_alone(
        apisim: ApiSim, client: KubeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node, machine = fake(tmp_path, MIG_140)
    foreign: JsonDict = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
               "metadata": {"name": f"{node}-gpu.nvidia.com-xk2p9"},
               "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                        "pool": {"name": node, "generation": 4, "resourceSliceCount": 1}, "devices": []}}
    other_node: JsonDict = {
        **foreign,
        "metadata": {"name": "other-gpu.nvidia.com-0",
                     "labels": {"app.kubernetes.io/managed-by": "gpufleet-node-agent"}},
        "spec": {**foreign["spec"], "nodeName": "other",
                 "pool": {"name": "other", "generation": 1, "resourceSliceCount": 1}},
    }
    apisim.create(SLICES, foreign)
    apisim.create(SLICES, other_node)
    publisher = DraPublisher(client, node)
    with caplog.at_level("WARNING"):
        publisher.sync(devices(machine))
    assert "another publisher" in caplog.text and "xk2p9" in caplog.text
    # Its own pool's generation is its own slices' (the foreign slice's 4 is not read as its own).
    ours = [s for s in stored(apisim).values() if s["metadata"]["name"].endswith(("-0", "-1"))
            and s["spec"]["nodeName"] == node]
    assert {s["spec"]["pool"]["generation"] for s in ours} == {1} and len(ours) == 2
    assert publisher.withdraw() == 2
    assert sorted(stored(apisim)) == sorted([foreign["metadata"]["name"], "other-gpu.nvidia.com-0"])
    assert publisher.generation == 0 and publisher.withdraw() == 0
