"""The ``lint`` section of the scheduler's configuration file: what the validating webhook does with each rule.

::

    lint:
      rules:                              # per rule: deny | warn | off
        gpu-model-unconstrained: deny
        cohort-borrowing-without-lending-limit: off

A rule not named keeps its default: ``deny`` for the error rules, ``warn`` (an AdmissionReview warning, which
kubectl prints) for the warnings and infos. docs/lint.md lists the rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, cast

from gpufleet.api.reader import FieldReader
from gpufleet.policy.rules import BY_ID, RULE_IDS

Action = Literal["deny", "warn", "off"]
ACTIONS: tuple[str, ...] = ("deny", "warn", "off")
_LINT = ("rules",)


def default_action(rule_id: str) -> Action:
    return "deny" if BY_ID[rule_id].severity == "error" else "warn"


@dataclass(frozen=True, slots=True)
class LintSettings:
    rules: Mapping[str, Action] = field(default_factory=dict)  # only the rules the file names

    def action(self, rule_id: str) -> Action:
        return self.rules.get(rule_id) or default_action(rule_id)


def parse_lint_settings(r: FieldReader | None) -> LintSettings:
    if r is None:
        return LintSettings()
    if isinstance(r.value, Mapping):
        for key in r.value:
            if key not in _LINT:
                r.error(f"unknown field {key}", str(key), fix="the lint section has one field: rules")
    rules = r.obj("rules")
    if rules is None or not isinstance(rules.value, Mapping):
        return LintSettings()
    out: dict[str, Action] = {}
    for key, value in rules.value.items():
        rule = str(key)
        if rule not in BY_ID:
            rules.error(f"unknown lint rule {rule}", rule, fix=f"use one of {', '.join(RULE_IDS)}")
            continue
        if value is False:  # YAML 1.1 reads an unquoted off as false
            value = "off"
        if not isinstance(value, str) or value not in ACTIONS:
            rules.error(f"{rule}: {value!r} is not an action", rule, fix="write deny, warn or off")
            continue
        out[rule] = cast(Action, value)
    return LintSettings(out)
