"""batch/v1 Job and CronJob, jobset.x-k8s.io JobSet: the kinds built of Jobs.

A Job is one workload of ``min(parallelism, completions)`` pods (Kueue's Job integration), ``minCount`` from the
``kueue.x-k8s.io/job-min-parallelism`` annotation. A CronJob is planned as the next Job it creates. A JobSet is one
workload with a pod set per replicated job, ``replicas x`` its Job's pods (Kueue's JobSet integration).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpufleet.api.errors import shown
from gpufleet.api.kinds import JOB_MIN_PARALLELISM_ANNOTATION, parse_meta
from gpufleet.api.limits import MAX_PODS_PER_WORKLOAD
from gpufleet.api.objects import KUEUE_QUEUE_LABEL, ObjectMeta, PodTemplate
from gpufleet.api.reader import FieldReader, parse_int_text
from gpufleet.api.workloadkinds import cron, names
from gpufleet.api.workloadkinds.common import INT32, check_plan, count, queue_key, queue_label, read_template
from gpufleet.api.workloadkinds.model import PodName, PodSetPlan, WorkloadOwner, WorkloadPlan
from gpufleet.api.workloadkinds.table import RULES


@dataclass(slots=True)
class JobSpec:
    template: PodTemplate
    parallelism: int
    completions: int | None
    indexed: bool
    suspend: bool
    backoff_limit: int

    @property
    def pod_count(self) -> int:
        """Pods the Job runs at once, as Kueue counts them: parallelism, capped by completions."""
        return self.parallelism if self.completions is None else min(self.parallelism, self.completions)


def read_job_spec(spec: FieldReader, *, indexed_default: bool = False) -> JobSpec | None:
    template = read_template(spec)
    mode = spec.enum("completionMode", ("NonIndexed", "Indexed"), "Indexed" if indexed_default else "NonIndexed")
    completions = spec.integer("completions", minimum=0, maximum=MAX_PODS_PER_WORKLOAD)
    if mode == "Indexed" and completions is None and spec.has("completionMode"):
        spec.error("an Indexed Job needs completions", "completions",
                   fix="set completions (the number of indexes), e.g. equal to parallelism")
        return None
    if template is None:
        return None
    return JobSpec(template, count(spec, "parallelism", 1), completions, mode == "Indexed", spec.flag("suspend"),
                   spec.integer("backoffLimit", 6, minimum=0, maximum=INT32) or 0)


def job_pod_names(namespace: str, job: str, indexed: bool) -> PodName:
    return lambda i: names.job_pod(namespace, job, i, indexed=indexed)


def _min_parallelism(r: FieldReader, annotations: dict[str, str], pods: int) -> int | None:
    text = annotations.get(JOB_MIN_PARALLELISM_ANNOTATION)
    if text is None:
        return None
    value = parse_int_text(text)
    if value is None or not 0 < value <= MAX_PODS_PER_WORKLOAD:
        r.error(f"annotation {JOB_MIN_PARALLELISM_ANNOTATION}: {shown(text)} is not a count of pods from 1 to "
                f"{MAX_PODS_PER_WORKLOAD:,}", "metadata", "annotations", JOB_MIN_PARALLELISM_ANNOTATION,
                fix=f'write a whole number of pods in ASCII digits, e.g. {JOB_MIN_PARALLELISM_ANNOTATION}: "2"')
        return None
    return min(value, pods)


def _job_owner(r: FieldReader, meta: ObjectMeta, job_meta: ObjectMeta, spec: JobSpec, kind: str,
               annotations: dict[str, str]) -> WorkloadOwner:
    """The owner of one Job's workload: ``meta`` is the object read (the Job, or the CronJob that creates it),
    ``job_meta`` the Job's own metadata (its name, labels, creation time)."""
    t = spec.template
    n = spec.pod_count
    ns = meta.namespace or "default"
    labels = {**t.labels, **job_meta.labels}
    queue, system = queue_label(job_meta.labels)
    pod_set = PodSetPlan("main", n, t, job_pod_names(ns, job_meta.name, spec.indexed),
                         _min_parallelism(r, annotations, n))
    return WorkloadOwner(
        meta=meta, rule=RULES[("batch", kind)],
        workloads=[WorkloadPlan(job_meta.name, [pod_set], created=job_meta.creation_timestamp)],
        queue=queue_key(queue, system), suspended=spec.suspend, backoff_limit=spec.backoff_limit, labels=labels,
        annotations={**t.annotations, **job_meta.annotations})


