"""The whole loop: the live scheduler places pods on devices it reads from the agent's inventory, binds them,
the fake kubelet admits them, and the agent hands each pod exactly the devices the scheduler chose."""

from __future__ import annotations

import json
from pathlib import Path

from agent_env import node_object, running_agent
from kube_apisim import ApiSim
from live_env import FAST_INFORMERS, NS, bound_node, fast_settings, pod, wait_until
from machines import WHOLE_8, write_machine

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.live.scheduler import Scheduler

GPU = "nvidia.com/gpu"


def test_the_scheduler_binds_the_kubelet_asks_the_agent_answers_with_the_scheduler_devices(
        apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_8)
    with running_agent(apisim, sockdir, machine, create_node=False) as env:
        # What the kubelet writes once the plugin registered: capacity and allocatable of nvidia.com/gpu.
        node = node_object(env.node)
        for key in ("capacity", "allocatable"):
            node["status"][key][GPU] = "8"
        apisim.create(r.NODES, node)
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        wait_until(lambda: bool(env.inventory()), what="the agent's inventory on the Node")
        with KubeClient(host=apisim.url, timeout=5.0, user_agent="gpufleet-test/scheduler") as client:
            scheduler = Scheduler(client, fast_settings(), identity="s1", leader_elect=False,
                                  informer_options=FAST_INFORMERS)
            scheduler.start()
            try:
                apisim.create(r.PODS, pod("first", gpus=3))
                apisim.create(r.PODS, pod("second", gpus=3))
                apisim.create(r.PODS, pod("third", gpus=2))
                names = ("first", "second", "third")
                wait_until(lambda: all(bound_node(apisim, n) == env.node for n in names), what="all three bound")
            finally:
                scheduler.stop()
        uuids = set(env.uuids())
        chosen = {}
        for name in names:
            obj = apisim.get(r.PODS, NS, name)
            assert obj is not None
            devices = json.loads(obj["metadata"]["annotations"]["gpufleet.io/devices"])
            assert set(devices) <= uuids  # the scheduler used the UUIDs the agent published
            chosen[name] = devices
        env.wait_tracked(*names)
        # The kubelet admits them in the order its watch delivered the bindings, the order this agent's watch saw
        # (the scheduler binds workloads concurrently, so that is not necessarily creation order).
        order = [p.key.split("/", 1)[1] for p in env.agent.tracker.pods() if p.key.split("/", 1)[1] in names]
        assert sorted(order) == sorted(names)
        for name in order:
            grant = kubelet.admit(f"{NS}/{name}", {"main": {GPU: len(chosen[name])}})["main"][GPU]
            assert grant.ids == chosen[name], name
            assert grant.envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(chosen[name])
        env.agent.allocator.verify()
        assert not any(s.value for m in env.agent.metrics.mismatches.collect() for s in m.samples)


def test_an_xid_takes_the_gpu_out_of_the_schedulers_placement(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, WHOLE_8)
    with running_agent(apisim, sockdir, machine, create_node=False) as env:
        node = node_object(env.node)
        for key in ("capacity", "allocatable"):
            node["status"][key][GPU] = "8"  # as if the kubelet had not caught up: only the inventory says it
        apisim.create(r.NODES, node)
        uuids = env.uuids()
        env.fault(3, 48)  # a double-bit ECC error
        wait_until(lambda: [g["index"] for g in env.inventory().get("gpus", []) if g.get("health")] == [3],
                   what="GPU 3 marked Unhealthy in the inventory")
        with KubeClient(host=apisim.url, timeout=5.0, user_agent="gpufleet-test/scheduler") as client:
            scheduler = Scheduler(client, fast_settings(), identity="s1", leader_elect=False,
                                  informer_options=FAST_INFORMERS)
            scheduler.start()
            try:
                apisim.create(r.PODS, pod("seven", gpus=7))
                apisim.create(r.PODS, pod("one-more", gpus=1, created="2026-01-01T00:00:10Z"))  # queued after seven
                wait_until(lambda: bound_node(apisim, "seven") == env.node, what="seven bound")
                obj = apisim.get(r.PODS, NS, "seven")
                assert obj is not None
                assert uuids[3] not in json.loads(obj["metadata"]["annotations"]["gpufleet.io/devices"])
                # Eight GPUs, one broken, seven taken: the last pod must wait although allocatable says 8.
                wait_until(lambda: (apisim.get(r.PODS, NS, "one-more") or {}).get("status", {}).get("conditions"),
                           what="one-more evaluated")
                assert bound_node(apisim, "one-more") is None
            finally:
                scheduler.stop()
