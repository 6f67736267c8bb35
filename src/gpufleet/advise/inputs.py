"""What ``gpufleet advise`` reads: a cluster and a demand, from files or the embedded case study.

* no files: the guide's case study, its hand-made configuration (MIG on the production A100s, time-slicing on
  the dev L40S, Kueue quotas) and its workload in the *after* forms that configuration asks for;
* a before/after study (a WorkloadGenerator with ``before``/``after`` demand forms): its *after* side, the
  cluster as written;
* otherwise any mix ``gpufleet simulate`` reads: NodePools or Nodes (a snapshot), Kueue objects, workload
  manifests, WorkloadGenerators, openb node and pod CSVs. NVIDIA's ConfigMaps and ClusterPolicy in the input
  (a snapshot of a GPU Operator cluster) give nodes without gpufleet's inventory the MIG layouts and replicas
  they describe, as the manifest loader reads them for every command (``gpufleet.api.nvidia_config``); the
  advisor's own files replace them in its proposals.

The demand is run under the ``gpufleet`` policy, seeded, over the generators' window (else the jobs' own).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from gpufleet.api.errors import Problems
from gpufleet.api.manifests import Manifests
from gpufleet.api.source import Document, load_text
from gpufleet.sim import casestudy
from gpufleet.sim.inputs import load_inputs
from gpufleet.sim.model import SimConfig, SimJob, SimulationError
from gpufleet.sim.runner import no_nodes_error, parse_duration_option
from gpufleet.sim.sources.generator import is_generator

POLICY = "gpufleet"
NVIDIA_KINDS = {("v1", "ConfigMap"), ("nvidia.com/v1", "ClusterPolicy")}


@dataclass(slots=True)
class AdviseInput:
    title: str
    docs: list[Document]  # the input's documents other than its jobs (cluster, queues, NVIDIA's configuration)
    manifests: Manifests  # the given cluster and queues, as the simulator reads them
    jobs: list[SimJob]  # the demand, in the forms it asks now
    config: SimConfig
    seed: int
    policy: str = POLICY
    notes: list[str] = field(default_factory=list)
    generators: list[Document] = field(default_factory=list)  # the WorkloadGenerator documents, as written
    scenario: str = "default"  # the demand forms the generators were drawn in

    @property
    def window_s(self) -> float:
        if self.config.horizon_s is not None:
            return self.config.horizon_s
        ends = [j.arrival + (j.duration or 0.0) for j in self.jobs]
        return max([1.0, *ends])


def read_input(files: Sequence[str], *, seed: int | None = None, duration: str | None = None,
               strict: bool = False) -> AdviseInput:
    """The cluster and demand of ``files`` (module doc); :class:`SimulationError` when the input has problems."""
    duration_s = parse_duration_option(duration)
    if not files:
        used = seed if seed is not None else casestudy.default_seed()
        sc = casestudy.scenario("after", POLICY, seed=used, duration_s=duration_s)
        generators = load_text(casestudy.read_text("workload.yaml"), "casestudy/workload.yaml", Problems())
        return AdviseInput("the case study's hand-made configuration", casestudy.embedded_documents(),
                           sc.manifests, sc.jobs, sc.config, used, generators=generators, scenario="after")
    if "-" in files:
        raise SimulationError("gpufleet advise reads its input twice (to judge each proposal): give files, not stdin")
    inputs = load_inputs(files, scenario="after", seed=seed, duration_s=duration_s, strict=strict)
    if inputs.problems:
        raise SimulationError("the input has problems:\n" + "\n".join(inputs.problems))
    docs, specs = inputs.given_documents(), inputs.generators
    generators = [d for d in inputs.documents if is_generator(d.data)]
    if casestudy.is_study(specs):
        used = seed if seed is not None else specs[0].seed
        [after] = casestudy.study(docs, specs, seed=used, duration_s=duration_s, only="after")
        notes = list(inputs.notes)
        return AdviseInput(f"{', '.join(files)} (the after side of its study)", docs, after.manifests, after.jobs,
                           after.config, used, notes=notes, generators=generators, scenario="after")
    if not inputs.manifests.nodes:
        raise no_nodes_error(inputs.notes)
    if not inputs.jobs:
        raise SimulationError("no demand in the input: give workload manifests, a WorkloadGenerator or an openb "
                              "pod list")
    notes = list(inputs.notes)
    horizon = duration_s if duration_s is not None else max((g.duration_s for g in inputs.generators), default=None)
    used = seed if seed is not None else (inputs.generators[0].seed if inputs.generators else 0)
    config = SimConfig(horizon_s=horizon, drain_s=horizon / 2 if horizon is not None else 0.0)
    return AdviseInput(", ".join(files), docs, inputs.manifests, inputs.jobs, config, used, notes=notes,
                       generators=generators)
