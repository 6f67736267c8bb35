"""docs/lint.md lists every rule, with its severity, its rationale and its fix, and nothing that is not a rule."""

from __future__ import annotations

import re
from pathlib import Path

from gpufleet.policy.rules import RULES
from gpufleet.policy.vap import exportable

DOC = (Path(__file__).resolve().parents[2] / "docs" / "lint.md").read_text()


def section(rule_id: str) -> str:
    start = DOC.index(f"### `{rule_id}`")
    end = DOC.find("\n### ", start + 1)
    return DOC[start:end]


def test_every_rule_has_a_section_with_its_severity_rationale_and_fix() -> None:
    assert re.findall(r"^### `([a-z0-9-]+)`$", DOC, re.M) == [r.id for r in RULES]
    for rule in RULES:
        text = " ".join(section(rule.id).split())
        assert f"Severity: **{rule.severity}**" in text, rule.id
        assert " ".join(rule.rationale.split()) in text, rule.id
        assert f"*Fix:* {rule.fix}." in text, rule.id


def test_the_table_says_which_rules_are_exported() -> None:
    cel = {r.id for r in exportable()}
    for rule in RULES:
        [row] = [line for line in DOC.splitlines() if line.startswith(f"| [`{rule.id}`]")]
        assert row.rstrip(" |").endswith("yes" if rule.id in cel else "no"), row
