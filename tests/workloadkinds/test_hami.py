"""HAMi's shares read as HAMi and Kueue read them (review of issue 29): gpumem in MiB beyond a GPU-device count,
the ClusterQueue charged what the pod asks (nvidia.com/gpu, gpucores, gpumem) while placement packs the share on
one GPU, a share plus a gpufleet/KAI annotation refused for its real conflict, per-container shares, and errors
at the container's own field."""

from __future__ import annotations

from gpufleet.admission import webhook
from gpufleet.api.errors import LEFT_OUT
from gpufleet.gpu.catalog import DEFAULT_CATALOG
from gpufleet.scheduling.snapshot_plan import run_cycles
from tests.conftest import manifests
from tests.workloadkinds.test_peers import _HAMI, _ONE_GPU_NODE

_ONE_A100 = _ONE_GPU_NODE.replace("count: 2}", "count: 1}")
_EIGHT_GPUS = _ONE_GPU_NODE.replace("count: 2}", "count: 8}")
_FIELD = "spec.template.spec.containers[{}].resources.limits.{}"


def _jobs(source: str, n: int) -> str:
    """Kueue's HAMi sample as ``n`` one-pod Jobs (hami-job-0 ...)."""
    head, job = source.split("---\napiVersion: batch/v1", 1)
    job = job.replace("parallelism: 3", "parallelism: 1").replace("completions: 3", "completions: 1")
    return head + "".join("---\napiVersion: batch/v1" + job.replace("name: hami-job", f"name: hami-job-{i}")
                          for i in range(n))


def _admitted(source: str) -> tuple[list[str], dict[str, str]]:
    m = manifests(source)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    result = run_cycles(m, 1, until_stable=True)
    admitted = sorted(a.workload for c in result.cycles for a in c.decisions.admitted)
    return admitted, result.usage["hami-cq"]["hami-flavor"]


# ---- 1. gpumem is MiB, not a device count --------------------------------------------------------------------

def test_gpumem_above_4096_mib_is_read_and_bounded_by_the_largest_gpu() -> None:
    m = manifests(_HAMI.replace("nvidia.com/gpumem: 1024", "nvidia.com/gpumem: 40960") + _ONE_A100)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    gpu = m.controllers.owners[0].workloads[0].pod_sets[0].template.gpu
    assert (gpu.kind, gpu.milli, gpu.memory_mib) == ("fraction", 300, 40960)
    largest = max(DEFAULT_CATALOG, key=lambda g: g.memory_mib)
    over = manifests(_HAMI.replace("nvidia.com/gpumem: 1024", f"nvidia.com/gpumem: {largest.memory_mib + 1}"))
    (error,) = over.problems.errors
    assert f"at most {largest.memory_mib:,}" in error.message and largest.key in error.message
    assert error.field == _FIELD.format(0, "nvidia.com/gpumem")


# ---- 2. the ClusterQueue is charged what the pod asks ----------------------------------------------------------

def test_kueue_hami_sample_charges_gpu_and_gpucores_as_kueue_does() -> None:
    # Kueue's HAMi sample with quotas of 2 GPUs and 60 gpucores: of 5 pods of gpu:1, gpucores:30, gpumem:1024
    # Kueue admits 2 (each quota allows exactly two).
    source = _HAMI.replace("{name: nvidia.com/gpu, nominalQuota: 10}", "{name: nvidia.com/gpu, nominalQuota: 2}")
    source = source.replace("nvidia.com/gpucores, nominalQuota: 200", "nvidia.com/gpucores, nominalQuota: 60")
    admitted, usage = _admitted(_jobs(source, 5) + _EIGHT_GPUS)
    assert admitted == ["default/hami-job-0", "default/hami-job-1"]
    assert (usage["nvidia.com/gpu"], usage["nvidia.com/gpucores"], usage["nvidia.com/gpumem"]) == ("2", "60", "2048")
    assert "gpufleet.io/gpu-milli" not in usage


def test_a_memory_only_share_is_charged_its_gpumem() -> None:
    source = _HAMI.replace("            nvidia.com/gpucores: 30\n", "").replace(
        "nvidia.com/gpumem, nominalQuota: 20000", "nvidia.com/gpumem, nominalQuota: 2048")
    admitted, usage = _admitted(_jobs(source, 3) + _EIGHT_GPUS)
    assert len(admitted) == 2 and usage["nvidia.com/gpumem"] == "2048"


