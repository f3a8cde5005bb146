"""A module's underscore names are its own: no module of the package imports one from
another (`from thetalker.x import _y`) or reaches one through an imported name
(`x._y`, `setattr(x, "_y", ...)`); what modules share is public and listed in `__all__`,
which every module has. The tests keep to the same public names, but for the few in
TESTS_MAY_REACH, each with why a test must reach it. Read from the source with `ast`, as
tests/unit/test_layering.py reads the imports."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import REPO

PACKAGE = REPO / "thetalker"
SOURCES = sorted(PACKAGE.rglob("*.py"))
TESTS = sorted((REPO / "tests").rglob("*.py"))

# (test file, module.name): what a test reaches on purpose, and why. Keep it short: a name
# a test needs is usually an API to make public, or a test to write through a public one.
TESTS_MAY_REACH = {
    ("tests/unit/test_dnsmos.py", "dnsmos._scorer"): "swaps the cached ONNX model for a "
    "stand-in scorer (a score below the floor, how much audio it is given) and clears the cache",
    ("tests/reliability/test_reliability_data.py", "wavio._write_file"): "the one write a "
    "full disk fails: the test makes it fail, as no test can fill a real disk",
    ("tests/unit/test_analysis_arrays.py", "resampling._BLOCK_VALUES"): "a small "
    "resampling block, so a few rows cross block boundaries against scipy's bootstrap",
}


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
            (node.level and shown.parts[0] == "thetalker")
            or (node.module or "").startswith("thetalker")
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
        reached = _reached(node)
        if reached is None:
            continue
        base, attr = reached
        root = base
        while isinstance(root, ast.Attribute):
            root = root.value
        if isinstance(root, ast.Name) and root.id in imported:
            found.append(f"{shown}:{node.lineno} reaches {root.id}...{attr}")
    return found


def _reached(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(object, underscore name) of `x._y`, or of `setattr(x, "_y", v)`, `getattr(x, "_y")`,
    `mock.patch.object(x, "_y", ...)` and the like: a name reached by its string."""
    if isinstance(node, ast.Attribute) and private(node.attr):
        return node.value, node.attr
    if isinstance(node, ast.Call) and len(node.args) >= 2:
        name = node.args[1]
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if (
            called in ("setattr", "getattr", "delattr", "object")
            and isinstance(name, ast.Constant)
            and isinstance(name.value, str)
            and private(name.value)
        ):
            return node.args[0], name.value
    return None


def _allowed(crossing: str) -> tuple[str, str] | None:
    """The TESTS_MAY_REACH key a test's crossing matches, if any."""
    where, _, what = crossing.partition(" ")
    path = where.rsplit(":", 1)[0]
    verb, _, target = what.partition(" ")
    name = target.replace("...", ".") if verb == "reaches" else ".".join(target.split(".")[-2:])
    key = (path, name)
    return key if key in TESTS_MAY_REACH else None


def test_no_underscore_name_crosses_modules():
    assert [c for path in SOURCES for c in crossings(path)] == []


def test_tests_keep_to_public_names_but_the_few_allowed():
    found = [c for path in TESTS for c in crossings(path)]
    assert [c for c in found if _allowed(c) is None] == []
    # An entry no test needs any more goes: the list stays the few that must reach.
    used = {_allowed(c) for c in found}
    assert [key for key in TESTS_MAY_REACH if key not in used] == []


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
        "setattr(sinks, '_w', 1)\nmock.patch.object(fine, '_v', 2)\nsetattr(local, '_u', 3)\n"
    )
    assert sorted(crossings(source, tmp_path)) == [
        "thetalker/m.py:1 imports thetalker.client.receive._x",
        "thetalker/m.py:3 reaches sinks..._stop",
        "thetalker/m.py:4 reaches fine..._y",
        "thetalker/m.py:7 reaches sinks..._w",
        "thetalker/m.py:8 reaches fine..._v",
    ]


def test_a_test_may_reach_only_what_the_list_names(tmp_path: Path):
    test = tmp_path / "tests" / "unit" / "test_dnsmos.py"
    test.parent.mkdir(parents=True)
    test.write_text(
        "from thetalker.quality import dnsmos\nfrom .helpers import _local\n"
        "dnsmos._scorer.cache_clear()\nsetattr(dnsmos, '_other', 1)\n"
    )
    found = sorted(crossings(test, tmp_path))  # a test's relative import is a test module's
    assert found == [
        "tests/unit/test_dnsmos.py:3 reaches dnsmos..._scorer",
        "tests/unit/test_dnsmos.py:4 reaches dnsmos..._other",
    ]
    assert [_allowed(c) for c in found] == [("tests/unit/test_dnsmos.py", "dnsmos._scorer"), None]
