"""``gpufleet validate``: check manifests, print every problem, exit 1 when one is an error."""

from __future__ import annotations

import sys
from typing import Any

import typer

from gpufleet.api.errors import LEFT_OUT, ManifestError
from gpufleet.api.manifests import Manifests, load_manifests
from gpufleet.cli import console
from gpufleet.cli.options import (
    EXIT_FINDINGS,
    Files,
    Namespace,
    Output,
    OutputFormat,
    Strict,
    examples,
    in_namespace,
    namespace_of,
)

EPILOG = examples(
    "# every problem of the case study's manifests, with file and line",
    "gpufleet validate examples/casestudy",
    "# from stdin, as a document for a CI step",
    "cat pod.yaml | gpufleet validate - -o json",
    "# only the problems of namespace research's objects (and of cluster-scoped ones: ClusterQueues, Nodes...)",
    "gpufleet validate examples/casestudy -n research",
    "# in CI: fail on anything gpufleet would leave out (unread kinds and fields, unimplemented Kueue features)",
    "gpufleet validate manifests/ --strict",
)


def load(files: list[str], strict: bool = False) -> Manifests:
    """Manifests of files, folders and ``-`` (stdin), every problem collected (see :mod:`gpufleet.api`);
    ``strict``: what the input has that gpufleet leaves out is an error."""
    m = load_manifests(files, stdin=sys.stdin)
    if strict:
        m.problems.escalate(LEFT_OUT)
    return m


def shown_problems(m: Manifests, namespace: str | None = None) -> list[ManifestError]:
    """The problems ``-n namespace`` shows: those of the namespace's objects and of everything not in a
    namespace (cluster-scoped objects, a document that does not parse); all of them without ``-n``."""
    return [p for p in m.problems.all if in_namespace(namespace, namespace_of(p.name))]


def print_problems(m: Manifests, namespace: str | None = None) -> None:
    """The problems (:func:`shown_problems`) on standard error, one line each, errors in red, warnings in yellow."""
    for p in shown_problems(m, namespace):
        if p.severity == "warning":
            console.warning(str(p))
        else:
            console.error(str(p))


def validate_document(m: Manifests, namespace: str | None = None) -> dict[str, Any]:
    """``-o json|yaml``: ``valid``, the counts and the exit code are the whole input's; under ``-n`` the problems
    are the namespace's (:func:`shown_problems`) and ``problemsInOtherNamespaces`` counts the rest."""
    problems = shown_problems(m, namespace)
    doc: dict[str, Any] = {"valid": not m.problems.errors, "documents": m.documents, "objects": m.counts(),
                           "simulationInputs": m.simulation_inputs, "problems": [p.to_dict() for p in problems]}
    if namespace is not None:
        doc["namespace"] = namespace
        doc["problemsInOtherNamespaces"] = len(m.problems.all) - len(problems)
    return doc


def validate(files: Files, namespace: Namespace = None, output: Output = OutputFormat.text,
             strict: Strict = False) -> None:
    """Check manifests: print every problem (file, line, object, field, fix) and what is valid; exit 1 when any
    problem is an error, 0 when there are only warnings. With -n, only the problems of that namespace's objects
    and of cluster-scoped ones are printed; the counts and the exit code stay the whole input's (an error in
    another namespace is said as a number)."""
    m = load(files, strict)
    if output.is_document:
        doc = validate_document(m, namespace)
        console.emit(doc, output.value)
        if m.problems.errors:
            raise typer.Exit(EXIT_FINDINGS)
        return
    print_problems(m, namespace)
    counts = ", ".join(f"{n} {k}" for k, n in m.counts().items()) or "no objects"
    if m.simulation_inputs:
        counts += f" (+{m.simulation_inputs} WorkloadGenerator for `gpufleet simulate`)"
    hidden = _elsewhere(m, namespace)
    if m.problems.errors:
        console.error(f"{len(m.problems.errors)} error(s) in {m.documents} document(s){hidden}; valid: {counts}")
        raise typer.Exit(EXIT_FINDINGS)
    warnings = f" ({len(m.problems.warnings)} warning(s){hidden})" if m.problems.warnings else ""
    console.say(console.styled("valid", "green") + f": {counts}{warnings}")


def _elsewhere(m: Manifests, namespace: str | None) -> str:
    """What -n left unprinted, as a clause of the summary line ("" when nothing was)."""
    shown = shown_problems(m, namespace)
    errors = len(m.problems.errors) - sum(p.severity == "error" for p in shown)
    warnings = len(m.problems.warnings) - sum(p.severity == "warning" for p in shown)
    if not errors and not warnings:
        return ""
    parts = [f"{n} {what}" for n, what in ((errors, "error(s)"), (warnings, "warning(s)")) if n]
    return f", {' and '.join(parts)} in namespaces other than {namespace} not shown"
