"""Device choice invariants (hypothesis) and the pure parts of the allocator: pod identification, NVLink-aware
best effort, the node patch that only touches owned labels."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from machines import WHOLE_4_PAIRS, WHOLE_8, write_machine

from gpufleet.gpu.sharing import DevicePluginConfig
from gpufleet.node.allocation import Allocator, Claim, best_whole_gpus, identify
from gpufleet.node.discovery import discover
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.nvml_fake import FakeNvml
from gpufleet.node.pods import PodView
from gpufleet.node.publisher import OWNED_LABELS_ANNOTATION, node_patch

MACHINES: dict[str, FakeNvml] = {}


def machine(text: str, tmp: Path) -> FakeNvml:
    if text not in MACHINES:
        MACHINES[text] = FakeNvml(str(write_machine(tmp, text, f"m{len(MACHINES)}.yaml")))
    return MACHINES[text]


def view(key: str, sequence: int, size: int, intent: tuple[str, ...] | None = None, *, resource: str = "nvidia.com/gpu",
         fractions: tuple[str, ...] = ()) -> PodView:
    return PodView(key=key, uid=key, arrival=(sequence, 0.0, 0.0, key), deleting=False, started=False,
                   init_requests=(), app_requests=({resource: size},) if size else ({},), intent=intent,
                   fraction_gpus=fractions)


@dataclass
class Pods:
    views: list[PodView] = field(default_factory=list)
    refreshed: int = 0

    def pods(self) -> list[PodView]:
        return sorted(self.views, key=lambda v: v.arrival)

    def refresh(self) -> None:
        self.refreshed += 1


def test_identify_takes_the_first_waiting_pod_the_request_fits() -> None:
    a = Claim("a", ("g1",), ("g1",), frozenset(), 1, frozenset({1}))
    b = Claim("b", ("g2", "g3"), ("g2", "g3"), frozenset(), 2, frozenset({2}))
    c = Claim("c", ("g4",), ("g4",), frozenset({"g0"}), 1, frozenset({2}))  # an init container held g0
    assert identify([a, b, c], (), 1) is a
    assert identify([a, b, c], (), 2) is b
    assert identify([a, b, c], ("g0",), 2) is c  # reuse: must_include is what c already holds
    assert identify([a, b], ("g9",), 2) is None


def test_best_whole_gpus_follows_nvlinks(tmp_path: Path) -> None:
    fake = machine(WHOLE_4_PAIRS, tmp_path)
    devices = discover(fake.machine(), AgentDeviceConfig()).devices["nvidia.com/gpu"]
    nvlinks = fake.machine().nvlinks
    assert [d.gpu_index for d in best_whole_gpus(devices[1:], [], 2, nvlinks)] == [2, 3]
    assert [d.gpu_index for d in best_whole_gpus(devices, [devices[1]], 2, nvlinks)] == [1, 0]
    assert best_whole_gpus(devices[:1], [], 2, nvlinks) == []


def test_node_patch_touches_only_owned_labels_and_nothing_when_equal() -> None:
    node = {"metadata": {"labels": {"team": "a", "nvidia.com/mig-1g.10gb.count": "4", "nvidia.com/gpu.count": "2"},
                         "annotations": {OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count,nvidia.com/mig-1g.10gb.count"}}}
    patch = node_patch(node, {"nvidia.com/gpu.count": "2"}, {"gpufleet.io/gpus": "{}"})
    assert patch == {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": None},
                                  "annotations": {"gpufleet.io/gpus": "{}",
                                                  OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count"}}}
    done = {"metadata": {"labels": {"team": "a", "nvidia.com/gpu.count": "2"},
                         "annotations": {"gpufleet.io/gpus": "{}", OWNED_LABELS_ANNOTATION: "nvidia.com/gpu.count"}}}
    assert node_patch(done, {"nvidia.com/gpu.count": "2"}, {"gpufleet.io/gpus": "{}"}) is None
    # A label someone else wrote with the same key as one we never owned is left alone when we stop computing it.
    foreign = {"metadata": {"labels": {"nvidia.com/gpu.product": "X"}, "annotations": {}}}
    assert "labels" not in (node_patch(foreign, {}, {}) or {"metadata": {}})["metadata"]


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[int, list[tuple[int, bool]], list[int], int, int, list[int]]:
    gpus = 8
    pods = draw(st.lists(st.tuples(st.integers(1, 3), st.booleans()), max_size=4))
    taken = draw(st.lists(st.integers(0, gpus - 1), unique=True, max_size=4))
    size = draw(st.integers(1, 4))
    must = draw(st.integers(0, min(size, 1)))
    fractions = draw(st.lists(st.integers(0, gpus - 1), unique=True, max_size=2))
    return gpus, pods, taken, size, must, fractions


@settings(max_examples=150, deadline=None)
@given(case=scenarios(), time_sliced=st.booleans())
def test_a_preferred_answer_is_always_a_valid_allocation(tmp_path_factory: pytest.TempPathFactory,
                                                         case: tuple[int, list[tuple[int, bool]], list[int], int, int,
                                                                     list[int]], time_sliced: bool) -> None:
    _, pod_specs, taken, size, must_count, fraction_gpus = case
    fake = machine(WHOLE_8, tmp_path_factory.getbasetemp())
    sharing = DevicePluginConfig(time_slicing={"nvidia.com/gpu": 2}) if time_sliced else DevicePluginConfig()
    found = discover(fake.machine(), AgentDeviceConfig(sharing=sharing))
    devices = found.devices["nvidia.com/gpu"]
    uuids = [g.uuid for g in fake.machine().gpus]
    withheld = {uuids[i] for i in fraction_gpus}
    # What the kubelet offers: healthy devices (withheld GPUs are advertised Unhealthy) not already taken.
    taken_ids = {d.id for d in devices if d.gpu_index in taken}
    available = [d.id for d in devices if d.id not in taken_ids and d.gpu_uuid not in withheld]
    must = available[:must_count]
    views, free = [], [d.id for d in devices if d.id not in taken_ids]
    for k, (n, has_intent) in enumerate(pod_specs):
        intent = tuple(free[k * 3:k * 3 + n]) if has_intent else None
        views.append(view(f"ns/p{k}", k + 1, n, intent))
    allocator = Allocator(Pods(views), lambda: {})
    allocator.set_discovery(found)
    allocator.set_withheld({u: ["ns/frac"] for u in withheld})
    assume(len(available) >= size)  # else the kubelet would not ask
    answer = allocator.preferred("nvidia.com/gpu", available, must, size)
    assert len(answer) == size and len(set(answer)) == size
    assert set(answer) <= set(available) and set(must) <= set(answer)
    by_id = {d.id: d for d in devices}
    assert not {by_id[i].gpu_uuid for i in answer} & withheld
