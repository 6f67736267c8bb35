"""A fake NVML: one machine described by a ``gpufleet.io/v1alpha1`` NodePool file (``--nvml fake:MACHINE``).

The machine is the first node the pool renders: the same GPU model, count, MIG layout, NVLinks and UUIDs as
``gpufleet nodes render MACHINE`` prints, because both come from :func:`gpufleet.api.nodepool.expand_node_pool`
and :func:`gpufleet.gpu.sharing.make_gpus`. The pool's ``sharing`` block is the machine's own device-plugin
setting (what ``--config`` overrides).

Faults: append JSON lines to ``MACHINE.events`` while the agent runs::

    {"gpu": 0, "xid": 79}                  # an XID on GPU 0 (the whole GPU)
    {"gpu": 1, "xid": 94, "gi": 2}         # on GPU 1's MIG device of GPU instance 2 (optional "ci" too)

A malformed line is reported (file and line) and skipped; it never stops the agent. The file is read as an
untrusted input (docs/limits.md): opened without blocking and refused unless it is a regular file (a FIFO at that
path would otherwise block the events thread), read at most :data:`EVENTS_CHUNK` bytes at a time from where the
last read stopped (a 2 GB append costs many bounded reads, never one huge one), an incomplete last line carried
to the next read, and each line checked before it is parsed (at most 4,096 characters, UTF-8, a JSON object at
most 20 levels deep whose fields are non-negative integers of at most 18 digits).

Telemetry moves with load: the agent tells the fake how many pods hold each GPU and each MIG device
(``holders``, by UUID), and utilisation, framebuffer use (per MIG instance too), power and temperature follow
it (temperature with some inertia), with a small deterministic jitter so two samples are never identical.
Memory faults show in the ECC and row-remapping counters as NVML would count them: XID 48, 94 or 95 adds a
double-bit ECC error, 63 a row remapped for an uncorrectable error, 64 a failed remapping.
"""

from __future__ import annotations

import json
import logging
import math
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.api.errors import Problems
from gpufleet.api.inventory import inventory_from_json
from gpufleet.api.limits import MAX_DOCUMENT_BYTES, MAX_INT_DIGITS, MAX_JSON_DEPTH
from gpufleet.api.manifests import ManifestBuilder, Manifests
from gpufleet.api.nodepool import expand_node_pool
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION, NodePool
from gpufleet.api.safejson import max_depth
from gpufleet.api.source import InputBudget, load_text, read_file_text
from gpufleet.gpu.catalog import DEFAULT_CATALOG, GpuModel
from gpufleet.gpu.mig import geometry_for
from gpufleet.gpu.sharing import DevicePluginConfig, SharingError, make_gpus
from gpufleet.node.contract import (
    ALL_INSTANCES,
    Gpu,
    GpuMemory,
    GpuSample,
    HolderCounts,
    InstanceSample,
    Machine,
    MigDevice,
    NvmlError,
    ProcessMemory,
    XidEvent,
)

log = logging.getLogger(__name__)

FAKE_DRIVER_VERSION = "550.127.05"
FAKE_CUDA_DRIVER_VERSION = 12040  # CUDA 12.4, what driver 550 ships
EVENTS_SUFFIX = ".events"
MAX_EVENT_LINE = 4096  # characters: an event is a small object; a longer line is skipped, never parsed
# Bytes read from MACHINE.events at a time: memory per read is bounded whatever is appended at once.
EVENTS_CHUNK = 2**20
# A line's bytes held while its newline has not come: 4,096 characters of UTF-8 are at most 16 KiB, so a longer
# partial line is over the limit already and only its length is kept.
_MAX_LINE_BYTES = 4 * MAX_EVENT_LINE
_MAX_EVENT_INT = 10**MAX_INT_DIGITS - 1
# Bad lines reported one by one per read; beyond, one message gives the count and the line numbers (a flood of
# garbage costs a few log lines, not one per line).
MAX_REPORTED_LINES = 100
# A MACHINE file describes one machine (a NodePool, perhaps among others): 3 MiB, the API server's limit on one
# object, is far above any (the examples are under 1 KiB) and keeps a re-read on every change cheap.
MAX_MACHINE_BYTES = MAX_DOCUMENT_BYTES


@dataclass(frozen=True, slots=True)
class FakeMachineSpec:
    """What a MACHINE file describes: the machine and its own device-plugin sharing setting."""

    node_name: str
    machine: Machine
    sharing: DevicePluginConfig
    model: GpuModel


