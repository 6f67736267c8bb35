"""deploy/ and charts/gpufleet, checked offline.

* Every Kubernetes object is validated with kubernetes-validate (strict: unknown fields are errors) against
  the oldest and newest Kubernetes versions we target. The ServiceMonitor is a Prometheus Operator CRD kind
  that kubernetes-validate has no schema for, so its structure is checked by hand below.
* The CRDs' own OpenAPI schemas are exercised with jsonschema on the project's example objects, with
  unknown fields forbidden (the API server would silently prune them, losing user intent).
* The Helm chart is rendered without helm: its templates may only substitute values (a scalar as it is, a map
  or list with ``toJson``, whose JSON is YAML) and guard a whole file, which a tiny renderer here can do
  exactly; anything richer fails the test instead of being half-rendered.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

import gpufleet
from gpufleet.k8s import resources as r

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = ROOT / "charts" / "gpufleet"
CASESTUDY = ROOT / "src" / "gpufleet" / "data" / "casestudy"

def kube_version_floor() -> str:
    """The oldest Kubernetes the chart admits (Chart.yaml's kubeVersion ">=X.Y.0-0"), as "X.Y"."""
    spec = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    floor = re.fullmatch(r">=(\d+)\.(\d+)\.0-0", spec)
    assert floor, f"kubeVersion {spec!r}: expected '>=X.Y.0-0'"
    return f"{floor.group(1)}.{floor.group(2)}"


# Every manifest is validated against the oldest Kubernetes the chart admits and the newest schema known.
K8S_VERSIONS = (kube_version_floor(), kubernetes_validate.utils.latest_version())
NAMESPACE = "gpufleet-system"

Doc = dict[str, Any]


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster


@functools.cache
def _parse(path: Path) -> tuple[Doc, ...]:
    return tuple(d for d in yaml.load_all(path.read_text(), Loader=_Loader) if d)


def load_docs(path: Path) -> list[Doc]:
    """Parsed documents; a fresh copy each call, so no test can change what another sees."""
    return copy.deepcopy(list(_parse(path)))


def manifest_files() -> list[Path]:
    return sorted(DEPLOY.glob("*.yaml")) + sorted((DEPLOY / "crds").glob("*.yaml"))


def deploy_docs() -> list[Doc]:
    return [d for f in manifest_files() if f.name != "kustomization.yaml" for d in load_docs(f)]


def crds() -> dict[str, Doc]:
    return {d["spec"]["names"]["kind"]: d for d in deploy_docs() if d["kind"] == "CustomResourceDefinition"}


def is_node_agent(doc: Doc) -> bool:
    """deploy/node-agent.yaml: its own namespace and RBAC, checked by tests/node/test_node_agent_manifests.py."""
    return bool(doc["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "node-agent"
                or (doc["kind"] == "Namespace" and doc["metadata"]["name"] == "gpufleet-node"))


def scheduler_docs() -> list[Doc]:
    return [d for d in deploy_docs() if not is_node_agent(d)]


def one(kind: str, name: str | None = None) -> Doc:
    [doc] = [d for d in scheduler_docs() if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    return doc


# --- schema validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("doc", [pytest.param(d, id=f"{d['kind']}/{d['metadata']['name']}") for d in deploy_docs()
                                 if d["kind"] != "ServiceMonitor"])
def test_manifest_is_valid_for_kubernetes(doc: Doc, version: str) -> None:
    kubernetes_validate.validate(doc, version, strict=True)


# Manifests `kubectl apply -k deploy/` leaves out, as the chart's defaults do (values.yaml: serviceMonitor).
OPT_IN = {"servicemonitor.yaml"}


def kustomized_docs() -> list[Doc]:
    """What ``kubectl apply -k deploy/`` applies."""
    return [d for f in load_docs(DEPLOY / "kustomization.yaml")[0]["resources"] for d in load_docs(DEPLOY / f)]


def test_kustomization_lists_every_manifest_but_the_opt_in_ones() -> None:
    listed = load_docs(DEPLOY / "kustomization.yaml")[0]["resources"]
    on_disk = [str(f.relative_to(DEPLOY)) for f in manifest_files() if f.name != "kustomization.yaml"]
    assert sorted(listed) == sorted(set(on_disk) - OPT_IN)
    assert set(on_disk) >= OPT_IN
    assert len(listed) == len(set(listed))


_PROM_DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                            r"(([0-9]+)s)?(([0-9]+)ms)?)$")


