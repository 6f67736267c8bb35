"""The OpenAPI 3.1 document of the dashboard's JSON API, served at ``/api/openapi.json``.

Written by hand next to :mod:`gpufleet.web.api`, and held to it by a test that calls every operation (with
parameters drawn from these schemas) and validates each answer against the schema of its status.
"""

from __future__ import annotations

from typing import Any

import gpufleet
from gpufleet.web.api import DEFAULT_NODE_LIMIT, DEFAULT_WORKLOAD_LIMIT, MAX_LIMIT, NODE_PROBLEMS, WORKLOAD_STATUSES
from gpufleet.web.schema_check import BOOL, INT, NINT, NNUM, NSTR, NUM, STR
from gpufleet.web.schema_check import array as _list
from gpufleet.web.schema_check import obj as _obj
from gpufleet.web.schema_check import ref as _ref
from gpufleet.web.whatif import SCHEMAS as WHATIF_SCHEMAS

Schema = dict[str, Any]
SLICE_STATE: Schema = {"enum": ["free", "running", "idle", "planned"]}

WORKLOAD_FIELDS: dict[str, Schema] = {
    "key": STR, "namespace": STR, "name": STR, "kind": STR, "localQueue": NSTR, "clusterQueue": NSTR, "priority": INT,
    "status": {"enum": list(WORKLOAD_STATUSES)}, "reason": STR, "gpus": NUM, "device": STR,
    "pods": INT}

SCHEMAS: dict[str, Schema] = {
    "Error": _obj({"message": STR}),
    "Overview": _obj({"source": {"enum": ["files", "live", "simulation"]}, "title": STR, "version": INT,
                      "pages": _list({"enum": ["fleet", "queues", "workloads", "whatif"]}), "generated": NNUM,
                      "notes": _list(STR),
                      "counts": {"oneOf": [{"type": "null"}, _obj({k: INT for k in (
                          "nodes", "gpus", "pools", "clusterQueues", "workloads", "pending")})]}}),
    "Slice": _obj({"kind": {"enum": ["whole", "mig", "replica", "fraction"]}, "id": STR, "state": SLICE_STATE,
                   "start": INT, "size": INT},
                  {"holder": STR, "workload": NSTR, "queue": NSTR, "profile": STR, "memoryMiB": INT}),
    "Gpu": _obj({"index": INT, "id": STR, "model": STR, "memoryMiB": INT,
                 "mode": {"enum": ["whole", "replicas", "mig"]}, "healthy": BOOL, "units": INT, "idle": BOOL,
                 "slices": _list(_ref("Slice"))}),
    "Node": _obj({"name": STR, "pool": STR, "model": NSTR, "ready": BOOL, "unschedulable": BOOL, "pods": INT,
                  "cpu": _obj({"used": INT, "allocatable": INT}), "memory": _obj({"used": INT, "allocatable": INT}),
                  "gpus": _list(_ref("Gpu"))}),
    "Pool": _obj({"name": STR, "models": _list(STR), "nodes": INT, "gpus": INT, "held": NUM, "idle": INT,
                  "unhealthy": INT}),
    "Fleet": _obj({"version": INT, "pools": _list(_ref("Pool")), "models": _list(STR), "queues": _list(STR),
                   "total": INT, "offset": INT, "limit": INT, "nodes": _list(_ref("Node"))}),
    "NodeAnswer": _obj({"version": INT, "node": _ref("Node")}),
    "Quota": _obj({"flavor": STR, "resource": STR, "nominal": STR, "usage": STR, "borrowed": STR,
                   "borrowingLimit": NSTR, "lendingLimit": NSTR,
                   "units": _obj({"nominal": INT, "usage": INT, "borrowingLimit": NINT, "lendingLimit": NINT})}),
    "ClusterQueue": _obj({"name": STR, "cohort": NSTR, "strategy": STR, "fairWeight": NUM, "fairShare": INT,
                          "pending": INT, "admitted": INT, "stopped": BOOL, "quotas": _list(_ref("Quota"))}),
    "Cohort": _obj({"name": STR, "parent": NSTR, "fairWeight": NUM, "fairShare": INT, "cohorts": _list(STR),
                    "clusterQueues": _list(STR), "quotas": _list(_ref("Quota"))}),
    "Queues": _obj({"version": INT, "clusterQueues": _list(_ref("ClusterQueue")), "cohorts": _list(_ref("Cohort"))}),
    "WorkloadSummary": _obj(WORKLOAD_FIELDS),
    "Workloads": _obj({"version": INT, "total": INT, "offset": INT, "limit": INT,
                       "workloads": _list(_ref("WorkloadSummary"))}),
    "Pod": _obj({"key": STR, "node": NSTR, "devices": _list(STR), "phase": STR, "state": SLICE_STATE}),
    "Preemption": _obj({"when": STR, "preemptor": STR, "reason": STR}),
    "Workload": _obj({**WORKLOAD_FIELDS, "pods": _list(_ref("Pod")),
                      "flavors": {"type": "object", "additionalProperties": STR},
                      "preemptions": _list(_ref("Preemption"))}),
    "WorkloadAnswer": _obj({"version": INT, "workload": _ref("Workload")}),
    "Run": {"type": "object", "description": "One run of gpufleet simulate --json, as simulate wrote it.",
            "required": ["scenario", "policy", "kpis", "per_queue", "per_team", "per_pool", "series", "timeline",
                         "run"],
            "properties": {"scenario": STR, "policy": STR, "kpis": {"type": "object"},
                           "per_queue": {"type": "object"}, "per_team": {"type": "object"},
                           "per_pool": {"type": "object"}, "series": {"type": "object"},
                           "timeline": _obj({"t": _list(NUM), "nodes": {"type": "object"},
                                             "jobs_waiting": _list(INT), "jobs_running": _list(INT),
                                             "fragmentation_pct": _list(NNUM), "wait_quantiles": {"type": "object"}},
                                            extra=True),
                           "run": {"type": "object"}}},
    **WHATIF_SCHEMAS,  # an advice and a calibration beside the runs (web/whatif.py)
    "Simulation": _obj({"version": INT, "title": STR,
                        "pair": {"oneOf": [{"type": "null"}, {"type": "array", "items": INT, "minItems": 2,
                                                               "maxItems": 2}]},
                        "runs": _list(_ref("Run")),
                        "kpiRows": _list(_obj({"key": STR, "name": STR, "better": INT})),
                        "advice": {"oneOf": [{"type": "null"}, _ref("Advice")]},
                        "calibration": {"oneOf": [{"type": "null"}, _ref("Calibration")]}}),
}


