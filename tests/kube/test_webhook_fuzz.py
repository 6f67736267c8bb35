"""Property-based fuzzing of the AdmissionReview handler: ``review()`` alone, and the HTTPS server end to end.

Whatever arrives, the answer is a 200 with a valid AdmissionReview (the request's uid, ``allowed``, a
base64 JSON patch of add/remove operations within the size bound, or a refusal with a message) or a 400 with a
message; never a traceback, a dropped connection, or another status. Inputs are arbitrary JSON, arbitrary
bytes, and valid AdmissionReviews with one subtree replaced or removed (which reaches far deeper into the
handler than random JSON does). Bounded in time: a fixed number of examples, each with a deadline.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.admission.webhook import ENV_NAME, FIELD_PATH, MAX_PATCH_BYTES, BadReview, WebhookPolicy, review
from gpufleet.admission.webhook_server import WebhookServer

TLS = Path(__file__).parent / "webhook_tls"
POLICY = WebhookPolicy("gpufleet", runtime_class_name="nvidia")
JsonDict = dict[str, Any]

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False,
                                                                                   allow_infinity=False) | st.text()
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=20)

# Keys the handler reads, so replacements land where they matter.
KEYS = st.sampled_from(["apiVersion", "kind", "request", "uid", "object", "operation", "metadata", "annotations",
                        "spec", "containers", "initContainers", "env", "name", "valueFrom", "resources", "requests",
                        "limits", "schedulerName", "runtimeClassName", "gpufleet.io/gpu-fraction",
                        "gpufleet.io/gpu-memory", "gpu-fraction", "nvidia.com/gpu", ENV_NAME])


def base_review() -> JsonDict:
    ours = {"name": ENV_NAME, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": FIELD_PATH}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ml", "annotations": {"gpufleet.io/gpu-fraction": "0.5"}},
           "spec": {"schedulerName": "gpufleet",
                    "initContainers": [{"name": "init", "image": "busybox", "env": [ours]}],
                    "containers": [{"name": "main", "image": "cuda", "resources": {"requests": {"cpu": "1"}},
                                    "env": [{"name": ENV_NAME, "value": "all"}, {"name": "KEEP", "value": "1"}]},
                                   {"name": "side", "image": "busybox"}]}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "0b1c", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "operation": "CREATE", "namespace": "ml", "object": pod}}


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*path, i))


@st.composite
def mutated_reviews(draw: st.DrawFn) -> Any:
    """A valid AdmissionReview with one to three subtrees replaced, removed, or given an extra key."""
    body: Any = base_review()
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(body))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if not path:
            body = draw(json_values)
            continue
        parent = body
        for part in path[:-1]:
            parent = parent[part]
        last = path[-1]
        if action == "replace":
            parent[last] = draw(json_values)
        elif action == "remove":
            del parent[last]
        elif isinstance(parent[last], dict):
            parent[last][draw(KEYS)] = draw(json_values)
        elif isinstance(parent[last], list):
            parent[last].append(draw(json_values))
    return body


any_body = mutated_reviews() | json_values


def check_answer(answer: Any, sent: Any) -> None:
    """A valid AdmissionReview v1 answer to ``sent``."""
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == sent["request"]["uid"] and isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert response["status"]["code"] == 403 and response["status"]["message"]
        assert "patch" not in response
    if "patch" in response:
        assert response["patchType"] == "JSONPatch"
        raw = base64.b64decode(response["patch"], validate=True)
        assert len(raw) <= MAX_PATCH_BYTES
        ops = json.loads(raw)
        assert ops and all(op["op"] in ("add", "remove") and op["path"].startswith("/spec/") for op in ops)


@settings(max_examples=400, deadline=timedelta(seconds=2), suppress_health_check=[HealthCheck.too_slow])
@given(body=any_body)
def test_review_answers_or_names_the_problem(body: Any) -> None:
    before = copy.deepcopy(body)
    try:
        answer = review(body, POLICY)
    except BadReview as e:
        assert str(e)
        return
    finally:
        assert body == before  # the request is never changed in place
    check_answer(answer, body)


@settings(max_examples=200, deadline=timedelta(seconds=2))
@given(extra=st.lists(st.sampled_from(["ours", "theirs", "other", "null-env"]), max_size=6))
def test_review_of_any_container_mix_gives_a_patch_that_leaves_exactly_one_of_ours(extra: list[str]) -> None:
    body = base_review()
    containers = body["request"]["object"]["spec"]["containers"]
    entry = {"ours": {"name": ENV_NAME, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": FIELD_PATH}}},
             "theirs": {"name": ENV_NAME, "value": "0"}, "other": {"name": "X", "value": "1"}}
    for i, kind in enumerate(extra):
        containers.append({"name": f"c{i}", "env": None if kind == "null-env" else [entry[kind], entry["other"]]})
    answer = review(body, POLICY)
    check_answer(answer, body)
    from test_live_webhook import apply_patch  # the RFC 6902 subset the webhook emits

    from gpufleet.admission.webhook import is_mutated
    mutated = apply_patch(body["request"]["object"], json.loads(base64.b64decode(answer["response"]["patch"])))
    assert is_mutated(mutated)
    # Reinvocation (reinvocationPolicy: IfNeeded) changes nothing more.
    again = copy.deepcopy(body)
    again["request"]["object"] = mutated
    assert "patch" not in review(again, POLICY)["response"]


@pytest.fixture(scope="module")
def webhook_url() -> Iterator[str]:
    server = WebhookServer("127.0.0.1:0", str(TLS / "tls.crt"), str(TLS / "tls.key"), POLICY)
    server.start()
    try:
        yield f"https://localhost:{server.port}/mutate-pods"
    finally:
        server.stop()


@pytest.fixture(scope="module")
def https(webhook_url: str) -> Iterator[httpx.Client]:
    import ssl

    with httpx.Client(verify=ssl.create_default_context(cafile=str(TLS / "tls.crt")), timeout=10.0) as client:
        yield client


raw_bodies = (any_body.map(lambda b: json.dumps(b).encode()) | st.binary(min_size=1, max_size=200)
              | st.text(min_size=1).map(lambda t: t.encode("utf-8", "surrogatepass")))


@settings(max_examples=60, deadline=timedelta(seconds=10),
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=raw_bodies)
def test_the_server_answers_200_or_400_with_a_message_end_to_end(https: httpx.Client, webhook_url: str,
                                                                  body: bytes) -> None:
    answer = https.post(webhook_url, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code in (200, 400), answer.text
    assert answer.headers["content-type"] == "application/json"
    payload = answer.json()
    if answer.status_code == 400:
        assert set(payload) == {"message"} and payload["message"]
        return
    check_answer(payload, json.loads(body))
