"""A ClusterQueue's admitted workloads, kept in preemption-candidate order as they come and go.

Every preemption search reads candidates queue by queue in Kueue's order (:func:`standing`). Keeping each
queue's admitted workloads sorted on admission and release costs a binary search and a list insert per change,
so that a search (or a cycle's shared candidate list for a whole cohort) merges sorted runs instead of sorting
every candidate of the cohort again for every head.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, MutableMapping, ValuesView

from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.preemption_order import Standing, standing


class AdmittedQueue(MutableMapping[str, WorkloadInfo]):
    """Admitted workloads of one ClusterQueue by key, also listed in :func:`standing` order.

    A workload's standing (priority, reservation time, UID) is fixed while it is admitted: it is computed when it
    is added and used again to find it when it leaves.
    """

    __slots__ = ("_by_key", "_infos", "_standings", "_when_added")

    def __init__(self) -> None:
        self._by_key: dict[str, WorkloadInfo] = {}
        self._when_added: dict[str, Standing] = {}
        self._standings: list[Standing] = []  # sorted
        self._infos: list[WorkloadInfo] = []  # parallel to _standings

    def __getitem__(self, key: str) -> WorkloadInfo:
        return self._by_key[key]

    def __setitem__(self, key: str, info: WorkloadInfo) -> None:
        if key in self._by_key:
            del self[key]
        s = standing(info)
        i = bisect_left(self._standings, s)
        self._standings.insert(i, s)
        self._infos.insert(i, info)
        self._by_key[key] = info
        self._when_added[key] = s

    def __delitem__(self, key: str) -> None:
        del self._by_key[key]
        s = self._when_added.pop(key)
        i = bisect_left(self._standings, s)
        del self._standings[i]
        del self._infos[i]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def values(self) -> ValuesView[WorkloadInfo]:
        return self._by_key.values()

    def ordered(self) -> list[WorkloadInfo]:
        """The workloads in standing order (the queue's own list: read it, do not change it)."""
        return self._infos

    def standings(self) -> list[Standing]:
        """The standings of :meth:`ordered`, position by position (read only)."""
        return self._standings
