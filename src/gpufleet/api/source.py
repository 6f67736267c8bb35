"""Read multi-document YAML (or JSON) from files, folders and stdin, remembering the line of every field.

Each document is composed into a YAML node tree (libyaml when available) and turned into the same plain
Python data ``yaml.safe_load`` would give. While building, a compact line index parallel to the data is
kept on the :class:`Document` (the node tree itself is dropped: keeping it for 50,000 pods took 2.5x the
memory), so later stages can ask :meth:`Document.line_of` for the line of any field.

A syntax error costs only the document it is in: the file is then split on its ``---``/``...`` markers and
each piece is parsed alone, so the valid documents around a broken one are still returned.
"""

from __future__ import annotations

import gc
import itertools
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TextIO, TypeAlias

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpufleet.api.errors import Problems, field_path, shown
from gpufleet.api.limits import MAX_DOCUMENT_BYTES, MAX_DOCUMENTS, MAX_INPUT_BYTES, MAX_NODES_PER_DOCUMENT

try:
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]

__all__ = ["MANIFEST_SUFFIXES", "STDIN_NAME", "Document", "InputBudget", "load_paths", "load_text", "read_file_bytes",
           "read_file_text"]

STDIN_NAME = "<stdin>"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

_STR = "tag:yaml.org,2002:str"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"

_ScalarCtor = Callable[[SafeConstructor, ScalarNode], Any]
# Only true scalar types: the collection constructors (!!set, !!omap) are generators and must not be called
# on a scalar node.
_SCALAR_CTORS: dict[str, _ScalarCtor] = {
    f"tag:yaml.org,2002:{name}": SafeConstructor.yaml_constructors[f"tag:yaml.org,2002:{name}"]
    for name in ("null", "bool", "int", "float", "binary", "timestamp")
}

PathPart: TypeAlias = str | int
# Line index of one collection, parallel to its data: a dict with the same keys for a mapping, a list for a
# sequence. Each entry is the 1-based line of the key (or item), paired with the index of its value when
# that value is itself a plain mapping or list.
_Lines: TypeAlias = "dict[Any, _Entry] | list[_Entry]"
_Entry: TypeAlias = "int | tuple[int, _Lines]"


@dataclass(slots=True)
class Document:
    """One YAML document (or one item of a ``kind: List``) and where it came from.

    ``lines`` is the line index :meth:`line_of` reads; a Document built by hand without one reports
    ``line`` for every field.
    """

    data: Any
    file: str
    line: int
    index: int
    lines: _Lines | None = field(default=None, repr=False, compare=False)

    def line_of(self, *path: PathPart) -> int:
        """1-based line of the deepest node along ``path`` that exists; the document line if none does.

        For a mapping key this is the line of the key, which is where a reader looks for ``resources:``
        even when its value starts on the next line.
        """
        line = self.line
        lines = self.lines
        for part in path:
            entry: _Entry | None
            if isinstance(lines, dict):
                entry = lines.get(part)
                if entry is not None and isinstance(part, int) and not _has_exact_key(lines, part):
                    entry = None
            elif isinstance(lines, list) and isinstance(part, int) and -len(lines) <= part < len(lines):
                entry = lines[part]
            else:
                entry = None
            if entry is None:
                return line
            if isinstance(entry, int):
                return entry  # a scalar: nothing deeper can exist
            line, lines = entry
        return line


def _has_exact_key(lines: dict[Any, _Entry], part: int) -> bool:
    # True == 1 and they hash alike: a list index must not select a boolean key such as "on:", nor True an
    # int key.
    return any(k == part and isinstance(k, bool) == isinstance(part, bool) for k in lines if isinstance(k, int))


# The safe schema's implicit rules by first character, wildcard rules appended, as Resolver.resolve tries them.
_WILDCARD_RULES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(_BaseLoader.yaml_implicit_resolvers.get(None, ()))
_IMPLICIT_RULES: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    first: (*rules, *_WILDCARD_RULES)
    for first, rules in _BaseLoader.yaml_implicit_resolvers.items()
    if first is not None
}