def _param(name: str, schema: Schema, description: str, where: str = "query") -> Schema:
    return {"name": name, "in": where, "required": where == "path", "schema": schema, "description": description}


def _paging(default: int) -> list[Schema]:
    return [_param("offset", {"type": "integer", "minimum": 0, "default": 0}, "Items to skip."),
            _param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": default},
                   "Items to return.")]


def _get(summary: str, schema: str, params: list[Schema] | None = None, *, errors: tuple[int, ...] = (400, 404),
         ) -> Schema:
    responses: dict[str, Schema] = {"200": {"description": "OK", "content": {
        "application/json": {"schema": _ref(schema)}}}}
    for code in errors:
        responses[str(code)] = {"description": {400: "A query parameter is wrong", 404: "Not found, or not "
                                                "shown by this source"}[code],
                                "content": {"application/json": {"schema": _ref("Error")}}}
    return {"get": {"summary": summary, "operationId": schema[0].lower() + schema[1:], "parameters": params or [],
                    "responses": responses}}


def document() -> dict[str, Any]:
    text = {"type": "string", "maxLength": 256}
    return {
        "openapi": "3.1.0",
        "info": {"title": "gpufleet dashboard API", "version": gpufleet.__version__,
                 "description": "Read-only. Every page of the dashboard is built from these answers. Each answer "
                                "carries the source's version; GET /api/events streams the version as server-sent "
                                "events (event: version) whenever it moves."},
        "paths": {
            "/api/overview": _get("What the dashboard shows: its source, pages, counts and notes.", "Overview",
                                  errors=()),
            "/api/fleet": _get("Node pools and nodes with their GPUs and devices, filtered and paged.", "Fleet", [
                _param("node", text, "Only the node of this name."),
                _param("model", text, "Only nodes of this GPU model."),
                _param("pool", text, "Only nodes of this node pool."),
                _param("queue", text, "Only nodes where a pod of this ClusterQueue holds a device."),
                _param("problem", {"enum": list(NODE_PROBLEMS)}, "Only nodes with unhealthy GPUs, allocated but "
                       "idle GPUs, or that are not ready or cordoned."), *_paging(DEFAULT_NODE_LIMIT)]),
            "/api/nodes/{name}": _get("One node.", "NodeAnswer", [_param("name", text, "Node name.", "path")],
                                      errors=(404,)),
            "/api/queues": _get("ClusterQueues (quota, usage, borrowing and lending limits per flavor and resource, "
                                "pending and admitted counts, fair share) and the cohort tree.", "Queues",
                                errors=(404,)),
            "/api/workloads": _get("Workloads, searched and paged.", "Workloads", [
                _param("q", text, "Text in the key, kind, queues or pending reason (case-insensitive)."),
                _param("status", {"enum": list(WORKLOAD_STATUSES)}, "Only workloads in this state."),
                _param("queue", text, "Only workloads of this ClusterQueue or LocalQueue."),
                _param("namespace", text, "Only workloads of this namespace."), *_paging(DEFAULT_WORKLOAD_LIMIT)]),
            "/api/workloads/{namespace}/{name}": _get(
                "One workload: why it waits, its pods and their devices, its preemptions.", "WorkloadAnswer",
                [_param("namespace", text, "Namespace.", "path"), _param("name", text, "Name.", "path")],
                errors=(404,)),
            "/api/simulation": _get("The simulation result: every run with its KPIs, per-queue and per-team figures, "
                                    "pool series and timeline; the before/after pair; an advice's proposal, "
                                    "scores, reasons and files (gpufleet advise's whatif.json), or a calibration's "
                                    "fit (simulate --calibrate), else null.", "Simulation", errors=(404,)),
            "/api/events": {"get": {"summary": "Server-sent events: 'version' with {\"version\": N} at once and "
                                               "whenever the source's views change; comments keep it open.",
                                    "operationId": "events", "parameters": [],
                                    "responses": {"200": {"description": "An event stream",
                                                          "content": {"text/event-stream": {"schema": STR}}},
                                                  "503": {"description": "Too many streams are open",
                                                          "content": {"application/json": {
                                                              "schema": _ref("Error")}}}}}},
        },
        "components": {"schemas": SCHEMAS},
    }
