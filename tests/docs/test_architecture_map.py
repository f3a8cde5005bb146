"""Prose a test keeps true.

docs/architecture.md's module map is the tree: every module under thetalker/ has its line,
and every module the map names exists. And every piece of prose (each `*.md`, the workflow's
`*.smk` and Snakefile, the report's captions) names only things that exist: each path in
one of the repository's folders (`thetalker/`, `tests/`, `config/`, `scripts/`, `.ci/`, ...;
not `results/`, which a run writes), each page of docs/ and tutorials/, each
`thetalker.x.y` module (and the name it reaches in it, defined there), each test by its
name; and a docstring or comment in the code names only pages that exist.
docs/architecture.md names every rule of the workflow and every table it writes.
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

from tests.support.paths import REPO

# Folders that are not the project's prose: outputs, caches, environments.
_SKIP = {"results", "build", "dist", "node_modules", "__pycache__"}


def _prose_files() -> list[Path]:
    found = []
    for pattern in ("*.md", "*.smk", "*.rst", "Snakefile"):
        for path in REPO.rglob(pattern):
            parts = path.relative_to(REPO).parts
            if any(p.startswith(".") or p in _SKIP or p.endswith(".egg-info") for p in parts):
                continue
            found.append(path)
    return sorted(found)


PROSE = _prose_files()


def _ids() -> list[str]:
    return [p.relative_to(REPO).as_posix() for p in PROSE]


def test_every_module_is_in_the_map_and_the_map_names_only_modules():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    mapped = set(re.findall(r"^\| `(thetalker/[\w/]+\.py)` \|", text, flags=re.M))
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "thetalker").rglob("*.py")}
    assert sorted(modules - mapped) == [], "modules missing from docs/architecture.md's map"
    assert sorted(mapped - modules) == [], "the map names modules that do not exist"


def test_prose_is_found():
    names = set(_ids())
    assert {"README.md", "docs/architecture.md", "rules/common.smk", "Snakefile"} <= names
    assert {"benchmarks/README.md", "config/README.md", "tutorials/README.md"} <= names


# A path in one of the repository's own folders (thetalker/..., config/..., .ci/run; not
# results/, which a run writes), up to a character no path here holds. `{`, `*` and `<`
# make it a pattern (thetalker/deploy_configs/*.yaml), checked by what precedes them.
_FOLDERS = "|".join(
    re.escape(p.name)
    for p in sorted(REPO.iterdir())
    if p.is_dir()
    and p.name not in _SKIP
    and not p.name.endswith(".egg-info")
    and (not p.name.startswith(".") or p.name == ".ci")
)
_PATH = re.compile(rf"(?<![\w./-])((?:{_FOLDERS})/[\w./{{}}*<>-]*[\w/{{}}*>])")
# A dotted name under the package: thetalker.metrics, thetalker.client.run.run_benchmark.
_DOTTED = re.compile(r"(?<![\w./-])(thetalker(?:\.\w+)+)")
# A test's name as prose writes it: test_x (a function or a file's stem), or test_x_* (any
# test whose name starts so).
_TEST_NAME = re.compile(r"(?<![\w./-])(test_\w+\*?)")
# Dotted strings that are no module: the open-loop schedule's seed (thetalker/client/schedule.py).
_NOT_MODULES = {"thetalker.arrivals"}
# A page of the project's docs or tutorials: docs/capacity.md, tutorials/01-reproduce-a-table.md.
_DOC_PATH = re.compile(r"(?<![\w./-])((?:docs|tutorials)/[\w./-]*\.md)")
# Pages of another project, named where their server is described: Nari's own docs/websocket.md.
_OTHER_PROJECTS_DOCS = {"docs/websocket.md"}


def _exists(path: str) -> bool:
    """A path, or the folder its pattern part starts in (`thetalker/deploy_configs/*.yaml`)."""
    literal = re.split(r"[{*<]", path, maxsplit=1)[0]
    if literal != path:
        literal = literal.rsplit("/", 1)[0]
    return (REPO / literal.rstrip("/.")).exists()


def _module_file(name: str) -> Path | None:
    base = REPO / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _top_level_names(path: Path) -> frozenset[str]:
    """Names a module defines itself (def, class, assignment, import as a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return frozenset(names)


def _dotted_problem(name: str) -> str | None:
    """Why `name` names nothing: no such module, or no such name where it points."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        path = _module_file(module)
        if path is None:
            continue
        rest = parts[cut:]
        if not rest:
            return None
        if path.name == "__init__.py":
            # A package re-exports its modules' names (thetalker.metrics.summarize_point).
            target = importlib.import_module(module)
            for attr in rest:
                if not hasattr(target, attr):
                    return f"{module} has no {'.'.join(rest)}"
                target = getattr(target, attr)
            return None
        if rest[0] not in _top_level_names(path):
            return f"{module} does not define {rest[0]} (name the module that does)"
        return None
    return "no such module"


@cache
def _test_names() -> frozenset[str]:
    names = set()
    for path in (REPO / "tests").rglob("*.py"):
        if path.name.startswith("test_"):
            names.add(path.stem)
        text = path.read_text(encoding="utf-8")
        names |= set(re.findall(r"^\s*(?:async )?def (test_\w+)", text, flags=re.M))
    return frozenset(names)


def _mentions(pattern: re.Pattern[str], text: str) -> set[str]:
    # Inline code and plain prose alike; a trailing `.` or `,` ends a sentence, not a name.
    return {m.rstrip(".,") for m in pattern.findall(text)}


@pytest.mark.parametrize("doc", PROSE, ids=_ids())
def test_prose_names_only_paths_modules_and_tests_that_exist(doc: Path):
    text = doc.read_text(encoding="utf-8")
    paths = (_mentions(_PATH, text) | _mentions(_DOC_PATH, text)) - _OTHER_PROJECTS_DOCS
    stale = [f"{p}: no such path" for p in sorted(paths) if not _exists(p)]
    for name in sorted(_mentions(_DOTTED, text) - _NOT_MODULES):
        problem = _dotted_problem(name)
        if problem:
            stale.append(f"{name}: {problem}")
    known = _test_names()
    for name in sorted(_mentions(_TEST_NAME, text)):
        if name.endswith("*"):
            if not any(k.startswith(name[:-1]) for k in known):
                stale.append(f"{name}: no test of a name that starts so")
        elif name not in known:
            stale.append(f"{name}: no test of that name")
    assert stale == [], f"{doc.relative_to(REPO)} names what does not exist"


def _code_files() -> list[Path]:
    folders = ("thetalker", "tests", "scripts", "benchmarks", "examples")
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py"))


def test_code_points_only_to_pages_that_exist():
    # A docstring's "see docs/<page>.md" is prose too; a page outside the repository (the
    # background notes a module was written from) is no page a reader can open.
    stale = [
        f"{path.relative_to(REPO)}: {page}"
        for path in _code_files()
        for page in sorted(
            _mentions(_DOC_PATH, path.read_text(encoding="utf-8")) - _OTHER_PROJECTS_DOCS
        )
        if not (REPO / page).is_file()
    ]
    assert stale == [], "code names pages that do not exist"


def _rules() -> set[str]:
    """Every rule of the workflow: `rule X:` and `use rule Y as X`."""
    files = [p for p in PROSE if p.suffix == ".smk" or p.name == "Snakefile"]
    text = "".join(p.read_text(encoding="utf-8") for p in files)
    found = re.findall(r"^(?:rule (\w+):|use rule \w+ as (\w+))", text, flags=re.M)
    return {a or b for a, b in found}


def test_the_architecture_names_every_rule_and_every_table():
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    workflow = text[text.index("## The workflow") :]
    rules = _rules() - {"all"}  # rule all is the Snakefile's target list, said above it
    assert len(rules) >= 17
    missing = sorted(r for r in rules if not re.search(rf"(?<![\w-]){r}(?![\w-])", workflow))
    assert missing == [], "rules missing from docs/architecture.md's workflow table"
    smk = "".join(p.read_text(encoding="utf-8") for p in PROSE if p.suffix == ".smk")
    tables = set(re.findall(r"results/tables/(\w+)\.md", smk))
    assert {"throughput", "server", "wer"} <= tables
    layout = text[text.index("## Results layout") : text.index("## The workflow")]
    missing = sorted(t for t in tables if not re.search(rf"\b{t}\b", layout))
    assert missing == [], "tables missing from docs/architecture.md's results layout"
