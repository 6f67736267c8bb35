"""DRA device selectors: the CEL expressions of DeviceClasses and requests, evaluated on one device.

The environment is the one Kubernetes defines for ``resource.k8s.io`` selectors (``CELDeviceSelector``): one
variable ``device`` with ``driver``, ``attributes["<domain>"].<name>``, ``capacity["<domain>"].<name>`` and
``allowMultipleAllocations``; a domain no attribute of the device carries reads as an empty map, a missing name
is an evaluation error (which, as in kube-scheduler, makes the device unusable for that request and is reported).
Kubernetes' ``semver`` and ``quantity`` libraries are there with the members selectors use (``compareTo``,
``isGreaterThan``, ``isLessThan``, ``major``/``minor``/``patch``, ``asInteger``, ``isInteger``).

Evaluation is cel-python's. Left out, with a clear error when an expression uses it: ``cel.bind`` (cel-python
has no such macro) and the other Kubernetes libraries (lists, regex, URLs, IP addresses).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from gpufleet.api.quantity import QuantityError, parse_quantity

MAX_EXPRESSION_BYTES = 10 * 1024  # the API's limit on one selector


class SelectorError(ValueError):
    """An expression that does not compile, or that failed on a device (its message says which and why)."""


# ---- the Kubernetes semver and quantity values ---------------------------------------------------------------

_SEMVER_RE = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


@dataclass(frozen=True, slots=True)
class Semver:
    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()

    def key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        # A release sorts after its pre-releases; numeric identifiers sort before alphanumeric ones (semver 2.0).
        pre = tuple((0, int(p)) if p.isdigit() else (1, p) for p in self.pre)
        return self.major, self.minor, self.patch, 0 if self.pre else 1, pre


def parse_semver(text: str) -> Semver:
    m = _SEMVER_RE.match(text)
    if m is None:
        raise SelectorError(f"{text!r} is not a semantic version (e.g. 1.2.3)")
    pre = tuple(m.group(4).split(".")) if m.group(4) else ()
    return Semver(int(m.group(1)), int(m.group(2)), int(m.group(3)), pre)


@dataclass(frozen=True, slots=True)
class Quantity:
    value: Fraction


def _quantity(text: object) -> Quantity:
    try:
        return Quantity(parse_quantity(str(text)))
    except QuantityError as e:
        raise SelectorError(str(e)) from None


def _ordered(a: object, b: object) -> tuple[Any, Any]:
    if isinstance(a, Quantity) and isinstance(b, Quantity):
        return a.value, b.value
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.key(), b.key()
    raise SelectorError(f"cannot compare {type(a).__name__} with {type(b).__name__}")


def _compare_to(a: object, b: object) -> celtypes.IntType:
    x, y = _ordered(a, b)
    return celtypes.IntType((x > y) - (x < y))


def _greater(a: object, b: object) -> celtypes.BoolType:
    x, y = _ordered(a, b)
    return celtypes.BoolType(x > y)


def _less(a: object, b: object) -> celtypes.BoolType:
    x, y = _ordered(a, b)
    return celtypes.BoolType(x < y)


def _semver_part(name: str) -> Any:
    def part(v: object) -> celtypes.IntType:
        if not isinstance(v, Semver):
            raise SelectorError(f"{name}() is for versions")
        return celtypes.IntType(getattr(v, name))
    return part


def _as_integer(q: object) -> celtypes.IntType:
    if not isinstance(q, Quantity) or q.value.denominator != 1:
        raise SelectorError("asInteger() needs a whole quantity")
    return celtypes.IntType(int(q.value))


def _is_integer(q: object) -> celtypes.BoolType:
    if not isinstance(q, Quantity):
        raise SelectorError("isInteger() is for quantities")
    return celtypes.BoolType(q.value.denominator == 1)


def _semver(text: object) -> Semver:
    return parse_semver(str(text))


def _is_semver(text: object) -> celtypes.BoolType:
    return celtypes.BoolType(_SEMVER_RE.match(str(text)) is not None)


FUNCTIONS: dict[str, Any] = {
    "semver": _semver, "isSemver": _is_semver, "quantity": _quantity,
    "compareTo": _compare_to, "isGreaterThan": _greater, "isLessThan": _less,
    "major": _semver_part("major"), "minor": _semver_part("minor"), "patch": _semver_part("patch"),
    "asInteger": _as_integer, "isInteger": _is_integer,
}


# ---- the device as CEL sees it ---------------------------------------------------------------------------------

AttributeValue = bool | int | str | Semver


class _Domains(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: a domain the device does not carry is an empty map."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def _cel_value(v: AttributeValue | Fraction) -> Any:
    if isinstance(v, bool):
        return celtypes.BoolType(v)
    if isinstance(v, int):
        return celtypes.IntType(v)
    if isinstance(v, str):
        return celtypes.StringType(v)
    if isinstance(v, Fraction):
        return Quantity(v)
    return v


def split_name(qualified: str, driver: str) -> tuple[str, str]:
    """(domain, identifier) of an attribute or capacity name; a name without a domain is the driver's."""
    domain, sep, ident = qualified.rpartition("/")
    return (domain, ident) if sep else (driver, qualified)


