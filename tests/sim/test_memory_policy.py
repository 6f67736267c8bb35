"""What the gpufleet policy learns of GPU memory, run through the simulator: it keeps time-sliced pods where their
memory fits, never puts an OOM-killed pod back on the GPU that killed it, and offers a larger MIG profile after an
OOM on one; the peers (kube-default, Kueue) learn none of it, on the same input."""

from __future__ import annotations

from gpufleet.api.manifests import Manifests
from gpufleet.api.mig_resized import Resize
from gpufleet.scheduling.memory import MemoryBook, next_larger_profile, resized, workload_class
from gpufleet.sim.engine import simulate_jobs
from gpufleet.sim.jobs import job_lines
from gpufleet.sim.policies import make_policy
from tests.sim.helpers import job, jobs_of, kueue_queues, load, pool

GI = 1024


def _time_sliced(name: str, cpu: int) -> str:
    return pool(name, 1, 1, model="L40S").replace(
        "  cpu: \"64\"",
        "  sharing:\n    timeSlicing:\n      renameByDefault: true\n"
        f"      resources: [{{name: nvidia.com/gpu, replicas: 8}}]\n  cpu: \"{cpu}\"")


def _mig(covered: tuple[str, ...], *, resize: str | None = "true") -> Manifests:
    """An A100 split 2g.20gb + three 1g.10gb, and a queue covering ``covered``, with ``resize`` as its
    gpufleet.io/mig-resize-on-oom annotation (None: without it)."""
    mig = pool("mig", 1, 1, extra=", migLayout: \"2g.20gb,1g.10gb:3\"").replace(
        "  cpu: \"64\"", "  sharing: {migStrategy: mixed}\n  cpu: \"64\"")
    opt_in = "" if resize is None else f'gpufleet.io/mig-resize-on-oom: "{resize}"'
    return load(mig + kueue_queues(covered, cq_annotations=opt_in))


def _outcomes(m: Manifests, text: str, policy: str) -> dict[str, tuple[str, dict[str, int]]]:
    r = simulate_jobs(make_policy(policy, m), jobs_of(text))
    return {x.job: (x.outcome, x.failures) for x in job_lines(r)}


def test_time_sliced_pods_go_where_their_memory_fits_and_the_peers_stack_them() -> None:
    # Two L40S (46 GiB), the first with four times the CPUs: kube-scheduler's LeastAllocated on cpu and memory
    # keeps choosing it. Six notebooks of the same class use 20 GiB each, arriving a minute apart and running
    # two hours; the scheduler is told nothing of their memory.
    m = load(_time_sliced("big", 64) + _time_sliced("small", 16) + kueue_queues(("nvidia.com/gpu.shared",)))
    label = "kueue.x-k8s.io/queue-name: q, sim.gpufleet.io/class: notebook"
    text = "".join(job(f"nb{i}", resource="nvidia.com/gpu.shared", arrival=f"{i * 2}m", duration="2h", labels=label,
                       annotations='    sim.gpufleet.io/gpu-memory-used: "20Gi"') for i in range(6))
    ours = _outcomes(m, text, "gpufleet")
    # Two per GPU fit: the first two spread, then the class is known (three observations) and the last two wait
    # for room instead of being OOM-killed.
    assert all(outcome == "succeeded" and not failures for outcome, failures in ours.values()), ours
    for peer in ("kueue", "kube-default"):
        theirs = _outcomes(m, text, peer)
        assert sum(f.get("OOMKilled", 0) for _, f in theirs.values()) >= 2, (peer, theirs)


def test_an_oom_on_a_mig_instance_is_retried_on_the_next_larger_profile_the_queue_covers() -> None:
    m = _mig(("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"))
    text = job("emb", resource="nvidia.com/mig-1g.10gb", backoff=2, labels="kueue.x-k8s.io/queue-name: q",
               annotations='    sim.gpufleet.io/gpu-memory-used: "15Gi"')
    assert _outcomes(m, text, "gpufleet") == {"team-a/emb": ("succeeded", {"OOMKilled": 1})}
    assert _outcomes(m, text, "kueue") == {"team-a/emb": ("failed", {"OOMKilled": 3})}
    # A queue that covers no larger profile: the retries stay on 1g.10gb and fail as Kueue's do.
    narrow = _mig(("nvidia.com/mig-1g.10gb",))
    assert _outcomes(narrow, text, "gpufleet") == {"team-a/emb": ("failed", {"OOMKilled": 3})}
    # A queue that does not opt in (no annotation, or "false"): the retries stay on 1g.10gb too.
    for opt in (None, "false", "False"):
        assert _outcomes(_mig(("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"), resize=opt), text,
                         "gpufleet") == {"team-a/emb": ("failed", {"OOMKilled": 3})}, opt


