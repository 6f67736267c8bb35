"""The mutating admission webhook for fractional GPU pods and MIG resizes (AdmissionReview v1), as pure functions.

A pod whose owner was resized after an OOM on a MIG instance asks the larger profile: see
:mod:`gpufleet.admission.mig_resize`. The rest of this module is the fractional pods'.

How a fractional pod gets the GPU the scheduler chose
-----------------------------------------------------
A pod asking for a share of a GPU (``gpufleet.io/gpu-fraction``, or KAI's ``gpu-fraction``) requests no
``nvidia.com/gpu``: the NVIDIA device plugin would hand it a whole GPU of the plugin's choosing. Instead

1. at pod creation this webhook adds, to every container, ``NVIDIA_VISIBLE_DEVICES`` taken through the
   downward API from the annotation ``gpufleet.io/visible-devices``;
2. the scheduler, after choosing a GPU, writes that annotation (the GPU's UUID) with the Binding: the API
   server sets the node and the annotation in one update;
3. the kubelet resolves the env var when it creates the container (after the bind), and the NVIDIA
   container runtime exposes exactly that GPU.

If the annotation were missing the variable would be empty, which the NVIDIA runtime reads as "no GPU":
the failure mode is no GPU, never every GPU. The scheduler refuses to bind a fractional pod that was not
mutated (see :func:`is_mutated`), so a webhook outage cannot leak GPUs either.

What is NOT enforced: GPU memory limits and compute shares. Fractional pods on one GPU share it the way
time-sliced pods do (KAI Scheduler without HAMi-core behaves the same); a pod that uses more memory than it
declared can make its neighbours fail with out-of-memory errors. The pod needs the NVIDIA container runtime
(as default runtime or through ``runtimeClassName``) and the runtime must accept NVIDIA_VISIBLE_DEVICES from
unprivileged containers (the GPU Operator's default).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.admission.mig_resize import ResizeSource, no_resizes, resize_ops
from gpufleet.api import gpushare
from gpufleet.api.gpushare import spec_containers
from gpufleet.api.objects import VISIBLE_DEVICES_ENV, VISIBLE_DEVICES_FIELD_PATH

ENV_NAME = VISIBLE_DEVICES_ENV
FIELD_PATH = VISIBLE_DEVICES_FIELD_PATH
MUTATE_PATH = "/mutate-pods"

JsonDict = dict[str, Any]

# The largest JSON patch this webhook answers with. Why a 2.6 MB request once gave a 58 MB answer: every
# container, however small (`{"name":"x"}`, 13 bytes), needs its own env entry in the patch (about 200 bytes,
# a third more once base64-encoded), so 200,000 tiny containers asked for 200,000 entries. The patch is now
# built compactly and stops at this bound (some 320 containers: far above any pod that shares a GPU); a pod
# past it is refused with a message instead of answered.
MAX_PATCH_BYTES = 64 * 1024
MAX_UID_LENGTH = 128  # the API server sends a UUID (36 characters); the answer echoes it


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    scheduler_name: str = "gpufleet"
    runtime_class_name: str | None = None  # set on fractional pods that name none (e.g. "nvidia")
    # Where a new pod's MIG resize after an OOM comes from (gpufleet.admission.mig_resize): its owners in the
    # scheduler's informer cache; none without one.
    resizes: ResizeSource = no_resizes


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(pod.get("metadata")).get("annotations"))


def _env_entry() -> JsonDict:
    return {"name": ENV_NAME, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": FIELD_PATH}}}


def _env(container: Mapping[str, Any]) -> list[Any]:
    env = container.get("env")
    return env if isinstance(env, list) else []


def is_mutated(pod: Mapping[str, Any]) -> bool:
    """Every container reads NVIDIA_VISIBLE_DEVICES from our annotation (what :func:`mutate` writes)."""
    containers = list(spec_containers(_mapping(pod.get("spec"))))
    if not containers:
        return False
    for _, _, c in containers:
        env = [e for e in _env(c) if isinstance(e, dict) and e.get("name") == ENV_NAME]
        if len(env) != 1 or _mapping(_mapping(env[0].get("valueFrom")).get("fieldRef")).get("fieldPath") != FIELD_PATH:
            return False
    return True


class PatchTooLarge(Exception):
    """The JSON patch a pod needs would pass :data:`MAX_PATCH_BYTES`."""


class _Patch:
    """JSON patch operations, with the size of their encoding kept under :data:`MAX_PATCH_BYTES` as they are
    added: a pod whose mutation would pass the bound costs no more than the bound before it is refused."""

    def __init__(self) -> None:
        self.ops: list[JsonDict] = []
        self.size = 2  # the list's brackets

    def add(self, op: JsonDict) -> None:
        self.size += len(_compact(op)) + 1
        if self.size > MAX_PATCH_BYTES:
            raise PatchTooLarge
        self.ops.append(op)


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _ours(pod: Mapping[str, Any], policy: WebhookPolicy) -> bool:
    return (_mapping(pod.get("spec")).get("schedulerName") or "default-scheduler") == policy.scheduler_name


def mutate(pod: Mapping[str, Any], policy: WebhookPolicy) -> tuple[list[JsonDict] | None, str | None]:
    """JSON patch operations wiring a fractional ``pod`` to its GPU ([] when nothing to do), or (None, why) to
    deny it."""
    spec = _mapping(pod.get("spec"))
    if not _ours(pod, policy):
        return [], None  # another scheduler's pod: its GPU sharing is not ours to wire
    gpus = gpushare.requested_gpu_resources(spec)
    conflict = gpushare.hami_conflict(_annotations(pod), gpus)
    if conflict is not None:  # the parser's error (gpufleet.api.kinds): gpufleet would not place it
        return None, f"{conflict[0]}; {conflict[1]}"
    if not gpushare.is_fractional(_annotations(pod), gpus):
        return [], None  # a whole-GPU pod, or HAMi's share alone: the device plugin (HAMi's) hands out the GPU
    if gpus:
        return None, (f"a fractional GPU pod must not also request {', '.join(gpus)}: the device plugin would "
                      "give it whole GPUs of its own choosing; drop the request and keep the fraction annotation")
    patch = _Patch()
    try:
        for section, i, c in spec_containers(spec):
            env = _env(c)
            base = f"/spec/{section}/{i}/env"
            if not env:
                patch.add({"op": "add", "path": base, "value": [_env_entry()]})
                continue
            # A value the pod set itself (or a CUDA image's "all") must not win over the scheduler's choice.
            same = [k for k, e in enumerate(env) if isinstance(e, dict) and e.get("name") == ENV_NAME]
            if len(same) == 1 and env[same[0]] == _env_entry():
                continue  # already ours: a reinvocation must change nothing
            for k in reversed(same):
                patch.add({"op": "remove", "path": f"{base}/{k}"})
            patch.add({"op": "add", "path": f"{base}/-", "value": _env_entry()})
        if policy.runtime_class_name and not spec.get("runtimeClassName"):
            patch.add({"op": "add", "path": "/spec/runtimeClassName", "value": policy.runtime_class_name})
    except PatchTooLarge:
        containers = list(spec_containers(spec))
        duplicates = sum(1 for _, _, c in containers for e in _env(c)
                         if isinstance(e, dict) and e.get("name") == ENV_NAME)
        return None, (f"mutating this pod ({len(containers):,} containers, {duplicates:,} {ENV_NAME} entries) "
                      f"would take a JSON patch of more than {MAX_PATCH_BYTES:,} bytes, the most gpufleet's "
                      f"webhook answers with; a fractional GPU pod needs one container per process sharing the "
                      f"GPU and no {ENV_NAME} of its own: drop the extra containers and entries")
    return patch.ops, None


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 request this webhook can answer; the message says where."""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def _expect(value: Any, want: type, path: str, *, optional: bool = True) -> None:
    """``value`` is a ``want`` (or absent/null when optional)."""
    if (value is None and optional) or type(value) is want:
        return
    raise BadReview(f"{path}: expected {_kind(want())}, got {_kind(value)}")


