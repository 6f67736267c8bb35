"""End to end with a real Prometheus (Debian's prometheus package) on loopback: it scrapes a live scheduler
(against ApiSim) and a node agent (fake NVML, fake kubelet) with a configuration of this test's own, evaluates
gpufleet's alert rules (a copy without their ``for:`` waits), and the test reads series, labels and alerts
from its HTTP API. An XID written to the fake machine's events file makes the XID alerts fire."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from agent_env import running_agent
from kube_apisim import ApiSim
from live_env import FAST_INFORMERS, cluster_queue, fast_settings, flavor, local_queue, node, pod, wait_until
from machines import WHOLE_4_PAIRS, write_machine
from prom_tools import prometheus_tool

from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.live.scheduler import Scheduler

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpufleet-rules.yaml"
JsonDict = dict[str, Any]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Prometheus:
    """A prometheus server started by this test on a free loopback port, stopped (by its pid) at the end."""

    def __init__(self, folder: Path, targets: dict[str, int]) -> None:
        rules = yaml.safe_load(RULES.read_text())
        for group in rules["groups"]:
            for rule in group["rules"]:
                rule.pop("for", None)  # fire on the first evaluation that holds: the test waits for events
        (folder / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
                  "rule_files": [str(folder / "rules.yaml")],
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
                                     for job, port in targets.items()]}
        (folder / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.folder = folder
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        binary = prometheus_tool("prometheus")
        for _ in range(3):  # the port is free when picked; another process may take it before we bind it
            port = free_port()
            with (self.folder / "prometheus.log").open("wb") as log:
                self.process = subprocess.Popen(
                    [binary, f"--config.file={self.folder / 'prometheus.yml'}",
                     f"--storage.tsdb.path={self.folder / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                     "--log.level=warn"], stdout=log, stderr=log)
            self.url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.process.poll() is None:
                try:
                    if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)  # polling a server that is starting: there is no event to wait on
            self.stop()
        raise AssertionError(f"prometheus did not start: {(self.folder / 'prometheus.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def query(self, expr: str) -> list[JsonDict]:
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5.0).json()
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def series(self, match: str) -> list[JsonDict]:
        answer = httpx.get(f"{self.url}/api/v1/series", params={"match[]": match}, timeout=5.0).json()
        assert answer["status"] == "success", answer
        return list(answer["data"])

    def alerts(self, name: str) -> list[JsonDict]:
        answer = httpx.get(f"{self.url}/api/v1/alerts", timeout=5.0).json()
        return [a for a in answer["data"]["alerts"] if a["labels"]["alertname"] == name]


@pytest.fixture
def scheduler(module_apisim: ApiSim) -> Iterator[Scheduler]:
    client = KubeClient(host=module_apisim.url, timeout=5.0, user_agent="gpufleet-test/e2e")
    instance = Scheduler(client, fast_settings(), identity="e2e", leader_elect=False, informer_options=FAST_INFORMERS)
    instance.start()
    try:
        yield instance
    finally:
        instance.stop()
        client.close()


def test_prometheus_scrapes_both_exporters_and_fires_the_xid_alerts(
        module_apisim: ApiSim, module_sockdir: Path, scheduler: Scheduler, tmp_path: Path) -> None:
    apisim = module_apisim
    apisim.create(r.NODES, node("train-0", gpus=4, labels={"gpufleet.io/node-pool": "train"}))
    apisim.create(r.RESOURCE_FLAVORS, flavor("gpu"))
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("research", 2, cohort="lab"))
    apisim.create(r.LOCAL_QUEUES, local_queue("research", "research"))
    apisim.create(r.PODS, pod("small", gpus=1, queue="research"))
    apisim.create(r.PODS, pod("big", gpus=4, queue="research"))
    machine = write_machine(module_sockdir, WHOLE_4_PAIRS)
    with running_agent(apisim, module_sockdir, machine) as env:
        [agent_port] = env.agent.ports
        prometheus = Prometheus(tmp_path, {"gpufleet-scheduler": scheduler.servers[0].port,
                                           "gpufleet-node-agent": agent_port})
        prometheus.start()
        try:
            wait_until(lambda: len(prometheus.query("up == 1")) == 2, timeout=60, what="both targets up")
            # The GPU series carry dcgm-exporter's labels.
            wait_until(lambda: len(prometheus.series("DCGM_FI_DEV_GPU_UTIL")) == 4, timeout=60,
                       what="four GPUs' utilisation")
            labels = {s["gpu"]: s for s in prometheus.series("DCGM_FI_DEV_GPU_UTIL")}
            assert set(labels) == {"0", "1", "2", "3"}
            gpu0 = labels["0"]
            assert gpu0["UUID"] == env.uuids()[0] and gpu0["Hostname"] == env.node == "pcie-0"
            assert (gpu0["device"], gpu0["modelName"], gpu0["job"]) == (
                "nvidia0", "NVIDIA A100-SXM4-80GB", "gpufleet-node-agent")
            assert gpu0["DCGM_FI_DRIVER_VERSION"] and gpu0["pci_bus_id"] == "00000000:10:00.0"
            # The scheduler's queue and fleet series, under Kueue's label names.
            wait_until(lambda: prometheus.query('gpufleet_pending_workloads{reason="InsufficientQuota"}'),
                       timeout=60, what="the big pod pending for quota")
            [quota] = prometheus.query('gpufleet_cluster_queue_nominal_quota{resource="nvidia.com/gpu"}')
            assert {k: quota["metric"][k] for k in ("cohort", "cluster_queue", "flavor")} == {
                "cohort": "lab", "cluster_queue": "research", "flavor": "gpu"}
            assert float(quota["value"][1]) == 2
            [status] = prometheus.query('gpufleet_pending_workloads{reason="InsufficientQuota"}')
            assert status["metric"]["status"] == "inadmissible"
            [capacity] = prometheus.query('gpufleet_gpus_capacity{node_pool="train"}')
            assert capacity["metric"]["model"] == "A100-SXM4-80GB" and float(capacity["value"][1]) == 4
            wait_until(lambda: prometheus.query('gpufleet_cluster_queue_cost_per_hour{cluster_queue="research"} > 0'),
                       timeout=60, what="the bound small pod's cost")
            wait_until(lambda: prometheus.query(
                'gpufleet_admitted_workloads_total{cluster_queue="research"} == 1 and on (cluster_queue) '
                'gpufleet_admission_wait_time_seconds_count{cluster_queue="research"} == 1'),
                timeout=60, what="the small pod's admission counted with its wait")
            # No XID yet: the alert is quiet; one written to the machine's events file makes it fire.
            assert prometheus.alerts("GpuXidError") == []
            env.fault(0, 79)
            wait_until(lambda: any(a["state"] == "firing" for a in prometheus.alerts("GpuXidError")), timeout=60,
                       what="GpuXidError firing")
            [alert] = prometheus.alerts("GpuXidError")
            assert alert["labels"]["gpu"] == "0" and alert["labels"]["Hostname"] == "pcie-0"
            assert alert["labels"]["severity"] == "warning" and float(alert["value"]) == 79
            assert alert["annotations"]["summary"] == "XID 79 on GPU 0 of pcie-0"
            assert alert["annotations"]["runbook"]
            wait_until(lambda: any(a["state"] == "firing" for a in prometheus.alerts("GpuXidCritical")), timeout=60,
                       what="GpuXidCritical firing (79: fallen off the bus)")
            assert all(a["labels"]["gpu"] == "0" for a in prometheus.alerts("GpuXidCritical"))
            # The agent advertises the GPU Unhealthy to the kubelet: the device alert follows.
            wait_until(lambda: any(a["state"] == "firing" for a in prometheus.alerts("GpuDeviceUnhealthy")),
                       timeout=60, what="GpuDeviceUnhealthy firing")
            [unhealthy] = prometheus.alerts("GpuDeviceUnhealthy")
            assert (unhealthy["labels"]["resource"], float(unhealthy["value"])) == ("nvidia.com/gpu", 1)
        finally:
            prometheus.stop()
