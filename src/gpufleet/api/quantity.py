"""Exact Kubernetes ``resource.Quantity`` parsing and formatting.

Values are :class:`fractions.Fraction` end to end: ``0.1`` of a GPU or ``1.5Gi`` of memory must add up exactly
when the scheduler sums thousands of requests, which binary floats cannot promise.

The accepted grammar is the one documented for ``resource.Quantity``::

    <quantity>     ::= <sign>? <number> <suffix>
    <number>       ::= <digits> | <digits> "." <digits> | <digits> "." | "." <digits>
    <suffix>       ::= "" | <binarySI> | <decimalSI> | ("e" | "E") <sign>? <digits>
    <binarySI>     ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>    ::= n | u | m | k | M | G | T | P | E

``1E`` is therefore 10**18 (the exa suffix) while ``1E3`` is 1000. Surrounding whitespace is stripped, as the
API server does when it decodes JSON; whitespace inside a quantity is rejected, as Kubernetes does.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

from gpufleet.api.errors import shown

__all__ = [
    "QuantityError",
    "format_quantity",
    "int_value",
    "is_integer",
    "mib_value",
    "milli_value",
    "parse_bytes",
    "parse_cpu_milli",
    "parse_quantity",
]

_EXAMPLES = "e.g. 500m, 2, 10Gi, 1e3"

# [0-9] rather than \d: \d also matches non-ASCII digits such as "٣", which Kubernetes rejects.
_QUANTITY_RE = re.compile(
    r"(?P<sign>[+-]?)"
    r"(?P<int>[0-9]*)(?:\.(?P<frac>[0-9]*))?"
    r"(?:[eE](?P<exp>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?"
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_MULTIPLIERS: dict[str, Fraction] = {**{k: Fraction(v) for k, v in _BINARY.items()}, **_DECIMAL}

# Far beyond any real resource amount. Together the caps keep every quantity below 10**170, so an exact
# Fraction stays cheap and float() of one never overflows: "1e999999999" or 5,000 digits are refused here
# instead of building gigantic integers (or hitting Python's 4,300-digit int limit) further on.
_MAX_EXPONENT = 100
MAX_QUANTITY_CHARS = 64


class QuantityError(ValueError):
    """A value is not a valid Kubernetes quantity; the message quotes it and shows valid examples."""


def _invalid(value: object, why: str) -> QuantityError:
    return QuantityError(f"invalid quantity {shown(value)}: {why} ({_EXAMPLES})")


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity exactly. ints are taken as is; floats must be finite and go through ``repr``.

    Negative values parse; whether they are allowed is the caller's decision.
    """
    # bool is an int subclass; "replicas: true" is a mistake, not the quantity 1.
    if isinstance(value, bool):
        raise _invalid(value, "a boolean is not a quantity")
    if isinstance(value, int):
        if value.bit_length() > 3 * MAX_QUANTITY_CHARS:
            raise _invalid(value, f"it has more than {MAX_QUANTITY_CHARS} digits")
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _invalid(value, "the number must be finite")
        # repr gives the shortest string that round-trips, so 0.1 becomes exactly 1/10, not the binary float.
        return parse_quantity(repr(value))
    if not isinstance(value, str):
        raise _invalid(value, f"expected a string or number, got {type(value).__name__}")
    return _parse_text(value)


# Pods made from one template write the same few quantities ("1", "500m", "1Gi") tens of thousands of times: a
# scheduler's first cycle parses every pod of the cluster. Fractions are immutable, so a parse is shared; a text
# that does not parse raises each time (exceptions are not cached).
@functools.lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    text = value.strip()
    if not text:
        raise _invalid(value, "it is empty")
    if len(text) > MAX_QUANTITY_CHARS:
        raise _invalid(value, f"it is longer than {MAX_QUANTITY_CHARS} characters")
    m = _QUANTITY_RE.fullmatch(text)
    if m is None:
        raise _invalid(value, _diagnose(text))
    int_part = m["int"]
    frac_part = m["frac"] or ""
    if not int_part and not frac_part:
        raise _invalid(value, "there is no digit before the suffix")

    number = Fraction(int(int_part or "0"))
    if frac_part:
        number += Fraction(int(frac_part), 10 ** len(frac_part))
    if m["exp"] is not None:
        exp = int(m["exp"])
        if abs(exp) > _MAX_EXPONENT:
            raise _invalid(value, f"the exponent {exp} is out of range")
        number *= Fraction(10) ** exp
    elif m["suffix"]:
        number *= _MULTIPLIERS[m["suffix"]]
    return -number if m["sign"] == "-" else number


def _diagnose(text: str) -> str:
    """Best guess at why ``text`` failed the grammar, for the error message."""
    if any(c.isspace() for c in text):
        return "it must not contain spaces"
    if text.lower().startswith(("0x", "+0x", "-0x")):
        return "hexadecimal numbers are not quantities"
    if text.count(".") > 1:
        return "it has more than one decimal point"
    head = re.match(r"[+-]?[0-9]*(?:\.[0-9]*)?", text)
    rest = text[head.end() :] if head else text
    if rest and rest[0] in "+-":
        return "the sign must come once, before the number"
    if rest:
        return f"unknown suffix {rest!r}; use one of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent e3"
    return "it is not a number"


def milli_value(q: Fraction) -> int:
    """Value in thousandths, rounded up, like ``Quantity.MilliValue``."""
    return math.ceil(q * 1000)


def int_value(q: Fraction) -> int:
    """Value rounded up to a whole number, like ``Quantity.Value``."""
    return math.ceil(q)


def mib_value(text: str) -> int:
    """A memory quantity ("20Gi") in MiB, rounded up; raises QuantityError for what is no quantity."""
    return int_value(parse_quantity(text) / 2**20)


def is_integer(q: Fraction) -> bool:
    return q.denominator == 1


def format_quantity(q: Fraction, *, binary: bool | None = None) -> str:
    """Format ``q`` as a short quantity string that parses back to ``q``.

    Whole numbers are written plainly (``"4"``), or with the largest binary suffix that divides them exactly
    (``10737418240`` -> ``"10Gi"``): with ``binary=True`` from 1Ki up, with ``binary=None`` only from 1Mi up
    so counts such as 1024 CPUs stay plain, and never with ``binary=False``. Fractions use the coarsest of
    ``m``, ``u``, ``n`` that is exact (``"500m"``). A fraction finer than a nano unit is rounded up to whole
    nanos, as Kubernetes does, so only then is the result not exact.
    """
    q = Fraction(q)
    if q < 0:
        return "-" + format_quantity(-q, binary=binary)
    if q.denominator == 1:
        n = q.numerator
        if binary is not False and n:
            floor = 2**10 if binary else 2**20
            for suffix, mult in reversed(_BINARY.items()):
                if mult >= floor and n % mult == 0:
                    return f"{n // mult}{suffix}"
        return str(n)
    for suffix, scale in (("m", 10**3), ("u", 10**6), ("n", 10**9)):
        scaled = q * scale
        if scaled.denominator == 1:
            return f"{scaled.numerator}{suffix}"
    return f"{math.ceil(q * 10**9)}n"


def parse_cpu_milli(value: str | int | float) -> int:
    """CPU amount in millicores, rounded up (``"250m"`` -> 250, ``"1.5"`` -> 1500)."""
    return milli_value(parse_quantity(value))


def parse_bytes(value: str | int | float) -> int:
    """Memory amount in bytes, rounded up (``"1Gi"`` -> 1073741824)."""
    return int_value(parse_quantity(value))
