"""A module's underscore names are its own: no module of the package imports one from
another (`from thetalker.x import _y`) or reaches one through an imported name
(`x._y`); what modules share is public and listed in `__all__`, which every module has.
Read from the source with `ast`, as tests/unit/test_layering.py reads the imports."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGE = REPO / "thetalker"
SOURCES = sorted(PACKAGE.rglob("*.py"))


def private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def from_package(node: ast.ImportFrom) -> bool:
    return bool(node.level) or (node.module or "").startswith("thetalker")


def crossings(path: Path, root: Path = REPO) -> list[str]:
    """`file:line name` of each underscore name `path` takes from another thetalker module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    shown = path.relative_to(root)
    found: list[str] = []
    imported: set[str] = set()  # local names bound to thetalker modules or their names
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").startswith("thetalker")
        ):
            for alias in node.names:
                if private(alias.name):
                    found.append(f"{shown}:{node.lineno} imports {node.module}.{alias.name}")
                imported.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("thetalker"):
                    imported.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported:
                found.append(f"{shown}:{node.lineno} reaches {root.id}...{node.attr}")
    return found


def test_no_underscore_name_crosses_modules():
    assert [c for path in SOURCES for c in crossings(path)] == []


def test_every_module_lists_its_names():
    def has_all(path: Path) -> bool:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = [
            t
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        ]
        return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)

    assert [str(p.relative_to(REPO)) for p in SOURCES if not has_all(p)] == []


def test_the_check_sees_an_import_and_a_reach(tmp_path: Path):
    source = tmp_path / "thetalker" / "m.py"
    source.parent.mkdir()
    source.write_text(
        "from thetalker.client.receive import _x, fine\n"
        "import thetalker.client.sinks as sinks\n"
        "sinks._stop()\nfine._y\nlocal = object()\nlocal._z\n"
    )
    assert sorted(crossings(source, tmp_path)) == [
        "thetalker/m.py:1 imports thetalker.client.receive._x",
        "thetalker/m.py:3 reaches sinks..._stop",
        "thetalker/m.py:4 reaches fine..._y",
    ]
