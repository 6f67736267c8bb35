"""ResourceSlices of GPUs in NVIDIA's dynamic MIG mode (partitionable devices, KEP-4815), as its DRA driver publishes
them on Kubernetes 1.35 (reference: dra-operator-multikueue.md §2.3): per pool one slice holding a counter set per GPU
(``gpu-<minor>-counter-set``: ``memory``, ``multiprocessors``, one ``memory-slice-<i>`` per memory slice), then one
devices-only slice per GPU: the whole GPU consuming every counter, and each MIG placement the model allows consuming
its profile's memory, multiprocessors and memory slices. Written from the MIG geometry of gpufleet's catalog."""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.gpu.mig import geometry_for

PRODUCT = {"A100-SXM4-80GB": ("NVIDIA A100-SXM4-80GB", "81920Mi")}
CLASSES = """---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: mig.nvidia.com}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}
"""


def _counters(values: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {k: {"value": str(v)} for k, v in values.items()}


def dynamic_mig_slices(node: str, gpus: int = 1, model: str = "A100-SXM4-80GB",
                       profiles: tuple[str, ...] = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
                       shared_set: bool = False, multiprocessors: int | None = None) -> str:
    """The YAML of ``node``'s pool: a counter slice and one slice per GPU. ``shared_set``: every GPU's devices
    consume one counter set (not NVIDIA's layout: what gpufleet refuses to carve). ``multiprocessors``: the counter
    set's multiprocessors, when fewer than the MIG devices' (what the counters allow, not the geometry)."""
    geometry = geometry_for(model)
    assert geometry is not None
    product, memory = PRODUCT[model]
    sms = (geometry.profile("7g.80gb").multiprocessors or 98)
    sets: list[dict[str, Any]] = []
    docs: list[dict[str, Any]] = []
    pool = {"name": node, "generation": 1, "resourceSliceCount": gpus + 1}
    for minor in range(gpus):
        counter_set = "gpu-0-counter-set" if shared_set else f"gpu-{minor}-counter-set"
        everything = {"memory": memory, "multiprocessors": multiprocessors or sms,
                      **{f"memory-slice-{i}": 1 for i in range(geometry.memory_slices)}}
        if not shared_set or minor == 0:
            sets.append({"name": counter_set, "counters": _counters(everything)})
        uuid = f"GPU-{node}-{minor}"
        devices: list[dict[str, Any]] = [{
            "name": f"gpu-{minor}",
            "attributes": {"type": {"string": "gpu"}, "uuid": {"string": uuid}, "productName": {"string": product}},
            "capacity": {"memory": {"value": memory}},
            "consumesCounters": [{"counterSet": counter_set, "counters": _counters(everything)}]}]
        for name in profiles:
            p = geometry.profile(name)
            for start in p.starts:
                consumed = {"memory": f"{p.memory_mib}Mi", "multiprocessors": p.multiprocessors or 0,
                            **{f"memory-slice-{i}": 1 for i in range(start, start + p.memory_slices)}}
                devices.append({
                    "name": f"gpu-{minor}-mig-{p.name.replace('.', '')}-{p.profile_id}-{start}",
                    "attributes": {"type": {"string": "mig"}, "parentUUID": {"string": uuid},
                                   "profile": {"string": p.name}, "productName": {"string": product}},
                    "capacity": {"memory": {"value": f"{p.memory_mib}Mi"}},
                    "consumesCounters": [{"counterSet": counter_set, "counters": _counters(consumed)}]})
        docs.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                     "metadata": {"name": f"{node}-gpu.nvidia.com-gpu-{minor}"},
                     "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": pool, "devices": devices}})
    counters = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpu.nvidia.com-counters"},
                "spec": {"driver": "gpu.nvidia.com", "nodeName": node, "pool": pool, "sharedCounters": sets}}
    return "".join("---\n" + yaml.safe_dump(d, sort_keys=False) for d in [counters, *docs])


def node(name: str) -> str:
    return (f"---\napiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n"
            "  allocatable: {cpu: '64', memory: 512Gi, pods: '110'}\n")


def template(name: str, request: str, cls: str, count: int = 1, selector: str | None = None) -> str:
    selectors = f"\n          selectors: [{{cel: {{expression: \"{selector}\"}}}}]" if selector else ""
    return f"""---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: {name}, namespace: ml}}
spec:
  spec:
    devices:
      requests:
      - name: {request}
        exactly:
          deviceClassName: {cls}
          count: {count}{selectors}
"""


def profile_template(name: str, profile: str, count: int = 1) -> str:
    return template(name, "mig", "mig.nvidia.com", count,
                    f"device.attributes['gpu.nvidia.com'].profile == '{profile}'")


def allocated_claim(name: str, devices: list[str], *, request: str = "gpus", cls: str = "gpu.nvidia.com",
                    reserved_for: str | None = None, node: str = "n1") -> str:
    """A ResourceClaim in namespace ml allocated ``devices`` of ``node``'s pool (reserved for a pod, or for none)."""
    results = "".join(f"\n      - {{request: {request}, driver: gpu.nvidia.com, pool: {node}, device: {d}}}"
                      for d in devices)
    reserved = (f"\n  reservedFor: [{{resource: pods, name: {reserved_for}, uid: u-{reserved_for}}}]"
                if reserved_for else "")
    return f"""---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: {name}, namespace: ml}}
spec:
  devices:
    requests:
    - name: {request}
      exactly: {{deviceClassName: {cls}, count: {len(devices)}}}
status:
  allocation:
    devices:
      results:{results}
    nodeSelector:
      nodeSelectorTerms:
      - matchFields: [{{key: metadata.name, operator: In, values: [{node}]}}]{reserved}
"""
