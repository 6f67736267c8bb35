"""JSON from an untrusted peer (an HTTP body, an annotation), with its nesting bounded *before* the parser runs.

``json.loads`` recurses once per level of nesting, so a body of a million ``[`` costs a RecursionError (and
the C stack of a deeper interpreter) before any check on the result could run. :func:`max_depth` measures the
nesting of the raw bytes in linear time without recursing: string literals are blanked out first (so a ``[``
inside a string does not count), then the running depth is a cumulative sum over the brackets that remain.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

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


def max_depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in ``data`` (0 for a scalar); linear, no recursion."""
    brackets = _STRING.sub(b'""', data).translate(None, _NOT_BRACKETS)
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


def _no_constants(name: str) -> Any:
    raise JsonBodyError(f"{name} is not valid JSON (JSON has no NaN or Infinity)")


def loads(data: bytes, *, depth_limit: int) -> Any:
    """Strict JSON from UTF-8 bytes: no other encoding, no NaN/Infinity, nesting at most ``depth_limit``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonBodyError(f"the body is not UTF-8 text (byte {e.start} is invalid)") from None
    depth = max_depth(data)
    if depth > depth_limit:
        raise JsonBodyError(f"the JSON is nested {depth} levels deep, more than the {depth_limit} allowed")
    try:
        return json.loads(text, parse_constant=_no_constants)
    except JsonBodyError:
        raise
    except ValueError as e:  # JSONDecodeError, and int() refusing more than 4,300 digits
        raise JsonBodyError(f"the body is not valid JSON: {str(e)[:200]}") from None