def _by_domain(values: Mapping[str, Any], driver: str) -> _Domains:
    grouped: dict[str, dict[str, Any]] = {}
    for name, v in values.items():
        domain, ident = split_name(name, driver)
        grouped.setdefault(domain, {})[ident] = _cel_value(v)
    return _Domains({celtypes.StringType(d): celtypes.MapType({celtypes.StringType(k): v for k, v in m.items()})
                     for d, m in grouped.items()})


def device_activation(driver: str, attributes: Mapping[str, AttributeValue], capacity: Mapping[str, Fraction],
                      allow_multiple: bool = False) -> dict[str, Any]:
    """The ``device`` variable for one device (attribute and capacity names as the slice writes them)."""
    return {"device": celtypes.MapType({
        celtypes.StringType("driver"): celtypes.StringType(driver),
        celtypes.StringType("attributes"): _by_domain(attributes, driver),
        celtypes.StringType("capacity"): _by_domain(capacity, driver),
        celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(allow_multiple),
    })}


# ---- compile once, evaluate per device -------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _environment() -> Any:
    """cel-python's environment, made on first use (its parser takes a tenth of a second to build)."""
    return celpy.Environment()


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> Any:
    """The program of one selector, compiled once per expression (SelectorError: why it does not compile)."""
    if len(expression.encode()) > MAX_EXPRESSION_BYTES:
        raise SelectorError(f"the expression is longer than {MAX_EXPRESSION_BYTES} bytes")
    if "cel.bind(" in expression.replace(" ", ""):
        raise SelectorError("cel.bind is not supported by gpufleet's CEL evaluator; write the expression without it")
    try:
        env = _environment()
        return env.program(env.compile(expression), functions=FUNCTIONS)
    except CELParseError as e:
        first = str(e).splitlines()[0] if str(e) else "syntax error"
        raise SelectorError(f"it does not compile: {first}") from None


def matches(expression: str, activation: Mapping[str, Any]) -> bool:
    """Whether the device matches (SelectorError: the expression failed on it, or is not a boolean)."""
    program = compile_selector(expression)
    try:
        result = program.evaluate(dict(activation))
    except (CELEvalError, SelectorError, TypeError, KeyError) as e:
        raise SelectorError(_eval_message(e)) from None
    if isinstance(result, CELEvalError):
        raise SelectorError(_eval_message(result))
    if not isinstance(result, bool | celtypes.BoolType):
        raise SelectorError(f"it gives {type(result).__name__}, not a boolean")
    return bool(result)


def _eval_message(e: BaseException) -> str:
    args = getattr(e, "args", ())
    text = str(args[0]) if args else str(e)
    return f"evaluating it failed: {text[:200]}"