class _Loader(_BaseLoader):
    """Safe loader with a faster but equivalent tag resolver.

    PyYAML's resolver walks path-resolver machinery on every node; the safe schema has no path resolvers,
    so only the implicit (first character + regex) rules matter. That makes composing roughly a quarter faster.
    """

    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        return None

    def ascend_resolver(self) -> None:
        return None

    def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
        if kind is ScalarNode:
            if implicit[0]:
                for tag, regexp in _IMPLICIT_RULES.get(value[:1], _WILDCARD_RULES):
                    if regexp.match(value):
                        return tag
            return _STR
        return _MAP if kind is MappingNode else _SEQ


class _BuildError(Exception):
    def __init__(self, message: str, node: Node, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node
        self.fix = fix


class _Builder:
    """Turns one document's node tree into plain data exactly as ``SafeConstructor`` would, plus line index.

    Written out here rather than calling ``construct_document`` because the common cases (str scalars,
    plain maps and lists) are several times faster this way, and duplicate keys must be noticed.
    """

    __slots__ = ("active", "base", "ctor", "duplicates", "memo")

    def __init__(self, ctor: SafeConstructor, offset: int) -> None:
        self.ctor = ctor
        self.base = offset + 1  # marks are 0-based and relative to the parsed piece
        # Anchored collections are shared, as safe_load shares them, and built once (no alias blow-up).
        self.memo: dict[int, tuple[Any, _Lines | None]] = {}
        self.active: set[int] = set()
        self.duplicates: list[tuple[MappingNode, Node, Any]] = []

    def scalar(self, node: ScalarNode) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        ctor = _SCALAR_CTORS.get(tag)
        if ctor is None:
            return self.ctor.construct_document(node)  # raises ConstructorError for unknown tags
        try:
            return ctor(self.ctor, node)
        except ValueError as exc:
            kind = tag.rsplit(":", 1)[-1]
            raise _BuildError(f"cannot read {shown(node.value)} as {kind}: {shown(str(exc), 100)}", node) from None

    def collection(self, node: Node) -> tuple[Any, _Lines | None]:
        key = id(node)
        done = self.memo.get(key)
        if done is not None:
            if key in self.active:
                raise _BuildError(
                    "an alias refers to a node that contains it (recursive alias)",
                    node,
                    fix="replace the alias with a copy of the data",
                )
            return done
        cls = node.__class__
        tag = node.tag
        result: tuple[Any, _Lines | None]
        self.active.add(key)
        if cls is MappingNode and tag == _MAP:
            mapping: dict[Any, Any] = {}
            map_lines: dict[Any, _Entry] = {}
            result = self.memo[key] = (mapping, map_lines)
            self.fill_mapping(node, mapping, map_lines)  # type: ignore[arg-type]
        elif cls is SequenceNode and tag == _SEQ:
            items: list[Any] = []
            seq_lines: list[_Entry] = []
            result = self.memo[key] = (items, seq_lines)
            base = self.base
            for child in node.value:
                line = child.start_mark.line + base
                if child.__class__ is ScalarNode:
                    items.append(child.value if child.tag == _STR else self.scalar(child))
                    seq_lines.append(line)
                else:
                    value, sub = self.collection(child)
                    items.append(value)
                    seq_lines.append(line if sub is None else (line, sub))
        else:
            # !!set, !!omap, !!pairs and the like: rare enough to hand to PyYAML whole, without lines.
            result = self.memo[key] = (self.ctor.construct_document(node), None)
        self.active.discard(key)
        return result

    def fill_mapping(self, node: MappingNode, out: dict[Any, Any], lines: dict[Any, _Entry]) -> None:
        base = self.base
        first_duplicate = len(self.duplicates)
        for key_node, value_node in node.value:
            if key_node.__class__ is not ScalarNode:
                raise self.bad_key(key_node)
            tag = key_node.tag
            if tag == _STR:
                k = key_node.value
            elif tag == _MERGE:
                # Rare: start again on the slow path. Children built so far are memoized, not rebuilt.
                del self.duplicates[first_duplicate:]
                out.clear()
                lines.clear()
                self.fill_merged_mapping(node, out, lines)
                return
            else:
                k = self.scalar(key_node)
            try:
                if k in out:
                    self.duplicates.append((node, key_node, k))
            except TypeError:
                raise self.bad_key(key_node, k) from None
            line = key_node.start_mark.line + base
            if value_node.__class__ is ScalarNode:
                out[k] = value_node.value if value_node.tag == _STR else self.scalar(value_node)
                lines[k] = line
            else:
                value, sub = self.collection(value_node)
                out[k] = value
                lines[k] = line if sub is None else (line, sub)

    def fill_merged_mapping(self, node: MappingNode, out: dict[Any, Any], lines: dict[Any, _Entry]) -> None:
        """A mapping with ``<<`` merge keys, flattened the way SafeConstructor does it."""
        own = sum(1 for k, _ in node.value if k.tag != _MERGE)
        self.ctor.flatten_mapping(node)
        pairs = node.value
        # Merged pairs come first and the mapping's own keys override them; that override is the point of
        # "<<", so only clashes among the own keys are duplicates.
        own_from = len(pairs) - own
        seen_own: set[Any] = set()
        for i, (key_node, value_node) in enumerate(pairs):
            if key_node.__class__ is not ScalarNode:
                raise self.bad_key(key_node)
            k = self.scalar(key_node)
            if i >= own_from:
                try:
                    if k in seen_own:
                        self.duplicates.append((node, key_node, k))
                    seen_own.add(k)
                except TypeError:
                    raise self.bad_key(key_node, k) from None
            line = key_node.start_mark.line + self.base
            if value_node.__class__ is ScalarNode:
                out[k] = self.scalar(value_node)
                lines[k] = line
            else:
                value, sub = self.collection(value_node)
                out[k] = value
                lines[k] = line if sub is None else (line, sub)

    @staticmethod
    def bad_key(key_node: Node, key: Any = None) -> _BuildError:
        what = "a list or mapping" if key is None else f"a {type(key).__name__}"
        return _BuildError(f"a mapping key must be a plain value, got {what}", key_node, fix="use a string key")


def _paths_to(root: Node, targets: set[int]) -> dict[int, tuple[PathPart, ...]]:
    """Field paths from ``root`` to the nodes whose ids are in ``targets``, in one walk of the tree."""
    found: dict[int, tuple[PathPart, ...]] = {}
    stack: list[tuple[Node, tuple[PathPart, ...]]] = [(root, ())]
    seen: set[int] = set()
    while stack and len(found) < len(targets):
        node, path = stack.pop()
        if id(node) in targets and id(node) not in found:
            found[id(node)] = path
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for k, v in node.value:
                stack.append((v, (*path, str(k.value) if isinstance(k, ScalarNode) else "?")))
        elif isinstance(node, SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, (*path, i)))
    return found


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return f"the string {shown(value, 40)}"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {shown(value)}"
    return f"a value of type {type(value).__name__}"


