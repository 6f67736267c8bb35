"""The one engine: every rule over every subject, minus what the object's ``gpufleet.io/lint-ignore`` silences and
what the cluster does not tell (a rule that needs the nodes says nothing without them)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpufleet.policy.cluster import ClusterView
from gpufleet.policy.model import SEVERITY_RANK, Finding, Rule, Severity, Subject
from gpufleet.policy.rules import RULES


def judge(subject: Subject, cluster: ClusterView, rules: Sequence[Rule] = RULES) -> list[Finding]:
    ignored = subject.ignored
    out = []
    for rule in rules:
        if rule.id in ignored or not cluster.knows(rule.needs):
            continue
        for hit in rule.check(subject, cluster):
            out.append(Finding(rule.id, rule.severity, subject.ref, subject.file, subject.line,
                               f"{subject.ref}: {hit.field}: {hit.message}", hit.fix))
    return out


def judge_all(subjects: Iterable[Subject], cluster: ClusterView, rules: Sequence[Rule] = RULES) -> list[Finding]:
    return [f for s in subjects for f in judge(s, cluster, rules)]


def reaches(findings: Iterable[Finding], threshold: Severity) -> bool:
    """Whether any finding is at least as severe as ``threshold`` (``--fail-on``)."""
    return any(SEVERITY_RANK[f.severity] >= SEVERITY_RANK[threshold] for f in findings)
