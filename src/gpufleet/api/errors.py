"""Problems found in manifests, each pinned to a file, line, object and field, with a suggested fix.

Parsing never stops at the first problem: every stage appends to a :class:`Problems` collector so a user
sees all mistakes of a manifest set in one run. Callers that want an exception call
:meth:`Problems.raise_if_errors`, which raises :class:`ManifestErrors` carrying the whole list.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]


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

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[ManifestError] = []

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
    ) -> None:
        self._items.append(ManifestError(message, file, line, kind, name, field, fix, "warning"))

    def add(self, e: ManifestError) -> None:
        self._items.append(e)

    def extend(self, es: Iterable[ManifestError]) -> None:
        self._items.extend(es)

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
        return any(e.severity == "error" for e in self._items)

    def __repr__(self) -> str:
        return f"Problems(errors={len(self.errors)}, warnings={len(self.warnings)})"

    def raise_if_errors(self) -> None:
        """Raise :class:`ManifestErrors` with every error (warnings are left out) if there is any."""
        errors = self.errors
        if errors:
            raise ManifestErrors(errors)
