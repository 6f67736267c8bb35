"""``gpufleet validate``: check manifests, print every problem, exit 1 when one is an error."""

from __future__ import annotations

import sys
from typing import Any

import typer

from gpufleet.api.errors import LEFT_OUT
from gpufleet.api.manifests import Manifests, load_manifests
from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, Files, Output, OutputFormat, Strict, examples

EPILOG = examples(
    "# every problem of the case study's manifests, with file and line",
    "gpufleet validate examples/casestudy",
    "# from stdin, as a document for a CI step",
    "cat pod.yaml | gpufleet validate - -o json",
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


def print_problems(m: Manifests) -> None:
    """Every problem on standard error, one line each, errors in red and warnings in yellow."""
    for p in m.problems.all:
        if p.severity == "warning":
            console.warning(str(p))
        else:
            console.error(str(p))


def validate_document(m: Manifests) -> dict[str, Any]:
    return {"valid": not m.problems.errors, "documents": m.documents, "objects": m.counts(),
            "simulationInputs": m.simulation_inputs, "problems": [p.to_dict() for p in m.problems.all]}


def validate(files: Files, output: Output = OutputFormat.text, strict: Strict = False) -> None:
    """Check manifests: print every problem (file, line, object, field, fix) and what is valid; exit 1 when any
    problem is an error, 0 when there are only warnings."""
    m = load(files, strict)
    if output.is_document:
        doc = validate_document(m)
        console.emit(doc, output.value)
        if m.problems.errors:
            raise typer.Exit(EXIT_FINDINGS)
        return
    print_problems(m)
    counts = ", ".join(f"{n} {k}" for k, n in m.counts().items()) or "no objects"
    if m.simulation_inputs:
        counts += f" (+{m.simulation_inputs} WorkloadGenerator for `gpufleet simulate`)"
    if m.problems.errors:
        console.error(f"{len(m.problems.errors)} error(s) in {m.documents} document(s); valid: {counts}")
        raise typer.Exit(EXIT_FINDINGS)
    warnings = f" ({len(m.problems.warnings)} warning(s))" if m.problems.warnings else ""
    console.say(console.styled("valid", "green") + f": {counts}{warnings}")
