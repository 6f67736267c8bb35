"""The first position at or after ``i`` whose value is at least ``x``, for a list fixed once built: a max segment
tree, answered in O(log n) whatever the threshold (the fair-sharing walk asks it with a different threshold per
head, so a list per threshold would be rebuilt for nearly every head)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar


class _Comparable(Protocol):
    def __ge__(self, other: Any, /) -> bool: ...


T = TypeVar("T", bound=_Comparable)


class FirstAtLeast(Generic[T]):
    """``first(i, x)``: the smallest ``j >= i`` with ``values[j] >= x``, or ``len(values)`` when there is none.
    ``low`` must be below every threshold asked (it pads the tree)."""

    __slots__ = ("_n", "_size", "_tree")

    def __init__(self, values: Sequence[T], low: T) -> None:
        n = len(values)
        size = 1
        while size < n:
            size *= 2
        tree = [low] * (2 * size)
        tree[size:size + n] = values
        for k in range(size - 1, 0, -1):
            a, b = tree[2 * k], tree[2 * k + 1]
            tree[k] = a if a >= b else b
        self._n = n
        self._size = size
        self._tree = tree

    def first(self, i: int, x: T) -> int:
        n = self._n
        if i >= n:
            return n
        tree, size = self._tree, self._size
        k = i + size
        if tree[k] >= x:
            return i
        # Up until a right sibling holds a value >= x (then down to its leftmost such leaf), or past the root.
        while k > 1:
            if not k & 1 and tree[k + 1] >= x:
                k += 1
                break
            k >>= 1
        else:
            return n
        while k < size:
            k = 2 * k if tree[2 * k] >= x else 2 * k + 1
        return min(k - size, n)
