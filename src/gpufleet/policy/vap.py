"""``gpufleet lint --export vap``: the rules that need nothing but the object, as ValidatingAdmissionPolicies.

Two policies, one per action: ``gpufleet-lint-deny`` holds the error rules (its binding denies), ``gpufleet-lint-warn``
the warnings and infos (its binding warns, as kubectl shows, and audits). Both match every workload kind the rules
judge, at the versions gpufleet reads, on CREATE and UPDATE. The variable ``templates`` lists the object's pod
templates, written from the same paths :mod:`.templates` follows for lint and the webhook; each validation is one
rule's :class:`~gpufleet.policy.cel.CelRule` over every template, unless the object's ``gpufleet.io/lint-ignore``
names the rule. Pods a controller owns are left out (``matchConditions``), as lint and the webhook leave them out.

Needs Kubernetes 1.30 (admissionregistration.k8s.io/v1) and its CEL ``quantity`` library.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import yaml

from gpufleet.api.workloadkinds.table import RULES as KIND_RULES
from gpufleet.api.workloadkinds.table import api_resources
from gpufleet.api.workloadkinds.templates import EACH_ITEM, EACH_VALUE, WORKLOAD_KINDS, Path, template_paths
from gpufleet.policy.cel import CelRule, kind_test
from gpufleet.policy.model import IGNORE_ANNOTATION, Rule
from gpufleet.policy.multipod import MULTI_POD
from gpufleet.policy.rules import RULES

POLICY_PREFIX = "gpufleet-lint"
ACTIONS: dict[str, list[str]] = {"deny": ["Deny"], "warn": ["Warn", "Audit"]}
LABELS = {"app.kubernetes.io/name": "gpufleet", "app.kubernetes.io/component": "lint-policy"}


def exportable(rules: Sequence[Rule] = RULES) -> list[Rule]:
    return [r for r in rules if r.cel is not None and r.needs is None]


def _has_chain(base: str, steps: Sequence[str]) -> list[str]:
    out, expr = [], base
    for step in steps:
        expr = f"{expr}.{step}"
        out.append(f"has({expr})")
    return out


def templates_of(path: Path) -> str:
    """CEL for the list of templates (maps with metadata and spec) at ``path`` in ``object``."""
    if not path:
        return "[object]"
    split = next((i for i, step in enumerate(path) if step in (EACH_ITEM, EACH_VALUE)), None)
    if split is None:
        guards = " && ".join(_has_chain("object", [*path, "spec"]))
        return f"({guards} ? [object.{'.'.join(path)}] : [])"
    outer, rest = path[:split], path[split + 1:]
    container = "object." + ".".join(outer)
    item = "x" if path[split] == EACH_ITEM else f"{container}[x]"
    inner = " && ".join(_has_chain(item, [*rest, "spec"]))
    picked = f"{item}.{'.'.join(rest)}" if rest else item
    guards = " && ".join(_has_chain("object", outer))
    return f"({guards} ? {container}.filter(x, {inner}).map(x, {picked}) : [])"


def judged_kinds() -> list[tuple[str, str]]:
    return sorted(k for k in WORKLOAD_KINDS if template_paths(*k))


def templates_variable() -> str:
    """CEL choosing the object's kind, then listing its templates."""
    expr = "[]"
    for group, kind in reversed(judged_kinds()):
        lists = " + ".join(templates_of(p) for p in template_paths(group, kind))
        expr = f"{kind_test(group, kind)} ? {lists} :\n  {expr}"
    return expr


def _ignored(rule_id: str) -> str:
    a = "object.metadata.annotations"
    return (f"(has({a}) && '{IGNORE_ANNOTATION}' in {a} && "
            f"{a}['{IGNORE_ANNOTATION}'].matches('(^|,)[ \\t]*{rule_id}[ \\t]*(,|$)'))")


def validation(rule: Rule) -> dict[str, Any]:
    c: CelRule = rule.cel
    check = c.ok if c.whole_object else f"variables.templates.all(t, {c.ok})"
    if c.kinds is not None:
        kinds = " || ".join(f"({kind_test(g, k)})" for g, k in sorted(c.kinds) if template_paths(g, k))
        check = f"!({kinds}) || {check}"
    name = ("object.kind + ' ' + (has(object.metadata.namespace) ? object.metadata.namespace + '/' : '') + "
            "(has(object.metadata.name) ? object.metadata.name : object.metadata.generateName)")
    text = f": {c.message}; fix: {rule.fix}".replace("'", "\\'")
    return {"expression": f"{_ignored(rule.id)} || {check}",
            "messageExpression": f"'[{rule.id}] ' + {name} + '{text}'",
            "reason": "Invalid"}


def _resource_rules() -> list[dict[str, Any]]:
    plural = {(g, k): p for g, _, p, k, _ in api_resources()}
    plural[("", "Pod")] = "pods"
    out = []
    for group, kind in judged_kinds():
        versions = ["v1"] if not group else list(KIND_RULES[(group, kind)].versions)
        out.append({"apiGroups": [group], "apiVersions": versions, "operations": ["CREATE", "UPDATE"],
                    "resources": [plural[(group, kind)]]})
    return out


CONTROLLED_POD = ("object.kind == 'Pod' && has(object.metadata.ownerReferences) && "
                  "object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller == true)")


def policies(rules: Sequence[Rule] = RULES) -> list[dict[str, Any]]:
    """The policies and their bindings, as documents."""
    docs: list[dict[str, Any]] = []
    chosen = exportable(rules)
    for action, severities in (("deny", ("error",)), ("warn", ("warning", "info"))):
        mine = [r for r in chosen if r.severity in severities]
        if not mine:
            continue
        name = f"{POLICY_PREFIX}-{action}"
        docs.append({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": dict(LABELS)},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": _resource_rules()},
                "matchConditions": [{"name": "not-a-controlled-pod", "expression": f"!({CONTROLLED_POD})"}],
                "variables": [{"name": "templates", "expression": templates_variable()}],
                "validations": [validation(r) for r in mine],
            },
        })
        docs.append({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": dict(LABELS)},
            "spec": {"policyName": name, "validationActions": ACTIONS[action],
                     "matchResources": {"namespaceSelector": {"matchExpressions": [
                         {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                          "values": ["kube-system", "gpufleet-system", "gpu-operator"]}]}}},
        })
    return docs


HEADER = """\
# gpufleet's GPU lint rules that need no knowledge of the cluster, as ValidatingAdmissionPolicies
# (`gpufleet lint --export vap`; Kubernetes 1.30+). Rules: {rules}.
# gpufleet-lint-deny refuses objects that break an error rule; gpufleet-lint-warn answers with warnings (kubectl
# prints them) and audit annotations. Silence a rule on one object with the annotation
# gpufleet.io/lint-ignore: RULE[,RULE]. The rules that need the cluster (GPU models, MIG offers, queues) are served
# by gpufleet's validating webhook instead: docs/lint.md.
# gang-without-all-or-nothing judges {gang_kinds}.
# Not TrainJob: its pods are described by its runtime (a TrainingRuntime or ClusterTrainingRuntime), another object,
# which a policy cannot read (`gpufleet lint` judges it when the runtime is in its input).
"""


def export_documents(rules: Sequence[Rule] = RULES) -> str:
    ids = ", ".join(r.id for r in exportable(rules))
    body = yaml.safe_dump_all(policies(rules), sort_keys=False, width=1 << 30, default_flow_style=False)
    gang = ", ".join(kind for _, kind in sorted(MULTI_POD))
    return HEADER.format(rules=ids, gang_kinds=gang) + "---\n" + body
