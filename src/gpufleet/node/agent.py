"""``gpufleet node agent``: the node agent's process.

Threads, each with one job:

* the **pod tracker** (an informer on this node's pods) wakes the loop when pods come, go or change;
* the **event thread** waits on NVML's XID events and marks devices Unhealthy per the health policy;
* the **loop** recomputes what the node offers whenever something changed (health, fractional pods, the MIG
  layout it rediscovers every ``rediscover_period``), feeds the device plugins, patches the Node, watches the
  kubelet's socket to register again after a kubelet restart, checks the kubelet's record of allocations, and
  writes on each pod holding a GPU device alone, or sharing one (by its processes, when the agent shares the
  host's PID namespace), the peak GPU memory it was seen to use (:mod:`gpufleet.node.memory_report`);
* the **device plugins** answer the kubelet on their gRPC servers (:mod:`gpufleet.node.deviceplugin`); with
  ``--dra`` there are none, and the loop publishes this node's GPUs as DRA ResourceSlices of NVIDIA's driver
  ``gpu.nvidia.com`` instead (:mod:`gpufleet.node.dra_publisher`);
* the **ops servers** serve ``/metrics`` (dcgm-exporter names) and ``/healthz``/``/readyz``.

A whole GPU that fractional pods use is advertised Unhealthy on its whole-GPU and replica resources, so the
kubelet's accounting stays exact and never hands it out (docs/node-agent.md says why this mechanism).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.api.objects import Pod
from gpufleet.k8s.client import KubeClient
from gpufleet.k8s.errors import KubeError
from gpufleet.k8s.health import Endpoints, OpsServer, Probe
from gpufleet.k8s.parsing import ParseCache
from gpufleet.k8s.resources import PODS
from gpufleet.node.allocation import Allocator
from gpufleet.node.attribution import Attribution, attribute
from gpufleet.node.backends import OpenedBackend
from gpufleet.node.contract import Gpu, GpuSample, HolderCounts, Machine, NvmlError
from gpufleet.node.deviceplugin import DeviceState
from gpufleet.node.discovery import TIMESTAMP_LABEL, Discovery, discover, refresh_inventory
from gpufleet.node.dpconfig import AgentDeviceConfig
from gpufleet.node.dra_publisher import DraPublisher
from gpufleet.node.dra_slices import DRIVER as DRA_DRIVER
from gpufleet.node.dra_slices import devices as dra_devices
from gpufleet.node.health import DeviceHealth, HealthPolicy
from gpufleet.node.memory_report import MemoryReporter, ProcessPods, readings
from gpufleet.node.metrics import AgentMetrics, render_gpu_metrics
from gpufleet.node.plugins import PluginManager
from gpufleet.node.podresources import PodResourcesClient
from gpufleet.node.pods import PodTracker
from gpufleet.node.publisher import NodePublisher

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AgentOptions:
    node_name: str
    device_plugin_dir: str = "/var/lib/kubelet/device-plugins"
    pod_resources_socket: str = "/var/lib/kubelet/pod-resources/kubelet.sock"
    metrics_bind_address: str | None = ":9400"
    health_probe_bind_address: str | None = ":9401"
    inventory_only: bool = False
    health: HealthPolicy = field(default_factory=HealthPolicy)
    rediscover_period: float = 30.0  # MIG layouts change under a running agent (mig-parted)
    loop_period: float = 0.5  # the longest the loop sleeps: kubelet restarts are noticed within it
    publish_retry: float = 2.0
    sync_timeout: float = 10.0  # how long start() waits for the first list of this node's pods
    informer_options: Mapping[str, Any] = field(default_factory=dict)
    # Publish ResourceSlices (driver gpu.nvidia.com) instead of serving device plugins: never both on one node.
    dra: bool = False
    dra_resync_period: float = 60.0  # how often the slices are read back though nothing changed here
    # How often the GPU memory of pods holding a device alone is read, and written on them when their peak grew
    # (gpufleet.node.memory_report); None: never.
    memory_report_period: float | None = 15.0
    # Where the node's processes are seen (their cgroups map a shared GPU's processes to pods: the host's /proc when
    # the agent shares the host's PID namespace)
    proc_root: str = "/proc"


BackendOpener = Callable[[Callable[[], HolderCounts]], OpenedBackend]


class NodeAgent:
    def __init__(self, client: KubeClient, options: AgentOptions, device_config: AgentDeviceConfig | None,
                 open_backend: BackendOpener, *, metrics: AgentMetrics | None = None) -> None:
        self.client = client
        self.options = options
        self.metrics = metrics or AgentMetrics()
        self.tracker = PodTracker(client, options.node_name, **dict(options.informer_options))
        self.pod_resources = PodResourcesClient(options.pod_resources_socket)
        self.allocator = Allocator(self.tracker, self.pod_resources.list, self.metrics)
        self.allocator.on_allocated = self._allocated
        self.publisher = NodePublisher(client, options.node_name)
        self.slices = DraPublisher(client, options.node_name, resync_period=options.dra_resync_period) \
            if options.dra else None
        self.health = DeviceHealth(options.health)
        self._open_backend = open_backend
        self._device_config = device_config
        self.opened: OpenedBackend | None = None
        self.plugins: PluginManager | None = None
        self.discovery: Discovery | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._exit_code = 0
        self._threads: list[threading.Thread] = []
        self._servers: list[OpsServer] = []
        self._published: tuple[dict[str, str], dict[str, str]] | None = None
        self._publish_due = 0.0
        self._labels_at = time.time()
        self._verify_due: float | None = None
        self._loop_alive = time.monotonic()
        self._last_holders: dict[str, int] = {}
        self._holders_due = 0.0
        self._pod_parses = ParseCache()  # this node's pods, parsed once per version (fractions, declared memory)
        self._memory_parses = ParseCache()  # the same, for the memory reports on the loop's thread
        # The DRA devices last computed, and from what (the machine object and the Unhealthy UUIDs).
        self._dra_input: tuple[Machine, frozenset[str]] | None = None
        self._dra_devices: list[dict[str, Any]] = []
        self._dra_published = False
        self._dra_due = 0.0
        self.memory = MemoryReporter(client)
        self._memory_due = 0.0

    # --- start and stop ------------------------------------------------------------------------------

    @property
    def config(self) -> AgentDeviceConfig:
        if self._device_config is not None:
            return self._device_config
        assert self.opened is not None
        return AgentDeviceConfig(sharing=self.opened.sharing)

    def start(self) -> None:
        """Open NVML, discover, start serving; raises NvmlError, DiscoveryError or OSError when it cannot."""
        self.opened = self._open_backend(self._holders)
        log.info("node agent for %s on %s", self.options.node_name, self.opened.description)
        machine = self.opened.backend.machine()
        self.discovery = self._discover(machine)
        self.allocator.set_discovery(self.discovery)
        self.tracker.add_listener(self._wake.set)
        self.tracker.start()
        # Know the node's fractional pods before offering anything: a GPU they use must start out withheld.
        if self.tracker.wait_for_sync(self.options.sync_timeout):
            self.allocator.set_withheld(self.tracker.fraction_holders())
        else:
            log.warning("this node's pods are not listed after %.0fs; serving devices now, GPUs that fractional pods "
                        "use are withheld once the list arrives", self.options.sync_timeout)
        if self.options.dra:
            log.info("DRA mode: this node's GPUs are published as ResourceSlices of %s (pool %s); no device plugin is "
                     "started, since a node must not offer its GPUs both ways (NVIDIA's chart refuses its DRA driver "
                     "and the device plugin on one node)", DRA_DRIVER, self.options.node_name)
        elif not self.options.inventory_only:
            self.plugins = PluginManager(self.options.device_plugin_dir, self.allocator, self.metrics)
            self.plugins.sync(self._device_states(self.discovery))
        self._start_servers()
        for target, name in ((self._events, "xid-events"), (self._loop, "node-agent")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self._wake.set()

    def _start_servers(self) -> None:
        endpoints = Endpoints(healthz=self._healthz, readyz=self._readyz, metrics=self.exposition)
        addresses = [a for a in (self.options.metrics_bind_address, self.options.health_probe_bind_address) if a]
        for address in dict.fromkeys(addresses):
            server = OpsServer(address, endpoints)
            server.start()
            self._servers.append(server)

    def request_stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wait(self, timeout: float | None = None) -> int:
        """Block until the agent stops; its exit code (non-zero when it had to give up)."""
        self._done.wait(timeout)
        return self._exit_code

    def stop(self) -> None:
        self.request_stop()
        for thread in self._threads:
            thread.join(5.0)
        if self.plugins is not None:
            self.plugins.stop()
        if self.slices is not None:
            self._withdraw_slices(self.slices)
        for server in self._servers:
            server.stop()
        self.tracker.stop()
        self.pod_resources.close()
        if self.opened is not None:
            self.opened.backend.close()
        self._done.set()

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self._servers]

    # --- what the node offers ------------------------------------------------------------------------

    def _discover(self, machine: Machine) -> Discovery:
        return discover(machine, self.config, unhealthy_gpus=self.health.unhealthy_gpus(machine),
                        timestamp=self._labels_at)

    def _device_states(self, found: Discovery) -> dict[str, list[DeviceState]]:
        withheld = self.allocator.withheld()
        out: dict[str, list[DeviceState]] = {}
        counts: dict[tuple[str, str], int] = {}
        for resource, devices in found.devices.items():
            states = []
            for d in devices:
                broken = self.health.is_unhealthy(d.mig.uuid if d.mig is not None else d.gpu_uuid) or \
                    self.health.is_unhealthy(d.gpu_uuid)
                # A GPU fractional pods use is withheld from whole-GPU and replica pods (never a MIG device:
                # fractions are only placed on whole-mode GPUs).
                fractions = d.mig is None and d.gpu_uuid in withheld
                if broken or fractions:
                    reason = "xid" if broken else "fractions"
                    counts[(resource, reason)] = counts.get((resource, reason), 0) + 1
                states.append(DeviceState(d.id, not (broken or fractions), d.numa_node))
            out[resource] = states
        self.metrics.unhealthy.clear()
        for (resource, reason), n in counts.items():
            self.metrics.unhealthy.labels(resource, reason).set(n)
        return out

    def _holders(self) -> HolderCounts:
        """Pods per GPU UUID (what the fake backend's telemetry follows), from the last loop's view."""
        return dict(self._last_holders)

    def _count_holders(self) -> dict[str, int]:
        found = self.discovery
        if found is None:
            return {}
        # A device counts for its GPU, and a MIG device for its own instance too (the fake's per-instance memory).
        by_id = {d.id: (d.gpu_uuid, *((d.mig.uuid,) if d.mig is not None else ()))
                 for ds in found.devices.values() for d in ds}
        pods: dict[str, set[str]] = {}
        allocated = self.pod_resources.list() if not self.options.inventory_only else None
        if allocated is not None:
            for pod, resources in allocated.items():
                for ids in resources.values():
                    for i in ids:
                        for uuid in by_id.get(i, ()):
                            pods.setdefault(uuid, set()).add(pod)
        else:
            for view in self.tracker.pods():
                for i in view.intent or ():
                    for uuid in by_id.get(i, ()):
                        pods.setdefault(uuid, set()).add(view.key)
        for uuid, holders in self.tracker.fraction_holders().items():
            pods.setdefault(uuid, set()).update(holders)
        return {uuid: len(p) for uuid, p in pods.items()}

    # --- threads -------------------------------------------------------------------------------------

    def _events(self) -> None:
        assert self.opened is not None
        backend = self.opened.backend
        while not self._stop.is_set():
            try:
                events = backend.wait_events(1.0)
            except NvmlError as e:
                log.error("NVML event wait failed (%s): every device is marked Unhealthy", e)
                if self.discovery is not None and self.health.mark_all(self.discovery.machine, str(e)):
                    self._wake.set()
                self._stop.wait(5.0)
                continue
            except Exception:
                log.exception("NVML event wait failed: every device is marked Unhealthy")
                if self.discovery is not None and self.health.mark_all(self.discovery.machine, "event wait failed"):
                    self._wake.set()
                self._stop.wait(5.0)
                continue
            found = self.discovery
            for event in events:
                changed = self.health.apply(event, found.machine) if found is not None else set()
                effect = "unhealthy" if self.options.health.is_critical(event.xid) else "ignored"
                self.metrics.xid_events.labels(str(event.xid), effect).inc()
                log.warning("XID %d on %s: %s", event.xid, event.gpu_uuid,
                            f"{len(changed)} device(s) now Unhealthy" if changed else
                            ("ignored (an application error)" if effect == "ignored" else "already Unhealthy"),
                            extra={"xid": event.xid, "gpu": event.gpu_uuid})
                if changed:
                    self._wake.set()

    def _loop(self) -> None:
        next_discovery = time.monotonic() + self.options.rediscover_period
        try:
            while not self._stop.is_set():
                self._wake.wait(self.options.loop_period)
                self._wake.clear()
                if self._stop.is_set():
                    break
                self._loop_alive = time.monotonic()
                try:
                    if time.monotonic() >= next_discovery:
                        next_discovery = time.monotonic() + self.options.rediscover_period
                        self._rediscover()
                    self._reconcile()
                except (NvmlError, ValueError) as e:
                    log.error("node agent: %s", e)
                except Exception:
                    log.exception("node agent loop failed; trying again")
        finally:
            self._done.set()

    def _rediscover(self) -> None:
        assert self.opened is not None
        machine = self.opened.backend.machine()
        assert self.discovery is not None
        if machine != self.discovery.machine:
            log.info("the machine changed (MIG layout or GPUs); rediscovering")
            self.discovery = self._discover(machine)
            self.allocator.set_discovery(self.discovery)

    def _reconcile(self) -> None:
        found = self.discovery
        assert found is not None
        if time.monotonic() >= self._holders_due:  # telemetry only: a PodResources call every 2 s is plenty
            self._holders_due = time.monotonic() + 2.0
            self._last_holders = self._count_holders()
        self.allocator.set_withheld(self.tracker.fraction_holders() if self.tracker.synced else {})
        unhealthy = self.health.unhealthy_gpus(found.machine)
        found = refresh_inventory(found, unhealthy)
        self.discovery = found
        self.allocator.set_discovery(found)
        if self.plugins is not None:
            self.plugins.sync(self._device_states(found))
            self.plugins.check()
        if self.slices is not None:
            self._publish_slices(self.slices, found)
        self._publish(found)
        if self._verify_due is not None and time.monotonic() >= self._verify_due:
            self._verify_due = None
            self.allocator.verify()
        period = self.options.memory_report_period
        if period is not None and time.monotonic() >= self._memory_due and self.tracker.synced:
            self._memory_due = time.monotonic() + period
            self._report_memory(found)

    def _publish(self, found: Discovery) -> None:
        labels = dict(found.labels)
        if self._published is not None and TIMESTAMP_LABEL in labels:
            # GFD's timestamp moves only when a label does, so an unchanged node is never patched.
            before = {k: v for k, v in self._published[0].items() if k != TIMESTAMP_LABEL}
            now = {k: v for k, v in labels.items() if k != TIMESTAMP_LABEL}
            labels[TIMESTAMP_LABEL] = self._published[0].get(TIMESTAMP_LABEL, labels[TIMESTAMP_LABEL]) \
                if before == now else str(int(time.time()))
        wanted = (labels, dict(found.annotations))
        if wanted == self._published or time.monotonic() < self._publish_due:
            return
        try:
            self.publisher.publish(*wanted)
        except KubeError as e:
            self.metrics.node_patches.labels("failed").inc()
            self._publish_due = time.monotonic() + self.options.publish_retry
            log.warning("node %s: writing labels and inventory failed (%s); retrying in %.0fs",
                        self.options.node_name, e, self.options.publish_retry)
            return
        self.metrics.node_patches.labels("ok").inc()
        self._published = wanted

    def _publish_slices(self, publisher: DraPublisher, found: Discovery) -> None:
        """The DRA pool follows the machine and its health (where device plugins would be fed)."""
        machine = found.machine
        broken = frozenset(u for g in machine.gpus for u in (g.uuid, *(d.uuid for d in g.mig))
                           if self.health.is_unhealthy(u))
        if self._dra_input is None or self._dra_input[0] is not machine or self._dra_input[1] != broken:
            self._dra_input = (machine, broken)
            self._dra_devices = dra_devices(machine, unhealthy=broken)
        if time.monotonic() < self._dra_due:
            return
        try:
            publisher.sync(self._dra_devices)
        except KubeError as e:
            self._dra_due = time.monotonic() + self.options.publish_retry
            log.warning("node %s: writing ResourceSlices failed (%s); retrying in %.0fs", self.options.node_name, e,
                        self.options.publish_retry)
            return
        self._dra_published = True

    def _withdraw_slices(self, publisher: DraPublisher) -> None:
        try:
            publisher.withdraw()
        except KubeError as e:
            log.warning("node %s: withdrawing its ResourceSlices failed (%s); they stay until the Node is deleted or "
                        "the agent runs again", self.options.node_name, e)

    def _allocated(self) -> None:
        # The kubelet records an allocation right after Allocate returns; check it shortly after.
        self._verify_due = time.monotonic() + 0.2
        self._wake.set()

    # --- endpoints -----------------------------------------------------------------------------------

    def _healthz(self) -> Probe:
        stale = time.monotonic() - self._loop_alive
        alive = all(t.is_alive() for t in self._threads) and not self._done.is_set()
        ok = alive and stale < max(30.0, 10 * self.options.loop_period)
        return Probe(ok, "ok" if ok else f"the agent loop has not run for {stale:.0f}s")

    def _readyz(self) -> Probe:
        problems = []
        if not self.tracker.synced:
            problems.append("pods not listed yet")
        if self._published is None:
            problems.append("node labels not written yet")
        if self.plugins is not None and not self.plugins.registered:
            problems.append("device plugins not registered with the kubelet")
        if self.slices is not None and not self._dra_published:
            problems.append("ResourceSlices not written yet")
        return Probe(not problems, "; ".join(problems) or "ready")

    def exposition(self) -> bytes:
        found = self.discovery
        gpu = b""
        if found is not None and self.opened is not None:
            gpu = render_gpu_metrics(found.machine, self._samples(found), self.options.node_name,
                                     self._attribution(found, self._pod_objects(), self._pod_parses))
        return gpu + self.metrics.exposition()

    def _report_memory(self, found: Discovery) -> None:
        """The pods' GPU memory (gpufleet.node.memory_report), read on the loop's thread with NVML's memory calls
        alone (``NvmlBackend.memory``: a scrape's sample, whose GPM window runs between two scrapes, is not
        touched) and a parse cache of its own (a scrape's runs on a server thread meanwhile)."""
        assert self.opened is not None
        memories = _per_gpu(found, self.opened.backend.memory, "the memory")
        pods = self._pod_objects()
        uids = {str(uid): key for key, obj in pods.items() if (uid := (obj.get("metadata") or {}).get("uid"))}
        seen = readings(self._attribution(found, pods, self._memory_parses), memories,
                        processes=ProcessPods(Path(self.options.proc_root)), uids=uids)
        self.memory.report(seen, pods, time.monotonic())

    def _samples(self, found: Discovery) -> list[tuple[Gpu, GpuSample]]:
        assert self.opened is not None
        return _per_gpu(found, self.opened.backend.sample, "telemetry")

    def _pod_objects(self) -> dict[str, dict[str, Any]]:
        return {PODS.object_key(obj): obj for obj in self.tracker.cache.objects(PODS)}

    def _attribution(self, found: Discovery, raw: dict[str, dict[str, Any]], parses: ParseCache) -> Attribution:
        """Who holds each GPU and MIG instance now (``raw``: this node's pods; ``parses``: the caller thread's
        cache of their parses): the kubelet's PodResources record (asked at every scrape, as dcgm-exporter does)
        and the fractional pods bound here."""

        def pod(key: str) -> Pod | None:
            obj = raw.get(key)
            parsed = parses.one(PODS, key, obj).obj if obj is not None else None
            return parsed if isinstance(parsed, Pod) else None

        replicas: dict[str, int] = {}
        for devices in found.devices.values():
            per_gpu: dict[str, int] = {}
            for d in devices:
                if d.replica is not None and d.mig is None:
                    per_gpu[d.gpu_uuid] = per_gpu.get(d.gpu_uuid, 0) + 1
            for uuid, n in per_gpu.items():
                replicas[uuid] = max(replicas.get(uuid, 0), n)
        parses.forget_except(PODS, raw)
        return attribute(found.machine, self.pod_resources.assignments(), self.tracker.fraction_holders(), pod,
                         replicas)


def _per_gpu(found: Discovery, read: Callable[[Gpu], T], what: str) -> list[tuple[Gpu, T]]:
    """``read`` of each GPU; one that cannot be read is logged and left out, never hiding the others."""
    out: list[tuple[Gpu, T]] = []
    for g in found.machine.gpus:
        try:
            out.append((g, read(g)))
        except Exception as e:
            log.warning("reading %s of GPU %s failed: %s", what, g.uuid, e)
    return out
