"""GPU fractions against GPU quota (issue 15, item 4).

A fractional pod asks for thousandths of a GPU (``gpufleet.io/gpu-milli``). On a ClusterQueue that covers that
resource it is charged there; on one that covers ``nvidia.com/gpu`` but not ``gpu-milli`` it is charged its share
of ``nvidia.com/gpu`` ("500m" for half a GPU), as KAI charges fractions against GPU quota. Quota keeps
``nvidia.com/gpu`` in thousandths so that Kueue's integer arithmetic stays exact.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet.api.quantity import parse_quantity
from gpufleet.live.queuestatus import QueueCounts, cluster_queue_status
from gpufleet.scheduling.charges import charge, format_quota, to_quota
from tests.kueue.scenario import Scenario, ts
from tests.kueue.test_plan_cli import app, run_json, runner, write

GPU = "nvidia.com/gpu"
MILLI = "gpufleet.io/gpu-milli"

FLAVOR = """---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
"""


def queue(name: str, quotas: dict[str, int], cohort: str | None = None) -> str:
    resources = ", ".join(f"{{name: {r}, nominalQuota: {q}}}" for r, q in quotas.items())
    cohort_line = f"\n  cohort: {cohort}" if cohort else ""
    return f"""---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: {name}}}
spec:
  namespaceSelector: {{}}{cohort_line}
  resourceGroups:
  - coveredResources: [{", ".join(quotas)}]
    flavors: [{{name: default, resources: [{resources}]}}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: {name}, namespace: default}}
spec: {{clusterQueue: {name}}}
"""


def fraction_pod(name: str, queue_name: str, fraction: str, created: int = 0) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  creationTimestamp: "{ts(created)}"
  labels: {{kueue.x-k8s.io/queue-name: {queue_name}}}
  annotations: {{gpufleet.io/gpu-fraction: "{fraction}"}}
spec:
  containers: [{{name: main, image: cuda}}]
"""


def gpu_pod(name: str, queue_name: str, gpus: int, created: int = 0) -> str:
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  creationTimestamp: "{ts(created)}"
  labels: {{kueue.x-k8s.io/queue-name: {queue_name}}}
spec:
  containers: [{{name: main, image: cuda, resources: {{limits: {{nvidia.com/gpu: {gpus}}}}}}}]
