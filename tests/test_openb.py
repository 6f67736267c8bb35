from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gpufleet.api.limits import MAX_NODES
from gpufleet.api.source import InputBudget
from gpufleet.sim.openb import (
    DEFAULT_POD_FILE,
    GPU_NODE_FILE,
    OPENB_DIR_ENV,
    OpenbPod,
    default_openb_dir,
    read_nodes,
    read_pods,
)

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_read_pods_reports_every_bad_row_with_its_line(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "pods.csv",
        POD_HEADER,  # line 1
        "p-ok,12000,16384,1,1000,,LS,Running,0,12537496,0",  # 2
        "p-share,6000,12288,1,460,T4|P100,BE,Pending,5,10,",  # 3: empty scheduled_time is fine
        "p-badint,12a00,16384,1,1000,,LS,Running,0,1,0",  # 4
        "p-over,1000,1,1,1200,,LS,Running,0,1,0",  # 5: gpu_milli > 1000
        "p-multishare,1000,1,2,500,,LS,Running,0,1,0",  # 6: sharing with 2 GPUs
        "p-short,1000,1,1",  # 7: missing columns
        "",  # 8: blank lines are not rows
        "p-cpu,2000,1,0,0,,BE,Failed,1,2,3",  # 9
        "p-ok,1,1,0,0,,,,,,",  # 10: duplicate name
        "p-nogpu-milli,1000,1,2,0,,,,,,",  # 11: GPUs without milli
        "p-badtime,1000,1,0,0,,,,1.5,,",  # 12
        "p-neg,-5,1,0,0,,,,,,",  # 13
    )
    pods, report = read_pods(f)
    assert [p.name for p in pods] == ["p-ok", "p-share", "p-cpu"]
    assert report.rows_read == 11
    assert report.rows_rejected == 8
    assert report.rows_accepted == 3
    assert not report.ok
    lines = [int(p.split(":")[1]) for p in report.problems]
    assert lines == [4, 5, 6, 7, 10, 11, 12, 13]
    by_line = {int(p.split(":")[1]): p for p in report.problems}
    assert by_line[4].startswith(f"{f}:4: cpu_milli: ")
    assert "gpu_milli: 1200 out of range" in by_line[5]
    assert "gpu_milli:" in by_line[6] and "num_gpu=2" in by_line[6]
    assert "gpu_milli: missing" in by_line[7]
    assert "duplicate 'p-ok' (first on line 2)" in by_line[10]
    assert "creation_time" in by_line[12]

    share = pods[1]
    assert share == OpenbPod(
        name="p-share",
        cpu_milli=6000,
        memory_mib=12288,
        num_gpu=1,
        gpu_milli=460,
        gpu_spec=("T4", "P100"),
        qos="BE",
        phase="Pending",
        creation_time=5,
        deletion_time=10,
        scheduled_time=None,
        line=3,
    )
    assert pods[2].line == 9


def test_problem_count_matches_rejections(tmp_path: Path) -> None:
    # A rejection without a problem line would be a silent drop.
    f = _write(tmp_path / "p.csv", POD_HEADER, "a,x,1,0,0,,,,,,", "b,1,1,0,0,,,,,,,extra")
    pods, report = read_pods(f)
    assert pods == []
    assert report.rows_rejected == len(report.problems) == 2
    assert "row: 12 fields, header has 11" in report.problems[1]


def test_read_pods_five_column_multigpu_format(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "multi.csv",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli",
        "m-0,12000,16384,8,1000",
        "m-1,6000,12288,1,460",
    )
    pods, report = read_pods(f)
    assert report.ok and report.rows_read == 2
    assert pods[0].num_gpu == 8 and pods[0].gpu_spec == ()
    assert pods[1].qos is None and pods[1].creation_time is None and pods[1].phase is None


