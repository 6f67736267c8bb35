"""Write gpufleet's Grafana dashboards, deploy/grafana/*.json, from the panel lists below.

    python hack/gen_dashboards.py          # rewrite the JSON files
    python hack/gen_dashboards.py --check  # exit 1 if a file differs (tests/observability checks it)

Three dashboards, every query against the ``datasource`` variable (a Prometheus):

* **gpufleet / GPU fleet**: per node and GPU, dcgm-exporter's series as the node agent exports them
  (``Hostname``, ``gpu``, ``modelName``, ``pod``...), plus the agent's health and shared-GPU holders;
* **gpufleet / Queues and quotas**: Kueue's view under gpufleet_ names (usage against nominal quota and
  borrowing limit, pending and admitted workloads, admission waits, preemptions), gangs and fragmentation;
* **gpufleet / Cost**: GPU cost per hour per ClusterQueue, node pool and model at the catalog's prices, and
  what idle GPUs cost.

The queue and cost dashboards group by ``run`` as well: live series have no such label, and the runs of
``gpufleet simulate --metrics-out`` (loaded with promtool) each have theirs, so "before" and "after" show
side by side. Edit this file, not the JSON; tests/observability/test_dashboards.py checks every expression
with promtool and against the metric names the exporters really expose.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "deploy" / "grafana"
DS = {"type": "prometheus", "uid": "${datasource}"}
GPU = 'Hostname=~"$Hostname", gpu=~"$gpu"'
RUN = 'run=~"$run"'


@dataclass
class Target:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass
class Panel:
    title: str
    kind: str  # timeseries, stat, table, bargauge
    targets: list[Target]
    unit: str = "short"
    width: int = 12
    height: int = 8
    description: str = ""
    max: float | None = None
    options: dict[str, Any] = field(default_factory=dict)


def ts(title: str, *targets: Target, unit: str = "short", **kw: Any) -> Panel:
    return Panel(title, "timeseries", list(targets), unit, **kw)


def stat(title: str, expr: str, unit: str = "short", **kw: Any) -> Panel:
    return Panel(title, "stat", [Target(expr, instant=True)], unit, width=kw.pop("width", 6), height=4, **kw)


def table(title: str, expr: str, **kw: Any) -> Panel:
    return Panel(title, "table", [Target(expr, instant=True)], width=kw.pop("width", 24), **kw)


def variable(name: str, query: str, label: str | None = None, *, include_all: bool = True) -> dict[str, Any]:
    return {"type": "query", "name": name, "label": label or name, "datasource": DS, "refresh": 2, "sort": 1,
            "query": {"query": query, "refId": f"var-{name}"}, "definition": query, "includeAll": include_all,
            "multi": include_all, "allValue": ".*" if include_all else None,
            "current": {"text": "All", "value": "$__all"} if include_all else {}}


DATASOURCE = {"type": "datasource", "name": "datasource", "label": "Prometheus", "query": "prometheus",
              "current": {}, "hide": 0, "refresh": 1}


def gpu_fleet() -> tuple[str, str, list[dict[str, Any]], list[Panel]]:
    variables = [variable("Hostname", "label_values(DCGM_FI_DEV_GPU_TEMP, Hostname)", "node"),
                 variable("gpu", 'label_values(DCGM_FI_DEV_GPU_TEMP{Hostname=~"$Hostname"}, gpu)', "GPU")]
    panels = [
        stat("GPUs reporting", f"count(DCGM_FI_DEV_GPU_TEMP{{{GPU}}})"),
        stat("Average utilisation", f"avg(DCGM_FI_DEV_GPU_UTIL{{{GPU}}})", "percent", max=100),
        stat("Power draw", f"sum(DCGM_FI_DEV_POWER_USAGE{{{GPU}}})", "watt"),
        stat("Devices Unhealthy (XID)", 'sum(gpufleet_node_unhealthy_devices{reason="xid"}) or vector(0)'),
        ts("GPU utilisation", Target(f"DCGM_FI_DEV_GPU_UTIL{{{GPU}}}", "{{Hostname}} GPU {{gpu}}"), unit="percent",
           max=100),
        ts("Graphics engine active", Target(f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{GPU}}}", "{{Hostname}} GPU {{gpu}}"),
           unit="percentunit", max=1, description="Fraction of time any SM was busy (profiling metric; GPUs and "
           "drivers without it show nothing)."),
        ts("Framebuffer used", Target(f"DCGM_FI_DEV_FB_USED{{{GPU}}} / (DCGM_FI_DEV_FB_USED{{{GPU}}} + "
                                      f"DCGM_FI_DEV_FB_FREE{{{GPU}}})", "{{Hostname}} GPU {{gpu}}"),
           unit="percentunit", max=1),
        ts("Memory copy utilisation", Target(f"DCGM_FI_DEV_MEM_COPY_UTIL{{{GPU}}}", "{{Hostname}} GPU {{gpu}}"),
           unit="percent", max=100),
        ts("GPU temperature", Target(f"DCGM_FI_DEV_GPU_TEMP{{{GPU}}}", "{{Hostname}} GPU {{gpu}}"),
           Target(f"DCGM_FI_DEV_MEMORY_TEMP{{{GPU}}}", "{{Hostname}} GPU {{gpu}} memory"), unit="celsius"),
        ts("Power", Target(f"DCGM_FI_DEV_POWER_USAGE{{{GPU}}}", "{{Hostname}} GPU {{gpu}}"), unit="watt"),
        ts("SM clock", Target(f"DCGM_FI_DEV_SM_CLOCK{{{GPU}}} * 1000000", "{{Hostname}} GPU {{gpu}}"),
           unit="hertz"),
        ts("Memory clock", Target(f"DCGM_FI_DEV_MEM_CLOCK{{{GPU}}} * 1000000", "{{Hostname}} GPU {{gpu}}"),
           unit="hertz"),
        table("GPUs allocated to pods (PodResources)",
              f'max by (Hostname, gpu, modelName, GPU_I_PROFILE, namespace, pod, container) '
              f'(DCGM_FI_DEV_GPU_UTIL{{{GPU}, pod!=""}})',
              description="Utilisation (%) of every GPU or MIG instance the kubelet gave a pod."),
        table("Shared GPUs: each holder's share and declared memory",
              'sum by (Hostname, gpu, namespace, pod, kind) (gpufleet_node_gpu_holder_share{Hostname=~"$Hostname", '
              'gpu=~"$gpu"})',
              description="Fractional pods and time-slice replicas on one GPU: the share each holds (a replica of "
              "4 is 0.25)."),
        ts("Declared memory per holder", Target('gpufleet_node_gpu_holder_memory_bytes{Hostname=~"$Hostname", '
                                                'gpu=~"$gpu"}', "{{namespace}}/{{pod}} on {{Hostname}} GPU {{gpu}}"),
           unit="bytes"),
        ts("XID errors", Target('sum by (instance, xid, effect) (increase(gpufleet_node_xid_events_total[1h]))',
                                "{{instance}} XID {{xid}} ({{effect}})"),
           Target(f"DCGM_FI_DEV_XID_ERRORS{{{GPU}}}", "last XID {{Hostname}} GPU {{gpu}}"), unit="short"),
        ts("ECC and row remapping", Target(f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{GPU}}}", "DBE {{Hostname}} GPU {{gpu}}"),
           Target(f"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{GPU}}}", "SBE {{Hostname}} GPU {{gpu}}"),
           Target(f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{GPU}}}", "uncorrectable remaps {{Hostname}} GPU {{gpu}}"),
           Target(f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{GPU}}}", "remap failure {{Hostname}} GPU {{gpu}}")),
        ts("Energy", Target(f"rate(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{GPU}}}[$__rate_interval]) / 1000",
                            "{{Hostname}} GPU {{gpu}}"), unit="watt",
           description="Average power from the energy counter (mJ), which misses no spike between scrapes."),
    ]
    return "gpufleet-gpus", "gpufleet / GPU fleet", variables, panels


def queues() -> tuple[str, str, list[dict[str, Any]], list[Panel]]:
    cq = f'cluster_queue=~"$cluster_queue", {RUN}'
    res = f'{cq}, resource="$resource"'
    variables = [variable("run", "label_values(gpufleet_gpus_capacity, run)", "run (simulated)"),
                 variable("cluster_queue", "label_values(gpufleet_cluster_queue_nominal_quota, cluster_queue)",
                          "ClusterQueue"),
                 {**variable("resource", "label_values(gpufleet_cluster_queue_nominal_quota, resource)",
                             include_all=False), "current": {"text": "nvidia.com/gpu", "value": "nvidia.com/gpu"}}]
    panels = [
        stat("Pending workloads", f"sum(gpufleet_pending_workloads{{{cq}}}) or vector(0)"),
        stat("Admitted workloads", f"sum(gpufleet_admitted_active_workloads{{{cq}}}) or vector(0)"),
        stat("Admission wait p95 (1h)",
             f"histogram_quantile(0.95, sum by (le) (rate(gpufleet_admission_wait_time_seconds_bucket{{{cq}}}[1h])))",
             "s"),
        stat("Fragmented GPUs", f"sum(gpufleet_fragmented_gpus{{{RUN}}}) / sum(gpufleet_gpus_capacity{{{RUN}}})",
             "percentunit", max=1),
        ts("Usage against nominal quota and borrowing limit ($resource)",
           Target(f"sum by (run, cluster_queue) (gpufleet_cluster_queue_resource_usage{{{res}}})",
                  "{{cluster_queue}} usage {{run}}"),
           Target(f"sum by (run, cluster_queue) (gpufleet_cluster_queue_nominal_quota{{{res}}})",
                  "{{cluster_queue}} nominal {{run}}"),
           Target(f"sum by (run, cluster_queue) (gpufleet_cluster_queue_nominal_quota{{{res}}} + "
                  f"gpufleet_cluster_queue_borrowing_limit{{{res}}}) < Inf",
                  "{{cluster_queue}} nominal + borrowing limit {{run}}"),
           width=24, description="Per ClusterQueue; the borrowing line shows only where a limit is set."),
        Panel("Usage of nominal quota ($resource)", "bargauge",
              [Target(f"sum by (cluster_queue) (gpufleet_cluster_queue_resource_usage{{{res}}}) / "
                      f"sum by (cluster_queue) (gpufleet_cluster_queue_nominal_quota{{{res}}} > 0)",
                      "{{cluster_queue}}", instant=True)], "percentunit", width=12,
              description="Over 100%: borrowing from the cohort."),
        ts("Pending workloads by status", Target(f"sum by (run, cluster_queue, status) "
                                                 f"(gpufleet_pending_workloads{{{cq}}})",
                                                 "{{cluster_queue}} {{status}} {{run}}")),
        ts("Pending workloads by reason", Target(f'sum by (run, reason) (gpufleet_pending_workloads{{{cq}}})',
                                                 "{{reason}} {{run}}")),
        ts("Admitted (active) workloads", Target(f"sum by (run, cluster_queue) "
                                                 f"(gpufleet_admitted_active_workloads{{{cq}}})",
                                                 "{{cluster_queue}} {{run}}")),
        ts("Admission wait (p50, p95)",
           Target(f"histogram_quantile(0.5, sum by (run, cluster_queue, le) "
                  f"(rate(gpufleet_admission_wait_time_seconds_bucket{{{cq}}}[$__rate_interval])))",
                  "{{cluster_queue}} p50 {{run}}"),
           Target(f"histogram_quantile(0.95, sum by (run, cluster_queue, le) "
                  f"(rate(gpufleet_admission_wait_time_seconds_bucket{{{cq}}}[$__rate_interval])))",
                  "{{cluster_queue}} p95 {{run}}"), unit="s"),
        ts("Admissions per minute", Target(f"sum by (run, cluster_queue) "
                                           f"(rate(gpufleet_admitted_workloads_total{{{cq}}}[$__rate_interval])) * 60",
                                           "{{cluster_queue}} {{run}}")),
        ts("Preemptions and evictions",
           Target('sum by (preempting_cluster_queue, reason) (increase(gpufleet_preempted_workloads_total'
                  '{preempting_cluster_queue=~"$cluster_queue"}[$__rate_interval]))',
                  "preempted by {{preempting_cluster_queue}}: {{reason}}"),
           Target(f"sum by (run, cluster_queue, reason) "
                  f"(increase(gpufleet_evicted_workloads_total{{{cq}}}[$__rate_interval]))",
                  "evicted from {{cluster_queue}}: {{reason}} {{run}}")),
        table("Gangs waiting", f"max by (cluster_queue, namespace, workload) "
                               f"(gpufleet_gang_pending_seconds{{{cq}}})", width=12,
              description="Seconds each pending gang has waited."),
        ts("Gang wait p95", Target(f"histogram_quantile(0.95, sum by (cluster_queue, le) "
                                   f"(rate(gpufleet_gang_wait_seconds_bucket{{{cq}}}[$__rate_interval])))",
                                   "{{cluster_queue}}"), unit="s"),
        ts("GPUs held, idle and fragmented per node pool",
           Target(f"sum by (run, node_pool) (gpufleet_gpus_held{{{RUN}}})", "{{node_pool}} held {{run}}"),
           Target(f"sum by (run, node_pool) (gpufleet_gpus_idle{{{RUN}}})", "{{node_pool}} idle {{run}}"),
           Target(f"sum by (run, node_pool) (gpufleet_fragmented_gpus{{{RUN}}})",
                  "{{node_pool}} fragmented {{run}}"), width=24),
        ts("GPUs held per model", Target(f"sum by (run, model) (gpufleet_gpus_held{{{RUN}}}) / "
                                         f"sum by (run, model) (gpufleet_gpus_capacity{{{RUN}}})",
                                         "{{model}} {{run}}"), unit="percentunit", max=1),
        ts("Scheduler: cycle duration p99 and failures",
           Target("histogram_quantile(0.99, sum by (le) (rate(gpufleet_cycle_duration_seconds_bucket"
                  "[$__rate_interval])))", "cycle p99 (s)"),
           Target("sum(increase(gpufleet_cycle_failures_total[$__rate_interval]))", "failed cycles"),
           Target("sum(gpufleet_is_leader)", "leaders")),
    ]
    return "gpufleet-queues", "gpufleet / Queues and quotas", variables, panels


def cost() -> tuple[str, str, list[dict[str, Any]], list[Panel]]:
    cq = f'cluster_queue=~"$cluster_queue", {RUN}'
    variables = [variable("run", "label_values(gpufleet_gpus_capacity, run)", "run (simulated)"),
                 variable("cluster_queue", "label_values(gpufleet_cluster_queue_cost_per_hour, cluster_queue)",
                          "ClusterQueue")]
    idle_cost = (f"sum by (run, node_pool, model) (gpufleet_gpus_idle{{{RUN}}} * on (run, model) group_left "
                 f"gpufleet_gpu_price_per_hour{{{RUN}}})")
    panels = [
        stat("Cost per hour (now)", f"sum(gpufleet_cluster_queue_cost_per_hour{{{cq}}})", "currencyUSD"),
        stat("GPUs held (now)", f"sum(gpufleet_cluster_queue_gpus_held{{{cq}}})"),
        stat("Idle GPUs cost per hour (now)", f"sum({idle_cost})", "currencyUSD"),
        stat("Cost over the time range",
             f"sum(avg_over_time(gpufleet_cluster_queue_cost_per_hour{{{cq}}}[$__range])) * $__range_s / 3600",
             "currencyUSD"),
        ts("Cost per hour by ClusterQueue", Target(f"sum by (run, cluster_queue) "
                                                   f"(gpufleet_cluster_queue_cost_per_hour{{{cq}}})",
                                                   "{{cluster_queue}} {{run}}"), unit="currencyUSD", width=24),
        ts("Cost per hour by GPU model", Target(f"sum by (run, model) (gpufleet_cluster_queue_cost_per_hour{{{cq}}})",
                                                "{{model}} {{run}}"), unit="currencyUSD"),
        ts("What idle GPUs cost per hour", Target(idle_cost, "{{node_pool}} {{model}} {{run}}"), unit="currencyUSD"),
        table("Cost and GPU-hours per ClusterQueue over the time range",
              f"sum by (run, cluster_queue) (avg_over_time(gpufleet_cluster_queue_cost_per_hour{{{cq}}}[$__range])) "
              f"* $__range_s / 3600", width=12),
        table("GPU-hours per ClusterQueue and model over the time range",
              f"sum by (run, cluster_queue, model) (avg_over_time(gpufleet_cluster_queue_gpus_held{{{cq}}}"
              f"[$__range])) * $__range_s / 3600", width=12),
        table("Prices per GPU-hour (catalog)", "max by (model) (gpufleet_gpu_price_per_hour)", width=12),
    ]
    return "gpufleet-cost", "gpufleet / Cost", variables, panels


def _panel(panel: Panel, pid: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit}
    if panel.max is not None:
        defaults["min"], defaults["max"] = 0, panel.max
    if panel.kind == "timeseries":
        # Simulated runs are sampled every few minutes: lines are drawn across the gaps.
        defaults["custom"] = {"spanNulls": True, "lineWidth": 1, "fillOpacity": 0}
    targets = []
    for i, t in enumerate(panel.targets):
        target: dict[str, Any] = {"datasource": DS, "refId": chr(ord("A") + i), "expr": t.expr,
                                  "legendFormat": t.legend or "__auto", "range": not t.instant, "instant": t.instant}
        if panel.kind == "table":
            target["format"] = "table"
        targets.append(target)
    out: dict[str, Any] = {"id": pid, "type": panel.kind, "title": panel.title, "datasource": DS,
                           "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
                           "fieldConfig": {"defaults": defaults, "overrides": []}, "targets": targets,
                           "options": panel.options}
    if panel.description:
        out["description"] = panel.description
    if panel.kind == "table":
        out["transformations"] = [{"id": "organize", "options": {"excludeByName": {"Time": True}}}]
    return out


def dashboard(uid: str, title: str, variables: list[dict[str, Any]], panels: list[Panel]) -> dict[str, Any]:
    laid: list[dict[str, Any]] = []
    x = y = row_height = 0
    for pid, panel in enumerate(panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        laid.append(_panel(panel, pid, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return {"uid": uid, "title": title, "tags": ["gpufleet"], "editable": True, "schemaVersion": 39, "version": 1,
            "timezone": "browser", "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
            "annotations": {"list": []}, "links": [],
            "templating": {"list": [DATASOURCE, *variables]}, "panels": laid}


DASHBOARDS = {"gpufleet-gpus.json": gpu_fleet, "gpufleet-queues.json": queues, "gpufleet-cost.json": cost}


def rendered() -> dict[Path, str]:
    return {OUT / name: json.dumps(dashboard(*build()), indent=2, ensure_ascii=False) + "\n"
            for name, build in DASHBOARDS.items()}


def main(argv: list[str]) -> int:
    wanted = rendered()
    stale = [p for p, text in wanted.items() if not p.exists() or p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(ROOT)} differs from hack/gen_dashboards.py: run python hack/gen_dashboards.py")
        return 1 if stale else 0
    OUT.mkdir(parents=True, exist_ok=True)
    for p in stale:
        p.write_text(wanted[p])
        print(f"wrote {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