"""


HALVES = "".join(fraction_pod(f"half-{i}", "gpus", "0.5", created=i) for i in range(3))


def test_half_a_gpu_costs_half_of_the_gpu_quota_where_gpu_milli_is_not_covered() -> None:
    s = Scenario(FLAVOR + queue("gpus", {GPU: 1}) + HALVES)
    s.until_stable()
    assert s.admitted() == {"half-0", "half-1"}
    assert s.usage("gpus", resource=GPU) == 1000  # two halves: the whole nominal quota of one GPU
    assert s.flavors_of("half-0") == {GPU: "default"}
    assert "insufficient unused quota for nvidia.com/gpu in flavor default, 500m more needed" in s.pending()["half-2"]


def test_a_queue_covering_gpu_milli_keeps_charging_it() -> None:
    s = Scenario(FLAVOR + queue("gpus", {GPU: 1, MILLI: 1000}) + HALVES + gpu_pod("whole", "gpus", 1, created=9))
    s.until_stable()
    assert s.admitted() == {"half-0", "half-1", "whole"}
    assert s.usage("gpus", resource=MILLI) == 1000 and s.usage("gpus", resource=GPU) == 1000
    assert s.flavors_of("half-0") == {MILLI: "default"}


def test_a_queue_covering_neither_says_what_to_cover() -> None:
    s = Scenario(FLAVOR + queue("cpus", {"cpu": 4}) + fraction_pod("half", "cpus", "0.5"))
    s.cycle()
    reason = s.pending()["half"]
    assert "resource gpufleet.io/gpu-milli unavailable in ClusterQueue" in reason
    assert "or on nvidia.com/gpu where the ClusterQueue covers only that" in reason


def test_fractions_borrow_in_thousandths_through_a_cohort() -> None:
    text = (FLAVOR + queue("a", {GPU: 1}, cohort="pool") + queue("b", {GPU: 1}, cohort="pool")
            + "".join(fraction_pod(f"q-{i}", "a", "0.25", created=i) for i in range(6)))
    s = Scenario(text)
    s.until_stable()
    assert len(s.admitted()) == 6 and s.usage("a", resource=GPU) == 1500  # 500m borrowed from b
    s.add(gpu_pod("b-whole", "b", 1, created=20))
    s.until_stable()
    assert "b-whole" in s.pending()  # b lent half of its only GPU, so a whole one no longer fits
    assert "500m more needed" in s.pending()["b-whole"]
    counts = QueueCounts(s.policy)
    status = cluster_queue_status("a", s.policy, counts, None, None, s.now)
    [usage] = status["flavorsUsage"]
    assert usage["resources"] == [{"name": GPU, "total": "1500m", "borrowed": "500m"}]


def test_whole_gpus_still_read_as_whole_numbers() -> None:
    s = Scenario(FLAVOR + queue("gpus", {GPU: 4}) + gpu_pod("five", "gpus", 5))
    s.cycle()
    assert "> maximum capacity (4)" in s.pending()["five"]
    assert "current podset request (5)" in s.pending()["five"]


def test_plan_says_which_resource_a_fraction_was_charged(tmp_path: Path) -> None:
    text = FLAVOR + queue("gpus", {GPU: 1}) + queue("milli", {MILLI: 1000}) + fraction_pod("on-gpu", "gpus", "0.5") \
        + fraction_pod("on-milli", "milli", "0.25")
    doc = run_json(write(tmp_path, text))
    cycles = doc["cycles"]
    assert isinstance(cycles, list)
    admitted = {a["workload"]: a for a in cycles[0]["admitted"]}
    assert admitted["default/on-gpu"]["resourceUsage"] == {GPU: "500m"}
    assert admitted["default/on-gpu"]["flavors"] == {GPU: "default"}
    assert admitted["default/on-milli"]["resourceUsage"] == {MILLI: "250"}
    assert doc["usage"] == {"gpus": {"default": {GPU: "500m"}}, "milli": {"default": {MILLI: "250"}}}


# ---- properties ----------------------------------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=10**9))
def test_quota_amounts_of_gpus_read_back_exactly(amount: int) -> None:
    # What plan and the queue status write parses back to the same number of thousandths.
    assert parse_quantity(format_quota(GPU, amount)) * 1000 == amount
    assert format_quota(GPU, to_quota(GPU, amount)) == str(amount)


@given(st.dictionaries(st.sampled_from(["cpu", GPU, MILLI, "memory"]), st.integers(min_value=1, max_value=10**6)),
       st.sets(st.sampled_from(["cpu", GPU, MILLI, "memory"])))
def test_charging_moves_thousandths_and_never_creates_or_loses_any(requests: dict[str, int],
                                                                   covered: set[str]) -> None:
    charged = charge(requests, covered)
    assert sum(charged.values()) == sum(requests.values())
    moved = MILLI in requests and GPU in covered and MILLI not in covered
    assert (MILLI in charged) == (MILLI in requests and not moved)
    assert charged.get(GPU, 0) == requests.get(GPU, 0) + (requests[MILLI] if moved else 0)
    assert {r: v for r, v in charged.items() if r not in (GPU, MILLI)} == {
        r: v for r, v in requests.items() if r not in (GPU, MILLI)}


# A workload: ("gpu", whole GPUs) or ("fraction", thousandths of one GPU).
Ask = tuple[str, int]
asks = st.lists(st.one_of(st.tuples(st.just("gpu"), st.integers(min_value=1, max_value=3)),
                          st.tuples(st.just("fraction"), st.integers(min_value=1, max_value=1000))),
                min_size=1, max_size=8)


def _snapshot(nominal: int, workloads: list[Ask], cover_milli: bool) -> str:
    quotas = {GPU: nominal, **({MILLI: 4000} if cover_milli else {})}
    text = FLAVOR + queue("gpus", quotas)
    for i, (kind, amount) in enumerate(workloads):
        if kind == "gpu":
            text += gpu_pod(f"w-{i}", "gpus", amount, created=i)
        else:
            text += fraction_pod(f"w-{i}", "gpus", f"{amount / 1000:.3f}", created=i)
    return text


def _cost(ask: Ask) -> int:
    kind, amount = ask
    return amount * 1000 if kind == "gpu" else amount


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=4), asks)
def test_gpu_quota_charges_wholes_and_fractions_exactly(nominal: int, workloads: list[Ask]) -> None:
    s = Scenario(_snapshot(nominal, workloads, cover_milli=False))
    s.until_stable()
    admitted = s.admitted()
    cost = {f"w-{i}": _cost(a) for i, a in enumerate(workloads)}
    used = s.usage("gpus", resource=GPU)
    assert used == sum(cost[w] for w in admitted)  # every thousandth charged, none twice
    assert used <= nominal * 1000
    free = nominal * 1000 - used
    # Nothing is released, so free quota only shrank since a pending workload was refused: it still does not fit.
    assert all(cost[w] > free for w in cost if w not in admitted)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(min_value=0, max_value=4), asks)
def test_with_gpu_milli_covered_fractions_leave_the_gpu_quota_alone(nominal: int, workloads: list[Ask]) -> None:
    s = Scenario(_snapshot(nominal, workloads, cover_milli=True))
    s.until_stable()
    admitted = s.admitted()
    wholes = sum(_cost(a) for i, a in enumerate(workloads) if a[0] == "gpu" and f"w-{i}" in admitted)
    fractions = sum(_cost(a) for i, a in enumerate(workloads) if a[0] == "fraction" and f"w-{i}" in admitted)
    assert s.usage("gpus", resource=GPU) == wholes
    assert s.usage("gpus", resource=MILLI) == fractions <= 4000


def test_plan_table_shows_the_amount_charged_next_to_each_flavor(tmp_path: Path) -> None:
    text = FLAVOR + queue("gpus", {GPU: 1}) + fraction_pod("on-gpu", "gpus", "0.5")
    result = runner.invoke(app, ["plan", write(tmp_path, text)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "nvidia.com/gpu=default (500m)" in result.stdout
