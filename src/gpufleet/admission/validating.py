"""The validating admission webhook: gpufleet's lint rules (:mod:`gpufleet.policy`) on every object the API server
sends, served by the scheduler's webhook server on :data:`VALIDATE_PATH` (AdmissionReview v1).

Each finding's rule has an action from the scheduler's configuration (:mod:`gpufleet.admission.lint_settings`):
``deny`` refuses the object (the message lists every such finding with its fix), ``warn`` answers with an
AdmissionReview warning (kubectl prints it), ``off`` drops it. The rules that need the cluster judge against the
scheduler's informer cache (:class:`CacheClusterSource`: its Nodes, queue objects and Kubeflow's training runtimes,
which a TrainJob's pods come from, rebuilt at most every
:data:`REFRESH_SECONDS`); an admitted ClusterQueue or LocalQueue is judged with itself in place of its cached
version. The object as the API server sends it is parsed by the same parsers as a manifest file.

Never a reason to refuse on its own: an object gpufleet's parsers cannot read (the API server validated it; the
rules that need its parsed form then say nothing), an operation other than CREATE or UPDATE, a kind no rule judges.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.admission.lint_settings import LintSettings
from gpufleet.admission.webhook import MAX_UID_LENGTH, BadReview
from gpufleet.api.errors import Problems
from gpufleet.api.manifests import ManifestBuilder, Manifests, build
from gpufleet.api.source import Document
from gpufleet.k8s import resources as r
from gpufleet.k8s.informer import ObjectCache
from gpufleet.k8s.parsing import document
from gpufleet.policy.cluster import ClusterView
from gpufleet.policy.engine import judge
from gpufleet.policy.model import Finding
from gpufleet.policy.subjects import subjects

log = logging.getLogger(__name__)

VALIDATE_PATH = "/validate"
SOURCE = "<admission>"
REFRESH_SECONDS = 10.0
# kubectl shows every warning; the API server truncates long ones (its guidance: at most 256 characters) and
# drops some when there are many.
MAX_WARNING_CHARS = 256
MAX_WARNINGS = 16
MAX_MESSAGE_CHARS = 4096
QUEUE_KINDS = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "Namespace")
RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")  # a TrainJob's pods are its runtime's
# A DRA node's GPUs come from its ResourceSlices, and DeviceClasses say which extended resources they back.
DRA_DEVICE_KINDS = ("ResourceSlice", "DeviceClass")

JsonDict = dict[str, Any]
ClusterSource = Callable[[], ClusterView]


class CacheClusterSource:
    """The cluster as the scheduler's informer cache holds it, for the rules that need it. Rebuilt at most every
    ``refresh`` seconds (parsing every Node on every admission would cost more than the admission is worth); a
    webhook answers within a few seconds of the cache either way."""

    def __init__(self, cache: ObjectCache, resources: Sequence[r.ResourceType], refresh: float = REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.resources = [res for res in resources
                          if res.kind == "Node" or res.kind in QUEUE_KINDS or res.kind in RUNTIME_KINDS
                          or res.kind in DRA_DEVICE_KINDS]
        self.refresh = refresh
        self.clock = clock
        self._lock = threading.Lock()
        self._view: tuple[float, int, ClusterView] | None = None

    def __call__(self) -> ClusterView:
        with self._lock:
            now, version = self.clock(), self.cache.version
            if self._view is not None and (self._view[1] == version or now - self._view[0] < self.refresh):
                return self._view[2]
            objects = [o for res in self.resources for o in self.cache.objects(res)]
            manifests = build([document(o, i) for i, o in enumerate(objects)], Problems())
            queues_watched = any(res.kind == "ClusterQueue" for res in self.resources)
            view = ClusterView.from_manifests(manifests, described=queues_watched)
            self._view = (now, version, view)
            return view


def no_cluster() -> ClusterView:
    return ClusterView()


@dataclass(frozen=True, slots=True)
class Validator:
    settings: LintSettings
    cluster: ClusterSource = no_cluster

    def findings(self, obj: JsonDict) -> list[Finding]:
        doc = Document(data=obj, file=SOURCE, line=0, index=0)
        view = self.cluster()
        # Parsed beside the cluster's flavors, so that a ClusterQueue naming them is read (not refused as naming
        # flavors that do not exist).
        builder = ManifestBuilder(Problems())
        builder.out.flavors = list(view.flavors.values())
        builder.out.controllers.runtimes = list(view.runtimes)  # a TrainJob's pods come from its runtime
        builder.add(doc)
        parsed: Manifests = builder.finish()
        if parsed.cluster_queues or parsed.local_queues:  # judge a queue object with itself in the cluster
            view = ClusterView.from_manifests(_as_manifests(view), parsed, described=view.knows_queues)
        out = []
        for subject in subjects(parsed, [doc]):
            subject.file, subject.line = None, None
            out.extend(judge(subject, view))
        return out

    def review(self, body: Any) -> JsonDict:
        """The AdmissionReview answer; :class:`~gpufleet.admission.webhook.BadReview` names what is malformed."""
        uid, operation, obj = _request(body)
        response: JsonDict = {"uid": uid, "allowed": True}
        if operation in ("CREATE", "UPDATE") and obj is not None:
            findings = [(f, self.settings.action(f.rule)) for f in self.findings(obj)]
            denied = [f for f, action in findings if action == "deny"]
            warned = [f for f, action in findings if action == "warn"]
            if denied:
                response["allowed"] = False
                response["status"] = {"code": 403, "reason": "Forbidden", "message": _denial(denied)}
            if warned:
                response["warnings"] = [_bounded(f"[{f.rule}] {f.message}; fix: {f.fix}", MAX_WARNING_CHARS)
                                        for f in warned[:MAX_WARNINGS]]
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _as_manifests(view: ClusterView) -> Manifests:
    m = Manifests(nodes=list(view.nodes), flavors=list(view.flavors.values()),
                  cluster_queues=list(view.cluster_queues.values()), local_queues=list(view.local_queues),
                  device_classes=list(view.device_classes), resource_slices=list(view.resource_slices))
    m.controllers.runtimes = list(view.runtimes)
    return m


def _bounded(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _denial(findings: Sequence[Finding]) -> str:
    lines = [f"[{f.rule}] {f.message}; fix: {f.fix}" for f in findings]
    head = f"gpufleet lint: {len(findings)} finding(s) refused by this cluster's policy (docs/lint.md): "
    return _bounded(head + " | ".join(lines), MAX_MESSAGE_CHARS)


def _request(body: Any) -> tuple[str, str | None, JsonDict | None]:
    """uid, operation and object of an AdmissionReview v1 request, every field the shape the API server sends."""
    if not isinstance(body, Mapping):
        raise BadReview("the body: expected an object")
    if (body.get("apiVersion"), body.get("kind")) != ("admission.k8s.io/v1", "AdmissionReview"):
        raise BadReview("not an AdmissionReview: expected apiVersion admission.k8s.io/v1 and kind AdmissionReview "
                        "(the webhook configuration must list admissionReviewVersions: [v1])")
    request = body.get("request")
    if not isinstance(request, Mapping):
        raise BadReview("request: expected an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not 0 < len(uid) <= MAX_UID_LENGTH:
        raise BadReview(f"request.uid: expected a string of 1 to {MAX_UID_LENGTH} characters")
    operation = request.get("operation")
    if operation is not None and not isinstance(operation, str):
        raise BadReview("request.operation: expected a string")
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise BadReview("request.object: expected an object")
    if obj is not None and not isinstance(obj.get("metadata", {}), dict):
        raise BadReview("request.object.metadata: expected an object")
    return uid, operation, obj
