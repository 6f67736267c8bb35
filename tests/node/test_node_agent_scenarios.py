"""The node agent's scenarios end to end: racing pods, XIDs, kubelet restarts, fractions, labels, MIG changes,
inventory-only mode and the metrics endpoint (ApiSim over HTTP, fake kubelet over gRPC, fake NVML)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import grpc
import pytest
from agent_env import Env, running_agent
from kube_apisim import ApiSim
from live_env import NS, pod, wait_until
from machines import MIG_MIXED, WHOLE_4_PAIRS, WHOLE_8, write_machine

from gpufleet.api.inventory import inventory_from_json
from gpufleet.gpu.sharing import DevicePluginConfig
from gpufleet.k8s import resources as r
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.health import HealthPolicy
from gpufleet.node.nvml_fake import FakeNvml
from gpufleet.node.protos import deviceplugin_v1beta1_pb2 as dp

GPU = "nvidia.com/gpu"


def mismatches(env: Env) -> float:
    return sum(s.value for m in env.agent.metrics.mismatches.collect() for s in m.samples
               if s.name.endswith("_total"))


# --- who is being admitted ------------------------------------------------------------------------------------


def test_two_equal_pods_bound_at_the_same_moment_each_get_their_own_devices(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("a", [u[6]])
        env.bound_pod("b", [u[1]])  # same size, same creation second
        env.wait_tracked("a", "b")
        assert kubelet.admit(f"{NS}/a", {"c": {GPU: 1}})["c"][GPU].ids == [u[6]]
        assert kubelet.admit(f"{NS}/b", {"c": {GPU: 1}})["c"][GPU].ids == [u[1]]
        env.agent.allocator.verify()
        assert mismatches(env) == 0


def test_a_kubelet_order_that_differs_from_the_watch_is_caught_by_the_pod_resources_check(
        apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("a", [u[6]])
        env.bound_pod("b", [u[1]])
        env.wait_tracked("a", "b")
        # The kubelet admits b first: indistinguishable from a at that moment, so b is handed a's devices...
        assert kubelet.admit(f"{NS}/b", {"c": {GPU: 1}})["c"][GPU].ids == [u[6]]
        # ... and a, left alone, falls back without taking anything another waiting pod was promised.
        assert kubelet.admit(f"{NS}/a", {"c": {GPU: 1}})["c"][GPU].ids == [u[1]]
        wait_until(lambda: mismatches(env) == 2, what="both pods reported as not matching the scheduler's choice")
        assert b"gpufleet_node_allocation_mismatches_total" in env.agent.exposition()


def test_pods_of_different_sizes_are_told_apart_and_init_devices_are_reused(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("big", [u[0], u[3], u[4]], gpus=3)
        env.bound_pod("small", [u[7]])
        env.wait_tracked("big", "small")
        # The small pod is admitted first although it arrived second: its size tells it apart.
        assert kubelet.admit(f"{NS}/small", {"c": {GPU: 1}})["c"][GPU].ids == [u[7]]
        assert sorted(kubelet.admit(f"{NS}/big", {"c": {GPU: 3}})["c"][GPU].ids) == sorted([u[0], u[3], u[4]])


def test_a_pod_without_a_choice_does_not_take_devices_promised_to_a_waiting_pod(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_4_PAIRS)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("other", None)  # another scheduler's pod, first in line
        env.bound_pod("ours", [u[0]])
        env.wait_tracked("other", "ours")
        assert kubelet.admit(f"{NS}/other", {"c": {GPU: 1}})["c"][GPU].ids != [u[0]]
        assert kubelet.admit(f"{NS}/ours", {"c": {GPU: 1}})["c"][GPU].ids == [u[0]]


def test_no_stale_state_a_rejected_pod_and_an_agent_restart_leave_nothing_behind(
        apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_8)
    with running_agent(apisim, sockdir, machine) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("done", [u[2]])
        env.wait_tracked("done")
        assert kubelet.admit(f"{NS}/done", {"c": {GPU: 1}})["c"][GPU].ids == [u[2]]
        env.bound_pod("rejected", [u[3]])
        env.wait_tracked("rejected")
        # The kubelet rejected it for another reason (e.g. OutOfcpu): the pod failed, it holds and blocks nothing.
        apisim.modify(r.PODS, NS, "rejected", {"status": {"phase": "Failed"}})
        wait_until(lambda: f"{NS}/rejected" not in {p.key for p in env.agent.tracker.pods()}, what="rejection seen")
        pod_devices = dict(kubelet.pod_devices)
    # A new agent (a restart): what the kubelet recorded is all it needs.
    with running_agent(apisim, sockdir, machine, create_node=False) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.pod_devices.update(pod_devices)
        kubelet.wait_registered([GPU])
        env.bound_pod("next", [u[5]])
        env.wait_tracked("next", "done")
        assert kubelet.admit(f"{NS}/next", {"c": {GPU: 1}})["c"][GPU].ids == [u[5]]


def test_the_kubelet_is_asked_again_after_it_restarts(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, MIG_MIXED)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        resources = ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]
        kubelet.wait_registered(resources)
        kubelet.restart()  # every socket in the folder is removed, kubelet.sock comes back
        kubelet.wait_registered(resources, count=2)
        assert all((kubelet.plugin_dir / f"gpufleet-{r.split('/')[1]}.sock").is_socket() for r in resources)
        gpus = env.agent.discovery.machine.gpus  # type: ignore[union-attr]
        wanted = next(d.uuid for d in gpus[0].mig if d.profile == "3g.40gb")
        env.bound_pod("after", [wanted], resource="nvidia.com/mig-3g.40gb")
        env.wait_tracked("after")
        grant = kubelet.admit(f"{NS}/after", {"c": {"nvidia.com/mig-3g.40gb": 1}})
        assert grant["c"]["nvidia.com/mig-3g.40gb"].ids == [wanted]


# --- health -------------------------------------------------------------------------------------------------


def test_xids_mark_devices_unhealthy_and_application_xids_change_nothing(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        wait_until(lambda: bool(env.inventory()), what="inventory published")
        u = env.uuids()
        env.fault(1, 13)  # a graphics engine exception: the application's fault, ignored
        env.fault(4, 79)  # fallen off the bus
        kubelet.wait_for(lambda: kubelet.endpoints[GPU].devices.get(u[4]) == "Unhealthy", what="GPU 4 Unhealthy")
        assert kubelet.devices(GPU)[u[1]] == "Healthy"
        wait_until(lambda: [g["index"] for g in env.inventory()["gpus"] if g.get("health")] == [4],
                   what="the inventory marks GPU 4")
        inventory = inventory_from_json(env.inventory())
        assert inventory is not None and inventory.unhealthy == frozenset({4})
        # The kubelet no longer offers it: the next pod without a choice gets another GPU.
        assert u[4] not in kubelet.healthy(GPU)
        text = env.agent.exposition().decode()
        assert 'gpufleet_node_xid_events_total{effect="ignored",xid="13"} 1.0' in text
        assert 'gpufleet_node_xid_events_total{effect="unhealthy",xid="79"} 1.0' in text
        assert 'DCGM_FI_DEV_XID_ERRORS{gpu="4"' in text


def test_health_checks_follow_nvidias_environment_variables(apisim: ApiSim, sockdir: Path) -> None:
    policy = HealthPolicy.from_environment({"DP_DISABLE_HEALTHCHECKS": "79", "DP_ENABLE_HEALTHCHECKS": "13"})
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8), health=policy) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.fault(2, 79)  # disabled by DP_DISABLE_HEALTHCHECKS
        env.fault(3, 13)  # forced by DP_ENABLE_HEALTHCHECKS
        kubelet.wait_for(lambda: kubelet.endpoints[GPU].devices.get(u[3]) == "Unhealthy", what="GPU 3 Unhealthy")
        assert kubelet.devices(GPU)[u[2]] == "Healthy"


def test_an_xid_on_a_mig_instance_takes_out_that_instance(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, MIG_MIXED)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        resource = "nvidia.com/mig-3g.40gb"
        kubelet.wait_registered([resource])
        gpus = env.agent.discovery.machine.gpus  # type: ignore[union-attr]
        hit = next(d for d in gpus[1].mig if d.profile == "3g.40gb")
        env.fault(1, 94, gi=hit.gi_id)
        kubelet.wait_for(lambda: kubelet.endpoints[resource].devices.get(hit.uuid) == "Unhealthy", what="MIG down")
        other = next(d for d in gpus[0].mig if d.profile == "3g.40gb")
        assert kubelet.devices(resource)[other.uuid] == "Healthy"
        assert all(h == "Healthy" for h in kubelet.devices("nvidia.com/mig-1g.10gb").values())
        wait_until(lambda: [g["index"] for g in env.inventory()["gpus"] if g.get("health")] == [1],
                   what="the inventory marks the MIG device's GPU")


# --- fractions never collide with whole GPUs -------------------------------------------------------------------


def test_a_gpu_that_fractional_pods_use_is_withheld_from_whole_gpu_pods(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_4_PAIRS)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("half", gpus=0, annotations={"gpufleet.io/gpu-fraction": "0.5",
                                                    "gpufleet.io/visible-devices": u[0]})
        kubelet.wait_for(lambda: kubelet.endpoints[GPU].devices.get(u[0]) == "Unhealthy",
                         what="GPU 0 withheld while a fraction uses it")
        assert sorted(kubelet.healthy(GPU)) == sorted(u[1:])  # the kubelet's allocatable is 3: exact
        env.bound_pod("whole", None, gpus=2)
        env.wait_tracked("whole")
        assert u[0] not in kubelet.admit(f"{NS}/whole", {"c": {GPU: 2}})["c"][GPU].ids
        # Even asked directly (a kubelet that ignores health), Allocate refuses it and names the fractional pod.
        with pytest.raises(grpc.RpcError) as refused:
            kubelet._call(GPU, "Allocate", dp.AllocateRequest(container_requests=[
                dp.ContainerAllocateRequest(devices_ids=[u[0]])]), dp.AllocateResponse)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert f"{NS}/half" in (refused.value.details() or "")
        apisim.delete(r.PODS, NS, "half")
        kubelet.wait_for(lambda: kubelet.endpoints[GPU].devices.get(u[0]) == "Healthy",
                         what="GPU 0 offered again once the fractional pod is gone")


def test_a_gpu_fractions_already_use_is_withheld_from_the_first_device_list(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_4_PAIRS)
    node = FakeNvml(str(machine)).spec
    uuids = [g.uuid for g in node.machine.gpus]
    # The fractional pod runs before the agent starts (an agent restart, an upgrade of the DaemonSet).
    obj = pod("half", gpus=0, node_name=node.node_name, annotations={
        "gpufleet.io/gpu-fraction": "0.5", "gpufleet.io/visible-devices": uuids[2]})
    apisim.create(r.PODS, obj)
    with running_agent(apisim, sockdir, machine) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        assert kubelet.endpoints[GPU].history[0][uuids[2]] == "Unhealthy"


def test_replicas_of_a_gpu_that_fractions_use_are_withheld_too(apisim: ApiSim, sockdir: Path) -> None:
    config = AgentDeviceConfig(sharing=DevicePluginConfig(time_slicing={GPU: 2}))
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_4_PAIRS), config=config) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("tenth", gpus=0, annotations={"gpu-fraction": "0.1", "gpufleet.io/visible-devices": u[2]})
        kubelet.wait_for(lambda: all(kubelet.endpoints[GPU].devices.get(f"{u[2]}::{i}") == "Unhealthy"
                                     for i in range(2)), what="both replicas of GPU 2 withheld")


# --- the Node -------------------------------------------------------------------------------------------------


def test_labels_and_inventory_are_written_and_only_owned_labels_are_ever_removed(
        apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, MIG_MIXED)
    foreign = {"team": "vision", "nvidia.com/gpu.deploy.device-plugin": "false"}
    with running_agent(apisim, sockdir, machine, node_labels=foreign) as env:
        wait_until(lambda: "nvidia.com/mig-3g.40gb.count" in env.node_object()["metadata"]["labels"],
                   what="MIG labels written")
        labels = env.node_object()["metadata"]["labels"]
        assert labels["nvidia.com/mig-3g.40gb.count"] == "2" and labels["nvidia.com/mig.strategy"] == "mixed"
        assert labels.items() >= foreign.items()
        assert env.inventory()["gpus"][0]["mig"]
        owned = env.node_object()["metadata"]["annotations"]["gpufleet.io/node-agent-labels"].split(",")
        assert "nvidia.com/mig-3g.40gb.count" in owned and "team" not in owned
    # The same node under a config without MIG: the MIG labels the agent wrote go, the foreign ones stay.
    config = AgentDeviceConfig(sharing=DevicePluginConfig(mig_strategy="none"))
    with running_agent(apisim, sockdir, machine, config=config, create_node=False) as env:
        wait_until(lambda: "nvidia.com/mig-3g.40gb.count" not in env.node_object()["metadata"]["labels"],
                   what="stale MIG labels removed")
        labels = env.node_object()["metadata"]["labels"]
        assert labels.items() >= foreign.items()
        assert labels["nvidia.com/gpu.count"] == "2" and "nvidia.com/mig.strategy" not in labels


def test_a_mig_layout_change_is_picked_up_while_running(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, MIG_MIXED)
    with running_agent(apisim, sockdir, machine, rediscover_period=0.1) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered(["nvidia.com/mig-3g.40gb"])
        machine.write_text(MIG_MIXED.replace("3g.40gb,2g.20gb,1g.10gb:2", "7g.80gb"))
        kubelet.wait_registered(["nvidia.com/mig-7g.80gb"])
        wait_until(lambda: env.node_object()["metadata"]["labels"].get("nvidia.com/mig-7g.80gb.count") == "2",
                   what="labels follow the new layout")
        assert "nvidia.com/mig-3g.40gb.count" not in env.node_object()["metadata"]["labels"]
        assert not (kubelet.plugin_dir / "gpufleet-mig-3g.40gb.sock").exists()


def test_inventory_only_publishes_labels_and_metrics_but_serves_no_plugin(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8), inventory_only=True) as env:
        wait_until(lambda: bool(env.inventory()), what="inventory published")
        assert env.node_object()["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
        assert env.kubelet is not None and env.kubelet.registrations == []
        assert not list((sockdir / "dp").glob("gpufleet-*.sock"))
        assert b"DCGM_FI_DEV_GPU_TEMP" in env.agent.exposition()


def test_the_metrics_endpoint_serves_dcgm_names_that_follow_the_pods(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_4_PAIRS)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        [port] = env.agent.ports

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                return response.read().decode()

        def util(gpu: int) -> float:
            line = next(ln for ln in scrape().splitlines() if ln.startswith(f'DCGM_FI_DEV_GPU_UTIL{{gpu="{gpu}"'))
            return float(line.rsplit(" ", 1)[1])

        text = scrape()
        assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
        assert (f'DCGM_FI_DEV_GPU_UTIL{{gpu="3",UUID="{u[3]}",pci_bus_id="00000000:13:00.0",device="nvidia3",'
                f'modelName="NVIDIA A100-SXM4-80GB",Hostname="{env.node}",DCGM_FI_DRIVER_VERSION="550.127.05"}} 0'
                in text)
        env.bound_pod("busy", [u[3]])
        env.wait_tracked("busy")
        kubelet.admit(f"{NS}/busy", {"c": {GPU: 1}})
        wait_until(lambda: util(3) > 50, what="GPU 3 busy once a pod holds it")
        assert util(2) == 0


def test_patch_errors_are_retried(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_8)
    # No Node yet (a node agent can start before its Node object is readable): it keeps trying.
    with running_agent(apisim, sockdir, machine, create_node=False) as env:
        wait_until(lambda: env.agent.metrics.node_patches.labels("failed")._value.get() >= 1, what="a failed write")
        from agent_env import node_object

        apisim.create(r.NODES, node_object(env.node))
        wait_until(lambda: bool(env.inventory()), what="inventory written once the Node exists")
        assert json.loads(env.node_object()["metadata"]["annotations"]["gpufleet.io/gpus"])["gpus"]
