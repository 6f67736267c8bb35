"""The mutating admission webhook for fractional GPU pods (AdmissionReview v1), as pure functions.

How a fractional pod gets the GPU the scheduler chose
-----------------------------------------------------
A pod asking for a share of a GPU (``gpufleet.io/gpu-fraction``, or KAI's ``gpu-fraction``) requests no
``nvidia.com/gpu``: the NVIDIA device plugin would hand it a whole GPU of the plugin's choosing. Instead

1. at pod creation this webhook adds, to every container, ``NVIDIA_VISIBLE_DEVICES`` taken through the
   downward API from the annotation ``gpufleet.io/visible-devices``;
2. the scheduler, after choosing a GPU, writes that annotation (the GPU's UUID) and only then binds;
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

from gpufleet.api.objects import (
    GPU_FRACTION_ANNOTATION,
    GPU_MEMORY_ANNOTATION,
    KAI_FRACTION_ANNOTATION,
    KAI_MEMORY_ANNOTATION,
)
from gpufleet.kube.annotations import VISIBLE_DEVICES_ANNOTATION

ENV_NAME = "NVIDIA_VISIBLE_DEVICES"
FIELD_PATH = f"metadata.annotations['{VISIBLE_DEVICES_ANNOTATION}']"
MUTATE_PATH = "/mutate-pods"

JsonDict = dict[str, Any]

_FRACTION_KEYS = (GPU_FRACTION_ANNOTATION, KAI_FRACTION_ANNOTATION)
_MEMORY_KEYS = (GPU_MEMORY_ANNOTATION, KAI_MEMORY_ANNOTATION)


@dataclass(frozen=True, slots=True)
class WebhookPolicy:
    scheduler_name: str = "gpufleet"
    runtime_class_name: str | None = None  # set on fractional pods that name none (e.g. "nvidia")


def is_fractional(pod: Mapping[str, Any]) -> bool:
    """The parser's rule (gpufleet.api.kinds): a fraction annotation, or a GPU memory annotation on a pod that
    requests no GPU device, makes a fractional pod."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if any(key in annotations for key in _FRACTION_KEYS):
        return True
    return any(key in annotations for key in _MEMORY_KEYS) and not _gpu_requests(pod.get("spec") or {})


def _env_entry() -> JsonDict:
    return {"name": ENV_NAME, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": FIELD_PATH}}}


def _containers(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    out: list[tuple[str, int, Mapping[str, Any]]] = []
    for section in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(section) or []):
            if isinstance(c, Mapping):
                out.append((section, i, c))
    return out


def is_mutated(pod: Mapping[str, Any]) -> bool:
    """Every container reads NVIDIA_VISIBLE_DEVICES from our annotation (what :func:`mutate` writes)."""
    containers = _containers(pod.get("spec") or {})
    if not containers:
        return False
    for _, _, c in containers:
        env = [e for e in c.get("env") or [] if isinstance(e, Mapping) and e.get("name") == ENV_NAME]
        if len(env) != 1 or ((env[0].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") != FIELD_PATH:
            return False
    return True


def _gpu_requests(spec: Mapping[str, Any]) -> list[str]:
    found: set[str] = set()
    for _, _, c in _containers(spec):
        resources = c.get("resources") or {}
        for section in ("requests", "limits"):
            for name in resources.get(section) or {}:
                if str(name).startswith("nvidia.com/"):
                    found.add(str(name))
    return sorted(found)


def mutate(pod: Mapping[str, Any], policy: WebhookPolicy) -> tuple[list[JsonDict] | None, str | None]:
    """JSON patch operations for ``pod`` ([] when nothing to do), or (None, why) to deny it."""
    if not is_fractional(pod):
        return [], None
    spec = pod.get("spec") or {}
    if (spec.get("schedulerName") or "default-scheduler") != policy.scheduler_name:
        return [], None  # another scheduler's pod: its GPU sharing is not ours to wire
    gpus = _gpu_requests(spec)
    if gpus:
        return None, (f"a fractional GPU pod must not also request {', '.join(gpus)}: the device plugin would "
                      "give it whole GPUs of its own choosing; drop the request and keep the fraction annotation")
    ops: list[JsonDict] = []
    for section, i, c in _containers(spec):
        env = c.get("env")
        base = f"/spec/{section}/{i}/env"
        if not env:
            ops.append({"op": "add", "path": base, "value": [_env_entry()]})
            continue
        # A value the pod set itself (or a CUDA image's "all") must not win over the scheduler's choice.
        same = [k for k, e in enumerate(env) if isinstance(e, Mapping) and e.get("name") == ENV_NAME]
        if len(same) == 1 and env[same[0]] == _env_entry():
            continue  # already ours: a reinvocation must change nothing
        for k in reversed(same):
            ops.append({"op": "remove", "path": f"{base}/{k}"})
        ops.append({"op": "add", "path": f"{base}/-", "value": _env_entry()})
    if policy.runtime_class_name and not spec.get("runtimeClassName"):
        ops.append({"op": "add", "path": "/spec/runtimeClassName", "value": policy.runtime_class_name})
    return ops, None


def review(request_body: Any, policy: WebhookPolicy) -> JsonDict:
    """The AdmissionReview answer to an AdmissionReview request (v1)."""
    if not isinstance(request_body, Mapping) or not isinstance(request_body.get("request"), Mapping):
        raise ValueError("not an AdmissionReview with a request")
    request = request_body["request"]
    response: JsonDict = {"uid": request.get("uid", ""), "allowed": True}
    kind = (request.get("kind") or {}).get("kind")
    obj = request.get("object")
    if kind == "Pod" and request.get("operation") == "CREATE" and isinstance(obj, Mapping):
        ops, denied = mutate(obj, policy)
        if denied is not None:
            response["allowed"] = False
            response["status"] = {"code": 403, "reason": "Forbidden", "message": denied}
        elif ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
