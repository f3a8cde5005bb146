"""Every figure of every analysis table, to the last digit written, as the reference code
built it (tests/support/analysis_golden.py: the records and the expected tables are stored
in tests/data/analysis_golden/, made with main's code before issue 40's rework)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.analysis_golden import GOLDEN, build_tables, normalise

EXPECTED = sorted((GOLDEN / "expected").iterdir())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("golden")
    shutil.copytree(GOLDEN / "records" / "a", root / "a")
    out = root / "out"
    build_tables(root, out)
    return root, out


@pytest.mark.parametrize("expected", EXPECTED, ids=[p.name for p in EXPECTED])
def test_table_is_as_the_reference_code_built_it(built: tuple[Path, Path], expected: Path):
    root, out = built
    assert normalise(out / expected.name, root) == expected.read_text()


def test_every_table_is_checked(built: tuple[Path, Path]):
    assert sorted(p.name for p in built[1].iterdir()) == [p.name for p in EXPECTED]


def test_points_over_two_processes_are_the_same_rows(built: tuple[Path, Path]):
    from tests.support.analysis_golden import _quiet
    from thetalker.report import points

    root, out = built
    files = sorted(str(p) for p in (root / "a" / "runs").rglob("records.jsonl"))
    again = out.parent / "points_jobs2.csv"
    assert _quiet(points.main, ["--jobs", "2", "--out", str(again), "--", *files]) == 0
    assert normalise(again, root) == (GOLDEN / "expected" / "points.csv").read_text()


def test_the_agent_table_over_two_processes_is_the_same(built: tuple[Path, Path]):
    from tests.support.analysis_golden import _quiet
    from thetalker.report import agent

    root, out = built
    files = sorted(str(p) for p in (root / "a" / "runs" / "agent").rglob("records.jsonl"))
    again = out.parent / "agent_jobs2.md"
    assert _quiet(agent.main, ["--jobs", "2", "--records", *files, "--table", str(again)]) == 0
    assert normalise(again, root) == (GOLDEN / "expected" / "agent.md").read_text()
    assert (
        normalise(again.with_suffix(".csv"), root)
        == (GOLDEN / "expected" / "agent.csv").read_text()
    )
