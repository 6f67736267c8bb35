"""A bound pod holds the devices gpufleet recorded on it (gpufleet.io/node + gpufleet.io/devices): `plan` never
moves it in the model, and what is left for pending pods is exactly the rest (issue 14 item 3)."""

from __future__ import annotations

import json

from gpufleet.api.manifests import load_manifest_text
from gpufleet.cluster.build import build_workloads
from gpufleet.cluster.state import ClusterState
from gpufleet.gpu.sharing import gpu_uuid
from gpufleet.scheduling.kueue import KueuePolicy

NODE = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: a100}
spec: {count: 1, cpu: "64", memory: 512Gi, gpu: {model: A100-SXM4-80GB, count: 4}}
"""


def bound(name: str, gpus: int, devices: list[str] | None, node: str = "a100-0", created: int = 0) -> str:
    notes = {} if devices is None else {"gpufleet.io/node": node, "gpufleet.io/devices": json.dumps(devices)}
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ml
  annotations: {json.dumps(notes)}
  creationTimestamp: "2026-01-01T00:00:{created:02d}Z"
spec:
  nodeName: a100-0
  containers:
  - name: c
    resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}
status: {{phase: Running}}
"""


PENDING = """---
apiVersion: v1
kind: Pod
metadata: {name: waiting, namespace: ml, creationTimestamp: "2026-01-01T00:01:00Z"}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: 2}}
"""


def devices_of(text: str) -> dict[str, tuple[str, ...]]:
    """Every pod's devices once `plan`'s policy has read the input and run a cycle."""
    manifests = load_manifest_text(text)
    assert not manifests.problems.errors, manifests.problems.errors
    cluster = ClusterState.from_nodes(manifests.nodes)
    policy = KueuePolicy(manifests, cluster)
    for w in build_workloads(manifests):
        policy.submit(w, 100.0)
    policy.cycle(100.0)
    cluster.check_invariants()
    return {key: placement.device_ids for key, placement in cluster.placements.items()}


def uuid(i: int) -> str:
    return gpu_uuid("a100-0", i)


def test_a_running_pod_keeps_its_recorded_devices_and_pending_pods_get_the_rest() -> None:
    got = devices_of(NODE + bound("running", 2, [uuid(1), uuid(3)]) + PENDING)
    assert got["ml/running"] == (uuid(1), uuid(3))
    assert set(got["ml/waiting"]) == {uuid(0), uuid(2)}


def test_a_record_for_another_node_or_taken_devices_falls_back_to_free_ones() -> None:
    # "stale" says it runs on another node: its record is not read; "copy" names devices "running" holds.
    text = (NODE + bound("running", 1, [uuid(3)]) + bound("stale", 1, [uuid(3)], node="elsewhere", created=1)
            + bound("copy", 1, [uuid(3)], created=2))
    got = devices_of(text)
    assert got["ml/running"] == (uuid(3),)
    held = [d for name in ("ml/stale", "ml/copy") for d in got[name]]
    assert len(set(held)) == 2 and uuid(3) not in held


def test_a_pod_without_a_record_is_given_free_devices() -> None:
    got = devices_of(NODE + bound("running", 2, [uuid(0), uuid(1)]) + bound("foreign", 2, None, created=1))
    assert set(got["ml/foreign"]) == {uuid(2), uuid(3)}
