"""gpufleet.sim: the scheduling core on a virtual clock.

Module map:

* :mod:`.model` - SimJob (a workload plus arrival, duration, gang, retries, per-pod utilization and memory),
  FailureModels, SimConfig;
* :mod:`.engine` - the discrete-event engine (:class:`Simulator`, :func:`simulate_jobs`) driving any
  :class:`~gpufleet.scheduling.types.Policy`; :mod:`.events` its clock; :mod:`.holdings` what a placed pod
  holds; :mod:`.stranded` the fragmentation sample;
* :mod:`.records` what a run leaves; :mod:`.series` and :mod:`.metrics` the KPIs computed from it;
* :mod:`.sources` - manifests with ``sim.gpufleet.io/*`` annotations, the WorkloadGenerator, the openb trace;
* :mod:`.policies` policies by name; :mod:`.scenario`, :mod:`.inputs`, :mod:`.casestudy`, :mod:`.runner`
  what to run; :mod:`.claims` and :mod:`.report` how it is told.

(``fragbench`` and ``openb`` belong to the fragmentation benchmark.)
"""

from gpufleet.sim.engine import Simulator, simulate_jobs
from gpufleet.sim.model import FailureModels, PodProfile, SimConfig, SimJob, SimulationError
from gpufleet.sim.records import SimResult

__all__ = ["FailureModels", "PodProfile", "SimConfig", "SimJob", "SimResult", "SimulationError", "Simulator",
           "simulate_jobs"]
