"""What the simulator is given: jobs (a workload plus what only a simulation needs to know) and settings.

A :class:`SimJob` wraps a :class:`~gpufleet.cluster.workloads.Workload` with its arrival, how long it runs
once it runs, whether its pods are a gang that must all run before any work happens, how many failures it
survives, and per pod how busy it keeps what it holds and how much GPU memory it uses. Every source
(manifests, the synthetic generator, the openb trace) produces SimJobs; the engine knows nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpufleet.cluster.workloads import Workload

# Annotation keys a manifest uses to tell the simulator what the API objects do not say.
ARRIVAL_ANNOTATION = "sim.gpufleet.io/arrival"  # offset from the start ("2h30m"); else creationTimestamp
DURATION_ANNOTATION = "sim.gpufleet.io/duration"  # run time once every pod runs ("6h")
UTILIZATION_ANNOTATION = "sim.gpufleet.io/gpu-utilization"  # busy share of what the pod holds (DCGM GPU_UTIL)
DEMAND_ANNOTATION = "sim.gpufleet.io/gpu-demand"  # busy whole-GPU equivalents of the pod, whatever it holds
MEMORY_ANNOTATION = "sim.gpufleet.io/gpu-memory-used"  # GPU memory used on each device it holds ("20Gi")
GANG_ANNOTATION = "sim.gpufleet.io/gang"  # "true"/"false"; default: true for workloads of several pods
BACKOFF_ANNOTATION = "sim.gpufleet.io/backoff-limit"  # retries for Pods and pod groups (Jobs: backoffLimit)
CLASS_LABEL = "sim.gpufleet.io/class"  # workload class, for per-class figures
ROLE_LABEL = "sim.gpufleet.io/role"  # training | inference | interactive: the inference-cost KPI reads it


# Roles whose duration is how long they are there, not how much they compute (SimJob.work_bound).
PRESENCE_ROLES = frozenset({"inference", "interactive"})


class SimulationError(RuntimeError):
    """The simulation cannot go on: a policy decided something impossible, or the input is unusable."""


@dataclass(frozen=True, slots=True)
class PodProfile:
    """How one pod behaves once it runs.

    ``gpu_demand`` (busy whole-GPU equivalents) wins over ``gpu_util`` (busy share of what the pod holds);
    with neither the engine's default utilization applies. ``memory_mib`` is per device held; None means
    unknown, and an unknown use never causes an OOM.
    """

    gpu_util: float | None = None
    gpu_demand: float | None = None
    memory_mib: int | None = None


DEFAULT_PROFILE = PodProfile()


@dataclass(slots=True)
class SimJob:
    workload: Workload
    arrival: float  # seconds from the start of the simulation
    duration: float | None  # None: runs until the simulation ends (a service)
    gang: bool
    backoff_limit: int
    profiles: Mapping[str, PodProfile] = field(default_factory=dict)  # by pod key; absent = default profile
    default_profile: PodProfile = DEFAULT_PROFILE
    team: str = ""
    klass: str | None = None
    role: str | None = None
    # Per attempt (0 first): the fraction of its run after which it fails on its own (an application error,
    # cause "Error"), None when it does not. Drawn by the job's source (calibration's failure rate); a job that
    # runs until the end (no duration) never crashes.
    crashes: tuple[float | None, ...] = ()

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def queue(self) -> str:
        return self.workload.queue or "(none)"

    def profile(self, pod: str) -> PodProfile:
        return self.profiles.get(pod, self.default_profile)

    @property
    def work_bound(self) -> bool:
        """Whether its duration is work (a batch job: slowed down, it takes longer) rather than presence (a
        service or a notebook, which stays as long whatever share of a GPU it gets)."""
        return self.role not in PRESENCE_ROLES


@dataclass(frozen=True, slots=True)
class FailureModels:
    """The failure models; each can be switched off.

    * rendezvous: a gang whose pods are not all running ``rendezvous_timeout_s`` after its first pod started
      fails (torch elastic gives up; its held GPUs were idle all along);
    * oom: ``memory_ramp_s`` after a pod starts it reaches its GPU memory use; if that exceeds its device (a
      whole GPU, a MIG instance) or, on a software-shared GPU (time-slice replicas, fractions), what the
      co-tenants already use plus its own exceeds the GPU's memory, it fails with OOMKilled;
    * retries: a failed job is resubmitted up to its backoff limit, after the Job controller's backoff
      (``retry_backoff_s`` doubling per failure, at most ``retry_backoff_max_s``);
    * replace_pods (off unless asked for): a pod that fails in a job whose pods work apart (not a gang) and whose
      controller owns its pods (a Job, a StatefulSet: gpufleet.scheduling.kueue.late_members) is replaced, after
      the same backoff, and the job runs on, admitted, as the Job controller does: the replacement joins the
      admitted workload (the policy's ``join``, next to its pods with its flavors) and waits there for room; the
      job fails for good once its failures pass its backoff limit. Off, a failed pod ends the attempt and the
      whole job is resubmitted. Policies that do not take late members (kube-default) are never asked.
    """

    rendezvous: bool = True
    rendezvous_timeout_s: float = 1800.0
    oom: bool = True
    memory_ramp_s: float = 60.0
    retries: bool = True
    retry_backoff_s: float = 10.0
    retry_backoff_max_s: float = 360.0
    replace_pods: bool = False

    def retry_delay(self, failures: int) -> float:
        return float(min(self.retry_backoff_s * 2.0 ** max(failures - 1, 0), self.retry_backoff_max_s))


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Engine settings.

    ``horizon_s`` closes the measurement window [0, horizon]: jobs arriving later are not simulated, and
    allocation, utilization, GPU-hours and cost are integrated over the window. The run goes on up to
    ``drain_s`` past the horizon so that jobs started inside it can finish (success rates and makespan need
    their end). Without a horizon the run lasts until nothing is left to do and the window is the run.
    """

    horizon_s: float | None = None
    drain_s: float = 0.0
    tick_s: float = 300.0  # periodic cycle while work is pending (kube-scheduler's unschedulable flush)
    pod_start_s: float = 0.0  # from binding to running (image pull, container start)
    default_gpu_util: float = 1.0  # a pod that says nothing keeps what it holds busy
    samples: int = 500  # fragmentation samples over the window
    failures: FailureModels = FailureModels()
    max_cycles_per_instant: int = 10_000
