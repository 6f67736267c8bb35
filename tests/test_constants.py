"""Shared names and units have one home, ``gpufleet.gpu.constants`` (issue 15, item 6): no other module of the
package defines them again (a module may re-export them under the same value by importing them)."""

from __future__ import annotations

import ast
from pathlib import Path

from gpufleet.gpu import constants

PACKAGE = Path(constants.__file__).resolve().parents[1]
SHARED_STRINGS = {constants.GPU, constants.SHARED_GPU, constants.FRACTION_RESOURCE}
SHARED_NUMBERS = {"MILLI": constants.MILLI, "DEFAULT_MAX_PODS": constants.DEFAULT_MAX_PODS}


def _assigned_constants(path: Path) -> list[tuple[str, object, int]]:
    """(name, value, line) of every name bound to a literal: module constants, class fields and their defaults."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Constant):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.extend((t.id, node.value.value, node.lineno) for t in targets if isinstance(t, ast.Name))
    return out


def test_no_module_defines_a_shared_resource_name_or_unit_again() -> None:
    again = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(constants.__file__).resolve():
            continue
        for name, value, line in _assigned_constants(path):
            if value in SHARED_STRINGS or (name in SHARED_NUMBERS and SHARED_NUMBERS[name] == value):
                again.append(f"{path.relative_to(PACKAGE)}:{line}: {name} = {value!r}")
    assert not again, "import these from gpufleet.gpu.constants instead:\n" + "\n".join(again)

