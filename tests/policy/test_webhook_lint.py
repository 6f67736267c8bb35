"""The validating webhook's actions (deny, warn, off from the scheduler's configuration), its answers to malformed
reviews, and the configuration's lint section."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.admission.lint_settings import LintSettings
from gpufleet.admission.validating import MAX_WARNING_CHARS, Validator
from gpufleet.admission.webhook import BadReview
from gpufleet.api.manifests import load_manifests
from gpufleet.live.settings import settings_from_text
from gpufleet.policy.cluster import ClusterView
from gpufleet.policy.rules import RULE_IDS

DATA = Path(__file__).resolve().parents[1] / "data" / "lint"
Doc = dict[str, Any]


def case(rule: str, name: str) -> Doc:
    docs = [d for d in yaml.safe_load_all((DATA / "cases" / f"{rule}.yaml").read_text()) if d]
    [doc] = [d for d in docs if d["metadata"]["name"] == name]
    return doc


def review(obj: Doc | None, operation: str = "CREATE") -> Doc:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": operation, "object": obj}}


VIEW = ClusterView.from_manifests(load_manifests([str(DATA / "cluster.yaml")]), described=True)


def validator(**rules: str) -> Validator:
    return Validator(LintSettings({k.replace("_", "-"): v for k, v in rules.items()}), lambda: VIEW)  # type: ignore[misc]


def test_error_rules_deny_and_warnings_warn_by_default() -> None:
    bad = case("privileged-gpu-container", "bad-privileged")
    bad["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}  # and no CPU/memory: a warning
    response = validator().review(review(bad))["response"]
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "[privileged-gpu-container] Pod ml/bad-privileged: spec.containers[0] (main).securityContext.privileged" \
        in response["status"]["message"]
    [warning] = response["warnings"]
    assert warning.startswith("[gpu-pod-without-cpu-memory-requests] Pod ml/bad-privileged") \
        and len(warning) <= MAX_WARNING_CHARS


def test_actions_come_from_the_configuration() -> None:
    bad = case("privileged-gpu-container", "bad-privileged")
    warned = validator(privileged_gpu_container="warn").review(review(bad))["response"]
    assert warned["allowed"] is True and warned["warnings"][0].startswith("[privileged-gpu-container]")
    off = validator(privileged_gpu_container="off").review(review(bad))["response"]
    assert off == {"uid": "u", "allowed": True}
    denied = validator(gpu_model_unconstrained="deny").review(review(case("gpu-model-unconstrained",
                                                                          "bad-anywhere")))["response"]
    assert denied["allowed"] is False and "[gpu-model-unconstrained]" in denied["status"]["message"]


def test_a_clean_object_deletes_and_unjudged_kinds_pass() -> None:
    v = validator()
    assert v.review(review(case("privileged-gpu-container", "good-cpu-privileged")))["response"] == \
        {"uid": "u", "allowed": True}
    assert v.review(review(case("privileged-gpu-container", "bad-privileged"), "DELETE"))["response"]["allowed"]
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
    assert v.review(review(config_map))["response"] == {"uid": "u", "allowed": True}


@pytest.mark.parametrize(("body", "says"), [
    ([], "the body"), ({"apiVersion": "v1"}, "not an AdmissionReview"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": "x"}, "request"),
    ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 3}}, "request.uid"),
    (review([1]), "request.object"),  # type: ignore[arg-type]
])
def test_malformed_reviews_are_refused_with_the_field(body: Any, says: str) -> None:
    with pytest.raises(BadReview, match=says.replace(".", r"\.")):
        validator().review(body)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=20)
_PATHS = [("spec",), ("spec", "containers"), ("spec", "containers", 0), ("spec", "containers", 0, "resources"),
          ("spec", "containers", 0, "env"), ("spec", "volumes"), ("metadata",), ("metadata", "annotations"),
          ("spec", "nodeSelector"), ("spec", "containers", 0, "securityContext")]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_PATHS), value=_json)
def test_any_field_of_any_shape_gets_an_answer_never_an_exception(path: tuple[Any, ...], value: Any) -> None:
    obj = copy.deepcopy(case("privileged-gpu-container", "bad-privileged"))
    target: Any = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    try:
        answer = validator().review(review(obj))
    except BadReview:
        return  # metadata of the wrong shape: a 400 with its message
    assert isinstance(answer["response"]["allowed"], bool)


def test_the_configuration_reads_per_rule_actions() -> None:
    text = "lint:\n  rules:\n    gpu-model-unconstrained: deny\n    privileged-gpu-container: off\n"
    s, problems = settings_from_text(text, "c.yaml")
    assert not problems.errors
    assert s.lint.action("gpu-model-unconstrained") == "deny"
    assert s.lint.action("privileged-gpu-container") == "off"  # YAML's unquoted off reads as false
    assert s.lint.action("hostpath-nvidia-devices") == "deny" and s.lint.action("gang-without-all-or-nothing") == "warn"
    assert {settings_from_text("", "c.yaml")[0].lint.action(r) for r in RULE_IDS} == {"deny", "warn"}


@pytest.mark.parametrize(("text", "says"), [
    ("lint:\n  rules:\n    gpu-modle-unconstrained: deny\n", "unknown lint rule gpu-modle-unconstrained"),
    ("lint:\n  rules:\n    gpu-model-unconstrained: block\n", "is not an action"),
    ("lint:\n  rule: {}\n", "unknown field rule"),
])
def test_configuration_errors_name_the_field_and_fix(text: str, says: str) -> None:
    _, problems = settings_from_text(text, "c.yaml")
    [error] = problems.errors
    assert says in error.message and error.file == "c.yaml" and error.line and error.fix


def test_the_scheduler_judges_against_its_informer_cache() -> None:
    from gpufleet.admission.validating import CacheClusterSource
    from gpufleet.k8s import resources as r
    from gpufleet.k8s.informer import ObjectCache

    cache = ObjectCache()
    now = [0.0]
    source = CacheClusterSource(cache, [r.NODES, r.PODS, r.KUEUE_LOCAL_QUEUES, r.KUEUE_CLUSTER_QUEUES],
                                refresh=10.0, clock=lambda: now[0])
    assert source().nodes == [] and not source().knows_nodes
    for node in VIEW.nodes[:2]:
        cache.apply(r.NODES, "ADDED", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": node.name, "labels": dict(node.labels), "resourceVersion": "1"},
            "status": {"allocatable": {k: str(v) for k, v in node.allocatable.items() if k != "cpu"}
                       | {"cpu": f"{node.allocatable['cpu']}m"}}})
    assert source().nodes == []  # within the refresh period the view is kept...
    now[0] = 11.0
    view = source()  # ...then rebuilt from the cache
    assert sorted(n.name for n in view.nodes) == sorted(n.name for n in VIEW.nodes[:2]) and view.knows_nodes
    assert view.knows_queues  # the scheduler watches ClusterQueues: one that is not there does not exist
    assert source() is view  # the cache did not change: nothing rebuilt
    lq = case("localqueue-without-clusterqueue", "bad-typo")
    found = Validator(LintSettings(), source).review(review(lq))["response"]
    assert found["allowed"] is False and "[localqueue-without-clusterqueue]" in found["status"]["message"]


def test_a_trainjob_is_judged_with_its_runtime_from_the_informer_cache() -> None:
    from gpufleet.admission.validating import CacheClusterSource
    from gpufleet.k8s import resources as r
    from gpufleet.k8s.informer import ObjectCache

    [runtime_res] = [res for res in r.WORKLOAD_RESOURCES if res.kind == "ClusterTrainingRuntime"]
    docs = [d for d in yaml.safe_load_all((DATA / "cases" / "gang-without-all-or-nothing.yaml").read_text()) if d]
    [runtime] = [d for d in docs if d["kind"] == "ClusterTrainingRuntime"]
    train = case("gang-without-all-or-nothing", "bad-trainjob")
    cache = ObjectCache()
    source = CacheClusterSource(cache, [r.NODES, runtime_res], refresh=0.0)
    # Without its runtime the TrainJob's pods are unknown: nothing is said about them.
    assert Validator(LintSettings(), source).review(review(train))["response"] == {"uid": "u", "allowed": True}
    cache.apply(runtime_res, "ADDED", {**runtime, "metadata": {**runtime["metadata"], "resourceVersion": "1"}})
    [warning] = Validator(LintSettings(), source).review(review(train))["response"]["warnings"]
    assert warning.startswith("[gang-without-all-or-nothing] TrainJob dev/bad-trainjob: metadata.labels: 4 pods")


def test_the_informer_caches_dra_slices_give_the_webhook_its_dra_gpus() -> None:
    from gpufleet.admission.validating import CacheClusterSource
    from gpufleet.k8s import resources as r
    from gpufleet.k8s.informer import ObjectCache

    examples = Path(__file__).resolve().parents[2] / "examples" / "dra"
    cache = ObjectCache()
    by_kind = {"Node": r.NODES, "ResourceSlice": r.RESOURCE_SLICES, "DeviceClass": r.DEVICE_CLASSES}
    for name in ("nodes.yaml", "slices.yaml", "deviceclasses.yaml"):
        for i, doc in enumerate(d for d in yaml.safe_load_all((examples / name).read_text()) if d):
            cache.apply(by_kind[doc["kind"]], "ADDED", {**doc, "metadata": {**doc["metadata"],
                                                                           "resourceVersion": str(i + 1)}})
    source = CacheClusterSource(cache, [r.NODES, r.RESOURCE_SLICES, r.DEVICE_CLASSES], refresh=0.0)
    view = source()
    assert sum(len(n.dra_gpus) for n in view.nodes) > 0
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "one", "namespace": "research"},
           "spec": {"containers": [{"name": "c", "image": "x", "resources": {
               "limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    # nvidia.com/gpu is the gpu.nvidia.com class's extended resource: the pod can run on the DRA GPUs
    answer = Validator(LintSettings(), source).review(review(pod))["response"]
    assert "gpu-request-unsatisfiable" not in json.dumps(answer)
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "9"
    answer = Validator(LintSettings(), source).review(review(pod))["response"]
    assert "gpu-request-unsatisfiable" in json.dumps(answer)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, item in items:
        out += _paths(item, (*prefix, key))
    return out


_GANGS = [d for d in yaml.safe_load_all((DATA / "cases" / "gang-without-all-or-nothing.yaml").read_text())
          if d and d["metadata"]["name"].startswith("bad-")]
_GANG_FIELDS = [(i, p) for i, d in enumerate(_GANGS) for p in _paths(d)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(where=st.sampled_from(_GANG_FIELDS), value=_json)
def test_any_field_of_any_workload_kind_gets_an_answer(where: tuple[int, tuple[Any, ...]], value: Any) -> None:
    # Every workload kind the gang cases hold (Job, CronJob, JobSet, PyTorchJob, MPIJob, RayCluster, RayJob,
    # LeaderWorkerSet, TrainJob), any of its fields replaced by a value of any shape.
    index, path = where
    obj = copy.deepcopy(_GANGS[index])
    target: Any = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    try:
        answer = validator().review(review(obj))
    except BadReview:
        return
    assert isinstance(answer["response"]["allowed"], bool)
