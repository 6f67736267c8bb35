"""A ClusterQueue's admitted workloads, kept in preemption-candidate order as they come and go.

Every preemption search reads candidates queue by queue in Kueue's order (:func:`standing`). Keeping each
queue's admitted workloads sorted on admission and release costs a binary search and a list insert per change,
so that a search (or a cycle's shared candidate list for a whole cohort) merges sorted runs instead of sorting
every candidate of the cohort again for every head.

The nomination memo (:mod:`~gpufleet.scheduling.kueue.memo`) also describes a queue's first candidates *by value*
(what a preemption search reads of them: priority, whether they are being evicted, usage), so that two queues
with equal candidates can share a nomination. :meth:`AdmittedQueue.value_ids` gives each candidate's value as a
small integer, interned process-wide (:class:`CandidateValues`), kept up to date as workloads come and go and as
their evictions begin (:meth:`AdmittedQueue.evicting_changed`), so that such a description is a slice of a list.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, MutableMapping, ValuesView

from gpufleet.scheduling.kueue.info import WorkloadInfo
from gpufleet.scheduling.kueue.interner import Interner
from gpufleet.scheduling.kueue.preemption_order import Standing, standing
from gpufleet.scheduling.quota import FR

# What a preemption search reads of a candidate besides its place in the order: priority, being evicted, usage.
CandidateValue = tuple[int, bool, tuple[tuple[FR, int], ...]]


def candidate_value(info: WorkloadInfo) -> CandidateValue:
    return (info.priority, bool(info.evicting), tuple(info.usage.items()))


# Interned candidate values (:class:`~gpufleet.scheduling.kueue.interner.Interner`): equal ids, equal values.
CandidateValues = Interner[CandidateValue]


# One table for the process: ids must compare across the queues of a policy (and never collide between policies).
CANDIDATE_VALUES = CandidateValues()


class AdmittedQueue(MutableMapping[str, WorkloadInfo]):
    """Admitted workloads of one ClusterQueue by key, also listed in :func:`standing` order.

    A workload's standing (priority, reservation time, UID) is fixed while it is admitted: it is computed when it
    is added and used again to find it when it leaves.
    """

    __slots__ = ("_by_key", "_ids", "_infos", "_standings", "_values", "_when_added")

    def __init__(self, values: CandidateValues = CANDIDATE_VALUES) -> None:
        self._by_key: dict[str, WorkloadInfo] = {}
        self._when_added: dict[str, Standing] = {}
        self._standings: list[Standing] = []  # sorted
        self._infos: list[WorkloadInfo] = []  # parallel to _standings
        # Parallel to _infos: each candidate's value id (in ``values``), or None until first asked for; once asked
        # for, kept up to date.
        self._values = values
        self._ids: list[int] | None = None

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
        if self._ids is not None:
            self._ids.insert(i, self._values.id_of(candidate_value(info)))

    def __delitem__(self, key: str) -> None:
        if not self.discard(key):
            raise KeyError(key)

    def discard(self, key: str) -> bool:
        """Take the workload out if it is here (one call, not MutableMapping.pop's generic code); whether it was."""
        if self._by_key.pop(key, None) is None:
            return False
        s = self._when_added.pop(key)
        i = bisect_left(self._standings, s)
        del self._standings[i]
        del self._infos[i]
        if self._ids is not None:
            del self._ids[i]
        return True

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

    def value_ids(self) -> list[int]:
        """The value id (:func:`candidate_value`, interned in the queue's :class:`CandidateValues`) of each workload of
        :meth:`ordered`, position by position (read only): equal slices mean candidates equal in value, in the
        same order."""
        ids = self._ids
        if ids is None:
            ids = self._ids = [self._values.id_of(candidate_value(info)) for info in self._infos]
        return ids

    def evicting_changed(self, key: str) -> None:
        """The workload's eviction began (or was called off): its value changed. Whoever sets an admitted
        workload's ``evicting`` tells its queue (``SchedulerState.begin_eviction``)."""
        ids = self._ids
        if ids is None:
            return
        info = self._by_key.get(key)
        if info is None:
            return
        ids[bisect_left(self._standings, self._when_added[key])] = self._values.id_of(candidate_value(info))
