"""The house's import rules (../shared/DESIGN.md, docs/architecture.md): which package may import which, and no
circle between modules. Read from the source with ``ast``, imports inside functions and ``TYPE_CHECKING`` blocks
aside (they run late or never, so they make no load-order circle; a function-local import still counts for the
package rules)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = SRC / "gpufleet"

# Each package (or top-level module) and what of ours it may import. Arrows point inward: the core never
# imports a driver; the Kubernetes plumbing (k8s) reads no scheduling; the simulator and the live driver never
# import each other. policy reads scheduling's placement filters for its "fits nowhere" rules (one fit check).
NEUTRAL = {"__version__", "scheduler_metrics"}
ALLOWED: dict[str, set[str]] = {
    "gpu": set(),
    "api": {"gpu"},
    "cluster": {"api", "gpu"},
    "scheduling": {"cluster", "api", "gpu"},
    "scheduler_metrics": set(),
    "__version__": set(),
    "sim": {"scheduling", "cluster", "api", "gpu", *NEUTRAL},
    "k8s": {"cluster", "api", "gpu", "__version__"},
    "policy": {"scheduling", "cluster", "api", "gpu"},
    "admission": {"k8s", "policy", "cluster", "api", "gpu", "__version__"},
    "live": {"admission", "k8s", "scheduling", "cluster", "api", "gpu", *NEUTRAL},
    "node": {"k8s", "cluster", "api", "gpu", "__version__"},
    "advise": {"sim", "scheduling", "cluster", "api", "gpu", *NEUTRAL},
    "web": {"advise", "live", "sim", "admission", "k8s", "node", "policy", "scheduling", "cluster", "api", "gpu",
            *NEUTRAL},
}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, *, top_level_only: bool) -> Iterator[tuple[str, int]]:
    """Our modules (or packages) ``name`` imports, with the line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gpufleet"):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if base.startswith("gpufleet"):
                for alias in node.names:
                    yield f"{base}.{alias.name}", node.lineno


def _owner(module: str) -> str:
    """The package (or top-level module) under gpufleet that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_every_package_imports_only_what_the_house_allows() -> None:
    modules = _modules()
    broken: list[str] = []
    for name, path in sorted(modules.items()):
        owner = _owner(name)
        if owner in ("cli", ""):  # the CLI may import everything; gpufleet/__init__.py imports nothing of ours
            continue
        assert owner in ALLOWED, f"{owner}: a new package; give it its row in ALLOWED (and docs/architecture.md)"
        for target, line in _imports(name, path, top_level_only=False):
            other = _owner(target)
            if other and other != owner and other not in ALLOWED[owner]:
                broken.append(f"{path.relative_to(SRC.parent)}:{line}: {owner} imports {target}")
    assert not broken, "imports against the house's rules:\n" + "\n".join(broken)


def test_no_circle_between_modules_at_load_time() -> None:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _ in _imports(name, path, top_level_only=True):
            # "from pkg import mod" names a module; "from mod import name" names something in mod
            graph[name].add(target if target in modules else target.rsplit(".", 1)[0])
        graph[name] &= modules.keys()
        graph[name].discard(name)
    circles = _strongly_connected(graph)
    assert not circles, "modules that import each other at load time:\n" + "\n".join(
        " <-> ".join(sorted(c)) for c in circles)


def _strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's components of more than one module, iteratively (the graph is a few hundred modules deep)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


@pytest.mark.parametrize("edges, circles", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"a"}}, [{"a", "b"}]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}}, [{"a", "b", "c"}]),
])
def test_the_circle_finder_finds_circles(edges: dict[str, set[str]], circles: list[set[str]]) -> None:
    assert _strongly_connected(edges) == circles
