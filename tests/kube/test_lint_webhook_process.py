"""The lint rules through the scheduler process itself: ``gpufleet scheduler --config FILE`` against kmock's API over
real HTTP, serving ``/validate`` over HTTPS with the certificate of its configuration, each rule's action (deny,
warn, off) read from that file, the rules that need the cluster judged against the process's informer cache."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kube_apisim import ApiSim
from live_env import WAIT_TIMEOUT, cluster_queue, flavor, local_queue, node, wait_until

from gpufleet.k8s import resources as r

REPO = Path(__file__).resolve().parents[2]
TLS = Path(__file__).parent / "webhook_tls"
JsonDict = dict[str, Any]
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}

# Each named rule's action differs from its default (error rules deny, the others warn), so the answers below can
# only come from this file.
CONFIG = {
    "schedulerName": "gpufleet",
    "metricsBindAddress": "127.0.0.1:0", "healthProbeBindAddress": "127.0.0.1:0", "cyclePeriod": "1s",
    "webhook": {"enabled": True, "bindAddress": "127.0.0.1:0", "certFile": str(TLS / "tls.crt"),
                "keyFile": str(TLS / "tls.key")},
    "lint": {"rules": {
        "gpu-model-unconstrained": "deny",  # a warning
        "gang-without-all-or-nothing": "deny",  # a warning
        "privileged-gpu-container": "warn",  # an error
        "hostpath-nvidia-devices": "off",  # an error
        "gpu-pod-without-cpu-memory-requests": "off",  # a warning
    }},
}


def container(gpus: int = 1, cpu: bool = True, **extra: Any) -> JsonDict:
    limits: JsonDict = {"nvidia.com/gpu": gpus, **({"cpu": "4", "memory": "16Gi"} if cpu else {})}
    return {"name": "main", "image": "pytorch/pytorch", "resources": {"limits": limits}, **extra}


def gpu_pod(name: str, ns: str = "dev", *, model: bool = True, **spec: Any) -> JsonDict:
    body: JsonDict = {"containers": [container()], **spec}
    if model:
        body["nodeSelector"] = H100
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": body}


def job(name: str, ns: str = "dev", parallelism: int = 1, resource: str = "nvidia.com/gpu") -> JsonDict:
    c = container()
    c["resources"]["limits"] = {resource: 1, "cpu": "4", "memory": "16Gi"}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns},
            "spec": {"parallelism": parallelism, "template": {"spec": {
                "restartPolicy": "Never", "nodeSelector": H100, "containers": [c]}}}}


class Process:
    """The scheduler process; its log lines (JSON, on standard error) gathered as they come."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "gpufleet.cli.main", "scheduler", *args], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.port: int | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "webhook_port" in record:
                self.port = int(record["webhook_port"])

    def log(self) -> str:
        return "".join(self.lines[-40:])


@pytest.fixture
def scheduler(apisim: ApiSim, tmp_path: Path) -> Iterator[Process]:
    for obj in (node("a100-0", model="A100-SXM4-80GB"), node("h100-0", model="H100-SXM5-80GB", labels=H100)):
        apisim.create(r.NODES, obj)
    apisim.create(r.RESOURCE_FLAVORS, flavor("gpu"))
    apisim.create(r.CLUSTER_QUEUES, cluster_queue("training", gpus=8))
    apisim.create(r.LOCAL_QUEUES, local_queue("training", "training", ns="ml"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": apisim.url}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    config = tmp_path / "scheduler.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    process = Process(["--kubeconfig", str(kubeconfig), "--config", str(config)])
    try:
        wait_until(lambda: process.port is not None or process.proc.poll() is not None, what="the webhook's port")
        assert process.port is not None, process.log()
        yield process
    finally:
        process.proc.terminate()
        process.proc.wait(WAIT_TIMEOUT)
    assert process.proc.returncode == 0, process.log()
    assert "Traceback" not in process.log()


def validate(process: Process, obj: JsonDict, uid: str = "uid-1") -> JsonDict:
    api_version = obj["apiVersion"]
    group, _, version = api_version.rpartition("/")
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": group, "version": version, "kind": obj["kind"]},
                        "operation": "CREATE", "namespace": obj["metadata"]["namespace"], "object": obj}}
    # As the API server calls it: HTTPS, the server's certificate checked against the caBundle.
    with httpx.Client(verify=ssl.create_default_context(cafile=str(TLS / "tls.crt"))) as client:
        answer = client.post(f"https://127.0.0.1:{process.port}/validate", json=body, timeout=10.0)
    assert answer.status_code == 200, answer.text
    review: JsonDict = answer.json()
    assert review["response"]["uid"] == uid
    return review["response"]  # type: ignore[no-any-return]


def actions(response: JsonDict) -> dict[str, str]:
    """rule -> deny or warn, as the answer says them."""
    out = {w.split("]", 1)[0].lstrip("["): "warn" for w in response.get("warnings", [])}
    if not response["allowed"]:
        message = response["status"]["message"]
        for part in message.split(" | "):
            rule = part.split("[", 1)[1].split("]", 1)[0]
            out[rule] = "deny"
    return out


def eventually(process: Process, obj: JsonDict, expected: dict[str, str]) -> None:
    """The rules that need the cluster judge against the process's informer cache, filled (and the webhook's view
    of it rebuilt) shortly after it starts: ask again until the answer is the expected one."""
    seen: list[dict[str, str]] = []

    def answered() -> bool:
        seen.append(actions(validate(process, obj)))
        return seen[-1] == expected

    try:
        wait_until(answered, what=f"{expected} for {obj['metadata']['name']}")
    except AssertionError as e:
        raise AssertionError(f"last answer {seen[-1:]}; log:\n{process.log()}") from e


def test_the_scheduler_process_serves_the_rules_with_the_actions_of_its_configuration(scheduler: Process) -> None:
    # Rules that need the cluster: the nodes (two models) and the queues of the process's informer cache.
    eventually(scheduler, gpu_pod("anywhere", model=False), {"gpu-model-unconstrained": "deny"})
    eventually(scheduler, job("unqueued", ns="ml"), {"gpu-workload-without-queue": "deny"})  # its default
    # Rules of the object alone.
    assert actions(validate(scheduler, job("ddp", parallelism=4))) == {"gang-without-all-or-nothing": "deny"}
    privileged = gpu_pod("privileged")
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    answer = validate(scheduler, privileged)
    assert answer["allowed"] is True and actions(answer) == {"privileged-gpu-container": "warn"}
    # Not named in the file: the defaults (a warning warns, an error denies); no node time-slices its GPUs.
    assert actions(validate(scheduler, job("sliced", resource="nvidia.com/gpu.shared"))) == \
        {"time-sliced-gpu-for-training": "warn", "gpu-request-unsatisfiable": "deny"}
    # Off: a hostPath onto /dev/nvidia0 in a container with no CPU or memory request says nothing at all.
    devices = gpu_pod("devices", containers=[container(cpu=False)],
                      volumes=[{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}])
    assert validate(scheduler, devices) == {"uid": "uid-1", "allowed": True}
    assert validate(scheduler, gpu_pod("clean")) == {"uid": "uid-1", "allowed": True}


def test_the_scheduler_process_refuses_a_malformed_review_with_400(scheduler: Process) -> None:
    with httpx.Client(verify=ssl.create_default_context(cafile=str(TLS / "tls.crt"))) as client:
        answer = client.post(f"https://127.0.0.1:{scheduler.port}/validate", content=b"{\"kind\": 3}",
                             headers={"Content-Type": "application/json"}, timeout=10.0)
    assert answer.status_code == 400 and "AdmissionReview" in answer.json()["message"]
