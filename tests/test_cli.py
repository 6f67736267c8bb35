"""The command line, end to end through typer's runner."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gpufleet.cli.main import app
from tests.conftest import REPO

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0 and "gpufleet 0." in result.output


def test_validate_casestudy_succeeds() -> None:
    result = runner.invoke(app, ["validate", str(REPO / "examples" / "casestudy")])
    assert result.exit_code == 0, result.output
    assert "valid" in result.output and "18 Node" in result.output


def test_validate_reports_every_error_and_exits_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("""apiVersion: v1
kind: Pod
metadata: {name: a}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: "0.5"}}
---
apiVersion: v1
kind: Pod
metadata: {name: b}
spec:
  containers:
  - name: c
    resources: {requests: {nvidia.com/gpu: 1}, limits: {nvidia.com/gpu: 2}}
""")
    result = runner.invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    assert f"{bad}:7: Pod default/a" in result.output
    assert f"{bad}:15: Pod default/b" in result.output
    assert "2 error(s)" in result.output


def test_validate_reads_stdin() -> None:
    result = runner.invoke(app, ["validate", "-"], input="apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n")
    assert result.exit_code == 0 and "1 Namespace" in result.output


def test_nodes_render_emits_node_yaml() -> None:
    result = runner.invoke(app, ["nodes", "render", str(REPO / "examples" / "casestudy")])
    assert result.exit_code == 0, result.output
    docs = list(yaml.safe_load_all(result.stdout))
    assert len(docs) == 18 and all(d["kind"] == "Node" for d in docs)
    l40s = next(d for d in docs if d["metadata"]["name"] == "l40s-0")
    assert l40s["status"]["allocatable"]["nvidia.com/gpu.shared"] == "8"


def _layouts(*args: str) -> dict[str, object]:
    result = runner.invoke(app, ["mig", "layouts", *args, "--json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


def _mixes(doc: dict[str, object]) -> set[tuple[tuple[str, int], ...]]:
    out = set()
    for layout in doc["layouts"]:  # type: ignore[attr-defined]
        counts: dict[str, int] = {}
        for p in layout:
            counts[p["profile"]] = counts.get(p["profile"], 0) + 1
        out.add(tuple(sorted(counts.items())))
    return out


def test_mig_layout_counts_from_the_issue() -> None:
    base = "1g.5gb,2g.10gb,3g.20gb,4g.20gb,7g.40gb"
    doc = _layouts("A100-SXM4-40GB", "--profiles", base)
    assert doc["model"] == "A100-SXM4-40GB"
    assert len(doc["layouts"]) == 19 and len(_mixes(doc)) == 14  # type: ignore[arg-type]
    doc = _layouts("A100-SXM4-40GB", "--profiles", base + ",1g.10gb")
    assert len(doc["layouts"]) == 78 and len(_mixes(doc)) == 38  # type: ignore[arg-type]
    doc = _layouts("A30")
    assert len(doc["layouts"]) == 5 and len(_mixes(doc)) == 4  # type: ignore[arg-type]
    first = doc["layouts"][0][0]  # type: ignore[index]
    assert set(first) == {"profile", "start"}


def test_mig_layouts_table_and_unknown_model() -> None:
    result = runner.invoke(app, ["mig", "layouts", "A30"])
    assert result.exit_code == 0 and "5 maximal layouts, 4 distinct mixes" in result.output
    result = runner.invoke(app, ["mig", "layouts", "T4"])
    assert result.exit_code == 2 and "no MIG geometry" in result.output


def test_mig_check() -> None:
    ok = runner.invoke(app, ["mig", "check", "A100-SXM4-80GB", "3g.40gb@0,3g.40gb@4"])
    assert ok.exit_code == 0 and "valid" in ok.output
    bad = runner.invoke(app, ["mig", "check", "A100-SXM4-80GB", "3g.40gb@0,2g.20gb@2"])
    assert bad.exit_code == 1 and "overlap" in bad.output.lower()
    guide = runner.invoke(app, ["mig", "check", "A100-SXM4-80GB", "3g.40gb:2,1g.10gb"])
    assert guide.exit_code == 1


def test_plan_on_the_casestudy_snapshot_places_each_team_on_its_pool() -> None:
    result = runner.invoke(app, ["plan", str(REPO / "examples" / "casestudy"),
                                 str(REPO / "examples" / "plan" / "snapshot.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (cycle,) = doc["cycles"]
    admitted = {a["workload"]: a for a in cycle["admitted"]}
    emb = admitted["production/embeddings"]
    assert emb["clusterQueue"] == "production"
    assert emb["flavors"]["nvidia.com/mig-1g.10gb"] == "a100-mig-1g10gb"
    assert emb["pods"][0]["node"].startswith("a100-b-") and emb["pods"][0]["devices"][0].startswith("MIG-")
    nb = admitted["data-science/notebook-anna"]["pods"][0]
    assert nb["node"].startswith("l40s-") and nb["devices"][0].endswith("::0")
    assert admitted["default/stray"]["clusterQueue"] is None  # no queue: runs without quota
    pending = {p["workload"]: p["reason"] for p in cycle["pending"]}
    assert "research/llm-pretrain" in pending and "h100-full, 4 more needed" in pending["research/llm-pretrain"]
    assert doc["usage"]["research"]["h100-full"]["nvidia.com/gpu"] == "4"  # the running job holds its quota
