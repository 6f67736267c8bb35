"""The node agent's GPU metrics: dcgm-exporter's names and labels, MIG instances with GPU_I_PROFILE/GPU_I_ID, pod
labels from the kubelet's PodResources record (a real gRPC fake kubelet), and the holders of shared GPUs
(time-slice replicas, fractional pods) with their share and declared memory."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from agent_env import Env, running_agent
from kube_apisim import ApiSim
from live_env import NS, wait_until
from machines import MIG_MIXED, TIME_SLICED, WHOLE_4_PAIRS, write_machine
from prometheus_client.parser import text_string_to_metric_families

from gpufleet.node.attribution import attribute
from gpufleet.node.nvml_fake import FakeNvml
from gpufleet.node.podresources import Assignment

GPU = "nvidia.com/gpu"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
Series = list[tuple[dict[str, str], float]]


def scrape(env: Env) -> dict[str, Series]:
    """Samples by the name written (prometheus_client's parser renames dcgm-exporter's counters, which have no
    _total suffix, so it only checks that the exposition parses)."""
    text = env.agent.exposition().decode()
    assert list(text_string_to_metric_families(text))
    out: dict[str, Series] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            labels = dict(_LABEL.findall(m.group(2) or ""))
            out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def of_gpu(series: Series, gpu: int, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [(lb, v) for lb, v in series if lb["gpu"] == str(gpu) and labels.items() <= lb.items()]


def pod_of(labels: Mapping[str, str]) -> tuple[str, str, str] | None:
    return (labels["namespace"], labels["pod"], labels["container"]) if "pod" in labels else None


def test_whole_gpus_carry_the_pod_the_kubelet_gave_them(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_4_PAIRS)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("train", [u[1]])
        env.wait_tracked("train")
        kubelet.admit(f"{NS}/train", {"main": {GPU: 1}})
        wait_until(lambda: pod_of(of_gpu(scrape(env)["DCGM_FI_DEV_GPU_UTIL"], 1)[0][0]) == (NS, "train", "main"),
                   what="GPU 1 labelled with its pod")
        metrics = scrape(env)
        [(idle, _)] = of_gpu(metrics["DCGM_FI_DEV_GPU_UTIL"], 0)
        assert pod_of(idle) is None  # as dcgm-exporter: no pod labels on a GPU nobody holds
        for name in ("DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                     "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                     "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED"):
            assert len(metrics[name]) == 4, name
            [(labels, _)] = of_gpu(metrics[name], 1)
            assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                    "DCGM_FI_DRIVER_VERSION"} <= labels.keys() and labels["Hostname"] == env.node
        text = env.agent.exposition().decode()
        assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter" in text
        assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL_total" not in text


def test_memory_faults_show_in_ecc_and_row_remapping(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, WHOLE_4_PAIRS), kubelet=False,
                       inventory_only=True) as env:
        env.fault(2, 48)  # double-bit ECC error
        env.fault(3, 64)  # row remapping failure

        def value(name: str, gpu: int) -> float:
            return of_gpu(scrape(env)[name], gpu)[0][1]

        wait_until(lambda: value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 2) == 1, what="the DBE counted")
        wait_until(lambda: value("DCGM_FI_DEV_ROW_REMAP_FAILURE", 3) == 1, what="the remap failure")
        assert value("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 3) == 0 and value("DCGM_FI_DEV_ROW_REMAP_FAILURE", 2) == 0
        assert value("DCGM_FI_DEV_XID_ERRORS", 2) == 48


def test_mig_instances_are_series_of_their_own_with_their_pods(apisim: ApiSim, sockdir: Path) -> None:
    machine = write_machine(sockdir, MIG_MIXED)
    gpu0 = FakeNvml(str(machine)).machine().gpus[0]
    big = next(m for m in gpu0.mig if m.profile == "3g.40gb")
    resource = "nvidia.com/mig-3g.40gb"
    with running_agent(apisim, sockdir, machine) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([resource])
        env.bound_pod("infer", [big.uuid], resource=resource)
        env.wait_tracked("infer")
        kubelet.admit(f"{NS}/infer", {"server": {resource: 1}})

        def rows() -> Series:
            return of_gpu(scrape(env)["DCGM_FI_DEV_FB_USED"], 0)

        wait_until(lambda: any(pod_of(lb) == (NS, "infer", "server") and v > 1 for lb, v in rows()),
                   what="the 3g.40gb instance labelled with its pod, its memory in use")
        by_gi = {lb["GPU_I_ID"]: lb for lb, _ in rows()}
        assert {lb["GPU_I_PROFILE"] for lb in by_gi.values()} == {"3g.40gb", "2g.20gb", "1g.10gb"}
        assert len(by_gi) == 4 and all(lb["UUID"] == gpu0.uuid for lb in by_gi.values())
        assert by_gi[str(big.gi_id)]["pod"] == "infer"
        assert [pod_of(lb) for gi, lb in by_gi.items() if gi != str(big.gi_id)] == [None, None, None]
        # The GPU's own readings repeat on every instance's series, as dcgm-exporter reports MIG GPUs.
        temps = of_gpu(scrape(env)["DCGM_FI_DEV_GPU_TEMP"], 0)
        assert len(temps) == 4 and len({v for _, v in temps}) == 1
        assert not of_gpu(scrape(env).get("DCGM_FI_PROF_GR_ENGINE_ACTIVE", []), 0)  # not per instance


def test_time_slice_replicas_and_fractions_are_holders_with_shares(apisim: ApiSim, sockdir: Path) -> None:
    with running_agent(apisim, sockdir, write_machine(sockdir, TIME_SLICED)) as env:
        kubelet = env.kubelet
        assert kubelet is not None
        kubelet.wait_registered([GPU])
        u = env.uuids()
        env.bound_pod("a", [f"{u[0]}::0"])
        env.bound_pod("b", [f"{u[0]}::1"], annotations={"gpufleet.io/gpu-memory": "8Gi"})
        env.wait_tracked("a", "b")
        kubelet.admit(f"{NS}/a", {"main": {GPU: 1}})
        kubelet.admit(f"{NS}/b", {"main": {GPU: 1}})
        for name, fraction in (("half", "0.5"), ("quarter", "0.25")):
            env.bound_pod(name, None, gpus=0, annotations={"gpufleet.io/gpu-fraction": fraction,
                                                          "gpufleet.io/gpu-memory": "10Gi",
                                                          "gpufleet.io/visible-devices": u[1]})
        env.wait_tracked("half", "quarter")

        def holders() -> dict[tuple[str, str, str], float]:
            return {(lb["gpu"], lb["pod"], lb["kind"]): v
                    for lb, v in scrape(env).get("gpufleet_node_gpu_holder_share", [])}

        wait_until(lambda: len(holders()) == 4, what="four holders")
        assert holders() == {("0", "a", "replica"): 0.25, ("0", "b", "replica"): 0.25,
                             ("1", "half", "fraction"): 0.5, ("1", "quarter", "fraction"): 0.25}
        memory = {(lb["gpu"], lb["pod"]): v for lb, v in scrape(env)["gpufleet_node_gpu_holder_memory_bytes"]}
        assert memory == {("0", "b"): 8 * 2**30, ("1", "half"): 10 * 2**30, ("1", "quarter"): 10 * 2**30}
        # Shared GPUs carry no pod on their dcgm series (a sum over a GPU's series counts it once).
        util = scrape(env)["DCGM_FI_DEV_GPU_UTIL"]
        assert [pod_of(lb) for lb, _ in util] == [None, None]


def test_attribution_from_pod_resources_and_fractional_pods() -> None:
    machine = FakeNvml(str(Path(__file__).parents[2] / "examples" / "node" / "dgx-a100.yaml")).machine()
    g0, g1, g2 = machine.gpus[:3]
    held = attribute(machine, [
        Assignment("ml", "two-containers", "a", GPU, f"{g0.uuid}::0"),
        Assignment("ml", "two-containers", "b", GPU, f"{g0.uuid}::1"),
        Assignment("ml", "other-resource", "c", "example.com/nic", "nic-0"),
        Assignment("ml", "by-index", "c", GPU, "3"),  # deviceIDStrategy index: not mapped
    ], {g1.uuid: ["ml/solo"], "GPU-unknown": ["ml/ghost"]}, lambda key: None, {g0.uuid: 4})
    assert held.pod_of(g0.uuid) == ("ml", "two-containers", "")  # one pod, two containers
    assert held.pod_of(g1.uuid) == ("ml", "solo", "")
    assert held.pod_of(g2.uuid) is None
    assert [(h.pod, h.container, h.share) for h in held.holders[g0.uuid]] == [
        ("two-containers", "a", 0.25), ("two-containers", "b", 0.25)]
    [solo] = held.holders[g1.uuid]
    assert (solo.kind, solo.share, solo.memory_mib) == ("fraction", None, None)  # not parsed: share unknown
    assert "GPU-unknown" not in held.holders
    no_kubelet = attribute(machine, None, {}, lambda key: None, {})
    assert no_kubelet.owner == {} and no_kubelet.holders == {}


def test_holders_of_one_pod_are_one_series(tmp_path: Path) -> None:
    from gpufleet.node.metrics import render_gpu_metrics

    machine = FakeNvml(str(write_machine(tmp_path, TIME_SLICED))).machine()
    fake = FakeNvml(str(tmp_path / "machine.yaml"))
    g0 = machine.gpus[0]
    held = attribute(machine, [Assignment("ml", "p", "main", GPU, f"{g0.uuid}::0"),
                               Assignment("ml", "p", "main", GPU, f"{g0.uuid}::1")], {}, lambda key: None,
                     {g0.uuid: 4})
    text = render_gpu_metrics(machine, [(g, fake.sample(g)) for g in machine.gpus], "ts-0", held).decode()
    [line] = [ln for ln in text.splitlines() if ln.startswith("gpufleet_node_gpu_holder_share{")]
    assert line.endswith(" 0.5") and 'pod="p"' in line  # two replicas of one container: summed, not duplicated