def test_a_queue_s_resize_annotation_that_is_neither_true_nor_false_is_an_error_naming_it() -> None:
    from gpufleet.api.manifests import load_manifest_text

    text = kueue_queues(("nvidia.com/mig-1g.10gb",), cq_annotations='gpufleet.io/mig-resize-on-oom: "yes please"')
    (err,) = load_manifest_text(text).problems.errors
    assert "'yes please' is neither true nor false" in err.message and err.line == 14
    assert err.field == "metadata.annotations.gpufleet.io/mig-resize-on-oom" and 'write "true"' in (err.fix or "")


def test_the_resize_is_said_in_the_admission() -> None:
    m = _mig(("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"))
    (emb,) = jobs_of(job("emb", resource="nvidia.com/mig-1g.10gb", backoff=2, labels="kueue.x-k8s.io/queue-name: q"))
    policy = make_policy("gpufleet", m)
    policy.submit(emb.workload, 0.0)
    (first,) = policy.cycle(0.0).admitted
    assert first.notes == [] and "notes" not in first.to_json()
    policy.oom_killed(emb.key, emb.workload.pods[0].key, 60.0)  # type: ignore[attr-defined]
    policy.finish(emb.key, 60.0)
    policy.submit(emb.workload, 70.0)
    (second,) = policy.cycle(70.0).admitted
    assert second.usage.get("nvidia.com/mig-2g.20gb") == 1 and "nvidia.com/mig-1g.10gb" not in second.usage
    assert second.to_json()["notes"] == [
        "nvidia.com/mig-1g.10gb → nvidia.com/mig-2g.20gb (OOM-killed on nvidia.com/mig-1g.10gb)"]


def test_memory_book_hints_floors_and_profiles() -> None:
    (a, b) = [j.workload for j in jobs_of(job("a", labels="sim.gpufleet.io/class: nb") + job("b"))]
    book = MemoryBook(None)
    template = a.pods[0].template
    assert workload_class(a) == "team-a/nb" and workload_class(b) == "team-a/Job"
    assert book.hint(a, template) == 0
    for pod, mib in (("team-a/x", 4 * GI), ("team-a/y", 6 * GI)):
        book.observed(a, pod, mib)
    assert book.hint(a, template) == 0  # two observations are not enough to trust the class
    book.observed(a, "team-a/y", 40 * GI)  # the same pod's peak grew: it replaces its own, still two pods
    assert book.hint(a, template) == 0
    book.observed(a, "team-a/z", 30 * GI)
    assert book.hint(a, template) == 40 * GI  # the 90th percentile of three pods
    book.observed(a, "team-a/y", 6 * GI)
    assert book.hint(a, template) == 30 * GI
    book.oom_on_shared(b, ["n/0"], 12 * GI)
    assert book.hint(b, b.pods[0].template) == 12 * GI + 1 and book.avoid(b.key) == frozenset({"n/0"})
    assert next_larger_profile("nvidia.com/mig-1g.10gb", "A100-SXM4-80GB",
                               {"nvidia.com/mig-2g.20gb", "nvidia.com/mig-3g.40gb"}) == "nvidia.com/mig-2g.20gb"
    assert next_larger_profile("nvidia.com/mig-3g.40gb", "A100-SXM4-80GB", {"nvidia.com/mig-2g.20gb"}) is None
    big = resized(a, [Resize("nvidia.com/gpu", "nvidia.com/mig-2g.20gb")])
    assert "nvidia.com/mig-2g.20gb" in big.pods[0].template.requests and "nvidia.com/gpu" not in big.pod_sets[
        0].template.requests


def test_an_oom_on_two_shared_gpus_bounds_the_need_by_the_least_free() -> None:
    # A pod of two replicas, one on each of two time-sliced GPUs, known co-tenants leaving 40 GiB and 2 GiB free:
    # which one ran out is not reported, so the workload is expected to need more than 2 GiB, not 40.
    from gpufleet.cluster.devices import DeviceGrant

    m = load(_time_sliced("ts", 64).replace("count: 1}", "count: 2}") + kueue_queues(("nvidia.com/gpu.shared",)))
    (job_,) = jobs_of(job("two", resource="nvidia.com/gpu.shared", gpus=2, labels="kueue.x-k8s.io/queue-name: q"))
    policy = make_policy("gpufleet", m)
    cluster = policy.cluster
    assert cluster is not None
    node = next(iter(cluster.nodes))
    cluster.allocate("other/a", node, {}, [DeviceGrant("replica", 0, 0, memory_mib=6 * GI)])
    cluster.allocate("other/b", node, {}, [DeviceGrant("replica", 1, 0, memory_mib=44 * GI)])
    policy.submit(job_.workload, 0.0)
    pod = job_.workload.pods[0].key  # placed by hand on both GPUs (the device plugin may split it so)
    cluster.allocate(pod, node, {}, [DeviceGrant("replica", 0, 1), DeviceGrant("replica", 1, 1)])
    policy.oom_killed(job_.key, pod, 60.0)  # type: ignore[attr-defined]
    book = policy.memory  # type: ignore[attr-defined]
    free_on_1 = 46068 - 44 * GI
    assert book.hint(job_.workload, job_.workload.pods[0].template) == free_on_1 + 1
    assert book.avoid(job_.key) == frozenset({f"{node}/0", f"{node}/1"})


