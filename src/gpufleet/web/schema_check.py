"""A JSON value against the part of JSON Schema the dashboard's OpenAPI document uses, with the path of the first
value that does not fit.

The documents the what-if page reads beside the runs (an advice, a calibration's fit) are described once, in
:mod:`gpufleet.web.openapi`; a file is checked against that description when it is read, so a wrong file is
refused at start naming the field, and the API's answers hold to the same schemas. Supported: ``type`` (one or
a list), ``enum``, ``required``, ``properties``, ``additionalProperties`` (a boolean or a schema), ``items``,
``minItems``, ``maxItems``, ``oneOf`` and ``$ref`` into ``#/components/schemas/``; anything else in a schema is
a mistake in the document and raises :class:`ValueError`. The helpers that write schemas (:func:`obj`,
:func:`array`, :func:`ref` and the plain types) are here too, for the OpenAPI document and the what-if
documents alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Schema = Mapping[str, Any]

STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
NUM: dict[str, Any] = {"type": "number"}
BOOL: dict[str, Any] = {"type": "boolean"}
NSTR: dict[str, Any] = {"type": ["string", "null"]}
NINT: dict[str, Any] = {"type": ["integer", "null"]}
NNUM: dict[str, Any] = {"type": ["number", "null"]}
OBJECT: dict[str, Any] = {"type": "object"}


def obj(required: Mapping[str, Schema], optional: Mapping[str, Schema] | None = None, *,
        extra: bool = False) -> dict[str, Any]:
    """An object with these fields (``extra``: others allowed)."""
    return {"type": "object", "required": sorted(required), "properties": {**required, **(optional or {})},
            "additionalProperties": extra}


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def array(item: Schema) -> dict[str, Any]:
    return {"type": "array", "items": item}

KEYWORDS = frozenset({"type", "enum", "required", "properties", "additionalProperties", "items", "minItems", "maxItems",
                      "oneOf", "$ref", "description"})  # what mismatch() checks ("description" says nothing)
_REF = "#/components/schemas/"


def _type_ok(value: Any, name: str) -> bool:
    if name == "null":
        return value is None
    if name == "boolean":
        return isinstance(value, bool)
    if name == "integer":
        # JSON Schema counts a number without a fractional part (0.0) as an integer: JSON has one number type.
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "string":
        return isinstance(value, str)
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    raise ValueError(f"schema type {name!r} is not supported")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def mismatch(value: Any, schema: Schema, schemas: Mapping[str, Schema], where: str) -> str | None:
    """Where ``value`` first departs from ``schema`` and how (``where.field[2]: expected ..., got ...``), or None
    when it fits; ``schemas`` resolves ``$ref``."""
    unknown = set(schema) - KEYWORDS
    if unknown:
        raise ValueError(f"schema keywords {sorted(unknown)} are not supported")
    if "$ref" in schema:
        ref = str(schema["$ref"])
        if not ref.startswith(_REF) or ref[len(_REF):] not in schemas:
            raise ValueError(f"unresolved $ref {ref!r}")
        return mismatch(value, schemas[ref[len(_REF):]], schemas, where)
    if "oneOf" in schema:
        problems = [mismatch(value, option, schemas, where) for option in schema["oneOf"]]
        fits = sum(p is None for p in problems)
        if fits == 1:
            return None
        if fits > 1:
            return f"{where}: fits more than one of its forms"
        # The form of the value's own type says where inside it the problem is; else name every type expected.
        inside = [p for p in problems if p is not None and not p.startswith(f"{where}: expected ")]
        if inside:
            return inside[0]
        expected = [p.removeprefix(f"{where}: expected ").rsplit(", got ", 1)[0] for p in problems if p]
        return f"{where}: expected {' or '.join(expected)}, got {_kind(value)}"
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_type_ok(value, n) for n in names):
            return f"{where}: expected {' or '.join(names)}, got {_kind(value)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r} is not one of {', '.join(map(repr, schema['enum']))}"
    if isinstance(value, dict):
        for name in schema.get("required", ()):
            if name not in value:
                return f"{where}: the field {name!r} is missing"
        properties: Mapping[str, Schema] = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                problem = mismatch(item, properties[name], schemas, f"{where}.{name}")
            elif extra is False:
                problem = f"{where}: the field {name!r} is not expected"
            elif isinstance(extra, Mapping):
                problem = mismatch(item, extra, schemas, f"{where}.{name}")
            else:
                problem = None
            if problem is not None:
                return problem
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            return f"{where}: {len(value)} items, expected {schema.get('minItems', 0)} to {schema.get('maxItems')}"
        if "items" in schema:
            for i, item in enumerate(value):
                problem = mismatch(item, schema["items"], schemas, f"{where}[{i}]")
                if problem is not None:
                    return problem
    return None