def load_machine_spec(path: str) -> FakeMachineSpec:
    """Read MACHINE; raise :class:`NvmlError` with every problem (file, line, field) when it is not usable.

    Read once, as every file gpufleet takes (:func:`gpufleet.api.source.read_file_text`): opened without blocking,
    a regular file only, at most :data:`MAX_MACHINE_BYTES`, UTF-8; then parsed as manifests are."""
    where = Path(path)
    if where.is_dir() or not os.path.lexists(path):
        what = "is a folder" if where.is_dir() else "no such file"
        raise NvmlError(f"--nvml fake:{path}: {what}; give a YAML file holding one gpufleet.io/v1alpha1 "
                        "NodePool (see examples/)")
    loaded = _load_machine_file(path)
    if loaded.problems.errors:
        raise NvmlError("\n".join(str(p) for p in loaded.problems.errors))
    pools = [p for p in loaded.node_pools if p.gpu is not None]
    if not pools:
        raise NvmlError(f"{path}: holds no NodePool with GPUs; a fake machine is the first node of such a pool")
    pool = pools[0]
    if len(loaded.node_pools) > 1:
        log.warning("%s holds %d NodePools; the fake machine is the first node of %s", path,
                    len(loaded.node_pools), pool.name)
    try:
        return _spec_from_pool(pool)
    except SharingError as e:
        raise NvmlError(f"{path}: NodePool {pool.name}: {e}") from e


def _load_machine_file(path: str) -> Manifests:
    problems = Problems()
    budget = InputBudget(MAX_MACHINE_BYTES, limit="gpufleet's limit on a MACHINE file")
    builder = ManifestBuilder(problems)
    text = read_file_text(path, problems, budget, skip_irregular=False)
    if text is None:
        return builder.out
    load_text(text, path, problems, budget, sink=builder.add)
    return builder.finish()


def _spec_from_pool(pool: NodePool) -> FakeMachineSpec:
    assert pool.gpu is not None
    rendered = expand_node_pool(pool)[0]
    name = rendered["metadata"]["name"]
    inventory = inventory_from_json(json.loads(rendered["metadata"]["annotations"][GPU_INVENTORY_ANNOTATION]))
    assert inventory is not None
    model = DEFAULT_CATALOG.resolve(pool.gpu.model, pool.gpu.memory_mib)
    # Physically, a layout means MIG is on, whatever the device plugin then exposes (migStrategy none shows
    # MIG-enabled GPUs as whole GPUs); make_gpus is what the render uses, so the UUIDs are the render's.
    physical = make_gpus(name, model, pool.gpu.count, pool.gpu.mig_layout)
    assert tuple(g.uuid for g in physical) == inventory.uuids
    geometry = geometry_for(model.key)
    gpus = []
    for g in physical:
        mig = []
        for gi_id, instance in enumerate(g.mig, start=1):
            assert geometry is not None
            profile = geometry.profile(instance.placement.profile)
            mig.append(MigDevice(instance.uuid, profile.name, instance.placement.start, gi_id, 0, profile.memory_mib,
                                 profile.multiprocessors, profile.compute_slices, profile.compute_slices))
        gpus.append(Gpu(g.index, g.uuid, model.nvml_name, model.memory_mib, model.compute_major, model.compute_minor,
                        f"00000000:{0x10 + g.index:02X}:00.0", model.mig_capable, g.mig_enabled, tuple(mig),
                        minor_number=g.index))
    machine = Machine(FAKE_DRIVER_VERSION, FAKE_CUDA_DRIVER_VERSION, tuple(gpus), dict(inventory.nvlinks))
    return FakeMachineSpec(name, machine, pool.sharing, model)


@dataclass(slots=True)
class _Thermal:
    temperature: float = 32.0
    energy_mj: float = 0.0
    last: float = field(default_factory=time.monotonic)
    last_xid: int = 0
    dbe: int = 0
    remapped_uncorrectable: int = 0
    remap_failed: bool = False


_DBE_XIDS = frozenset({48, 94, 95})  # double-bit ECC error; contained and uncontained ECC errors
_ROW_REMAPPED_XID = 63
_ROW_REMAP_FAILED_XID = 64


