"""``gpufleet lint``: judge workload manifests against the GPU rules (docs/lint.md), or export the rules as
ValidatingAdmissionPolicies.

Exit codes, as the issue asks: 0 when no finding reaches ``--fail-on``, 1 when one does, 2 when some input could
not be read (a file, a document, an object gpufleet's parsers refuse: it was not judged) or the command line is
wrong."""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer

from gpufleet.cli import console
from gpufleet.cli.options import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, Namespace, examples, in_namespace, usage_error
from gpufleet.policy.engine import reaches
from gpufleet.policy.lintfiles import LintRun, lint_paths
from gpufleet.policy.model import Finding
from gpufleet.policy.render import findings_document, sarif_document

EPILOG = examples(
    "# the workloads of a folder, judged against the cluster they will run on",
    "gpufleet lint manifests/ --cluster cluster/",
    "# in CI, as SARIF for GitHub code scanning; fail on warnings too",
    "gpufleet lint manifests/ --cluster cluster/ -o sarif --fail-on warning > gpufleet.sarif",
    "# one team's workloads only (and cluster-scoped objects); --fail-on judges what is shown",
    "gpufleet lint manifests/ --cluster cluster/ -n research",
    "# the rules CEL can express, as ValidatingAdmissionPolicies for a cluster without the webhook",
    "gpufleet lint --export vap > gpufleet-lint-policies.yaml",
)


class LintFormat(StrEnum):
    text = "text"
    json = "json"
    sarif = "sarif"


class FailOn(StrEnum):
    error = "error"
    warning = "warning"
    info = "info"


class Export(StrEnum):
    vap = "vap"


_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def _print_text(run: LintRun, findings: list[Finding], namespace: str | None) -> None:
    for f in findings:
        where = f"{f.file}:{f.line}" if f.file and f.line else (f.file or "-")
        console.say(console.Text.assemble(f"{where}: ", (f.severity, _STYLE[f.severity]), f" [{f.rule}] ",
                                          f.message))
        console.say(f"  fix: {f.fix}")
    counts = {s: sum(1 for f in findings if f.severity == s) for s in ("error", "warning", "info")}
    summary = ", ".join(f"{n} {s}{'s' if n != 1 else ''}" for s, n in counts.items() if n)
    hidden = len(run.findings) - len(findings)
    console.say(f"{len(findings)} finding(s)" + (f": {summary}" if summary else "")
                + (f" ({hidden} more in namespaces other than {namespace}, not shown)" if hidden else ""))


def _print_problems(run: LintRun) -> None:
    for p in run.problems:
        (console.warning if p.severity == "warning" else console.error)(str(p))
    if run.unreadable:
        console.error(f"{len(run.unreadable)} error(s) in the input: what they concern was not linted; fix them "
                      "and run again")


def lint(
    files: Annotated[list[str] | None, typer.Argument(
        help="Workload manifests: files, folders, - for stdin.", metavar="FILE", show_default=False)] = None,
    output: Annotated[LintFormat, typer.Option(
        "-o", "--output", case_sensitive=False, metavar="text|json|sarif",
        help="text (for people), json ({\"findings\": [...]}) or sarif (SARIF 2.1.0, for code scanning).")]
        = LintFormat.text,
    fail_on: Annotated[FailOn, typer.Option(
        "--fail-on", case_sensitive=False, metavar="error|warning|info",
        help="Exit 1 when a finding is at least this severe.")] = FailOn.error,
    cluster: Annotated[list[str] | None, typer.Option(
        "--cluster", metavar="FILE",
        help="The cluster to judge against: Nodes, NodePools and Kueue objects (files or folders; repeat the "
        "option for more). Without it, rules that need the cluster judge against what FILES hold, and say "
        "nothing when FILES hold none.")] = None,
    export: Annotated[Export | None, typer.Option(
        "--export", case_sensitive=False, metavar="vap",
        help="Print the rules that need no cluster knowledge as ValidatingAdmissionPolicy and binding YAML, "
        "instead of linting.")] = None,
    namespace: Namespace = None,
) -> None:
    """Judge GPU workloads against the anti-patterns that waste GPU budgets (docs/lint.md lists every rule)."""
    if export is Export.vap:
        if files:
            raise usage_error("--export vap writes the policies and reads no manifests; drop the files", "--export")
        from gpufleet.policy.vap import export_documents

        console.write(export_documents())
        return
    if not files:
        raise usage_error("give the manifests to lint (files, folders or - for stdin)", "FILE")
    run = lint_paths(files, cluster or (), stdin=sys.stdin)
    _print_problems(run)
    # -n: every object is judged; the findings shown, and so --fail-on, are the namespace's and the cluster's.
    findings = [f for f in run.findings if in_namespace(namespace, f.object.namespace)]
    if output is LintFormat.json:
        console.emit_json(findings_document(findings))
    elif output is LintFormat.sarif:
        console.emit_json(sarif_document(findings))
    else:
        _print_text(run, findings, namespace)
    raise typer.Exit(_exit_code(findings, run, fail_on))


def _exit_code(findings: list[Finding], run: LintRun, fail_on: FailOn) -> int:
    if not run.ok:
        return EXIT_USAGE  # 2: some input could not be read
    return EXIT_FINDINGS if reaches(findings, fail_on.value) else EXIT_OK
