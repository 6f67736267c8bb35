"""What the Fleet page draws is the ClusterState, for any mix of pods (hypothesis): every device held is drawn
once, on its GPU, by its holder; slices lie inside their GPU and never overlap; a GPU's fractions never sum past
the whole."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.api.manifests import load_manifest_text
from gpufleet.web.source_files import FilesSource

CLUSTER = """
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: mig}
spec: {count: 2, namePrefix: mig, gpu: {model: A100-SXM4-80GB, count: 2, migLayout: "3g.40gb,2g.20gb,1g.10gb:2"},
       cpu: "64", memory: 512Gi, sharing: {migStrategy: mixed}}
---
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: whole}
spec: {count: 2, namePrefix: whole, gpu: {model: H100-SXM5-80GB, count: 2}, cpu: "64", memory: 512Gi}
---
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: sliced}
spec:
  count: 1
  namePrefix: sliced
  gpu: {model: L40S, count: 2}
  cpu: "64"
  memory: 512Gi
  sharing: {timeSlicing: {renameByDefault: true, resources: [{name: nvidia.com/gpu, replicas: 4}]}}
"""

ASKS = st.sampled_from([
    ("nvidia.com/gpu", "1", None), ("nvidia.com/gpu", "2", None), ("nvidia.com/mig-3g.40gb", "1", None),
    ("nvidia.com/mig-1g.10gb", "1", None), ("nvidia.com/mig-2g.20gb", "1", None), ("nvidia.com/gpu.shared", "1", None),
    (None, None, "0.25"), (None, None, "0.5"), (None, None, "0.7")])


def _pod(i: int, ask: tuple[str | None, str | None, str | None]) -> str:
    resource, count, fraction = ask
    limits = f"{resource}: {count}, " if resource else ""
    notes = f'annotations: {{gpufleet.io/gpu-fraction: "{fraction}"}}' if fraction else "annotations: {}"
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: p{i}, namespace: ns, {notes}}}
spec: {{containers: [{{name: c, image: x, resources: {{limits: {{{limits}cpu: "1", memory: 1Gi}}}}}}]}}
"""


@settings(max_examples=25, deadline=None)
@given(asks=st.lists(ASKS, min_size=1, max_size=14))
def test_the_drawing_is_the_cluster_state(asks: list[tuple[str | None, str | None, str | None]]) -> None:
    manifests = load_manifest_text(CLUSTER + "---" + "---".join(_pod(i, a) for i, a in enumerate(asks)))
    assert not manifests.problems.errors, [str(e) for e in manifests.problems.errors]
    source = FilesSource(manifests, "invariants")
    view = source.cluster()
    drawn: dict[str, list[str]] = {}
    for node in view.nodes:
        for gpu in node.gpus:
            spans = sorted((s.start, s.start + s.size) for s in gpu.slices)
            assert all(0 <= a < b <= gpu.units for a, b in spans), (node.name, gpu.index, spans)
            if gpu.mode != "whole" or len(gpu.slices) > 1 or gpu.slices[0].kind == "fraction":
                assert all(b1 <= a2 for (_, b1), (a2, _) in pairwise(spans)), spans
            for s in gpu.slices:
                if s.holder is not None:
                    drawn.setdefault(s.holder, []).append(f"{node.name}:{s.id}")
                    assert s.state == "planned" and s.queue is None and s.workload == s.holder
    placed = {w.key: w for w in view.workloads if w.status == "admitted"}
    for key, w in placed.items():
        [pod] = w.pods
        expected = sorted(f"{pod.node}:{d}" for d in pod.devices)
        assert sorted(drawn.get(pod.key, [])) == expected, (key, drawn.get(pod.key), expected)
    assert set(drawn) == {w.pods[0].key for w in placed.values() if w.pods[0].devices}