def test_missing_header_column_rejects_all_rows(tmp_path: Path) -> None:
    f = _write(tmp_path / "p.csv", "name,cpu_milli,memory_mib,num_gpu", "a,1,1,0", "b,1,1,0")
    pods, report = read_pods(f)
    assert pods == []
    assert report.rows_read == 2 and report.rows_rejected == 2
    [problem] = report.problems
    assert problem.startswith(f"{f}:1: gpu_milli: missing from header; fix: add the column")


def test_read_nodes(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model",
        "n-0,64000,262144,2,P100",
        "n-1,32000,262144,0,",
        "n-2,96000,393216,8,",  # GPUs but no model
        "n-3,96000,393216,eight,G2",
    )
    nodes, report = read_nodes(f)
    assert [(n.name, n.gpus, n.model) for n in nodes] == [("n-0", 2, "P100"), ("n-1", 0, None)]
    assert report.rows_rejected == 2
    assert report.problems[0].startswith(f"{f}:4: model: empty")
    assert report.problems[1].startswith(f"{f}:5: gpu: not an integer")


def test_default_openb_dir_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPENB_DIR_ENV, str(tmp_path))
    assert default_openb_dir() == tmp_path
    # A set-but-wrong variable must not silently fall back to some other copy.
    monkeypatch.setenv(OPENB_DIR_ENV, str(tmp_path / "nope"))
    assert default_openb_dir() is None


# ---- the real trace, when the shared data folder is present ------------------------------------

OPENB = default_openb_dir()
needs_trace = pytest.mark.skipif(
    OPENB is None or not (OPENB / DEFAULT_POD_FILE).is_file(),
    reason=f"openb trace not found (set {OPENB_DIR_ENV} or provide ../shared/data/openb)",
)


@needs_trace
def test_real_gpu_nodes() -> None:
    assert OPENB is not None
    nodes, report = read_nodes(OPENB / GPU_NODE_FILE)
    assert report.ok
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    gpus_by_model = Counter[str]()
    for n in nodes:
        assert n.model is not None
        gpus_by_model[n.model] += n.gpus
    assert gpus_by_model == {
        "G2": 4392,
        "T4": 842,
        "G3": 312,
        "P100": 265,
        "V100M32": 204,
        "V100M16": 195,
        "A10": 2,
    }


@needs_trace
def test_real_default_pods() -> None:
    assert OPENB is not None
    pods, report = read_pods(OPENB / DEFAULT_POD_FILE)
    assert report.ok and len(pods) == 8152
    assert Counter(p.num_gpu for p in pods) == {0: 1088, 1: 6989, 2: 16, 4: 15, 8: 44}
    assert sum(1 for p in pods if p.num_gpu == 1 and p.gpu_milli < 1000) == 3078
    assert sum(p.num_gpu * p.gpu_milli for p in pods) == 6_086_800


@pytest.mark.slow
@needs_trace
def test_every_trace_file_reads_cleanly() -> None:
    assert OPENB is not None
    expected = {"openb_pod_list_multigpu50.csv": 9061, "openb_pod_list_cpu250.csv": 9420}
    files = sorted(OPENB.glob("openb_pod_list_*.csv"))
    assert len(files) >= 20
    for f in files:
        pods, report = read_pods(f)
        assert report.ok, report.problems[:3]
        if f.name in expected:
            assert len(pods) == expected[f.name]


# ---- limits (issue 30, item 6): the YAML input's, each problem with file, line, column, limit and fix --------


