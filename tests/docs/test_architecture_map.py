"""docs/architecture.md's module map is the tree: every module under thetalker/ has its line,
and every module the map names exists."""

from __future__ import annotations

import re

from tests.support.paths import REPO


def test_every_module_is_in_the_map_and_the_map_names_only_modules():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    mapped = set(re.findall(r"^\| `(thetalker/[\w/]+\.py)` \|", text, flags=re.M))
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "thetalker").rglob("*.py")}
    assert sorted(modules - mapped) == [], "modules missing from docs/architecture.md's map"
    assert sorted(mapped - modules) == [], "the map names modules that do not exist"
