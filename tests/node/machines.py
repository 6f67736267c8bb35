"""NodePool texts for fake machines, written to files the way `--nvml fake:MACHINE` reads them."""

from __future__ import annotations

from pathlib import Path

WHOLE_8 = """\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: dgx}
spec:
  count: 2
  namePrefix: dgx
  gpu: {model: A100-SXM4-80GB, count: 8}
  cpu: "128"
  memory: 2Ti
"""

WHOLE_4_PAIRS = """\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: pcie}
spec:
  count: 1
  namePrefix: pcie
  gpu: {model: A100-SXM4-80GB, count: 4, nvlink: pairs}
  cpu: "64"
  memory: 512Gi
"""

MIG_MIXED = """\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: mig}
spec:
  count: 1
  namePrefix: mig
  gpu: {model: A100-SXM4-80GB, count: 2, migLayout: "3g.40gb,2g.20gb,1g.10gb:2"}
  cpu: "64"
  memory: 512Gi
  sharing: {migStrategy: mixed}
"""

MIG_SINGLE = """\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: migs}
spec:
  count: 1
  namePrefix: migs
  gpu: {model: A100-SXM4-80GB, count: 2, migLayout: "3g.40gb:2"}
  cpu: "64"
  memory: 512Gi
  sharing: {migStrategy: single}
"""

TIME_SLICED = """\
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {name: ts}
spec:
  count: 1
  namePrefix: ts
  gpu: {model: L40S, count: 2}
  cpu: "32"
  memory: 256Gi
  sharing:
    timeSlicing:
      resources: [{name: nvidia.com/gpu, replicas: 4}]
"""


def write_machine(folder: Path, text: str, name: str = "machine.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path
