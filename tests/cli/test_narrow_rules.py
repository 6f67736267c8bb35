"""``COLUMNS=50`` on a wider terminal: every line of ``plan -o wide``, the tables' horizontal rules included, fits in
50 columns (counted in characters: a rule's ``─`` is 3 bytes of UTF-8, so a 45-column rule is 135 bytes)."""

from __future__ import annotations

from tests.cli.terminal import clean_env, in_terminal, visible
from tests.conftest import REPO

CASESTUDY = str(REPO / "examples" / "casestudy")
SNAPSHOT = str(REPO / "examples" / "plan" / "snapshot.yaml")


def test_columns_50_on_a_wide_terminal_keeps_every_line_and_rule_within_50() -> None:
    ran = in_terminal("plan", CASESTUDY, SNAPSHOT, "-o", "wide", columns=200,
                      env=clean_env(TERM="xterm-256color", COLUMNS="50"))
    assert ran.code == 0, ran.stdout
    lines = visible(ran.stdout).splitlines()
    rules = [line for line in lines if line.strip() and set(line.strip()) <= set("─━- ")]
    assert rules, lines
    assert max(len(line) for line in lines) <= 50, [line for line in lines if len(line) > 50]
