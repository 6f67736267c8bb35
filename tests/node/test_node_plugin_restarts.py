"""The plugin manager through a kubelet restart, one step at a time (real gRPC on unix sockets, fake kubelet).

The agent's loop calls ``check()`` every few tens of milliseconds while the kubelet goes down, clears the folder
and comes back; these tests pin the interleavings that once made the agent register twice, the second time
replacing a socket the kubelet had just dialled.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fake_kubelet import FakeKubelet

from gpufleet.node.allocation import Allocator
from gpufleet.node.deviceplugin import DevicePluginServer, DeviceState
from gpufleet.node.metrics import AgentMetrics
from gpufleet.node.plugins import PluginManager
from gpufleet.node.protos import deviceplugin_v1beta1_pb2 as dp

RESOURCES = ("nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb")


class NoPods:
    def pods(self) -> list[object]:
        return []


@contextmanager
def manager_and_kubelet(sockdir: Path) -> Iterator[tuple[PluginManager, FakeKubelet]]:
    plugin_dir = sockdir / "dp"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(plugin_dir, sockdir / "pr.sock")
    kubelet.start()
    metrics = AgentMetrics()
    manager = PluginManager(str(plugin_dir), Allocator(NoPods(), lambda: None, metrics),  # type: ignore[arg-type]
                            metrics, retry_initial=0.0)
    try:
        manager.sync({r: [DeviceState(f"{r[-7:]}-{i}", True)] for r, i in zip(RESOURCES, range(2), strict=True)})
        kubelet.wait_registered(list(RESOURCES))
        yield manager, kubelet
    finally:
        manager.stop()
        kubelet.close()


def registrations(kubelet: FakeKubelet) -> dict[str, int]:
    return {r: sum(reg.resource_name == r for reg in kubelet.registrations) for r in RESOURCES}


def options_answered(kubelet: FakeKubelet) -> None:
    """Every endpoint the kubelet holds answers on the socket it dialled."""
    for resource in RESOURCES:
        endpoint = kubelet.endpoints[resource]
        call = endpoint.channel.unary_unary("/v1beta1.DevicePlugin/GetDevicePluginOptions",
                                            request_serializer=dp.Empty.SerializeToString,
                                            response_deserializer=dp.DevicePluginOptions.FromString)
        assert call(dp.Empty(), timeout=5).get_preferred_allocation_available


def clear_plugin_sockets(kubelet: FakeKubelet) -> None:
    for entry in kubelet.plugin_dir.iterdir():
        if entry.is_socket() and entry.name != "kubelet.sock":
            entry.unlink()


def test_a_kubelet_back_in_the_middle_of_a_check_is_registered_with_once(
        sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with manager_and_kubelet(sockdir) as (manager, kubelet):
        kubelet.stop()
        clear_plugin_sockets(kubelet)
        # The kubelet comes back while the check re-serves the first plugin: after the check began, before it
        # registers.
        start = DevicePluginServer.start

        def kubelet_returns_meanwhile(self: DevicePluginServer) -> None:
            if kubelet._server is None:
                kubelet.socket.unlink(missing_ok=True)
                kubelet.start()
            start(self)

        monkeypatch.setattr(DevicePluginServer, "start", kubelet_returns_meanwhile)
        manager.check()
        assert registrations(kubelet) == {r: 2 for r in RESOURCES}
        manager.check()
        manager.check()
        assert registrations(kubelet) == {r: 2 for r in RESOURCES}, "registered again with the same kubelet"
        assert manager.registered
        options_answered(kubelet)


def test_every_step_of_a_restart_ends_in_one_registration_per_plugin(sockdir: Path) -> None:
    with manager_and_kubelet(sockdir) as (manager, kubelet):
        kubelet.stop()
        manager.check()  # the kubelet is gone
        clear_plugin_sockets(kubelet)
        manager.check()  # plugin sockets gone, no kubelet to register with: retries pending
        assert not manager.registered
        kubelet.socket.unlink(missing_ok=True)
        kubelet.start()
        manager.check()
        manager.check()
        assert registrations(kubelet) == {r: 2 for r in RESOURCES}
        assert manager.registered
        options_answered(kubelet)

