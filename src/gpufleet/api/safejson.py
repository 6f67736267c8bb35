"""JSON from an untrusted peer (an HTTP body, an annotation, a file), with its nesting bounded *before* the parser
runs and no number that JSON cannot hold.

``json.loads`` recurses once per level of nesting, so a body of a million ``[`` costs a RecursionError (and
the C stack of a deeper interpreter) before any check on the result could run. :func:`max_depth` measures the
nesting of the raw bytes in linear time without recursing: string literals are blanked out first (so a ``[``
inside a string does not count), then the running depth is a cumulative sum over the brackets that remain.

``json.loads`` also reads ``1e999`` as infinity (``parse_constant`` only sees the literals ``NaN`` and
``Infinity``): such a value passes every type check, then cannot be written as JSON again. :func:`non_finite`
finds it, with its path, in the parsed value.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from gpufleet.api.errors import field_path

# A JSON string literal: quote, then runs of ordinary bytes and escape pairs. '"' and '\' never occur inside a
# multi-byte UTF-8 sequence, so scanning bytes is exact for UTF-8 text.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
# bytes.translate deletes everything but the four brackets, in C; then +1 / -1 per bracket.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = np.zeros(256, dtype=np.int32)
_STEP[list(b"[{")] = 1
_STEP[list(b"]}")] = -1
_OPENERS = frozenset(b"[{")
_SMALL = 512  # brackets below which a Python loop beats numpy's per-call overhead (an annotation, say)


class JsonBodyError(ValueError):
    """The body is not JSON this process will read; the message says why, for the sender."""


# A number that may not fit a double: one with an exponent, or 309 digits in a row (a double ends near 1.8e308).
# Seen only outside string literals; where none is, nothing parsed can be infinite and non_finite need not walk.
_MAYBE_HUGE = re.compile(rb"[0-9][eE]|[0-9]{309}")


def max_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data`` (0 for a scalar); linear, no recursion."""
    return _depth_of_blanked(_STRING.sub(b'""', data))


def _depth_of_blanked(blanked: bytes) -> int:
    """:func:`max_depth` of bytes whose string literals are blanked already."""
    brackets = blanked.translate(None, _NOT_BRACKETS)
    if len(brackets) <= _SMALL:
        depth = deepest = 0
        for b in brackets:
            if b in _OPENERS:
                depth += 1
                if depth > deepest:
                    deepest = depth
            else:
                depth -= 1
        return deepest
    return int(np.cumsum(_STEP[np.frombuffer(brackets, dtype=np.uint8)]).max(initial=0))


def _children(value: dict[Any, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(value.items()) if isinstance(value, dict) else enumerate(value)


def non_finite(value: Any) -> str | None:
    """The path (``runs[0].kpis.cost``; ``""`` for the value itself) of the first float in parsed JSON that is
    not finite, or None. Depth first over a stack of iterators: memory grows with the nesting (bounded before
    parsing), never with the number of values."""
    if isinstance(value, float):
        return None if math.isfinite(value) else ""
    if not isinstance(value, dict | list):
        return None
    path: list[Any] = []  # the keys down to the container the top iterator walks: len(stack) - 1 of them
    stack = [_children(value)]
    while stack:
        for key, child in stack[-1]:
            if isinstance(child, float):
                if not math.isfinite(child):
                    return field_path([*path, key])
            elif isinstance(child, dict | list):
                path.append(key if isinstance(key, int) else str(key))
                stack.append(_children(child))
                break
        else:
            stack.pop()
            if path:
                path.pop()
    return None


def _no_constants(name: str) -> Any:
    raise JsonBodyError(f"{name} is not JSON (JSON has no NaN or Infinity)")


def loads(data: bytes, *, depth_limit: int, source: str | None = None, limit: str | None = None,
          fix: str | None = None) -> Any:
    """Strict JSON from UTF-8 bytes: no other encoding, no NaN/Infinity (nor a number too big for a double),
    nesting at most ``depth_limit``; :class:`JsonBodyError` says why not.

    A body (``source`` None) is named "the body". A file's messages begin with its name, ``source`` (and the
    line:column where the parser stopped), say which limit the nesting passed (``limit``, e.g. "gpufleet's limit on
    a simulation result") and end with ``fix``, how to write the file again."""
    def refuse(message: str, fix_first: str | None = None, at: str = "") -> JsonBodyError:
        if source is None:
            return JsonBodyError(f"the body is {message}" if message.startswith("not ") else message)
        mend = " ".join(x for x in (fix_first, fix) if x)
        return JsonBodyError(f"{source}{at}: {message}" + (f"; fix: {mend}" if mend else ""))

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise refuse(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    blanked = _STRING.sub(b'""', data)
    depth = _depth_of_blanked(blanked)
    if depth > depth_limit:
        if source is None:
            raise JsonBodyError(f"the JSON is nested {depth} levels deep, more than the {depth_limit} allowed")
        raise refuse(f"the JSON is nested {depth:,} levels deep: at most {depth_limit}"
                     + (f" ({limit}; see docs/limits.md)" if limit else ""))
    try:
        doc = json.loads(text, parse_constant=_no_constants)
    except JsonBodyError as e:
        raise refuse(str(e)) from None
    except json.JSONDecodeError as e:
        if source is None:
            raise JsonBodyError(f"the body is not valid JSON: {str(e)[:200]}") from None
        raise refuse(f"not JSON: {e.msg}", at=f":{e.lineno}:{e.colno}") from None
    except ValueError as e:  # int() refusing more than 4,300 digits
        raise refuse(f"not valid JSON: {str(e)[:200]}") from None
    where = non_finite(doc) if _MAYBE_HUGE.search(blanked) else None
    if where is not None:
        if source is None:
            raise JsonBodyError(f"the number at {where or 'the top'} is not finite (too big for a double, such as "
                                "1e999)")
        raise refuse(f"{where or 'the document'}: the number is not finite (too big for a double, such as 1e999)",
                     fix_first="write a finite number, or" if fix else "write a finite number")
    return doc