def test_shares_are_placed_on_one_gpu_not_on_the_nodes_allocatable() -> None:
    # Four 20 GiB shares on a one-GPU node: the node offers no gpucores or gpumem and one nvidia.com/gpu, yet
    # the four fit the one GPU's memory and compute (as HAMi packs them).
    source = _HAMI.replace("nvidia.com/gpumem: 1024", "nvidia.com/gpumem: 20000").replace(
        "nvidia.com/gpucores: 30", "nvidia.com/gpucores: 20").replace(
        "nvidia.com/gpumem, nominalQuota: 20000", "nvidia.com/gpumem, nominalQuota: 100000")
    admitted, _ = _admitted(_jobs(source, 4) + _ONE_A100)
    assert len(admitted) == 4


def test_a_share_on_a_clusterqueue_that_does_not_cover_it_is_refused_as_kueue_does() -> None:
    source = _HAMI.replace(", nvidia.com/gpucores, nvidia.com/gpumem]", "]").replace(
        "      - {name: nvidia.com/gpucores, nominalQuota: 200}\n", "").replace(
        "      - {name: nvidia.com/gpumem, nominalQuota: 20000}\n", "")
    m = manifests(source + _ONE_A100)
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    result = run_cycles(m, 1, until_stable=True)
    assert not any(c.decisions.admitted for c in result.cycles)
    (pending,) = result.cycles[-1].pending
    assert "nvidia.com/gpucores unavailable in ClusterQueue" in pending.reason


# ---- 3. a HAMi share and a gpufleet/KAI annotation ------------------------------------------------------------

def _hami_pod(annotations: dict[str, str], gpu: bool = True) -> dict[str, object]:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000} if gpu else {"nvidia.com/gpumem": 2000}
    return {"metadata": {"annotations": annotations}, "spec": {"schedulerName": "gpufleet", "containers": [
        {"name": "c", "resources": {"limits": limits}}]}}


def test_the_webhook_names_the_real_conflict_of_a_hami_share_and_an_annotation() -> None:
    for gpu in (True, False):  # with nvidia.com/gpu or without (HAMi's webhook would default it to 1)
        patch, why = webhook.mutate(_hami_pod({"gpu-memory": "2000"}, gpu), webhook.WebhookPolicy())
        assert patch is None and why is not None
        assert "HAMi share (nvidia.com/gpumem)" in why and "gpu-memory" in why and "whole GPUs" not in why
        # without the annotation the pod is HAMi's: nothing to do
        assert webhook.mutate(_hami_pod({}, gpu), webhook.WebhookPolicy()) == ([], None)


def test_the_parser_names_the_same_conflict_at_the_annotation() -> None:
    source = _HAMI.replace("  template:\n    spec:", "  template:\n    metadata:\n      annotations: "
                           "{gpu-fraction: \"0.5\"}\n    spec:")
    (error,) = manifests(source).problems.errors
    assert "HAMi share (nvidia.com/gpucores, nvidia.com/gpumem)" in error.message
    assert error.field == "spec.template.metadata.annotations.gpu-fraction"


# ---- 5. HAMi's shares are per container -----------------------------------------------------------------------

_TWO_CONTAINERS = _HAMI.replace("""            nvidia.com/gpu: 1
            nvidia.com/gpucores: 30
            nvidia.com/gpumem: 1024
""", """            nvidia.com/gpu: 1
            nvidia.com/gpumem: 2000
      - name: second
        image: ubuntu
        resources:
          limits:
            nvidia.com/gpu: 1
            nvidia.com/gpucores: GPUCORES
            nvidia.com/gpumem: 2000
""")


def test_two_containers_with_shares_are_counted_whole_with_a_warning_naming_them() -> None:
    m = manifests(_TWO_CONTAINERS.replace("GPUCORES", "30"))
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    gpu = m.controllers.owners[0].workloads[0].pod_sets[0].template.gpu
    assert (gpu.kind, gpu.count, gpu.memory_mib) == ("gpu", 2, 2000)  # not one share of 4000 MiB on 2 GPUs
    (warning,) = [w for w in m.problems.warnings if w.code == LEFT_OUT]
    assert "containers cuda, second each ask a HAMi share" in warning.message
    assert warning.field == "spec.template.spec.containers[1].resources"
    # whole GPUs in each container (no memory share): nothing is left out
    whole = manifests(_TWO_CONTAINERS.replace("GPUCORES", "30").replace("            nvidia.com/gpumem: 2000\n", ""))
    assert not whole.problems.errors and not whole.problems.warnings
    gpu = whole.controllers.owners[0].workloads[0].pod_sets[0].template.gpu
    assert (gpu.kind, gpu.count) == ("gpu", 2)


def test_hami_errors_point_at_the_containers_field() -> None:
    (error,) = manifests(_TWO_CONTAINERS.replace("GPUCORES", "130")).problems.errors
    assert "at most 100, got 130" in error.message
    assert error.field == _FIELD.format(1, "nvidia.com/gpucores")
