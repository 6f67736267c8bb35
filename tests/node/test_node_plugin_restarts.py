"""The plugin manager through a kubelet restart, one step at a time (real gRPC on unix sockets, fake kubelet).

The agent's loop calls ``check()`` every few tens of milliseconds while the kubelet goes down, clears the folder
and comes back. These tests pin what a restart must end in, however the steps interleave: one new registration
per plugin, with its socket answering (the kubelet coming back during a check once made the agent register
twice, the second time replacing a socket the kubelet had just dialled); a kubelet that refuses registrations is
retried with backoff, not answered with a fresh server at every check; nothing is served after ``stop()``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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
def manager_and_kubelet(sockdir: Path, clock: Callable[[], float] = time.monotonic,
                        retry_initial: float = 0.0) -> Iterator[tuple[PluginManager, FakeKubelet]]:
    plugin_dir = sockdir / "dp"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(plugin_dir, sockdir / "pr.sock")
    kubelet.start()
    metrics = AgentMetrics()
    manager = PluginManager(str(plugin_dir), Allocator(NoPods(), lambda: None, metrics),  # type: ignore[arg-type]
                            metrics, retry_initial=retry_initial, clock=clock)
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
            if not kubelet.running:
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



def test_a_kubelet_refusing_registrations_is_retried_with_backoff(
        sockdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    with manager_and_kubelet(sockdir, clock=lambda: now[0], retry_initial=1.0) as (manager, kubelet):
        kubelet.refusing = True
        kubelet.restart()
        starts: list[str] = []
        start = DevicePluginServer.start

        def counted(self: DevicePluginServer) -> None:
            starts.append(self.resource)
            start(self)

        monkeypatch.setattr(DevicePluginServer, "start", counted)
        for _ in range(4):  # the clock stands still: no retry is due yet
            manager.check()
        assert sorted(starts) == sorted(RESOURCES), "one fresh server per plugin, not one per check"
        assert registrations(kubelet) == {r: 1 for r in RESOURCES}  # the first, before the restart
        assert not manager.registered
        kubelet.refusing = False
        now[0] += 1.0  # the first retry is due
        manager.check()
        assert registrations(kubelet) == {r: 2 for r in RESOURCES}
        assert manager.registered and sorted(starts) == sorted(RESOURCES)
        options_answered(kubelet)


def test_nothing_is_served_after_stop(sockdir: Path) -> None:
    with manager_and_kubelet(sockdir) as (manager, kubelet):
        manager.stop()
        clear_plugin_sockets(kubelet)
        manager.check()
        manager.sync({RESOURCES[0]: [DeviceState("x", True)]})
        assert not manager.servers
        assert not [p for p in kubelet.plugin_dir.iterdir() if p.name != "kubelet.sock"]
