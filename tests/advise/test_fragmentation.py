"""``gpufleet advise --objective fragmentation`` on a small fleet (tests/advise/frag_fleet.py): never worse than
the given configuration on unallocated GPUs at saturation, deterministic for a seed, the pods-placed guard held,
and the files it writes (node labels, NodePools split) measure back to the figures it reports."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.advise.closure import closed_count, closure
from gpufleet.advise.fillup import Demand, bench_fleet, fill_up
from gpufleet.advise.fragmentation import FragmentationAdvice, search
from gpufleet.advise.fragmentation_files import advice_document, file_texts
from gpufleet.advise.inputs import read_input
from gpufleet.api.objects import GPU_FRACTIONS_LABEL
from gpufleet.cli.main import app
from gpufleet.sim.model import SimulationError
from tests.advise.frag_fleet import POOLS, write_fleet

SEEDS = (0, 1, 2, 3)
GRID = (0.1, 0.2, 0.25, 0.3, 0.4)


@pytest.fixture(scope="module", params=["nodepools", "nodes"])
def fleet(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    return write_fleet(tmp_path_factory.mktemp(request.param), nodes=request.param == "nodes")


@pytest.fixture(scope="module")
def advice(fleet: list[str]) -> FragmentationAdvice:
    return search(read_input(fleet), seeds=SEEDS, shares=GRID)


def test_never_worse_than_the_given_configuration_on_its_measure(advice: FragmentationAdvice,
                                                                 fleet: list[str]) -> None:
    g, c = advice.given, advice.chosen
    assert g.closure.share is None and not g.closure.changed
    assert c.fill.mean_unallocated <= g.fill.mean_unallocated
    assert all(m.fill.seeds == SEEDS for m in [g, *advice.tried])  # paired: every configuration on the same seeds
    if advice.changed:
        assert c.within_guard and c.improves
        assert c.fill.mean_placed >= g.fill.mean_placed - advice.tolerance_pods
    # Every share of the grid that closes another set of nodes was measured, once.
    inp = read_input(fleet)
    assert len(advice.tried) == len({closure(inp, s).closed for s in GRID} - {g.closure.closed})
    assert len({m.closure.closed for m in advice.tried}) == len(advice.tried)


def test_deterministic_for_a_seed(fleet: list[str]) -> None:
    inp = read_input(fleet)
    a, b = search(inp, seeds=SEEDS, shares=GRID), search(read_input(fleet), seeds=SEEDS, shares=GRID)
    for x, y in zip([a.given, *a.tried], [b.given, *b.tried], strict=True):
        assert x.closure.closed == y.closure.closed
        assert (x.fill.unallocated_pct, x.fill.placed) == (y.fill.unallocated_pct, y.fill.placed)
    assert a.chosen.name == b.chosen.name
    assert file_texts(a.chosen.closure) == file_texts(b.chosen.closure)


def test_more_gpus_allocated_by_placing_fewer_pods_is_not_proposed(tmp_path: Path) -> None:
    # On this fleet, closing 40% of the nodes raises the share of GPUs allocated at saturation but places fewer
    # pods: fractional pods are refused, not packed better.
    inp = read_input(write_fleet(tmp_path))
    a = search(inp, seeds=SEEDS, shares=(0.4,))
    [m] = a.tried
    assert m.fill.mean_unallocated < a.given.fill.mean_unallocated  # the measure alone would take it
    assert m.fill.mean_placed < a.given.fill.mean_placed - a.tolerance_pods
    assert not m.within_guard and m.why_not is not None and "fewer pods" in m.why_not
    assert not a.changed and a.chosen is a.given


def _labels_from_script(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        if not line.startswith("kubectl label node "):
            continue
        words = shlex.split(line)
        out[words[3]] = dict(w.split("=", 1) for w in words[4:] if "=" in w)
    return out


def test_the_written_files_measure_back_to_the_reported_figures(fleet: list[str], advice: FragmentationAdvice,
                                                                tmp_path: Path) -> None:
    demand = Demand.of(read_input(fleet).jobs)
    nodes_input = "nodes" in Path(fleet[0]).parent.name
    for m in [advice.given, *advice.tried]:
        texts = file_texts(m.closure)
        folder = tmp_path / m.name.split("%")[0].replace(" ", "")
        if nodes_input:
            labels = _labels_from_script(texts.get("node-labels.sh", ""))
            assert all(v == {GPU_FRACTIONS_LABEL: "false"} for v in labels.values())
            assert set(labels) == m.closure.closed  # the input's nodes were all open
            files = write_fleet(folder, nodes=True, closed=tuple(labels))
        else:
            assert "node-labels.sh" not in texts
            folder.mkdir()
            (folder / "cluster.yaml").write_text(texts["cluster.yaml"], encoding="utf-8")
            files = [str(folder / "cluster.yaml"), fleet[1]]
        back = read_input(files)
        fill = fill_up(bench_fleet(back.manifests.nodes), demand, SEEDS)
        assert (fill.unallocated_pct, fill.placed) == (m.fill.unallocated_pct, m.fill.placed), m.name


def test_which_nodes_a_share_closes(tmp_path: Path) -> None:
    assert [closed_count(0.25, n) for n in (1, 2, 4, 8, 10)] == [0, 1, 1, 2, 3]  # halves up: 2.5 -> 3
    nodes_inp = read_input(write_fleet(tmp_path / "n", nodes=True, closed=("big-07",)))
    c = closure(nodes_inp, 0.3)
    by_pool = {p.model + str(p.gpus_per_node): p for p in c.pools}
    big = by_pool["A100-SXM4-80GB8"]
    # The node the input closed stays closed and counts; then open ones in name order.
    assert big.given_closed == 1 and big.closed == ("big-00", "big-01", "big-07")
    assert set(c.labels) == {"big-00", "big-01", "mid-00", "mid-01"}  # big-07 already carries the label
    pools_inp = read_input(write_fleet(tmp_path / "p"))
    split = closure(pools_inp, 0.25)
    docs = {d["metadata"]["name"]: d for d in split.node_pools}
    assert docs["big"]["spec"]["count"] == 7 and docs["big-whole"]["spec"]["count"] == 3
    assert docs["big-whole"]["spec"]["labels"] == {GPU_FRACTIONS_LABEL: "false"}
    assert docs["big-whole"]["spec"]["namePrefix"] == "big-whole"
    assert {n.name for n in split.nodes if n.labels.get(GPU_FRACTIONS_LABEL) == "false"} == split.closed
    assert len(split.nodes) == sum(count for _, count, _ in POOLS)


def test_a_mig_node_is_refused_with_its_name(tmp_path: Path) -> None:
    files = write_fleet(tmp_path)
    extra = tmp_path / "mig.yaml"
    extra.write_text(yaml.safe_dump({
        "apiVersion": "gpufleet.io/v1alpha1", "kind": "NodePool", "metadata": {"name": "mig"},
        "spec": {"count": 1, "namePrefix": "mig", "cpu": "32", "memory": "256Gi",
                 "gpu": {"model": "A100-SXM4-80GB", "count": 1, "migLayout": "3g.40gb:2"},
                 "sharing": {"migStrategy": "mixed"}}}), encoding="utf-8")
    with pytest.raises(SimulationError, match="node mig-0: the fragmentation objective measures whole GPUs"):
        search(read_input([*files, str(extra)]), seeds=(0,), shares=())


def test_the_command_prints_before_and_after_and_writes_the_files(tmp_path: Path) -> None:
    runner = CliRunner()
    files = write_fleet(tmp_path / "in", nodes=True)
    out = tmp_path / "out"
    result = runner.invoke(app, ["advise", *files, "--objective", "fragmentation", "-o", str(out), "-o", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["objective"] == "fragmentation" and doc["seeds"] == [0, 1, 2, 3]
    assert doc["given"]["unallocatedGpuPct"]["mean"] >= doc["proposal"]["unallocatedGpuPct"]["mean"]
    assert {"podsPlaced", "seconds", "nodesClosed"} <= set(doc["given"]) and doc["seconds"] > 0
    assert json.loads((out / "advice.json").read_text(encoding="utf-8"))["given"] == doc["given"]
    text = runner.invoke(app, ["advise", *files, "--objective", "fragmentation"])
    assert text.exit_code == 0, text.output
    assert "unallocated GPUs at 100% arrived" in text.stdout and "pods placed until 100% arrived" in text.stdout
    for flag, value, named in (("--budget", "10", "'--budget'"), ("--evaluations", "5", "'--evaluations'"),
                               ("-n", "team-a", "'--namespace'")):
        refused = runner.invoke(app, ["advise", *files, "--objective", "fragmentation", flag, value])
        assert refused.exit_code == 2 and named in refused.output, (flag, refused.output)


def test_advice_document_names_the_measure_and_the_guard(advice: FragmentationAdvice, fleet: list[str]) -> None:
    doc = advice_document(read_input(fleet), advice)
    assert doc["podsPlacedTolerance"] == advice.tolerance_pods
    assert "100% of the capacity arrived" in doc["measure"]
    assert [t["share"] for t in doc["tried"]] == [m.closure.share for m in advice.tried]