def parse_job(r: FieldReader) -> WorkloadOwner | None:
    meta = parse_meta(r, namespaced=True)
    spec_r = r.obj("spec", required=True)
    if meta is None or spec_r is None:
        return None
    spec = read_job_spec(spec_r)
    if spec is None:
        return None
    owner = _job_owner(r, meta, meta, spec, "Job", meta.annotations)
    return owner if check_plan(r, owner, "spec.parallelism") else None


def parse_cron_job(r: FieldReader) -> WorkloadOwner | None:
    meta = parse_meta(r, namespaced=True)
    spec_r = r.obj("spec", required=True)
    if meta is None or spec_r is None:
        return None
    schedule_text = spec_r.text("schedule", required=True)
    tz_name = spec_r.text("timeZone")
    jt = spec_r.obj("jobTemplate", required=True)
    if schedule_text is None or jt is None:
        return None
    try:
        schedule = cron.parse_schedule(schedule_text)
        tz = cron.zone(tz_name)
        after = meta.creation_timestamp if meta.creation_timestamp is not None else 0.0
        when = cron.next_run(schedule, after, tz)
    except cron.CronError as exc:
        field = "timeZone" if tz_name and "time zone" in str(exc) and "schedule" not in str(exc) else "schedule"
        spec_r.error(f"{exc}", field, fix='write five cron fields, e.g. schedule: "*/30 * * * *"')
        return None
    tm = jt.obj("metadata")
    job_labels = tm.string_map("labels") if tm else {}
    job_annotations = tm.string_map("annotations") if tm else {}
    job_spec_r = jt.obj("spec", required=True)
    job_spec = read_job_spec(job_spec_r) if job_spec_r is not None else None
    if job_spec is None:
        return None
    job_name = f"{meta.name}-{int(when // 60)}"  # the CronJob controller names a Job by its scheduled minute
    job_meta = replace(meta, name=job_name, labels=job_labels, annotations=job_annotations, creation_timestamp=when)
    owner = _job_owner(jt, meta, job_meta, job_spec, "CronJob", job_annotations)
    if KUEUE_QUEUE_LABEL in meta.labels and KUEUE_QUEUE_LABEL not in job_labels:
        r.warning(f"label {KUEUE_QUEUE_LABEL} is on the CronJob, which does not copy it to the Jobs it creates; its "
                  "Jobs go to no queue", "metadata", "labels", KUEUE_QUEUE_LABEL,
                  fix=f"move it to spec.jobTemplate.metadata.labels.{KUEUE_QUEUE_LABEL}")
    if spec_r.flag("suspend"):
        owner.workloads = []
        owner.notes.append("suspended (spec.suspend: true): it creates no Job, nothing is planned")
    return owner if check_plan(r, owner, "spec.jobTemplate.spec.parallelism") else None


def parse_job_set(r: FieldReader) -> WorkloadOwner | None:
    meta = parse_meta(r, namespaced=True)
    spec = r.obj("spec", required=True)
    if meta is None or spec is None:
        return None
    ns = meta.namespace or "default"
    pod_sets: list[PodSetPlan] = []
    seen: set[str] = set()
    for rj in spec.items("replicatedJobs", required=True):
        name = rj.text("name", required=True)
        replicas = count(rj, "replicas", 1)
        jt = rj.obj("template", required=True)
        job_spec_r = jt.obj("spec", required=True) if jt is not None else None
        job_spec = read_job_spec(job_spec_r, indexed_default=True) if job_spec_r is not None else None
        if name is None or job_spec is None:
            continue
        if name in seen:
            rj.error(f"replicated job {name} is defined twice", "name", fix="give every replicated job its own name")
            continue
        seen.add(name)
        per_job = job_spec.pod_count
        total = replicas * per_job
        pod_name = _jobset_pod_name(ns, meta.name, name, per_job, job_spec.indexed)
        pod_sets.append(PodSetPlan(name, total, job_spec.template, pod_name, slice_default=job_spec.parallelism))
    if not pod_sets:
        return None
    queue, system = queue_label(meta.labels)
    owner = WorkloadOwner(meta=meta, rule=RULES[("jobset.x-k8s.io", "JobSet")],
                          workloads=[WorkloadPlan(meta.name, pod_sets)], queue=queue_key(queue, system),
                          suspended=spec.flag("suspend"), labels=dict(meta.labels), annotations=dict(meta.annotations))
    return owner if check_plan(r, owner, "spec.replicatedJobs") else None


def _jobset_pod_name(namespace: str, jobset: str, rjob: str, per_job: int, indexed: bool) -> PodName:
    def name(i: int) -> str:
        job_index, pod_index = divmod(i, per_job) if per_job else (i, 0)
        return names.job_pod(namespace, f"{jobset}-{rjob}-{job_index}", pod_index, indexed=indexed)
    return name
