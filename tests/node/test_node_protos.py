"""The committed message modules are exactly what the pinned grpcio-tools generates from the .proto files, and
the protos carry the kubelet's package, service and field numbers (what the wire format depends on)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.node.protos import HERE, PROTO_FILES, protoc_args
from gpufleet.node.protos import deviceplugin_v1beta1_pb2 as dp
from gpufleet.node.protos import podresources_v1_pb2 as pr


def test_regenerating_the_message_modules_gives_the_committed_files(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools is a dev dependency: pip install -e .[dev]")
    assert protoc.main(protoc_args(tmp_path)) == 0
    for proto in PROTO_FILES:
        for suffix in ("_pb2.py", "_pb2.pyi"):
            name = proto.removesuffix(".proto") + suffix
            assert (tmp_path / name).read_bytes() == (HERE / name).read_bytes(), (
                f"{name} differs from protoc's output: run `python hack/gen_protos.py` and commit")


def _fields(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_device_plugin_api_matches_the_kubelet() -> None:
    assert dp.DESCRIPTOR.package == "v1beta1"
    services = {s.name: [m.name for m in s.methods] for s in dp.DESCRIPTOR.services_by_name.values()}
    assert services == {"Registration": ["Register"],
                        "DevicePlugin": ["GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation",
                                         "Allocate", "PreStartContainer"]}
    assert _fields(dp.RegisterRequest) == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert _fields(dp.DevicePluginOptions) == {"pre_start_required": 1, "get_preferred_allocation_available": 2}
    assert _fields(dp.Device) == {"ID": 1, "health": 2, "topology": 3}
    assert _fields(dp.ContainerPreferredAllocationRequest) == {
        "available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3}
    assert _fields(dp.ContainerAllocateResponse) == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4,
                                                     "cdi_devices": 5}
    assert _fields(dp.DeviceSpec) == {"container_path": 1, "host_path": 2, "permissions": 3}


def test_pod_resources_api_matches_the_kubelet() -> None:
    assert pr.DESCRIPTOR.package == "v1"
    [service] = pr.DESCRIPTOR.services_by_name.values()
    assert service.full_name == "v1.PodResourcesLister"
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    assert _fields(pr.ContainerDevices) == {"resource_name": 1, "device_ids": 2, "topology": 3}
    assert _fields(pr.PodResources) == {"name": 1, "namespace": 2, "containers": 3, "cpu_ids": 4, "memory": 5}
    assert _fields(pr.ContainerResources) == {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4,
                                              "dynamic_resources": 5}
    assert _fields(pr.GetPodResourcesRequest) == {"pod_name": 1, "pod_namespace": 2}
