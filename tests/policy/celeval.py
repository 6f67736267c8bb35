"""The exported ValidatingAdmissionPolicies evaluated as the API server evaluates them, with cel-python: match
constraints (group, version, resource of the request), matchConditions, variables in order, then every validation;
a validation that is false gives its messageExpression.

Kubernetes' CEL ``quantity`` library is not part of cel-python: :func:`quantity` and :func:`compare_to` stand in for
it here, with gpufleet's own quantity parser (the one lint uses), so the tests check the policies' logic, not that
library."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes

from gpufleet.api.quantity import QuantityError, parse_quantity

Doc = dict[str, Any]


class Quantity(celtypes.StringType):
    """A parsed quantity: compares by value."""

    def value(self) -> Any:
        return parse_quantity(str(self))


def quantity(text: Any) -> Quantity:
    try:
        parse_quantity(str(text))
    except QuantityError as e:
        raise celpy.CELEvalError(f"quantity: {e}") from e
    return Quantity(str(text))


def compare_to(a: Quantity, b: Quantity) -> celtypes.IntType:
    x, y = a.value(), b.value()
    return celtypes.IntType((x > y) - (x < y))


FUNCTIONS = {"quantity": quantity, "compareTo": compare_to}


@dataclass(frozen=True)
class Denial:
    policy: str
    message: str

    @property
    def rule(self) -> str:
        return self.message.split("]", 1)[0].lstrip("[")


class CompiledPolicy:
    def __init__(self, doc: Doc) -> None:
        env = celpy.Environment()
        spec = doc["spec"]
        self.name = doc["metadata"]["name"]

        def prog(expression: str) -> Any:
            return env.program(env.compile(expression), functions=FUNCTIONS)

        self.rules = spec["matchConstraints"]["resourceRules"]
        self.conditions = [prog(c["expression"]) for c in spec.get("matchConditions", [])]
        self.variables = [(v["name"], prog(v["expression"])) for v in spec.get("variables", [])]
        self.validations = [(prog(v["expression"]), prog(v["messageExpression"])) for v in spec["validations"]]

    def matches(self, group: str, version: str, resource: str, operation: str) -> bool:
        return any(group in r["apiGroups"] and version in r["apiVersions"] and resource in r["resources"]
                   and operation in r["operations"] for r in self.rules)

    def evaluate(self, obj: Doc) -> list[Denial]:
        activation: dict[str, Any] = {"object": celpy.json_to_cel(obj)}
        if not all(bool(c.evaluate(activation)) for c in self.conditions):
            return []
        variables: dict[Any, Any] = {}
        for name, program in self.variables:
            activation["variables"] = celtypes.MapType(variables)
            variables[celtypes.StringType(name)] = program.evaluate(activation)
        activation["variables"] = celtypes.MapType(variables)
        out = []
        for check, message in self.validations:
            result = check.evaluate(activation)
            if isinstance(result, celpy.CELEvalError):
                raise result
            if not bool(result):
                out.append(Denial(self.name, str(message.evaluate(activation))))
        return out