def _label(data: Any) -> tuple[str | None, str | None]:
    """(kind, "ns/name" or "name") of a manifest, as far as the data allows."""
    if not isinstance(data, dict):
        return None, None
    kind = data.get("kind")
    meta = data.get("metadata")
    name: str | None = None
    if isinstance(meta, dict) and isinstance(meta.get("name"), str):
        ns = meta.get("namespace")
        name = f"{ns}/{meta['name']}" if isinstance(ns, str) and ns else meta["name"]
    return (kind if isinstance(kind, str) else None), name


def _node_count_exceeds(text: str, limit: int) -> bool:
    """Whether a document holds more than ``limit`` YAML values; a streaming count of parser events that
    stops at the limit, so it costs little memory and bounded time. Syntax errors are left to the reader."""
    loader = _Loader(text)
    count = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, _VALUE_EVENTS):
                count += 1
                if count > limit:
                    return True
    except yaml.YAMLError:
        return False
    finally:
        loader.dispose()
    return False


_VALUE_EVENTS = (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent, yaml.AliasEvent)


class InputBudget:
    """What is left of one run's input limits (bytes, documents), shared by every file it reads.

    ``limit`` names the byte limit in messages: the run's by default, a single file's where one file is read
    alone (the node agent's device-plugin config, the dashboard's simulation result)."""

    def __init__(self, max_bytes: int = MAX_INPUT_BYTES, max_documents: int = MAX_DOCUMENTS, *,
                 limit: str = "gpufleet's limit per run") -> None:
        self.bytes = max_bytes
        self.documents = max_documents
        self.max_bytes = max_bytes
        self.max_documents = max_documents
        self.limit = limit
        self.exhausted = False

    def says(self) -> str:
        """The byte limit as messages write it: ``32 MiB, gpufleet's limit per run (see docs/limits.md)``."""
        size = f"{self.max_bytes // 2**20} MiB" if self.max_bytes >= 2**20 else f"{self.max_bytes:,} bytes"
        return f"{size}, {self.limit} (see docs/limits.md)"


