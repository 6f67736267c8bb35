"""A workload naming a LocalQueue its namespace does not have is warned about when the input is read (validate)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpufleet.api.manifests import load_manifest_text
from gpufleet.cli.main import app

QUEUES = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: cq}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: default
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-q, namespace: team-a}
spec: {clusterQueue: cq}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: other-q, namespace: team-b}
spec: {clusterQueue: cq}
"""

CONTAINERS = """      restartPolicy: Never
      containers:
      - name: main
        image: trainer
        resources:
          limits: {nvidia.com/gpu: 1, cpu: "1", memory: 1Gi}
"""
POD_SPEC = "\n".join(line[4:] for line in CONTAINERS.splitlines()) + "\n"


def _job(queue: str, namespace: str = "team-a", uid: str = "u1") -> str:
    return f"""---
apiVersion: batch/v1
kind: Job
metadata:
  name: train
  namespace: {namespace}
  uid: {uid}
  labels: {{kueue.x-k8s.io/queue-name: {queue}}}
spec:
  template:
    spec:
{CONTAINERS}"""


def _pod(labels: str, owner: str = "") -> str:
    owners = f"\n  ownerReferences: [{{apiVersion: batch/v1, kind: Job, name: train, uid: {owner}}}]" if owner else ""
    return f"""---
apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: team-a
  labels: {{{labels}}}{owners}
spec:
{POD_SPEC}"""


def _line_of(text: str, marker: str) -> int:
    """The 1-based line where the document holding ``marker`` begins (its apiVersion line)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if marker in line)
    return next(i for i in range(at, -1, -1) if lines[i].startswith("apiVersion")) + 1


def _queue_warnings(text: str) -> list[tuple[int | None, str | None, str | None, str | None]]:
    m = load_manifest_text(text, "in.yaml")
    assert not m.problems.errors, [str(e) for e in m.problems.errors]
    return [(w.line, w.kind, w.name, w.field) for w in m.problems.warnings if "LocalQueue" in w.message
            and "does not exist" in w.message]


def test_a_job_naming_a_missing_local_queue_is_warned_with_line_field_and_fix() -> None:
    text = QUEUES + _job("team-queue")
    m = load_manifest_text(text, "in.yaml")
    (w,) = [w for w in m.problems.warnings if "does not exist" in w.message]
    assert (w.file, w.line, w.kind, w.name) == ("in.yaml", _line_of(text, "kind: Job"), "Job", "team-a/train")
    assert w.field == "metadata.labels.kueue.x-k8s.io/queue-name"
    assert "LocalQueue team-queue doesn't exist" in w.message  # Kueue's pending reason
    assert w.fix is not None and "team-q" in w.fix and "other-q" not in w.fix  # the namespace's queues only


def test_an_existing_queue_or_an_input_without_queues_says_nothing() -> None:
    assert _queue_warnings(QUEUES + _job("team-q")) == []
    assert _queue_warnings(_job("team-queue")) == []  # no queue objects: the input says nothing of the cluster's
    # A LocalQueue of that name in another namespace does not count: Kueue looks in the workload's own.
    text = QUEUES + _job("other-q")
    assert _queue_warnings(text) == [(_line_of(text, "kind: Job"), "Job", "team-a/train",
                                                          "metadata.labels.kueue.x-k8s.io/queue-name")]


def test_a_pod_is_warned_unless_its_owner_in_the_input_is() -> None:
    label = "kueue.x-k8s.io/queue-name: nope"
    assert [w[1:] for w in _queue_warnings(QUEUES + _pod(label))] == [
        ("Pod", "team-a/p", "metadata.labels.kueue.x-k8s.io/queue-name")]
    assert [w[1] for w in _queue_warnings(QUEUES + _job("nope") + _pod(label, owner="u1"))] == ["Job"]
    # A Volcano queue label names a Volcano Queue, not a LocalQueue.
    assert _queue_warnings(QUEUES + _pod("volcano.sh/queue-name: q")) == []


def test_validate_prints_the_warning_and_exits_0(tmp_path: Path) -> None:
    f = tmp_path / "in.yaml"
    text = QUEUES + _job("team-queue")
    f.write_text(text)
    res = CliRunner().invoke(app, ["validate", str(f)])
    assert res.exit_code == 0, res.output
    assert f"in.yaml:{_line_of(text, 'kind: Job')}: Job team-a/train" in res.output
    assert "LocalQueue team-queue" in res.output
    assert "1 warning(s)" in res.output
