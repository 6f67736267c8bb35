"""Start a node agent against ApiSim (real HTTP) and a fake kubelet (real gRPC), with fast timings."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fake_kubelet import FakeKubelet
from kube_apisim import ApiSim
from live_env import FAST_INFORMERS, NS, pod, wait_until

from gpufleet.k8s import resources as r
from gpufleet.k8s.annotations import format_time, intent_annotations
from gpufleet.k8s.client import KubeClient
from gpufleet.node.agent import AgentOptions, NodeAgent
from gpufleet.node.backends import open_backend
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.health import HealthPolicy
from gpufleet.node.nvml_fake import FakeNvml

JsonDict = dict[str, Any]


@dataclass
class Env:
    apisim: ApiSim
    agent: NodeAgent
    kubelet: FakeKubelet | None
    machine: Path
    node: str
    client: KubeClient

    def node_object(self) -> JsonDict:
        obj = self.apisim.get(r.NODES, None, self.node)
        assert obj is not None
        return obj

    def inventory(self) -> JsonDict:
        return json.loads(self.node_object()["metadata"].get("annotations", {}).get("gpufleet.io/gpus", "{}"))

    def uuids(self) -> list[str]:
        return [g.uuid for g in FakeNvml(str(self.machine)).machine().gpus]

    def fault(self, gpu: int, xid: int, **extra: int) -> None:
        with open(str(self.machine) + ".events", "a") as f:
            f.write(json.dumps({"gpu": gpu, "xid": xid, **extra}) + "\n")

    def bound_pod(self, name: str, devices: list[str] | None = None, *, gpus: int = 1,
                  resource: str = "nvidia.com/gpu", annotations: Mapping[str, str] | None = None,
                  created: str = "2026-01-01T00:00:00Z") -> JsonDict:
        """A pod bound to this node; with ``devices``, carrying the gpufleet scheduler's intent for them."""
        notes = dict(annotations or {})
        if devices is not None:
            intent = intent_annotations(self.node, tuple(devices), 1_700_000_000.0, None)
            notes.update({k: v for k, v in intent.items() if v is not None})
        obj = pod(name, gpus=0, node_name=self.node, annotations=notes, created=created)
        if gpus:
            container = obj["spec"]["containers"][0]
            container["resources"]["requests"][resource] = str(gpus)
            container["resources"]["limits"] = {resource: str(gpus)}
        return self.apisim.create(r.PODS, obj)

    def wait_tracked(self, *names: str) -> None:
        wait_until(lambda: {f"{NS}/{n}" for n in names} <= {p.key for p in self.agent.tracker.pods()},
                   what=f"agent sees {names}")


def node_object(name: str, labels: Mapping[str, str] | None = None) -> JsonDict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": dict(labels or {}), "annotations": {}},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


@contextmanager
def running_agent(apisim: ApiSim, sockdir: Path, machine: Path, *, config: AgentDeviceConfig | None = None,
                  kubelet: bool = True, inventory_only: bool = False, health: HealthPolicy | None = None,
                  create_node: bool = True, node_labels: Mapping[str, str] | None = None,
                  rediscover_period: float = 30.0, memory_report_period: float | None = None,
                  proc_root: Path | None = None) -> Iterator[Env]:
    node = FakeNvml(str(machine)).spec.node_name
    if create_node:
        apisim.create(r.NODES, node_object(node, node_labels))
    plugin_dir = sockdir / "dp"
    plugin_dir.mkdir(exist_ok=True)
    fake_kubelet = FakeKubelet(plugin_dir, sockdir / "pr.sock") if kubelet else None
    if fake_kubelet is not None:
        fake_kubelet.start()
    client = KubeClient(host=apisim.url, timeout=5.0, user_agent=f"gpufleet-node/{node}")
    options = AgentOptions(node_name=node, device_plugin_dir=str(plugin_dir),
                           pod_resources_socket=str(sockdir / "pr.sock"), metrics_bind_address="127.0.0.1:0",
                           health_probe_bind_address=None, inventory_only=inventory_only,
                           health=health or HealthPolicy(), rediscover_period=rediscover_period, loop_period=0.05,
                           publish_retry=0.1, informer_options=FAST_INFORMERS,
                           memory_report_period=memory_report_period,
                           proc_root=str(proc_root if proc_root is not None else sockdir / "no-proc"))
    agent = NodeAgent(client, options, config, lambda holders: open_backend(f"fake:{machine}", holders=holders))
    agent.start()
    try:
        yield Env(apisim, agent, fake_kubelet, machine, node, client)
    finally:
        agent.stop()
        if fake_kubelet is not None:
            fake_kubelet.close()
        client.close()


def stamp(seconds: float) -> str:
    return format_time(seconds)
