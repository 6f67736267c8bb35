"""The dashboard over examples/dra: the GPUs the ResourceSlices publish are the fleet's, and each claimed pod sits on
the devices ``gpufleet plan`` gives its claims (the dashboard plans the files with the same code)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.api.manifests import load_manifests
from gpufleet.cli.main import app
from gpufleet.web.server import Dashboard
from gpufleet.web.source_files import FilesSource
from tests.conftest import REPO
from tests.web.helpers import get, serving
from tests.web.test_api import check

EXAMPLE = REPO / "examples" / "dra"


@pytest.fixture(scope="module")
def dra_dashboard() -> Iterator[Dashboard]:
    with serving(FilesSource(load_manifests([str(EXAMPLE)]), "examples/dra")) as dashboard:
        yield dashboard


def _published() -> dict[tuple[str, str], dict[str, str]]:
    """(pool, device name) -> the device's string attributes, from the example's slices."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    for doc in yaml.safe_load_all((EXAMPLE / "slices.yaml").read_text(encoding="utf-8")):
        if not doc or doc.get("kind") != "ResourceSlice":
            continue
        for d in doc["spec"]["devices"]:
            attrs = {k: v["string"] for k, v in d["attributes"].items() if "string" in v}
            out[(doc["spec"]["pool"]["name"], d["name"])] = attrs
    return out


def _planned_pods() -> dict[str, dict[str, Any]]:
    got = CliRunner().invoke(app, ["plan", str(EXAMPLE), "--until-stable", "-o", "json"])
    assert got.exit_code == 0, got.output
    doc = json.loads(got.stdout)
    return {p["pod"]: p for c in doc["cycles"] for a in c["admitted"] for p in a["pods"]}


def test_dra_gpus_and_claimed_pods_are_shown_as_planned(dra_dashboard: Dashboard) -> None:
    published = _published()
    overview = check("/api/overview", get(dra_dashboard, "/api/overview"))
    parents = {a.get("parentUUID", a["uuid"]) for a in published.values()}
    assert overview["counts"]["nodes"] == 2 and overview["counts"]["gpus"] == len(parents)

    # Every GPU and MIG device of the fleet is one the slices publish, under its UUID.
    fleet = check("/api/fleet", get(dra_dashboard, "/api/fleet"))
    nodes = {n["name"]: n for n in fleet["nodes"]}
    assert set(nodes) == {pool for pool, _ in published}
    shown: dict[str, tuple[str, dict[str, Any]]] = {}  # device id -> (node, its slice)
    for name, node in nodes.items():
        for gpu in node["gpus"]:
            assert gpu["id"] in parents
            for s in gpu["slices"]:
                shown[s["id"]] = (name, s)
    by_uuid = {a["uuid"]: (pool, device, a) for (pool, device), a in published.items()}
    assert set(shown) == set(by_uuid)
    for uuid, (node, s) in shown.items():
        pool, _, attrs = by_uuid[uuid]
        assert node == pool and s["kind"] == attrs["type"].replace("gpu", "whole")
        if s["kind"] == "mig":
            assert s["profile"] == attrs["profile"]

    # Each claimed pod: on the node and devices gpufleet plan gives its claims, drawn there as planned.
    planned = _planned_pods()
    claimed = {k: p for k, p in planned.items() if p.get("claims")}
    assert claimed, "examples/dra places no claimed pod"
    workloads = {w["key"]: w for w in check("/api/workloads", get(dra_dashboard, "/api/workloads"))["workloads"]}
    for key, pod in claimed.items():
        uuids = [published[(c["pool"], c["device"])]["uuid"] for c in pod["claims"]]
        assert pod["devices"] == uuids
        for uuid in uuids:
            node, s = shown[uuid]
            assert node == pod["node"] and s["holder"] == key and s["state"] == "planned"
        [(workload, shown_pod)] = [(w, pods[key]) for w in workloads.values()
                                   if key in (pods := _pod_keys(dra_dashboard, w))]
        assert workload["status"] == "admitted" and shown_pod["state"] == "planned"
        assert shown_pod["node"] == pod["node"] and shown_pod["devices"] == uuids
        # its GPUs come from its claims: counted and said, as for a device-plugin pod
        assert workload["gpus"] > 0 and workload["device"]


def _pod_keys(dashboard: Dashboard, workload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The workload's pods as its detail page lists them, by key."""
    path = f"/api/workloads/{workload['namespace']}/{workload['name']}"
    detail = check("/api/workloads/{namespace}/{name}", get(dashboard, path))["workload"]
    return {p["key"]: p for p in detail["pods"]}


def test_a_carved_dynamic_mig_gpu_shows_its_carved_devices(tmp_path: Any) -> None:
    from tests.dra.dynamic_mig import CLASSES, dynamic_mig_slices, node, profile_template

    pod = ("---\napiVersion: v1\nkind: Pod\nmetadata: {name: small, namespace: ml}\nspec:\n"
           "  resourceClaims: [{name: gpus, resourceClaimTemplateName: three-g}]\n"
           "  containers: [{name: c, image: x, resources: {requests: {cpu: '1'}, claims: [{name: gpus}]}}]\n")
    path = tmp_path / "dynamic.yaml"
    path.write_text(node("n1") + dynamic_mig_slices("n1", gpus=2) + CLASSES
                    + profile_template("three-g", "3g.40gb") + pod, encoding="utf-8")
    with serving(FilesSource(load_manifests([str(path)]), "dynamic")) as dashboard:
        fleet = check("/api/fleet", get(dashboard, "/api/fleet"))
    gpus = [g for n in fleet["nodes"] for g in n["gpus"]]
    carved = [g for g in gpus if g["mode"] == "mig"]
    assert len(gpus) == 2 and len(carved) == 1
    (device,) = carved[0]["slices"]
    assert (device["kind"], device["profile"], device["start"], device["holder"]) == ("mig", "3g.40gb", 0, "ml/small")
