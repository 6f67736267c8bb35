"""Read multi-document YAML (or JSON) from files, folders and stdin, remembering the line of every field.

Each document is composed into a YAML node tree (libyaml when available) and turned into the same plain
Python data ``yaml.safe_load`` would give. The node tree is kept on the :class:`Document` so that later
stages can ask for the line of any field with :meth:`Document.line_of` without a second index being built
up front.

A syntax error costs only the document it is in: the file is then split on its ``---``/``...`` markers and
each piece is parsed alone, so the valid documents around a broken one are still returned.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpufleet.api.errors import Problems, field_path

try:
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

__all__ = ["Document", "load_paths", "load_text"]

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

PathPart = str | int


@dataclass(slots=True)
class Document:
    """One YAML document (or one item of a ``kind: List``) and where it came from.

    ``node`` is the composed YAML node of ``data`` and ``line_offset`` the number of lines before the piece
    of the file it was parsed from; both exist only to answer :meth:`line_of`. A Document built by hand
    without a node reports ``line`` for every field.
    """

    data: Any
    file: str
    line: int
    index: int
    node: Node | None = field(default=None, repr=False, compare=False)
    line_offset: int = field(default=0, repr=False, compare=False)

    def line_of(self, *path: PathPart) -> int:
        """1-based line of the deepest node along ``path`` that exists; the document line if none does.

        For a mapping key this is the line of the key, which is where a reader looks for ``resources:``
        even when its value starts on the next line.
        """
        node = self.node
        line = self.line
        if node is None:
            return line
        for part in path:
            if isinstance(node, MappingNode):
                # The last duplicate wins in the data, so it must win here too.
                for key_node, value_node in reversed(node.value):
                    if _key_matches(key_node, part):
                        line = key_node.start_mark.line + 1 + self.line_offset
                        node = value_node
                        break
                else:
                    return line
            elif isinstance(node, SequenceNode) and isinstance(part, int) and not isinstance(part, bool):
                items = node.value
                if not -len(items) <= part < len(items):
                    return line
                node = items[part]
                line = node.start_mark.line + 1 + self.line_offset
            else:
                return line
        return line


def _key_matches(key_node: Node, part: PathPart) -> bool:
    if not isinstance(key_node, ScalarNode):
        return False
    if key_node.tag == _STR:
        return isinstance(part, str) and key_node.value == part
    ctor = _SCALAR_CTORS.get(key_node.tag)
    if ctor is None:
        return False
    try:
        value = ctor(_KEY_CONSTRUCTOR, key_node)
    except (yaml.YAMLError, ValueError, TypeError):
        return False
    # True == 1 in Python, but a path index 1 must not select the key "on"/"true".
    return bool(value == part and isinstance(value, bool) == isinstance(part, bool))


_KEY_CONSTRUCTOR = SafeConstructor()


class _BuildError(Exception):
    def __init__(self, message: str, node: Node, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.node = node
        self.fix = fix


class _Builder:
    """Turns one document's node tree into plain data exactly as ``SafeConstructor`` would.

    Written out here rather than calling ``construct_document`` because the common cases (str scalars,
    plain maps and lists) are several times faster this way, and because duplicate keys must be noticed.
    """

    __slots__ = ("active", "ctor", "duplicates", "memo")

    def __init__(self, ctor: SafeConstructor) -> None:
        self.ctor = ctor
        # Anchored collections are shared, as safe_load shares them, and built once (no alias blow-up).
        self.memo: dict[int, Any] = {}
        self.active: set[int] = set()
        self.duplicates: list[tuple[MappingNode, Node, Any]] = []

    def build(self, node: Node) -> Any:
        cls = node.__class__
        tag = node.tag
        if cls is ScalarNode:
            if tag == _STR:
                return node.value
            ctor = _SCALAR_CTORS.get(tag)
            if ctor is None:
                return self.ctor.construct_document(node)  # raises ConstructorError for unknown tags
            try:
                return ctor(self.ctor, node)  # type: ignore[arg-type]
            except ValueError as exc:
                kind = tag.rsplit(":", 1)[-1]
                raise _BuildError(f"cannot read {node.value!r} as {kind}: {exc}", node) from None
        key = id(node)
        if key in self.memo:
            if key in self.active:
                raise _BuildError(
                    "an alias refers to a node that contains it (recursive alias)",
                    node,
                    fix="replace the alias with a copy of the data",
                )
            return self.memo[key]
        if cls is SequenceNode and tag == _SEQ:
            items: list[Any] = []
            self.memo[key] = items
            self.active.add(key)
            build = self.build
            for child in node.value:
                items.append(build(child))
            self.active.discard(key)
            return items
        if cls is MappingNode and tag == _MAP:
            assert isinstance(node, MappingNode)
            mapping: dict[Any, Any] = {}
            self.memo[key] = mapping
            self.active.add(key)
            self._fill_mapping(node, mapping)
            self.active.discard(key)
            return mapping
        # !!set, !!omap, !!pairs and the like: rare enough to hand to PyYAML as a whole.
        value = self.ctor.construct_document(node)
        self.memo[key] = value
        return value

    def _fill_mapping(self, node: MappingNode, out: dict[Any, Any]) -> None:
        pairs = node.value
        own_from = 0
        if any(k.tag == _MERGE for k, _ in pairs):
            own = sum(1 for k, _ in pairs if k.tag != _MERGE)
            # Merged pairs are placed first and overridden by the mapping's own keys; that override is the
            # point of "<<", so only clashes among the own keys are reported as duplicates.
            self.ctor.flatten_mapping(node)
            pairs = node.value
            own_from = len(pairs) - own
        build = self.build
        seen_own: set[Any] | None = set() if own_from else None
        for i, (key_node, value_node) in enumerate(pairs):
            if key_node.__class__ is ScalarNode and key_node.tag == _STR:
                k = key_node.value
            else:
                k = build(key_node)
            try:
                if seen_own is None:
                    if k in out:
                        self.duplicates.append((node, key_node, k))
                elif i >= own_from:
                    if k in seen_own:
                        self.duplicates.append((node, key_node, k))
                    seen_own.add(k)
            except TypeError:
                raise _BuildError(
                    f"a mapping key must be a plain value, got a {type(k).__name__}",
                    key_node,
                    fix="use a string key",
                ) from None
            out[k] = build(value_node)


def _path_to(root: Node, target: Node) -> tuple[PathPart, ...] | None:
    """Field path from ``root`` to ``target``, for messages about a node found while building."""
    stack: list[tuple[Node, tuple[PathPart, ...]]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return path
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for k, v in node.value:
                stack.append((v, (*path, str(k.value) if isinstance(k, ScalarNode) else "?")))
        elif isinstance(node, SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, (*path, i)))
    return None


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    return f"a {type(value).__name__} ({value!r})"


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


class _FileLoader:
    """Loads the documents of one file (or stdin) into ``docs``, reporting problems."""

    def __init__(self, file: str, problems: Problems) -> None:
        self.file = file
        self.problems = problems
        self.docs: list[Document] = []
        self.index = 0
        self.ctor = SafeConstructor()

    def syntax_error(self, exc: yaml.YAMLError, offset: int) -> None:
        line: int | None = None
        if isinstance(exc, yaml.MarkedYAMLError):
            mark = exc.problem_mark or exc.context_mark
            problem = exc.problem or str(exc)
            message = f"invalid YAML: {problem}"
            if exc.context and exc.context_mark is not None:
                message += f" ({exc.context} at line {exc.context_mark.line + 1 + offset})"
            if mark is not None:
                line = mark.line + 1 + offset
        else:
            message = f"invalid YAML: {exc}"
            line = offset + 1
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
        builder = _Builder(self.ctor)
        try:
            data = builder.build(root)
        except _BuildError as exc:
            self.problems.error(
                exc.message, file=self.file, line=exc.node.start_mark.line + 1 + offset, fix=exc.fix
            )
            return
        except yaml.MarkedYAMLError as exc:
            self.syntax_error(exc, offset)
            return
        except RecursionError:
            self.problems.error(
                "the document is nested too deeply to read",
                file=self.file,
                line=line,
                fix="flatten the document",
            )
            return
        if data is None:
            return  # an empty document: "---" with nothing after it, or a lone "null"
        doc = Document(data, self.file, line, index, root, offset)
        kind, name = _label(data)
        for mapping_node, key_node, key in builder.duplicates:
            parent = _path_to(root, mapping_node) or ()
            self.problems.warning(
                f"duplicate key {key!r}; YAML keeps only the last value",
                file=self.file,
                line=key_node.start_mark.line + 1 + offset,
                kind=kind,
                name=name,
                field=field_path((*parent, str(key))),
                fix="remove one of the two entries",
            )
        if not isinstance(data, dict):
            self.problems.error(
                f"a manifest document must be a mapping with apiVersion and kind, got {_describe(data)}",
                file=self.file,
                line=line,
                fix="write the object as key: value pairs starting with apiVersion: and kind:",
            )
            return
        if data.get("kind") == "List":
            self.expand_list(doc)
        else:
            self.docs.append(doc)

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
        items_node = _value_node(doc.node, "items")
        for i, item in enumerate(items):
            item_node = items_node.value[i] if isinstance(items_node, SequenceNode) else None
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
            self.docs.append(Document(item, self.file, line, doc.index, item_node, doc.line_offset))

    def load(self, text: str) -> list[Document]:
        try:
            roots = list(yaml.compose_all(text, Loader=_Loader))
        except yaml.YAMLError:
            self.load_pieces(text)
        else:
            for root in roots:
                self.add_root(root, 0)
        return self.docs

    def load_pieces(self, text: str) -> None:
        """Slow path after a syntax error: parse each document alone so one bad one loses only itself."""
        self.docs.clear()
        self.index = 0
        for offset, piece in _split_documents(text):
            try:
                roots = list(yaml.compose_all(piece, Loader=_Loader))
            except yaml.YAMLError as exc:
                self.syntax_error(exc, offset)
                self.index += 1
                continue
            for root in roots:
                self.add_root(root, offset)


def _value_node(node: Node | None, key: str) -> Node | None:
    if isinstance(node, MappingNode):
        for k, v in reversed(node.value):
            if _key_matches(k, key):
                found: Node = v
                return found
    return None


_MARKER_RE = re.compile(r"^(---|\.\.\.)(?=[ \t\r\n]|$)", re.MULTILINE)
# Lines that by themselves make no document: blank, comment, directive, bare marker.
_NO_CONTENT_RE = re.compile(r"(?:[ \t]*(?:#.*)?|%.*|(?:---|\.\.\.)(?:[ \t]+(?:#.*)?)?)\r?")


def _has_content(piece: str) -> bool:
    return any(not _NO_CONTENT_RE.fullmatch(line) for line in piece.split("\n"))


def _split_documents(text: str) -> list[tuple[int, str]]:
    """Split a stream at its document markers into (lines before the piece, piece).

    A marker at column 0 cannot occur inside YAML content, so the cut is safe. Pieces holding only
    comments, directives or markers are joined to the next piece, which keeps ``%YAML`` directives with the
    document they belong to.
    """
    cuts = {0, len(text)}
    for m in _MARKER_RE.finditer(text):
        if m.group(1) == "---":
            cuts.add(m.start())
        else:
            newline = text.find("\n", m.end())
            cuts.add(len(text) if newline < 0 else newline + 1)
    bounds = sorted(cuts)
    pieces: list[tuple[int, str]] = []
    pending: int | None = None
    for start, end in itertools.pairwise(bounds):
        begin = start if pending is None else pending
        if _has_content(text[start:end]):
            pieces.append((text.count("\n", 0, begin), text[begin:end]))
            pending = None
        else:
            pending = begin
    if pending is not None and pending < len(text):
        # Trailing markers only, e.g. a final "---": still a (null) document for index counting.
        pieces.append((text.count("\n", 0, pending), text[pending:]))
    return pieces


def load_text(text: str, file: str, problems: Problems) -> list[Document]:
    """Documents of one YAML/JSON stream, ``file`` naming it in messages. Problems go to ``problems``."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return _FileLoader(file, problems).load(text)


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


def _read_file(path: str, problems: Problems) -> str | None:
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return fh.read()
    except UnicodeDecodeError as exc:
        problems.error(
            f"the file is not UTF-8 text ({exc.reason} at byte {exc.start})",
            file=path,
            fix="save the file as UTF-8",
        )
    except OSError as exc:
        problems.error(f"cannot read {path}: {exc.strerror}", file=path, fix="check the file's permissions")
    return None


def load_paths(paths: Sequence[str], problems: Problems, *, stdin: TextIO | None = None) -> list[Document]:
    """Documents of every path in order: files, folders (recursively) and ``-`` for stdin."""
    docs: list[Document] = []
    for path in paths:
        if path == "-":
            stream = sys.stdin if stdin is None else stdin
            docs.extend(load_text(stream.read(), STDIN_NAME, problems))
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
                f"no such file or folder: {path}",
                file=path,
                fix="check the path (use - to read from stdin)",
            )
            continue
        for file in files:
            text = _read_file(file, problems)
            if text is not None:
                docs.extend(load_text(text, file, problems))
    return docs