class _DocumentLimit(Exception):
    """Raised inside a file's loader when the run's document budget is spent."""


class _FileLoader:
    """Loads the documents of one file (or stdin).

    Problems are held back until the file is done: after a syntax error the file is read again piece by
    piece, and what the first pass reported must not appear twice.
    """

    def __init__(self, file: str, budget: InputBudget, sink: Callable[[Document], None] | None = None) -> None:
        self.file = file
        self.problems = Problems()
        self.docs: list[Document] = []
        # With a sink each document is handed on as soon as it is read, so a big input never holds all its raw
        # documents at once. After a syntax error the file is read again piece by piece: the documents
        # already handed on are then skipped (same text, same documents, same order).
        self.sink = sink
        self.handed = 0
        self.skip = 0
        self.index = 0
        self.ctor = SafeConstructor()
        self.budget = budget
        self.documents_before = budget.documents

    def emit(self, doc: Document) -> None:
        if self.sink is None:
            self.docs.append(doc)
        elif self.skip:
            self.skip -= 1
        else:
            self.sink(doc)
            self.handed += 1

    def take(self, line: int) -> None:
        """Count one more document against the run's budget; at the limit, say so once and stop."""
        if self.budget.documents <= 0:
            if not self.budget.exhausted:
                self.budget.exhausted = True
                self.problems.error(
                    f"more than {self.budget.max_documents:,} documents: gpufleet's limit per input (see "
                    "docs/limits.md); this one and all after it are not read", file=self.file, line=line,
                    fix="give fewer objects per run")
            raise _DocumentLimit
        self.budget.documents -= 1

    def syntax_error(self, exc: yaml.YAMLError, offset: int) -> None:
        line: int | None = offset + 1
        if isinstance(exc, yaml.MarkedYAMLError):
            mark = exc.problem_mark or exc.context_mark
            message = f"invalid YAML: {exc.problem or exc}"
            if exc.context and exc.context_mark is not None:
                message += f" ({exc.context} at line {exc.context_mark.line + 1 + offset})"
            if mark is not None:
                line = mark.line + 1 + offset
        else:
            message = f"invalid YAML: {exc}"
        self.problems.error(
            message,
            file=self.file,
            line=line,
            fix="correct the YAML at this line (indentation, quoting, brackets); the file's other documents "
            "are still read",
        )

    def add_root(self, root: Node | None, offset: int) -> None:
        index = self.index
        self.index += 1
        if root is None:
            return
        line = root.start_mark.line + 1 + offset
        builder = _Builder(self.ctor, offset)
        lines: _Lines | None = None
        try:
            if isinstance(root, ScalarNode):
                data = builder.scalar(root)
            else:
                data, lines = builder.collection(root)
        except _BuildError as exc:
            self.problems.error(exc.message, file=self.file, line=exc.node.start_mark.line + 1 + offset, fix=exc.fix)
            return
        except yaml.MarkedYAMLError as exc:
            # The syntax was fine; a tag such as "!Ref" has no meaning in plain YAML.
            mark = exc.problem_mark or exc.context_mark
            self.problems.error(
                f"cannot read the document: {exc.problem or exc}",
                file=self.file,
                line=line if mark is None else mark.line + 1 + offset,
                fix="remove the custom tag; manifests are plain YAML",
            )
            return
        except RecursionError:
            self.problems.error(
                "the document is nested too deeply to read", file=self.file, line=line, fix="flatten it"
            )
            return
        if data is None:
            return  # an empty document: "---" with nothing after it, or a lone "null"
        doc = Document(data, self.file, line, index, lines)
        if builder.duplicates:
            self.report_duplicates(doc, root, builder.duplicates, offset)
            return  # refused whole, as the API server refuses it: which value was meant is unknown
        if not isinstance(data, dict):
            self.problems.error(
                f"a manifest document must be a mapping with apiVersion and kind, got {_describe(data)}",
                file=self.file,
                line=line,
                fix="write the object as key: value pairs starting with apiVersion: and kind:",
            )
        elif data.get("kind") == "List":
            self.expand_list(doc)
        else:
            self.take(line)
            self.emit(doc)

    def report_duplicates(
        self, doc: Document, root: Node, duplicates: list[tuple[MappingNode, Node, Any]], offset: int
    ) -> None:
        kind, name = _label(doc.data)
        paths = _paths_to(root, {id(m) for m, _, _ in duplicates})  # one walk for all of them
        for mapping_node, key_node, key in duplicates:
            parent = paths.get(id(mapping_node), ())
            # An error, as kubectl and the API server make it: YAML keeps only the last value, so the first
            # (a GPU limit, say) would silently vanish.
            self.problems.error(
                f"duplicate key {shown(key)}: YAML keeps only the last value, the first is lost",
                file=self.file,
                line=key_node.start_mark.line + 1 + offset,
                kind=kind,
                name=name,
                field=field_path((*parent, str(key))),
                fix="remove one of the two entries",
            )

    def expand_list(self, doc: Document) -> None:
        """A ``kind: List`` (``kubectl get -o yaml`` output) stands for its items, each with its own line."""
        items = doc.data.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            self.problems.error(
                f"items of a List must be a list, got {_describe(items)}",
                file=self.file,
                line=doc.line_of("items"),
                kind="List",
                field="items",
                fix="write items as a YAML list of objects",
            )
            return
        entry = doc.lines.get("items") if isinstance(doc.lines, dict) else None
        item_lines = entry[1] if isinstance(entry, tuple) and isinstance(entry[1], list) else None
        for i, item in enumerate(items):
            line = doc.line_of("items", i)
            if not isinstance(item, dict):
                self.problems.error(
                    f"each item of a List must be a mapping with apiVersion and kind, got {_describe(item)}",
                    file=self.file,
                    line=line,
                    kind="List",
                    field=f"items[{i}]",
                    fix="write each item as key: value pairs starting with apiVersion: and kind:",
                )
                continue
            sub = item_lines[i] if item_lines is not None else None
            self.take(line)
            self.emit(Document(item, self.file, line, doc.index, sub[1] if isinstance(sub, tuple) else None))

    def load(self, text: str) -> None:
        if len(text) > MAX_DOCUMENT_BYTES:
            # A document's node tree costs ~60 bytes of memory per byte of YAML: a big file is read piece by
            # piece, and a piece too big for the API server is first counted (streaming) so one huge
            # document cannot exhaust memory.
            self.load_pieces(text)
            return
        roots: Iterator[Node] = yaml.compose_all(text, Loader=_Loader)
        while True:
            try:
                root = next(roots)
            except StopIteration:
                return
            except yaml.YAMLError:
                break
            self.add_root(root, 0)
        # Slow path after a syntax error: parse each document alone so a bad one loses only itself.
        self.docs.clear()
        self.skip, self.handed = self.handed, 0
        self.problems = Problems()
        self.index = 0
        self.budget.documents = self.documents_before
        self.load_pieces(text)

    def load_pieces(self, text: str) -> None:
        for offset, piece in _split_documents(text):
            if len(piece) > MAX_DOCUMENT_BYTES and _node_count_exceeds(piece, MAX_NODES_PER_DOCUMENT):
                self.problems.error(
                    f"this document holds more than {MAX_NODES_PER_DOCUMENT:,} YAML values, gpufleet's limit per "
                    "document (see docs/limits.md); it is left out", file=self.file, line=offset + 1,
                    fix="split it into several documents (a List of many objects: one document per object, "
                    "as `kubectl get -o yaml` items can be written)")
                self.index += 1
                continue
            try:
                piece_roots = list(yaml.compose_all(piece, Loader=_Loader))
            except yaml.YAMLError as exc:
                self.syntax_error(exc, offset)
                self.index += 1
                continue
            for root in piece_roots:
                self.add_root(root, offset)


