"""The JSON API under ``/api/``: a path and its query → a status and a document, from a data source's views.

Pure functions over :mod:`gpufleet.web.contract`'s views, no HTTP: the server (:mod:`gpufleet.web.server`) sends
what these return, the pages are built from them, and :mod:`gpufleet.web.openapi` describes them (a test holds
every answer to that description). Lists are filtered and paged here, so a page never receives a whole
5,000-node fleet: the fleet's nodes come ``limit`` at a time (at most :data:`MAX_LIMIT`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from gpufleet.sim.report.build import KPI_ROWS
from gpufleet.web.contract import ClusterView, DataSource, NodeView, WorkloadView
from gpufleet.web.whatif import advice_answer, calibration_answer

MAX_LIMIT = 500
DEFAULT_NODE_LIMIT = 100
DEFAULT_WORKLOAD_LIMIT = 100
MAX_QUERY_VALUE = 256  # characters of one query value
NODE_PROBLEMS = ("unhealthy", "idle", "notready")
WORKLOAD_STATUSES = ("admitted", "pending", "finished", "deactivated")

Doc = dict[str, Any]


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    doc: Doc


def _one(query: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = query.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise ApiError(400, f"query parameter {name!r} given {len(values)} times; give it once")
    value = values[0]
    if len(value) > MAX_QUERY_VALUE:
        raise ApiError(400, f"query parameter {name!r} is {len(value)} characters long; at most {MAX_QUERY_VALUE}")
    return value or None


def _int(query: Mapping[str, Sequence[str]], name: str, default: int, low: int, high: int) -> int:
    text = _one(query, name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit():
        raise ApiError(400, f"query parameter {name!r}: {text[:40]!r} is not a whole number")
    value = int(text)
    if not low <= value <= high:
        raise ApiError(400, f"query parameter {name!r}: {value} is not between {low} and {high}")
    return value


def _choice(query: Mapping[str, Sequence[str]], name: str, allowed: Sequence[str]) -> str | None:
    value = _one(query, name)
    if value is not None and value not in allowed:
        raise ApiError(400, f"query parameter {name!r}: {value[:40]!r} is not one of {', '.join(allowed)}")
    return value


def _cluster(source: DataSource) -> ClusterView:
    view = source.cluster()
    if view is None:
        raise ApiError(404, f"this dashboard shows a {source.kind} source, which has no cluster: start it on "
                            "manifests or a cluster for the fleet, queues and workloads")
    return view


def overview(source: DataSource, query: Mapping[str, Sequence[str]]) -> Doc:
    view = source.cluster()
    sim = source.simulation()
    doc: Doc = {"source": source.kind, "title": source.title, "version": source.version,
                "pages": [p for p, ok in (("fleet", view), ("queues", view), ("workloads", view), ("whatif", sim))
                          if ok is not None]}
    if view is not None:
        doc.update(generated=view.generated, notes=list(view.notes), counts={
            "nodes": len(view.nodes), "gpus": sum(len(n.gpus) for n in view.nodes), "pools": len(view.pools),
            "clusterQueues": len(view.cluster_queues), "workloads": len(view.workloads),
            "pending": sum(1 for w in view.workloads if w.status == "pending")})
    else:
        doc.update(generated=None, notes=[], counts=None)
    return doc


def _node_problem(node: NodeView, problem: str) -> bool:
    if problem == "unhealthy":
        return any(not g.healthy for g in node.gpus)
    if problem == "idle":
        return any(g.idle for g in node.gpus)
    return not node.ready or node.unschedulable


def fleet(source: DataSource, query: Mapping[str, Sequence[str]]) -> Doc:
    view = _cluster(source)
    model, pool, queue, name = _one(query, "model"), _one(query, "pool"), _one(query, "queue"), _one(query, "node")
    problem = _choice(query, "problem", NODE_PROBLEMS)
    offset = _int(query, "offset", 0, 0, 10**9)
    limit = _int(query, "limit", DEFAULT_NODE_LIMIT, 1, MAX_LIMIT)
    nodes = [n for n in view.nodes if (name is None or n.name == name)
             and (model is None or n.model == model) and (pool is None or n.pool == pool)
             and (queue is None or queue in n.queues()) and (problem is None or _node_problem(n, problem))]
    return {"version": source.version, "pools": [p.to_json() for p in view.pools],
            "models": sorted({n.model for n in view.nodes if n.model}),
            "queues": sorted({q.name for q in view.cluster_queues}),
            "total": len(nodes), "offset": offset, "limit": limit,
            "nodes": [n.to_json() for n in nodes[offset:offset + limit]]}


def node(source: DataSource, name: str) -> Doc:
    view = _cluster(source)
    for n in view.nodes:
        if n.name == name:
            return {"version": source.version, "node": n.to_json()}
    raise ApiError(404, f"no node {name!r}")


def queues(source: DataSource, query: Mapping[str, Sequence[str]]) -> Doc:
    view = _cluster(source)
    return {"version": source.version, "clusterQueues": [q.to_json() for q in view.cluster_queues],
            "cohorts": [c.to_json() for c in view.cohorts]}


def _matches(w: WorkloadView, text: str) -> bool:
    needle = text.lower()
    return any(needle in (field or "").lower() for field in (w.key, w.kind, w.local_queue, w.cluster_queue, w.reason))


def workloads(source: DataSource, query: Mapping[str, Sequence[str]]) -> Doc:
    view = _cluster(source)
    text, queue, namespace = _one(query, "q"), _one(query, "queue"), _one(query, "namespace")
    status = _choice(query, "status", WORKLOAD_STATUSES)
    offset = _int(query, "offset", 0, 0, 10**9)
    limit = _int(query, "limit", DEFAULT_WORKLOAD_LIMIT, 1, MAX_LIMIT)
    found = [w for w in view.workloads if (status is None or w.status == status)
             and (queue is None or queue in (w.cluster_queue, w.local_queue))
             and (namespace is None or w.namespace == namespace) and (text is None or _matches(w, text))]
    return {"version": source.version, "total": len(found), "offset": offset, "limit": limit,
            "workloads": [w.summary_json() for w in found[offset:offset + limit]]}


def workload(source: DataSource, namespace: str, name: str) -> Doc:
    view = _cluster(source)
    found = view.workload(f"{namespace}/{name}")
    if found is None:
        raise ApiError(404, f"no workload {namespace}/{name}")
    return {"version": source.version, "workload": found.to_json()}


def simulation(source: DataSource, query: Mapping[str, Sequence[str]]) -> Doc:
    sim = source.simulation()
    if sim is None:
        raise ApiError(404, f"this dashboard shows a {source.kind} source, which has no simulation result: start "
                            "it with --simulation RESULT.json (from gpufleet simulate --json RESULT.json)")
    pair = sim.pair()
    return {"version": source.version, "title": sim.title, "pair": list(pair) if pair else None,
            "runs": list(sim.runs), "kpiRows": [r._asdict() for r in KPI_ROWS],
            "advice": advice_answer(sim.advice) if sim.advice is not None else None,
            "calibration": calibration_answer(sim.calibration, sim.runs) if sim.calibration is not None else None}


Route = Callable[[DataSource, Mapping[str, Sequence[str]]], Doc]
ROUTES: dict[str, Route] = {"/api/overview": overview, "/api/fleet": fleet, "/api/queues": queues,
                            "/api/workloads": workloads, "/api/simulation": simulation}


def answer(source: DataSource, path: str, query: Mapping[str, Sequence[str]]) -> Answer:
    """The API's answer to a GET of ``path`` (already split from its query)."""
    try:
        route = ROUTES.get(path)
        if route is not None:
            return Answer(200, route(source, query))
        parts = [unquote(p) for p in path.split("/")]
        # /api/workloads/<namespace>/<name> and /api/nodes/<name>: names are percent-encoded by the pages.
        if len(parts) == 5 and parts[:3] == ["", "api", "workloads"] and parts[3] and parts[4]:
            return Answer(200, workload(source, parts[3], parts[4]))
        if len(parts) == 4 and parts[:3] == ["", "api", "nodes"] and parts[3]:
            return Answer(200, node(source, parts[3]))
        raise ApiError(404, f"no API path {path[:200]!r}; see /api/openapi.json")
    except ApiError as e:
        return Answer(e.status, {"message": e.message})
