"""Kueue's TAS pod-set slices, never passed over in silence.

``kueue.x-k8s.io/podset-slice-required-topology: <level>`` with ``kueue.x-k8s.io/podset-slice-size: <n>`` (and the
multi-layer ``podset-slice-required-topology-constraints``) ask Kueue's topology-aware scheduling to cut a pod set
into slices of ``n`` pods and keep each slice within one domain of ``level`` (Kueue's multislice JobSet sample:
each replicated Job one slice). gpufleet's topology-aware placement keeps a whole pod set within one domain of a
level (``podset-required-topology``) or as few as it can (``podset-preferred-topology``); it has no slices. So:

* malformed slices are errors, as Kueue's webhook refuses them: a size that is not a positive whole number or is
  larger than the pod set, a size without a slice level, a slice level without a size;
* a pod set that also asks a required or preferred topology is placed by it, on a flavor with a topology, and the
  slices are said to be left out (``--strict``: an error);
* a pod set that asks slices alone is never placed as if it asked nothing (on a flavor without topology): its
  workload is held pending with the reason, and the slices are said to be left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.objects import PREFERRED_TOPOLOGY_ANNOTATION, REQUIRED_TOPOLOGY_ANNOTATION, ObjectMeta
from gpufleet.api.reader import parse_int_text

if TYPE_CHECKING:
    from gpufleet.api.manifests import Manifests

SLICE_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
_FIX = "expect Kueue to admit it only where every slice fits one domain, or drop the slice annotations"


def check_slices(m: Manifests) -> None:
    """Say what the input's slice annotations ask and gpufleet does not do (module doc); hold the workloads whose
    pod sets ask slices and no other topology."""
    for owner in m.controllers.owners:
        for ps in owner.workloads[0].pod_sets if owner.workloads else ():
            hold = _check(m, owner.meta, owner.kind, ps.name, ps.count, ps.template.annotations)
            if hold is not None and owner.hold is None:
                owner.hold = hold
    for pod in m.pods:
        if pod.meta.owners:
            continue  # its owner's template says it, once
        _check(m, pod.meta, "Pod", "main", 1, pod.meta.annotations)
    for wl in m.workloads:  # a Kueue Workload object: its pod sets' templates carry the job's annotations
        for spec in wl.pod_sets:
            hold = _check(m, wl.meta, "Workload", spec.name, spec.count, spec.template.annotations)
            if hold is not None:
                m.controllers.workload_holds.setdefault(wl.meta.key, hold)


def _check(m: Manifests, meta: ObjectMeta, kind: str, pod_set: str, count: int,
           annotations: Mapping[str, str]) -> str | None:
    """Errors and warnings for one pod set's slice annotations; the reason to hold its workload, if any."""
    level = annotations.get(SLICE_TOPOLOGY_ANNOTATION)
    size_text = annotations.get(SLICE_SIZE_ANNOTATION)
    layers = annotations.get(SLICE_CONSTRAINTS_ANNOTATION)
    if level is None and size_text is None and layers is None:
        return None
    src = meta.source

    def say(message: str, key: str, fix: str, *, error: bool = False) -> None:
        file, line = src.file if src else None, src.line if src else None
        field = f"{'' if kind == 'Pod' else 'pod template '}metadata.annotations.{key}"
        text = f"pod set {pod_set}: {message}"
        if error:
            m.problems.error(text, file=file, line=line, kind=kind, name=meta.key, field=field, fix=fix)
        else:
            m.problems.warning(text, file=file, line=line, kind=kind, name=meta.key, field=field, fix=fix,
                               code=LEFT_OUT)

    size: int | None = None
    if layers is not None:
        asked = f"multi-layer slices ({SLICE_CONSTRAINTS_ANNOTATION})"
        key = SLICE_CONSTRAINTS_ANNOTATION
    else:
        if size_text is not None:
            size = parse_int_text(size_text.strip())
            if size is None or size <= 0:
                say(f"{SLICE_SIZE_ANNOTATION} must be a positive whole number of pods, got {size_text!r}",
                    SLICE_SIZE_ANNOTATION, f'write {SLICE_SIZE_ANNOTATION}: "4"', error=True)
                return None
            if size > count:
                say(f"{SLICE_SIZE_ANNOTATION} {size} is more than the pod set's {count} pods; Kueue refuses it",
                    SLICE_SIZE_ANNOTATION, f"give a slice size of at most {count}", error=True)
                return None
        if level is None:
            say(f"{SLICE_SIZE_ANNOTATION} needs {SLICE_TOPOLOGY_ANNOTATION}; Kueue refuses it alone",
                SLICE_SIZE_ANNOTATION, f"add {SLICE_TOPOLOGY_ANNOTATION}: <node label of the slice's level>",
                error=True)
            return None
        if size is None:
            say(f"{SLICE_TOPOLOGY_ANNOTATION} needs {SLICE_SIZE_ANNOTATION}; Kueue refuses it alone",
                SLICE_TOPOLOGY_ANNOTATION, f'add {SLICE_SIZE_ANNOTATION}: "<pods per slice>"', error=True)
            return None
        asked = f"slices of {size} pods, each within one {level} domain ({SLICE_TOPOLOGY_ANNOTATION})"
        key = SLICE_TOPOLOGY_ANNOTATION
    whole = annotations.get(REQUIRED_TOPOLOGY_ANNOTATION) or annotations.get(PREFERRED_TOPOLOGY_ANNOTATION)
    if whole:
        how = "within one" if annotations.get(REQUIRED_TOPOLOGY_ANNOTATION) else "in as few"
        say(f"Kueue's topology-aware scheduling keeps {asked}; gpufleet has no slices and places the pod set "
            f"{how} {whole} domain{'' if how == 'within one' else 's'} only (left out)", key, _FIX)
        return None
    reason = (f"asks Kueue's topology-aware scheduling for {asked}, which gpufleet does not implement: held pending "
              "rather than placed without a topology")
    say(f"{reason} (left out)", key,
        f"add {REQUIRED_TOPOLOGY_ANNOTATION}: <level> to plan it within one domain, or drop the slice annotations")
    return reason