_MARKER_RE = re.compile(r"^(---|\.\.\.)(?=[ \t\r\n]|$)", re.MULTILINE)
# Lines that by themselves make no document: blank, comment, directive, bare marker.
_NO_CONTENT_RE = re.compile(r"(?:[ \t]*(?:#.*)?|%.*|(?:---|\.\.\.)(?:[ \t]+(?:#.*)?)?)\r?")


def _has_content(piece: str) -> bool:
    return any(not _NO_CONTENT_RE.fullmatch(line) for line in piece.split("\n"))


def _split_documents(text: str) -> list[tuple[int, str]]:
    """Split a stream at its document markers into (lines before the piece, piece).

    A marker at column 0 cannot occur inside YAML content, so the cut is safe. Pieces holding only
    comments or directives are joined to the next piece, which keeps ``%YAML`` directives with the document
    they belong to.
    """
    cuts = {0, len(text)}
    for m in _MARKER_RE.finditer(text):
        if m.group(1) == "---":
            cuts.add(m.start())
        else:
            newline = text.find("\n", m.end())
            cuts.add(len(text) if newline < 0 else newline + 1)
    pieces: list[tuple[int, str]] = []
    pending: int | None = None
    pos = lineno = 0  # lineno counts the newlines before pos; advanced incrementally to stay linear
    for start, end in itertools.pairwise(sorted(cuts)):
        begin = start if pending is None else pending
        piece = text[start:end]
        # A bare "---" is an empty document of its own; it must keep its place for the index count.
        if piece.startswith("---") or _has_content(piece):
            lineno += text.count("\n", pos, begin)
            pos = begin
            pieces.append((lineno, text[begin:end]))
            pending = None
        else:
            pending = begin
    return pieces


