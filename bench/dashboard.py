"""The dashboard at 5,000 nodes x 8 GPUs (issue 17): how long the view takes to build, how large the answers
are, and how long the Fleet page takes to load in headless Chromium, each against a 50-node fleet built and
served the same way in the same process (the baseline).

The fleet: NodePools of 8-GPU H100 nodes (whole GPUs) and 8-GPU A100 nodes with MIG (3g.40gb x2 per GPU), in
ClusterQueues over one cohort, with a Job of 8 pods x 8 GPUs per 50 nodes and a fractional pod per 100 nodes
(so the plan places pods, and the pages draw holders). Run: .venv/bin/python bench/dashboard.py
"""

from __future__ import annotations

import gzip
import json
import resource
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpufleet.api.manifests import load_manifest_text
from gpufleet.web.server import Dashboard
from gpufleet.web.source_files import FilesSource

CHROMIUM = "/usr/bin/chromium"


def manifests(nodes: int) -> str:
    half = nodes // 2
    docs = [f"""
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {{name: h100}}
spec: {{count: {half}, namePrefix: h100, gpu: {{model: H100-SXM5-80GB, count: 8}}, cpu: "128", memory: 2Ti}}
---
apiVersion: gpufleet.io/v1alpha1
kind: NodePool
metadata: {{name: a100-mig}}
spec:
  count: {nodes - half}
  namePrefix: a100
  gpu: {{model: A100-SXM4-80GB, count: 8, migLayout: "3g.40gb:2"}}
  cpu: "128"
  memory: 2Ti
  sharing: {{migStrategy: mixed}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {{name: h100}}
spec: {{nodeLabels: {{gpufleet.io/node-pool: h100}}}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {{name: train}}
spec:
  cohort: all
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {{name: cpu, nominalQuota: "{half * 128}"}}
      - {{name: memory, nominalQuota: "{half * 2}Ti"}}
      - {{name: nvidia.com/gpu, nominalQuota: "{half * 8}"}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {{name: train, namespace: ml}}
spec: {{clusterQueue: train}}
"""]
    for i in range(max(1, nodes // 50)):
        docs.append(f"""
apiVersion: batch/v1
kind: Job
metadata: {{name: train-{i}, namespace: ml, labels: {{kueue.x-k8s.io/queue-name: train}}}}
spec:
  parallelism: 8
  completions: 8
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: m, image: x, resources: {{limits: {{nvidia.com/gpu: 8, cpu: "8", memory: 64Gi}}}}}}]
""")
    for i in range(max(1, nodes // 100)):
        docs.append(f"""
apiVersion: v1
kind: Pod
metadata: {{name: notebook-{i}, namespace: ml, labels: {{kueue.x-k8s.io/queue-name: train}},
           annotations: {{gpufleet.io/gpu-fraction: "0.25"}}}}
spec: {{containers: [{{name: m, image: x, resources: {{limits: {{cpu: "1", memory: 4Gi}}}}}}]}}
""")
    return "---\n".join(docs)


def page_load_ms(url: str, runs: int = 3) -> float:
    from playwright.sync_api import sync_playwright

    best = float("inf")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for _ in range(runs):
                started = time.perf_counter()
                page.goto(url + "/fleet")
                page.wait_for_selector("#nodes .node", timeout=120_000)
                best = min(best, (time.perf_counter() - started) * 1000)
        finally:
            browser.close()
    return best


def measure(nodes: int) -> dict[str, float]:
    text = manifests(nodes)
    started = time.perf_counter()
    m = load_manifest_text(text)
    assert not m.problems.errors, [str(e) for e in m.problems.errors[:3]]
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    source = FilesSource(m, f"{nodes} nodes")
    view_s = time.perf_counter() - started
    out: dict[str, float] = {"nodes": nodes, "gpus": sum(len(n.gpus) for n in source.cluster().nodes),
                             "load_s": load_s, "plan_and_view_s": view_s}
    dashboard = Dashboard(source, "127.0.0.1", 0)
    dashboard.start()
    try:
        for path, key in (("/api/fleet", "fleet"), ("/api/overview", "overview"), ("/api/queues", "queues"),
                          ("/api/workloads", "workloads")):
            started = time.perf_counter()
            body = httpx.get(dashboard.url + path, timeout=120).content
            out[f"{key}_ms"] = (time.perf_counter() - started) * 1000
            out[f"{key}_bytes"] = len(body)
            out[f"{key}_gzip_bytes"] = len(gzip.compress(body, 5))
        assert json.loads(httpx.get(dashboard.url + "/api/fleet", timeout=120).content)["total"] == nodes
        out["fleet_page_ms"] = page_load_ms(dashboard.url)
    finally:
        dashboard.stop()
    return out


def main() -> None:
    baseline = measure(50)
    large = measure(5000)
    print(f"{'figure':<24}{'50 nodes':>14}{'5,000 nodes':>14}{'ratio':>9}")
    for key in baseline:
        b, v = baseline[key], large[key]
        ratio = v / b if b else float("nan")
        print(f"{key:<24}{b:>14,.1f}{v:>14,.1f}{ratio:>9.2f}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main()
