"""What the advice says a change costs (issue 29, item 9): mig-manager drains a node only when its MIG layout
changes; a time-slicing change is the device plugin's configuration, applied without a drain."""

from __future__ import annotations

from collections import Counter

from gpufleet.advise.contract import EXCLUSIVE, NodeConfig
from gpufleet.advise.reasons import _how_applied


def ts(replicas: int) -> NodeConfig:
    return NodeConfig("time-sliced", replicas)


def mig(*profiles: tuple[str, int]) -> NodeConfig:
    return NodeConfig("mig", mig=tuple(sorted(profiles)))


def test_a_time_slicing_change_drains_nothing() -> None:
    words = _how_applied(Counter({ts(8): 3}), Counter({ts(8): 2, ts(5): 1}))
    assert "drain" in words and "mig-manager" not in words
    assert words.startswith("1 node with a new device-plugin configuration only")
    words = _how_applied(Counter({ts(8): 3}), Counter({EXCLUSIVE: 3}))  # whole GPUs: MIG stays all-disabled
    assert "mig-manager" not in words and words.startswith("3 nodes with a new device-plugin")


def test_a_mig_layout_change_is_a_drain() -> None:
    words = _how_applied(Counter({mig(("3g.40gb", 2)): 4}), Counter({mig(("3g.40gb", 2)): 2,
                                                                     mig(("1g.10gb", 7)): 2}))
    assert words == "2 nodes with a new MIG layout: mig-manager drains a node whose nvidia.com/mig.config changes"
    both = _how_applied(Counter({mig(("3g.40gb", 2)): 1, ts(8): 1}), Counter({EXCLUSIVE: 1, ts(4): 1}))
    assert both.startswith("1 node with a new MIG layout") and "; 1 node with a new device-plugin" in both