def load_text(text: str, file: str, problems: Problems, budget: InputBudget | None = None,
              sink: Callable[[Document], None] | None = None) -> list[Document]:
    """Documents of one YAML/JSON stream, ``file`` naming it in messages. Problems go to ``problems``;
    ``budget`` is the run's input limits (a fresh one when the text is read on its own). With ``sink`` each
    document goes there as soon as it is read and the list returned is empty."""
    budget = budget if budget is not None else InputBudget()
    if text.startswith("\ufeff"):
        text = text[1:]
    loader = _FileLoader(file, budget, sink)
    # The loader allocates millions of small objects that all stay alive; the cyclic collector would
    # rescan them again and again (measured 3-4x slower on 50,000 documents) to find no garbage.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        loader.load(text)
    except _DocumentLimit:
        pass  # said once by the loader; what was read before the limit is kept
    finally:
        if gc_was_enabled:
            gc.enable()
    problems.extend(loader.problems.all)
    return loader.docs


def _folder_files(folder: str, problems: Problems) -> list[str]:
    """Manifest files under ``folder``, recursively, in a stable order; hidden files and folders skipped."""

    def unreadable(exc: OSError) -> None:
        problems.error(
            f"cannot read folder {exc.filename}: {exc.strerror}",
            file=str(exc.filename),
            fix="check the folder's permissions",
        )

    found: list[tuple[tuple[str, ...], str]] = []
    for dirpath, dirnames, filenames in os.walk(folder, onerror=unreadable):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = os.path.relpath(dirpath, folder)
        rel_parts = () if rel == os.curdir else tuple(rel.split(os.sep))
        for name in filenames:
            if not name.startswith(".") and name.lower().endswith(MANIFEST_SUFFIXES):
                found.append(((*rel_parts, name), os.path.join(dirpath, name)))
    found.sort()
    return [path for _, path in found]


