"""Which devices a class of the demand may be offered, and at what risk: the rules the search obeys.

For a class and one kind of device (a whole GPU of a model, a replica of a GPU time-sliced ``r`` ways, a MIG
instance of a profile), :func:`device_fit` gives the share of its pods that would run out of GPU memory there,
how much longer its work takes there, and how much of the device one pod takes; or ``None`` with the reason it
is not offered:

* a pod of several devices keeps whole GPUs, on nodes with that many GPUs; a fractional pod keeps a fraction
  of a whole GPU (KAI's semantics: it says how much it takes);
* a one-device pod may move between whole GPUs, MIG instances and replicas, when its GPU memory use is known
  (the simulator's ``sim.gpufleet.io/gpu-memory-used``): an unknown use would make every device look safe;
* a MIG instance holds the pod's memory alone; its compute is its slices over the GPU's (3/7 for a 3g
  instance), and work that needs more takes longer there, as the simulator runs it;
* time-slicing shares the GPU's memory: the risk is that ``r`` pods of the class together use more than the
  GPU has (a deterministic Monte Carlo of the class's own samples). The simulator slows contended work down
  (sim/contention.py), but the search's program prices no such slowdown, so a class is offered ``r`` replicas
  only if its busy share at the 90th percentile fits in ``1/r`` of the GPU;
* a device whose risk is above :data:`RISK_LIMIT` is not offered, nor are replicas that would contend, unless
  it is the device the class asks for now, in a configuration its pool has now: keeping what is there is
  always allowed (its risk is still priced by the program).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from gpufleet.advise.contract import NodeConfig
from gpufleet.advise.demand import DemandClass
from gpufleet.cluster.devices import fraction_need
from gpufleet.gpu.catalog import GpuModel
from gpufleet.gpu.constants import GPU, MILLI, SHARED_GPU
from gpufleet.gpu.mig import geometry_for, profile_from_resource_name

RISK_LIMIT = 0.05  # the share of a class's pods that may run out of memory on a device it is offered
BUSY_QUANTILE = 90.0  # time-slicing: the busy share that must fit in 1/replicas of the GPU
SAMPLES = 2000  # Monte Carlo draws of co-tenants for the time-slicing risk


@dataclass(frozen=True, slots=True)
class DeviceFit:
    risk: float  # share of pods that would run out of GPU memory
    stretch: float  # mean factor by which work takes longer
    size: float  # how much of one device a pod takes (1, or its fraction of a whole GPU)


@dataclass(frozen=True, slots=True)
class NotOffered:
    reason: str


def device_fit(c: DemandClass, model: GpuModel, gpus_per_node: int, config: NodeConfig,
               resource: str, *, now: bool = False) -> DeviceFit | NotOffered:
    """How a pod of class ``c`` fares on one device ``resource`` of a ``model`` GPU under ``config`` (module
    doc); ``now``: the pool has this configuration now."""
    if not c.accepts(model.key):
        return NotOffered(f"{c.name} accepts only {', '.join(c.models)}")
    given = resource == c.resource and now  # what it has now is always allowed
    if c.form.kind == "fraction":
        if resource != GPU:
            return NotOffered("a fractional pod takes a share of a whole GPU")
        # What a pod takes of this model's GPU: its thousandths, or the share its declared memory is of the GPU's,
        # whichever is larger (cluster.devices.fraction_need, as the placement charges it).
        shares = [fraction_need(m, c.form.memory_mib, model.memory_mib)[0] for m in (c.milli or [c.form.milli])]
        size = float(np.mean(shares)) / MILLI
        if size <= 0:
            return NotOffered(f"{c.name} declares GPU memory but no share, and {model.key}'s memory is not known: "
                              "its share of that GPU cannot be told")
        if size > 1:
            return NotOffered(f"{c.name} declares more GPU memory than a {model.key} has")
        return DeviceFit(0.0, 1.0, size)
    if not c.single_device:
        if resource != c.resource or (resource == GPU and gpus_per_node < c.count):
            return NotOffered(f"a pod of {c.count} devices keeps {c.resource}, on a node with as many")
        return DeviceFit(_over(c, model.memory_mib), 1.0, 1.0)
    if resource == GPU:
        return _checked(c, DeviceFit(_over(c, model.memory_mib), 1.0, 1.0), given)
    if not c.memory_known and resource != c.resource:
        return NotOffered(f"{c.name}'s GPU memory use is not known (sim.gpufleet.io/gpu-memory-used): no device "
                          "smaller than a whole GPU can be judged safe for it")
    if resource == SHARED_GPU:
        r = config.replicas
        busy = float(np.percentile(c.need, BUSY_QUANTILE)) if c.need else 1.0
        if busy * r > 1.0 + 1e-9 and not given:
            return NotOffered(f"{c.name} is busy {busy:.0%} of a GPU at its {BUSY_QUANTILE:.0f}th percentile: "
                              f"{r} replicas would contend, a slowdown the search does not price")
        return _checked(c, DeviceFit(_shared_risk(c, model.memory_mib, r), 1.0, 1.0), given)
    profile = profile_from_resource_name(resource)
    geometry = geometry_for(model.key)
    if profile is None or geometry is None or not geometry.has_profile(profile):
        return NotOffered(f"{model.key} has no device {resource}")
    p = geometry.profile(profile)
    compute = p.compute_slices / geometry.compute_slices
    needs = np.array(c.need or [1.0])
    stretch = float(np.mean(np.maximum(1.0, needs / compute)))
    return _checked(c, DeviceFit(_over(c, p.memory_mib), stretch, 1.0), given)


def _checked(c: DemandClass, fit: DeviceFit, given: bool) -> DeviceFit | NotOffered:
    if fit.risk > RISK_LIMIT and not given:
        return NotOffered(f"{fit.risk:.0%} of {c.name}'s pods would run out of GPU memory there")
    return fit


def _over(c: DemandClass, memory_mib: int) -> float:
    """The share of the class's pods whose memory use exceeds ``memory_mib`` (0 when unknown)."""
    if not c.memory_mib or memory_mib <= 0:
        return 0.0
    return float(np.mean(np.array(c.memory_mib) > memory_mib))


def _shared_risk(c: DemandClass, memory_mib: int, replicas: int) -> float:
    """The share of pods that would find the GPU's memory full: ``replicas`` pods of the class together."""
    if not c.memory_mib or memory_mib <= 0:
        return 0.0
    rng = np.random.default_rng(zlib.crc32(f"{c.namespace}/{c.name}/{replicas}".encode()))
    draws = rng.choice(np.array(c.memory_mib, dtype=np.float64), size=(SAMPLES, replicas))
    return float(np.mean(draws.sum(axis=1) > memory_mib))
