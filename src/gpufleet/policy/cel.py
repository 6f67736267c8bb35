"""The CEL form of the rules that need nothing but the object, for ValidatingAdmissionPolicies (:mod:`.vap`).

Each snippet here is the twin of a helper of :mod:`.containers`; a rule's :class:`CelRule` says, for one pod
template ``t`` (a map with ``metadata`` and ``spec``: a template, or the Pod itself), when the template is fine.
The policy checks it for every template of the object (``variables.templates``, written from the same paths
:mod:`.templates` follows).

Kubernetes CEL only: ``has``, macros on lists and maps, ``startsWith``/``endsWith``/``matches`` and the
Kubernetes ``quantity`` library (1.29+; the API server serialises every quantity as a string, ``string()``
keeps an unquoted YAML number readable too)."""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.api.gpushare import FRACTION_KEYS, HAMI_RESOURCES, MEMORY_KEYS
from gpufleet.api.objects import VISIBLE_DEVICES_FIELD_PATH as FIELD_PATH
from gpufleet.policy.containers import (
    GPU_PREFIX,
    GPUFLEET_FRACTION_ANNOTATIONS,
    KAI_FRACTION_CONTAINER_ANNOTATION,
)


@dataclass(frozen=True, slots=True)
class CelRule:
    """``ok``: CEL that is true when template ``t`` passes the rule (when ``whole_object``: when ``object``, with
    its templates in ``variables.templates``, passes it); ``message``: a plain sentence (the policy prefixes the
    rule and names the object); ``kinds``: only these (group, kind), None for every workload kind."""

    ok: str
    message: str
    kinds: frozenset[tuple[str, str]] | None = None
    whole_object: bool = False

    def covers(self, group: str, kind: str) -> bool:
        return self.kinds is None or (group, kind) in self.kinds


def kind_test(group: str, kind: str) -> str:
    """CEL: ``object`` is of this kind (any version of the group)."""
    version = "object.apiVersion == 'v1'" if not group else f"object.apiVersion.startsWith('{group}/')"
    return f"{version} && object.kind == '{kind}'"


def _list(field: str) -> str:
    return f"(has(t.spec.{field}) ? t.spec.{field} : [])"


CONTAINERS = _list("containers")
ALL_CONTAINERS = f"({_list('containers')} + {_list('initContainers')})"


def _names(section: str) -> str:
    """Keys of the container's requests or limits (an empty list when absent)."""
    return f"(has(c.resources) && has(c.resources.{section}) ? c.resources.{section} : {{}})"


GPU_CONTAINER = (f"({_names('requests')}.exists(k, k.startsWith('{GPU_PREFIX}')) || "
                 f"{_names('limits')}.exists(k, k.startsWith('{GPU_PREFIX}')))")


def _annotated(keys: tuple[str, ...]) -> str:
    """CEL: the template carries one of these annotations."""
    return ("(has(t.metadata) && has(t.metadata.annotations) && ["
            + ", ".join(f"'{a}'" for a in keys) + "].exists(a, a in t.metadata.annotations))")


_HAMI = "[" + ", ".join(f"'{r}'" for r in HAMI_RESOURCES) + "]"
# A container asking a GPU device: an nvidia.com/ resource other than HAMi's share (gpushare.is_fractional).
_DEVICE_CONTAINER = (f"({_names('requests')}.exists(k, k.startsWith('{GPU_PREFIX}') && !(k in {_HAMI})) || "
                     f"{_names('limits')}.exists(k, k.startsWith('{GPU_PREFIX}') && !(k in {_HAMI})))")
# gpushare.is_fractional: a share annotation, or a memory annotation on a pod asking no GPU device.
FRACTIONAL = (f"({_annotated(FRACTION_KEYS)} || ({_annotated(MEMORY_KEYS)} && "
              f"!{ALL_CONTAINERS}.exists(c, {_DEVICE_CONTAINER})))")
GPU_POD = f"({FRACTIONAL} || {ALL_CONTAINERS}.exists(c, {GPU_CONTAINER}))"
# KAI's fraction goes to the container gpu-fraction-container-name names, else to the first one.
_KAI_NAMED = f"t.metadata.annotations['{KAI_FRACTION_CONTAINER_ANNOTATION}']"
_KAI_CHOSEN = (f"({_annotated((KAI_FRACTION_CONTAINER_ANNOTATION,))} ? (has(c.name) && c.name == {_KAI_NAMED}) : "
               f"(size({CONTAINERS}) > 0 && c == {CONTAINERS}[0]))")
KAI_CONTAINERS = (f"({_annotated((KAI_FRACTION_CONTAINER_ANNOTATION,))} ? "
                  f"{ALL_CONTAINERS}.filter(c, has(c.name) && c.name == {_KAI_NAMED}) : "
                  f"(size({CONTAINERS}) > 0 ? [{CONTAINERS}[0]] : []))")
# containers.gpu_containers: the chosen container first, then the others asking a GPU, each once.
GPU_CONTAINERS = (f"({FRACTIONAL} ? ({_annotated(GPUFLEET_FRACTION_ANNOTATIONS)} ? {CONTAINERS} : "
                  f"{KAI_CONTAINERS} + {ALL_CONTAINERS}.filter(c, {GPU_CONTAINER} && !{_KAI_CHOSEN})) : "
                  f"{ALL_CONTAINERS}.filter(c, {GPU_CONTAINER}))")


def declares(resource: str) -> str:
    return f"('{resource}' in {_names('requests')} || '{resource}' in {_names('limits')})"


OURS = FIELD_PATH.replace("'", "\\'")
