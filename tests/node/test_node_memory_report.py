"""The node agent writes on each pod holding a GPU device alone the peak GPU memory it was seen to use
(gpufleet.io/gpu-memory-used), for the scheduler's memory-aware sharing: against ApiSim (real HTTP), a fake
kubelet (real gRPC PodResources) and the fake NVML backend, whose framebuffer use follows the device's holders."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_env import Env, running_agent
from kube_apisim import ApiSim
from live_env import NS, annotation_patches, pod, wait_until
from machines import MIG_MIXED, TIME_SLICED, WHOLE_4_PAIRS, write_machine

from gpufleet.api.objects import GPU_MEMORY_USED_ANNOTATION
from gpufleet.k8s import resources as r
from gpufleet.k8s.client import KubeClient
from gpufleet.node.attribution import Attribution, Holder
from gpufleet.node.contract import Gpu, GpuMemory, InstanceSample, ProcessMemory
from gpufleet.node.memory_report import (
    RETRY_S,
    STEP_MIB,
    MemoryReporter,
    ProcessPods,
    carried,
    readings,
    worth_writing,
)
from gpufleet.node.nvml_fake import FakeNvml

GPU = "nvidia.com/gpu"


def used(apisim: ApiSim, name: str) -> str | None:
    obj = apisim.get(r.PODS, NS, name)
    assert obj is not None
    return (obj["metadata"].get("annotations") or {}).get(GPU_MEMORY_USED_ANNOTATION)


def readings_pass(env: Env, count: int = 3) -> None:
    """Wait until the agent took ``count`` more readings (what it writes after one is sent before the next)."""
    start = env.agent.memory.readings
    wait_until(lambda: env.agent.memory.readings >= start + count, what=f"{count} more memory readings")


def fb_used(env: Env, gpu: int) -> int:
    assert env.agent.opened is not None and env.agent.discovery is not None
    return round(env.agent.opened.backend.sample(env.agent.discovery.machine.gpus[gpu]).fb_used_mib)


def test_a_pod_holding_a_gpu_alone_carries_its_peak_once(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_4_PAIRS), memory_report_period=0.05) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("train", [u[1]])
        env.bound_pod("idle", [u[2]], gpus=1)  # allocated nothing by the kubelet yet: holds no device
        env.wait_tracked("train", "idle")
        kubelet.admit(f"{NS}/train", {"main": {GPU: 1}})
        wait_until(lambda: used(env.apisim, "train") == f"{fb_used(env, 1)}Mi", what="train's GPU memory written on it")
        assert fb_used(env, 1) > STEP_MIB
        readings_pass(env)
        assert env.agent.memory.writes == 1  # the same peak is not written again
        assert used(env.apisim, "idle") is None


def test_a_gpu_two_pods_share_tells_nothing_per_pod(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, TIME_SLICED), memory_report_period=0.05) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("a", [f"{u[0]}::0"])
        env.bound_pod("b", [f"{u[0]}::1"])
        env.bound_pod("alone", [f"{u[1]}::0"])
        env.wait_tracked("a", "b", "alone")
        for name in ("a", "b", "alone"):
            kubelet.admit(f"{NS}/{name}", {"main": {GPU: 1}})
        wait_until(lambda: used(env.apisim, "alone") == f"{fb_used(env, 1)}Mi", what="the lone replica written")
        readings_pass(env)
        assert used(env.apisim, "a") is None and used(env.apisim, "b") is None


def test_a_mig_instance_reports_its_own_memory(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, MIG_MIXED)
    gpu0 = FakeNvml(str(machine)).machine().gpus[0]
    big = next(m for m in gpu0.mig if m.profile == "3g.40gb")
    resource = "nvidia.com/mig-3g.40gb"
    with running_agent(apisim, sockdir, machine, memory_report_period=0.05) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([resource])
        env.bound_pod("infer", [big.uuid], resource=resource)
        env.wait_tracked("infer")
        kubelet.admit(f"{NS}/infer", {"server": {resource: 1}})
        assert env.agent.opened is not None
        wait_until(lambda: used(env.apisim, "infer") is not None, what="the instance's memory written")
        sample = env.agent.opened.backend.sample(gpu0)
        [instance] = [i for i in sample.instances if i.gi_id == big.gi_id]
        assert used(env.apisim, "infer") == f"{round(instance.fb_used_mib)}Mi"
        assert instance.fb_used_mib < sample.fb_used_mib  # the instance's, not the whole GPU's


def _gpu(uuid: str) -> Gpu:
    return Gpu(0, uuid, "NVIDIA A100-SXM4-80GB", 81920, 8, 0, "0000:00:00.0", True, True)


def _sample(used_mib: float, instances: tuple[InstanceSample, ...] = ()) -> GpuMemory:
    return GpuMemory(used_mib, instances)


def test_readings_take_the_most_a_pod_uses_on_the_devices_it_holds_alone() -> None:
    held = Attribution(owner={("G0", None): ("ns", "p", "main"), ("G1", None): ("ns", "p", "main"),
                              ("G2", 3): ("ns", "q", "main")})
    got = readings(held, [(_gpu("G0"), _sample(1000.4)), (_gpu("G1"), _sample(3000)),
                          (_gpu("G2"), _sample(9999, (InstanceSample(3, 512, 100), InstanceSample(4, 700, 0)))),
                          (_gpu("G3"), _sample(5000))])
    assert got == {"ns/p": 3000, "ns/q": 512}


UID_A = "0b6c1f2e-5d3a-4c7b-9e8f-1a2b3c4d5e6f"
UID_B = "7f00aa11-22bb-43cc-84dd-95ee06ff1a2b"


def _proc(root: Path, pid: int, cgroup: str) -> None:
    (root / str(pid)).mkdir(parents=True)
    (root / str(pid) / "cgroup").write_text(cgroup)


def test_a_shared_gpu_is_read_per_pod_from_its_processes_cgroups(tmp_path: Path) -> None:
    """Each process mapped to its pod by the UID in its cgroup path (systemd's underscores, cgroupfs's dashes, cgroup
    v1's many lines); a pod's processes summed; a process of no pod holding that GPU, one not visible (another
    PID namespace), or one whose use NVML does not report, left out."""
    _proc(tmp_path, 101, f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
                         f"{UID_A.replace('-', '_')}.slice/cri-containerd-abc.scope\n")
    _proc(tmp_path, 102, f"12:memory:/kubepods/besteffort/pod{UID_A}/0123\n"
                         f"11:cpu:/kubepods/besteffort/pod{UID_A}/0123\n")
    _proc(tmp_path, 201, f"0::/kubepods/pod{UID_B}/4567\n")
    _proc(tmp_path, 301, "0::/system.slice/containerd.service\n")  # not a pod's
    _proc(tmp_path, 401, f"0::/kubepods/pod{'1' * 8}-1111-1111-1111-{'1' * 12}/89\n")  # a pod not on this GPU
    holders = [Holder(NS, name, "main", "replica", 0.5, None) for name in ("a", "b")]
    held = Attribution(holders={"G0": holders})
    processes = (ProcessMemory(101, 3000.0), ProcessMemory(102, 1000.5), ProcessMemory(201, 500.0),
                 ProcessMemory(301, 9000.0), ProcessMemory(401, 7000.0), ProcessMemory(999, 8000.0),
                 ProcessMemory(201, math.nan))
    uids = {UID_A: f"{NS}/a", UID_B: f"{NS}/b", f"{'1' * 8}-1111-1111-1111-{'1' * 12}": f"{NS}/elsewhere"}
    got = readings(held, [(_gpu("G0"), GpuMemory(30000.0, (), processes))], processes=ProcessPods(tmp_path),
                   uids=uids)
    assert got == {f"{NS}/a": 4001, f"{NS}/b": 500}
    # Without the processes' cgroups (the agent outside the host's PID namespace) a shared GPU tells nothing.
    assert readings(held, [(_gpu("G0"), GpuMemory(30000.0, (), processes))], processes=ProcessPods(tmp_path / "x"),
                    uids=uids) == {}


def test_a_gpu_two_pods_share_is_told_per_pod_from_their_processes(apisim: ApiSim, sockdir: Path) -> None:
    proc = sockdir / "proc"
    with running_agent(apisim, sockdir, write_machine(sockdir, TIME_SLICED), memory_report_period=0.05,
                       proc_root=proc) as env:
        kubelet = env.kubelet
        assert kubelet is not None and env.agent.opened is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        a = env.bound_pod("a", [f"{u[0]}::0"])
        b = env.bound_pod("b", [f"{u[0]}::1"])
        env.wait_tracked("a", "b")
        for name in ("a", "b"):
            kubelet.admit(f"{NS}/{name}", {"main": {GPU: 1}})
        _proc(proc, 4242, f"0::/kubepods/burstable/pod{a['metadata']['uid']}/c1\n")
        _proc(proc, 4343, f"0::/kubepods/burstable/pod{b['metadata']['uid']}/c2\n")
        backend = env.agent.opened.backend
        assert isinstance(backend, FakeNvml)
        backend.processes[u[0]] = (ProcessMemory(4242, 20480.0), ProcessMemory(4343, 4096.0))
        wait_until(lambda: used(env.apisim, "a") == "20480Mi" and used(env.apisim, "b") == "4096Mi",
                   what="each replica holder's own memory written on it")


def test_steps_and_what_a_pod_carries() -> None:
    assert not worth_writing(STEP_MIB - 1, 0)  # a bare CUDA context: nothing learnt yet
    assert worth_writing(STEP_MIB, 0)
    assert not worth_writing(20_000 + 1_999, 20_000) and worth_writing(22_000, 20_000)  # 10 %
    assert not worth_writing(1_000 + 255, 1_000) and worth_writing(1_256, 1_000)  # at least 256 MiB
    assert not worth_writing(10_000, 20_000)  # never lower: a peak
    for text, mib in (("20Gi", 20480), ("24577Mi", 24577), ("oops", 0), ("-1Gi", 0)):
        assert carried({"metadata": {"annotations": {GPU_MEMORY_USED_ANNOTATION: text}}}) == mib


@pytest.fixture
def client(apisim: ApiSim) -> Iterator[KubeClient]:
    c = KubeClient(host=apisim.url, timeout=5.0)
    yield c
    c.close()


def test_what_the_pod_already_carries_is_not_written_again(apisim: ApiSim, client: KubeClient) -> None:
    """A restarted agent reads the value from the pod: only a step above it is written."""
    obj = apisim.create(r.PODS, pod("p", node_name="n", annotations={GPU_MEMORY_USED_ANNOTATION: "20000Mi"}))
    reporter = MemoryReporter(client)
    key = f"{NS}/p"
    assert reporter.report({key: 21_000}, {key: obj}, 0.0) == []
    assert reporter.report({key: 22_000}, {key: obj}, 1.0) == [key]
    assert used(apisim, "p") == "22000Mi"
    # The peak outlives a lower reading and a pod made again under the name starts afresh.
    assert reporter.report({key: 500}, {key: apisim.get(r.PODS, NS, "p")}, 2.0) == []
    assert reporter.peaks == {(key, obj["metadata"]["uid"]): 22_000}
    assert reporter.report({}, {}, 3.0) == [] and reporter.peaks == {}


def test_a_write_that_fails_is_tried_again_later_and_later(apisim: ApiSim, client: KubeClient) -> None:
    ghost = pod("ghost", node_name="n")  # in the agent's cache, no longer in the API: every write fails
    ghost["metadata"]["uid"] = "uid-ghost"
    key = f"{NS}/ghost"
    reporter = MemoryReporter(client)

    def patches() -> int:
        return len(annotation_patches(apisim, "ghost"))

    for clock, tried in ((0.0, 1), (1.0, 1), (RETRY_S - 1, 1), (RETRY_S, 2), (RETRY_S + 2 * RETRY_S - 1, 2),
                         (RETRY_S + 2 * RETRY_S, 3)):
        assert reporter.report({key: 20_000}, {key: ghost}, clock) == []
        assert patches() == tried, clock