def read_file_bytes(path: str, problems: Problems, budget: InputBudget, *, skip_irregular: bool = True
                    ) -> bytes | None:
    """The bytes of one regular file within ``budget``; None (with the problem said) otherwise.

    Anything but a regular file (a FIFO, a device such as ``/dev/zero``, a socket) is never read: reading it could
    block or never end. ``skip_irregular`` says so with a warning (a folder of manifests goes on without it);
    without it, for a file a command cannot do without, it is an error."""
    try:
        # O_NONBLOCK: opening a FIFO nobody writes to would otherwise block before fstat can tell what it is.
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                report = problems.warning if skip_irregular else problems.error
                report("not a regular file (a pipe, device or socket): reading it could block or never end; "
                       + ("it is skipped" if skip_irregular else "it is not read"), file=path,
                       fix="save the manifests to a file, or pipe them into `-` (stdin)" if skip_irregular
                       else "give the path of a regular file")
                return None
            if st.st_size > budget.bytes:
                problems.error(f"the input would exceed {budget.says()}; this file ({st.st_size:,} bytes) is not "
                               "read", file=path, fix="give fewer or smaller files")
                return None
            data = fh.read(budget.bytes + 1)
    except OSError as exc:
        problems.error(f"cannot read {path}: {exc.strerror}", file=path, fix="check the path and the file's "
                       "permissions")
        return None
    return data if _take_bytes(data, path, problems, budget) else None


def read_file_text(path: str, problems: Problems, budget: InputBudget, *, skip_irregular: bool = True
                   ) -> str | None:
    """:func:`read_file_bytes` decoded as UTF-8 (a byte-order mark dropped); None (with the problem said) when
    the file cannot be read or is not UTF-8."""
    data = read_file_bytes(path, problems, budget, skip_irregular=skip_irregular)
    return None if data is None else _decode(data, path, problems)


def _take_bytes(data: bytes, name: str, problems: Problems, budget: InputBudget) -> bool:
    """Count ``data`` against the budget; False (with the problem said) when it does not fit."""
    if len(data) > budget.bytes:
        problems.error(f"the input exceeds {budget.says()}; it is not read", file=name,
                       fix="give fewer or smaller files")
        return False
    budget.bytes -= len(data)
    return True


def _decode(data: bytes, name: str, problems: Problems) -> str | None:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # The line goes in the message, not in ``line``: a file that cannot be read at all has no line
        # (callers tell unread files by that).
        line = data.count(b"\n", 0, exc.start) + 1
        problems.error(
            f"the file is not UTF-8 text ({exc.reason} at byte {exc.start:,}, line {line:,})",
            file=name,
            fix="save the file as UTF-8",
        )
    return None


def _read_stream(stream: TextIO | BinaryIO, problems: Problems, budget: InputBudget) -> str | None:
    raw = stream.buffer if hasattr(stream, "buffer") else stream
    data = raw.read(budget.bytes + 1)
    if isinstance(data, str):  # a text stream without a buffer (tests pass io.StringIO)
        data = data.encode("utf-8")
    return _decode(data, STDIN_NAME, problems) if _take_bytes(data, STDIN_NAME, problems, budget) else None


def load_paths(paths: Sequence[str], problems: Problems, *, stdin: TextIO | None = None,
               budget: InputBudget | None = None, sink: Callable[[Document], None] | None = None) -> list[Document]:
    """Documents of every path in order: files, folders (recursively, sorted) and ``-`` for stdin, within
    the run's input limits (bytes and documents, ``docs/limits.md``); handed to ``sink`` one by one when
    given (then the list returned is empty)."""
    budget = budget if budget is not None else InputBudget()
    docs: list[Document] = []
    for path in paths:
        if path == "-":
            text = _read_stream(sys.stdin if stdin is None else stdin, problems, budget)
            if text is not None:
                docs.extend(load_text(text, STDIN_NAME, problems, budget, sink))
            continue
        if os.path.isdir(path):
            files = _folder_files(path, problems)
            if not files:
                problems.warning(
                    "the folder holds no .yaml, .yml or .json files",
                    file=path,
                    fix="check the path, or put the manifests in files ending .yaml",
                )
        elif os.path.exists(path):
            files = [path]
        else:
            problems.error(
                "no such file or folder",  # the path is the problem's file: said once
                file=path,
                fix="check the path (use - to read from stdin)",
            )
            continue
        for file in files:
            if budget.exhausted:
                return docs
            text = read_file_text(file, problems, budget)
            if text is not None:
                docs.extend(load_text(text, file, problems, budget, sink))
    return docs
