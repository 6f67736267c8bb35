"""The lint contract: what a rule is, what it judges (:class:`Subject` against a :class:`ClusterView`) and what it
says (:class:`Finding`). The rules (:mod:`.rules`), the engine, the three front ends and the renderers import this
module and nothing of each other's."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gpufleet.api.objects import ClusterQueue, LocalQueue, Pod, PodTemplate
from gpufleet.api.workloadkinds.model import WorkloadOwner
from gpufleet.api.workloadkinds.templates import RawTemplate

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")
SEVERITY_RANK: dict[str, int] = {"info": 0, "warning": 1, "error": 2}

# Per object: `gpufleet.io/lint-ignore: RULE[,RULE]` silences those rules on it.
IGNORE_ANNOTATION = "gpufleet.io/lint-ignore"

# What a rule needs to know beyond the object: "nodes" (the cluster's Nodes or NodePools), "queues" (its Kueue
# objects: LocalQueues and ClusterQueues), or nothing. Rules that need nothing can be exported as CEL.
Needs = Literal["nodes", "queues"]
JsonDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ObjectRef:
    kind: str
    namespace: str | None
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"

    def to_dict(self) -> JsonDict:
        return {"kind": self.kind, "namespace": self.namespace, "name": self.name}


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule's verdict on one object, in the issue's JSON shape (:meth:`to_dict`)."""

    rule: str
    severity: Severity
    object: ObjectRef
    file: str | None
    line: int | None
    message: str  # names the object and the field
    fix: str

    def to_dict(self) -> JsonDict:
        return {"rule": self.rule, "severity": self.severity, "object": self.object.to_dict(), "file": self.file,
                "line": self.line, "message": self.message, "fix": self.fix}


@dataclass(frozen=True, slots=True)
class Hit:
    """What a rule's check returns: the engine adds the rule, the object and where it is written."""

    field: str  # the field the finding is about, as kubectl writes it (spec.template.spec.containers[0])
    message: str
    fix: str


@dataclass(frozen=True, slots=True)
class PlannedPods:
    """Pods the object makes, as gpufleet's parsers plan them: ``count`` pods of ``template``."""

    name: str  # the pod set (replica type, replicated job, group...); the Pod's name for a Pod
    count: int
    template: PodTemplate


@dataclass(slots=True)
class Subject:
    """One object a rule judges: a workload (a Pod or an object of a workload kind) or a queue object.

    ``raw`` and ``templates`` are the object as written, for the rules that read containers; ``pods``, ``owner``,
    ``pod``, ``cluster_queue`` and ``local_queue`` are what gpufleet's parsers made of it (empty when the object
    did not parse: the rules that need them then say nothing)."""

    ref: ObjectRef
    group: str
    raw: Mapping[str, Any]
    file: str | None = None
    line: int | None = None
    templates: list[RawTemplate] = field(default_factory=list)
    pods: list[PlannedPods] = field(default_factory=list)
    largest_workload: int = 0  # pods in its largest unit of admission (a gang's size)
    owner: WorkloadOwner | None = None
    pod: Pod | None = None
    cluster_queue: ClusterQueue | None = None
    local_queue: LocalQueue | None = None

    @property
    def annotations(self) -> Mapping[str, Any]:
        meta = self.raw.get("metadata")
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        return annotations if isinstance(annotations, Mapping) else {}

    @property
    def ignored(self) -> frozenset[str]:
        """The rules the object's ``gpufleet.io/lint-ignore`` annotation silences."""
        text = self.annotations.get(IGNORE_ANNOTATION)
        if not isinstance(text, str):
            return frozenset()
        return frozenset(part.strip(" \t") for part in text.split(",") if part.strip(" \t"))

    @property
    def is_workload(self) -> bool:
        return self.pod is not None or self.owner is not None or bool(self.templates)


Check = Callable[[Subject, Any], Iterable[Hit]]  # (subject, ClusterView) -> hits


@dataclass(frozen=True, slots=True)
class Rule:
    """One lint check, written once: its identity and documentation, its Python check (lint and the webhook), and,
    when it needs nothing but the object, its CEL form (the exported ValidatingAdmissionPolicy)."""

    id: str
    severity: Severity
    title: str  # one line: what is wrong
    rationale: str  # why it matters, for docs/lint.md and SARIF's fullDescription
    fix: str  # the general fix, for the docs (each finding says its own)
    check: Check
    needs: Needs | None = None
    cel: Any = None  # a gpufleet.policy.cel.CelRule, or None when CEL cannot express it without the cluster
    anti_pattern: int | None = None  # the guide's anti-pattern it guards against

    @property
    def anchor(self) -> str:
        """The rule's heading anchor in docs/lint.md."""
        return self.id
