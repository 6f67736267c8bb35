"""The dashboard on a live cluster (kmock's API over real HTTP): fed by the scheduler's informer cache and world,
it never writes, and a page in Chromium updates by itself, without a reload, when an object changes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import kmock
import pytest
from kube_apisim import ApiSim
from live_env import FAST_INFORMERS, NS, cluster_queue, flavor, local_queue, node, pod, stamp, wait_until
from tests.conftest import REPO
from tests.web.helpers import browser_page, get, screenshot, serving

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.web.server import Dashboard
from gpufleet.web.source_live import LiveSource

WRITES = ("POST", "PUT", "PATCH", "DELETE")


def _unhealthy_node(name: str) -> dict[str, object]:
    obj = node(name, gpus=4)
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    inventory = json.loads(meta["annotations"]["gpufleet.io/gpus"])
    inventory["gpus"][3]["health"] = "Unhealthy"
    meta["annotations"]["gpufleet.io/gpus"] = json.dumps(inventory)
    return obj


def _populate(apisim: ApiSim) -> None:
    apisim.create(r.NODES, _unhealthy_node("gpu-a"))
    apisim.create(r.RESOURCE_FLAVORS, flavor())
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("team-a", 4))
    apisim.create(r.LOCAL_QUEUES, local_queue("team-a", "team-a"))
    apisim.create(r.PODS, pod("running", 2, queue="team-a", node_name="gpu-a"))
    for i in range(3):  # a gang of 3 x 4 GPUs: more than the quota and the node
        apisim.create(r.PODS, pod(f"big-{i}", 4, queue="team-a", group="big", group_size=3))


@pytest.fixture
def live(apisim: ApiSim) -> Iterator[Dashboard]:
    _populate(apisim)
    client = KubeClient(host=apisim.url, timeout=5.0, user_agent="gpufleet-dashboard-test")
    source = LiveSource(client, informer_options=FAST_INFORMERS, min_interval=0.05, owns_client=True)
    with serving(source) as dashboard:
        yield dashboard


def _no_writes(apisim: ApiSim) -> None:
    for res in apisim.types.values():
        view = apisim.kmock[kmock.resource(res.group, res.version, res.plural)]
        methods = apisim.harness.call(lambda v=view: {str(q.method.value) for q in v})
        assert not methods & set(WRITES), (res.key, methods)


def test_the_live_view_is_the_schedulers_world_and_nothing_is_written(apisim: ApiSim, live: Dashboard) -> None:
    fleet = get(live, "/api/fleet").json()
    [gpu_a] = fleet["nodes"]
    assert [g["healthy"] for g in gpu_a["gpus"]] == [True, True, True, False]
    holders = [s.get("holder") for g in gpu_a["gpus"] for s in g["slices"]]
    assert holders.count(f"{NS}/running") == 2
    assert fleet["pools"][0]["unhealthy"] == 1
    big = get(live, f"/api/workloads/{NS}/big").json()["workload"]
    assert big["status"] == "pending" and len(big["pods"]) == 3 and big["clusterQueue"] == "team-a"
    assert "insufficient quota" in big["reason"] or "nodes are available" in big["reason"], big["reason"]
    queues = get(live, "/api/queues").json()["clusterQueues"]
    [gpu_quota] = [q for q in queues[0]["quotas"] if q["resource"] == "nvidia.com/gpu"]
    assert (gpu_quota["usage"], gpu_quota["nominal"], queues[0]["pending"]) == ("2", "4", 1)
    overview = get(live, "/api/overview").json()
    assert overview["source"] == "live" and any("queues from gpufleet" in n for n in overview["notes"])
    _no_writes(apisim)


def test_preemption_history_comes_from_the_schedulers_events(apisim: ApiSim, live: Dashboard) -> None:
    apisim.create(r.EVENTS, {
        "metadata": {"name": "big-0.preempted", "namespace": NS}, "reason": "Preempted",
        "eventTime": "2026-01-01T10:00:00.000000Z", "regarding": {"kind": "Pod", "namespace": NS, "name": "big-0"},
        "note": "Preempted by ml/urgent: InClusterQueue", "type": "Normal", "action": "Preempting"})
    wait_until(lambda: bool(get(live, f"/api/workloads/{NS}/big").json()["workload"]["preemptions"]),
               what="the preemption in the workload's history")
    [entry] = get(live, f"/api/workloads/{NS}/big").json()["workload"]["preemptions"]
    assert entry == {"when": "2026-01-01T10:00:00.000000Z", "preemptor": "ml/urgent", "reason": "InClusterQueue"}


def test_a_page_updates_without_a_reload_when_the_cluster_changes(apisim: ApiSim, live: Dashboard) -> None:
    with browser_page() as page:
        page.goto(live.url + "/fleet")
        page.wait_for_selector('svg.gpu rect.slice[data-holder="ml/running"]')
        page.wait_for_function("() => document.getElementById('updated').classList.contains('live')")
        page.evaluate("() => { window.sameDocument = true; }")
        before = int(page.locator("#updated").get_attribute("data-version"))
        apisim.create(r.PODS, pod("arrived", 1, queue="team-a", node_name="gpu-a", created=stamp()))
        page.wait_for_selector('svg.gpu rect.slice[data-holder="ml/arrived"]')
        assert page.evaluate("() => window.sameDocument") is True  # the same document: no reload
        assert int(page.locator("#updated").get_attribute("data-version")) > before
        screenshot(page, "live")
        # A deleted pod leaves the page the same way.
        apisim.delete(r.PODS, NS, "running")
        page.wait_for_function("() => !document.querySelector('svg.gpu rect.slice[data-holder=\"ml/running\"]')")
        assert page.evaluate("() => window.sameDocument") is True
        assert page.errors == [], page.errors
        assert all(url.startswith(live.url + "/") for url in page.requested)
    _no_writes(apisim)


def test_the_command_serves_a_cluster_from_a_kubeconfig(apisim: ApiSim, tmp_path: Path) -> None:
    _populate(apisim)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": apisim.url}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    proc = subprocess.Popen([sys.executable, "-m", "gpufleet.cli.main", "dashboard", "--kubeconfig", str(kubeconfig),
                             "--address", "127.0.0.1:0"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "gpufleet dashboard of live source" in line, (line, proc.stderr.read() if proc.poll() else "")
        url = line.split(" at ", 1)[1].split("/ ", 1)[0]
        import httpx

        fleet = httpx.get(url + "/api/fleet", timeout=30.0).json()
        assert [n["name"] for n in fleet["nodes"]] == ["gpu-a"]
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0
    _no_writes(apisim)
