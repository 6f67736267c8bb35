"""Kueue features gpufleet does not implement, never passed over in silence.

* **Admission checks** (``ClusterQueue.spec.admissionChecks``/``admissionChecksStrategy``, AdmissionCheck objects,
  ``Workload.status.admissionChecks``): honoured. Kueue admits a workload only once every check of its ClusterQueue
  is Ready; gpufleet runs none of their controllers, so a workload whose checks are not all Ready in its own status
  stays pending with the checks named as the reason. gpufleet's own check (controller ``gpufleet.io/placement``)
  is what gpufleet's placement decides, so it holds nothing back.
* **MultiKueue** (an AdmissionCheck of controller ``kueue.x-k8s.io/multikueue``): the workloads run on worker
  clusters gpufleet does not see; they stay pending, reported as left out.
* **admissionScope** (admission fair sharing), LocalQueue ``fairSharing``, the Configuration's
  ``admissionFairSharing``, ``multiKueue`` and ``manageJobsWithoutQueueName``: not implemented; reported as left out.
* Kueue v1beta2's ClusterQueue ``concurrentAdmissionPolicy`` (flavor migration) and ``flavorFungibility.preference``,
  LocalQueue ``wallTimePolicy`` and ResourceFlavor ``resourceWeights``: not implemented; reported as left out
  (``--strict``: an error), never as unknown fields.
"""

from __future__ import annotations

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.kinds import parse_meta
from gpufleet.api.reader import FieldReader
from gpufleet.api.workloadkinds.model import AdmissionCheck, ControllerObjects

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
PROVISIONING_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
GPUFLEET_CONTROLLER = "gpufleet.io/placement"
READY = "Ready"


def parse_admission_check(r: FieldReader) -> AdmissionCheck | None:
    meta = parse_meta(r, namespaced=False)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    controller = spec.text("controllerName", required=True)
    return AdmissionCheck(meta, controller) if controller else None


