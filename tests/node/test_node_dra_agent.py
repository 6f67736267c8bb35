"""The node agent with ``--dra``: it publishes this node's pool instead of serving device plugins, raises the
pool's generation when an XID breaks a GPU or the MIG layout changes (never otherwise), and withdraws the pool
when it stops (ApiSim over HTTP, fake kubelet over gRPC, fake NVML)."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from agent_env import node_object
from fake_kubelet import FakeKubelet
from kube_apisim import ApiSim
from live_env import FAST_INFORMERS, wait_until
from machines import MIG_MIXED, WHOLE_8, write_machine

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import ServerError
from gpufleet.node.agent import AgentOptions, NodeAgent
from gpufleet.node.backends import open_backend
from gpufleet.node.dra_publisher import DraPublisher
from gpufleet.node.nvml_fake import FakeNvml

JsonDict = dict[str, Any]
SLICES = r.RESOURCE_SLICES


@dataclass
class DraEnv:
    apisim: ApiSim
    agent: NodeAgent
    kubelet: FakeKubelet
    machine: Path
    node: str
    syncs: list[int]  # one entry per call of the publisher by the loop

    def pool(self) -> list[JsonDict]:
        return self.apisim.atomically(lambda sim: sorted(
            (o for o in sim.objects[SLICES.key].values() if o["spec"]["nodeName"] == self.node),
            key=lambda o: str(o["metadata"]["name"])))

    def generation(self) -> int | None:
        gens = {o["spec"]["pool"]["generation"] for o in self.pool()}
        return gens.pop() if len(gens) == 1 else None

    def device_names(self) -> list[str]:
        return [d["name"] for o in self.pool() for d in o["spec"].get("devices") or []]

    def writes(self) -> int:
        return sum(len(self.apisim.writes(SLICES, m)) for m in ("POST", "PUT", "PATCH", "DELETE"))

    def fault(self, gpu: int, xid: int) -> None:
        with open(str(self.machine) + ".events", "a") as f:
            f.write(json.dumps({"gpu": gpu, "xid": xid}) + "\n")

    def xids(self, effect: str) -> float:
        return sum(s.value for m in self.agent.metrics.xid_events.collect() for s in m.samples
                   if s.name.endswith("_total") and s.labels.get("effect") == effect)

    def wait_loops(self, n: int = 3) -> None:
        """Let the loop run ``n`` more times (each run offers the publisher the pool)."""
        start = len(self.syncs)
        wait_until(lambda: len(self.syncs) >= start + n, what=f"{n} more runs of the agent loop")


@contextmanager
def dra_agent(apisim: ApiSim, sockdir: Path, machine: Path, *, rediscover_period: float = 30.0) -> Iterator[DraEnv]:
    apisim.serve(SLICES)
    node = FakeNvml(str(machine)).spec.node_name
    apisim.create(r.NODES, node_object(node))
    plugin_dir = sockdir / "dp"
    plugin_dir.mkdir(exist_ok=True)
    kubelet = FakeKubelet(plugin_dir, sockdir / "pr.sock")
    kubelet.start()
    client = KubeClient(host=apisim.url, timeout=5.0, user_agent=f"gpufleet-node/{node}")
    options = AgentOptions(node_name=node, device_plugin_dir=str(plugin_dir),
                           pod_resources_socket=str(sockdir / "pr.sock"), metrics_bind_address=None,
                           health_probe_bind_address="127.0.0.1:0", rediscover_period=rediscover_period,
                           loop_period=0.05, publish_retry=0.1, informer_options=FAST_INFORMERS, dra=True)
    agent = NodeAgent(client, options, None, lambda holders: open_backend(f"fake:{machine}", holders=holders))
    assert agent.slices is not None
    syncs: list[int] = []
    lock = threading.Lock()
    real_sync = agent.slices.sync

    def counting_sync(pool_devices: Sequence[JsonDict]) -> bool:
        with lock:
            syncs.append(len(pool_devices))
        return real_sync(pool_devices)

    agent.slices.sync = counting_sync  # type: ignore[method-assign]
    agent.start()
    try:
        yield DraEnv(apisim, agent, kubelet, machine, node, syncs)
    finally:
        agent.stop()
        kubelet.close()
        client.close()


def test_the_pool_is_published_instead_of_device_plugins(apisim: ApiSim, sockdir: Path) -> None:
    with dra_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        wait_until(lambda: env.generation() == 1, what="the pool published")
        assert env.device_names() == [f"gpu-{i}" for i in range(8)]
        [one] = env.pool()
        assert one["spec"]["driver"] == "gpu.nvidia.com" and one["spec"]["pool"]["name"] == env.node
        # No device plugin: nothing registered with the kubelet, no socket served.
        assert env.kubelet.registrations == [] and not list((sockdir / "dp").glob("gpufleet-*.sock"))
        assert env.agent.plugins is None
        # Labels and the inventory are still written; /readyz waits for the slices, not for plugins.
        wait_until(lambda: "gpufleet.io/gpus" in (apisim.get(r.NODES, None, env.node) or {})["metadata"]
                   .get("annotations", {}), what="inventory published")
        [port] = env.agent.ports
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            assert answer.status == 200


def test_nothing_is_rewritten_while_nothing_changes(apisim: ApiSim, sockdir: Path) -> None:
    # Rediscovering every 0.1 s: the machine is read again and again, and found equal.
    with dra_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8), rediscover_period=0.1) as env:
        wait_until(lambda: env.generation() == 1, what="the pool published")
        before = env.writes()
        env.wait_loops(10)
        assert env.writes() == before and env.generation() == 1


def test_an_xid_that_breaks_a_gpu_raises_the_generation_and_an_application_xid_does_not(
        apisim: ApiSim, sockdir: Path) -> None:
    with dra_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        wait_until(lambda: env.generation() == 1, what="the pool published")
        env.fault(2, 13)  # a kernel's own fault: the GPU is fine
        wait_until(lambda: env.xids("ignored") == 1, what="the application XID seen")
        env.wait_loops()
        assert env.generation() == 1 and "gpu-2" in env.device_names()
        env.fault(2, 79)  # fallen off the bus
        wait_until(lambda: env.generation() == 2, what="the pool's generation raised")
        assert env.device_names() == [f"gpu-{i}" for i in range(8) if i != 2]
        before = env.writes()
        env.fault(2, 79)  # the same GPU again: already out, nothing to write
        wait_until(lambda: env.xids("unhealthy") == 2, what="the second XID seen")
        env.wait_loops()
        assert env.writes() == before and env.generation() == 2


def test_a_mig_layout_change_raises_the_generation(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, MIG_MIXED)
    with dra_agent(apisim, sockdir, machine, rediscover_period=0.1) as env:
        wait_until(lambda: env.generation() == 1, what="the pool published")
        assert "gpu-0-mig-3g40gb-9-4" in env.device_names()
        machine.write_text(MIG_MIXED.replace("3g.40gb,2g.20gb,1g.10gb:2", "7g.80gb"))
        wait_until(lambda: env.generation() == 2, what="the pool's generation raised")
        assert env.device_names() == ["gpu-0-mig-7g80gb-0-0", "gpu-1-mig-7g80gb-0-0"]


def test_the_pool_is_withdrawn_when_the_agent_stops(apisim: ApiSim, sockdir: Path) -> None:
    with dra_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        wait_until(lambda: env.generation() == 1, what="the pool published")
        node = env.node
    assert env.pool() == []
    assert [q.name for q in apisim.writes(SLICES, "DELETE")] == [f"{node}-gpu.nvidia.com-0"]


def test_write_errors_are_retried(apisim: ApiSim, sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first create is refused (the API server is busy); the agent tries again after publish_retry.
    refused = threading.Event()
    real = DraPublisher._write

    def flaky(self: DraPublisher, obj: JsonDict, have: JsonDict | None) -> None:
        if not refused.is_set():
            refused.set()
            raise ServerError(503, "ServiceUnavailable", "try again")
        real(self, obj, have)

    monkeypatch.setattr(DraPublisher, "_write", flaky)
    with dra_agent(apisim, sockdir, write_machine(sockdir, WHOLE_8)) as env:
        wait_until(lambda: env.generation() == 1, what="the pool published after a refusal")
        assert refused.is_set() and len(env.device_names()) == 8
