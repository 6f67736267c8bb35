"""A fake kubelet for the device plugins: real gRPC on unix sockets, the kubelet's side of each API.

* ``Registration`` served on ``<dir>/kubelet.sock``; each registration makes it dial the plugin's socket, read
  GetDevicePluginOptions and follow ListAndWatch on a thread (the kubelet's endpoint);
* :meth:`FakeKubelet.admit` does what the kubelet's device manager does when it admits a pod: per container
  and resource, offer the healthy devices not allocated yet, ask GetPreferredAllocation, take the answer when
  it is valid (else its own pick), call Allocate, and record the allocation;
* ``PodResourcesLister.List`` served on its own socket from that record;
* :meth:`restart` removes every socket in the folder and serves a new ``kubelet.sock``, as a kubelet restart does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from gpufleet.node.protos import deviceplugin_v1beta1_pb2 as dp
from gpufleet.node.protos import podresources_v1_pb2 as pr


class AdmissionError(Exception):
    """The plugin refused Allocate: the kubelet would fail the pod with UnexpectedAdmissionError."""


@dataclass
class Endpoint:
    resource: str
    socket: str
    channel: grpc.Channel
    options: dp.DevicePluginOptions
    devices: dict[str, str] = field(default_factory=dict)  # id -> health, the latest ListAndWatch
    history: list[dict[str, str]] = field(default_factory=list)  # every list received, in order
    updates: int = 0
    closed: bool = False


@dataclass
class Grant:
    ids: list[str]
    preferred: list[str] | None
    envs: dict[str, str]
    response: dp.ContainerAllocateResponse


class FakeKubelet:
    def __init__(self, plugin_dir: Path, pod_resources_socket: Path) -> None:
        self.plugin_dir = plugin_dir
        self.pod_resources_socket = pod_resources_socket
        self.registrations: list[dp.RegisterRequest] = []
        self.endpoints: dict[str, Endpoint] = {}
        # pod key -> container -> resource -> device IDs (the kubelet's podDevices checkpoint)
        self.pod_devices: dict[str, dict[str, dict[str, list[str]]]] = {}
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None
        self._pr_server: grpc.Server | None = None
        self.preferred_calls: list[tuple[str, list[str], list[str], int]] = []
        self.refusing = False  # answer every registration with FAILED_PRECONDITION (a kubelet not ready yet)

    # --- lifecycle -------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def socket(self) -> Path:
        return self.plugin_dir / "kubelet.sock"

    def start(self) -> None:
        self._server = grpc.server(ThreadPoolExecutor(max_workers=4))
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(
                self._register, request_deserializer=dp.RegisterRequest.FromString,
                response_serializer=dp.Empty.SerializeToString)}),))
        self._server.add_insecure_port(f"unix://{self.socket}")
        self._server.start()
        if self._pr_server is None:
            self._pr_server = grpc.server(ThreadPoolExecutor(max_workers=2))
            self._pr_server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
                "List": grpc.unary_unary_rpc_method_handler(
                    self._list, request_deserializer=pr.ListPodResourcesRequest.FromString,
                    response_serializer=pr.ListPodResourcesResponse.SerializeToString)}),))
            self._pr_server.add_insecure_port(f"unix://{self.pod_resources_socket}")
            self._pr_server.start()

    def stop(self) -> None:
        with self._cond:
            endpoints = list(self.endpoints.values())
            self.endpoints.clear()
        for e in endpoints:
            e.closed = True
            e.channel.close()
        if self._server is not None:
            self._server.stop(0).wait(2)
            self._server = None

    def close(self) -> None:
        self.stop()
        if self._pr_server is not None:
            self._pr_server.stop(0).wait(2)
            self._pr_server = None

    def restart(self) -> None:
        """What a kubelet restart does to the folder: its old socket and every plugin socket are removed."""
        self.stop()
        for entry in self.plugin_dir.iterdir():
            if entry.is_socket():
                entry.unlink()
        self.start()

    # --- the kubelet's endpoints -----------------------------------------------------------------------------

    def _register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unsupported version {request.version}")
        if self.refusing:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "the kubelet is not ready for device plugins")
        socket = str(self.plugin_dir / request.endpoint)
        channel = grpc.insecure_channel(f"unix://{socket}")
        options = channel.unary_unary("/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                      request_serializer=dp.Empty.SerializeToString,
                                      response_deserializer=dp.DevicePluginOptions.FromString)(dp.Empty(), timeout=5)
        endpoint = Endpoint(request.resource_name, socket, channel, options)
        with self._cond:
            old = self.endpoints.get(request.resource_name)
            self.endpoints[request.resource_name] = endpoint
            self.registrations.append(request)
            self._cond.notify_all()
        if old is not None:
            old.closed = True
            old.channel.close()
        threading.Thread(target=self._watch, args=(endpoint,), daemon=True).start()
        return dp.Empty()

    def _watch(self, endpoint: Endpoint) -> None:
        stream = endpoint.channel.unary_stream("/v1beta1.DevicePlugin/ListAndWatch",
                                               request_serializer=dp.Empty.SerializeToString,
                                               response_deserializer=dp.ListAndWatchResponse.FromString)(dp.Empty())
        try:
            for response in stream:
                with self._cond:
                    endpoint.devices = {d.ID: d.health for d in response.devices}
                    endpoint.history.append(dict(endpoint.devices))
                    endpoint.updates += 1
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # the plugin went away (or we closed the channel)

    def _list(self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext) -> pr.ListPodResourcesResponse:
        with self._cond:
            pods = []
            for key, containers in self.pod_devices.items():
                ns, name = key.split("/", 1)
                pods.append(pr.PodResources(name=name, namespace=ns, containers=[
                    pr.ContainerResources(name=c, devices=[pr.ContainerDevices(resource_name=r, device_ids=ids)
                                                           for r, ids in resources.items()])
                    for c, resources in containers.items()]))
        return pr.ListPodResourcesResponse(pod_resources=pods)

    # --- waiting ---------------------------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"fake kubelet: {what} not reached in {timeout}s")
                self._cond.wait(min(left, 0.1))

    def wait_registered(self, resources: Sequence[str], count: int = 1, timeout: float = 10.0) -> None:
        def done() -> bool:
            return all(sum(r.resource_name == res for r in self.registrations) >= count
                       and res in self.endpoints and self.endpoints[res].updates > 0 for res in resources)

        self.wait_for(done, timeout, f"{count} registration(s) of {', '.join(resources)} with a device list")

    def devices(self, resource: str) -> dict[str, str]:
        with self._cond:
            return dict(self.endpoints[resource].devices)

    def healthy(self, resource: str) -> list[str]:
        return [i for i, h in self.devices(resource).items() if h == "Healthy"]

    # --- admission -------------------------------------------------------------------------------------------

    def allocated(self, resource: str) -> set[str]:
        with self._cond:
            return {i for containers in self.pod_devices.values() for res in containers.values()
                    for i in res.get(resource, [])}

    def admit(self, pod: str, containers: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, Grant]]:
        """Admit ``pod`` (``namespace/name``): container name -> resource -> count, in container order."""
        out: dict[str, dict[str, Grant]] = {}
        for container, requests in containers.items():
            for resource, size in requests.items():
                out.setdefault(container, {})[resource] = self._allocate_one(pod, container, resource, size)
        return out

    def _call(self, resource: str, method: str, request: Any, response_type: Any) -> Any:
        endpoint = self.endpoints[resource]
        return endpoint.channel.unary_unary(f"/v1beta1.DevicePlugin/{method}",
                                            request_serializer=type(request).SerializeToString,
                                            response_deserializer=response_type.FromString)(request, timeout=10)

    def _allocate_one(self, pod: str, container: str, resource: str, size: int) -> Grant:
        endpoint = self.endpoints[resource]
        available = [i for i in self.healthy(resource) if i not in self.allocated(resource)]
        if len(available) < size:
            raise AdmissionError(f"{resource}: {size} requested, {len(available)} available")
        preferred: list[str] | None = None
        ids = available[:size]
        if endpoint.options.get_preferred_allocation_available:
            answer = self._call(resource, "GetPreferredAllocation", dp.PreferredAllocationRequest(container_requests=[
                dp.ContainerPreferredAllocationRequest(available_deviceIDs=available, must_include_deviceIDs=[],
                                                       allocation_size=size)]), dp.PreferredAllocationResponse)
            preferred = list(answer.container_responses[0].deviceIDs)
            self.preferred_calls.append((pod, available, preferred, size))
            if len(preferred) == size and set(preferred) <= set(available):
                ids = preferred
        try:
            response = self._call(resource, "Allocate", dp.AllocateRequest(container_requests=[
                dp.ContainerAllocateRequest(devices_ids=ids)]), dp.AllocateResponse)
        except grpc.RpcError as e:
            raise AdmissionError(e.details()) from e
        with self._cond:
            self.pod_devices.setdefault(pod, {}).setdefault(container, {})[resource] = list(ids)
        reply = response.container_responses[0]
        return Grant(ids, preferred, dict(reply.envs), reply)

    def forget(self, pod: str) -> None:
        with self._cond:
            self.pod_devices.pop(pod, None)