class _EventsFile:
    """The lines appended to ``MACHINE.events``, read as an untrusted input.

    Each :meth:`read` opens the file without blocking (``O_NONBLOCK``: opening a FIFO nobody writes to would
    otherwise block the events thread) and looks at it with ``fstat`` before reading: anything but a regular file
    is reported once and never read. It then reads at most :data:`EVENTS_CHUNK` bytes from where the last read
    stopped and hands on each complete line once, with its number; the incomplete last line is carried to the
    next read (only its length once it is longer than any line taken). A file that shrinks or is replaced
    (another inode) is read again from its top."""

    def __init__(self, path: Path, on_line: Callable[[int, bytes | None, int], None]) -> None:
        self.path = path
        self.on_line = on_line  # (line number, its bytes or None when too long to hold, its length in bytes)
        self.identity: tuple[int, int] | None = None
        self.offset = 0
        self.line = 0
        self.partial = bytearray()
        self.overlong = 0  # bytes of the current line dropped so far: 0 while the line is held
        self.problem: str | None = None

    def _restart(self, identity: tuple[int, int]) -> None:
        self.identity = identity
        self.offset = self.line = self.overlong = 0
        self.partial.clear()

    def _report(self, problem: str) -> None:
        """Say a problem with the file itself once, not on every read while it lasts."""
        if problem != self.problem:
            self.problem = problem
            log.warning("%s: %s", self.path, problem)

    def read(self) -> bool:
        """Read one bounded chunk; True when more bytes are already waiting after it."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            self.problem = None
            return False
        except OSError as e:
            self._report(f"cannot open it ({e.strerror}); fix: check the file's permissions")
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self._report("not a regular file (a pipe, device or socket): reading it could block or never end, "
                             "so it is not read; fix: make MACHINE.events a regular file and append lines to it")
                return False
            identity = (st.st_dev, st.st_ino)
            if identity != self.identity or st.st_size < self.offset:  # replaced or truncated: from the top
                self._restart(identity)
            size = st.st_size
            data = os.pread(fd, min(EVENTS_CHUNK, size - self.offset), self.offset) if size > self.offset else b""
        except OSError as e:
            self._report(f"cannot read it ({e.strerror})")
            return False
        finally:
            os.close(fd)
        self.problem = None
        if not data:
            return False
        self.offset += len(data)
        self._split(data)
        return self.offset < size

    def _split(self, data: bytes) -> None:
        pieces = data.split(b"\n")
        rest = pieces.pop()  # after the last newline: the start of a line still being written
        for i, piece in enumerate(pieces):
            self.line += 1
            if i == 0 and self.overlong:
                self.on_line(self.line, None, self.overlong + len(piece))
                self.overlong = 0
                continue
            if i == 0 and self.partial:
                piece = bytes(self.partial) + piece
                self.partial.clear()
            self.on_line(self.line, None if len(piece) > _MAX_LINE_BYTES else piece, len(piece))
        if not rest:
            return
        if pieces:  # a new line started in this chunk; the carried one (if any) ended above
            held = 0
        elif self.overlong:
            self.overlong += len(rest)
            return
        else:
            held = len(self.partial)
        if held + len(rest) > _MAX_LINE_BYTES:
            self.overlong = held + len(rest)
            self.partial.clear()
        else:
            self.partial += rest


class FakeNvml:
    """:class:`~gpufleet.node.contract.NvmlBackend` over a MACHINE file and its ``.events`` file."""

    IDLE_W = 60.0

    def __init__(self, path: str, holders: Callable[[], HolderCounts] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._stamp = os.stat(path).st_mtime_ns if os.path.exists(path) else 0
        self.spec = load_machine_spec(path)
        self.events_path = Path(path + EVENTS_SUFFIX)
        self._holders = holders or (lambda: {})
        self._clock = clock
        self._events_file = _EventsFile(self.events_path, self._take_line)
        self._new_events: list[XidEvent] = []
        self._unsaid: tuple[int, int, int] | None = None  # bad lines of this read not said one by one: n, first, last
        self._reported = 0
        self._closed = threading.Event()
        self._thermal = {g.uuid: _Thermal(last=clock()) for g in self.spec.machine.gpus}
        self._samples = 0
        self._lock = threading.Lock()
        # GPU UUID -> its compute processes, as a test sets them (the fake runs none of its own)
        self.processes: dict[str, tuple[ProcessMemory, ...]] = {}
        # Faults already in the file when the agent starts count too (a node that had an XID stays suspect).

    @property
    def sharing(self) -> DevicePluginConfig:
        return self.spec.sharing

    def machine(self) -> Machine:
        """The machine as MACHINE describes it now: editing the file (a new MIG layout) is like mig-parted
        reconfiguring the GPUs under a running agent. A file that no longer parses keeps the last machine."""
        try:
            stamp = os.stat(self.path).st_mtime_ns
        except OSError:
            return self.spec.machine
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                spec = load_machine_spec(self.path)
            except NvmlError as e:
                log.warning("%s changed but cannot be read (%s); keeping the previous machine", self.path, e)
                return self.spec.machine
            with self._lock:
                self.spec = spec
                self._thermal = {g.uuid: self._thermal.get(g.uuid, _Thermal(last=self._clock()))
                                 for g in spec.machine.gpus}
        return self.spec.machine

    # --- telemetry -----------------------------------------------------------------------------------

    def _tdp(self) -> float:
        model = self.spec.model
        return 700.0 if model.compute_major >= 9 else 400.0 if model.compute_major == 8 else 300.0

    def sample(self, gpu: Gpu) -> GpuSample:
        with self._lock:
            self._samples += 1
            pods = max(0, int(self._holders().get(gpu.uuid, 0)))
            jitter = math.sin(self._samples * 1.7 + gpu.index) * 2.0  # bounded, deterministic
            util = 0.0 if pods == 0 else min(100.0, 35.0 + 30.0 * pods + jitter)
            used = _used(gpu, pods)
            power = self.IDLE_W + (self._tdp() - self.IDLE_W) * util / 100.0
            state = self._thermal[gpu.uuid]
            now = self._clock()
            dt = max(0.0, now - state.last)
            state.last = now
            target = 32.0 + 0.5 * util
            # First-order lag with a 20 s time constant: the card warms up and cools down, it does not jump.
            state.temperature += (target - state.temperature) * (1.0 - math.exp(-dt / 20.0))
            state.energy_mj += power * dt * 1000.0
            busy = util / 100.0
            instances = tuple(self._instance(m, max(0, int(self._holders().get(m.uuid, 0))))
                              for m in _one_per_instance(gpu)) if gpu.mig_enabled else ()
            return GpuSample(
                gpu_util=util, mem_copy_util=round(util * 0.4, 1), fb_used_mib=round(used),
                fb_free_mib=round(gpu.memory_mib - used), temperature_c=round(state.temperature, 1),
                power_w=round(power, 1), sm_clock_mhz=210.0 + 1200.0 * busy, mem_clock_mhz=1593.0,
                energy_mj=round(state.energy_mj), last_xid=state.last_xid,
                memory_temp_c=round(state.temperature + 4.0, 1), ecc_sbe_volatile=0.0, ecc_dbe_volatile=state.dbe,
                remapped_rows_correctable=0.0, remapped_rows_uncorrectable=state.remapped_uncorrectable,
                row_remap_failure=1.0 if state.remap_failed else 0.0,
                # As NVML's GPM: a GPU-wide figure, none while MIG splits the GPU.
                gr_engine_active=math.nan if gpu.mig_enabled else round(busy * 0.9, 3),
                instances=instances)

    def memory(self, gpu: Gpu) -> GpuMemory:
        """:meth:`sample`'s memory figures, with none of its other state moved (the thermal clock, the count)."""
        with self._lock:
            pods = max(0, int(self._holders().get(gpu.uuid, 0)))
            used = _used(gpu, pods)
            instances = tuple(self._instance(m, max(0, int(self._holders().get(m.uuid, 0))))
                              for m in _one_per_instance(gpu)) if gpu.mig_enabled else ()
            return GpuMemory(round(used), instances, self.processes.get(gpu.uuid, ()))

    @staticmethod
    def _instance(mig: MigDevice, pods: int) -> InstanceSample:
        used = 1.0 + (mig.memory_mib * 0.3 if pods else 0.0)
        return InstanceSample(mig.gi_id, round(used), round(mig.memory_mib - used))

    # --- faults --------------------------------------------------------------------------------------

    def wait_events(self, timeout: float) -> list[XidEvent]:
        """The events appended since the last call, waiting up to ``timeout`` for some. Each read is one bounded
        chunk; while more bytes wait, the next chunk is read at once, until events come or the time is up."""
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            more = self._read_chunk()
            if self._new_events or self._closed.is_set() or time.monotonic() >= deadline:
                events, self._new_events = self._new_events, []
                return events
            if not more:
                self._closed.wait(min(0.05, max(0.0, deadline - time.monotonic())))

    def _read_chunk(self) -> bool:
        self._reported = 0
        try:
            return self._events_file.read()
        finally:
            self._flush_bad_lines()

    def _bad(self, line: int, message: str, *args: object) -> None:
        """Report one bad line (file and line first), one by one up to :data:`MAX_REPORTED_LINES` per read."""
        if self._reported < MAX_REPORTED_LINES:
            self._reported += 1
            log.warning("%s:%d: " + message, self.events_path, line, *args)
        else:
            n, first, _ = self._unsaid or (0, line, line)
            self._unsaid = (n + 1, first, line)

    def _flush_bad_lines(self) -> None:
        if self._unsaid is not None:
            n, first, last = self._unsaid
            self._unsaid = None
            log.warning("%s: %d more bad lines skipped (lines %d to %d); fix: append one JSON object per line, "
                        "such as {\"gpu\": 0, \"xid\": 79}", self.events_path, n, first, last)

    def _take_line(self, line: int, raw: bytes | None, size: int) -> None:
        event = self._parse(line, raw, size)
        if event is None:
            return
        self._new_events.append(event)
        with self._lock:
            state = self._thermal.get(event.gpu_uuid)
            if state is None:  # the machine changed under the event: no such GPU any more
                return
            state.last_xid = event.xid
            state.dbe += event.xid in _DBE_XIDS
            state.remapped_uncorrectable += event.xid == _ROW_REMAPPED_XID
            state.remap_failed |= event.xid == _ROW_REMAP_FAILED_XID

    def _parse(self, line: int, raw: bytes | None, size: int) -> XidEvent | None:
        if raw is None:
            self._bad(line, "a line of %s bytes, more than an event's %s characters; skipped unparsed", f"{size:,}",
                      f"{MAX_EVENT_LINE:,}")
            return None
        if not raw.strip():
            return None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            self._bad(line, "not UTF-8 (%s at byte %d of the line); skipped; fix: write events as UTF-8 JSON",
                      e.reason, e.start)
            return None
        if len(text) > MAX_EVENT_LINE:
            self._bad(line, "a line of %d characters, more than an event's %d; skipped", len(text), MAX_EVENT_LINE)
            return None
        depth = max_depth(raw)
        if depth > MAX_JSON_DEPTH:
            self._bad(line, "not JSON (nested too deep): %d levels, at most %d (see docs/limits.md); skipped", depth,
                      MAX_JSON_DEPTH)
            return None
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as e:  # RecursionError: the depth check above makes it unreachable
            self._bad(line, "not JSON (%s); write lines such as {\"gpu\": 0, \"xid\": 79}",
                      e if isinstance(e, ValueError) else "nested too deep")
            return None
        if not isinstance(doc, dict):
            self._bad(line, "expected an object such as {\"gpu\": 0, \"xid\": 79}")
            return None
        gpus = self.spec.machine.gpus
        fields: dict[str, int] = {}
        for key in ("gpu", "xid", "gi", "ci"):
            value = doc.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                self._bad(line, "field %s must be a non-negative integer, got %.40r", key, value)
                return None
            if value > _MAX_EVENT_INT:
                self._bad(line, "field %s: at most %d digits (gpufleet's limit on an integer in text; see "
                          "docs/limits.md), got %d digits", key, MAX_INT_DIGITS, len(str(value)))
                return None
            fields[key] = value
        if "gpu" not in fields or "xid" not in fields:
            self._bad(line, "fields gpu and xid are required, e.g. {\"gpu\": 0, \"xid\": 79}")
            return None
        if fields["gpu"] >= len(gpus):
            self._bad(line, "field gpu: the machine has GPUs 0..%d, got %d", len(gpus) - 1, fields["gpu"])
            return None
        return XidEvent(gpus[fields["gpu"]].uuid, fields["xid"], fields.get("gi", ALL_INSTANCES),
                        fields.get("ci", ALL_INSTANCES))

    def close(self) -> None:
        self._closed.set()


def _used(gpu: Gpu, pods: int) -> float:
    """Framebuffer in use: 30 % of the GPU per pod holding it (at most 95 %), and the driver's own context, as
    nvidia-smi shows on an idle GPU."""
    return (0.0 if pods == 0 else min(gpu.memory_mib * 0.95, gpu.memory_mib * 0.3 * pods)) + 1.0


def _one_per_instance(gpu: Gpu) -> list[MigDevice]:
    """The first MIG device of each GPU instance (compute instances of one GPU instance share its memory)."""
    seen: dict[int, MigDevice] = {}
    for m in gpu.mig:
        seen.setdefault(m.gi_id, m)
    return list(seen.values())
