"""No false positives: the case study, the examples, Kueue's sample jobs and NVIDIA's sample pods (written in their
shape under tests/data/lint/samples/) give no finding a reader would dispute."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.policy.lintfiles import lint_paths

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "data" / "lint" / "samples"
CASESTUDY = str(REPO / "examples" / "casestudy")


@pytest.mark.parametrize(("files", "cluster"), [
    ([CASESTUDY], []),
    ([str(REPO / "examples" / "plan" / "snapshot.yaml")], [CASESTUDY]),
    ([str(SAMPLES / "kueue")], []),
    ([str(SAMPLES / "kueue")], [CASESTUDY]),
])
def test_no_finding(files: list[str], cluster: list[str]) -> None:
    run = lint_paths(files, cluster)
    assert run.ok, [str(p) for p in run.unreadable]
    assert run.findings == []


def test_nvidia_samples_only_lack_cpu_and_memory_requests() -> None:
    # NVIDIA's test pods give a GPU limit and nothing else: that is exactly what gpu-pod-without-cpu-memory-requests
    # says (a warning: `gpufleet lint` still exits 0), and the only thing said about them without a cluster.
    run = lint_paths([str(SAMPLES / "nvidia")])
    assert run.ok
    assert sorted((f.rule, f.object.name) for f in run.findings) == [
        ("gpu-pod-without-cpu-memory-requests", "cuda-vectoradd"),
        ("gpu-pod-without-cpu-memory-requests", "cuda-vectoradd-mig"),
        ("gpu-pod-without-cpu-memory-requests", "time-slicing-verification"),
    ]
    assert {f.severity for f in run.findings} == {"warning"}


def test_the_examples_snapshot_judged_with_the_case_study_has_no_model_finding() -> None:
    # The pending 16-GPU job names no model, but its queue's flavor (h100-full) keeps it on the H100 pool; the
    # running pod is bound already.
    run = lint_paths([str(REPO / "examples" / "plan" / "snapshot.yaml")], [CASESTUDY])
    assert not [f for f in run.findings if f.rule == "gpu-model-unconstrained"]
