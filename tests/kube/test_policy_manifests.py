"""The NetworkPolicy (deploy/), the placement-annotation ValidatingAdmissionPolicy (deploy/admission-policy.yaml) and
the metrics RBAC (deploy/metrics-auth/), checked offline: valid for Kubernetes, wired to what they guard, the
chart rendering the same objects, and the policy's CEL evaluated (cel-python) on the requests it must refuse
and those it must let through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import kubernetes_validate
import pytest
import yaml
from test_deploy_manifests import K8S_VERSIONS, chart_values, deploy_docs, render_chart

from gpufleet.api.objects import GPU_MEMORY_USED_ANNOTATION
from gpufleet.k8s.annotations import PLACEMENT_ANNOTATIONS
from gpufleet.k8s.metrics_auth import METRICS_PATH

ROOT = Path(__file__).resolve().parents[2]
POLICY_FILE = ROOT / "deploy" / "admission-policy.yaml"
METRICS_AUTH_DIR = ROOT / "deploy" / "metrics-auth"
SCHEDULER = "system:serviceaccount:gpufleet-system:gpufleet-scheduler"
# ValidatingAdmissionPolicy is admissionregistration.k8s.io/v1 from Kubernetes 1.30.
VAP_VERSIONS = ("1.30", K8S_VERSIONS[-1])
Doc = dict[str, Any]


def docs_of(folder: Path) -> list[Doc]:
    return [d for f in sorted(folder.glob("*.yaml")) if f.name != "kustomization.yaml"
            for d in yaml.safe_load_all(f.read_text()) if d]


def one(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    [doc] = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


def policy_docs() -> list[Doc]:
    return [d for d in yaml.safe_load_all(POLICY_FILE.read_text()) if d]


@pytest.mark.parametrize("folder", [METRICS_AUTH_DIR])
def test_kustomization_lists_every_file(folder: Path) -> None:
    k = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert sorted(k["resources"]) == sorted(f.name for f in folder.glob("*.yaml") if f.name != "kustomization.yaml")


# --- NetworkPolicy ----------------------------------------------------------------------------------------------


def test_the_network_policy_opens_the_webhook_and_metrics_ports_only() -> None:
    docs = deploy_docs()
    policy = one(docs, "NetworkPolicy", "gpufleet-scheduler")
    deployment = one(docs, "Deployment", "gpufleet-scheduler")
    pod = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    [container] = pod["spec"]["containers"]
    ports = {p["name"] for p in container["ports"]}
    opened = {port["port"]: rule.get("from") for rule in policy["spec"]["ingress"] for port in rule["ports"]}
    assert set(opened) <= ports
    assert set(opened) == {"webhook", "metrics"}  # the health port is reached by the kubelet from the node only
    assert opened["webhook"] == []  # the API server is not a pod: the port is open to it wherever it is
    [scrapers] = opened["metrics"]
    assert scrapers == {"namespaceSelector": {"matchLabels": {"gpufleet.io/metrics-scraper": "true"}}}


@pytest.mark.parametrize("version", [K8S_VERSIONS[0], K8S_VERSIONS[-1]])
def test_the_chart_admits_only_the_api_server_to_the_webhook_when_the_values_give_its_addresses(version: str) -> None:
    peers = [{"ipBlock": {"cidr": "10.0.0.10/32"}}, {"ipBlock": {"cidr": "172.16.0.0/28"}}]
    [policy] = [d for d in render_chart(chart_values(networkPolicy__webhookFrom=peers))
                if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "gpufleet-scheduler"]
    kubernetes_validate.validate(policy, version, strict=True)
    opened = {port["port"]: rule.get("from") for rule in policy["spec"]["ingress"] for port in rule["ports"]}
    assert opened["webhook"] == peers
    assert opened["metrics"] == [{"namespaceSelector": {"matchLabels": {"gpufleet.io/metrics-scraper": "true"}}}]


def test_the_chart_can_leave_the_network_policy_out() -> None:
    def ours(values: dict[str, Any]) -> list[Doc]:
        return [d for d in render_chart(values) if d["kind"] == "NetworkPolicy"
                and d["metadata"]["name"] == "gpufleet-scheduler"]

    assert ours(chart_values())
    assert not ours(chart_values(networkPolicy__enabled=False))


# --- ValidatingAdmissionPolicy ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VAP_VERSIONS)
@pytest.mark.parametrize("kind", ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"])
def test_admission_policy_objects_are_valid_for_kubernetes(kind: str, version: str) -> None:
    kubernetes_validate.validate(one(policy_docs(), kind), version, strict=True)


def test_the_binding_enforces_the_policy() -> None:
    docs = policy_docs()
    policy, binding = one(docs, "ValidatingAdmissionPolicy"), one(docs, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    assert policy["spec"]["failurePolicy"] == "Fail"
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    covered = {(res, op) for rule in rules for res in rule["resources"] for op in rule["operations"]}
    assert covered == {("pods", "CREATE"), ("pods", "UPDATE"), ("pods/status", "CREATE"), ("pods/status", "UPDATE"),
                       ("pods/binding", "CREATE")}


class Policy:
    """The policy's variables and validations, compiled with cel-python and evaluated as the API server does
    (variables first, by name; then every validation must be true)."""

    def __init__(self, doc: Doc) -> None:
        env = celpy.Environment()
        self.variables = [(v["name"], env.program(env.compile(v["expression"]))) for v in doc["spec"]["variables"]]
        self.validations = [env.program(env.compile(v["expression"])) for v in doc["spec"]["validations"]]

    def admits(self, operation: str, user: str, obj: Doc, old: Doc | None = None, *,
               extra: dict[str, list[str]] | None = None) -> bool:
        user_info: Doc = {"username": user}
        if extra is not None:
            user_info["extra"] = extra
        subresource = "binding" if obj.get("kind") == "Binding" else ""
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(obj), "oldObject": celpy.json_to_cel(old),
            "request": celpy.json_to_cel({"operation": operation, "userInfo": user_info,
                                          "subResource": subresource}),
        }
        variables: dict[str, Any] = {}
        for name, program in self.variables:
            activation["variables"] = celpy.json_to_cel({}) if not variables else celpy.celtypes.MapType(variables)
            variables[celpy.celtypes.StringType(name)] = program.evaluate(activation)
        activation["variables"] = celpy.celtypes.MapType(variables)
        return all(bool(program.evaluate(activation)) for program in self.validations)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy(one(policy_docs(), "ValidatingAdmissionPolicy"))


def test_the_policy_guards_every_placement_annotation(policy: Policy) -> None:
    [program] = [p for n, p in policy.variables if n == "placementKeys"]
    assert sorted(str(k) for k in program.evaluate({})) == sorted(PLACEMENT_ANNOTATIONS)


def test_the_policy_names_the_scheduler_of_deploy() -> None:
    sa = one(deploy_docs(), "ServiceAccount", "gpufleet-scheduler")["metadata"]
    expression = next(v["expression"] for v in one(policy_docs(), "ValidatingAdmissionPolicy")["spec"]
                      ["variables"] if v["name"] == "isScheduler")
    assert f"'system:serviceaccount:{sa['namespace']}:{sa['name']}'" in expression


def pod(node: str | None = None, **annotations: str) -> Doc:
    meta: Doc = {"name": "p", "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    spec: Doc = {"containers": [{"name": "c"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def binding(**annotations: str) -> Doc:
    meta: Doc = {"name": "p", "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": "n0"}}


PLACED = {"gpufleet.io/node": "n0", "gpufleet.io/devices": '["GPU-a"]', "gpufleet.io/visible-devices": "GPU-a"}


@pytest.mark.parametrize("case, operation, user, obj, old, admitted", [
    ("a user creates a plain pod", "CREATE", "alice", pod(team="ml"), None, True),
    ("a user asks for a fraction", "CREATE", "alice", pod(**{"gpufleet.io/gpu-fraction": "0.5"}), None, True),
    ("a user presets the GPU", "CREATE", "alice", pod(**{"gpufleet.io/visible-devices": "GPU-b"}), None, False),
    ("a template carries a gang plan", "CREATE", "system:serviceaccount:kube-system:job-controller",
     pod(**{"gpufleet.io/gang-plan": "{}"}), None, False),
    ("a user changes the GPU", "UPDATE", "alice", pod(**{**PLACED, "gpufleet.io/visible-devices": "GPU-b"}),
     pod(**PLACED), False),
    ("a user removes the devices record", "UPDATE", "alice", pod(**{"gpufleet.io/node": "n0"}), pod(**PLACED), False),
    ("a user removes every annotation", "UPDATE", "alice", pod(), pod(**PLACED), False),
    ("a user adds a node record later", "UPDATE", "alice", pod(**{"gpufleet.io/node": "n1"}), pod(), False),
    ("a user edits another annotation", "UPDATE", "alice", pod(**PLACED, note="x"), pod(**PLACED), True),
    ("the kubelet updates status", "UPDATE", "system:node:n0", pod(**PLACED), pod(**PLACED), True),
    ("the scheduler binds with its intent", "CREATE", SCHEDULER, binding(**PLACED), None, True),
    ("another scheduler binds plainly", "CREATE", "system:kube-scheduler", binding(), None, True),
    ("someone else binds with an intent", "CREATE", "bob", binding(**PLACED), None, False),
    ("the scheduler may even edit (it does not)", "UPDATE", SCHEDULER, pod(**{"gpufleet.io/node": "n9"}),
     pod(**PLACED), True),
])
def test_the_policy_refuses_exactly_what_it_must(policy: Policy, case: str, operation: str, user: str, obj: Doc,
                                                  old: Doc | None, admitted: bool) -> None:
    assert policy.admits(operation, user, obj, old) is admitted, case


AGENT = "system:serviceaccount:gpufleet-node:gpufleet-node-agent"
USED = "gpufleet.io/gpu-memory-used"
ON_N0 = {"authentication.kubernetes.io/node-name": ["n0"]}


@pytest.mark.parametrize("case, operation, user, obj, old, extra, admitted", [
    ("the agent writes what a pod on its node uses", "UPDATE", AGENT, pod("n0", **{USED: "20Gi"}), pod("n0"),
     ON_N0, True),
    ("the agent raises it", "UPDATE", AGENT, pod("n0", **{USED: "30Gi"}), pod("n0", **{USED: "20Gi"}), ON_N0, True),
    ("the agent writes a pod of another node", "UPDATE", AGENT, pod("n1", **{USED: "20Gi"}), pod("n1"), ON_N0,
     False),
    ("the agent writes a pod that is not bound", "UPDATE", AGENT, pod(**{USED: "20Gi"}), pod(), ON_N0, False),
    ("an agent token without the node claim", "UPDATE", AGENT, pod("n1", **{USED: "20Gi"}), pod("n1"), None, True),
    ("the agent creates a pod", "CREATE", AGENT, pod("n0"), None, ON_N0, False),
    ("a user lowers it", "UPDATE", "alice", pod("n0", **{USED: "1Mi"}), pod("n0", **{USED: "20Gi"}), None, False),
    ("a user removes it", "UPDATE", "alice", pod("n0"), pod("n0", **{USED: "20Gi"}), None, False),
    ("a template carries it", "CREATE", "system:serviceaccount:kube-system:job-controller", pod(**{USED: "1Mi"}),
     None, None, False),
    ("a user edits another annotation beside it", "UPDATE", "alice", pod("n0", **{USED: "20Gi"}, note="x"),
     pod("n0", **{USED: "20Gi"}), None, True),
    ("the agent may not touch a placement", "UPDATE", AGENT, pod("n0", **{**PLACED, "gpufleet.io/node": "n9"}),
     pod("n0", **PLACED), ON_N0, False),
])
def test_only_the_node_agent_writes_what_a_pod_uses_and_only_on_its_node(
        policy: Policy, case: str, operation: str, user: str, obj: Doc, old: Doc | None,
        extra: dict[str, list[str]] | None, admitted: bool) -> None:
    assert policy.admits(operation, user, obj, old, extra=extra) is admitted, case


def test_the_policy_names_the_node_agent_of_deploy() -> None:
    agent_docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "node-agent.yaml").read_text()) if d]
    sa = one(agent_docs, "ServiceAccount")["metadata"]
    expression = next(v["expression"] for v in one(policy_docs(), "ValidatingAdmissionPolicy")["spec"]
                      ["variables"] if v["name"] == "isNodeAgent")
    assert expression.endswith(f"'system:serviceaccount:{sa['namespace']}:{sa['name']}'")
    assert next(v["expression"] for v in one(policy_docs(), "ValidatingAdmissionPolicy")["spec"]["variables"]
                if v["name"] == "usedKey") == f"'{GPU_MEMORY_USED_ANNOTATION}'"


def test_the_chart_renders_the_policy_by_default_for_its_namespace() -> None:
    assert not [d for d in render_chart(chart_values(admissionPolicy__enabled=False))
                if d["kind"].startswith("ValidatingAdmissionPolicy")]
    rendered = {d["kind"]: d for d in render_chart(chart_values())
                if d["kind"].startswith("ValidatingAdmissionPolicy")}
    for doc in policy_docs():
        assert rendered[doc["kind"]] == doc
    [other] = [d for d in render_chart(chart_values(admissionPolicy__enabled=True), namespace="ops")
               if d["kind"] == "ValidatingAdmissionPolicy"]
    scheduler = next(v for v in other["spec"]["variables"] if v["name"] == "isScheduler")
    assert "'system:serviceaccount:ops:gpufleet-scheduler'" in scheduler["expression"]


# --- metrics RBAC -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_metrics_auth_objects_are_valid_for_kubernetes(version: str) -> None:
    for doc in docs_of(METRICS_AUTH_DIR):
        kubernetes_validate.validate(doc, version, strict=True)


def test_metrics_auth_grants_review_creation_and_a_reader_role() -> None:
    docs = docs_of(METRICS_AUTH_DIR)
    binding_ = one(docs, "ClusterRoleBinding")
    sa = one(deploy_docs(), "ServiceAccount", "gpufleet-scheduler")["metadata"]
    assert binding_["roleRef"]["name"] == "system:auth-delegator"
    assert binding_["subjects"] == [{"kind": "ServiceAccount", "name": sa["name"], "namespace": sa["namespace"]}]
    reader = one(docs, "ClusterRole")
    assert reader["rules"] == [{"nonResourceURLs": [METRICS_PATH], "verbs": ["get"]}]
    rendered = {(d["kind"], d["metadata"]["name"]): d for d in render_chart(chart_values(metricsAuth__enabled=True))}
    for doc in docs:
        assert rendered[(doc["kind"], doc["metadata"]["name"])] == doc