def test_service_monitor_structure_and_wiring() -> None:
    sm, svc = one("ServiceMonitor"), one("Service")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(sm) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(sm["spec"]) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"]  # no namespaceSelector needed
    labels = sm["spec"]["selector"]["matchLabels"]
    assert labels.items() <= svc["metadata"]["labels"].items()  # it selects our Service
    port_names = {p["name"] for p in svc["spec"]["ports"]}
    for endpoint in sm["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "scheme"}
        assert endpoint["port"] in port_names
        assert endpoint["path"].startswith("/")
        for key in ("interval", "scrapeTimeout"):
            assert _PROM_DURATION.match(endpoint[key]), endpoint[key]


# --- CRDs -------------------------------------------------------------------------------------------------


def test_a_crd_for_every_gpufleet_resource_type() -> None:
    ours = [res for res in vars(r).values() if isinstance(res, r.ResourceType) and res.group == r.GROUP]
    assert {res.kind for res in ours} == set(crds())
    for res in ours:
        crd = crds()[res.kind]
        assert crd["metadata"]["name"] == f"{res.plural}.{res.group}"
        assert crd["spec"]["group"] == res.group and crd["spec"]["names"]["plural"] == res.plural
        assert crd["spec"]["scope"] == ("Namespaced" if res.namespaced else "Cluster")
        [version] = crd["spec"]["versions"]
        assert (version["name"], version["served"], version["storage"]) == (r.VERSION, True, True)


@pytest.mark.parametrize("kind, has_status", [
    ("ClusterQueue", True), ("LocalQueue", True), ("Cohort", True),
    ("ResourceFlavor", False), ("WorkloadPriorityClass", False), ("NodePool", False),
])
def test_status_subresource_where_the_scheduler_writes_status(kind: str, has_status: bool) -> None:
    version = crds()[kind]["spec"]["versions"][0]
    assert ("status" in version.get("subresources", {})) == has_status
    assert ("status" in version["schema"]["openAPIV3Schema"]["properties"]) == has_status


def test_cluster_queue_status_fields() -> None:
    status = crds()["ClusterQueue"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert {"flavorsUsage", "pendingWorkloads", "admittedWorkloads", "conditions"} <= set(status["properties"])


def _walk(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), Mapping):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), Mapping):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", sorted(crds()))
def test_crd_schema_is_structural(kind: str) -> None:
    # The API server rejects non-structural schemas; these are the rules a hand-written schema breaks.
    schema = crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        int_or_string = node.get("x-kubernetes-int-or-string") is True
        assert "type" in node or int_or_string, f"{kind}{path}: no type"
        if int_or_string:
            assert node.get("anyOf") == [{"type": "integer"}, {"type": "string"}], f"{kind}{path}"
        assert not ("properties" in node and "additionalProperties" in node), f"{kind}{path}"
        if node.get("x-kubernetes-list-type") == "map":
            keys = node["x-kubernetes-list-map-keys"]
            assert set(keys) <= set(node["items"].get("required", [])), f"{kind}{path}: map keys must be required"


