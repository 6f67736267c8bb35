from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpufleet.api.manifests import load_manifest_text
from gpufleet.sim.openb import OpenbNode, read_pods
from gpufleet.sim.sources.generator import GeneratorError, draw, generate, parse_generator
from gpufleet.sim.sources.manifests import jobs_from_manifests
from gpufleet.sim.sources.openbtrace import openb_jobs, openb_nodes
from tests.sim.helpers import jobs_of

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: ns
  {created}
  labels: {labels}
  annotations: {annotations}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{nvidia.com/gpu: 1}}}}
---
"""


def _pod(name: str, annotations: str = "{}", created: str = "", labels: str = "{}") -> str:
    return POD.format(name=name, annotations=annotations, created=created, labels=labels)


def test_annotations_arrival_duration_utilization_memory() -> None:
    jobs = jobs_of(_pod("a", '{sim.gpufleet.io/arrival: "2h30m", sim.gpufleet.io/duration: "45m", '
                             'sim.gpufleet.io/gpu-utilization: "0.35", sim.gpufleet.io/gpu-memory-used: "20Gi", '
                             'sim.gpufleet.io/backoff-limit: "3"}'))
    (j,) = jobs
    assert (j.arrival, j.duration, j.backoff_limit, j.gang) == (9000.0, 2700.0, 3, False)
    p = j.profile("ns/a")
    assert (p.gpu_util, p.gpu_demand, p.memory_mib) == (0.35, None, 20 * 1024)
    assert j.workload.created == 9000.0  # queues order by the simulated creation


def test_arrival_from_creation_timestamps_relative_to_the_earliest() -> None:
    jobs = jobs_of(_pod("late", created='creationTimestamp: "2024-05-01T10:30:00Z"')
                   + _pod("early", created='creationTimestamp: "2024-05-01T10:00:00Z"')
                   + _pod("offset", '{sim.gpufleet.io/arrival: "5m"}'))
    assert {j.key: j.arrival for j in jobs} == {"ns/late": 1800.0, "ns/early": 0.0, "ns/offset": 300.0}
    assert {j.key: j.duration for j in jobs} == {"ns/late": None, "ns/early": None, "ns/offset": None}


def test_gang_defaults_to_several_pods_and_can_be_turned_off() -> None:
    group = "".join(
        _pod(f"w{i}", '{kueue.x-k8s.io/pod-group-total-count: "2"' + (', sim.gpufleet.io/gpu-memory-used: "1Gi"'
                                                                      if i else "") + "}",
             labels="{kueue.x-k8s.io/pod-group-name: g}") for i in range(2))
    (g,) = jobs_of(group)
    assert g.gang and g.workload.kind == "PodGroup"
    # pod-level annotations win over the group's (the first member's)
    assert g.profile("ns/w0").memory_mib is None and g.profile("ns/w1").memory_mib == 1024
    off = group.replace('"2"}', '"2", sim.gpufleet.io/gang: "false"}').replace(
        '"1Gi"}', '"1Gi", sim.gpufleet.io/gang: "false"}')
    (g2,) = jobs_of(off)
    assert not g2.gang


@pytest.mark.parametrize(("annotation", "field"), [
    ('{sim.gpufleet.io/duration: "soon"}', "sim.gpufleet.io/duration"),
    ('{sim.gpufleet.io/gpu-utilization: "1.5"}', "sim.gpufleet.io/gpu-utilization"),
    ('{sim.gpufleet.io/gpu-memory-used: "lots"}', "sim.gpufleet.io/gpu-memory-used"),
    ('{sim.gpufleet.io/gang: "maybe"}', "sim.gpufleet.io/gang"),
])
def test_a_malformed_annotation_is_an_error_with_file_and_line(annotation: str, field: str) -> None:
    m = load_manifest_text(_pod("ok") + _pod("bad", annotation), "jobs.yaml")
    jobs = jobs_from_manifests(m)
    assert [j.key for j in jobs] == ["ns/ok"]
    (e,) = m.problems.errors
    # line 17: where the second Pod document begins
    assert (e.file, e.line, e.name, e.field) == ("jobs.yaml", 17, "ns/bad", f"metadata.annotations.{field}")
    # An error stops the run (simulate exits 1): the message must not say the run goes on without the job.
    assert "left out" not in e.message and "nothing is simulated until it is fixed" in e.message


MINIMAL = {"apiVersion": "gpufleet.io/v1alpha1", "kind": "WorkloadGenerator", "metadata": {"name": "g"},
           "spec": {"classes": [{"name": "c", "arrival": {"ratePerHour": 2}}]}}


def test_generator_defaults() -> None:
    spec = parse_generator(MINIMAL)
    assert (spec.seed, spec.duration_s) == (0, 7 * 86400)
    c = spec.classes[0]
    assert (c.namespace, c.queue, c.priority_class, c.role, c.backoff_limit, c.cpu, c.memory) == (
        "c", None, None, "batch", 0, "1", "4Gi")
    draws = draw(spec)
    # 2/h over 7 days: 336 expected; a Poisson count is within 4 sigma (±73) of it.
    assert abs(len(draws) - 336) < 73
    assert {(d.pods, d.gpus_per_pod, d.duration, d.utilization, d.memory_mib) for d in draws} == {
        (1, 1, 3600.0, 1.0, None)}
    (job,) = generate(spec, "any")[:1]
    limits = job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": 1}
    assert job["metadata"]["annotations"]["sim.gpufleet.io/gang"] == "false"
    assert job["metadata"]["annotations"]["sim.gpufleet.io/gpu-demand"] == "1.0000"


def test_generator_is_deterministic_per_seed_and_scenarios_share_the_jobs() -> None:
    spec = parse_generator({**MINIMAL, "spec": {"seed": 3, "classes": [{
        "name": "c", "arrival": {"ratePerHour": 1}, "duration": {"distribution": "exponential", "mean": "2h"},
        "demand": {"after": {"resource": "nvidia.com/mig-3g.40gb", "count": 1}}}]}})
    a, b = generate(spec, "before"), generate(spec, "before")
    assert a == b
    after = generate(spec, "after")
    assert [j["metadata"] for j in after] == [j["metadata"] for j in a]
    assert after[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == 1
    assert generate(spec, "before", seed=4) != a


def test_generator_weekends_and_diurnal_shape_the_arrivals() -> None:
    spec = parse_generator({**MINIMAL, "spec": {"duration": "28d", "classes": [{
        "name": "c", "arrival": {"ratePerHour": 4, "weekendFactor": 0, "diurnal": {"amplitude": 1, "peakHour": 12}}}]}})
    times = np.array([d.arrival for d in draw(spec)])
    assert not np.any((times // 86400) % 7 >= 5)  # no arrivals on Saturdays and Sundays
    hours = (times % 86400) / 3600
    # rate ∝ 1 + cos(2π(h-12)/24): zero at midnight, twice the mean at noon
    assert np.mean((hours > 9) & (hours < 15)) > 3 * np.mean((hours < 3) | (hours > 21))


def test_generator_errors_name_the_field() -> None:
    bad = {**MINIMAL, "spec": {"classes": [{"name": "c", "arrival": {"ratePerHour": 1},
                                            "duration": {"distribution": "lognormal", "median": "soon"}}]}}
    with pytest.raises(GeneratorError, match=r"spec.classes\[0\].duration: .*'soon' is not a duration"):
        parse_generator(bad, "w.yaml")
    with pytest.raises(GeneratorError, match="ratePerHour"):
        parse_generator({**MINIMAL, "spec": {"classes": [{"name": "c"}]}})


HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"


def test_openb_rows_become_jobs_and_bad_rows_are_reported(tmp_path: Path) -> None:
    f = tmp_path / "pods.csv"
    f.write_text("\n".join([
        HEADER,
        "p0,4000,8192,1,1000,,LS,Running,100,700,100",  # 2: whole GPU, 600 s
        "p1,2000,4096,1,250,V100M32|G2,BE,Running,160,1160,160",  # 3: a quarter of a V100-32GB or G2
        "p2,2000,4096,2,1x00,,LS,Running,0,1,0",  # 4: unreadable
        "p3,1000,1024,0,0,,BE,Running,400,300,",  # 5: deleted before created
        "p4,1000,1024,0,0,,BE,Running,400,,",  # 6: no deletion: runs until the end
    ]) + "\n")
    rows, report = read_pods(f)
    notes: list[str] = []
    jobs = openb_jobs(rows, report, notes=notes)
    assert report.rows_read == 5 and report.rows_rejected == 2
    assert [int(p.split(":")[1]) for p in report.problems] == [4, 5]
    assert "deletion_time: 300 is before creation_time 400" in report.problems[1]
    by = {j.key: j for j in jobs}
    assert set(by) == {"openb/p0", "openb/p1", "openb/p4"}
    assert (by["openb/p0"].arrival, by["openb/p0"].duration) == (0.0, 600.0)
    assert (by["openb/p1"].arrival, by["openb/p1"].duration, by["openb/p1"].klass) == (60.0, 1000.0, "BE")
    d = by["openb/p1"].workload.pods[0].template.gpu
    assert (d.kind, d.milli, d.models) == ("fraction", 250, ("V100-32GB", "G2"))
    assert by["openb/p0"].workload.pods[0].template.requests == {"cpu": 4000, "memory": 8192 * 2**20,
                                                                  "nvidia.com/gpu": 1}
    assert by["openb/p4"].duration is None and notes


def test_openb_nodes_carry_their_model_and_pool() -> None:
    (t4, g2, cpu) = openb_nodes([OpenbNode("n0", 32000, 65536, 2, "T4"), OpenbNode("n1", 96000, 1 << 19, 8, "G2"),
                                 OpenbNode("n2", 64000, 1 << 18, 0, None)])
    assert (t4.pool, t4.labels["nvidia.com/gpu.product"], t4.allocatable["nvidia.com/gpu"]) == (
        "openb-T4", "Tesla-T4", 2)
    assert (g2.pool, g2.labels["nvidia.com/gpu.product"]) == ("openb-G2", "G2")
    assert cpu.pool == "openb-cpu" and "nvidia.com/gpu" not in cpu.allocatable
