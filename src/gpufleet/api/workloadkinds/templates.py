"""Where each kind gpufleet reads keeps its pod templates, derived from the workload kinds' field schemas
(:data:`gpufleet.api.workloadkinds.fields.SCHEMAS`), so a kind added there is judged here with no second list.

A path is a tuple of steps: a field name, :data:`EACH_ITEM` (every item of a list) or :data:`EACH_VALUE` (every
value of a map). The path
of a Pod is ``()``: the object is its own template. :func:`raw_templates` follows the paths through an object as
written; :mod:`gpufleet.policy.cel` writes the same paths as CEL. Here, in the input language, because the lint
rules, the webhooks and the API plumbing (which pods a kind's object gives) all read them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpufleet.api.workloadkinds.fields import POD_SPEC, POD_TEMPLATE, SCHEMAS, ListOf, MapOf, Schema
from gpufleet.api.workloadkinds.table import RULES


@dataclass(frozen=True, slots=True)
class RawTemplate:
    """A pod template as written in the object: ``path`` to it, its ``metadata`` and ``spec`` (mappings, possibly
    empty when the input is malformed: rules read them defensively)."""

    path: str  # "" for a Pod itself, else e.g. "spec.template", "spec.replicatedJobs[0].template.spec.template"
    metadata: Mapping[str, Any]
    spec: Mapping[str, Any]

    @property
    def spec_path(self) -> str:
        return f"{self.path}.spec" if self.path else "spec"


EACH_ITEM = "[]"  # every item of a list
EACH_VALUE = "{}"  # every value of a map
EACH = (EACH_ITEM, EACH_VALUE)
Step = str
Path = tuple[Step, ...]

# The kinds judged as workloads: Pods and every workload kind of the table. Not Kueue's Workload objects (Kueue
# makes them from the jobs judged here) nor Kubeflow's training runtimes (templates TrainJobs are made from).
WORKLOAD_KINDS: frozenset[tuple[str, str]] = frozenset({("", "Pod"), *RULES})


def _walk(schema: Schema, path: Path, out: list[Path]) -> None:
    if schema is POD_TEMPLATE:
        out.append(path)
        return
    if isinstance(schema, ListOf):
        _walk(schema.item, (*path, EACH_ITEM), out)
    elif isinstance(schema, MapOf):
        _walk(schema.value, (*path, EACH_VALUE), out)
    elif isinstance(schema, Mapping):
        for key, sub in schema.items():
            _walk(sub, (*path, key), out)


@cache
def template_paths(group: str, kind: str) -> tuple[Path, ...]:
    """The paths of the kind's pod templates; ``((),)`` for a Pod, ``()`` for a kind without templates."""
    schema = SCHEMAS.get((group, kind))
    if schema is None or (group, kind) not in WORKLOAD_KINDS:
        return ()
    if schema.get("spec") is POD_SPEC:
        return ((),)
    out: list[Path] = []
    _walk(schema, (), out)
    for path in out:
        assert sum(step in EACH for step in path) <= 1, f"{kind}: a template under two lists: {path}"
    return tuple(out)


def _follow(value: Any, path: Path, shown: str) -> Iterator[tuple[str, Any]]:
    if not path:
        yield shown, value
        return
    step, rest = path[0], path[1:]
    if step in EACH:
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _follow(item, rest, f"{shown}[{i}]")
        elif isinstance(value, Mapping):
            for key, item in value.items():
                yield from _follow(item, rest, f"{shown}.{key}")
        return
    if isinstance(value, Mapping) and step in value:
        yield from _follow(value[step], rest, f"{shown}.{step}" if shown else step)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def raw_templates(group: str, kind: str, obj: Mapping[str, Any]) -> list[RawTemplate]:
    """The pod templates of ``obj`` as written, each with the path kubectl would name it by."""
    out = []
    for path in template_paths(group, kind):
        for shown, template in _follow(obj, path, ""):
            t = _mapping(template)
            out.append(RawTemplate(shown, _mapping(t.get("metadata")), _mapping(t.get("spec"))))
    return out
