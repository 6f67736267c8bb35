"""Names as controllers give them, with gpufleet's stable stand-in for the random part.

The API server completes a ``generateName`` with 5 characters drawn at random from an alphabet without vowels
(so no word is spelled by chance). gpufleet draws the same 5 characters from a hash of what identifies the object
(its owner's namespace and name, the pod's position), so the same input always gives the same names and two pods
never share one.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

# The alphabet Kubernetes' generateName and rand.SafeEncodeString draw from.
ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
SUFFIX_LENGTH = 5
MAX_NAME = 253  # a pod name is a DNS subdomain
_GENERATE_BASE = 63 - SUFFIX_LENGTH  # the API server cuts a generateName to this before adding the suffix


# A stride through the 27^5 suffixes that is prime to 27: the suffixes of indexes 0..27^5-1 of one base are all
# different (a 10,000-pod Job never names two pods alike), and neighbouring indexes do not look alike.
_SPACE = len(ALPHABET) ** SUFFIX_LENGTH
_STRIDE = 5_581_567


def suffix(*parts: object, index: int = 0) -> str:
    """5 characters of :data:`ALPHABET`, the same for the same ``parts`` and ``index``, different for different
    indexes of the same ``parts``."""
    digest = hashlib.sha256("\x00".join(str(p) for p in parts).encode()).digest()
    value = (int.from_bytes(digest[:8], "big") + index * _STRIDE) % _SPACE
    out = []
    for _ in range(SUFFIX_LENGTH):
        value, digit = divmod(value, len(ALPHABET))
        out.append(ALPHABET[digit])
    return "".join(out)


def generated(base: str, *parts: object, index: int = 0) -> str:
    """``base`` (a generateName, ending in "-" or not) completed with a stable suffix, as the API server would;
    the ``index``-th object of the same base and ``parts`` gets a suffix of its own."""
    return f"{base[:_GENERATE_BASE]}{suffix(base, *parts, index=index)}"


def template_hash(template: Any) -> str:
    """A stand-in for the Deployment controller's pod-template-hash: FNV-1a (32 bits) of the template written as
    canonical JSON, its decimal digits mapped onto :data:`ALPHABET` as the controller maps its own hash."""
    text = json.dumps(template, sort_keys=True, default=str, separators=(",", ":"))
    value = 0x811C9DC5
    for byte in text.encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(ALPHABET[ord(c) % len(ALPHABET)] for c in str(value))


def job_pod(namespace: str, job: str, index: int, *, indexed: bool) -> str:
    """The name of a Job's ``index``-th pod: ``<job>-<index>-<sfx>`` when Indexed, ``<job>-<sfx>`` otherwise."""
    if indexed:
        return generated(f"{job}-{index}-", namespace, job)
    return generated(f"{job}-", namespace, job, index=index)
