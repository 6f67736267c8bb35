"""The kubelet's PodResources API v1 (``List``): which device IDs each container of each pod was given.

The device plugin cannot know which pod it serves; the kubelet records the answer as soon as a container's
devices are allocated, and ``List`` reads that record. The agent uses it to tell which pods still wait for
devices (no stale locks: the kubelet's own record is the truth) and to verify afterwards that every pod got the
devices the scheduler chose.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import grpc

from gpufleet.node.protos import podresources_v1_pb2 as pr

log = logging.getLogger(__name__)

LIST_METHOD = "/v1.PodResourcesLister/List"

# pod key (namespace/name) -> resource name -> device IDs, every container together
Allocations = dict[str, dict[str, list[str]]]


@dataclass(frozen=True, slots=True)
class Assignment:
    """One device the kubelet gave one container (what dcgm-exporter's pod labels come from)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str


class PodResourcesClient:
    def __init__(self, socket_path: str, timeout: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: grpc.Channel | None = None
        self._lock = threading.Lock()
        self._warned = False

    def _list_call(self) -> grpc.UnaryUnaryMultiCallable[pr.ListPodResourcesRequest, pr.ListPodResourcesResponse]:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
            return self._channel.unary_unary(LIST_METHOD,
                                             request_serializer=pr.ListPodResourcesRequest.SerializeToString,
                                             response_deserializer=pr.ListPodResourcesResponse.FromString)

    def list(self) -> Allocations | None:
        """Every pod's devices (a pod the kubelet lists without devices has none), or None when the kubelet does
        not answer (logged once until it does again)."""
        response = self._list()
        if response is None:
            return None
        out: Allocations = {}
        for pod in response.pod_resources:
            devices = out.setdefault(f"{pod.namespace}/{pod.name}", {})
            for container in pod.containers:
                for d in container.devices:
                    devices.setdefault(d.resource_name, []).extend(d.device_ids)
        return out

    def assignments(self) -> tuple[Assignment, ...] | None:
        """Every device of every container, or None when the kubelet does not answer."""
        response = self._list()
        if response is None:
            return None
        return tuple(Assignment(pod.namespace, pod.name, container.name, d.resource_name, device_id)
                     for pod in response.pod_resources for container in pod.containers for d in container.devices
                     for device_id in d.device_ids)

    def _list(self) -> pr.ListPodResourcesResponse | None:
        try:
            response: pr.ListPodResourcesResponse = self._list_call()(pr.ListPodResourcesRequest(),
                                                                       timeout=self.timeout)
        except grpc.RpcError as e:
            if not self._warned:
                log.warning("PodResources API at %s does not answer (%s): pods are matched to devices without the "
                            "kubelet's record", self.socket_path, e.code() if hasattr(e, "code") else e)
                self._warned = True
            self.close()
            return None
        self._warned = False
        return response

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
                self._channel = None