def test_values_beyond_the_limits_are_refused_with_line_column_limit_and_fix(tmp_path: Path) -> None:
    nodes = _write(tmp_path / "n.csv", "sn,cpu_milli,memory_mib,gpu,model", "n-0,1,1,1000000000,T4", "n-1,1,1,64,T4")
    rows, report = read_nodes(nodes)
    assert [n.name for n in rows] == ["n-1"]
    assert report.problems == [f"{nodes}:2: gpu: 1,000,000,000 is too large: at most 64 (gpufleet's limit on GPUs "
                               "per node; see docs/limits.md); fix: use a value of at most 64"]
    pods = _write(tmp_path / "p.csv", POD_HEADER,
                  "p-65,1,1,65,1000,,,,,,",  # 2: more GPUs than a node has
                  f"p-digits,{'9' * 19},1,0,0,,,,,,",  # 3: past int64
                  f"p-{'x' * 300},1,1,0,0,,,,,,",  # 4: a field past 253 characters
                  "p-ok,1,1,64,1000,,,,,,")
    rows_p, report = read_pods(pods)
    assert [p.name for p in rows_p] == ["p-ok"]
    by_line = {int(p.split(":")[1]): p for p in report.problems}
    assert by_line[2].startswith(f"{pods}:2: num_gpu: 65 is too large: at most 64")
    assert by_line[3].startswith(f"{pods}:3: cpu_milli: a number of 19 digits: at most 18")
    assert by_line[4].startswith(f"{pods}:4: name: 302 characters: at most 253")
    assert all("; fix: " in p for p in report.problems)


def test_a_field_past_the_csv_modules_own_limit_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    f = _write(tmp_path / "p.csv", POD_HEADER, "p-" + "x" * 200_000 + ",1,1,0,0,,,,,,", "p-after,1,1,0,0,,,,,,")
    pods, report = read_pods(f)
    assert pods == [] and report.rows_rejected == report.rows_read == 1
    [problem] = report.problems
    assert problem.startswith(f"{f}:2: row: not valid CSV") and "at most 253" in problem
    assert len(problem) < 600  # the giant value is never quoted whole


def test_row_limits_stop_reading_and_say_so(tmp_path: Path) -> None:
    f = _write(tmp_path / "p.csv", POD_HEADER, *(f"p{i},1,1,0,0,,,,,," for i in range(5)))
    pods, report = read_pods(f, room=3)
    assert len(pods) == 3 and report.rows_read == 3
    [problem] = report.problems
    assert problem.startswith(f"{f}:5: row: more than 3 pods with the 149,997 in the input's other files: "
                              "at most 150,000 (gpufleet's limit on pods per input")
    assert problem.endswith("fix: give fewer pods per run (a part of the trace)")


def test_a_trace_that_is_not_a_small_regular_utf8_file_is_refused(tmp_path: Path) -> None:
    latin = tmp_path / "latin1.csv"
    latin.write_bytes(f"{POD_HEADER}\npé,1,1,0,0,,,,,,\n".encode("latin-1"))
    small = InputBudget(max_bytes=len(POD_HEADER))
    # A FIFO is refused as /dev/zero is: tests/hostile/test_input_limits_everywhere.py tries one, under an alarm.
    for path, budget, words in ((latin, None, "not UTF-8 text (invalid continuation byte at byte 111, line 2)"),
                                (Path("/dev/zero"), None, "not a regular file"),
                                (_write(tmp_path / "big.csv", POD_HEADER, "p,1,1,0,0,,,,,,"), small, "would exceed")):
        pods, report = read_pods(path, budget=budget)
        [problem] = report.problems
        assert pods == [] and problem.startswith(f"{path}: ") and words in problem and "; fix: " in problem, problem


def test_simulate_inputs_share_the_runs_node_limit_between_yaml_and_csv(tmp_path: Path) -> None:
    from gpufleet.sim.inputs import load_inputs

    pool = tmp_path / "pool.yaml"
    pool.write_text("apiVersion: gpufleet.io/v1alpha1\nkind: NodePool\nmetadata: {name: cpu}\n"
                    f"spec: {{count: {MAX_NODES - 1}, cpu: '8', memory: 32Gi}}\n")
    nodes = _write(tmp_path / "n.csv", "sn,cpu_milli,memory_mib,gpu,model", "n-0,1,1,0,", "n-1,1,1,0,")
    inputs = load_inputs([str(pool), str(nodes)])
    assert len(inputs.manifests.nodes) == MAX_NODES
    [problem] = inputs.problems
    assert problem.startswith(f"{nodes}:3: row: more than 1 nodes with the 4,999 in the input's other files: at "
                              "most 5,000 (gpufleet's limit on nodes per input")
