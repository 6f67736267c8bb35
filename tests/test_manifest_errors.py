"""Bad input, tried as a new user would: each error names file, line, object and field, and says how to fix it."""

from __future__ import annotations

from gpufleet.api.errors import ManifestError
from tests.conftest import manifests

POD_HEAD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: team-a
"""


def _pod(name: str, resources: str, annotations: str = "") -> str:
    return POD_HEAD.format(name=name) + annotations + f"""spec:
  containers:
  - name: main
    image: cuda
    resources:
{resources}
"""


def _one(errors: list[ManifestError], needle: str) -> ManifestError:
    found = [e for e in errors if needle in e.message]
    assert len(found) == 1, [str(e) for e in errors]
    return found[0]


def test_fractional_gpu_request_points_to_the_fraction_annotation() -> None:
    m = manifests(_pod("half", "      limits:\n        nvidia.com/gpu: \"0.5\""), "pods.yaml")
    e = _one(m.problems.errors, "must be a whole number")
    assert e.file == "pods.yaml" and e.line == 12
    assert e.kind == "Pod" and e.name == "team-a/half"
    assert e.field == "spec.containers[0].resources.limits.nvidia.com/gpu"
    assert e.fix is not None and 'gpufleet.io/gpu-fraction: "0.5"' in e.fix
    assert m.pods == []


def test_requests_different_from_limits() -> None:
    resources = "      requests:\n        nvidia.com/gpu: 1\n      limits:\n        nvidia.com/gpu: 2"
    m = manifests(_pod("mismatch", resources))
    e = _one(m.problems.errors, "differ from limits")
    assert e.field == "spec.containers[0].resources.limits.nvidia.com/gpu"
    assert e.fix is not None and "equal" in e.fix


def test_gpu_request_without_limit() -> None:
    m = manifests(_pod("nolimit", "      requests:\n        nvidia.com/gpu: 1"))
    e = _one(m.problems.errors, "without a limit")
    assert e.line == 12


def test_negative_and_malformed_quantities() -> None:
    m = manifests(_pod("neg", "      requests:\n        cpu: -1\n        memory: 10GB"))
    neg = _one(m.problems.errors, "must not be negative")
    assert neg.field == "spec.containers[0].resources.requests.cpu" and neg.line == 12
    bad = _one(m.problems.errors, "10GB")
    assert bad.field == "spec.containers[0].resources.requests.memory" and bad.line == 13
    assert bad.fix is not None and "10Gi" in bad.fix


def test_fraction_outside_zero_one() -> None:
    for value in ("1.5", "0", "-0.2", "half"):
        m = manifests(_pod("frac", "      limits:\n        cpu: 1",
                           f"  annotations:\n    gpufleet.io/gpu-fraction: \"{value}\"\n"))
        e = _one(m.problems.errors, "must be in (0, 1]")
        assert e.field == "metadata.annotations.gpufleet.io/gpu-fraction"
        assert e.line == 7


def test_kai_fraction_and_memory_annotations_are_read() -> None:
    m = manifests(_pod("kai", "      limits:\n        cpu: 1",
                       "  annotations:\n    gpu-fraction: \"0.25\"\n    gpu-memory: \"20480\"\n"))
    assert not m.problems.errors
    gpu = m.pods[0].template.gpu
    assert (gpu.kind, gpu.milli, gpu.memory_mib) == ("fraction", 250, 20480)


def test_the_node_agents_memory_observation_is_read_and_a_bad_one_is_a_warning() -> None:
    m = manifests(_pod("seen", "      limits:\n        nvidia.com/gpu: 1",
                       "  annotations:\n    gpufleet.io/gpu-memory-used: \"24577Mi\"\n"))
    assert not m.problems.all and m.pods[0].gpu_memory_used_mib == 24577
    assert m.pods[0].template.gpu.memory_mib is None  # an observation, never a declaration
    for value in ("lots", "0", "-2Gi"):
        m = manifests(_pod("odd", "      limits:\n        nvidia.com/gpu: 1",
                           f"  annotations:\n    gpufleet.io/gpu-memory-used: \"{value}\"\n"), "pods.yaml")
        assert not m.problems.errors and len(m.pods) == 1 and m.pods[0].gpu_memory_used_mib is None
        w = _one(m.problems.warnings, "gpufleet.io/gpu-memory-used")
        assert w.field == "metadata.annotations.gpufleet.io/gpu-memory-used" and w.line == 7
        assert w.fix is not None and '"24576Mi"' in w.fix


def test_mig_profile_the_model_does_not_have() -> None:
    pool = """apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: small}
spec:
  count: 1
  cpu: 8
  memory: 64Gi
  gpu: {model: A100-SXM4-40GB, count: 1, migLayout: "3g.40gb:2"}
  sharing: {migStrategy: mixed}
"""
    m = manifests(pool, "pool.yaml")
    e = _one(m.problems.errors, "3g.40gb")
    assert e.kind == "NodePool" and e.field == "spec.gpu.migLayout" and e.line == 8
    assert e.fix is not None and "A100-SXM4-40GB" in e.fix
    pod = POD_HEAD.format(name="mig") + """spec:
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-40GB}
  containers:
  - name: main
    resources:
      limits: {nvidia.com/mig-3g.40gb: 1}
