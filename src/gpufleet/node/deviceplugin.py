"""One kubelet device plugin (API ``v1beta1``) for one resource: a gRPC server on a unix socket.

The services are wired with grpcio's generic handlers over the generated messages (no generated service
code), so the method paths are exactly the kubelet's (``/v1beta1.DevicePlugin/Allocate``...). ListAndWatch
streams the whole device list again whenever any device's health changes, as the kubelet expects.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc

from gpufleet.node.allocation import AllocationRefused, Allocator
from gpufleet.node.protos import deviceplugin_v1beta1_pb2 as dp

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"
# how long past the grace a stopping server may take to end its calls and close its socket
STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class DeviceState:
    id: str
    healthy: bool
    numa_node: int | None = None

    def message(self) -> dp.Device:
        topology = dp.TopologyInfo(nodes=[dp.NUMANode(ID=self.numa_node)]) if self.numa_node is not None else None
        return dp.Device(ID=self.id, health=HEALTHY if self.healthy else UNHEALTHY, topology=topology)


def socket_name(resource: str) -> str:
    """``gpufleet-gpu.sock``, ``gpufleet-mig-1g.10gb.sock``: NVIDIA's naming with our prefix, so both plugins'
    sockets can sit in one folder while a cluster moves from one to the other."""
    return f"gpufleet-{resource.rsplit('/', 1)[-1]}.sock"


class DevicePluginServer:
    """Serves ``resource`` on ``<plugin_dir>/<socket_name>`` and registers it with the kubelet."""

    def __init__(self, resource: str, plugin_dir: str, allocator: Allocator, *, workers: int = 8) -> None:
        self.resource = resource
        self.plugin_dir = plugin_dir
        self.socket_path = str(Path(plugin_dir) / socket_name(resource))
        self.allocator = allocator
        self.workers = workers
        self._cond = threading.Condition()
        self._devices: tuple[DeviceState, ...] = ()
        self._version = 0
        self._stopped = False
        self._server: grpc.Server | None = None
        self._socket_inode: int | None = None

    # --- device list ---------------------------------------------------------------------------------

    def set_devices(self, devices: Sequence[DeviceState]) -> None:
        with self._cond:
            new = tuple(devices)
            if new != self._devices:
                self._devices = new
                self._version += 1
                self._cond.notify_all()

    @property
    def devices(self) -> tuple[DeviceState, ...]:
        with self._cond:
            return self._devices

    # --- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        if len(self.socket_path.encode()) > 107:
            raise OSError(f"device plugin socket path {self.socket_path} is longer than a unix socket allows "
                          "(107 bytes); use a shorter --device-plugin-dir")
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)  # a previous run's socket: nobody listens on it any more
        server = grpc.server(ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"dp-{self.resource}"))
        server.add_generic_rpc_handlers((self._handlers(),))
        server.add_insecure_port(f"unix://{self.socket_path}")
        with self._cond:
            self._stopped = False
        server.start()
        self._server = server
        self._socket_inode = os.stat(self.socket_path).st_ino

    def socket_intact(self) -> bool:
        """False once the socket file was removed or replaced (the kubelet clears the folder when it starts)."""
        try:
            return os.stat(self.socket_path).st_ino == self._socket_inode
        except OSError:
            return False

    def register(self, timeout: float = 5.0) -> None:
        """Register with the kubelet at ``<plugin_dir>/kubelet.sock``; raises grpc.RpcError when it refuses."""
        kubelet = str(Path(self.plugin_dir) / KUBELET_SOCKET)
        with grpc.insecure_channel(f"unix://{kubelet}") as channel:
            register = channel.unary_unary("/v1beta1.Registration/Register",
                                           request_serializer=dp.RegisterRequest.SerializeToString,
                                           response_deserializer=dp.Empty.FromString)
            register(dp.RegisterRequest(version=API_VERSION, endpoint=socket_name(self.resource),
                                        resource_name=self.resource, options=self._options()),
                     timeout=timeout, wait_for_ready=True)

    def stop(self, grace: float = 1.0) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._server is not None:
            # gRPC's teardown unlinks whatever unix socket then sits at the path, so a fresh server bound there
            # before the old one finished would lose its socket: wait for the end, not only for the grace
            if not self._server.stop(grace).wait(grace + STOP_TIMEOUT_S):
                log.warning("%s: the old device plugin server did not stop within %.0fs; its teardown may remove "
                            "the next server's socket (the agent serves a fresh one when it sees that)",
                            self.resource, grace + STOP_TIMEOUT_S)
            self._server = None
        if self.socket_intact():
            with contextlib.suppress(OSError):
                os.unlink(self.socket_path)

    # --- the service ---------------------------------------------------------------------------------

    @staticmethod
    def _options() -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def _handlers(self) -> grpc.GenericRpcHandler[object, object]:
        return grpc.method_handlers_generic_handler("v1beta1.DevicePlugin", {
            "GetDevicePluginOptions": grpc.unary_unary_rpc_method_handler(
                self.get_options, request_deserializer=dp.Empty.FromString,
                response_serializer=dp.DevicePluginOptions.SerializeToString),
            "ListAndWatch": grpc.unary_stream_rpc_method_handler(
                self.list_and_watch, request_deserializer=dp.Empty.FromString,
                response_serializer=dp.ListAndWatchResponse.SerializeToString),
            "GetPreferredAllocation": grpc.unary_unary_rpc_method_handler(
                self.get_preferred_allocation, request_deserializer=dp.PreferredAllocationRequest.FromString,
                response_serializer=dp.PreferredAllocationResponse.SerializeToString),
            "Allocate": grpc.unary_unary_rpc_method_handler(
                self.allocate, request_deserializer=dp.AllocateRequest.FromString,
                response_serializer=dp.AllocateResponse.SerializeToString),
            "PreStartContainer": grpc.unary_unary_rpc_method_handler(
                self.pre_start_container, request_deserializer=dp.PreStartContainerRequest.FromString,
                response_serializer=dp.PreStartContainerResponse.SerializeToString),
        })

    def get_options(self, request: dp.Empty, context: grpc.ServicerContext) -> dp.DevicePluginOptions:
        return self._options()

    def list_and_watch(self, request: dp.Empty, context: grpc.ServicerContext) -> Iterator[dp.ListAndWatchResponse]:
        seen = -1

        def news() -> bool:
            return self._stopped or self._version != seen

        while context.is_active():
            with self._cond:
                self._cond.wait_for(news, timeout=1.0)
                if self._stopped:
                    return
                if self._version == seen:
                    continue
                seen, devices = self._version, self._devices
            yield dp.ListAndWatchResponse(devices=[d.message() for d in devices])

    def get_preferred_allocation(self, request: dp.PreferredAllocationRequest,
                                 context: grpc.ServicerContext) -> dp.PreferredAllocationResponse:
        answers = []
        for c in request.container_requests:
            started = time.perf_counter()
            ids = self.allocator.preferred(self.resource, list(c.available_deviceIDs), list(c.must_include_deviceIDs),
                                           int(c.allocation_size))
            log.debug("%s: GetPreferredAllocation size %d -> %s (%.1f ms)", self.resource, c.allocation_size,
                      ids, 1000 * (time.perf_counter() - started))
            answers.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=answers)

    def allocate(self, request: dp.AllocateRequest, context: grpc.ServicerContext) -> dp.AllocateResponse:
        responses = []
        for c in request.container_requests:
            try:
                answer = self.allocator.allocate(self.resource, list(c.devices_ids))
            except AllocationRefused as e:
                log.warning("%s: Allocate of %s refused: %s", self.resource, ",".join(c.devices_ids), e)
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))
            responses.append(dp.ContainerAllocateResponse(
                envs=answer.envs, annotations=answer.annotations,
                mounts=[dp.Mount(container_path=c_path, host_path=h_path, read_only=True)
                        for c_path, h_path in answer.mounts],
                cdi_devices=[dp.CDIDevice(name=n) for n in answer.cdi_devices]))
        return dp.AllocateResponse(container_responses=responses)

    def pre_start_container(self, request: dp.PreStartContainerRequest,
                            context: grpc.ServicerContext) -> dp.PreStartContainerResponse:
        return dp.PreStartContainerResponse()