def test_beside_a_co_tenant_of_unknown_memory_the_gpu_is_avoided_and_nothing_is_expected() -> None:
    # What was free is not known when a co-tenant's memory is not: expecting more than the whole GPU (what the
    # arithmetic gives with the unknown one counted as nothing) would keep the workload off every GPU of the model.
    from gpufleet.cluster.devices import DeviceGrant

    m = load(_time_sliced("ts", 64) + kueue_queues(("nvidia.com/gpu.shared",)))
    (job_,) = jobs_of(job("one", resource="nvidia.com/gpu.shared", labels="kueue.x-k8s.io/queue-name: q"))
    policy = make_policy("gpufleet", m)
    cluster = policy.cluster
    assert cluster is not None
    node = next(iter(cluster.nodes))
    cluster.allocate("other/a", node, {}, [DeviceGrant("replica", 0, 0)])  # nothing known of it
    policy.submit(job_.workload, 0.0)
    pod = job_.workload.pods[0].key
    cluster.allocate(pod, node, {}, [DeviceGrant("replica", 0, 1)])
    lesson = policy.oom_at(job_.key, pod, node, cluster.placements[pod].grants)  # type: ignore[attr-defined]
    assert lesson is not None and lesson.gpus == (f"{node}/0",) and lesson.needs_more_than == 0
    book = policy.memory  # type: ignore[attr-defined]
    assert book.hint(job_.workload, job_.workload.pods[0].template) == 0
    assert book.avoid(job_.key) == frozenset({f"{node}/0"})


def test_without_resizing_an_oom_on_mig_names_the_larger_profile_and_the_pods_keep_theirs() -> None:
    from gpufleet.scheduling.kueue import KueuePolicy

    m = _mig(("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"))
    (emb,) = jobs_of(job("emb", resource="nvidia.com/mig-1g.10gb", backoff=2, labels="kueue.x-k8s.io/queue-name: q"))
    live = make_policy("gpufleet", m)
    policy = KueuePolicy(m, live.cluster, mig_resize=False)
    policy.submit(emb.workload, 0.0)
    policy.cycle(0.0)
    pod = emb.workload.pods[0].key
    assert policy.cluster is not None
    placement = policy.cluster.placements[pod]
    lesson = policy.oom_at(emb.key, pod, placement.node, placement.grants)
    assert lesson is not None and lesson.mig == Resize("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb")
    # The queue opts in: the lesson offers the profile, which this policy leaves to its driver to ask for.
    assert lesson.offered
    assert lesson.text() == ("ran out of GPU memory on nvidia.com/mig-1g.10gb: its next attempt is offered "
                             "nvidia.com/mig-2g.20gb")
    policy.finish(emb.key, 60.0)
    policy.submit(emb.workload, 70.0)
    (second,) = policy.cycle(70.0).admitted
    assert second.usage.get("nvidia.com/mig-1g.10gb") == 1 and not second.notes


def test_what_ooms_taught_one_book_another_learns() -> None:
    (a, b) = [j.workload for j in jobs_of(job("a") + job("b"))]
    first = MemoryBook(None)
    assert not first.lessons()
    first.oom_on_shared(a, ["n/0"], 12 * GI)
    first.oom_on_mig(b, Resize("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"))
    first.observed(a, "team-a/x", 30 * GI)  # seen, not taught: read again from the pods
    second = MemoryBook(None)
    second.oom_on_shared(a, ["n/1"], 20 * GI)
    second.learn(first.lessons())
    assert second.avoid(a.key) == frozenset({"n/0", "n/1"})
    assert second.hint(a, a.pods[0].template) == 20 * GI + 1  # the larger floor of the two
    assert second.resizes(b.key) == (Resize("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"),)
    assert second.hint(b, b.pods[0].template) == 0


def test_a_job_resized_by_its_annotation_is_admitted_at_the_larger_profile_and_says_so() -> None:
    """``gpufleet.io/mig-resized`` on a Job (written by the live scheduler after an OOM, or set by its team at
    creation): its pods ask the larger profile everywhere the Job is read, and the admission says why."""
    m = _mig(("nvidia.com/mig-1g.10gb", "nvidia.com/mig-2g.20gb"), resize=None)
    (emb,) = jobs_of(job("emb", resource="nvidia.com/mig-1g.10gb", labels="kueue.x-k8s.io/queue-name: q",
                         annotations='    gpufleet.io/mig-resized: "nvidia.com/mig-1g.10gb=nvidia.com/mig-2g.20gb"'))
    policy = make_policy("gpufleet", m)
    policy.submit(emb.workload, 0.0)
    (admitted,) = policy.cycle(0.0).admitted
    assert admitted.usage.get("nvidia.com/mig-2g.20gb") == 1 and "nvidia.com/mig-1g.10gb" not in admitted.usage
    assert admitted.notes == ["its pods ask the MIG profiles its Job names after an out-of-memory (gpufleet.io/mig-"
                              "resized: nvidia.com/mig-1g.10gb=nvidia.com/mig-2g.20gb)"]
