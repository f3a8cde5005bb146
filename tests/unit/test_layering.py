"""The package's imports run one way: each subpackage imports only those below it (or
modules of its own package), and no modules import each other in a cycle. Read from the
source with `ast`, function-level imports included (a lazy import is still a dependency);
imports under `if TYPE_CHECKING:` are left out: they are read by the type checker only, so
they make no run-time edge (thetalker.backends types its callables so)."""

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
    for node in run_time_nodes(ast.parse(path.read_text(encoding="utf-8"))):
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


def is_type_checking(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:`."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def run_time_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node of `tree` but the bodies of `if TYPE_CHECKING:` blocks (their `else` kept)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        out.append(node)
        if is_type_checking(node):
            assert isinstance(node, ast.If)
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return out


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


def test_type_checking_imports_are_left_out_and_others_kept():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import thetalker.client.options\n"
        "else:\n    import thetalker.util.text\n"
        "def f():\n    import thetalker.data.records\n"
    )
    names = {a.name for n in run_time_nodes(tree) if isinstance(n, ast.Import) for a in n.names}
    assert names == {"thetalker.util.text", "thetalker.data.records"}
