"""Problems found in manifests, each pinned to a file, line, object and field, with a suggested fix.

Parsing never stops at the first problem: every stage appends to a :class:`Problems` collector so a user
sees all mistakes of a manifest set in one run. Callers that want an exception call
:meth:`Problems.raise_if_errors`, which raises :class:`ManifestErrors` carrying the whole list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

Severity = Literal["error", "warning"]

# The code of a warning about something in the input that gpufleet leaves out (a kind or a field it does not read,
# a feature it does not implement): ``--strict`` turns these into errors (:meth:`Problems.escalate`).
LEFT_OUT = "left-out"

# A message quotes user values; past this length its middle is cut, so one giant value cannot flood a terminal
# or a log line (an error is still one readable line).
MAX_MESSAGE_CHARS = 400


def shown(value: Any, limit: int = 60) -> str:
    """A short, bounded rendering of a user-supplied value for messages: like ``repr`` for small values, cut
    for long ones, and never formatting a whole structure (a YAML alias bomb holds billions of shared items,
    and an int of 5,000 digits cannot even be turned into a string)."""
    return _shown(value, limit, 2)


def _shown(value: Any, limit: int, depth: int) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 200:
            return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
        text = repr(value)
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, str):
        text = repr(value if len(value) <= limit else value[:limit])
        if len(value) > limit:
            return f"{text[:-1]}...{text[-1]} ({len(value)} characters)"
        return text
    elif isinstance(value, dict):
        if depth <= 0 or not value:
            return "{...}" if value else "{}"
        head = [f"{_shown(k, 20, 0)}: {_shown(v, 20, depth - 1)}" for k, v in _first(value.items(), 3)]
        more = ", ..." if len(value) > 3 else ""
        text = "{" + ", ".join(head) + more + "}"
    elif isinstance(value, list | tuple):
        if depth <= 0 or not value:
            return "[...]" if value else "[]"
        head = [_shown(v, 20, depth - 1) for v in _first(value, 3)]
        more = ", ..." if len(value) > 3 else ""
        text = "[" + ", ".join(head) + more + "]"
    else:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit + 20 else text[: limit + 17] + "..."


def _first(items: Iterable[Any], n: int) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if len(out) == n:
            break
        out.append(item)
    return out


def _bounded(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_MESSAGE_CHARS:
        return text
    half = MAX_MESSAGE_CHARS // 2
    return f"{text[:half]} ...[{len(text) - 2 * half} characters cut]... {text[-half:]}"


def field_path(parts: Iterable[str | int]) -> str:
    """Dotted field path as users read it: ``("spec", "containers", 0)`` -> ``spec.containers[0]``.

    Keys are written verbatim, dots included (``limits.nvidia.com/gpu``), as kubectl does.
    """
    out: list[str] = []
    for part in parts:
        if isinstance(part, int):
            out.append(f"[{part}]")
        else:
            if out:
                out.append(".")
            out.append(part)
    return "".join(out)


@dataclass(frozen=True, slots=True)
class ManifestError:
    """One problem in a manifest; only ``message`` is required, the rest locates it as precisely as known."""

    message: str
    file: str | None = None
    line: int | None = None
    kind: str | None = None
    name: str | None = None
    field: str | None = None
    fix: str | None = None
    severity: Severity = "error"
    code: str | None = None  # what kind of problem, for callers that treat some differently (LEFT_OUT)

    def __post_init__(self) -> None:
        # Bounded once here, so every consumer (terminal, JSON, events, logs) gets the same readable text.
        for name in ("message", "fix", "field", "name", "file"):
            value = getattr(self, name)
            bounded = _bounded(value)
            if bounded is not value:
                object.__setattr__(self, name, bounded)

    def __str__(self) -> str:
        parts: list[str] = []
        if self.file is not None:
            parts.append(self.file if self.line is None else f"{self.file}:{self.line}")
        elif self.line is not None:
            parts.append(f"line {self.line}")
        obj = " ".join(p for p in (self.kind, self.name) if p)
        if obj:
            parts.append(obj)
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        text = ": ".join(parts)
        if self.fix:
            text += f"; fix: {self.fix}"
        if self.severity == "warning":
            text = "warning: " + text
        return text

    def to_dict(self) -> dict[str, object]:
        """All fields, ``None`` included, so JSON consumers see a fixed set of keys."""
        return {
            "severity": self.severity,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "kind": self.kind,
            "name": self.name,
            "field": self.field,
            "fix": self.fix,
        }


class ManifestErrors(Exception):
    """Raised by callers that want an exception; ``errors`` holds every problem, not just the first."""

    def __init__(self, errors: Iterable[ManifestError]) -> None:
        self.errors: list[ManifestError] = list(errors)
        super().__init__(self._summary())

    def _summary(self) -> str:
        n = len(self.errors)
        if n == 1:
            return str(self.errors[0])
        head = f"{n} manifest problems:"
        return "\n".join([head, *(f"  {e}" for e in self.errors)])


class Problems:
    """Collects errors and warnings while manifests are read; truthy when at least one *error* was seen."""

    __slots__ = ("_errors", "_items")

    def __init__(self) -> None:
        self._items: list[ManifestError] = []
        self._errors = 0

    def error(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        kind: str | None = None,
        name: str | None = None,
        field: str | None = None,
        fix: str | None = None,
    ) -> None:
        self._items.append(ManifestError(message, file, line, kind, name, field, fix, "error"))
        self._errors += 1

    def warning(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        kind: str | None = None,
        name: str | None = None,
        field: str | None = None,
        fix: str | None = None,
        code: str | None = None,
    ) -> None:
        self._items.append(ManifestError(message, file, line, kind, name, field, fix, "warning", code))

    def add(self, e: ManifestError) -> None:
        self._items.append(e)
        self._errors += e.severity == "error"

    def extend(self, es: Iterable[ManifestError]) -> None:
        for e in es:
            self.add(e)

    @property
    def error_count(self) -> int:
        """How many errors so far, in O(1) (parsers compare it before and after an object)."""
        return self._errors

    @property
    def errors(self) -> list[ManifestError]:
        return [e for e in self._items if e.severity == "error"]

    @property
    def warnings(self) -> list[ManifestError]:
        return [e for e in self._items if e.severity == "warning"]

    @property
    def all(self) -> list[ManifestError]:
        """Every problem in the order it was reported."""
        return list(self._items)

    def __iter__(self) -> Iterator[ManifestError]:
        return iter(list(self._items))

    def __bool__(self) -> bool:
        # Truthiness means "has errors". Never write ``problems or Problems()``: a collector holding only
        # warnings is falsy and would be replaced, losing them.
        return self._errors > 0

    def __repr__(self) -> str:
        return f"Problems(errors={len(self.errors)}, warnings={len(self.warnings)})"

    def escalate(self, code: str) -> int:
        """Turn every warning of ``code`` into an error (``--strict``); how many were turned."""
        turned = 0
        for i, e in enumerate(self._items):
            if e.severity == "warning" and e.code == code:
                self._items[i] = replace(e, severity="error")
                self._errors += 1
                turned += 1
        return turned

    def raise_if_errors(self) -> None:
        """Raise :class:`ManifestErrors` with every error (warnings are left out) if there is any."""
        errors = self.errors
        if errors:
            raise ManifestErrors(errors)