def _check_pod(pod: JsonDict) -> None:
    """The shape of every field of a Pod that this webhook reads (the rest is the API server's to validate).
    Linear in the pod's size; paths are formatted only for the one field that is wrong."""
    p = "request.object"
    meta = pod.get("metadata")
    _expect(meta, dict, f"{p}.metadata")
    annotations = (meta or {}).get("annotations")
    _expect(annotations, dict, f"{p}.metadata.annotations")
    for key, value in (annotations or {}).items():
        if type(value) is not str:
            _expect(value, str, f"{p}.metadata.annotations[{key[:60]!r}]", optional=False)
    spec = pod.get("spec")
    _expect(spec, dict, f"{p}.spec")
    spec = spec or {}
    for field in ("schedulerName", "runtimeClassName"):
        _expect(spec.get(field), str, f"{p}.spec.{field}")
    for section in ("initContainers", "containers"):
        items = spec.get(section)
        _expect(items, list, f"{p}.spec.{section}")
        for i, c in enumerate(items or ()):
            if type(c) is not dict:
                _expect(c, dict, f"{p}.spec.{section}[{i}]", optional=False)
            env = c.get("env")
            if env is not None:
                if type(env) is not list:
                    _expect(env, list, f"{p}.spec.{section}[{i}].env")
                for k, e in enumerate(env):
                    if type(e) is not dict or not (e.get("name") is None or type(e.get("name")) is str):
                        where = f"{p}.spec.{section}[{i}].env[{k}]"
                        _expect(e, dict, where, optional=False)
                        _expect(e.get("name"), str, f"{where}.name")
            resources = c.get("resources")
            if resources is not None:
                for part, value in (("", resources), (".requests", (resources if type(resources) is dict
                                                                    else {}).get("requests")),
                                    (".limits", (resources if type(resources) is dict else {}).get("limits"))):
                    if value is not None and type(value) is not dict:
                        _expect(value, dict, f"{p}.spec.{section}[{i}].resources{part}")


