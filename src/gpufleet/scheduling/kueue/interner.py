"""Small integer ids for hashable values, so that keys built from them are cheap to hash and compare."""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Interner(Generic[K]):
    """A value gets one id while it stays in the table, and an id is never given to another value (ids are not
    reused), so equal ids always mean equal values. Past ``limit`` values the table starts afresh: a value seen
    again then gets a new id (holders of the old one describe equal values with different ids, which only costs
    sharing)."""

    __slots__ = ("_ids", "_next", "limit")

    def __init__(self, limit: int = 1 << 16) -> None:
        self._ids: dict[K, int] = {}
        self._next = itertools.count(1)
        self.limit = limit

    def id_of(self, value: K) -> int:
        ids = self._ids
        found = ids.get(value)
        if found is None:
            if len(ids) >= self.limit:
                ids.clear()
            found = ids[value] = next(self._next)
        return found

    def __len__(self) -> int:
        return len(self._ids)
