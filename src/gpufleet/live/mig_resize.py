"""The live half of the MIG resize after an out-of-memory (:mod:`gpufleet.api.mig_resized`): the scheduler writes
what the next pods ask on the object whose pods they are, for the webhook to rewrite them.

The core decides (``KueuePolicy.oom_at``: the queue opts in with ``gpufleet.io/mig-resize-on-oom`` and covers a
larger profile of that GPU); live the policy does not resize the workload itself, because a Job's next pod asks
what its template asks. The object written is the workload's own (the Job whose pods they are, the JobSet above
its child Jobs: the one each cycle reads the workload's pod sets from), found up the pod's controllers in the
informer cache (by the workload's name), so that what the workload is charged and what its pods ask change
together. It is written with a
merge patch guarded by the cached resourceVersion (a conflict reads the object again, once). The Warning event on
the pod says what was written, or why nothing was and what to ask for instead.

The scheduler may patch those kinds only where ``deploy/webhook/`` is applied (its ClusterRole), which also sends
the MIG pods to the webhook: without the webhook the write is refused and the event says so.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.api.mig_resized import (
    RESIZABLE_KINDS,
    RESIZED_ANNOTATION,
    BadResized,
    format_resized,
    parse_resized,
    resized_on,
    with_resize,
)
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import Conflict, Forbidden, KubeError, NotFound
from gpufleet.k8s.owners import Lookup, controllers
from gpufleet.k8s.resources import ResourceType
from gpufleet.scheduling.memory import OomLesson

log = logging.getLogger(__name__)
JsonDict = dict[str, Any]
_ATTEMPTS = 5  # writes guarded by the object's resourceVersion, each after reading it again


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def owner_of(pod: Mapping[str, Any], workload: str, resources: Sequence[ResourceType],
             lookup: Lookup) -> tuple[ResourceType, Mapping[str, Any]] | None:
    """The object up ``pod``'s controllers that its workload is named after (``namespace/name``: its Job, or the
    JobSet above the Job; the highest of those so named: a TrainJob, not the JobSet of the same name it made), if
    any; a workload of one group of its owner (a LeaderWorkerSet's) matches none."""
    found = None
    for res, obj in controllers(pod, resources, lookup):
        if f"{_meta(obj).get('namespace')}/{_meta(obj).get('name')}" == workload:
            found = res, obj
    return found


class MigResizer:
    def __init__(self, client: KubeClient, resources: Sequence[ResourceType], lookup: Lookup) -> None:
        self.client = client
        self.resources = tuple(resources)
        self.lookup = lookup

    def resize(self, pod: Mapping[str, Any], lesson: OomLesson) -> str:
        """Write ``lesson``'s resize on the workload's object; the Warning event's text, saying what happened."""
        assert lesson.mig is not None and lesson.offered
        old, new = lesson.mig.old, lesson.mig.new
        head = f"ran out of GPU memory on {old}; its ClusterQueue offers {new}"
        found = owner_of(pod, lesson.workload, self.resources, self.lookup)
        if found is None:
            return (f"{head}, but no controller in this scheduler's cache makes its pods again (a pod of its own, or "
                    f"an owner it does not watch): ask for {new}")
        res, obj = found
        name = f"{res.kind} {_meta(obj).get('namespace')}/{_meta(obj).get('name')}"
        if (res.group, res.kind) not in RESIZABLE_KINDS:
            return (f"{head}, but its pods are not made from {name}'s own templates after a failure (gpufleet "
                    f"resizes Jobs, JobSets, Kubeflow's and Volcano's jobs): ask for {new} in its pod template")
        for attempt in range(_ATTEMPTS):
            written = resized_on(obj)
            try:
                resizes = parse_resized(written) if written is not None else ()
            except BadResized as e:
                return (f"{head}; {name} has an unreadable {RESIZED_ANNOTATION} annotation ({e}), left as it is: "
                        f"fix or remove it, or ask for {new} in the pod template")
            wanted = with_resize(resizes, lesson.mig)
            if wanted == resizes:
                return f"{head}, which {name} already names ({RESIZED_ANNOTATION}: {written})"
            patch = {"metadata": {"resourceVersion": _meta(obj).get("resourceVersion"),
                                  "annotations": {RESIZED_ANNOTATION: format_resized(wanted)}}}
            meta = _meta(obj)
            try:
                self.client.patch(res, str(meta.get("name")), patch, str(meta.get("namespace")))
            except Conflict:  # (the Job controller writes the Job's status as its pods end: likely, and brief)
                if attempt == _ATTEMPTS - 1:
                    break
                try:
                    obj = self.client.get(res, str(meta.get("name")), str(meta.get("namespace")))
                except KubeError as e:
                    return f"{head}; {name} could not be read again ({e}): ask for {new} in the pod template"
                if _meta(obj).get("uid") != meta.get("uid"):
                    return f"{head}; {name} was made again meanwhile: nothing written"
                continue
            except (Forbidden, NotFound) as e:
                why = ("the scheduler may not patch it: apply deploy/webhook/, which grants that and sends the "
                       "next pods to the webhook that rewrites them" if isinstance(e, Forbidden) else "it is gone")
                return f"{head}; nothing written on {name} ({why}): ask for {new} in the pod template"
            except KubeError as e:
                log.warning("MIG resize of %s not written: %s", name, e)
                return f"{head}; writing it on {name} failed ({e}): ask for {new} in the pod template"
            return (f"{head}: the next pods of {name} ask for it ({RESIZED_ANNOTATION}: {format_resized(wanted)}, "
                    "written on it; the webhook rewrites each new pod)")
        return f"{head}; {name} kept changing while it was written: ask for {new} in the pod template"

