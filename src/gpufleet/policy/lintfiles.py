"""``gpufleet lint`` on files: read the workloads (and the cluster they are judged against), judge them.

The files are read once, by the same loader and parsers every command uses; the documents the rules judge are kept
as written beside what the parsers made of them. The cluster is the Nodes, NodePools and Kueue objects of
``--cluster`` and of the linted files themselves.

What the loader could not read is reported as it reports it, and makes the input *unreadable* (exit 2): such an
object is not judged. One exception: a GPU request without an equal limit, which the parser refuses as the API
server does, is a finding of ``gpu-request-without-equal-limit``, not an unreadable object, and its parse errors are
not said twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from gpufleet.api.errors import ManifestError, Problems
from gpufleet.api.manifests import ManifestBuilder
from gpufleet.api.source import Document, load_paths
from gpufleet.policy.cluster import ClusterView
from gpufleet.policy.engine import judge_all
from gpufleet.policy.model import Finding
from gpufleet.policy.subjects import judged, subjects

LIMITS_RULE = "gpu-request-without-equal-limit"


@dataclass(slots=True)
class LintRun:
    findings: list[Finding] = field(default_factory=list)
    problems: list[ManifestError] = field(default_factory=list)  # what the loader said, minus what a rule says
    unreadable: list[ManifestError] = field(default_factory=list)  # the errors among them

    @property
    def ok(self) -> bool:
        return not self.unreadable


def _covered(problem: ManifestError, findings: Sequence[Finding]) -> bool:
    """A parse error about an extended resource's request and limit, on an object the limits rule already judged."""
    if problem.severity != "error" or not problem.field or "resources" not in problem.field:
        return False
    return any(f.rule == LIMITS_RULE and f.file == problem.file and f.object.kind == problem.kind
               and problem.name in (f.object.name, f"{f.object.namespace}/{f.object.name}") for f in findings)


def lint_paths(files: Sequence[str], cluster_files: Sequence[str] = (), *, stdin: TextIO | None = None) -> LintRun:
    problems = Problems()
    builder = ManifestBuilder(problems)
    kept: list[Document] = []

    def take(doc: Document) -> None:
        if isinstance(doc.data, dict) and judged(doc.data):
            kept.append(doc)
        builder.add(doc)

    load_paths(files, problems, stdin=stdin, sink=take)
    # The cluster is read into the same bundle: a ClusterQueue of FILES may name a flavor of --cluster, a LocalQueue
    # a ClusterQueue. Only the objects of FILES are judged.
    load_paths(cluster_files, problems, sink=builder.add)
    manifests = builder.finish()
    cluster = ClusterView.from_manifests(manifests, described=bool(cluster_files))
    run = LintRun(judge_all(subjects(manifests, kept), cluster))
    run.problems = [p for p in problems.all if not _covered(p, run.findings)]
    run.unreadable = [p for p in run.problems if p.severity == "error"]
    return run