def review(request_body: Any, policy: WebhookPolicy) -> JsonDict:
    """The AdmissionReview answer to an AdmissionReview request (v1); :class:`BadReview` names the first field
    that does not have the shape the API server sends."""
    _expect(request_body, dict, "the body", optional=False)
    if (request_body.get("apiVersion"), request_body.get("kind")) != ("admission.k8s.io/v1", "AdmissionReview"):
        raise BadReview("not an AdmissionReview: expected apiVersion admission.k8s.io/v1 and kind AdmissionReview "
                        "(the webhook configuration must list admissionReviewVersions: [v1])")
    request = request_body.get("request")
    _expect(request, dict, "request", optional=False)
    uid = request.get("uid")
    _expect(uid, str, "request.uid", optional=False)
    if not uid or len(uid) > MAX_UID_LENGTH:
        raise BadReview(f"request.uid: expected 1 to {MAX_UID_LENGTH} characters, got {len(uid):,}")
    kind = request.get("kind")
    _expect(kind, dict, "request.kind")
    _expect(_mapping(kind).get("kind"), str, "request.kind.kind")
    _expect(request.get("operation"), str, "request.operation")
    obj = request.get("object")
    _expect(obj, dict, "request.object")
    response: JsonDict = {"uid": uid, "allowed": True}
    if _mapping(kind).get("kind") == "Pod" and request.get("operation") == "CREATE":
        if obj is None:
            raise BadReview("request.object: a Pod CREATE carries the pod")
        _check_pod(obj)
        ops, denied = mutate(obj, policy)
        warnings: list[str] = []
        if denied is None and ops is not None and _ours(obj, policy):
            resize, warnings = resize_ops(obj, str(request.get("namespace") or ""), policy.resizes)
            ops = [*ops, *resize]
        if denied is not None:
            response["allowed"] = False
            response["status"] = {"code": 403, "reason": "Forbidden", "message": denied}
        elif ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(_compact(ops).encode()).decode()
        if warnings:
            response["warnings"] = warnings
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