def audit(r: FieldReader, kind: str, objects: ControllerObjects) -> None:
    """Record and report what a Kueue object asks that gpufleet does not implement itself."""
    spec = r.obj("spec") if kind != "Configuration" else r
    if spec is None:
        return
    if kind == "ClusterQueue":
        cq_name = str((r.raw("metadata") or {}).get("name"))
        checks = list(spec.string_list("admissionChecks"))
        strategy = spec.obj("admissionChecksStrategy")
        if strategy is not None:
            for item in strategy.items("admissionChecks"):
                named = item.text("name", required=True)
                if named:
                    checks.append(named)
                if item.has("onFlavors"):
                    item.warning("onFlavors is not read: the check applies to every flavor in gpufleet's plan",
                                 "onFlavors", fix="expect the check on every flavor")
        if checks:
            objects.cluster_queue_checks[cq_name] = tuple(dict.fromkeys(checks))
            r.warning(f"admission checks {', '.join(objects.cluster_queue_checks[cq_name])}: Kueue admits this "
                      "ClusterQueue's workloads only once every check is Ready, and gpufleet runs no check "
                      "controller, so its workloads stay pending unless their Workload status shows the checks "
                      "Ready", "spec", "admissionChecks" if spec.has("admissionChecks") else "admissionChecksStrategy",
                      fix="give the Workload objects with status.admissionChecks, or plan without the checks")
        if spec.has("concurrentAdmissionPolicy"):
            spec.warning("concurrentAdmissionPolicy (concurrent admission: pursuing several flavors at once and "
                         "migrating to a preferred one) is not implemented: a workload is admitted to the first flavor "
                         "that fits and stays there (left out)", "concurrentAdmissionPolicy",
                         fix="remove it to plan as gpufleet does, or expect Kueue to move workloads to preferred "
                         "flavors later", code=LEFT_OUT)
        ff = spec.obj("flavorFungibility")
        if ff is not None and ff.has("preference"):
            ff.warning("preference is not implemented: when every flavor needs borrowing or preemption, gpufleet "
                       "takes the first such flavor in order (left out)", "preference",
                       fix="remove it to plan as gpufleet does, or order the flavors by preference", code=LEFT_OUT)
        if spec.has("admissionScope"):
            spec.warning("admissionScope (admission fair sharing) is not implemented: LocalQueues are ordered "
                         "without their usage (left out)", "admissionScope",
                         fix="remove it to plan as gpufleet does, or compare with Kueue's own order", code=LEFT_OUT)
    elif kind == "LocalQueue":
        if spec.has("fairSharing"):
            spec.warning("fairSharing (admission fair sharing) is not implemented (left out)", "fairSharing",
                         fix="remove it to plan as gpufleet does", code=LEFT_OUT)
        if spec.has("wallTimePolicy"):
            spec.warning("wallTimePolicy (a wall-time budget per LocalQueue) is not implemented: its workloads are "
                         "never held for an exhausted budget (left out)", "wallTimePolicy",
                         fix="remove it to plan as gpufleet does", code=LEFT_OUT)
    elif kind == "ResourceFlavor" and spec.has("resourceWeights"):
        spec.warning("resourceWeights (per-resource weights of fair sharing's dominant resource share) is not "
                     "implemented: every resource weighs 1 (left out)", "resourceWeights",
                     fix="remove it to plan as gpufleet does", code=LEFT_OUT)
    elif kind == "Workload":
        key = _key(r)
        status = r.obj("status")
        states: dict[str, str] = {}
        if status is not None:
            for item in status.items("admissionChecks"):
                check = item.text("name", required=True)
                if check:
                    states[check] = item.text("state", "Pending") or "Pending"
        if states:
            objects.workload_checks[key] = states
    elif kind == "Configuration":
        for field, what in (("admissionFairSharing", "admission fair sharing"),
                            ("multiKueue", "MultiKueue (workloads dispatched to worker clusters)")):
            if r.has(field):
                r.warning(f"{field}: {what} is not implemented (left out)", field,
                          fix="remove it to plan as gpufleet does", code=LEFT_OUT)
        if r.flag("manageJobsWithoutQueueName"):
            r.warning("manageJobsWithoutQueueName is not implemented: workloads without a queue label are placed "
                      "without quota, not held by Kueue (left out)", "manageJobsWithoutQueueName",
                      fix="give every workload a queue label", code=LEFT_OUT)


def _key(r: FieldReader) -> str:
    meta = r.raw("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def hold_reason(cluster_queue: str, workload_key: str | None, objects: ControllerObjects) -> str | None:
    """Why Kueue would keep a workload of ``cluster_queue`` from being admitted on account of admission checks;
    None when nothing holds it (no checks, every check Ready, or only gpufleet's own)."""
    checks = objects.cluster_queue_checks.get(cluster_queue)
    if not checks:
        return None
    controllers = {c.name: c.controller for c in objects.admission_checks}
    states = objects.workload_checks.get(workload_key or "", {})
    multikueue = [c for c in checks if controllers.get(c) == MULTIKUEUE_CONTROLLER]
    if multikueue:
        return (f"dispatched by MultiKueue (AdmissionCheck {multikueue[0]}) to a worker cluster gpufleet does not "
                "see; left out of this cluster's plan")
    rejected = [c for c in checks if states.get(c) == "Rejected"]
    if rejected:
        return f"admission check {', '.join(rejected)} rejected it"
    waiting = [c for c in checks if states.get(c) != READY and controllers.get(c) != GPUFLEET_CONTROLLER]
    if not waiting:
        return None
    said = ", ".join(f"{c} ({controllers[c]})" if c in controllers else f"{c} (no such AdmissionCheck in the input)"
                     for c in waiting)
    return (f"waiting for admission check(s) {said} of ClusterQueue {cluster_queue}: Kueue admits it once they "
            "are Ready, and gpufleet does not run their controllers")