"""
    m = manifests(pod, "pod.yaml")
    e = _one(m.problems.errors, "has no MIG profile 3g.40gb")
    assert e.name == "team-a/mig" and e.fix is not None and "3g.20gb" in e.fix


def test_unknown_mig_resource_anywhere() -> None:
    m = manifests(_pod("odd", "      limits:\n        nvidia.com/mig-5g.50gb: 1"))
    _one(m.problems.errors, "no MIG-capable GPU has the profile 5g.50gb")


QUEUES = """apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: ok}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
"""


def test_cluster_queue_naming_a_missing_flavor_is_rejected_and_the_rest_kept() -> None:
    m = manifests(QUEUES, "queues.yaml")
    e = _one(m.problems.errors, "h100")
    assert e.kind == "ClusterQueue" and e.name == "team" and e.line == 5
    assert e.fix is not None and "ResourceFlavor named h100" in e.fix
    assert [cq.name for cq in m.cluster_queues] == ["ok"]
    assert [f.name for f in m.flavors] == ["a100"]


def test_cohort_cycle() -> None:
    cohorts = [f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {{name: {a}}}\nspec: {{parentName: {b}}}"
               for a, b in (("a", "b"), ("b", "c"), ("c", "a"))]
    cohorts.append("apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {name: root}\n")
    text = "\n---\n".join(cohorts)
    m = manifests(text)
    e = _one(m.problems.errors, "cycle of cohorts")
    assert "a -> b -> c -> a" in e.message
    assert [c.name for c in m.cohorts] == ["root"]


def test_duplicate_names_keep_the_first() -> None:
    text = QUEUES + "---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\n" "metadata: {name: a100}\n"
    m = manifests(text, "q.yaml")
    e = _one(m.problems.errors, "duplicate name")
    assert "already defined at q.yaml:1" in e.message and e.line == 29


def test_unknown_kind_is_warned_and_left_out() -> None:
    m = manifests("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: web}\n---\n"
                  "apiVersion: v1\nkind: Namespace\nmetadata: {name: ok}\n")
    assert not m.problems.errors
    w = _one(m.problems.warnings, "not a kind gpufleet reads")
    assert w.kind == "Widget" and w.line == 2
    assert [n.meta.name for n in m.namespaces] == ["ok"]


def test_all_errors_of_a_file_are_reported_together_and_valid_objects_kept() -> None:
    text = "\n---\n".join([
        _pod("bad1", "      limits:\n        nvidia.com/gpu: \"0.5\""),
        _pod("good", "      limits:\n        nvidia.com/gpu: 1"),
        _pod("bad2", "      requests:\n        memory: 1.5.3"),
    ])
    m = manifests(text, "many.yaml")
    assert len(m.problems.errors) == 2
    assert [p.meta.name for p in m.pods] == ["good"]
    assert m.pods[0].template.gpu.kind == "gpu" and m.pods[0].template.gpu.count == 1


def test_missing_namespace_selector_warns_with_kueue_semantics() -> None:
    m = manifests("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\nspec:\n"
                  "  resourceGroups: []\n")
    w = _one(m.problems.warnings, "admits workloads from no namespace")
    assert w.fix is not None and "namespaceSelector: {}" in w.fix
    assert m.cluster_queues[0].namespace_selector is None


def test_error_text_reads_well() -> None:
    m = manifests(_pod("half", "      limits:\n        nvidia.com/gpu: \"0.5\""), "pods.yaml")
    text = str(m.problems.errors[0])
    assert text.startswith("pods.yaml:12: Pod team-a/half: spec.containers[0].resources.limits.nvidia.com/gpu: ")
    assert "; fix: " in text


def test_resource_lists_read_again_give_the_same_requests_and_the_same_errors() -> None:
    # Resource lists are memoised by content (pods of one template repeat theirs): the memo must change nothing.
    good = '      limits:\n        nvidia.com/gpu: "1"\n      requests:\n        cpu: "2"\n        nvidia.com/gpu: "1"'
    m = manifests(_pod("a", good) + "---\n" + _pod("b", good), "pods.yaml")
    a, b = m.pods
    assert a.template.requests == b.template.requests and a.template.requests["cpu"] == 2000
    assert a.template.requests is not b.template.requests  # each pod its own: a change to one is not the other's
    bad = '      limits:\n        nvidia.com/gpu: "1x"'
    m = manifests(_pod("c", bad) + "---\n" + _pod("d", bad), "pods.yaml")
    assert sorted(e.name or "" for e in m.problems.errors if "invalid quantity" in e.message) == [
        "team-a/c", "team-a/d"]
    # a boolean is never taken for the "1" read before it
    m = manifests(_pod("e", '      limits:\n        nvidia.com/gpu: "1"') + "---\n"
                  + _pod("f", "      limits:\n        nvidia.com/gpu: true"), "pods.yaml")
    assert [p.meta.name for p in m.pods] == ["e"]
    _one(m.problems.errors, "boolean")
