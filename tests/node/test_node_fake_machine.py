"""The fake NVML backend: the machine `gpufleet nodes render` prints, faults from MACHINE.events, live telemetry."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from machines import MIG_MIXED, MIG_SINGLE, TIME_SLICED, WHOLE_4_PAIRS, WHOLE_8, write_machine

from gpufleet.api.manifests import load_manifests
from gpufleet.api.nodepool import expand_node_pool
from gpufleet.node.contract import ALL_INSTANCES, NvmlError, XidEvent
from gpufleet.node.discovery import discover
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.nvml_fake import FakeNvml

REPO = Path(__file__).resolve().parents[2]


def rendered_first_node(path: Path) -> dict:
    [pool] = load_manifests([str(path)]).node_pools
    return expand_node_pool(pool)[0]


@pytest.mark.parametrize("text", [WHOLE_8, WHOLE_4_PAIRS, MIG_MIXED, MIG_SINGLE, TIME_SLICED],
                         ids=["whole", "pairs", "mig-mixed", "mig-single", "time-sliced"])
def test_discover_publishes_exactly_what_nodes_render_prints_for_the_first_node(tmp_path: Path, text: str) -> None:
    path = write_machine(tmp_path, text)
    fake = FakeNvml(str(path))
    found = discover(fake.machine(), AgentDeviceConfig(sharing=fake.sharing), timestamp=0)
    node = rendered_first_node(path)
    assert found.annotations == node["metadata"]["annotations"]  # same UUIDs, MIG layout, NVLinks, sharing
    rendered_labels = {k: v for k, v in node["metadata"]["labels"].items() if k.startswith("nvidia.com/")}
    assert {k: found.labels[k] for k in rendered_labels} == rendered_labels
    gpu_resources = {k: int(v) for k, v in node["status"]["capacity"].items() if k.startswith("nvidia.com/")}
    assert found.resources == gpu_resources
    assert found.document().keys() == {"labels", "annotations", "resources"}


def test_the_case_study_pools_are_fake_machines_too(tmp_path: Path) -> None:
    text = (REPO / "examples" / "casestudy" / "cluster.yaml").read_text()
    for i, doc in enumerate(d for d in text.split("\n---\n") if "kind: NodePool" in d):
        path = write_machine(tmp_path, doc, f"pool{i}.yaml")
        fake = FakeNvml(str(path))
        node = rendered_first_node(path)
        inventory = json.loads(node["metadata"]["annotations"]["gpufleet.io/gpus"])
        assert [g.uuid for g in fake.machine().gpus] == [g["uuid"] for g in inventory["gpus"]]
        for gpu, described in zip(fake.machine().gpus, inventory["gpus"], strict=True):
            assert [(d.profile, d.start, d.uuid) for d in gpu.mig] == [
                (m["profile"], m["start"], m["uuid"]) for m in described.get("mig", [])]


def test_a_machine_file_that_is_not_a_gpu_node_pool_is_refused_with_its_problems(tmp_path: Path) -> None:
    with pytest.raises(NvmlError, match="no such file"):
        FakeNvml(str(tmp_path / "missing.yaml"))
    bad = write_machine(tmp_path, WHOLE_8.replace("count: 8", "count: eight"))
    with pytest.raises(NvmlError, match=r"machine.yaml:\d+.*gpu.count"):
        FakeNvml(str(bad))
    cpu_only = write_machine(tmp_path, WHOLE_8.replace("  gpu: {model: A100-SXM4-80GB, count: 8}\n", ""), "cpu.yaml")
    with pytest.raises(NvmlError, match="no NodePool with GPUs"):
        FakeNvml(str(cpu_only))


def test_events_appended_while_running_arrive_and_bad_lines_are_reported_and_skipped(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_machine(tmp_path, MIG_MIXED)
    fake = FakeNvml(str(path))
    gpus = fake.machine().gpus
    assert fake.wait_events(0.0) == []  # no events file yet
    events = Path(str(path) + ".events")
    with caplog.at_level(logging.WARNING):
        events.write_text('{"gpu": 1, "xid": 79}\nnot json\n{"gpu": 9, "xid": 48}\n{"gpu": 0, "xid": 94, "gi": 2}\n'
                          '{"gpu": 0}\n{"gpu": 0, "xid": 13')  # the last line is still being written
        got = fake.wait_events(1.0)
    assert got == [XidEvent(gpus[1].uuid, 79), XidEvent(gpus[0].uuid, 94, 2, ALL_INSTANCES)]
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{events}:2: not JSON" in m for m in messages)
    assert any(f"{events}:3: field gpu: the machine has GPUs 0..1, got 9" in m for m in messages)
    assert any(f"{events}:5: fields gpu and xid are required" in m for m in messages)
    with events.open("a") as f:
        f.write("}\n")  # the half-written line completes
    assert fake.wait_events(1.0) == [XidEvent(gpus[0].uuid, 13)]
    events.write_text('{"gpu": 1, "xid": 31}\n')  # replaced by a shorter file: read from its start
    assert fake.wait_events(1.0) == [XidEvent(gpus[1].uuid, 31)]
    assert fake.sample(gpus[1]).last_xid == 31


def test_a_hostile_event_line_costs_that_line_only(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Issue 30, item 5: 5,000 nested brackets raised RecursionError out of the event wait, and the agent's event
    # thread then marked every GPU unhealthy. One bad line must cost one line; the events around it arrive.
    path = write_machine(tmp_path, MIG_MIXED)
    fake = FakeNvml(str(path))
    gpus = fake.machine().gpus
    events = Path(str(path) + ".events")
    with caplog.at_level(logging.WARNING):
        events.write_text('{"gpu": 1, "xid": 79}\n' + "[" * 5000 + "\n" + '{"gpu": 0, "xid": ' + "1" * 5000
                          + "}\n" + "[" * 3000 + "\n" + '{"gpu": 0, "xid": 13}\n')
        got = fake.wait_events(1.0)
    assert got == [XidEvent(gpus[1].uuid, 79), XidEvent(gpus[0].uuid, 13)]
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{events}:2: a line of 5000 characters" in m for m in messages)
    assert any(f"{events}:3: a line of" in m for m in messages)
    assert any(f"{events}:4: not JSON (nested too deep)" in m for m in messages)


def test_telemetry_follows_the_pods_holding_each_gpu(tmp_path: Path) -> None:
    holders: dict[str, int] = {}
    now = [0.0]
    fake = FakeNvml(str(write_machine(tmp_path, WHOLE_4_PAIRS)), holders=lambda: holders, clock=lambda: now[0])
    busy, idle = fake.machine().gpus[0], fake.machine().gpus[1]
    first = fake.sample(busy)
    assert first.gpu_util == 0 and first.fb_used_mib < 10
    holders[busy.uuid] = 2
    temperatures = []
    for _ in range(6):
        now[0] += 10.0
        s = fake.sample(busy)
        temperatures.append(s.temperature_c)
    assert s.gpu_util > 60 and s.fb_used_mib > 0.5 * busy.memory_mib and s.power_w > 300
    assert temperatures == sorted(temperatures) and temperatures[-1] - temperatures[0] > 5  # warms, with inertia
    assert fake.sample(idle).gpu_util == 0
    assert fake.sample(busy).energy_mj > first.energy_mj
    holders[busy.uuid] = 0
    now[0] += 200.0
    assert fake.sample(busy).temperature_c < temperatures[-1] - 10  # and cools down when the pods end
