"""A cursor over one manifest document that reads typed fields and reports problems with file and line.

Every parser in :mod:`gpufleet.api.kinds` walks its document through a :class:`FieldReader`, so each error
names the file, the line, the object (kind/name) and the dotted field path, and says how to fix it. A reader
never raises on bad input: it records the problem and returns a default, so one bad field costs only itself.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Mapping
from fractions import Fraction
from typing import Any, TypeVar

from gpufleet.api.errors import Problems, shown
from gpufleet.api.limits import MAX_INT_DIGITS, Limit
from gpufleet.api.quantity import QuantityError, parse_quantity
from gpufleet.api.source import Document

T = TypeVar("T")
PathPart = str | int

# ASCII digits only: str.isdigit() also accepts "²" and "٣", which int() then refuses or misreads. 18 digits
# keep every accepted integer inside int64, as Kubernetes' own fields are.
_INT_TEXT = re.compile(rf"[+-]?[0-9]{{1,{MAX_INT_DIGITS}}}")
_INT64 = 2**63 - 1


def parse_int_text(text: str) -> int | None:
    """A decimal integer written in ASCII digits (optionally signed, at most 18 digits); None otherwise.

    The one integer reader for text from labels, annotations and quoted fields."""
    stripped = text.strip()
    return int(stripped) if _INT_TEXT.fullmatch(stripped) else None


def _fmt_path(path: tuple[PathPart, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


class FieldReader:
    """Reads fields at ``path`` inside ``doc``; ``kind``/``name`` label every problem it reports."""

    __slots__ = ("_value", "doc", "kind", "name", "path", "problems")

    def __init__(
        self,
        doc: Document,
        problems: Problems,
        *,
        kind: str | None,
        name: str | None,
        path: tuple[PathPart, ...] = (),
        value: Any = None,
    ) -> None:
        self.doc = doc
        self.problems = problems
        self.kind = kind
        self.name = name
        self.path = path
        self._value = doc.data if not path and value is None else value

    # -- reporting -------------------------------------------------------------------------------------
    def where(self, *sub: PathPart) -> tuple[str, int]:
        full = self.path + sub
        return _fmt_path(full), self.doc.line_of(*full)

    def error(self, message: str, *sub: PathPart, fix: str | None = None) -> None:
        field, line = self.where(*sub)
        self.problems.error(message, file=self.doc.file, line=line, kind=self.kind, name=self.name,
                            field=field or None, fix=fix)

    def warning(self, message: str, *sub: PathPart, fix: str | None = None, code: str | None = None) -> None:
        field, line = self.where(*sub)
        self.problems.warning(message, file=self.doc.file, line=line, kind=self.kind, name=self.name,
                              field=field or None, fix=fix, code=code)

    # -- navigation ------------------------------------------------------------------------------------
    @property
    def value(self) -> Any:
        return self._value

    def raw(self, key: str) -> Any:
        return self._value.get(key) if isinstance(self._value, Mapping) else None

    def has(self, key: str) -> bool:
        return isinstance(self._value, Mapping) and key in self._value and self._value[key] is not None

    def child(self, key: PathPart, value: Any) -> FieldReader:
        return FieldReader(self.doc, self.problems, kind=self.kind, name=self.name,
                           path=(*self.path, key), value=value)

    def obj(self, key: str, *, required: bool = False) -> FieldReader | None:
        """The mapping under ``key`` as a reader, or None when absent (an error when required)."""
        value = self.raw(key)
        if value is None:
            if required:
                self.error(f"missing required field {key}", key, fix=f"add {key}")
            return None
        if not isinstance(value, Mapping):
            self.error(f"expected a mapping, got {type(value).__name__}", key)
            return None
        return self.child(key, value)

    def items(self, key: str, *, required: bool = False) -> Iterator[FieldReader]:
        """Readers over the list of mappings under ``key``; an item that is not a mapping is reported and
        skipped (every list gpufleet reads this way holds objects)."""
        value = self.raw(key)
        if value is None:
            if required:
                self.error(f"missing required list {key}", key, fix=f"add {key}")
            return
        if not isinstance(value, list):
            self.error(f"expected a list, got {type(value).__name__}", key, fix=f"write {key} as a YAML list")
            return
        base = self.child(key, value)
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                base.error(f"expected a mapping, got {shown(item)}", i,
                           fix=f"write each item of {key} as key: value pairs")
                continue
            yield base.child(i, item)

    # -- scalars ---------------------------------------------------------------------------------------
    def text(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        value = self.raw(key)
        if value is None:
            if required:
                self.error(f"missing required field {key}", key, fix=f"add {key}")
            return default
        if isinstance(value, bool):
            # YAML 1.1 reads on/off/yes/no/true/false unquoted as booleans.
            self.error(f"expected a string, got the boolean {str(value).lower()}", key,
                       fix=f'quote the value, e.g. {key}: "{"on" if value else "off"}" (YAML reads on/off/yes/no '
                       "as booleans)")
            return default
        if not isinstance(value, str | int | float):
            self.error(f"expected a string, got {type(value).__name__}", key)
            return default
        return str(value)

    def enum(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.text(key)
        if value is None:
            return default
        if value not in allowed:
            self.error(f"{shown(value)} is not one of {', '.join(allowed)}", key,
                       fix=f"use one of {', '.join(allowed)}")
            return default
        return value

    def integer(self, key: str, default: int | None = None, *, minimum: int | None = None,
                maximum: int | Limit | None = None, required: bool = False) -> int | None:
        """An integer field (a YAML int or a quoted ASCII integer), within ``minimum`` and ``maximum``."""
        value = self.raw(key)
        if value is None:
            if required:
                self.error(f"missing required field {key}", key, fix=f"add {key}")
            return default
        if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) <= _INT64:
            value = int(value)  # "1e3" read by YAML as a float
        if isinstance(value, str):
            parsed = parse_int_text(value)
            if parsed is None:
                self.error(f"expected an integer, got {shown(value)}", key,
                           fix="write a whole number in ASCII digits, e.g. 4")
                return default
            value = parsed
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(f"expected an integer, got {shown(value)}", key, fix="write a whole number, e.g. 4")
            return default
        if abs(value) > _INT64:
            self.error(f"{shown(value)} is out of range for an integer", key, fix="write a smaller number")
            return default
        if minimum is not None and value < minimum:
            self.error(f"must be at least {minimum}, got {value}", key, fix=f"use a value of at least {minimum:,}")
            return default
        if maximum is not None:
            top = maximum.value if isinstance(maximum, Limit) else maximum
            if value > top:
                said = maximum.says() if isinstance(maximum, Limit) else f"at most {top:,}"
                self.error(f"{value:,} is too large: {said}", key, fix=f"use a value of at most {top:,}")
                return default
        return int(value)

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        self.error(f"expected true or false, got {shown(value)}", key)
        return default

    def number(self, key: str, default: float | None = None) -> float | None:
        """A finite number (int, float or numeric string)."""
        value = self.raw(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            self.error(f"expected a number, got {shown(value)}", key)
            return default
        try:
            number = float(value) if not isinstance(value, str) or len(value) <= 64 else math.nan
        except (ValueError, OverflowError):
            number = math.nan
        if not math.isfinite(number):
            self.error(f"expected a finite number, got {shown(value)}", key, fix="write a number such as 2.5")
            return default
        return number

    def quantity(self, key: str, *, allow_negative: bool = False) -> Fraction | None:
        value = self.raw(key)
        if value is None:
            return None
        try:
            q = parse_quantity(value)
        except QuantityError as exc:
            self.error(str(exc), key, fix="write a Kubernetes quantity such as 500m, 2, 10Gi or 1e3")
            return None
        if q < 0 and not allow_negative:
            self.error(f"quantity must not be negative, got {shown(value)}", key, fix="use a value of 0 or more")
            return None
        return q

    def string_map(self, key: str) -> dict[str, str]:
        value = self.raw(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.error(f"expected a mapping of strings, got {type(value).__name__}", key)
            return {}
        out: dict[str, str] = {}
        for k, v in value.items():
            if v is None or isinstance(v, list | dict):
                self.error(f"value of {shown(k)} must be a string", key, str(k),
                           fix=f'quote it: {shown(k)}: "..."' if v is not None else "give it a value")
                continue
            out[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
        return out

    def string_list(self, key: str) -> list[str]:
        value = self.raw(key)
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
            self.error("expected a list of strings", key)
            return []
        return [str(v) for v in value]

    def each(self, key: str, parse: Callable[[FieldReader], T | None], *, required: bool = False) -> list[T]:
        out = []
        for item in self.items(key, required=required):
            parsed = parse(item)
            if parsed is not None:
                out.append(parsed)
        return out
