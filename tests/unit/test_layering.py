"""The package's imports run one way: each subpackage imports only those below it (or
modules of its own package), and no modules import each other in a cycle. Read from the
source with `ast`, function-level imports included (a lazy import is still a dependency).
Imports under `if TYPE_CHECKING:` make no run-time edge, so the layers are read without
them; but a reader following imports sees them, so the cycle check reads them too: no
circle, not even one the type checker alone walks."""

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


def imports_of(path: Path, name: str, type_only: bool = False) -> set[str]:
    """The thetalker modules `path` imports anywhere in it (`from a import b`: a.b when a.b
    is a module, else a); `type_only`: those under `if TYPE_CHECKING:` too."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree) if type_only else run_time_nodes(tree):
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
# Every import a reader follows: the run-time ones and those for the type checker only.
FULL_GRAPH = {name: imports_of(path, name, type_only=True) for name, path in MODULES.items()}


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


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of `graph` larger than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    assert cycles(GRAPH) == []


def test_no_import_cycle_counting_type_only_imports():
    """No circle a reader following the imports would walk, `if TYPE_CHECKING:` ones
    included (the types both sides need live below both)."""
    assert cycles(FULL_GRAPH) == []


def test_the_cycle_check_sees_a_circle_through_a_type_only_import(tmp_path: Path):
    source = tmp_path / "b.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import thetalker.util.text\n"
    )
    assert imports_of(source, "thetalker.util.b") == set()
    assert imports_of(source, "thetalker.util.b", type_only=True) == {"thetalker.util.text"}
    graph = {"thetalker.util.text": {"thetalker.util.b"}, "thetalker.util.b": set()}
    assert cycles(graph) == []
    graph["thetalker.util.b"] = imports_of(source, "thetalker.util.b", type_only=True)
    assert cycles(graph) == [["thetalker.util.b", "thetalker.util.text"]]


def test_type_checking_imports_are_left_out_and_others_kept():
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import thetalker.client.options\n"
        "else:\n    import thetalker.util.text\n"
        "def f():\n    import thetalker.data.records\n"
    )
    names = {a.name for n in run_time_nodes(tree) if isinstance(n, ast.Import) for a in n.names}
    assert names == {"thetalker.util.text", "thetalker.data.records"}
