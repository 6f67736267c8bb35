"""The command line's one console: every command prints through these functions, nothing else builds a Console.

The rules, each for a reason a user has met:

* user text is never markup: consoles are built with ``markup=False, emoji=False, highlight=False``, and
  styles are given as ``style=`` or :class:`rich.text.Text`, so a quantity ``"[/x]"`` or a name
  ``"[bold]3g.20gb"`` prints as written (rich would raise a MarkupError on the first and eat the second);
* messages are never hard-wrapped (``soft_wrap``): an error is one line in a log, a pipe or under ``grep``,
  and a terminal wraps it itself;
* tables fold a long cell onto more lines to fit the terminal's width, never cut it with an ellipsis; in a
  pipe or a file they keep their natural width (one row, one line), unless ``COLUMNS`` gives a width;
* colour only on a terminal, and never with ``NO_COLOR`` set (https://no-color.org).

A console is built for the stream that is ``sys.stdout``/``sys.stderr`` at the time of the call, so that a
redirected stream (a test runner, a pipe set up after import) is seen as it is.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, TextIO

import yaml
from rich import box
from rich.console import Console
from rich.segment import Segment, Segments
from rich.table import Column, Table
from rich.text import Text

__all__ = [
    "Column",
    "Table",
    "Text",
    "emit",
    "emit_json",
    "emit_yaml",
    "error",
    "make_table",
    "note",
    "say",
    "show",
    "stderr",
    "stdout",
    "styled",
    "warning",
    "write",
]

# Width of a console that is not a terminal and has no COLUMNS: wide enough that no table folds, so that
# one row stays one line for grep and awk (kubectl does the same when piped).
PIPE_WIDTH = 4096
YAML_WIDTH = 1 << 30  # never fold a long string onto a second line in -o yaml


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or exotic stream is not a terminal
        return False


def _columns() -> int | None:
    text = os.environ.get("COLUMNS", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


def _console(stream: TextIO) -> Console:
    # On a terminal rich reads its width (COLUMNS wins); elsewhere COLUMNS, else no folding at all.
    width = None if _is_terminal(stream) else (_columns() or PIPE_WIDTH)
    return Console(file=stream, width=width, markup=False, emoji=False, highlight=False,
                   no_color=bool(os.environ.get("NO_COLOR")) or None)


def stdout() -> Console:
    """A console on the current standard output."""
    return _console(sys.stdout)


def stderr() -> Console:
    """A console on the current standard error (messages, progress)."""
    return _console(sys.stderr)


def say(text: str | Text, *, style: str | None = None, err: bool = False) -> None:
    """One message, printed literally and never hard-wrapped."""
    (stderr() if err else stdout()).print(text, style=style, soft_wrap=True)


def error(text: str) -> None:
    """``error: <text>`` on standard error, one line whatever the text holds. A text of several lines (an
    exception that lists the input's problems) is printed a line each, every line prefixed, so that each one
    is found by ``grep error:``; a listed line that is a warning stays one (``warning: ...``)."""
    first, *rest = _lines(text)
    err = stderr()
    err.print(Text.assemble(("error", "bold red"), ": ", first), soft_wrap=True)
    for line in rest:
        if line.startswith("warning: "):
            warning(line)
        else:
            err.print(Text.assemble(("error", "bold red"), ": ", line.removeprefix("error: ")), soft_wrap=True)


def warning(text: str) -> None:
    """``warning: <text>`` on standard error (a text that already starts with it is not prefixed twice), a line
    each for a text of several lines."""
    err = stderr()
    for line in _lines(text):
        err.print(Text.assemble(("warning", "yellow"), ": ", line.removeprefix("warning: ")), soft_wrap=True)


def _lines(text: str) -> list[str]:
    """A message's non-blank lines (at least one, possibly empty), each without its indentation and trailing
    blanks (a listed problem is indented under its heading)."""
    return [line.strip() for line in text.splitlines() if line.strip()] or [text.strip()]


def note(text: str) -> None:
    """A dim remark on standard error: progress, where a file was written; never part of a command's output."""
    stderr().print(text, style="dim", soft_wrap=True)


def styled(text: str, style: str) -> Text:
    """A word with a style, for a table cell: the text stays literal."""
    return Text(text, style=style)


def make_table(title: str | None, *columns: str | Column) -> Table:
    """A table whose every column folds long cells instead of cutting them.

    Columns given as strings are left-justified; pass a :class:`Column` for anything else
    (``Column("GPUs", justify="right")``).
    """
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    for c in cols:
        c.overflow = "fold"
        c.no_wrap = False
    return Table(*cols, title=title, box=box.SIMPLE_HEAD, show_edge=False, title_justify="left",
                 header_style="bold", title_style="bold", pad_edge=False)


def _rstrip(line: list[Segment]) -> list[Segment]:
    """A rendered line without its trailing blanks (rich pads every cell to its column's width)."""
    line = list(line)
    while line and (line[-1].control or not line[-1].text.strip()):
        line.pop()
    if line:
        last = line[-1]
        line[-1] = Segment(last.text.rstrip(), last.style)
    return line


def show(table: Table, *, err: bool = False) -> None:
    """Print a table made by :func:`make_table`, each line without trailing blanks."""
    console = stderr() if err else stdout()
    for line in console.render_lines(table, console.options, pad=False):
        console.print(Segments([*_rstrip(line), Segment.line()]), end="")


def emit(doc: Any, fmt: str) -> None:
    """A document on standard output in ``fmt``: ``json`` or ``yaml``."""
    if fmt == "json":
        emit_json(doc)
    elif fmt == "yaml":
        emit_yaml(doc)
    else:
        raise ValueError(f"no document format {fmt!r}")


def write(text: str) -> None:
    """Text that is a command's output as it is (YAML, a script), on standard output."""
    sys.stdout.write(text)


def emit_json(doc: Any) -> None:
    """A document as JSON on standard output, exactly (no console in between)."""
    sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def emit_yaml(doc: Any) -> None:
    """A document as YAML on standard output."""
    sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=False,
                                    width=YAML_WIDTH))
