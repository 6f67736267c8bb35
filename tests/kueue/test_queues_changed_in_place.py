"""A running policy takes ClusterQueue changes in place (KueuePolicy.queues_changed) reading again only what
changed: a spec is read again only for a ClusterQueue object that is not the very object it was read from, and
the nomination memo is brought up to date for the queues changed instead of being made again. Each must leave
what a configuration read afresh, or a memo made afresh, would have."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.api.manifests import Manifests
from gpufleet.api.objects import (
    ClusterQueue,
    FlavorQuotas,
    LabelSelector,
    LocalQueue,
    ObjectMeta,
    PreemptionPolicy,
    Quota,
    ResourceFlavor,
    ResourceGroup,
)
from gpufleet.scheduling.kueue import KueuePolicy
from gpufleet.scheduling.kueue.config import queue_config
from gpufleet.scheduling.kueue.memo import NominationMemo

POLICIES = ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]


def _queue(name: str, cohort: str | None, gpus: int, within: str = "Never", reclaim: str = "Never") -> ClusterQueue:
    group = ResourceGroup(("nvidia.com/gpu",), [FlavorQuotas("gpu", {"nvidia.com/gpu": Quota(gpus * 1000)})])
    return ClusterQueue(ObjectMeta(name), [group], cohort=cohort, namespace_selector=LabelSelector(),
                        preemption=PreemptionPolicy(within_cluster_queue=within, reclaim_within_cohort=reclaim))


def _manifests(queues: list[ClusterQueue], flavor_labels: dict[str, str] | None = None) -> Manifests:
    m = Manifests()
    m.flavors.append(ResourceFlavor(ObjectMeta("gpu"), node_labels=flavor_labels or {}))
    m.cluster_queues.extend(queues)
    m.local_queues.extend(LocalQueue(ObjectMeta("lq", namespace=q.name), q.name) for q in queues)
    return m


def test_a_spec_is_read_again_only_for_the_objects_that_changed() -> None:
    queues = [_queue(f"cq{i}", "co", 4) for i in range(3)]
    first = _manifests(queues)
    config = queue_config(first)
    changed = _queue("cq1", "co", 8)
    second = _manifests([queues[0], changed, queues[2]])
    again = queue_config(second, previous=config, read_from={q.name: q for q in queues})
    assert again.cluster_queues["cq0"] is config.cluster_queues["cq0"]
    assert again.cluster_queues["cq2"] is config.cluster_queues["cq2"]
    assert again.cluster_queues == queue_config(second).cluster_queues  # cq1 read again: its new quota
    assert again.cluster_queues["cq1"] != config.cluster_queues["cq1"]


def test_a_flavor_changed_reads_every_spec_again() -> None:
    """A spec holds what it read of its flavors (the node label keys a group's flavors select on): the same
    ClusterQueue object under changed flavors is read again."""
    queues = [_queue(f"cq{i}", "co", 4) for i in range(2)]
    config = queue_config(_manifests(queues))
    relabelled = _manifests(queues, {"pool": "a"})
    again = queue_config(relabelled, previous=config, read_from={q.name: q for q in queues})
    assert again.cluster_queues == queue_config(relabelled).cluster_queues
    assert again.cluster_queues["cq0"] != config.cluster_queues["cq0"]


def _kept_per_queue(memo: NominationMemo, names: list[str]) -> list[tuple[object, ...]]:
    """What the memo keeps of each queue, its spec id replaced by the first queue of the same id (ids are numbered
    in the order specs were first seen, which differs between a memo brought up to date and one made anew)."""
    first_alike: dict[int, str] = {}
    out = []
    for name in names:
        q = memo._queues[name]
        alike = first_alike.setdefault(q.spec, name)
        out.append((alike, q.within, q.newer, q.isolated, q.sealed_when_full, q.floors, q.pos))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 8), st.sampled_from(POLICIES),
                          st.sampled_from(["Never", "Any"])), min_size=1, max_size=8))
def test_the_memo_brought_up_to_date_keeps_what_one_made_again_keeps(
        changes: list[tuple[int, int, str, str]]) -> None:
    """Quotas and preemption policies of four queues in two cohorts changed in any order: after each change the
    memo of the policy that took it in place keeps, of every queue, what a memo made on the same tree keeps."""
    queues = {f"cq{i}": _queue(f"cq{i}", f"co{i % 2}", 4) for i in range(4)}
    policy = KueuePolicy(_manifests(list(queues.values())))
    for index, gpus, within, reclaim in changes:
        name = f"cq{index}"
        queues[name] = _queue(name, f"co{index % 2}", gpus, within, reclaim)
        assert policy.queues_changed(_manifests(list(queues.values())), 0.0) is not None
        state = policy.state
        memo = state.memo
        assert memo is not None
        made = NominationMemo(state.tree, state.config.cluster_queues, state.admitted, state.config.fair_sharing)
        names = list(state.config.cluster_queues)
        assert _kept_per_queue(memo, names) == _kept_per_queue(made, names)
        assert not memo._tables  # (every remembered nomination dropped)
        assert policy.config.cluster_queues == queue_config(_manifests(list(queues.values()))).cluster_queues


def test_a_queue_added_makes_the_memo_again() -> None:
    queues = [_queue("cq0", "co", 4)]
    policy = KueuePolicy(_manifests(queues))
    before = policy.state.memo
    assert policy.queues_changed(_manifests([*queues, _queue("cq1", "co", 2)]), 0.0) is not None
    memo = policy.state.memo
    assert memo is not None and memo is not before and set(memo._queues) == {"cq0", "cq1"}
    assert before is not None and memo.shapes is before.shapes


def test_an_unchanged_read_keeps_the_config_and_the_memo() -> None:
    queues = [_queue(f"cq{i}", "co", 4) for i in range(2)]
    policy = KueuePolicy(_manifests(queues))
    specs, memo = dict(policy.config.cluster_queues), policy.state.memo
    assert policy.queues_changed(replace(_manifests(queues)), 0.0) == []
    assert all(policy.config.cluster_queues[n] is specs[n] for n in specs) and policy.state.memo is memo
