"""``gpufleet advise``: the command, its -o conventions, the files it writes read back by gpufleet's NVIDIA and
Kueue parsers, and (slow) the case study, where the advice keeps the guide's hand cut and mends a bad one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.advise.inputs import read_input
from gpufleet.advise.search import search
from gpufleet.api.errors import Problems
from gpufleet.api.manifests import build
from gpufleet.api.nvidia_config import configure_nodes, parse_cluster_policy, parse_config_map
from gpufleet.api.objects import GPU_INVENTORY_ANNOTATION
from gpufleet.api.reader import FieldReader
from gpufleet.api.source import load_paths, load_text
from gpufleet.cli.main import app
from gpufleet.gpu.mig import geometry_for, validate_layout
from tests.cli.terminal import piped

runner = CliRunner()
SMALL = str(Path(__file__).parent / "small.yaml")
CASESTUDY = Path(__file__).resolve().parents[2] / "src" / "gpufleet" / "data" / "casestudy"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    out = tmp_path_factory.mktemp("advice")
    result = runner.invoke(app, ["advise", SMALL, "--evaluations", "6", "-o", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    return out, json.loads(result.stdout)


def test_o_dir_and_o_json_write_the_files_and_print_the_advice(written: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    out, doc = written
    assert doc["objective"] == "balanced" and doc["changed"]
    assert doc["proposal"]["score"] <= doc["given"]["score"]
    assert {"mig-parted-config.yaml", "device-plugin-config.yaml", "cluster-policy-patch.yaml", "cluster.yaml",
            "kueue.yaml", "advice.json", "advice.md", "advice.html", "whatif.json"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "advice.json").read_text())["proposal"] == doc["proposal"]
    assert "## Why" in (out / "advice.md").read_text() and "<table>" in (out / "advice.html").read_text()


def test_whatif_json_opens_on_the_dashboards_what_if_page(written: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    from gpufleet.web.source_simulation import load_result

    out, doc = written
    view = load_result(out / "whatif.json")  # the dashboard's own check of a simulate --json result
    assert [r["scenario"] for r in view.runs] == ["given", "proposal"] and view.pair() == (0, 1)
    assert view.runs[0]["kpis"]["cost"] == doc["given"]["kpis"]["cost"]  # the same runs, run again
    assert view.runs[1]["kpis"]["job_success_pct"] == doc["proposal"]["kpis"]["job_success_pct"]
    # Beside the runs, the advice as -o json prints it, each file with its text for the page.
    advice = json.loads((out / "whatif.json").read_text())["advice"]
    assert {k: v for k, v in advice.items() if k != "files"} == {k: v for k, v in doc.items() if k != "files"}
    assert [{k: v for k, v in f.items() if k != "text"} for f in advice["files"]] == doc["files"]
    assert {f["file"]: f["text"] for f in advice["files"]}["mig-parted-config.yaml"] == (
        out / "mig-parted-config.yaml").read_text()


def test_the_written_cluster_and_queues_load_and_simulate(written: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    out, doc = written
    problems = Problems()
    docs = load_paths([str(out / "cluster.yaml"), str(out / "kueue.yaml")], problems)
    manifests = build(docs, problems)
    assert not problems.errors, [str(e) for e in problems.errors]
    assert len(manifests.nodes) == sum(len(p["nodes"]) for p in doc["proposal"]["pools"])
    assert {q["flavor"] for q in doc["proposal"]["quotas"]} <= {f.name for f in manifests.flavors}
    # The written cluster, queues and workload, simulated as any input is, give the figures the advice reports:
    # the files are what the simulator judged.
    rest = out / "rest.yaml"
    rest.write_text(yaml.safe_dump_all([d.data for d in load_paths([SMALL], Problems())
                                        if d.data.get("kind") in ("Namespace", "LocalQueue")], sort_keys=False))
    result = runner.invoke(app, ["simulate", str(rest), str(out / "cluster.yaml"), str(out / "kueue.yaml"),
                                 str(out / "workload.yaml"), "-o", "json"])
    assert result.exit_code == 0, result.output
    after = json.loads(result.stdout)["runs"][1]
    assert after["scenario"] == "after"
    for key in ("cost", "wait_p95_s", "job_success_pct", "gpu_utilization_pct", "jobs_unfinished"):
        assert after["kpis"][key] == doc["proposal"]["kpis"][key], key


def test_nvidias_files_read_back_to_the_proposed_devices(written: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    out, _ = written
    problems = Problems()
    cluster = build(load_paths([str(out / "cluster.yaml")], problems), problems)
    nodes = []
    for node in cluster.nodes:  # as a live cluster shows them: capacity and GFD labels, no gpufleet inventory
        data = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": node.name, "labels": dict(node.labels)},
                "status": {"capacity": {k: str(v) for k, v in node.capacity.items() if k.startswith("nvidia.com/")},
                           "allocatable": {k: str(v) for k, v in node.allocatable.items()
                                           if k.startswith("nvidia.com/")}}}
        nodes.append(data)
    bare = build(load_text(yaml.safe_dump_all(nodes), "nodes.yaml", problems), problems).nodes
    assert all(n.gpus is None for n in bare)
    maps, policies = [], []
    for path in ("mig-parted-config.yaml", "device-plugin-config.yaml", "cluster-policy-patch.yaml"):
        for d in load_paths([str(out / path)], problems):
            r = FieldReader(d, problems, kind=d.data["kind"], name=None)
            (maps.append(parse_config_map(r)) if d.data["kind"] == "ConfigMap"
             else policies.append(parse_cluster_policy(r)))
    assert configure_nodes(bare, maps, policies, problems) == len(bare)
    assert not problems.errors and not problems.warnings, [str(p) for p in problems.all]
    for node, original in zip(bare, cluster.nodes, strict=True):
        assert node.gpus is not None and original.gpus is not None
        assert [sorted(p.profile for p, _ in g) for g in node.gpus.mig] == [
            sorted(p.profile for p, _ in g) for g in original.gpus.mig]
        assert node.gpus.sharing.time_slicing == original.gpus.sharing.time_slicing
        geometry = geometry_for(node.gpus.model)
        for gpu in node.gpus.mig:
            assert geometry is None or validate_layout(geometry, [p for p, _ in gpu]) == []
    assert GPU_INVENTORY_ANNOTATION not in nodes[0]["metadata"].get("annotations", {})


@pytest.mark.parametrize(("args", "says"), [
    (["-o", "json", "-o", "yaml"], "two output formats"),
    (["--objective", "fast"], "is not one of cost, wait, balanced"),
    (["--budget", "0"], "positive number"),
    (["--evaluations", "0"], "Invalid value"),
])
def test_bad_options_are_usage_errors(args: list[str], says: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["advise", SMALL, *args])
    assert result.exit_code == 2 and says in result.output, result.output


def test_bad_input_exits_1_with_an_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["advise", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 1 and result.stderr.startswith("error: "), result.output
    only_nodes = tmp_path / "nodes.yaml"
    only_nodes.write_text(Path(SMALL).read_text().split("---\napiVersion: v1\nkind: Namespace")[0])
    result = runner.invoke(app, ["advise", str(only_nodes)])
    assert result.exit_code == 1 and "no demand in the input" in result.stderr


def test_text_output_shows_the_figures_the_nodes_and_the_requests() -> None:
    result = runner.invoke(app, ["advise", SMALL, "--evaluations", "3"])
    assert result.exit_code == 0, result.output
    for part in ("cost of the demand", "p95 queue wait", "Nodes", "Requests", "proposals simulated"):
        assert part in result.stdout


@pytest.mark.slow
def test_on_the_case_study_the_advice_keeps_the_guides_cut_and_mends_a_bad_one(tmp_path: Path) -> None:
    # The guide's case study as gpufleet ships it: its hand-made MIG cut (six A100s in 3g.40gb halves, two
    # balanced), time-slicing 8 ways on the L40S, Kueue quotas. Under the memory-aware policy nothing the advisor
    # tries beats it on the balanced objective within its guards (each proposal that gains on waits costs more
    # per busy GPU-hour of work), so it is kept, and the advice says so.
    kept = search(read_input([]), "balanced", evaluations=10)
    assert not kept.changed and kept.chosen.score == kept.given.score
    # The same study with the six halves cut into 1g.10gb sevenths, which production's 3g.40gb demand cannot use:
    # the advice must recut it, better on at least two of cost per work done, p95 wait and job success and worse
    # on none. Doing the work production waited for costs more in all (the demand's cost rises): the
    # old yardstick, cost of the demand, refused this proposal for the work it got done.
    folder = tmp_path / "casestudy"
    folder.mkdir()
    for name in ("cluster.yaml", "queues.yaml", "workload.yaml"):
        text = (Path(CASESTUDY) / name).read_text(encoding="utf-8")
        (folder / name).write_text(text.replace('migLayout: "3g.40gb:2"', 'migLayout: "1g.10gb:7"'), encoding="utf-8")
    assert 'migLayout: "1g.10gb:7"' in (folder / "cluster.yaml").read_text(encoding="utf-8")
    advice = search(read_input([str(folder)]), "balanced", evaluations=10)
    assert advice.changed and advice.chosen.feasible
    assert advice.chosen.score < advice.given.score - 0.1
    g, c = advice.given.kpis, advice.chosen.kpis
    better = [c["demand_cost_per_work"] < g["demand_cost_per_work"], c["wait_p95_s"] < g["wait_p95_s"],
              c["job_success_pct"] > g["job_success_pct"]]
    worse = [c["demand_cost_per_work"] > g["demand_cost_per_work"], c["wait_p95_s"] > g["wait_p95_s"],
             c["job_success_pct"] < g["job_success_pct"]]
    assert sum(better) >= 2 and not any(worse), (g, c)
    assert c["work_done_busy_gpu_hours"] > g["work_done_busy_gpu_hours"]


def test_a_pod_declaring_gpu_memory_only_is_advised_not_a_traceback(tmp_path: Path) -> None:
    # Issue 30, item 1: the case study plus one notebook pod with gpufleet.io/gpu-memory: 10Gi (a fraction sized
    # by its memory) ended in ZeroDivisionError in the integer program.
    folder = tmp_path / "casestudy"
    folder.mkdir()
    for name in ("cluster.yaml", "queues.yaml", "workload.yaml"):
        (folder / name).write_text((CASESTUDY / name).read_text(encoding="utf-8"), encoding="utf-8")
    (folder / "notebook.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: nb-mem\n  namespace: data-science\n  annotations: "
        "{sim.gpufleet.io/duration: 2h, gpufleet.io/gpu-memory: 10Gi}\nspec:\n  containers:\n  - name: main\n"
        "    image: x\n    resources:\n      limits: {cpu: \"1\", memory: 1Gi}\n", encoding="utf-8")
    result = runner.invoke(app, ["advise", str(folder), "--evaluations", "3"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "cost of the demand" in result.stdout


def test_validate_in_the_folder_advise_wrote_recognises_its_json(written: tuple[Path, dict]) -> None:  # type: ignore[type-arg]
    out, _ = written
    result = runner.invoke(app, ["validate", str(out)])
    assert result.exit_code == 0, result.output
    assert "needs apiVersion and kind" not in result.output
    assert "advice.json:1: gpufleet advise's advice" in result.output
    assert "whatif.json:1: gpufleet advise's what-if" in result.output


def test_progress_in_a_log_is_a_few_short_lines() -> None:
    ran = piped("advise", SMALL, "--evaluations", "8")
    assert ran.code == 0, ran.stderr
    progress = [x for x in ran.stderr.splitlines() if x.startswith("advise:")]
    assert 1 <= len(progress) <= 4 and all(len(x) <= 60 for x in progress), progress
    assert progress[-1] == "advise: 9 of 9 configurations measured"
