"""Hostile inputs: the static ones in ``inputs/`` and the generated ones below (too big, or not files at all).

Each static file states what it expects in header comments: ``# expect: TEXT`` (a line of the output must
contain TEXT; several allowed), ``# exit: N`` (default 1) and ``# commands: validate plan`` (the default).
A generated case writes its input into a folder and says the same things in code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpufleet.api import limits

HERE = Path(__file__).parent
STATIC = HERE / "inputs"


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[Path], list[str]]  # writes the input under a folder, returns the command's file arguments
    expect: tuple[str, ...]
    exit: int = 1
    commands: tuple[str, ...] = ("validate", "plan")
    simulate: bool = False  # run `gpufleet simulate FILES --duration 1h` too
    tags: tuple[str, ...] = field(default=())


def _header(path: Path) -> tuple[tuple[str, ...], int, tuple[str, ...]]:
    expect: list[str] = []
    exit_code = 1
    commands: tuple[str, ...] = ("validate", "plan")
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        key, _, value = line[1:].strip().partition(":")
        value = value.strip()
        if key == "expect":
            expect.append(value)
        elif key == "exit":
            exit_code = int(value)
        elif key == "commands":
            commands = tuple(value.split())
    return tuple(expect), exit_code, commands


def static_cases() -> list[Case]:
    out = []
    for path in sorted(STATIC.glob("*.yaml")):
        expect, exit_code, commands = _header(path)
        out.append(Case(path.stem, lambda _d, p=path: [str(p)], expect, exit_code, commands))
    return out


def _writer(name: str, text: Callable[[], str]) -> Callable[[Path], list[str]]:
    def make(folder: Path) -> list[str]:
        path = folder / name
        path.write_text(text(), encoding="utf-8")
        return [str(path)]
    return make


def _pod(annotations: dict[str, str], extra: str = "") -> str:
    return ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ml\n  annotations: "
            + json.dumps(annotations) + "\nspec:\n  schedulerName: gpufleet\n" + extra
            + "  containers: [{name: c, image: x}]\n")


def _node(annotation: str) -> str:
    return ("apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  annotations:\n    gpufleet.io/gpus: "
            + json.dumps(annotation) + "\nstatus: {allocatable: {cpu: '8', memory: 64Gi, nvidia.com/gpu: '1'}}\n")


def _cohort_chain(n: int) -> str:
    docs = [f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: Cohort\nmetadata: {{name: c{i}}}\n"
            + (f"spec: {{parentName: c{i - 1}}}\n" if i else "") for i in range(n)]
    docs.append("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {name: q}\n"
                f"spec:\n  cohort: c{n - 1}\n  namespaceSelector: {{}}\n  resourceGroups:\n"
                "  - coveredResources: [cpu]\n    flavors: [{name: f, resources: [{name: cpu, nominalQuota: 1}]}]\n")
    docs.append("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: f}\n")
    return "---\n".join(docs)


def _alias_bomb() -> str:
    # Nine levels of nine aliases: 387 million leaves if anything ever expanded or formatted it whole.
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    head = "\n".join(lines)
    return (f"{head}\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ml}}\n"
            "spec:\n  priority: *a9\n  nodeSelector: *a9\n  containers: [{name: c, resources: {limits: *a9}}]\n")


def _duplicate_keys(n: int) -> str:
    body = "".join(f"    k{i % 2}: v{i}\n" for i in range(n))
    return ("apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ml\n  labels:\n"
            f"{body}spec:\n  containers: []\n")


def _many_documents(n: int) -> str:
    return "".join(f"---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: n{i}}}\n" for i in range(n))


def _wide_document(values: int) -> str:
    body = "".join(f"  k{i}: v\n" for i in range(values))
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata:\n{body}"


def _fifo(folder: Path) -> list[str]:
    path = folder / "pipe.yaml"
    os.mkfifo(path)  # nobody ever writes to it: reading it would block forever
    return [str(path), str(STATIC / "duplicate-limits.yaml")]


def _oversized(folder: Path) -> list[str]:
    path = folder / "big.yaml"
    with open(path, "wb") as fh:
        fh.truncate(limits.MAX_INPUT_BYTES + 1)  # sparse: costs no disk
    return [str(path)]


def _generator(rate: str) -> str:
    return ("apiVersion: gpufleet.io/v1alpha1\nkind: WorkloadGenerator\nmetadata: {name: g}\n"
            f"spec:\n  classes:\n  - name: flood\n    arrival: {{ratePerHour: {rate}}}\n")


def _at_limits_cluster() -> str:
    """5,000 nodes (two pools of 2,500 eight-GPU nodes) and 150,000 pods (60 Jobs of 2,500) in 20 queues."""
    nodes_per_pool = limits.MAX_NODES // 2
    jobs, per_job = 60, limits.MAX_PODS // 60
    docs = [f"apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {{name: pool{i}}}\nspec:\n"
            f"  count: {nodes_per_pool}\n  cpu: 128\n  memory: 1Ti\n  gpu: {{model: A100-SXM4-80GB, count: 8}}\n"
            for i in range(2)]
    docs.append("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: f}\n")
    for q in range(20):
        docs.append(f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: ClusterQueue\nmetadata: {{name: cq{q}}}\nspec:\n"
                    "  namespaceSelector: {}\n  cohort: all\n  resourceGroups:\n"
                    "  - coveredResources: [cpu, memory, nvidia.com/gpu]\n    flavors: [{name: f, resources: ["
                    "{name: cpu, nominalQuota: 100000}, {name: memory, nominalQuota: 100Ti}, "
                    "{name: nvidia.com/gpu, nominalQuota: 2000}]}]\n")
        docs.append(f"apiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {{name: lq, namespace: ns{q}}}\n"
                    f"spec: {{clusterQueue: cq{q}}}\n")
    for j in range(jobs):
        docs.append(f"apiVersion: batch/v1\nkind: Job\nmetadata: {{name: job{j}, namespace: ns{j % 20}, "
                    "labels: {kueue.x-k8s.io/queue-name: lq}}\nspec:\n"
                    f"  parallelism: {per_job}\n  completions: {per_job}\n  template:\n    spec:\n"
                    "      restartPolicy: Never\n      containers: [{name: c, image: x, resources: {requests: "
                    "{cpu: 1, memory: 1Gi}, limits: {nvidia.com/gpu: 1}}}]\n")
    return "---\n".join(docs)


def _at_limits_bytes(folder: Path) -> list[str]:
    """Just under the byte limit of the worst YAML there is (tiny keys), in documents just under 3 MiB."""
    path = folder / "tiny-keys.yaml"
    budget = limits.MAX_INPUT_BYTES - 4096
    with open(path, "w", encoding="utf-8") as fh:
        written = d = 0
        while written < budget:
            head = f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{d}}}\ndata:\n"
            fh.write(head)
            written += len(head)
            size = i = 0
            while size < limits.MAX_DOCUMENT_BYTES - 1024 and written + size < budget:
                line = f"  k{i}: v\n"
                fh.write(line)
                size += len(line)
                i += 1
            written += size
            d += 1
    return [str(path)]


DIGITS = "9" * 5000

GENERATED: list[Case] = [
    Case("fraction-5000-digits", _writer("p.yaml", lambda: _pod({"gpufleet.io/gpu-fraction": DIGITS})),
         ("gpu-fraction", "characters")),
    Case("quantity-5000-digits", _writer("p.yaml", lambda: _pod({}, f"  priority: {DIGITS}\n")),
         ("cannot read",)),
    Case("memory-quantity-5000-digits", _writer("p.yaml", lambda: _pod({"gpufleet.io/gpu-memory": DIGITS + "Gi"})),
         ("gpu-memory", "longer than")),
    Case("timestamp-400-digits", _writer("p.yaml", lambda: _pod({}).replace(
        "  namespace: ml\n", "  namespace: ml\n  creationTimestamp: " + "9" * 400 + "\n")),
         ("creationTimestamp",)),
    Case("inventory-5000-deep", _writer("n.yaml", lambda: _node("[" * 5000 + "]" * 5000)),
         ("gpufleet.io/gpus", "levels deep")),
    Case("inventory-huge", _writer("n.yaml", lambda: _node('{"model": "' + "x" * 300_000 + '"}')),
         ("gpufleet.io/gpus", "characters long")),
    Case("cohort-chain-2000", _writer("c.yaml", lambda: _cohort_chain(2000)), ("levels deep",)),
    Case("alias-bomb", _writer("bomb.yaml", _alias_bomb), ("priority", "expected an integer")),
    Case("duplicate-keys-20000", _writer("d.yaml", lambda: _duplicate_keys(20_000)), ("duplicate key 'k0'",)),
    Case("documents-over-limit", _writer("many.yaml", lambda: _many_documents(limits.MAX_DOCUMENTS + 5)),
         (f"more than {limits.MAX_DOCUMENTS:,} documents",), commands=("validate",)),
    Case("document-too-wide", _writer("wide.yaml", lambda: _wide_document(limits.MAX_NODES_PER_DOCUMENT + 10)),
         ("YAML values",), commands=("validate",)),
    Case("input-over-limit", _oversized, ("MiB",), commands=("validate",)),
    Case("fifo-and-a-file", _fifo, ("not a regular file", "duplicate key")),
    Case("dev-zero", lambda _d: ["/dev/zero"], ("not a regular file",), exit=0),
    Case("at-limits-cluster-validate", _writer("big.yaml", _at_limits_cluster),
         (f"valid: {limits.MAX_NODES} Node",), exit=0, commands=("validate",)),
    Case("at-limits-cluster-plan", _writer("big.yaml", _at_limits_cluster), ("admitted",), exit=0,
         commands=("plan",)),
    Case("at-limits-bytes", _at_limits_bytes, ("ConfigMap default/c0",), exit=0, commands=("validate", "plan")),
    Case("generator-rate-1e100", _writer("g.yaml", lambda: _generator("1e100")), ("ratePerHour",),
         commands=(), simulate=True),
    Case("generator-rate-5000-digits", _writer("g.yaml", lambda: _generator(f'"{DIGITS}"')), ("not a number",),
         commands=(), simulate=True),
]


def all_cases() -> list[Case]:
    return static_cases() + GENERATED
