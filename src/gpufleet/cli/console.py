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
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.segment import Segment, Segments
from rich.table import Column, Table
from rich.text import Text

__all__ = [
    "Column",
    "Table",
    "Text",
    "closed_pipe",
    "emit",
    "emit_json",
    "emit_yaml",
    "error",
    "flush",
    "guarded",
    "make_table",
    "note",
    "reader_gone",
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


_reader_gone = False  # standard output's reader went away (``| head -2``): what is still written is dropped


def closed_pipe() -> None:
    """Standard output's reader went away (``gpufleet plan ... | head -2``): a closed pipe is not an error, as with
    kubectl, so the rest of the output is dropped quietly (standard output is pointed at /dev/null, where neither a
    later write nor the interpreter's last flush can fail) and the command runs on to its own end and exit status:
    0 for a plan, non-zero where it reports an error. Only standard output's closed pipe is this: a write to
    anything else that finds its peer gone (standard error, a socket, a child process) is a real failure and is
    raised as it is."""
    global _reader_gone
    _reader_gone = True
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, sys.stdout.fileno())
        finally:
            os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stream without a file descriptor (a test runner's)
        pass


def reader_gone() -> bool:
    """Whether standard output's reader has gone away (:func:`closed_pipe`)."""
    return _reader_gone


class GuardedStdout:
    """Standard output with its closed pipe caught where it is met, in a write or a flush (:func:`closed_pipe`);
    everything else is the stream's own. :func:`guarded` wraps a stream in one; the application puts one in
    ``sys.stdout`` for the time of a command, so that what click writes there (help) is covered too."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            closed_pipe()
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            closed_pipe()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def guarded(stream: TextIO) -> TextIO:
    """``stream`` (standard output) with its closed pipe caught in its writes (:class:`GuardedStdout`)."""
    return stream if isinstance(stream, GuardedStdout) else GuardedStdout(stream)  # type: ignore[return-value]


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):  # a closed or exotic stream is not a terminal
        return False


def _columns() -> int | None:
    text = os.environ.get("COLUMNS", "")
    return int(text) if text.isdigit() and int(text) > 0 else None


class _Console(Console):
    """rich's console, but a closed pipe is not its business: standard output's is caught below it
    (:class:`GuardedStdout`), and any other (standard error's) is raised as it is, where rich would point standard
    output at /dev/null and exit 1."""

    def on_broken_pipe(self) -> None:
        raise  # called by rich inside its ``except BrokenPipeError``: re-raise that one


def _console(stream: TextIO) -> Console:
    # On a terminal rich reads its width (COLUMNS wins); elsewhere COLUMNS, else no folding at all.
    width = None if _is_terminal(stream) else (_columns() or PIPE_WIDTH)
    return _Console(file=stream, width=width, markup=False, emoji=False, highlight=False,
                   no_color=bool(os.environ.get("NO_COLOR")) or None)


def stdout() -> Console:
    """A console on the current standard output (quiet once its reader has gone)."""
    console = _console(guarded(sys.stdout))
    console.quiet = _reader_gone
    return console


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


def _ranges(table: Table, console: Console) -> list[tuple[int, int]]:
    """Each column's (longest word, natural width), padding included: what it needs not to break a word, and to
    keep every cell on one line."""
    wide = console.options.update_width(1 << 20)
    return [(m.minimum, m.maximum) for m in (table._measure_column(console, wide, c) for c in table.columns)]


def _share(table: Table, ranges: list[tuple[int, int]], room: int) -> None:
    """Fix the columns' widths within ``room`` so that none is narrower than its longest word: each gets its
    longest word, then the rest of the room in proportion to what it lacks of its natural width."""
    widths = [lo for lo, _ in ranges]
    lacking = [hi - lo for lo, hi in ranges]
    spare = room - sum(widths)
    total = sum(lacking)
    if total:
        for i, lack in enumerate(lacking):
            widths[i] += min(lack, spare * lack // total)
    for i, column in enumerate(table.columns):
        column.width = max(1, widths[i] - table._get_padding_width(i))


def _block(table: Table, columns: list[int], first: bool) -> Table:
    """A table of some of ``table``'s columns (the first one repeated in each block, to say whose row it is)."""
    cols = [table.columns[i].copy() for i in columns]
    block = make_table(table.title if first else None, *cols)  # type: ignore[arg-type]
    for row in zip(*(table.columns[i].cells for i in columns), strict=True):
        block.add_row(*row)
    return block


def _laid_out(table: Table, console: Console) -> tuple[list[Table], int]:
    """The table as printed at the console's width, and the width to render it at, so that no word (a name, a
    quantity) is ever broken across lines: columns narrowed down to their longest word at most; where even that is
    too wide, in a pipe or a file the line runs long, and on a terminal the columns wrap into blocks that fit
    (the first column repeated in each). Only a word wider than the terminal itself is folded there."""
    width = console.options.max_width
    ranges = _ranges(table, console)
    extra = table._extra_width
    if sum(hi for _, hi in ranges) + extra <= width:
        return [table], width
    if sum(lo for lo, _ in ranges) + extra <= width:
        _share(table, ranges, width - extra)
        return [table], width
    if not console.is_terminal:
        _share(table, ranges, sum(lo for lo, _ in ranges))
        return [table], sum(lo for lo, _ in ranges) + extra
    groups: list[list[int]] = []
    for i in range(1, len(ranges)):
        if groups and sum(ranges[c][0] for c in groups[-1]) + ranges[i][0] + len(groups[-1]) <= width:
            groups[-1].append(i)
        else:
            groups.append([0, i])
    blocks = [_block(table, group, n == 0) for n, group in enumerate(groups or [[0]])]
    for block in blocks:
        block_ranges = _ranges(block, console)
        if sum(lo for lo, _ in block_ranges) + block._extra_width > width:
            return [], width  # a column too wide even beside the first one: a record per row instead
        _share(block, block_ranges, width - block._extra_width)
    return blocks, width


def _records(table: Table, console: Console) -> None:
    """A table too wide for the terminal even in blocks, a row at a time: its first cell, then each other cell
    that has a value under its header, indented, wrapped between words."""
    lines: list[RenderableType] = [Text(str(table.title), style="bold")] if table.title else []
    headers = [str(c.header) for c in table.columns]
    for n, row in enumerate(zip(*(c.cells for c in table.columns), strict=True)):
        first, *rest = row
        lines += [*([Text("")] if n else []), first if isinstance(first, Text) else Text(str(first), style="bold")]
        for header, cell in zip(headers[1:], rest, strict=True):
            if str(cell):
                lines += [Text(f"  {header}:", style="dim"), Padding(cell, (0, 0, 0, 4))]
    for line in console.render_lines(Group(*lines), console.options, pad=False):
        console.print(Segments([*_rstrip(line), Segment.line()]), end="", crop=False)


def show(table: Table, *, err: bool = False) -> None:
    """Print a table made by :func:`make_table`, each line without trailing blanks, no word broken across lines
    (:func:`_laid_out`)."""
    console = stderr() if err else stdout()
    blocks, width = _laid_out(table, console)
    if not blocks:
        _records(table, console)
        return
    for n, block in enumerate(blocks):
        if n:
            console.print("")
        for line in console.render_lines(block, console.options.update_width(width), pad=False):
            console.print(Segments([*_rstrip(line), Segment.line()]), end="", crop=False)


def flush() -> None:
    """Flush standard output: a closed pipe met here is :func:`closed_pipe`'s, not an error."""
    guarded(sys.stdout).flush()


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
    guarded(sys.stdout).write(text)


def emit_json(doc: Any) -> None:
    """A document as JSON on standard output, exactly (no console in between)."""
    guarded(sys.stdout).write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def emit_yaml(doc: Any) -> None:
    """A document as YAML on standard output."""
    guarded(sys.stdout).write(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True,
                                              default_flow_style=False, width=YAML_WIDTH))
