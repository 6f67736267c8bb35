"""The set of device plugins the node serves, kept registered with the kubelet.

One server per advertised resource. When the kubelet restarts it deletes every socket in the device-plugin
folder and creates a new ``kubelet.sock``; the manager notices (the socket's identity changed, or a plugin's
own socket vanished), starts fresh servers and registers them again, as NVIDIA's plugin does on its fsnotify
event. A registration the kubelet refuses or does not answer is retried with backoff.

The agent's loop thread calls :meth:`PluginManager.sync` and :meth:`PluginManager.check`; its shutdown calls
:meth:`PluginManager.stop` from another thread, possibly while a check is still replacing a server: one lock
orders them, and nothing is served once the manager is stopped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import grpc

from gpufleet.node.allocation import Allocator
from gpufleet.node.deviceplugin import KUBELET_SOCKET, DevicePluginServer, DeviceState
from gpufleet.node.metrics import AgentMetrics

log = logging.getLogger(__name__)


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_ctime_ns


class PluginManager:
    def __init__(self, plugin_dir: str, allocator: Allocator, metrics: AgentMetrics, *,
                 retry_initial: float = 0.5, retry_max: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.plugin_dir = plugin_dir
        self.allocator = allocator
        self.metrics = metrics
        self.retry_initial, self.retry_max = retry_initial, retry_max
        self.clock = clock
        self.servers: dict[str, DevicePluginServer] = {}
        self._unregistered: dict[str, tuple[float, float]] = {}  # resource -> (next try, current delay)
        # resource -> identity of the kubelet socket it last registered with: a plugin re-registers when the
        # socket's identity moves on, and only then, however the restart and the checks interleave
        self._registered_with: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()
        self._stopped = False

    @property
    def kubelet_socket(self) -> str:
        return str(Path(self.plugin_dir) / KUBELET_SOCKET)

    def sync(self, devices: Mapping[str, Sequence[DeviceState]]) -> None:
        """Serve exactly these resources with these device lists."""
        with self._lock:
            if not self._stopped:
                self._sync(devices)

    def _sync(self, devices: Mapping[str, Sequence[DeviceState]]) -> None:
        for resource in sorted(set(self.servers) - set(devices)):
            log.info("%s is no longer offered: stopping its device plugin", resource)
            self.servers.pop(resource).stop()
            self._unregistered.pop(resource, None)
            self._registered_with.pop(resource, None)
        for resource, states in sorted(devices.items()):
            server = self.servers.get(resource)
            if server is None:
                server = DevicePluginServer(resource, self.plugin_dir, self.allocator)
                server.set_devices(states)
                server.start()
                self.servers[resource] = server
                self._register(resource)
            else:
                server.set_devices(states)

    def check(self) -> None:
        """Re-register after a kubelet restart, restart plugins whose socket vanished, retry registrations."""
        with self._lock:
            if not self._stopped:
                self._check()

    def _check(self) -> None:
        kubelet = _identity(self.kubelet_socket)
        for resource, server in sorted(self.servers.items()):
            registered_with = self._registered_with.get(resource)
            restarted = kubelet is not None and registered_with is not None and registered_with != kubelet
            if restarted or not server.socket_intact():
                log.info("%s: %s; serving a fresh socket and registering again", resource,
                         "the kubelet restarted" if restarted else "the plugin socket was removed")
                states = server.devices
                server.stop(grace=0.2)
                fresh = DevicePluginServer(resource, self.plugin_dir, self.allocator)
                fresh.set_devices(states)
                fresh.start()
                self.servers[resource] = fresh
                self._register(resource)
        now = self.clock()
        for resource, (due, _delay) in sorted(self._unregistered.items()):
            if now >= due and resource in self.servers:
                self._register(resource)

    def _register(self, resource: str) -> None:
        try:
            # Read before registering: a kubelet restarting in between makes one registration too many at the next
            # check, never one too few.
            kubelet = _identity(self.kubelet_socket)
            if kubelet is None:
                raise FileNotFoundError(f"{self.kubelet_socket} does not exist (is the kubelet running?)")
            self.servers[resource].register()
        except (grpc.RpcError, FileNotFoundError) as e:
            _, delay = self._unregistered.get(resource, (0.0, self.retry_initial / 2))
            delay = min(self.retry_max, delay * 2)
            self._unregistered[resource] = (self.clock() + delay, delay)
            # The retries own it now: a kubelet it no longer reaches is no restart to answer at every check.
            self._registered_with.pop(resource, None)
            self.metrics.registrations.labels(resource, "failed").inc()
            code = e.code() if isinstance(e, grpc.RpcError) and hasattr(e, "code") else e
            log.warning("%s: registration with the kubelet at %s failed (%s); retrying in %.1fs", resource,
                        self.kubelet_socket, code, delay)
            return
        self._unregistered.pop(resource, None)
        self._registered_with[resource] = kubelet
        self.metrics.registrations.labels(resource, "ok").inc()
        log.info("%s: registered with the kubelet (%d devices)", resource, len(self.servers[resource].devices))

    @property
    def registered(self) -> bool:
        return bool(self.servers) and not self._unregistered

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            for server in self.servers.values():
                server.stop()
            self.servers.clear()
            self._unregistered.clear()
            self._registered_with.clear()
