"""The package's imports run one way: each subpackage imports only those below it (or
modules of its own package), and no modules import each other in a cycle. Read from the
source with `ast`, function-level imports included (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGE = REPO / "thetalker"
# Lowest first; a package may import from any package before it. client and server are
# one level (neither imports the other); backends is the servers under test, when present.
LAYERS = [
    {"util"},
    {"data"},
    {"api"},
    {"metrics"},
    {"backends"},
    {"client", "server"},
    {"lifecycle"},
    {"quality"},
    {"pipeline"},
    {"report"},
    {"cli"},
]
LEVEL = {name: k for k, layer in enumerate(LAYERS) for name in layer}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str) -> set[str]:
    """The thetalker modules `path` imports anywhere in it (`from a import b`: a.b when a.b
    is a module, else a)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package `level - 1` steps up
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return {m for m in found if m in MODULES and m != name}


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}
GRAPH = {name: imports_of(path, name) for name, path in MODULES.items()}


def subpackage(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else None  # None: thetalker/__init__ (the version)


def test_every_subpackage_has_a_layer():
    packages = {subpackage(m) for m in MODULES} - {None}
    dirs = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages - set(LEVEL) == set() and dirs - set(LEVEL) == set()


def test_imports_run_downward_or_sideways_within_a_package():
    upward = [
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if (a := subpackage(name)) and (b := subpackage(target)) and a != b
        if LEVEL[b] >= LEVEL[a]
    ]
    assert upward == []


def test_no_import_cycle():
    """Tarjan's strongly connected components over module imports: none larger than one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == []
