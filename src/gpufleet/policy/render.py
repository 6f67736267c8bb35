"""Findings as documents: the issue's JSON shape and SARIF 2.1.0 (as kube-linter writes it, for GitHub code
scanning: one rule per check, each result at its object's file and line, with the object as a logical location).
The text form is the CLI's (it prints through the console helper)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gpufleet
from gpufleet.policy.model import Finding, Rule
from gpufleet.policy.rules import RULES

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
# The rules are documented in the repository (docs/lint.md), which has no published address to link to: the help
# text carries the rationale itself and names the section.
DOCS = "docs/lint.md"
_LEVEL = {"error": "error", "warning": "warning", "info": "note"}


def findings_document(findings: Sequence[Finding]) -> dict[str, Any]:
    return {"findings": [f.to_dict() for f in findings]}


def _uri(file: str | None) -> str | None:
    """A path relative to the working directory, with forward slashes (what code scanning resolves against the
    checkout); stdin and files outside it are kept as given."""
    if file is None or file.startswith("<"):
        return None
    path = Path(file)
    try:
        relative = path.resolve().relative_to(Path.cwd().resolve()) if path.is_absolute() else path
    except ValueError:
        relative = path
    return relative.as_posix().removeprefix("./") if os.sep == "/" else str(relative).replace(os.sep, "/")


def _rule(rule: Rule) -> dict[str, Any]:
    return {
        "id": rule.id,
        "name": "".join(part.capitalize() for part in rule.id.split("-")),
        "shortDescription": {"text": rule.title},
        "fullDescription": {"text": rule.rationale},
        "help": {"text": f"{rule.rationale} Fix: {rule.fix}.",
                 "markdown": f"{rule.rationale}\n\n**Fix:** {rule.fix}.\n\nSee `{DOCS}`, section `{rule.anchor}`."},
        "defaultConfiguration": {"level": _LEVEL[rule.severity]},
        "properties": {"tags": ["gpu", "kubernetes"] + ([f"anti-pattern-{rule.anti_pattern}"]
                                                         if rule.anti_pattern else [])},
    }


def _result(f: Finding, index: int) -> dict[str, Any]:
    ref = f.object
    logical = {"name": ref.name, "kind": ref.kind,
               "fullyQualifiedName": f"{ref.namespace}/{ref.kind}/{ref.name}" if ref.namespace
               else f"{ref.kind}/{ref.name}"}
    location: dict[str, Any] = {"logicalLocations": [logical]}
    uri = _uri(f.file)
    if uri is not None:
        physical: dict[str, Any] = {"artifactLocation": {"uri": uri}}
        if f.line:
            physical["region"] = {"startLine": f.line}
        location["physicalLocation"] = physical
    return {"ruleId": f.rule, "ruleIndex": index, "level": _LEVEL[f.severity],
            "message": {"text": f"{f.message}; fix: {f.fix}"}, "locations": [location]}


def sarif_document(findings: Sequence[Finding], rules: Sequence[Rule] = RULES) -> dict[str, Any]:
    index = {r.id: i for i, r in enumerate(rules)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "gpufleet", "version": gpufleet.__version__,
                                "rules": [_rule(r) for r in rules]}},
            "results": [_result(f, index[f.rule]) for f in findings],
        }],
    }
