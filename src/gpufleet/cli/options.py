"""The conventions every gpufleet command shares, kubectl's where kubectl has one.

* ``-h``/``--help`` everywhere, with an ``Examples:`` section (:func:`examples`);
* ``-o/--output text|json|yaml|wide`` on every command that prints objects (:data:`Output`), ``--json`` kept
  as an alias where it existed (:func:`output_format`);
* ``-n/--namespace`` on commands that list namespaced objects (:data:`Namespace`): it filters what is printed,
  never what is computed; cluster-scoped objects stay in every namespace's view (:func:`in_namespace`);
* exit codes: :data:`EXIT_OK` (0), :data:`EXIT_FINDINGS` (1: findings, or errors in the input: a manifest,
  a trace, a layout) and :data:`EXIT_USAGE` (2: the command line itself: an unknown option, a bad option
  value), the last one raised as :class:`typer.BadParameter` so that every usage error reads the same;
* plain help and error text, not rich panels: an error is one ``Error: ...`` line that survives a pipe.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_OK",
    "EXIT_USAGE",
    "Files",
    "Namespace",
    "Output",
    "OutputFormat",
    "Strict",
    "examples",
    "in_namespace",
    "namespace_of",
    "new_app",
    "output_format",
    "usage_error",
]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2

CONTEXT_SETTINGS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


class OutputFormat(StrEnum):
    """What ``-o`` accepts: a table for people (``text``, ``wide`` with more columns) or a document."""

    text = "text"
    wide = "wide"
    json = "json"
    yaml = "yaml"

    @property
    def is_document(self) -> bool:
        return self in (OutputFormat.json, OutputFormat.yaml)


Output = Annotated[OutputFormat, typer.Option(
    "-o", "--output", case_sensitive=False, metavar="text|wide|json|yaml",
    help="Output format: text (a table), wide (more columns), json or yaml.")]

Namespace = Annotated[str | None, typer.Option(
    "-n", "--namespace", metavar="NAMESPACE",
    help="Only this namespace's objects, beside the cluster-scoped ones (default: every namespace).")]


def namespace_of(key: str | None) -> str | None:
    """The namespace in an object's key as gpufleet writes it (``namespace/name``); None for a cluster-scoped
    object's plain name (or no name at all)."""
    if not key or "/" not in key:
        return None
    return key.partition("/")[0]


def in_namespace(namespace: str | None, object_namespace: str | None) -> bool:
    """Whether ``-n namespace`` shows an object of ``object_namespace``: everything without ``-n``; with it, the
    namespace's own objects and the cluster-scoped ones (``object_namespace`` None: ClusterQueues, Nodes, a
    document without a name), which every namespace's view holds."""
    return namespace is None or object_namespace is None or object_namespace == namespace


def examples(*commands: str) -> str:
    """An ``Examples:`` epilog for ``--help``: ``# a comment`` lines and command lines, printed as written."""
    # \b keeps click from re-flowing the paragraph.
    return "\b\nExamples:\n" + "\n".join(f"  {c}" for c in commands)


def new_app(help_text: str, *, epilog: str | None = None) -> typer.Typer:
    """A command group with the shared conventions (``-h``, plain help and errors, no rich tracebacks)."""
    return typer.Typer(help=help_text, epilog=epilog, no_args_is_help=True, rich_markup_mode=None,
                       context_settings=CONTEXT_SETTINGS, pretty_exceptions_enable=False, add_completion=False)


def usage_error(message: str, option: str) -> typer.BadParameter:
    """A bad option value: click prints usage, a help hint and ``Error: Invalid value for 'OPTION': ...``; exit 2."""
    return typer.BadParameter(message, param_hint=f"'{option}'")


def output_format(output: OutputFormat, as_json: bool) -> OutputFormat:
    """``-o`` with the older ``--json`` flag folded in (``--json`` is ``-o json``; both must agree)."""
    if not as_json:
        return output
    if output not in (OutputFormat.text, OutputFormat.json):
        raise usage_error(f"--json means -o json, not -o {output.value}; give one of them", "--json")
    return OutputFormat.json


Strict = Annotated[bool, typer.Option(
    "--strict", help="Make what gpufleet leaves out of the input an error (exit 1): kinds and fields it does not "
    "read, Kueue features it does not implement. For CI.")]

Files = Annotated[list[str], typer.Argument(help="Manifest files or folders; - reads stdin.", metavar="FILE",
                                             show_default=False)]
