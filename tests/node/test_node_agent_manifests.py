"""deploy/node-agent.yaml and the chart's node-agent template: GPU nodes only, two host paths, RBAC limited to
patching Nodes, reading Pods and (for --dra) writing ResourceSlices, a command line the CLI accepts, inventory-only
by default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
import typer.core
import yaml
from test_deploy_manifests import chart_values, render_chart

from gpufleet.cli.node import node_app
from gpufleet.node.dpconfig import config_from_text

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "deploy" / "node-agent.yaml"
NAMESPACE = "gpufleet-node"

Doc = dict[str, Any]


def docs() -> list[Doc]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def one(kind: str) -> Doc:
    [doc] = [d for d in docs() if d["kind"] == kind]
    return doc


def daemonset_pod() -> Doc:
    return one("DaemonSet")["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def test_rbac_is_patching_nodes_reading_and_annotating_pods_writing_resource_slices_and_nothing_else() -> None:
    granted = {(g, res, verb) for rule in one("ClusterRole")["rules"] for g in rule["apiGroups"]
               for res in rule["resources"] for verb in rule["verbs"]}
    slices = {("resource.k8s.io", "resourceslices", verb)  # --dra only: the node's own DRA pool
              for verb in ("get", "list", "watch", "create", "update", "patch", "delete")}
    assert granted == {("", "nodes", "get"), ("", "nodes", "patch"),
                       ("", "pods", "get"), ("", "pods", "list"), ("", "pods", "watch"),
                       ("", "pods", "patch")} | slices  # (gpufleet.io/gpu-memory-used)
    lines = MANIFEST.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("- apiGroups:"):
            assert lines[i - 1].lstrip().startswith("#"), f"node-agent.yaml:{i + 1}: rule without a justification"
    binding = one("ClusterRoleBinding")
    sa = one("ServiceAccount")
    assert binding["roleRef"]["name"] == one("ClusterRole")["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    assert daemonset_pod()["serviceAccountName"] == sa["metadata"]["name"]


def test_everything_lives_in_its_own_privileged_namespace() -> None:
    namespace = one("Namespace")
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for doc in docs():
        if doc["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["kind"]


def test_gpu_nodes_only_and_only_the_host_paths_it_needs() -> None:
    pod = daemonset_pod()
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [(t["matchExpressions"][0]["key"], t["matchExpressions"][0]["values"]) for t in terms] == [
        ("nvidia.com/gpu.present", ["true"]), ("feature.node.kubernetes.io/pci-10de.present", ["true"])]
    host = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host == {"/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"}
    [container] = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    sc = container["securityContext"]
    assert "privileged" not in sc and sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True and "/tmp" in mounts


def _agent_command() -> typer.core.TyperCommand:
    group = typer.main.get_command(node_app)
    assert isinstance(group, typer.core.TyperGroup)
    command = group.commands["agent"]
    assert isinstance(command, typer.core.TyperCommand)
    return command


def test_the_command_line_is_one_the_agent_accepts_and_the_ports_match() -> None:
    [container] = daemonset_pod()["containers"]
    command = container["command"]
    assert command[:3] == ["gpufleet", "node", "agent"]
    ctx = _agent_command().make_context("agent", [*command[3:], "--node-name", "n"])
    assert ctx.params["config"] == "/etc/gpufleet-node/config.yaml"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ctx.params["metrics_bind_address"] == f":{ports['metrics']}" == ":9400"
    assert ctx.params["health_probe_bind_address"] == f":{ports['health']}"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    node_name = next(p for p in _agent_command().params if p.name == "node_name")
    assert node_name.envvar == "NODE_NAME"
    assert env["GPUFLEET_INVENTORY_ONLY"]["value"] == "true"  # safe next to NVIDIA's device plugin
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"


def test_the_shipped_device_plugin_config_is_valid() -> None:
    _, problems = config_from_text(one("ConfigMap")["data"]["config.yaml"], "node-agent.yaml")
    assert not problems.all
    mounts = {m["name"]: m["mountPath"] for m in daemonset_pod()["containers"][0]["volumeMounts"]}
    assert mounts["config"] == "/etc/gpufleet-node"


def test_chart_values_reach_the_node_agent() -> None:
    def agent_docs(**overrides: Any) -> list[Doc]:
        return [d for d in render_chart(chart_values(**overrides))
                if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "node-agent"
                or d["kind"] == "Namespace"]

    rendered = agent_docs()
    assert sorted((d["kind"], d["metadata"]["name"]) for d in rendered) == sorted(
        (d["kind"], d["metadata"]["name"]) for d in docs())
    full = agent_docs(nodeAgent__inventoryOnly=False, nodeAgent__namespace="gpu-agents",
                      nodeAgent__devicePluginConfig="version: v1\nflags: {migStrategy: mixed}\n")
    [ds] = [d for d in full if d["kind"] == "DaemonSet"]
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUFLEET_INVENTORY_ONLY"] == "false"
    assert {d["metadata"].get("namespace", d["metadata"]["name"]) for d in full
            if d["kind"] not in ("ClusterRole", "ClusterRoleBinding")} == {"gpu-agents"}
    [cm] = [d for d in full if d["kind"] == "ConfigMap"]
    assert yaml.safe_load(cm["data"]["config.yaml"])["flags"]["migStrategy"] == "mixed"
    assert agent_docs(nodeAgent__enabled=False) == []
    # The memory report off: the agent told so.
    quiet = agent_docs(nodeAgent__gpuMemoryReportPeriod=0)
    [ds] = [d for d in quiet if d["kind"] == "DaemonSet"]
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["GPUFLEET_GPU_MEMORY_REPORT_PERIOD"] == "0"
    # The host's PID namespace (a shared GPU read per pod from its processes): off unless asked for, in both.
    assert daemonset_pod()["hostPID"] is False and ds["spec"]["template"]["spec"]["hostPID"] is False
    [ds] = [d for d in agent_docs(nodeAgent__hostPID=True) if d["kind"] == "DaemonSet"]
    assert ds["spec"]["template"]["spec"]["hostPID"] is True
    assert _agent_command().make_context("agent", ["--node-name", "n"], default_map=None).params[
        "gpu_memory_report_period"] == 15.0
    period = next(p for p in _agent_command().params if p.name == "gpu_memory_report_period")
    assert period.envvar == "GPUFLEET_GPU_MEMORY_REPORT_PERIOD"
