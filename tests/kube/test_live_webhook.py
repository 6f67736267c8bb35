"""The fractional-GPU path: the mutating webhook over real HTTPS, and the scheduler's visible-devices annotation."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest
from kube_apisim import ApiSim
from live_env import NS, bindings, bound_node, gpu_uuid, node, pod, scheduled_condition, wait_until

from gpufleet.admission.webhook import ENV_NAME, FIELD_PATH, WebhookPolicy, is_mutated
from gpufleet.admission.webhook_server import WebhookServer
from gpufleet.k8s import resources as r
from gpufleet.live.scheduler import Scheduler

TLS = Path(__file__).parent / "webhook_tls"
JsonDict = dict[str, Any]


@pytest.fixture
def webhook() -> Iterator[str]:
    server = WebhookServer("127.0.0.1:0", str(TLS / "tls.crt"), str(TLS / "tls.key"),
                           WebhookPolicy("gpufleet", runtime_class_name="nvidia"))
    server.start()
    try:
        yield f"https://127.0.0.1:{server.port}"
    finally:
        server.stop()


def _trust() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(TLS / "tls.crt"))


def fraction_pod(name: str, fraction: str = "0.5", **kwargs: Any) -> JsonDict:
    return pod(name, gpus=0, annotations={"gpufleet.io/gpu-fraction": fraction}, **kwargs)


def admit(url: str, obj: JsonDict, uid: str = "req-1") -> JsonDict:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "operation": "CREATE", "namespace": NS, "object": obj}}
    with httpx.Client(verify=_trust()) as c:  # the API server verifies against the caBundle
        answer = c.post(f"{url}/mutate-pods", json=body, timeout=5.0)
    assert answer.status_code == 200
    review: JsonDict = answer.json()
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    assert review["response"]["uid"] == uid
    return review["response"]  # type: ignore[no-any-return]


def apply_patch(obj: JsonDict, ops: list[JsonDict]) -> JsonDict:
    """The webhook's JSON patch applied as the API server applies it (RFC 6902)."""
    return jsonpatch.apply_patch(obj, ops)  # type: ignore[no-any-return]


def test_the_webhook_mutates_a_fractional_pod(webhook: str) -> None:
    obj = fraction_pod("frac", env=[{"name": ENV_NAME, "value": "all"}, {"name": "KEEP", "value": "1"}])
    obj["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]
    response = admit(webhook, obj)
    assert response["allowed"] is True and response["patchType"] == "JSONPatch"
    mutated = apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    for container in mutated["spec"]["initContainers"] + mutated["spec"]["containers"]:
        wanted = [e for e in container["env"] if e["name"] == ENV_NAME]
        assert wanted == [{"name": ENV_NAME, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": FIELD_PATH}}}]
    assert {"name": "KEEP", "value": "1"} in mutated["spec"]["containers"][0]["env"]  # the rest is untouched
    assert mutated["spec"]["runtimeClassName"] == "nvidia"
    assert FIELD_PATH == "metadata.annotations['gpufleet.io/visible-devices']"
    assert is_mutated(mutated) and not is_mutated(obj)


@pytest.mark.parametrize("obj", [
    pod("whole-gpu", gpus=1),
    pod("cpu-only", gpus=0),
    fraction_pod("other-scheduler", scheduler="default-scheduler"),
    pod("memory-with-gpu", gpus=1, annotations={"gpufleet.io/gpu-memory": "20Gi"}),
], ids=lambda o: o["metadata"]["name"])
def test_the_webhook_leaves_other_pods_alone(webhook: str, obj: JsonDict) -> None:
    response = admit(webhook, obj)
    assert response["allowed"] is True and "patch" not in response


def test_the_webhook_refuses_a_fractional_pod_that_also_requests_gpus(webhook: str) -> None:
    obj = pod("both", gpus=1, annotations={"gpufleet.io/gpu-fraction": "0.5"})
    response = admit(webhook, obj)
    assert response["allowed"] is False and response["status"]["code"] == 403
    assert "nvidia.com/gpu" in response["status"]["message"]


def test_the_webhook_answers_400_to_garbage_and_404_elsewhere(webhook: str) -> None:
    with httpx.Client(verify=_trust()) as c:
        assert c.post(f"{webhook}/mutate-pods", content=b"{not json", timeout=5.0).status_code == 400
        assert c.post(f"{webhook}/other", json={}, timeout=5.0).status_code == 404


def test_the_scheduler_writes_the_chosen_gpu_for_mutated_fractional_pods_only(
    apisim: ApiSim, live_scheduler: Callable[..., Scheduler]
) -> None:
    apisim.create(r.NODES, node("n0", gpus=2))
    mutated_env = [{"name": ENV_NAME, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": FIELD_PATH}}}]
    apisim.create(r.PODS, fraction_pod("half-a", env=mutated_env))
    apisim.create(r.PODS, fraction_pod("half-b", env=mutated_env))
    apisim.create(r.PODS, fraction_pod("unmutated"))
    live_scheduler()
    wait_until(lambda: bound_node(apisim, "half-a") and bound_node(apisim, "half-b"))
    notes = {n: apisim.get(r.PODS, NS, n)["metadata"]["annotations"] for n in ("half-a", "half-b")}
    for n, a in notes.items():
        [device] = json.loads(a["gpufleet.io/devices"])
        assert a["gpufleet.io/visible-devices"] == device, n  # the container sees exactly the chosen GPU
        assert device in {gpu_uuid("n0", 0), gpu_uuid("n0", 1)}
    wait_until(lambda: scheduled_condition(apisim.get(r.PODS, NS, "unmutated")) is not None)
    condition = scheduled_condition(apisim.get(r.PODS, NS, "unmutated"))
    assert condition is not None and "not mutated by the gpufleet admission webhook" in condition["message"]
    assert not bindings(apisim, "unmutated")
