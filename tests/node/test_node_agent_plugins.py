"""The agent's device plugins against a fake kubelet (real gRPC on unix sockets) and ApiSim (real HTTP)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_env import running_agent
from fake_kubelet import AdmissionError
from kube_apisim import ApiSim
from live_env import NS
from machines import MIG_MIXED, MIG_SINGLE, TIME_SLICED, WHOLE_4_PAIRS, WHOLE_8, write_machine

from gpufleet.gpu.sharing import DevicePluginConfig
from gpufleet.node.dpconfig import AgentDeviceConfig, PluginOptions


def test_whole_gpus_the_scheduler_choice_is_binding(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_8)
    with running_agent(apisim, sockdir, machine) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered(["nvidia.com/gpu"])
        uuids = env.uuids()
        assert kubelet.devices("nvidia.com/gpu") == {u: "Healthy" for u in uuids}
        reg = kubelet.registrations[0]
        assert (reg.version, reg.endpoint, reg.options.get_preferred_allocation_available) == (
            "v1beta1", "gpufleet-gpu.sock", True)
        env.bound_pod("train", [uuids[5], uuids[2]], gpus=2)
        env.wait_tracked("train")
        grant = kubelet.admit(f"{NS}/train", {"main": {"nvidia.com/gpu": 2}})["main"]["nvidia.com/gpu"]
        assert grant.preferred == [uuids[5], uuids[2]]  # exactly the scheduler's IDs, in its order
        assert grant.envs == {"NVIDIA_VISIBLE_DEVICES": f"{uuids[5]},{uuids[2]}"}


def test_without_a_scheduler_choice_nvlink_pairs_are_preferred(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_4_PAIRS)  # NVLink bridges: 0-1 and 2-3
    with running_agent(apisim, sockdir, machine) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered(["nvidia.com/gpu"])
        uuids = env.uuids()
        env.bound_pod("one", None, gpus=1)
        env.bound_pod("pair", None, gpus=2)
        env.wait_tracked("one", "pair")
        assert kubelet.admit(f"{NS}/one", {"c": {"nvidia.com/gpu": 1}})["c"]["nvidia.com/gpu"].ids == [uuids[0]]
        # GPUs 1, 2 and 3 are left: the linked pair 2-3 beats 1-2 and 1-3.
        pair = kubelet.admit(f"{NS}/pair", {"c": {"nvidia.com/gpu": 2}})["c"]["nvidia.com/gpu"]
        assert sorted(pair.preferred or []) == sorted([uuids[2], uuids[3]])


def test_mig_mixed_serves_one_plugin_per_profile(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, MIG_MIXED)
    resources = ["nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"]
    with running_agent(apisim, sockdir, machine) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered(resources)
        assert {r.endpoint for r in kubelet.registrations} == {
            "gpufleet-mig-1g.10gb.sock", "gpufleet-mig-2g.20gb.sock", "gpufleet-mig-3g.40gb.sock"}
        gpus = env.agent.discovery.machine.gpus  # type: ignore[union-attr]
        wanted = next(d.uuid for d in gpus[1].mig if d.profile == "1g.10gb")
        assert set(kubelet.devices("nvidia.com/mig-1g.10gb")) == {d.uuid for g in gpus for d in g.mig
                                                                   if d.profile == "1g.10gb"}
        env.bound_pod("small", [wanted], resource="nvidia.com/mig-1g.10gb")
        env.wait_tracked("small")
        grant = kubelet.admit(f"{NS}/small", {"c": {"nvidia.com/mig-1g.10gb": 1}})["c"]["nvidia.com/mig-1g.10gb"]
        assert grant.ids == [wanted] and grant.envs["NVIDIA_VISIBLE_DEVICES"] == wanted


def test_mig_single_offers_mig_devices_as_nvidia_com_gpu(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, MIG_SINGLE)
    with running_agent(apisim, sockdir, machine) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered(["nvidia.com/gpu"])
        gpus = env.agent.discovery.machine.gpus  # type: ignore[union-attr]
        assert set(kubelet.devices("nvidia.com/gpu")) == {d.uuid for g in gpus for d in g.mig}


@pytest.mark.parametrize(("rename", "resource"), [(False, "nvidia.com/gpu"), (True, "nvidia.com/gpu.shared")])
def test_time_slicing_replicas_with_and_without_rename(apisim: ApiSim, sockdir: Path, rename: bool,
                                                       resource: str) -> None:
    machine = write_machine(sockdir, TIME_SLICED)
    config = AgentDeviceConfig(sharing=DevicePluginConfig(time_slicing={"nvidia.com/gpu": 4},
                                                          rename_by_default=rename,
                                                          fail_requests_greater_than_one=True))
    with running_agent(apisim, sockdir, machine, config=config) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([resource])
        uuids = env.uuids()
        assert sorted(kubelet.devices(resource)) == sorted(f"{u}::{i}" for u in uuids for i in range(4))
        env.bound_pod("a", [f"{uuids[1]}::2"], resource=resource)
        env.bound_pod("b", None, resource=resource)
        env.bound_pod("c", None, resource=resource)
        env.bound_pod("greedy", None, gpus=2, resource=resource)
        env.wait_tracked("a", "b", "c", "greedy")
        a = kubelet.admit(f"{NS}/a", {"c": {resource: 1}})["c"][resource]
        assert a.ids == [f"{uuids[1]}::2"] and a.envs["NVIDIA_VISIBLE_DEVICES"] == uuids[1]
        # Best effort spreads replicas (sharedDevicesAllocationPolicy distributed): GPU 0 is the emptier one.
        b = kubelet.admit(f"{NS}/b", {"c": {resource: 1}})["c"][resource]
        assert b.envs["NVIDIA_VISIBLE_DEVICES"] == uuids[0]
        with pytest.raises(AdmissionError, match="maximum request size for shared resources is 1; found 2"):
            kubelet.admit(f"{NS}/greedy", {"c": {resource: 2}})


def test_cdi_and_index_strategies_shape_the_allocate_answer(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_4_PAIRS)
    config = AgentDeviceConfig(plugin=PluginOptions(device_list_strategy=("envvar", "cdi-cri", "cdi-annotations"),
                                                    device_id_strategy="index", gds=True))
    with running_agent(apisim, sockdir, machine, config=config) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered(["nvidia.com/gpu"])
        uuids = env.uuids()
        env.bound_pod("p", [uuids[3]])
        env.wait_tracked("p")
        grant = kubelet.admit(f"{NS}/p", {"c": {"nvidia.com/gpu": 1}})["c"]["nvidia.com/gpu"]
        assert grant.envs == {"NVIDIA_VISIBLE_DEVICES": "3", "NVIDIA_GDS": "enabled"}
        assert [d.name for d in grant.response.cdi_devices] == ["nvidia.com/gpu=3"]
        assert list(grant.response.annotations.values()) == ["nvidia.com/gpu=3"]