def strict(schema: Any) -> Any:
    """The schema with unknown fields forbidden wherever the API server would prune them."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    schema = crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft7Validator(strict(schema), format_checker=jsonschema.FormatChecker())


def as_gpufleet(doc: Doc) -> Doc:
    out = copy.deepcopy(doc)
    out["apiVersion"] = f"{r.GROUP}/{r.VERSION}"
    return out


def casestudy_objects() -> list[Doc]:
    docs = [d for f in sorted(CASESTUDY.glob("*.yaml")) for d in load_docs(f)]
    return [as_gpufleet(d) for d in docs if d["kind"] in crds()]


FULL_EXAMPLES: list[Doc] = [
    {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ResourceFlavor", "metadata": {"name": "h100"},
     "spec": {"nodeLabels": {"gpu": "h100"}, "topologyName": "racks",
              "nodeTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}},
    {"apiVersion": "gpufleet.io/v1alpha1", "kind": "ClusterQueue", "metadata": {"name": "research"},
     "spec": {"cohort": "company", "queueingStrategy": "StrictFIFO", "stopPolicy": "None",
              "namespaceSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["r"]}]},
              "flavorFungibility": {"whenCanBorrow": "TryNextFlavor", "whenCanPreempt": "Preempt"},
              "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerOrNewerEqualPriority",
                             "borrowWithinCohort": {"policy": "LowerPriority", "maxPriorityThreshold": 100}},
              "fairSharing": {"weight": "1.5"},
              "waitForPodsReady": {"enable": True, "timeout": "5m", "blockAdmission": False,
                                   "requeuingStrategy": {"timestamp": "Creation", "backoffBaseSeconds": 60,
                                                         "backoffMaxSeconds": 3600, "backoffLimitCount": 3}},
              "resourceGroups": [{"coveredResources": ["cpu", "nvidia.com/gpu"], "flavors": [
                  {"name": "h100", "resources": [
                      {"name": "cpu", "nominalQuota": "96", "borrowingLimit": 0, "lendingLimit": "48"},
                      {"name": "nvidia.com/gpu", "nominalQuota": 8}]}]}]},
     "status": {"pendingWorkloads": 2, "reservingWorkloads": 1, "admittedWorkloads": 1,
                "flavorsUsage": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": "8",
                                                                 "borrowed": "0"}]}],
                "fairSharing": {"weightedShare": 0},
                "conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit",
                                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}},
    {"apiVersion": "gpufleet.io/v1alpha1", "kind": "NodePool", "metadata": {"name": "a100"},
     "spec": {"count": 4, "namePrefix": "a100", "cpu": 64, "memory": "512Gi", "pods": 110,
              "gpu": {"model": "A100-SXM4-80GB", "count": 8, "migLayout": "3g.40gb@0,3g.40gb@4", "nvlink": "all"},
              "sharing": {"migStrategy": "mixed", "timeSlicing": {
                  "replicas": 4, "renameByDefault": True, "failRequestsGreaterThanOne": True,
                  "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
              "labels": {"pool": "a100"}, "taints": [{"key": "gpu", "effect": "NoSchedule"}],
              "topology": [{"nodeLabel": "topology.gpufleet.io/rack", "nodesPerDomain": 2},
                           {"nodeLabel": "topology.kubernetes.io/zone", "values": ["a", "b"]}]}},
    {"apiVersion": "gpufleet.io/v1alpha1", "kind": "NodePool", "metadata": {"name": "custom"},
     "spec": {"count": 0, "cpu": "8", "memory": "32Gi", "gpu": {"model": "V100M32", "count": 1, "memory": "32Gi"}}},
]


@pytest.mark.parametrize("doc", [pytest.param(d, id=f"{d['kind']}/{d['metadata']['name']}")
                                 for d in casestudy_objects() + FULL_EXAMPLES])
def test_examples_fit_the_crd_schemas_without_pruning(doc: Doc) -> None:
    errors = sorted(crd_validator(doc["kind"]).iter_errors(doc), key=str)
    assert not errors, [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def test_the_casestudy_covers_every_queue_kind() -> None:
    kinds = {d["kind"] for d in casestudy_objects()}
    assert {"ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "WorkloadPriorityClass", "NodePool"} <= kinds


def _bad(kind: str, spec: Any, **top: Any) -> Doc:
    doc: Doc = {"apiVersion": "gpufleet.io/v1alpha1", "kind": kind, "metadata": {"name": "x"}, **top}
    if spec is not None:
        doc["spec"] = spec
    return doc


@pytest.mark.parametrize("doc, field", [
    (_bad("ClusterQueue", {"queueingStrategy": "FIFO"}), "queueingStrategy"),
    (_bad("ClusterQueue", {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "lots"}]}]}]}), "nominalQuota"),
    (_bad("ClusterQueue", {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
        {"name": "f", "resources": [{"name": "cpu"}]}]}]}), "nominalQuota"),
    (_bad("ClusterQueue", {"cohort": "Not_A_Name"}), "cohort"),
    (_bad("ClusterQueue", {"preemption": {"withinClusterQueue": "Always"}}), "withinClusterQueue"),
    (_bad("ClusterQueue", {"cohortName": "a"}), "cohortName"),  # Kueue v1beta2 spelling: would be pruned
    (_bad("LocalQueue", {}), "clusterQueue"),
    (_bad("ResourceFlavor", {"nodeTaints": [{"key": "k"}]}), "effect"),
    (_bad("ResourceFlavor", {"nodeLabels": {str(i): "v" for i in range(9)}}), "nodeLabels"),
    (_bad("WorkloadPriorityClass", None), "value"),
    (_bad("WorkloadPriorityClass", None, value="high"), "value"),
    (_bad("NodePool", {"count": -1, "cpu": 1, "memory": "1Gi"}), "count"),
    (_bad("NodePool", {"count": 1, "cpu": 1}), "memory"),
    (_bad("NodePool", {"count": 1, "cpu": 1, "memory": "1Gi", "gpu": {"model": "A100"}}), "count"),
    (_bad("NodePool", {"count": 1, "cpu": 1, "memory": "1Gi", "sharing": {"migStrategy": "all"}}), "migStrategy"),
    (_bad("NodePool", {"count": 1, "cpu": 1, "memory": "1Gi",
                       "sharing": {"timeSlicing": {"replicas": 1}}}), "replicas"),
])
def test_crd_schemas_reject_invalid_objects(doc: Doc, field: str) -> None:
    errors = list(crd_validator(doc["kind"]).iter_errors(doc))
    assert errors
    assert any(field in str(list(e.absolute_path)) or field in e.message for e in errors), [e.message for e in errors]


# --- RBAC -------------------------------------------------------------------------------------------------


def rules(kind: str) -> list[dict[str, Any]]:
    return one(kind)["rules"]  # type: ignore[no-any-return]


def permissions(kind: str) -> set[tuple[str, str, str]]:
    return {(g, res, verb) for rule in rules(kind) for g in rule["apiGroups"] for res in rule["resources"]
            for verb in rule["verbs"]}


def test_every_rbac_rule_is_justified_by_a_comment() -> None:
    lines = (DEPLOY / "rbac.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("- apiGroups:"):
            assert lines[i - 1].lstrip().startswith("#"), f"rbac.yaml:{i + 1}: rule without a justification"


def test_rbac_has_no_wildcards_and_no_secrets() -> None:
    for kind in ("ClusterRole", "Role"):
        for rule in rules(kind):
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key]
            assert not {"secrets", "configmaps", "nodes/proxy"} & set(rule["resources"])


READ = ("get", "list", "watch")


def test_cluster_role_reads_exactly_what_the_informers_watch() -> None:
    granted = permissions("ClusterRole")
    # Kueue's AdmissionChecks are read with Kueue's other kinds (deploy/kueue/, test_kueue_manifests).
    watched = [*r.SCHEDULER_RESOURCES, *(res for res in r.WORKLOAD_RESOURCES if res.group != r.KUEUE_GROUP),
               *r.DRA_RESOURCES]
    for res in watched:
        for verb in READ:
            assert (res.group, res.plural, verb) in granted, (res.key, verb)
    reads = {(g, res) for g, res, verb in granted if verb in READ}
    assert reads == {(res.group, res.plural) for res in watched}


def test_cluster_role_writes_only_what_the_scheduler_produces() -> None:
    writes = {p for p in permissions("ClusterRole") if p[2] not in READ}
    assert writes == {
        ("", "pods/binding", "create"),  # carries the assignment annotations: no write on pods themselves
        ("", "pods/eviction", "create"),
        ("", "pods/status", "patch"),
        ("events.k8s.io", "events", "create"),
        ("gpufleet.io", "clusterqueues/status", "update"),
        ("gpufleet.io", "localqueues/status", "update"),
        ("gpufleet.io", "cohorts/status", "update"),
        # DRA: a claim's finalizer, then its allocation and reservedFor, before the Binding (kube-scheduler's way)
        ("resource.k8s.io", "resourceclaims", "update"),
        ("resource.k8s.io", "resourceclaims/status", "update"),
    }


def test_leader_election_role_is_limited_to_its_lease() -> None:
    role = one("Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert permissions("Role") == {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update")}
    named = [rule for rule in rules("Role") if "get" in rule["verbs"] or "update" in rule["verbs"]]
    config = yaml.safe_load(one("ConfigMap")["data"]["config.yaml"])
    assert all(rule["resourceNames"] == [config["leaderElection"]["leaseName"]] for rule in named)


def test_bindings_grant_the_roles_to_the_service_account() -> None:
    sa = one("ServiceAccount")
    subject = {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}
    for binding, role in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        b = one(binding)
        assert b["subjects"] == [subject]
        assert (b["roleRef"]["kind"], b["roleRef"]["name"]) == (role, one(role)["metadata"]["name"])


# --- Deployment wiring ------------------------------------------------------------------------------------


def test_deployment_runs_two_leader_electing_replicas() -> None:
    dep = one("Deployment")
    spec, pod = dep["spec"], dep["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert spec["replicas"] == 2
    assert container["command"] == ["gpufleet", "scheduler", "--scheduler-name", "gpufleet", "--config",
                                    "/etc/gpufleet/config.yaml", "--leader-elect"]
    assert spec["selector"]["matchLabels"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_probes_and_ports() -> None:
    dep = one("Deployment")
    [container] = dep["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert set(ports) == {"metrics", "health", "webhook"}
    config = yaml.safe_load(one("ConfigMap")["data"]["config.yaml"])
    assert config["metricsBindAddress"] == f":{ports['metrics']}"
    assert config["healthProbeBindAddress"] == f":{ports['health']}"
    assert config["webhook"]["bindAddress"] == f":{ports['webhook']}"
    webhook_svc = yaml.safe_load((ROOT / "deploy" / "webhook" / "service.yaml").read_text())
    assert webhook_svc["spec"]["ports"][0]["targetPort"] == ports["webhook"]
    svc = one("Service")
    assert svc["spec"]["selector"].items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    assert [(p["name"], p["targetPort"]) for p in svc["spec"]["ports"]] == [("metrics", "metrics")]


def test_config_volume_and_restricted_security() -> None:
    dep = one("Deployment")
    pod = dep["spec"]["template"]["spec"]
    [container] = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["config"]["configMap"]["name"] == one("ConfigMap")["metadata"]["name"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/etc/gpufleet"] == "config"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True and "/tmp" in mounts
    assert "cpu" not in container["resources"]["limits"]
    assert one("Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_everything_namespaced_lives_in_one_namespace() -> None:
    cluster_scoped = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                      "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    for doc in scheduler_docs():
        assert (doc["metadata"].get("namespace") == NAMESPACE) == (doc["kind"] not in cluster_scoped), doc["kind"]


# --- Helm chart, rendered without helm --------------------------------------------------------------------

_EXPR = re.compile(r"{{-?\s*(.*?)\s*-?}}")
_GUARD = re.compile(r"\A{{- if \.Values\.([A-Za-z0-9_.]+) }}\n(.*){{- end }}\n\Z", re.S)


class UnsupportedTemplate(ValueError):
    pass


def _lookup(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise UnsupportedTemplate(f"no value .Values.{dotted}")
        node = node[part]
    return node


def render(template: str, values: Mapping[str, Any], release_namespace: str, app_version: str) -> str:
    """Helm's output for templates that only substitute ``.Values.*`` (a scalar), ``toJson .Values.*`` (any
    value, as JSON: Helm's toJson is Go's json.Marshal, which parses to the same YAML value),
    ``.Release.Namespace`` and ``.Chart.AppVersion``, and may guard the whole file with one ``if .Values.*``;
    anything else raises."""
    guard = _GUARD.match(template)
    if guard:
        if not _lookup(values, guard.group(1)):
            return ""
        template = guard.group(2)

    def substitute(m: re.Match[str]) -> str:
        expr = m.group(0)
        if expr.startswith("{{-") or expr.endswith("-}}"):
            raise UnsupportedTemplate(f"whitespace trimming outside the file guard: {expr}")
        inner = m.group(1)
        if inner == ".Release.Namespace":
            return release_namespace
        if inner == ".Chart.AppVersion":
            return app_version
        as_json = re.fullmatch(r"toJson \.Values\.([A-Za-z0-9_.]+)", inner)
        if as_json:
            return json.dumps(_lookup(values, as_json.group(1)), separators=(",", ":"))
        if re.fullmatch(r"\.Values\.[A-Za-z0-9_.]+", inner):
            value = _lookup(values, inner[len(".Values."):])
            if isinstance(value, Mapping | list) or value is None:
                raise UnsupportedTemplate(f"{expr} is not a scalar")
            return str(value).lower() if isinstance(value, bool) else str(value)
        raise UnsupportedTemplate(f"unsupported template construct {expr}: use helm to render this chart")

    return _EXPR.sub(substitute, template)


def chart_values(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    for dotted, value in overrides.items():
        node = values
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    return values


def render_chart(values: Mapping[str, Any], namespace: str = NAMESPACE) -> list[Doc]:
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    docs: list[Doc] = []
    for template in sorted((CHART / "templates").glob("*.yaml")):
        text = render(template.read_text(), values, namespace, app_version)
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def _key(doc: Doc) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def test_chart_renders_exactly_the_deploy_manifests() -> None:
    rendered = sorted((d for d in render_chart(chart_values(serviceMonitor__enabled=True))
                       if d["kind"] != "Namespace"), key=_key)
    expected = sorted((d for d in deploy_docs()
                       if d["kind"] not in ("Namespace", "CustomResourceDefinition")), key=_key)
    assert [_key(d) for d in rendered] == [_key(d) for d in expected]
    for got, want in zip(rendered, expected, strict=True):
        assert got == want, _key(want)


def test_chart_defaults_render_what_kustomize_applies() -> None:
    rendered = sorted((d for d in render_chart(chart_values()) if d["kind"] != "Namespace"), key=_key)
    expected = sorted((d for d in kustomized_docs() if d["kind"] not in ("Namespace", "CustomResourceDefinition")),
                      key=_key)
    assert "ServiceMonitor" not in [d["kind"] for d in rendered]
    assert rendered == expected


def test_chart_values_reach_the_objects() -> None:
    docs = render_chart(chart_values(image__repository="registry.local/gf", image__tag="9.9", replicas=3,
                                     image__pullPolicy="Always", schedulerName="gpu-sched"), namespace="ops")
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    [container] = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.local/gf:9.9" and container["imagePullPolicy"] == "Always"
    assert dep["spec"]["replicas"] == 3
    assert container["command"][2:4] == ["--scheduler-name", "gpu-sched"]
    cluster_scoped = ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                      "ValidatingAdmissionPolicyBinding")
    namespaced = [d for d in docs if d["kind"] not in cluster_scoped and not is_node_agent(d)]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"ops"}
    [crb] = [d for d in docs if d["kind"] == "ClusterRoleBinding" and not is_node_agent(d)]
    assert crb["subjects"][0]["namespace"] == "ops"
    for doc in docs:
        if doc["kind"] != "ServiceMonitor":
            kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_chart_crds_are_the_deploy_crds() -> None:
    chart_crds = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert chart_crds == sorted(p.name for p in (DEPLOY / "crds").glob("*.yaml"))
    for name in chart_crds:
        assert (CHART / "crds" / name).read_bytes() == (DEPLOY / "crds" / name).read_bytes(), name


def test_chart_metadata_matches_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "gpufleet"
    assert chart["appVersion"] == gpufleet.__version__ == chart_values()["image"]["tag"]
    assert one("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":" + gpufleet.__version__)


@pytest.mark.parametrize("template", [
    "a: {{ include \"x\" . }}",
    "a: {{ .Values.image.tag | quote }}",
    "{{- range .Values.x }}\n{{- end }}\n",
    "a: {{- .Values.replicas }}",
    "a: {{ .Values.image }}",
    "a: {{ .Values.missing }}",
    "a: {{ toJson .Values.missing }}",
    "a: {{ toJson . }}",
    "a: {{ toJson .Values.image | nindent 2 }}",
])
def test_renderer_refuses_what_it_cannot_render_faithfully(template: str) -> None:
    with pytest.raises(UnsupportedTemplate):
        render(template, chart_values(), NAMESPACE, "0.1.0")


def test_chart_values_users_expect_reach_the_deployment() -> None:
    resources = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    tolerations = [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}}}
    config = "leaderElection:\n  leaseName: gpufleet-scheduler\nmetricsBindAddress: \":8080\"\n"
    docs = render_chart(chart_values(resources=resources, nodeSelector={"pool": "system"}, tolerations=tolerations,
                                     affinity=affinity, imagePullSecrets=[{"name": "regcred"}],
                                     priorityClassName="gpufleet-critical", extraArgs=["--log-level", "debug"],
                                     schedulerConfig=config))
    [dep] = [d for d in docs if d["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"] == resources and container["args"] == ["--log-level", "debug"]
    assert pod["nodeSelector"] == {"pool": "system"} and pod["tolerations"] == tolerations
    assert pod["affinity"] == affinity and pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["priorityClassName"] == "gpufleet-critical"
    [cm] = [d for d in docs if d["kind"] == "ConfigMap" and not is_node_agent(d)]
    assert cm["data"]["config.yaml"] == config
    for version in K8S_VERSIONS:
        for doc in (dep, cm):
            kubernetes_validate.validate(doc, version, strict=True)


def test_chart_default_scheduler_config_is_a_valid_settings_file(tmp_path: Path) -> None:
    from gpufleet.live.settings import load_settings

    path = tmp_path / "config.yaml"
    path.write_text(chart_values()["schedulerConfig"])
    settings = load_settings(str(path))
    assert settings.scheduler_name  # parsed, every field known (load_settings raises on an unknown one)
    assert chart_values()["schedulerConfig"] == one("ConfigMap")["data"]["config.yaml"]


def test_kube_version_floor_admits_what_the_manifests_use() -> None:
    webhooks = [w for f in sorted((DEPLOY / "webhook").glob("*.yaml")) for d in load_docs(f)
                if d["kind"] == "MutatingWebhookConfiguration" for w in d["webhooks"]]
    major, minor = (int(x) for x in kube_version_floor().split("."))
    if any("matchConditions" in w for w in webhooks):
        # Beta and on by default from 1.28; in 1.27 the API server drops the field (every pod reaches the webhook).
        assert (major, minor) >= (1, 28)
    if any("x-kubernetes-validations" in json.dumps(c) for c in crds().values()):
        assert (major, minor) >= (1, 25)
